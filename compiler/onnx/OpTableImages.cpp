//===- OpTableImages.cpp - ONNX image operators as graph-dialect ops ------===//
//
// The op table's converters of convolutional networks' operators: Conv onto graph.conv2d (a bias
// as an add), MaxPool and AveragePool onto the pooling ops with auto_pad resolved,
// GlobalAveragePool onto graph.mean, Clip onto graph.clip, Pad onto graph.pad, and a
// training-mode BatchNormalization onto graph.batch_norm with graph.update_running_stats.
//
//===----------------------------------------------------------------------===//

#include "compiler/onnx/OpTableSupport.h"
#include "compiler/onnx/ShapeFolding.h"

#include "mlir/IR/SymbolTable.h"

#include <algorithm>
#include <limits>
#include <numeric>

using namespace mlir;

namespace ampc::onnximport {

namespace {

//===----------------------------------------------------------------------===//
// Convolution, pooling and clipping
//===----------------------------------------------------------------------===//

/// The window attributes of a Conv or pooling node over an NCHW input: strides, pads (top,
/// left, bottom, right) and dilations, with auto_pad resolved against the input's extents.
struct NodeWindow {
  std::vector<int64_t> strides{1, 1}, pads{0, 0, 0, 0}, dilations{1, 1};
};

NodeWindow nodeWindow(const NodeContext &c, const std::vector<int64_t> &input,
                      const std::vector<int64_t> &kernel) {
  if (input.size() != 4)
    throw ImportError("only 2-D " + c.node.op_type() + " over [N, C, H, W] inputs is supported; "
                      "the input is rank " + std::to_string(input.size()));
  auto pairOf = [&](const char *name, std::vector<int64_t> &out) {
    std::vector<int64_t> values = intsAttribute(c.node, name);
    if (values.empty())
      return;
    if (values.size() != 2)
      throw ImportError(std::string("its ") + name + " must have 2 entries for a 2-D window");
    out = values;
  };
  NodeWindow window;
  pairOf("strides", window.strides);
  pairOf("dilations", window.dilations);
  std::vector<int64_t> pads = intsAttribute(c.node, "pads");
  if (!pads.empty()) {
    if (pads.size() != 4)
      throw ImportError("its pads must have 4 entries for a 2-D window");
    window.pads = pads;
  }
  const std::string autoPad = stringAttribute(c.node, "auto_pad", "NOTSET");
  if (autoPad == "SAME_UPPER" || autoPad == "SAME_LOWER") {
    // Output extent ceil(in / stride); the padding that needs, the odd one at the end (UPPER)
    // or the start (LOWER). The extents are the file's: checked as plan::makeWindow2d checks
    // them (below 2^31, strides and dilations at least 1) before they are divided by or
    // multiplied.
    constexpr int64_t kLimit = int64_t(1) << 31;
    for (int axis = 0; axis < 2; ++axis)
      if (window.strides[axis] < 1 || window.dilations[axis] < 1 || kernel[axis] < 1 ||
          input[2 + axis] < 0 || window.strides[axis] > kLimit || window.dilations[axis] > kLimit ||
          kernel[axis] > kLimit || input[2 + axis] > kLimit)
        throw ImportError("auto_pad " + autoPad + " needs strides, dilations and kernel extents "
                          "of at least 1 and input and window extents below 2^31");
    for (int axis = 0; axis < 2; ++axis) {
      const int64_t in = input[2 + axis], stride = window.strides[axis];
      const int64_t out = (in + stride - 1) / stride;
      const int64_t span = window.dilations[axis] * (kernel[axis] - 1) + 1;
      const int64_t total = std::max<int64_t>((out - 1) * stride + span - in, 0);
      const int64_t small = total / 2, large = total - small;
      window.pads[axis] = autoPad == "SAME_UPPER" ? small : large;
      window.pads[axis + 2] = autoPad == "SAME_UPPER" ? large : small;
    }
  } else if (autoPad == "VALID") {
    window.pads = {0, 0, 0, 0};
  } else if (autoPad != "NOTSET") {
    throw ImportError("its auto_pad '" + autoPad + "' is not one of NOTSET, SAME_UPPER, "
                      "SAME_LOWER, VALID");
  }
  return window;
}

void convertConv(const NodeContext &c) {
  Type element = c.floatElement();
  Value x = c.tensor(0, element), w = c.tensor(1, element);
  std::vector<int64_t> weight = GraphBuilder::shapeOf(w);
  if (weight.size() != 4)
    throw ImportError("only 2-D convolutions are supported; the weight is rank " +
                      std::to_string(weight.size()));
  std::vector<int64_t> kernel = intsAttribute(c.node, "kernel_shape");
  if (!kernel.empty() && kernel != std::vector<int64_t>{weight[2], weight[3]})
    throw ImportError("its kernel_shape does not match its weight's extents");
  NodeWindow window = nodeWindow(c, GraphBuilder::shapeOf(x), {weight[2], weight[3]});
  OpBuilder &b = c.graph.builder;
  Value y = c.graph.create<graph::Conv2dOp>(
      x, w, b.getDenseI64ArrayAttr(window.strides), b.getDenseI64ArrayAttr(window.pads),
      b.getDenseI64ArrayAttr(window.dilations),
      b.getI64IntegerAttr(intAttribute(c.node, "group", 1)));
  if (c.has(2))
    y = c.graph.create<graph::AddOp>(y, c.graph.reshape(c.tensor(2, element), {weight[0], 1, 1}));
  c.result(y);
}

void convertMaxPool(const NodeContext &c) {
  if (c.node.output_size() > 1 && !c.node.output(1).empty())
    throw ImportError("MaxPool's Indices output is not supported");
  if (intAttribute(c.node, "storage_order", 0) != 0)
    throw ImportError("MaxPool with storage_order 1 (column-major indices) is not supported");
  Value x = c.tensor(0, c.floatElement());
  std::vector<int64_t> kernel = intsAttribute(c.node, "kernel_shape");
  if (kernel.size() != 2)
    throw ImportError("its kernel_shape must have 2 entries (2-D pooling)");
  NodeWindow window = nodeWindow(c, GraphBuilder::shapeOf(x), kernel);
  OpBuilder &b = c.graph.builder;
  c.result(c.graph.create<graph::MaxPool2dOp>(
      x, b.getDenseI64ArrayAttr(kernel), b.getDenseI64ArrayAttr(window.strides),
      b.getDenseI64ArrayAttr(window.pads), b.getDenseI64ArrayAttr(window.dilations),
      intAttribute(c.node, "ceil_mode", 0) ? b.getUnitAttr() : nullptr));
}

void convertAveragePool(const NodeContext &c) {
  Value x = c.tensor(0, c.floatElement());
  std::vector<int64_t> kernel = intsAttribute(c.node, "kernel_shape");
  if (kernel.size() != 2)
    throw ImportError("its kernel_shape must have 2 entries (2-D pooling)");
  NodeWindow window = nodeWindow(c, GraphBuilder::shapeOf(x), kernel);
  if (window.dilations != std::vector<int64_t>{1, 1})
    throw ImportError("AveragePool with dilations is not supported");
  OpBuilder &b = c.graph.builder;
  c.result(c.graph.create<graph::AvgPool2dOp>(
      x, b.getDenseI64ArrayAttr(kernel), b.getDenseI64ArrayAttr(window.strides),
      b.getDenseI64ArrayAttr(window.pads),
      intAttribute(c.node, "ceil_mode", 0) ? b.getUnitAttr() : nullptr,
      intAttribute(c.node, "count_include_pad", 0) ? b.getUnitAttr() : nullptr));
}

/// BatchNormalization as PyTorch exports a module in train(): graph.batch_norm with the batch's
/// statistics, then graph.update_running_stats of the running mean and variance (untrained
/// parameters the importer declared, OnnxImporter.cpp) with PyTorch's momentum, 1 - ONNX's.
void convertBatchNormalization(const NodeContext &c) {
  const bool training = c.opset >= 14 ? intAttribute(c.node, "training_mode", 0) != 0
                                      : c.node.output_size() > 1;
  if (!training)
    throw ImportError("BatchNormalization in inference mode: the model was exported for "
                      "evaluation, so its batch norms would train with frozen statistics (and "
                      "torch.onnx folds them into the convolutions). Export the module in "
                      "train() with torch.onnx.export(..., training=torch.onnx.TrainingMode."
                      "TRAINING, do_constant_folding=False)");
  Type element = c.floatElement();
  ImportedValue &mean = c.input(3), &var = c.input(4);
  if (mean.param.empty() || var.param.empty())
    throw ImportError("its running mean and variance must be initializers (the module's "
                      "buffers)");
  Value x = c.tensor(0, element);
  Value y = c.graph.create<graph::BatchNormOp>(
      x, c.tensor(1), c.tensor(2), c.tensor(3), c.tensor(4),
      c.graph.builder.getF64FloatAttr(floatAttribute(c.node, "epsilon", 1e-5)));
  OpBuilder &b = c.graph.builder;
  // The count PyTorch keeps beside NAME.running_mean, when the importer declared it.
  FlatSymbolRefAttr count;
  const std::string name = batchCountName(mean.param);
  Operation *model = b.getInsertionBlock()->getParentOp()->getParentOp();
  if (!name.empty() && mlir::SymbolTable::lookupSymbolIn(model, name))
    count = FlatSymbolRefAttr::get(b.getContext(), name);
  b.create<graph::UpdateRunningStatsOp>(
      c.graph.loc, x, b.getF64FloatAttr(1.0 - floatAttribute(c.node, "momentum", 0.9)),
      FlatSymbolRefAttr::get(b.getContext(), mean.param),
      FlatSymbolRefAttr::get(b.getContext(), var.param), count);
  c.result(y);
  for (size_t i = 1; i < std::min<size_t>(3, c.node.output_size()); ++i) {
    c.outputs.resize(i + 1);
    c.outputs[i].pending = Pending::RunningStatistic;
  }
}

/// Pad with zeros (constant mode, value 0): graph.pad; no padding at all is the identity.
void convertPad(const NodeContext &c) {
  const std::string mode = stringAttribute(c.node, "mode", "constant");
  if (mode != "constant")
    throw ImportError("Pad in mode '" + mode + "' is not supported (only constant zeros)");
  if ((c.has(2) && c.constantInput(2, "constant value").values.at(0) != 0) ||
      floatAttribute(c.node, "value", 0.0) != 0)
    throw ImportError("Pad with a nonzero constant value is not supported");
  Value x = c.tensor(0);
  const int64_t rank = GraphBuilder::tensorType(x).getRank();
  std::vector<int64_t> pads = c.opset >= 11 ? c.constantInput(1, "pads").integers()
                                            : intsAttribute(c.node, "pads");
  std::vector<int64_t> axes(rank);
  std::iota(axes.begin(), axes.end(), 0);
  if (c.has(3))
    axes = canonicalAxes(c.constantInput(3, "axes").integers(), rank);
  if (pads.size() != 2 * axes.size())
    throw ImportError("its pads have " + std::to_string(pads.size()) + " entries for " +
                      std::to_string(axes.size()) + " axes");
  std::vector<int64_t> low(rank, 0), high(rank, 0);
  for (size_t i = 0; i < axes.size(); ++i) {
    low[axes[i]] = pads[i];
    high[axes[i]] = pads[i + axes.size()];
  }
  if (std::any_of(pads.begin(), pads.end(), [](int64_t p) { return p < 0; }))
    throw ImportError("Pad with negative pads (cropping) is not supported");
  if (std::all_of(pads.begin(), pads.end(), [](int64_t p) { return p == 0; }))
    return c.result(x);
  OpBuilder &b = c.graph.builder;
  c.result(c.graph.create<graph::PadOp>(x, b.getDenseI64ArrayAttr(low),
                                        b.getDenseI64ArrayAttr(high)));
}

/// GlobalAveragePool: the mean over every axis after the channels, kept as extent 1.
void convertGlobalAveragePool(const NodeContext &c) {
  Value x = c.tensor(0, c.floatElement());
  const int64_t rank = GraphBuilder::tensorType(x).getRank();
  if (rank < 3)
    throw ImportError("GlobalAveragePool needs an [N, C, ...] input of rank >= 3");
  std::vector<int64_t> axes;
  for (int64_t d = 2; d < rank; ++d)
    axes.push_back(d);
  OpBuilder &b = c.graph.builder;
  c.result(c.graph.create<graph::MeanOp>(x, b.getDenseI64ArrayAttr(axes), b.getUnitAttr()));
}

/// Clip: bounds from inputs 1 and 2 (opset 11 on) or the min / max attributes; an absent bound
/// is none.
void convertClip(const NodeContext &c) {
  const double inf = std::numeric_limits<double>::infinity();
  double lo = floatAttribute(c.node, "min", -inf), hi = floatAttribute(c.node, "max", inf);
  if (c.has(1))
    lo = c.constantInput(1, "min").values.at(0);
  if (c.has(2))
    hi = c.constantInput(2, "max").values.at(0);
  if (std::isnan(lo) || std::isnan(hi) || lo > hi)
    throw ImportError("its bounds [" + std::to_string(lo) + ", " + std::to_string(hi) +
                      "] are not an interval (min <= max, no NaN)");
  OpBuilder &b = c.graph.builder;
  c.result(c.graph.create<graph::ClipOp>(c.tensor(0, c.floatElement()), b.getF64FloatAttr(lo),
                                         b.getF64FloatAttr(hi)));
}

} // namespace

void addImageConverters(std::map<std::string, Converter> &table) {
  table.insert({{"Conv", convertConv},
                {"MaxPool", convertMaxPool},
                {"AveragePool", convertAveragePool},
                {"GlobalAveragePool", convertGlobalAveragePool},
                {"Clip", convertClip},
                {"Pad", convertPad},
                {"BatchNormalization", convertBatchNormalization}});
}

} // namespace ampc::onnximport
