//===- OnnxImporter.cpp - ONNX models as graph-dialect models -------------===//
//
// The import, in order: parse the file; give every graph input a static shape (the file's, or
// --input-shape's); decide which initializers are parameters (float tensors through which the
// outputs depend differentiably on them: torch's parameters, but not its masks, position ids or
// shape tensors); then walk the nodes in their (topological) order, folding those whose inputs
// are all known and converting the others (OpTable.cpp); last, the scalar output becomes the
// loss, unused ops are dropped, and the model is verified.
//
//===----------------------------------------------------------------------===//

#include "compiler/onnx/OnnxImporter.h"
#include "compiler/onnx/GraphBuilder.h"
#include "compiler/onnx/OnnxFile.h"
#include "compiler/onnx/ShapeFolding.h"
#include "runtime/plan/SafeTensors.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "llvm/ADT/StringExtras.h"

#include <cmath>
#include <filesystem>
#include <map>
#include <set>

using namespace mlir;

namespace ampc {

using namespace onnximport;

namespace {

/// Which inputs of \p node carry values its outputs depend on differentiably (the data, not the
/// shapes, axes, indices or conditions).
std::vector<int> differentiableInputs(const onnx::NodeProto &node) {
  // The first input is the data; the others are shapes, axes, indices, exponents or ratios.
  // clang-format off
  static const std::set<std::string> firstOnly = {
      "Reshape", "Expand", "Tile", "Squeeze", "Unsqueeze", "Slice", "Gather", "Split", "Dropout",
      "ReduceMean", "ReduceSum", "ReduceMax", "Pad", "Pow", "Identity", "Flatten", "Transpose",
      "Softmax", "LogSoftmax", "SoftmaxCrossEntropyLoss", "NegativeLogLikelihoodLoss", "Clip"};
  // Only the data and the affine parameters: the running statistics are model state.
  static const std::set<std::string> firstThree = {"BatchNormalization"};
  // No input is differentiable: shapes, comparisons, index computations.
  static const std::set<std::string> none = {
      "Shape", "Size", "Range", "ConstantOfShape", "Equal", "Less", "LessOrEqual", "Greater",
      "GreaterOrEqual", "Not", "And", "Or", "Xor", "NonZero", "ArgMax", "ArgMin", "Constant"};
  // clang-format on
  const std::string &op = node.op_type();
  if (none.count(op))
    return {};
  if (op == "Cast" && !HostTensor::isFloatType(
                          static_cast<int32_t>(intAttribute(node, "to", onnx::TensorProto::FLOAT))))
    return {};
  if (op == "Where")
    return {1, 2};
  if (firstOnly.count(op))
    return {0};
  if (firstThree.count(op))
    return {0, 1, 2};
  std::vector<int> all(node.input_size());
  for (int i = 0; i < node.input_size(); ++i)
    all[i] = i;
  return all;
}

/// Whether a BatchNormalization node normalises with its batch's statistics: training_mode 1
/// (opset 14 on), or the running-statistic outputs of the older opsets.
bool batchNormTrains(const onnx::NodeProto &node, int64_t opset) {
  if (opset >= 14)
    return intAttribute(node, "training_mode", 0) != 0;
  return node.output_size() > 1;
}

/// The initializers that training-mode batch norms read as running mean and variance.
std::set<std::string> runningStatistics(const OnnxFile &file) {
  std::set<std::string> names;
  for (const onnx::NodeProto &node : file.model.graph().node())
    if (node.op_type() == "BatchNormalization" && batchNormTrains(node, file.opset))
      for (int i = 3; i < std::min(node.input_size(), 5); ++i)
        names.insert(node.input(i));
  return names;
}

/// The names of the values the graph outputs depend on differentiably.
std::set<std::string> differentiableValues(const OnnxFile &file) {
  std::set<std::string> needed;
  for (const onnx::ValueInfoProto &output : file.model.graph().output())
    needed.insert(output.name());
  for (int n = static_cast<int>(file.nodes.size()) - 1; n >= 0; --n) {
    const onnx::NodeProto &node = file.nodes[n];
    bool used = false;
    for (const std::string &output : node.output())
      used |= needed.count(output) > 0;
    if (!used)
      continue;
    for (int i : differentiableInputs(node))
      if (i < node.input_size() && !node.input(i).empty())
        needed.insert(node.input(i));
  }
  return needed;
}

std::string dimsText(const std::vector<int64_t> &dims) {
  std::string text;
  for (size_t i = 0; i < dims.size(); ++i)
    text += (i ? "x" : "") + std::to_string(dims[i]);
  return text.empty() ? "scalar" : text;
}

/// A symbol name for the model: the file's stem with anything but [A-Za-z0-9_] replaced.
std::string modelName(const std::string &path) {
  std::string stem = std::filesystem::path(path).stem().string();
  for (char &c : stem)
    if (!llvm::isAlnum(c) && c != '_')
      c = '_';
  if (stem.empty() || llvm::isDigit(stem[0]))
    stem = "m_" + stem;
  return stem;
}

/// Drops ops whose results nothing reads (pattern pieces that raising replaced, constants
/// materialised for them), last first so chains go in one sweep.
void eraseUnused(Block &block) {
  bool erased = true;
  while (erased) {
    erased = false;
    for (Operation &op : llvm::make_early_inc_range(llvm::reverse(block))) {
      if (op.getNumResults() && op.use_empty() && isMemoryEffectFree(&op)) {
        op.erase();
        erased = true;
      }
    }
  }
}

class Importer {
public:
  Importer(const OnnxFile &file, MLIRContext &context, const OnnxImportOptions &options)
      : file(file), context(context), options(options), builder(&context),
        fileLoc(FileLineColLoc::get(&context, file.path, 0, 0)) {}

  ImportedOnnxModel run();

private:
  void declareInputs(graph::ModelOp model);
  void declareInitializers(graph::ModelOp model);
  void convertNodes();
  void markLoss();
  /// Declares untrained model state \p name (a running statistic) with \p values.
  void declareRunningStatistic(const std::string &name, const std::vector<int64_t> &shape,
                               std::vector<float> values);
  /// For an error at node \p failed: a hint when the node is computed from parameters alone.
  std::string bufferHint(int failed) const;

  const OnnxFile &file;
  MLIRContext &context;
  const OnnxImportOptions &options;
  OpBuilder builder;
  Location fileLoc;
  std::map<std::string, ImportedValue> values;
  /// Elements of the constants folded so far (options.maxFoldedElements).
  int64_t foldedElements = 0;
  /// Symbol declarations to create get_param / get_input for, in order.
  std::vector<std::pair<std::string, RankedTensorType>> params, inputs;
  /// The bool graph inputs, held as f32 0 and 1.
  std::set<std::string> masks;
  GivenValues given;
};

ImportedOnnxModel Importer::run() {
  ImportedOnnxModel result;
  result.module = ModuleOp::create(fileLoc);
  builder.setInsertionPointToEnd(result.module->getBody());
  std::string weights = options.weightsName.empty()
                            ? std::filesystem::path(file.path).filename().string()
                            : options.weightsName;
  auto model =
      builder.create<graph::ModelOp>(fileLoc, modelName(file.path), builder.getStringAttr(weights));
  model.getBody().emplaceBlock();
  builder.setInsertionPointToEnd(&model.getBodyBlock());
  declareInitializers(model);
  declareInputs(model);
  auto function = builder.create<func::FuncOp>(fileLoc, "forward", builder.getFunctionType({}, {}));
  builder.setInsertionPointToEnd(function.addEntryBlock());
  for (const auto &[name, type] : params) {
    ImportedValue &value = values[name];
    value.value = builder.create<graph::GetParamOp>(fileLoc, type, name);
    value.param = name;
    value.constant.reset();
  }
  for (const auto &[name, type] : inputs) {
    values[name].value = builder.create<graph::GetInputOp>(fileLoc, type, name);
    values[name].mask = masks.count(name) > 0;
  }
  convertNodes();
  markLoss();
  builder.create<func::ReturnOp>(fileLoc);
  eraseUnused(function.getBody().front());
  result.model = model;
  result.given = std::move(given);
  return result;
}

void Importer::declareInitializers(graph::ModelOp model) {
  const onnx::GraphProto &graph = file.model.graph();
  const std::set<std::string> needed = differentiableValues(file);
  const std::set<std::string> running = runningStatistics(file);
  std::set<std::string> seen;
  for (const onnx::TensorProto &tensor : graph.initializer()) {
    const std::string what = "initializer '" + tensor.name() + "'";
    if (!seen.insert(tensor.name()).second)
      throw ImportError(what + " appears twice");
    HostTensor host = decodeTensor(file, tensor, what);
    bool finite = true;
    for (double value : host.values)
      finite &= std::isfinite(value);
    // A training-mode batch norm's running statistics: untrained model state (PyTorch's
    // buffers), and beside a `NAME.running_mean` the `NAME.num_batches_tracked` PyTorch keeps.
    if (running.count(tensor.name())) {
      if (!host.isFloat() || host.shape.size() != 1)
        throw ImportError(what + " is a batch norm's running statistic, so it must be a float "
                                 "vector");
      declareRunningStatistic(tensor.name(), host.shape,
                              std::vector<float>(host.values.begin(), host.values.end()));
      const std::string count = batchCountName(tensor.name());
      if (!count.empty() &&
          !std::any_of(graph.initializer().begin(), graph.initializer().end(),
                       [&](const onnx::TensorProto &t) { return t.name() == count; }))
        declareRunningStatistic(count, {}, {0.0f});
      continue;
    }
    const bool trainable = host.isFloat() && !host.shape.empty() && finite &&
                           needed.count(tensor.name()) && !options.constants.count(tensor.name());
    if (!trainable) {
      values[tensor.name()].constant = std::move(host);
      continue;
    }
    // torch.onnx names a weight after the module unless it made the weight itself: folding a
    // batch norm into a convolution, or a transpose into a new tensor, while exporting for
    // evaluation (where it also merges initializers of equal value, tying parameters the module
    // keeps apart). Training that would train another model.
    if (tensor.name().rfind("onnx::", 0) == 0)
      throw ImportError(what + " would be a trained parameter, but torch.onnx made it (an "
                               "evaluation-mode export folds batch norms and transposes into new, "
                               "unnamed weights and merges equal ones, so the module's parameters "
                               "are lost); export the module in train() with torch.onnx.export(..., "
                               "training=torch.onnx.TrainingMode.TRAINING, "
                               "do_constant_folding=False)");
    GraphBuilder types(builder, fileLoc);
    auto type = RankedTensorType::get(host.shape, types.elementType(host.dtype));
    builder.create<graph::ParamOp>(fileLoc, tensor.name(), type,
                                   graph::GivenInitAttr::get(&context), nullptr);
    std::vector<float> floats(host.values.begin(), host.values.end());
    given[tensor.name()] = std::move(floats);
    params.emplace_back(tensor.name(), type);
  }
  for (const std::string &name : options.constants)
    if (!seen.count(name))
      throw ImportError("--constant-initializer names '" + name +
                        "', which is not an initializer of the model");
}

void Importer::declareRunningStatistic(const std::string &name, const std::vector<int64_t> &shape,
                                       std::vector<float> values) {
  auto type = RankedTensorType::get(shape, builder.getF32Type());
  builder.create<graph::ParamOp>(fileLoc, name, type, graph::GivenInitAttr::get(&context), nullptr,
                                 /*untrained=*/true);
  given[name] = std::move(values);
  params.emplace_back(name, type);
}

void Importer::declareInputs(graph::ModelOp model) {
  const onnx::GraphProto &graph = file.model.graph();
  std::set<std::string> declared;
  for (const onnx::ValueInfoProto &input : graph.input()) {
    // Older exporters list the initializers among the inputs as well.
    if (values.count(input.name()) ||
        std::any_of(params.begin(), params.end(), [&](auto &p) { return p.first == input.name(); }))
      continue;
    declared.insert(input.name());
    if (!input.type().has_tensor_type())
      throw ImportError("graph input '" + input.name() + "' is not a tensor");
    const onnx::TypeProto::Tensor &tensor = input.type().tensor_type();
    GraphBuilder types(builder, fileLoc);
    // A bool input (a key padding mask) is an f32 input of 0 and 1.
    const bool mask = tensor.elem_type() == onnx::TensorProto::BOOL;
    if (mask)
      masks.insert(input.name());
    Type element = mask ? builder.getF32Type() : types.elementType(tensor.elem_type());
    std::vector<int64_t> shape;
    auto given = options.inputShapes.find(input.name());
    if (given != options.inputShapes.end()) {
      shape = given->second;
      if (tensor.has_shape() && tensor.shape().dim_size() != static_cast<int>(shape.size()))
        throw ImportError("--input-shape " + input.name() + "=" + dimsText(shape) + " has rank " +
                          std::to_string(shape.size()) + ", but the input has rank " +
                          std::to_string(tensor.shape().dim_size()));
      for (int d = 0; tensor.has_shape() && d < tensor.shape().dim_size(); ++d) {
        const auto &dim = tensor.shape().dim(d);
        if (dim.has_dim_value() && dim.dim_value() != shape[d])
          throw ImportError("--input-shape " + input.name() + "=" + dimsText(shape) +
                            " contradicts the file's dimension " + std::to_string(d) + " (" +
                            std::to_string(dim.dim_value()) + ")");
      }
    } else {
      if (!tensor.has_shape())
        throw ImportError("graph input '" + input.name() +
                          "' has no shape; give it one with --input-shape " + input.name() +
                          "=DIMS (e.g. 4x16)");
      // The dimensions as a --input-shape value, a dynamic one by its symbol (or N).
      std::string suggestion;
      int dynamic = -1;
      for (int d = 0; d < tensor.shape().dim_size(); ++d) {
        const auto &dim = tensor.shape().dim(d);
        const bool known = dim.has_dim_value() && dim.dim_value() > 0;
        if (!known && dynamic < 0)
          dynamic = d;
        suggestion += (d ? "x" : "") + (known ? std::to_string(dim.dim_value()) : "4");
        shape.push_back(dim.dim_value());
      }
      if (dynamic >= 0) {
        const auto &dim = tensor.shape().dim(dynamic);
        std::string symbol = dim.has_dim_param() ? " ('" + dim.dim_param() + "')" : "";
        throw ImportError("graph input '" + input.name() + "' has a dynamic dimension " +
                          std::to_string(dynamic) + symbol +
                          "; ampc compiles static shapes: give its sizes with --input-shape " +
                          input.name() + "=DIMS, such as --input-shape " + input.name() + "=" +
                          suggestion + " (4 standing for each dynamic dimension)");
      }
    }
    for (int64_t dim : shape)
      if (dim <= 0)
        throw ImportError("graph input '" + input.name() + "' needs positive dimensions");
    auto type = RankedTensorType::get(shape, element);
    builder.create<graph::InputOp>(fileLoc, input.name(), type);
    inputs.emplace_back(input.name(), type);
  }
  for (const auto &[name, shape] : options.inputShapes)
    if (!declared.count(name))
      throw ImportError("--input-shape names '" + name + "', which is not an input of the model");
}

void Importer::convertNodes() {
  for (int n = 0; n < static_cast<int>(file.nodes.size()); ++n) {
    const onnx::NodeProto &node = file.nodes[n];
    const std::string where = describeNode(node, n, file.opset);
    try {
      std::vector<ImportedValue *> operands;
      bool allConstant = true;
      for (const std::string &name : node.input()) {
        if (name.empty()) {
          operands.push_back(nullptr);
          continue;
        }
        auto found = values.find(name);
        if (found == values.end())
          throw ImportError("its input '" + name +
                            "' is not a graph input, an initializer or an earlier node's output");
        operands.push_back(&found->second);
        // A parameter is never folded; a constant already built as graph.constant still is.
        allConstant &= found->second.isConstant() && found->second.pending == Pending::None &&
                       found->second.param.empty();
      }
      // Locations name the node, in the ONNX file.
      std::string label = node.name().empty() ? node.op_type() : node.name();
      Location loc = NameLoc::get(builder.getStringAttr(label), fileLoc);
      std::vector<ImportedValue> results;
      std::optional<std::vector<HostTensor>> folded;
      if (allConstant && node.op_type() != "Dropout" &&
          (node.domain().empty() || node.domain() == "ai.onnx")) {
        std::vector<const HostTensor *> hosts;
        for (ImportedValue *operand : operands)
          hosts.push_back(operand ? &*operand->constant : nullptr);
        folded = foldNode(node, hosts, file.opset);
        if (!folded && !isImportedOp(node.op_type()))
          throw ImportError("unsupported operator " + node.op_type());
        for (size_t i = 0; folded && i < folded->size(); ++i) {
          foldedElements += (*folded)[i].numElements();
          if (foldedElements > options.maxFoldedElements)
            throw ImportError("the model's constants evaluated at import time (shapes, masks) "
                              "hold more than " + std::to_string(options.maxFoldedElements) +
                              " elements in all");
        }
      }
      if (folded) {
        for (HostTensor &tensor : *folded) {
          ImportedValue value;
          value.constant = std::move(tensor);
          results.push_back(std::move(value));
        }
      } else {
        // Computed from the inputs, or an op the folder leaves to the graph (a matmul of two
        // constants): graph ops, with constants materialised as graph.constant.
        GraphBuilder graphBuilder(builder, loc);
        convertNode(graphBuilder, node, operands, results, file.opset);
      }
      for (int i = 0; i < node.output_size(); ++i) {
        if (node.output(i).empty())
          continue;
        if (i >= static_cast<int>(results.size()))
          throw ImportError("output " + std::to_string(i) + " ('" + node.output(i) +
                            "') is not supported");
        // Moving a mask's elements, or casting it to bool, keeps it a mask.
        static const std::set<std::string> keepsMask = {"Reshape", "Expand", "Unsqueeze",
                                                        "Squeeze", "Transpose", "Flatten",
                                                        "Identity", "Cast", "Slice"};
        if (!operands.empty() && operands[0] && operands[0]->mask &&
            keepsMask.count(node.op_type()))
          results[i].mask = true;
        values[node.output(i)] = results[i];
      }
    } catch (const ImportError &error) {
      throw ImportError(where + ": " + error.what() + bufferHint(n));
    }
  }
}

std::string Importer::bufferHint(int failed) const {
  // The graph inputs and parameters node `failed` depends on, walking back through producers.
  std::map<std::string, int> producer;
  for (int n = 0; n < failed; ++n)
    for (const std::string &output : file.nodes[n].output())
      producer[output] = n;
  std::set<std::string> reached, params;
  std::vector<std::string> pending(file.nodes[failed].input().begin(),
                                   file.nodes[failed].input().end());
  bool fromInputs = false;
  while (!pending.empty()) {
    std::string name = pending.back();
    pending.pop_back();
    if (name.empty() || !reached.insert(name).second)
      continue;
    for (const auto &input : inputs)
      fromInputs |= input.first == name;
    for (const auto &param : this->params)
      if (param.first == name)
        params.insert(name);
    auto found = producer.find(name);
    if (found != producer.end())
      for (const std::string &input : file.nodes[found->second].input())
        pending.push_back(input);
  }
  // Computed from initializers alone: most likely buffers (rotary tables, fixed embeddings) that
  // the file does not tell from parameters.
  if (fromInputs || params.empty())
    return "";
  std::string names;
  for (const std::string &name : params)
    names += (names.empty() ? "" : ",") + name;
  return "; it depends only on initializers, which ampc made parameters; if they are buffers, keep "
         "them constant with --constant-initializer " +
         names;
}

void Importer::markLoss() {
  const onnx::GraphProto &graph = file.model.graph();
  std::string described;
  for (const onnx::ValueInfoProto &output : graph.output()) {
    auto found = values.find(output.name());
    if (found == values.end())
      throw ImportError("graph output '" + output.name() + "' is computed by no node");
    ImportedValue &value = found->second;
    std::vector<int64_t> shape = GraphBuilder::shapeOf(value);
    described +=
        (described.empty() ? "" : ", ") + ("'" + output.name() + "' [" + dimsText(shape)) + "]";
    if (!shape.empty() || value.isConstant())
      continue;
    GraphBuilder graphBuilder(builder, NameLoc::get(builder.getStringAttr(output.name()), fileLoc));
    Value loss = graphBuilder.tensor(value);
    if (!llvm::isa<FloatType>(GraphBuilder::tensorType(loss).getElementType()))
      continue;
    builder.create<graph::LossOp>(loss.getLoc(), loss);
    return;
  }
  throw ImportError("no scalar output to train: ampc takes the model's loss from a scalar float "
                    "output computed from its inputs (outputs: " +
                    (described.empty() ? std::string("none") : described) +
                    "); export a module that returns its loss");
}

} // namespace

FailureOr<ImportedOnnxModel> importOnnxModel(const std::string &path, MLIRContext &context,
                                             const OnnxImportOptions &options) {
  Location fileLoc = FileLineColLoc::get(&context, path, 0, 0);
  try {
    std::unique_ptr<OnnxFile> file = readOnnxFile(path);
    ImportedOnnxModel imported = Importer(*file, context, options).run();
    if (failed(verify(*imported.module)))
      return failure();
    return imported;
  } catch (const ImportError &error) {
    emitError(fileLoc) << error.what();
  } catch (const google::protobuf::FatalException &error) {
    emitError(fileLoc) << "not a valid ONNX model: " << error.what();
  } catch (const std::exception &error) {
    // A field out of range that no check above names (an attribute list too short, ...).
    emitError(fileLoc) << "malformed ONNX model: " << error.what();
  }
  return failure();
}

void writeGivenValues(graph::ModelOp model, const GivenValues &given, const std::string &path) {
  safetensors::File file;
  file.metadata["format"] = "pt";
  file.metadata["producer"] = "ampc import";
  for (auto param : model.getBodyBlock().getOps<graph::ParamOp>()) {
    auto values = given.find(param.getSymName().str());
    if (values == given.end())
      continue;
    auto shape = param.getTensorType().getShape();
    file.tensors.push_back(safetensors::fromFloats(
        values->first, std::vector<int64_t>(shape.begin(), shape.end()), values->second));
  }
  safetensors::writeFile(path, file);
}

bool parseDims(const std::string &text, std::vector<int64_t> &dims) {
  dims.clear();
  llvm::SmallVector<llvm::StringRef> parts;
  llvm::StringRef(text).split(parts, text.find(',') != std::string::npos ? ',' : 'x');
  for (llvm::StringRef part : parts) {
    int64_t dim;
    if (part.trim().getAsInteger(10, dim) || dim <= 0)
      return false;
    dims.push_back(dim);
  }
  return !dims.empty();
}

} // namespace ampc
