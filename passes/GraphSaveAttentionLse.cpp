//===- GraphSaveAttentionLse.cpp - attention keeps o and lse for its gradient --===//
//
// The backward of attention needs the probabilities P = softmax(scale q k^T) and the row sums
// delta = rowsum(dy * o). A flash kernel rebuilds P from q, k and the forward's row
// log-sum-exp, P = exp(scale q k^T - lse), so with o and lse kept from the forward the
// gradient needs no second forward pass. This pass pairs each attention_grad of the micro step
// with the attention it differentiates (same q, k, v, causal and scale: autodiff and precision
// assignment give both ops the same operand values), gives that attention the `with_lse`
// result and makes the gradient read `saved(o, lse)`.
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

/// What makes an attention_grad the gradient of an attention: the operands and attributes.
using AttentionKey = std::tuple<void *, void *, void *, bool, double>;

AttentionKey keyOf(AttentionOp op) {
  return {op.getQuery().getAsOpaquePointer(), op.getKey().getAsOpaquePointer(),
          op.getValue().getAsOpaquePointer(), op.getCausal(), op.getEffectiveScale()};
}

AttentionKey keyOf(AttentionGradOp op) {
  return {op.getQuery().getAsOpaquePointer(), op.getKey().getAsOpaquePointer(),
          op.getValue().getAsOpaquePointer(), op.getCausal(), op.getEffectiveScale()};
}

/// \p forward with the `with_lse` result, in its place: same operands, attributes and location.
AttentionOp withLse(AttentionOp forward) {
  OpBuilder builder(forward);
  auto replacement = builder.create<AttentionOp>(
      forward.getLoc(), forward.getQuery(), forward.getKey(), forward.getValue(),
      forward.getCausalAttr(), forward.getScaleAttr(), builder.getUnitAttr());
  // Stage attributes (graph.precision, graph.recomputed, ...) stay with the op.
  for (NamedAttribute attribute : forward->getDiscardableAttrs())
    replacement->setAttr(attribute.getName(), attribute.getValue());
  forward.getResult().replaceAllUsesWith(replacement.getResult());
  forward.erase();
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
    std::map<AttentionKey, AttentionOp> forwards;
    llvm::SmallVector<AttentionGradOp> grads;
    for (Operation &op : micro.getBody().front()) {
      if (auto forward = llvm::dyn_cast<AttentionOp>(op))
        forwards.try_emplace(keyOf(forward), forward);
      else if (auto grad = llvm::dyn_cast<AttentionGradOp>(op); grad && grad.getSaved().empty())
        if (forwards.count(keyOf(grad)))
          grads.push_back(grad);
    }
    for (AttentionGradOp grad : grads) {
      AttentionOp &forward = forwards[keyOf(grad)];
      if (!forward.getWithLse())
        forward = withLse(forward);
      grad.getSavedMutable().append(ValueRange{forward.getResult(), forward.getLse()});
    }
  }
};

} // namespace
