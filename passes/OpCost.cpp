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
