//===- GraphSaveAttentionLse.cpp - attention keeps o and lse for its gradient --===//
//
// The backward of attention needs the probabilities P = softmax(scale q k^T) and the row sums
// delta = rowsum(dy * o). A flash kernel rebuilds P from q, k and the forward's row
// log-sum-exp, P = exp(scale q k^T - lse), so with o and lse kept from the forward the
// gradient needs no second forward pass. This pass pairs each attention_grad (qkv_attention_grad)
// of the micro step with the attention (qkv_attention) it differentiates (same q, k, v or qkv,
// heads, causal and scale: autodiff and precision assignment give both ops the same operand
// values), gives that attention the `with_lse` result and makes the gradient read
// `saved(o, lse)`.
//
//===--------------------------------------------------------------------------===//

#include "passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include <map>
#include <tuple>

namespace ampc::graph {
#define GEN_PASS_DEF_GRAPHSAVEATTENTIONLSE
#include "passes/Passes.h.inc"
} // namespace ampc::graph

using namespace mlir;
using namespace ampc::graph;

namespace {

/// What makes an attention_grad the gradient of an attention: the operands and attributes (a
/// packed qkv_attention has only q's place and its head count; 0 heads for attention).
using AttentionKey = std::tuple<void *, void *, void *, bool, double, int64_t>;

AttentionKey keyOf(AttentionOp op) {
  return {op.getQuery().getAsOpaquePointer(), op.getKey().getAsOpaquePointer(),
          op.getValue().getAsOpaquePointer(), op.getCausal(), op.getEffectiveScale(), 0};
}
AttentionKey keyOf(AttentionGradOp op) {
  return {op.getQuery().getAsOpaquePointer(), op.getKey().getAsOpaquePointer(),
          op.getValue().getAsOpaquePointer(), op.getCausal(), op.getEffectiveScale(), 0};
}
AttentionKey keyOf(QkvAttentionOp op) {
  return {op.getQkv().getAsOpaquePointer(), nullptr, nullptr, op.getCausal(),
          op.getEffectiveScale(), static_cast<int64_t>(op.getHeads())};
}
AttentionKey keyOf(QkvAttentionGradOp op) {
  return {op.getQkv().getAsOpaquePointer(), nullptr, nullptr, op.getCausal(),
          op.getEffectiveScale(), static_cast<int64_t>(op.getHeads())};
}

/// \p forward with the `with_lse` result, in its place: same operands, attributes (stage
/// attributes such as graph.precision and graph.recomputed included) and location.
Operation *withLse(Operation *forward) {
  OpBuilder builder(forward);
  Operation *replacement;
  if (auto attention = llvm::dyn_cast<AttentionOp>(forward))
    replacement = builder.create<AttentionOp>(
        forward->getLoc(), attention.getQuery(), attention.getKey(), attention.getValue(),
        attention.getCausalAttr(), attention.getScaleAttr(), builder.getUnitAttr());
  else {
    auto packed = llvm::cast<QkvAttentionOp>(forward);
    replacement = builder.create<QkvAttentionOp>(
        forward->getLoc(), packed.getQkv(), packed.getHeadsAttr(), packed.getCausalAttr(),
        packed.getScaleAttr(), builder.getUnitAttr());
  }
  for (NamedAttribute attribute : forward->getDiscardableAttrs())
    replacement->setAttr(attribute.getName(), attribute.getValue());
  forward->getResult(0).replaceAllUsesWith(replacement->getResult(0));
  forward->erase();
  return replacement;
}

struct GraphSaveAttentionLsePass
    : ampc::graph::impl::GraphSaveAttentionLseBase<GraphSaveAttentionLsePass> {
  using Base::Base;

  void runOnOperation() override {
    func::FuncOp micro = getOperation().getEntryFunction();
    if (!micro || micro.getSymName() != "micro_step")
      return; // a forward-only model has no gradient to feed
    // The first attention of each key in program order; a gradient always follows its forward.
    std::map<AttentionKey, Operation *> forwards;
    llvm::SmallVector<std::pair<Operation *, AttentionKey>> grads;
    for (Operation &op : micro.getBody().front()) {
      if (auto forward = llvm::dyn_cast<AttentionOp>(op))
        forwards.try_emplace(keyOf(forward), &op);
      else if (auto packed = llvm::dyn_cast<QkvAttentionOp>(op))
        forwards.try_emplace(keyOf(packed), &op);
      else if (auto grad = llvm::dyn_cast<AttentionGradOp>(op); grad && grad.getSaved().empty())
        grads.push_back({&op, keyOf(grad)});
      else if (auto grad = llvm::dyn_cast<QkvAttentionGradOp>(op); grad && grad.getSaved().empty())
        grads.push_back({&op, keyOf(grad)});
    }
    for (auto [grad, key] : grads) {
      auto found = forwards.find(key);
      if (found == forwards.end())
        continue;
      Operation *&forward = found->second;
      if (forward->getNumResults() == 1)
        forward = withLse(forward);
      const llvm::SmallVector<Value, 2> saved{forward->getResult(0), forward->getResult(1)};
      if (auto attention = llvm::dyn_cast<AttentionGradOp>(grad))
        attention.getSavedMutable().append(saved);
      else
        llvm::cast<QkvAttentionGradOp>(grad).getSavedMutable().append(saved);
    }
  }
};

} // namespace
