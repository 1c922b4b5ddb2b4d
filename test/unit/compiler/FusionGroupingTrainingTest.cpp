//===- FusionGroupingTrainingTest.cpp - fusion of the training step's ops -===//
//
// The rules of passes/FusionGrouping.h for what graph-build-training adds, on hand-built graphs:
// the fused classifier (cross-entropy, its gradient and their casts), the accumulation of
// gradients (by their own kernel, by the matmul producing them, or by a column sum's second
// stage) and the optimizer's one multi-tensor kernel.
//
//===--------------------------------------------------------------------------===//

#include "FusionGroupingHelpers.h"

#include <gtest/gtest.h>

using namespace ampc::graph;
using namespace ampc::test::fusion;

namespace {

//===----------------------------------------------------------------------===//
// Cross-entropy, accumulation, optimizer
//===----------------------------------------------------------------------===//

TEST(FusionGrouping, CrossEntropyAndItsGradientWithTheCasts) {
  GraphBuilder b;
  int h = b.source({4, 8});
  int w = b.source({8, 10});
  int labels = b.source({4});
  int logits = b.matmul(h, w, {4, 10});
  int widened = b.elementwise("graph.cast", {logits}, FusionRole::WideningCast);
  int loss = b.op("graph.cross_entropy", FusionOpClass::Reduction, FusionRole::CrossEntropy,
                  {widened, labels}, {{}});
  int marker = b.op("graph.loss", FusionOpClass::Other, FusionRole::None, {loss}, {});
  int seed = b.op("graph.grad_seed", FusionOpClass::Other, FusionRole::None, {}, {{}});
  int grad = b.op("graph.cross_entropy_grad", FusionOpClass::Reduction,
                  FusionRole::CrossEntropyGrad, {widened, labels, seed}, {{4, 10}});
  int narrowed = b.elementwise("graph.cast", {grad}, FusionRole::Cast);
  int dh = b.matmul(narrowed, w, {4, 8}, false, true);
  b.ret({dh});
  FusionPlan p = plan(b.graph);
  const FusionGroup &group = groupOf(p, loss);
  EXPECT_EQ(group.kind, FusionKind::CrossEntropy);
  EXPECT_EQ(group.anchor, loss);
  EXPECT_EQ(group.ops, (std::vector<int>{widened, loss, grad, narrowed}));
  EXPECT_EQ(group.outputs, values({loss, narrowed}));
  EXPECT_EQ(groupOf(p, logits).kind, FusionKind::MatMul);
  EXPECT_EQ(groupOf(p, marker).kind, FusionKind::None);
  EXPECT_EQ(groupOf(p, seed).kind, FusionKind::None);
}

TEST(FusionGrouping, AccumulateTakesTheCastProducingTheGradient) {
  GraphBuilder b;
  int x = b.source({4, 4});
  int other = b.source({4, 4});
  int grad = b.matmul(x, x, {4, 4});
  int widened = b.elementwise("graph.cast", {grad}, FusionRole::WideningCast);
  int tied = b.elementwise("graph.add", {widened, other}, FusionRole::Add);
  int accumulate =
      b.op("graph.accumulate_grad", FusionOpClass::Accumulate, FusionRole::None, {tied}, {});
  // A gradient read elsewhere stays with its own kernel.
  int shared = b.elementwise("graph.cast", {grad}, FusionRole::Cast);
  int accumulate2 =
      b.op("graph.accumulate_grad", FusionOpClass::Accumulate, FusionRole::None, {shared}, {});
  int reader = b.elementwise("graph.exp", {shared});
  b.ret({reader});
  FusionPlan p = plan(b.graph);
  EXPECT_EQ(groupOf(p, accumulate).kind, FusionKind::Accumulate);
  EXPECT_EQ(groupOf(p, accumulate).anchor, accumulate);
  EXPECT_EQ(groupOf(p, accumulate).ops, (std::vector<int>{widened, tied, accumulate}));
  EXPECT_EQ(groupOf(p, accumulate2).ops, (std::vector<int>{accumulate2}));
  EXPECT_NE(p.groupOf[grad], p.groupOf[accumulate]);
}

TEST(FusionGrouping, MatmulAccumulatesAnUnchangedGradientItself) {
  GraphBuilder b;
  int x = b.source({8, 4});
  int dy = b.source({8, 16});
  auto accumulateOf = [&](int grad, bool unchanged) {
    int index =
        b.op("graph.accumulate_grad", FusionOpClass::Accumulate, FusionRole::None, {grad}, {});
    b.graph.ops[index].addsUnchanged = unchanged;
    b.graph.ops[index].unscalesF32 = !unchanged;
    return index;
  };
  // dw = x^T dy, added into its accumulator as it is: one cuBLASLt call with beta = 1.
  int dw = b.matmul(x, dy, {4, 16}, true, false);
  int accumulate = accumulateOf(dw, true);
  // Divided by a loss scale as it is added (cuBLASLt's alpha is not the device's scale): a
  // kernel of its own.
  int scaled = b.matmul(x, dy, {4, 16}, true, false);
  int unscale = accumulateOf(scaled, false);
  // A product read by something else besides its accumulation is written out.
  int shared = b.matmul(x, dy, {4, 16}, true, false);
  int accumulateShared = accumulateOf(shared, true);
  int reader = b.elementwise("graph.exp", {shared});
  b.ret({reader});
  FusionPlan p = plan(b.graph);
  const FusionGroup &group = groupOf(p, dw);
  EXPECT_EQ(group.kind, FusionKind::MatMulAccumulate);
  EXPECT_EQ(group.anchor, dw);
  EXPECT_EQ(group.ops, (std::vector<int>{dw, accumulate}));
  EXPECT_TRUE(group.outputs.empty()) << "the product is never written out";
  EXPECT_EQ(groupOf(p, unscale).kind, FusionKind::Accumulate);
  EXPECT_EQ(groupOf(p, scaled).kind, FusionKind::MatMul);
  EXPECT_EQ(groupOf(p, accumulateShared).kind, FusionKind::Accumulate);
  EXPECT_EQ(groupOf(p, shared).kind, FusionKind::MatMul);
}

TEST(FusionGrouping, BiasGradientMatmulAccumulatesToo) {
  GraphBuilder b;
  int x = b.source({8, 4});
  int dy = b.elementwise("graph.neg", {b.source({8, 16})});
  int db = b.sum(dy, {0}, {16});
  int accumulateBias =
      b.op("graph.accumulate_grad", FusionOpClass::Accumulate, FusionRole::None, {db}, {});
  int dw = b.matmul(x, dy, {4, 16}, true, false);
  int accumulate =
      b.op("graph.accumulate_grad", FusionOpClass::Accumulate, FusionRole::None, {dw}, {});
  b.graph.ops[accumulate].addsUnchanged = true;
  b.graph.ops[accumulateBias].addsUnchanged = true;
  b.ret({});
  FusionPlan p = plan(b.graph);
  const FusionGroup &group = groupOf(p, dw);
  EXPECT_EQ(group.kind, FusionKind::BiasGrad);
  EXPECT_EQ(group.anchor, dw);
  // The bias sum's accumulate_grad joins too (the sum's second stage adds into the
  // accumulator): neither gradient is written out.
  EXPECT_EQ(group.ops, (std::vector<int>{db, accumulateBias, dw, accumulate}));
  EXPECT_TRUE(group.outputs.empty());
}

TEST(FusionGrouping, ColumnSumAccumulatesOnlyAnF32GradientReadByNothingElse) {
  GraphBuilder b;
  int dy = b.elementwise("graph.neg", {b.source({8, 16})});
  // A sum over the leading axis whose accumulate adds a 16-bit gradient (neither flag): a
  // kernel of its own.
  int scaled = b.sum(dy, {0}, {16});
  int unscale =
      b.op("graph.accumulate_grad", FusionOpClass::Accumulate, FusionRole::None, {scaled}, {});
  // One that divides an f32 gradient by the loss scale: the sum's second stage does it.
  int unscaledSum = b.sum(b.elementwise("graph.cos", {dy}), {0}, {16});
  int accumulateUnscaled =
      b.op("graph.accumulate_grad", FusionOpClass::Accumulate, FusionRole::None, {unscaledSum}, {});
  b.graph.ops[accumulateUnscaled].unscalesF32 = true;
  // A sum read by its accumulate and something else: its result is written anyway.
  int shared = b.sum(b.elementwise("graph.exp", {dy}), {0}, {16});
  int accumulateShared =
      b.op("graph.accumulate_grad", FusionOpClass::Accumulate, FusionRole::None, {shared}, {});
  b.graph.ops[accumulateShared].addsUnchanged = true;
  int reader = b.elementwise("graph.neg", {shared});
  // A sum over the last axis (one block per output element, no column totals).
  int rows = b.sum(b.elementwise("graph.tanh", {dy}), {1}, {8});
  int accumulateRows =
      b.op("graph.accumulate_grad", FusionOpClass::Accumulate, FusionRole::None, {rows}, {});
  b.graph.ops[accumulateRows].addsUnchanged = true;
  // A leading sum read only by an unchanged accumulate: one group.
  int plainSum = b.sum(b.elementwise("graph.sin", {dy}), {0}, {16});
  int accumulatePlain =
      b.op("graph.accumulate_grad", FusionOpClass::Accumulate, FusionRole::None, {plainSum}, {});
  b.graph.ops[accumulatePlain].addsUnchanged = true;
  b.ret({reader});
  FusionPlan p = plan(b.graph);
  EXPECT_EQ(groupOf(p, unscale).kind, FusionKind::Accumulate);
  EXPECT_EQ(groupOf(p, accumulateShared).kind, FusionKind::Accumulate);
  EXPECT_EQ(groupOf(p, accumulateRows).kind, FusionKind::Accumulate);
  EXPECT_NE(p.groupOf[scaled], p.groupOf[unscale]);
  EXPECT_NE(p.groupOf[shared], p.groupOf[accumulateShared]);
  EXPECT_NE(p.groupOf[rows], p.groupOf[accumulateRows]);
  EXPECT_EQ(p.groupOf[plainSum], p.groupOf[accumulatePlain]);
  EXPECT_EQ(p.groupOf[unscaledSum], p.groupOf[accumulateUnscaled]);
  EXPECT_TRUE(groupOf(p, unscaledSum).outputs.empty());
  EXPECT_EQ(groupOf(p, plainSum).kind, FusionKind::Reduction);
  EXPECT_EQ(groupOf(p, plainSum).anchor, plainSum);
  EXPECT_TRUE(groupOf(p, plainSum).outputs.empty());
}

TEST(FusionGrouping, NormGradientParametersAccumulateInTheirColumnSums) {
  GraphBuilder b;
  int x = b.source({8, 16}), gamma = b.source({16}), dy = b.source({8, 16});
  // layernorm_grad: (dx, dgamma, dbeta).
  int grad = b.op("graph.layernorm_grad", FusionOpClass::Reduction, FusionRole::NormGrad,
                  {x, gamma, dy}, {{8, 16}, {16}, {16}});
  int accumulateGamma =
      b.op("graph.accumulate_grad", FusionOpClass::Accumulate, FusionRole::None, {}, {});
  b.graph.ops[accumulateGamma].operands.push_back(b.graph.operand(grad, 1));
  int accumulateBeta =
      b.op("graph.accumulate_grad", FusionOpClass::Accumulate, FusionRole::None, {}, {});
  b.graph.ops[accumulateBeta].operands.push_back(b.graph.operand(grad, 2));
  b.graph.ops[accumulateGamma].addsUnchanged = b.graph.ops[accumulateBeta].addsUnchanged = true;
  b.ret({grad});
  FusionPlan p = plan(b.graph);
  const FusionGroup &group = groupOf(p, grad);
  EXPECT_EQ(group.kind, FusionKind::Reduction);
  EXPECT_EQ(group.anchor, grad);
  EXPECT_EQ(group.ops, (std::vector<int>{grad, accumulateGamma, accumulateBeta}));
  // Only dx leaves the group.
  EXPECT_EQ(group.outputs, (std::vector<FusionValue>{FusionValue{grad, 0}}));
}

TEST(FusionGrouping, EveryOptimizerUpdateIsOneKernel) {
  GraphBuilder b;
  int norm = b.op("graph.global_norm", FusionOpClass::Other, FusionRole::None, {}, {{}});
  int lr = b.op("graph.lr_schedule", FusionOpClass::Other, FusionRole::None, {}, {{}});
  std::vector<int> updates;
  for (int i = 0; i < 4; ++i)
    updates.push_back(
        b.op("graph.adamw", FusionOpClass::Optimizer, FusionRole::None, {lr, norm}, {}));
  int scale = b.op("graph.update_loss_scale", FusionOpClass::Other, FusionRole::None, {}, {});
  b.graph.ops[scale].orderAfter = updates;
  b.ret({norm, lr});
  FusionPlan p = plan(b.graph);
  EXPECT_EQ(groupOf(p, updates[0]).kind, FusionKind::Optimizer);
  EXPECT_EQ(groupOf(p, updates[0]).ops, updates);
  EXPECT_EQ(p.groups.size(), 5u); // norm, lr, the updates, the scale update, return
}

TEST(FusionGrouping, OrderEdgesKeepUpdatesApart) {
  // The second update must run after an op that must run after the first: one kernel holding
  // both could run neither before nor after that op.
  GraphBuilder b;
  int lr = b.source({});
  int first = b.op("graph.sgd", FusionOpClass::Optimizer, FusionRole::None, {lr}, {});
  int between = b.op("graph.update_loss_scale", FusionOpClass::Other, FusionRole::None, {}, {});
  b.graph.ops[between].orderAfter = {first};
  int second = b.op("graph.sgd", FusionOpClass::Optimizer, FusionRole::None, {lr}, {});
  b.graph.ops[second].orderAfter = {between};
  FusionPlan p = plan(b.graph);
  EXPECT_NE(p.groupOf[first], p.groupOf[second]);
}

} // namespace
