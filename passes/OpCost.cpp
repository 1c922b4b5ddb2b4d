//===- OpCost.cpp - what an op costs: FLOPs, bytes, persistent memory ------===//

#include "passes/OpCost.h"

using namespace mlir;

namespace ampc::graph {

int64_t elementsOf(Type type) {
  auto tensor = llvm::dyn_cast<RankedTensorType>(type);
  return tensor ? tensor.getNumElements() : 0;
}

int64_t bytesPerElement(Type element) {
  return std::max<int64_t>(1, element.getIntOrFloatBitWidth() / 8);
}

int64_t bytesOf(Type type) {
  auto tensor = llvm::cast<RankedTensorType>(type);
  return tensor.getNumElements() * bytesPerElement(tensor.getElementType());
}

double estimateFlops(Operation *op) {
  if (auto matmul = llvm::dyn_cast<MatmulOp>(op)) {
    auto lhs = llvm::cast<RankedTensorType>(matmul.getLhs().getType()).getShape();
    int64_t k = matmul.getTransposeLhs() ? lhs[lhs.size() - 2] : lhs.back();
    return 2.0 * double(elementsOf(matmul.getResult().getType())) * double(k);
  }
  auto attentionFlops = [](Value query, Value key, double perProduct) {
    auto q = llvm::cast<RankedTensorType>(query.getType()).getShape();
    auto k = llvm::cast<RankedTensorType>(key.getType()).getShape();
    double heads = double(elementsOf(query.getType())) / double(q[q.size() - 2] * q.back());
    return perProduct * heads * double(q[q.size() - 2]) * double(k[k.size() - 2]) *
           double(q.back());
  };
  if (auto attention = llvm::dyn_cast<AttentionOp>(op))
    return attentionFlops(attention.getQuery(), attention.getKey(), 4.0);
  if (auto attention = llvm::dyn_cast<AttentionGradOp>(op))
    return attentionFlops(attention.getQuery(), attention.getKey(), 10.0);
  // Packed: each of the H heads multiplies T x T x Dh, H Dh = the packed width / 3.
  auto packedFlops = [](Value qkv, double perProduct) {
    auto shape = llvm::cast<RankedTensorType>(qkv.getType()).getShape();
    const double tokens = double(shape[shape.size() - 2]), width = double(shape.back());
    const double batch = double(elementsOf(qkv.getType())) / (tokens * width);
    return perProduct * batch * tokens * tokens * (width / 3.0);
  };
  if (auto attention = llvm::dyn_cast<QkvAttentionOp>(op))
    return packedFlops(attention.getQkv(), 4.0);
  if (auto attention = llvm::dyn_cast<QkvAttentionGradOp>(op))
    return packedFlops(attention.getQkv(), 10.0);
  // A convolution and each of its gradients: 2 FLOPs per (output element, tap) of the forward,
  // whose output is dy for the gradients.
  auto convFlops = [](Value output, Value weight) {
    auto w = llvm::cast<RankedTensorType>(weight.getType()).getShape();
    return 2.0 * double(elementsOf(output.getType())) * double(w[1] * w[2] * w[3]);
  };
  if (auto conv = llvm::dyn_cast<Conv2dOp>(op))
    return convFlops(conv.getResult(), conv.getWeight());
  if (auto conv = llvm::dyn_cast<Conv2dGradInputOp>(op))
    return convFlops(conv.getGrad(), conv.getWeight());
  if (auto conv = llvm::dyn_cast<Conv2dGradWeightOp>(op))
    return convFlops(conv.getGrad(), conv.getResult());
  // Pooling reads every tap of every window.
  auto poolFlops = [](Value output, llvm::ArrayRef<int64_t> kernel) {
    return double(elementsOf(output.getType())) * double(kernel[0] * kernel[1]);
  };
  if (auto pool = llvm::dyn_cast<MaxPool2dOp>(op))
    return poolFlops(pool.getResult(), pool.getKernelSize());
  if (auto pool = llvm::dyn_cast<AvgPool2dOp>(op))
    return poolFlops(pool.getResult(), pool.getKernelSize());
  if (auto pool = llvm::dyn_cast<MaxPool2dGradOp>(op))
    return poolFlops(pool.getGrad(), pool.getKernelSize());
  if (auto pool = llvm::dyn_cast<AvgPool2dGradOp>(op))
    return poolFlops(pool.getGrad(), pool.getKernelSize());
  // Reductions and losses touch every input element; everything else every output element.
  int64_t elements = 0;
  if (llvm::isa<SumOp, MeanOp, MaxOp, CrossEntropyOp, MseLossOp>(op))
    elements = elementsOf(op->getOperand(0).getType());
  else
    for (Value result : op->getResults())
      elements += elementsOf(result.getType());
  return double(elements);
}

PersistentBytes persistentBytes(ModelOp model) {
  PersistentBytes totals;
  for (Operation &op : model.getBodyBlock()) {
    if (auto param = llvm::dyn_cast<ParamOp>(op))
      totals.parameters += bytesOf(param.getType());
    else if (auto copy = llvm::dyn_cast<ParamCopyOp>(op))
      totals.parameterCopies += bytesOf(copy.getType());
    else if (auto input = llvm::dyn_cast<InputOp>(op))
      totals.inputs += bytesOf(input.getType());
    else if (auto state = llvm::dyn_cast<StateOp>(op)) {
      if (state.getSymName().ends_with(".grad"))
        totals.gradients += bytesOf(state.getType());
      else
        totals.optimizerState += bytesOf(state.getType());
    } else if (llvm::isa<LossScaleOp>(op)) {
      totals.optimizerState += 4 * 4; // scale, growth count, flag, applied steps
    }
  }
  if (func::FuncOp entry = model.getEntryFunction())
    entry.walk([&](ConstantOp constant) { totals.constants += bytesOf(constant.getType()); });
  return totals;
}

} // namespace ampc::graph
