//===- OnnxImportTest.cpp - ONNX import: shape folding and parameters ------===//
//
// The host-side evaluation of shape arithmetic (compiler/onnx/ShapeFolding.h) against hand-worked
// results, and the importer on small models built with the protobuf classes: which initializers
// become parameters, how a masked fill imports, and what its errors say.
//
//===----------------------------------------------------------------------===//

#include "compiler/lowering/ModelLoader.h"
#include "compiler/onnx/OnnxImporter.h"
#include "compiler/onnx/ShapeFolding.h"

#include "mlir/IR/Diagnostics.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <limits>

using namespace ampc;
using namespace ampc::onnximport;

namespace {

HostTensor ints(std::vector<int64_t> shape, std::vector<double> values) {
  HostTensor tensor;
  tensor.dtype = onnx::TensorProto::INT64;
  tensor.shape = std::move(shape);
  tensor.values = std::move(values);
  return tensor;
}

onnx::NodeProto node(const std::string &op, std::vector<std::string> inputs = {"a", "b"},
                     std::vector<std::string> outputs = {"y"}) {
  onnx::NodeProto result;
  result.set_op_type(op);
  for (const std::string &input : inputs)
    result.add_input(input);
  for (const std::string &output : outputs)
    result.add_output(output);
  return result;
}

void intAttribute(onnx::NodeProto &node, const std::string &name, int64_t value) {
  onnx::AttributeProto *attribute = node.add_attribute();
  attribute->set_name(name);
  attribute->set_type(onnx::AttributeProto::INT);
  attribute->set_i(value);
}

std::vector<HostTensor> fold(const onnx::NodeProto &node, std::vector<const HostTensor *> inputs) {
  std::optional<std::vector<HostTensor>> result = foldNode(node, inputs, 17);
  EXPECT_TRUE(result.has_value()) << node.op_type();
  return result ? *result : std::vector<HostTensor>{};
}

TEST(OnnxShapeFolding, ShapeRules) {
  EXPECT_EQ(broadcastShapes({2, 1, 4}, {3, 1}), (std::vector<int64_t>{2, 3, 4}));
  EXPECT_THROW(broadcastShapes({2, 3}, {4}), ImportError);
  EXPECT_EQ(reshapeTarget({2, 16, 32}, {0, 0, 4, -1}, false), (std::vector<int64_t>{2, 16, 4, 8}));
  EXPECT_EQ(reshapeTarget({2, 16}, {-1}, false), (std::vector<int64_t>{32}));
  EXPECT_THROW(reshapeTarget({2, 16}, {5, -1}, false), ImportError);
  // Element counts past int64 are errors, not wrapped products.
  constexpr int64_t kHuge = int64_t(1) << 62;
  EXPECT_THROW(reshapeTarget({kHuge, 8}, {-1}, false), ImportError);
  EXPECT_THROW(reshapeTarget({4}, {kHuge, kHuge, -1}, false), ImportError);
  EXPECT_EQ(unsqueezeShape({4, 8}, {0, -1}), (std::vector<int64_t>{1, 4, 8, 1}));
  EXPECT_EQ(squeezeShape({1, 4, 1}, {}), (std::vector<int64_t>{4}));
  EXPECT_THROW(squeezeShape({1, 4}, {1}), ImportError);
  // Slice ends of INT64_MAX (torch's "to the end") and negative starts clamp to the axis.
  auto ranges = sliceRanges({16, 8}, {-4, 0}, {std::numeric_limits<int64_t>::max(), 3}, {}, {});
  EXPECT_EQ(ranges[0].start, 12);
  EXPECT_EQ(ranges[0].size, 4);
  EXPECT_EQ(ranges[1].size, 3);
  EXPECT_EQ(splitSizes(96, {}, 3), (std::vector<int64_t>{32, 32, 32}));
  EXPECT_EQ(splitSizes(10, {}, 3), (std::vector<int64_t>{4, 4, 2}));
  EXPECT_THROW(splitSizes(10, {4, 4}, 2), ImportError);
}

TEST(OnnxShapeFolding, EvaluatesShapeArithmetic) {
  // Gather(Shape(x), 1) for x [2, 16, 32], then Concat with a constant, then Range.
  HostTensor shape = ints({3}, {2, 16, 32});
  HostTensor index = ints({}, {1});
  onnx::NodeProto gather = node("Gather");
  EXPECT_EQ(fold(gather, {&shape, &index})[0].values, (std::vector<double>{16}));
  HostTensor minusOne = ints({1}, {-1});
  HostTensor first = ints({1}, {2});
  onnx::NodeProto concat = node("Concat");
  intAttribute(concat, "axis", 0);
  HostTensor joined = fold(concat, {&first, &minusOne})[0];
  EXPECT_EQ(joined.shape, (std::vector<int64_t>{2}));
  EXPECT_EQ(joined.values, (std::vector<double>{2, -1}));
  HostTensor start = ints({}, {0}), limit = ints({}, {5}), delta = ints({}, {2});
  EXPECT_EQ(fold(node("Range", {"s", "l", "d"}), {&start, &limit, &delta})[0].values,
            (std::vector<double>{0, 2, 4}));
}

TEST(OnnxShapeFolding, EvaluatesMasks) {
  // The causal mask of masked_fill: Trilu of ones, Equal 0, Where(-inf, 0).
  HostTensor ones;
  ones.shape = {3, 3};
  ones.values.assign(9, 1.0);
  onnx::NodeProto lower = node("Trilu", {"x"});
  intAttribute(lower, "upper", 0);
  HostTensor tril = fold(lower, {&ones})[0];
  EXPECT_EQ(tril.values, (std::vector<double>{1, 0, 0, 1, 1, 0, 1, 1, 1}));
  HostTensor zero;
  zero.values = {0};
  HostTensor masked = fold(node("Equal"), {&tril, &zero})[0];
  EXPECT_EQ(masked.dtype, onnx::TensorProto::BOOL);
  HostTensor fill, keep;
  fill.values = {-INFINITY};
  keep.values = {0};
  HostTensor bias = fold(node("Where", {"c", "a", "b"}), {&masked, &fill, &keep})[0];
  EXPECT_EQ(bias.values[0], 0);
  EXPECT_EQ(bias.values[1], -INFINITY);
  EXPECT_EQ(bias.shape, (std::vector<int64_t>{3, 3}));
  // An operator the folder does not know is left to the op table.
  EXPECT_FALSE(foldNode(node("LSTM"), {&ones}, 17).has_value());
  // Constants are bounded: a ConstantOfShape of 2^40 elements is an error, not an allocation.
  HostTensor huge = ints({2}, {1 << 20, 1 << 20});
  EXPECT_THROW(foldNode(node("ConstantOfShape", {"s"}), {&huge}, 17), ImportError);
}

/// A model computing mean((x W)^2 masked) with a float mask buffer: W is a parameter, the mask
/// (read through Equal) a constant.
onnx::ModelProto maskedModel() {
  onnx::ModelProto model;
  model.set_ir_version(8);
  model.add_opset_import()->set_version(17);
  onnx::GraphProto *graph = model.mutable_graph();
  graph->set_name("masked");
  auto addTensor = [&](const std::string &name, std::vector<int64_t> dims,
                       std::vector<float> values) {
    onnx::TensorProto *tensor = graph->add_initializer();
    tensor->set_name(name);
    tensor->set_data_type(onnx::TensorProto::FLOAT);
    for (int64_t dim : dims)
      tensor->add_dims(dim);
    for (float value : values)
      tensor->add_float_data(value);
  };
  addTensor("fc.weight", {2, 2}, {1, 2, 3, 4});
  addTensor("mask", {2, 2}, {1, 0, 1, 1});
  addTensor("zero", {}, {0});
  addTensor("fill", {}, {-1e9f});
  onnx::ValueInfoProto *x = graph->add_input();
  x->set_name("x");
  x->mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::FLOAT);
  for (int64_t dim : {2, 2})
    x->mutable_type()->mutable_tensor_type()->mutable_shape()->add_dim()->set_dim_value(dim);
  *graph->add_node() = node("MatMul", {"x", "fc.weight"}, {"h"});
  *graph->add_node() = node("Equal", {"mask", "zero"}, {"masked"});
  *graph->add_node() = node("Where", {"masked", "fill", "h"}, {"filled"});
  *graph->add_node() = node("Mul", {"filled", "filled"}, {"sq"});
  onnx::NodeProto mean = node("ReduceMean", {"sq"}, {"loss"});
  intAttribute(mean, "keepdims", 0);
  *graph->add_node() = mean;
  graph->add_output()->set_name("loss");
  return model;
}

std::string writeModel(const onnx::ModelProto &model, const std::string &name) {
  std::string path = (std::filesystem::temp_directory_path() / name).string();
  std::ofstream out(path, std::ios::binary);
  model.SerializeToOstream(&out);
  return path;
}

TEST(OnnxImport, ParametersAreTheDifferentiableInitializers) {
  mlir::MLIRContext context;
  registerModelDialects(context);
  const std::string path = writeModel(maskedModel(), "ampc-onnx-masked.onnx");
  auto imported = importOnnxModel(path, context, {});
  ASSERT_TRUE(succeeded(imported));
  std::vector<std::string> params;
  for (auto param : imported->model.getBodyBlock().getOps<graph::ParamOp>())
    params.push_back(param.getSymName().str());
  EXPECT_EQ(params, (std::vector<std::string>{"fc.weight"}));
  EXPECT_EQ(imported->given.at("fc.weight"), (std::vector<float>{1, 2, 3, 4}));
  // The masked fill is an addition of a constant mask: 0 where kept, the fill where not.
  bool sawAdd = false;
  imported->model.walk([&](graph::AddOp) { sawAdd = true; });
  EXPECT_TRUE(sawAdd);
  std::filesystem::remove(path);
}

TEST(OnnxImport, ErrorsNameTheNode) {
  mlir::MLIRContext context;
  registerModelDialects(context);
  onnx::ModelProto model = maskedModel();
  model.mutable_graph()->mutable_node(3)->set_op_type("Cos");
  model.mutable_graph()->mutable_node(3)->set_name("trig");
  const std::string path = writeModel(model, "ampc-onnx-cos.onnx");
  std::string message;
  mlir::ScopedDiagnosticHandler handler(&context, [&](mlir::Diagnostic &diagnostic) {
    message = diagnostic.str();
    return mlir::success();
  });
  EXPECT_TRUE(failed(importOnnxModel(path, context, {})));
  EXPECT_EQ(message, "node 3 'trig' (Cos, opset 17): unsupported operator Cos on values computed "
                     "from the model's inputs or parameters");
  std::filesystem::remove(path);
}

/// The message of the one error importing \p model reports.
std::string importError(const onnx::ModelProto &model, const std::string &name,
                        const OnnxImportOptions &options = {}) {
  mlir::MLIRContext context;
  registerModelDialects(context);
  const std::string path = writeModel(model, name);
  std::string message;
  mlir::ScopedDiagnosticHandler handler(&context, [&](mlir::Diagnostic &diagnostic) {
    message = diagnostic.str();
    return mlir::success();
  });
  EXPECT_TRUE(failed(importOnnxModel(path, context, options)));
  std::filesystem::remove(path);
  return message;
}

TEST(OnnxImport, ImportTimeConstantsAreBoundedInAll) {
  // Two ConstantOfShape nodes of 32 x 32 (1,024 elements each), each within the limit of one
  // constant, against a budget of 1,500 in all: the second is an error.
  onnx::ModelProto model = maskedModel();
  onnx::GraphProto *graph = model.mutable_graph();
  onnx::TensorProto *shape = graph->add_initializer();
  shape->set_name("shape");
  shape->set_data_type(onnx::TensorProto::INT64);
  shape->add_dims(2);
  shape->add_int64_data(32);
  shape->add_int64_data(32);
  *graph->add_node() = node("ConstantOfShape", {"shape"}, {"c0"});
  *graph->add_node() = node("ConstantOfShape", {"shape"}, {"c1"});
  OnnxImportOptions options;
  options.maxFoldedElements = 1500;
  EXPECT_NE(importError(model, "ampc-onnx-constants.onnx", options)
                .find("(ConstantOfShape, opset 17): the model's constants "
                      "evaluated at import time (shapes, masks) hold more than 1500 elements in "
                      "all"),
            std::string::npos);
}

TEST(OnnxImport, SamePaddingNeedsPositiveStrides) {
  // A Conv over x [1, 1, 4, 4] with auto_pad SAME_UPPER and a zero stride: an error, not a
  // division by zero while resolving the padding.
  onnx::ModelProto model = maskedModel();
  onnx::GraphProto *graph = model.mutable_graph();
  graph->clear_node();
  onnx::TensorProto *weight = graph->add_initializer();
  weight->set_name("conv.weight");
  weight->set_data_type(onnx::TensorProto::FLOAT);
  for (int64_t dim : {1, 1, 3, 3})
    weight->add_dims(dim);
  for (int i = 0; i < 9; ++i)
    weight->add_float_data(1);
  auto *shape = graph->mutable_input(0)->mutable_type()->mutable_tensor_type()->mutable_shape();
  shape->clear_dim();
  for (int64_t dim : {1, 1, 4, 4})
    shape->add_dim()->set_dim_value(dim);
  onnx::NodeProto conv = node("Conv", {"x", "conv.weight"}, {"h"});
  onnx::AttributeProto *pad = conv.add_attribute();
  pad->set_name("auto_pad");
  pad->set_type(onnx::AttributeProto::STRING);
  pad->set_s("SAME_UPPER");
  onnx::AttributeProto *strides = conv.add_attribute();
  strides->set_name("strides");
  strides->set_type(onnx::AttributeProto::INTS);
  strides->add_ints(0);
  strides->add_ints(0);
  *graph->add_node() = conv;
  onnx::NodeProto mean = node("ReduceMean", {"h"}, {"loss"});
  intAttribute(mean, "keepdims", 0);
  *graph->add_node() = mean;
  EXPECT_NE(importError(model, "ampc-onnx-same-stride0.onnx")
                .find("auto_pad SAME_UPPER needs strides, dilations and kernel extents of at "
                      "least 1"),
            std::string::npos);
}

TEST(OnnxImport, LocalFunctionExpansionIsBounded) {
  // F0 calls F1 twice, F1 calls F2 twice, ..., F23 is one Relu: 2^23 nodes from a 2 KB file.
  // The import stops at 2^18 nodes and calls with one error.
  onnx::ModelProto model;
  model.set_ir_version(8);
  model.add_opset_import()->set_version(17);
  onnx::OperatorSetIdProto *local = model.add_opset_import();
  local->set_domain("local");
  local->set_version(1);
  constexpr int kLevels = 24;
  for (int level = 0; level < kLevels; ++level) {
    onnx::FunctionProto *function = model.add_functions();
    function->set_domain("local");
    function->set_name("F" + std::to_string(level));
    function->add_input("x");
    function->add_output("y");
    function->add_opset_import()->set_version(17);
    if (level == kLevels - 1) {
      *function->add_node() = node("Relu", {"x"}, {"y"});
      continue;
    }
    const std::string callee = "F" + std::to_string(level + 1);
    for (auto [input, output] : {std::pair{"x", "t"}, std::pair{"t", "y"}}) {
      onnx::NodeProto call = node(callee, {input}, {output});
      call.set_domain("local");
      *function->add_node() = call;
    }
  }
  onnx::GraphProto *graph = model.mutable_graph();
  graph->set_name("nested");
  onnx::ValueInfoProto *x = graph->add_input();
  x->set_name("x");
  x->mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::FLOAT);
  x->mutable_type()->mutable_tensor_type()->mutable_shape()->add_dim()->set_dim_value(4);
  onnx::NodeProto call = node("F0", {"x"}, {"y"});
  call.set_domain("local");
  *graph->add_node() = call;
  onnx::NodeProto sum = node("ReduceSum", {"y"}, {"loss"});
  intAttribute(sum, "keepdims", 0);
  *graph->add_node() = sum;
  graph->add_output()->set_name("loss");
  EXPECT_NE(importError(model, "ampc-onnx-nested.onnx")
                .find("the model's local functions expand to more than 262144 nodes and calls"),
            std::string::npos);
}

} // namespace
