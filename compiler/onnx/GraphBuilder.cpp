//===- GraphBuilder.cpp - the ONNX importer's view of values and graph ops -===//
//
// Constants become graph.constant with a dense attribute in the graph element type; a pending
// pattern step that something reads is built from plain graph ops here.
//
//===----------------------------------------------------------------------===//

#include "compiler/onnx/GraphBuilder.h"

#include "mlir/IR/BuiltinAttributes.h"

#include <cmath>

using namespace mlir;

namespace ampc::onnximport {

Type GraphBuilder::elementType(int32_t dtype) const {
  MLIRContext *context = builder.getContext();
  switch (dtype) {
  case onnx::TensorProto::FLOAT:
  case onnx::TensorProto::DOUBLE: // the graph dialect computes in f32 at most
    return Float32Type::get(context);
  case onnx::TensorProto::FLOAT16:
    return Float16Type::get(context);
  case onnx::TensorProto::BFLOAT16:
    return BFloat16Type::get(context);
  case onnx::TensorProto::INT64:
    return IntegerType::get(context, 64);
  case onnx::TensorProto::INT32:
  case onnx::TensorProto::INT16:
  case onnx::TensorProto::INT8:
  case onnx::TensorProto::UINT8:
  case onnx::TensorProto::UINT16:
    return IntegerType::get(context, 32);
  default:
    throw ImportError("a tensor of element type " + dtypeName(dtype) +
                      " is computed from the model's inputs; the graph dialect holds f32, bf16, "
                      "f16, i32 and i64 tensors");
  }
}

Value GraphBuilder::constant(const HostTensor &tensor, Type element) {
  if (!element)
    element = elementType(tensor.dtype);
  auto type = RankedTensorType::get(tensor.shape, element);
  if (llvm::isa<FloatType>(element)) {
    const auto &semantics = llvm::cast<FloatType>(element).getFloatSemantics();
    std::vector<llvm::APFloat> values;
    values.reserve(tensor.values.size());
    for (double value : tensor.values) {
      llvm::APFloat number(value);
      bool lost;
      number.convert(semantics, llvm::APFloat::rmNearestTiesToEven, &lost);
      values.push_back(number);
    }
    return create<graph::ConstantOp>(DenseElementsAttr::get(type, values));
  }
  const unsigned width = element.getIntOrFloatBitWidth();
  std::vector<llvm::APInt> values;
  values.reserve(tensor.values.size());
  for (size_t i = 0; i < tensor.values.size(); ++i)
    values.emplace_back(width, static_cast<uint64_t>(tensor.integer(i)), /*isSigned=*/true);
  return create<graph::ConstantOp>(DenseElementsAttr::get(type, values));
}

Value GraphBuilder::scalar(double value, Type element) {
  HostTensor tensor;
  tensor.values = {value};
  return constant(tensor, element);
}

Value GraphBuilder::tensor(ImportedValue &value, Type element) {
  switch (value.pending) {
  case Pending::None:
    break;
  case Pending::Erf:
  case Pending::OnePlusErf:
    throw ImportError("Erf is imported only as part of GELU's erf form, x * (1 + erf(x / sqrt 2)) "
                      "/ 2; here its result is used otherwise");
  case Pending::TwiceGelu: {
    Value x = value.pendingInput;
    Type type = tensorType(x).getElementType();
    Value gelu = create<graph::GeluOp>(
        graph::GeluApproximationAttr::get(builder.getContext(), graph::GeluApproximation::erf), x);
    value.value = create<graph::MulOp>(gelu, scalar(2.0, type));
    value.pending = Pending::None;
    break;
  }
  case Pending::RunningStatistic:
    throw ImportError("a BatchNormalization's updated running mean or variance is read as a "
                      "value; ampc updates the running statistics in place, and reads them only "
                      "as the batch norm's own state");
  case Pending::DropoutMask:
    throw ImportError("a Dropout's mask output is read; ampc's dropout draws its mask inside "
                      "the op (from the seed, the step and its stream) and does not expose it");
  case Pending::Sigmoid:
    // Not the gate of x * sigmoid(x) (graph.silu): a sigmoid of its own.
    value.value = create<graph::SigmoidOp>(value.pendingInput);
    value.pending = Pending::None;
    break;
  case Pending::LogSoftmax: {
    // x - max - log(sum(exp(x - max))) over the last axis.
    Value x = value.pendingInput;
    const int64_t last = tensorType(x).getRank() - 1;
    auto axes = builder.getDenseI64ArrayAttr({last});
    Value max = create<graph::MaxOp>(x, axes, builder.getUnitAttr());
    Value shifted = create<graph::SubOp>(x, max);
    Value sum = create<graph::SumOp>(create<graph::ExpOp>(shifted), axes, builder.getUnitAttr());
    value.value = create<graph::SubOp>(shifted, create<graph::LogOp>(sum));
    value.pending = Pending::None;
    break;
  }
  }
  if (value.value) {
    if (element && value.isConstant() && tensorType(value.value).getElementType() != element)
      return constant(*value.constant, element);
    return value.value;
  }
  Value built = constant(*value.constant, element);
  if (!element)
    value.value = built;
  return built;
}

Value GraphBuilder::reshape(Value input, const std::vector<int64_t> &shape) {
  if (shapeOf(input) == shape)
    return input;
  auto type = RankedTensorType::get(shape, tensorType(input).getElementType());
  return create<graph::ReshapeOp>(type, input);
}

Value GraphBuilder::transpose(Value input, const std::vector<int64_t> &permutation) {
  bool identity = true;
  for (size_t i = 0; i < permutation.size(); ++i)
    identity &= permutation[i] == static_cast<int64_t>(i);
  if (identity)
    return input;
  return create<graph::TransposeOp>(input, builder.getDenseI64ArrayAttr(permutation));
}

Value GraphBuilder::broadcast(Value input, const std::vector<int64_t> &shape) {
  if (shapeOf(input) == shape)
    return input;
  auto type = RankedTensorType::get(shape, tensorType(input).getElementType());
  return create<graph::BroadcastOp>(type, input);
}

Value GraphBuilder::slice(Value input, const std::vector<int64_t> &starts,
                          const std::vector<int64_t> &sizes) {
  if (shapeOf(input) == sizes)
    return input;
  return create<graph::SliceOp>(input, builder.getDenseI64ArrayAttr(starts),
                                builder.getDenseI64ArrayAttr(sizes));
}

Value GraphBuilder::cast(Value input, Type element) {
  RankedTensorType type = tensorType(input);
  if (type.getElementType() == element)
    return input;
  return create<graph::CastOp>(RankedTensorType::get(type.getShape(), element), input);
}

} // namespace ampc::onnximport
