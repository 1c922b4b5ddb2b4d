//===- FusionGroupingTest.cpp - the fusion grouping on hand-built graphs --===//
//
// One hand-built graph per rule of passes/FusionGrouping.h (elementwise chains, reductions with
// their producers and consumers, matmul epilogues and what they must not absorb, bias
// gradients, cross-entropy, accumulation, the optimizer, copies), the guarantees every grouping
// keeps (no cycle between groups, outputs listed, determinism), and graph-fuse on the tiny GPT's
// training step.
//
//===--------------------------------------------------------------------------===//

#include "passes/FusionGrouping.h"

#include "CompileHelpers.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/Pass/PassManager.h"

#include <gtest/gtest.h>

#include <map>
#include <set>

using namespace ampc::graph;

namespace {

/// Builds a FusionGraph op by op.
struct GraphBuilder {
  FusionGraph graph;

  int op(const std::string &name, FusionOpClass opClass, FusionRole role,
         const std::vector<int> &inputs, std::vector<FusionShape> results) {
    FusionOp node;
    node.name = name;
    node.opClass = opClass;
    node.role = role;
    for (int input : inputs)
      node.operands.push_back(graph.operand(input));
    node.results = std::move(results);
    return graph.add(std::move(node));
  }
  /// A value with no kernel of its own (get_input, get_param).
  int source(const FusionShape &shape) {
    return op("graph.get_input", FusionOpClass::Other, FusionRole::None, {}, {shape});
  }
  /// An elementwise op with the shape of its first operand.
  int elementwise(const std::string &name, const std::vector<int> &inputs,
                  FusionRole role = FusionRole::None) {
    return op(name, FusionOpClass::Elementwise, role, inputs, {shapeOf(inputs[0])});
  }
  int matmul(int lhs, int rhs, const FusionShape &result, bool transposeLhs = false,
             bool transposeRhs = false) {
    int index = op("graph.matmul", FusionOpClass::MatMul, FusionRole::None, {lhs, rhs}, {result});
    graph.ops[index].transposeLhs = transposeLhs;
    graph.ops[index].transposeRhs = transposeRhs;
    return index;
  }
  int sum(int input, std::vector<int64_t> axes, const FusionShape &result) {
    int index = op("graph.sum", FusionOpClass::Reduction, FusionRole::Sum, {input}, {result});
    graph.ops[index].axes = std::move(axes);
    return index;
  }
  /// func.return of the given values.
  int ret(const std::vector<int> &inputs) {
    return op("func.return", FusionOpClass::Other, FusionRole::None, inputs, {});
  }
  const FusionShape &shapeOf(int op) const { return graph.ops[op].results[0]; }
};

/// Plans `graph` and checks the grouping is valid and deterministic.
FusionPlan plan(const FusionGraph &graph) {
  FusionPlan result = planFusion(graph);
  auto problem = checkFusionPlan(graph, result);
  EXPECT_FALSE(problem) << *problem;
  EXPECT_EQ(planFusion(graph).groupOf, result.groupOf) << "the grouping is not deterministic";
  return result;
}

const FusionGroup &groupOf(const FusionPlan &plan, int op) { return plan.groups[plan.groupOf[op]]; }

std::vector<FusionValue> values(std::initializer_list<int> ops) {
  std::vector<FusionValue> result;
  for (int op : ops)
    result.push_back(FusionValue{op, 0});
  return result;
}

//===----------------------------------------------------------------------===//
// Elementwise chains
//===----------------------------------------------------------------------===//

TEST(FusionGrouping, ElementwiseChainIsOneKernel) {
  GraphBuilder b;
  int x = b.source({4, 8});
  int bias = b.source({8});
  int e = b.elementwise("graph.exp", {x});
  int m = b.elementwise("graph.mul", {e, e});
  // A smaller operand from outside is read broadcast into the group's iteration space.
  int a = b.elementwise("graph.add", {m, bias}, FusionRole::Add);
  b.ret({a});
  FusionPlan p = plan(b.graph);
  EXPECT_EQ(p.groupOf[e], p.groupOf[m]);
  EXPECT_EQ(p.groupOf[e], p.groupOf[a]);
  EXPECT_NE(p.groupOf[x], p.groupOf[e]);
  EXPECT_EQ(groupOf(p, e).kind, FusionKind::Elementwise);
  EXPECT_EQ(groupOf(p, e).ops, (std::vector<int>{e, m, a}));
  EXPECT_EQ(groupOf(p, e).anchor, e);
  EXPECT_EQ(groupOf(p, e).outputs, values({a}));
  // Sources and the return run no kernel; each is a group of its own.
  EXPECT_EQ(groupOf(p, x).kind, FusionKind::None);
  EXPECT_EQ(p.groups.size(), 4u);
}

TEST(FusionGrouping, ElementwiseOnlyFusesOverTheSameElementCount) {
  GraphBuilder b;
  int row = b.source({8});
  int x = b.source({4, 8});
  // exp over 8 elements, then its result broadcast into an add over 32: different spaces.
  int small = b.elementwise("graph.exp", {row});
  int big = b.op("graph.add", FusionOpClass::Elementwise, FusionRole::Add, {x, small}, {{4, 8}});
  int after = b.elementwise("graph.neg", {big});
  b.ret({after});
  FusionPlan p = plan(b.graph);
  EXPECT_NE(p.groupOf[small], p.groupOf[big]);
  EXPECT_EQ(p.groupOf[big], p.groupOf[after]);
  EXPECT_EQ(groupOf(p, small).outputs, values({small}));
}

TEST(FusionGrouping, BroadcastReadOnlyByTheGroupJoinsIt) {
  GraphBuilder b;
  int x = b.source({4, 8});
  int row = b.source({8});
  int wide =
      b.op("graph.broadcast", FusionOpClass::DataMovement, FusionRole::Broadcast, {row}, {{4, 8}});
  int e = b.elementwise("graph.exp", {x});
  int sum = b.elementwise("graph.add", {e, wide}, FusionRole::Add);
  b.ret({sum});
  FusionPlan p = plan(b.graph);
  EXPECT_EQ(p.groupOf[wide], p.groupOf[e]);
  EXPECT_EQ(p.groupOf[sum], p.groupOf[e]);
  EXPECT_EQ(groupOf(p, e).kind, FusionKind::Elementwise);
}

//===----------------------------------------------------------------------===//
// Reductions
//===----------------------------------------------------------------------===//

TEST(FusionGrouping, ReductionTakesItsProducersAndConsumers) {
  GraphBuilder b;
  int x = b.source({4, 8});
  int gain = b.source({8});
  int shift = b.source({8});
  int residual = b.source({4, 8});
  // bf16 -> f32, layernorm, f32 -> bf16, residual add: one kernel.
  int widened = b.elementwise("graph.cast", {x}, FusionRole::WideningCast);
  int norm = b.op("graph.layernorm", FusionOpClass::Reduction, FusionRole::None,
                  {widened, gain, shift}, {{4, 8}});
  int narrowed = b.elementwise("graph.cast", {norm}, FusionRole::Cast);
  int added = b.elementwise("graph.add", {narrowed, residual}, FusionRole::Add);
  b.ret({added});
  FusionPlan p = plan(b.graph);
  const FusionGroup &group = groupOf(p, norm);
  EXPECT_EQ(group.kind, FusionKind::Reduction);
  EXPECT_EQ(group.anchor, norm);
  EXPECT_EQ(group.ops, (std::vector<int>{widened, norm, narrowed, added}));
  EXPECT_EQ(group.outputs, values({added}));
}

TEST(FusionGrouping, ReductionLeavesAProducerReadElsewhere) {
  GraphBuilder b;
  int x = b.source({4, 8});
  int gain = b.source({8});
  int widened = b.elementwise("graph.cast", {x}, FusionRole::WideningCast);
  int norm =
      b.op("graph.rmsnorm", FusionOpClass::Reduction, FusionRole::None, {widened, gain}, {{4, 8}});
  // The backward pass reads the widened input too: it must be written out by its own kernel,
  // not recomputed inside the norm.
  int other = b.elementwise("graph.exp", {widened});
  b.ret({norm, other});
  FusionPlan p = plan(b.graph);
  EXPECT_NE(p.groupOf[widened], p.groupOf[norm]);
  EXPECT_EQ(p.groupOf[widened], p.groupOf[other]);
  EXPECT_EQ(groupOf(p, widened).outputs, values({widened, other}));
}

TEST(FusionGrouping, ReductionConsumersKeepTheReducedSpace) {
  GraphBuilder b;
  int x = b.source({4, 8});
  int big = b.source({4, 8});
  int total = b.sum(x, {1}, {4});
  // Over the 4 sums: fused. Broadcasting the sums back over 32 elements: not fused.
  int scaled = b.elementwise("graph.mul", {total, total});
  int spread =
      b.op("graph.sub", FusionOpClass::Elementwise, FusionRole::None, {big, scaled}, {{4, 8}});
  b.ret({spread});
  FusionPlan p = plan(b.graph);
  EXPECT_EQ(p.groupOf[total], p.groupOf[scaled]);
  EXPECT_NE(p.groupOf[total], p.groupOf[spread]);
  EXPECT_EQ(groupOf(p, total).kind, FusionKind::Reduction);
}

//===----------------------------------------------------------------------===//
// Matmul epilogues
//===----------------------------------------------------------------------===//

TEST(FusionGrouping, MatMulAbsorbsBiasAndTanhGelu) {
  GraphBuilder b;
  int x = b.source({2, 4, 8});
  int w = b.source({8, 16});
  int bias = b.source({16});
  int product = b.matmul(x, w, {2, 4, 16});
  int biased = b.elementwise("graph.add", {product, bias}, FusionRole::Add);
  int gelu = b.elementwise("graph.gelu", {biased}, FusionRole::TanhGelu);
  // The backward pass reads the pre-activation: cuBLASLt writes it out as GELU_AUX.
  int grad = b.elementwise("graph.gelu_grad", {biased, gelu});
  b.ret({grad});
  FusionPlan p = plan(b.graph);
  const FusionGroup &group = groupOf(p, product);
  EXPECT_EQ(group.kind, FusionKind::MatMulEpilogue);
  EXPECT_EQ(group.anchor, product);
  EXPECT_EQ(group.ops, (std::vector<int>{product, biased, gelu}));
  EXPECT_EQ(group.outputs, values({biased, gelu}));
  EXPECT_NE(p.groupOf[grad], p.groupOf[product]);
}

TEST(FusionGrouping, MatMulWithBiasOnly) {
  GraphBuilder b;
  int x = b.source({4, 8});
  int w = b.source({8, 16});
  int bias = b.source({16});
  int product = b.matmul(x, w, {4, 16});
  // The bias may be the left operand of the add.
  int biased =
      b.op("graph.add", FusionOpClass::Elementwise, FusionRole::Add, {bias, product}, {{4, 16}});
  int relu = b.elementwise("graph.relu", {biased});
  b.ret({relu});
  FusionPlan p = plan(b.graph);
  EXPECT_EQ(groupOf(p, product).kind, FusionKind::MatMulEpilogue);
  EXPECT_EQ(groupOf(p, product).ops, (std::vector<int>{product, biased}));
  EXPECT_EQ(groupOf(p, relu).kind, FusionKind::Elementwise);
}

TEST(FusionGrouping, BiasNotOverTheLastDimensionIsNotAbsorbed) {
  GraphBuilder b;
  int x = b.source({8, 8});
  int w = b.source({8, 8});
  // A column of 8 added along the rows (shape [8, 1]): not a cuBLASLt bias.
  int column = b.source({8, 1});
  int product = b.matmul(x, w, {8, 8});
  int added = b.elementwise("graph.add", {product, column}, FusionRole::Add);
  b.ret({added});
  FusionPlan p = plan(b.graph);
  EXPECT_EQ(groupOf(p, product).kind, FusionKind::MatMul);
  EXPECT_EQ(groupOf(p, product).ops, (std::vector<int>{product}));
  EXPECT_NE(p.groupOf[added], p.groupOf[product]);
}

TEST(FusionGrouping, MatMulAbsorbsTheResidualAdd) {
  GraphBuilder b;
  int x = b.source({2, 4, 8});
  int w = b.source({8, 16});
  int bias = b.source({16});
  int stream = b.source({2, 4, 16}); // the residual stream
  // x W + b + residual: cuBLASLt's bias epilogue with C = the residual, beta 1.
  int product = b.matmul(x, w, {2, 4, 16});
  int biased = b.elementwise("graph.add", {product, bias}, FusionRole::Add);
  int summed = b.op("graph.add", FusionOpClass::Elementwise, FusionRole::Add, {stream, biased},
                    {{2, 4, 16}});
  // x W + residual, no bias.
  int product2 = b.matmul(x, w, {2, 4, 16});
  int summed2 = b.elementwise("graph.add", {product2, summed}, FusionRole::Add);
  // After a gelu: no residual (cuBLASLt adds C before the activation).
  int product3 = b.matmul(x, w, {2, 4, 16});
  int biased3 = b.elementwise("graph.add", {product3, bias}, FusionRole::Add);
  int gelu3 = b.elementwise("graph.gelu", {biased3}, FusionRole::TanhGelu);
  int summed3 = b.elementwise("graph.add", {gelu3, summed2}, FusionRole::Add);
  // A biased sum read twice: it must be stored, so the residual stays out.
  int product4 = b.matmul(x, w, {2, 4, 16});
  int biased4 = b.elementwise("graph.add", {product4, bias}, FusionRole::Add);
  int summed4 = b.elementwise("graph.add", {biased4, summed3}, FusionRole::Add);
  int other4 = b.elementwise("graph.exp", {biased4});
  b.ret({summed4, other4});
  FusionPlan p = plan(b.graph);
  EXPECT_EQ(groupOf(p, product).kind, FusionKind::MatMulEpilogue);
  EXPECT_EQ(groupOf(p, product).ops, (std::vector<int>{product, biased, summed}));
  EXPECT_EQ(groupOf(p, product).outputs, values({summed}));
  EXPECT_EQ(groupOf(p, product2).kind, FusionKind::MatMulEpilogue);
  EXPECT_EQ(groupOf(p, product2).ops, (std::vector<int>{product2, summed2}));
  EXPECT_EQ(groupOf(p, product3).ops, (std::vector<int>{product3, biased3, gelu3}));
  EXPECT_NE(p.groupOf[summed3], p.groupOf[product3]);
  EXPECT_EQ(groupOf(p, product4).ops, (std::vector<int>{product4, biased4}));
  EXPECT_NE(p.groupOf[summed4], p.groupOf[product4]);
}

TEST(FusionGrouping, EpilogueNeedsTheProductReadOnlyByTheBiasAdd) {
  GraphBuilder b;
  int x = b.source({4, 8});
  int w = b.source({8, 16});
  int bias = b.source({16});
  int product = b.matmul(x, w, {4, 16});
  int biased = b.elementwise("graph.add", {product, bias}, FusionRole::Add);
  // The product is read twice: cuBLASLt cannot write it before the bias.
  int other = b.elementwise("graph.exp", {product});
  int gelu = b.elementwise("graph.gelu", {biased}, FusionRole::TanhGelu);
  b.ret({gelu, other});
  FusionPlan p = plan(b.graph);
  EXPECT_EQ(groupOf(p, product).kind, FusionKind::MatMul);
  EXPECT_NE(p.groupOf[biased], p.groupOf[product]);
}

TEST(FusionGrouping, EpilogueStopsBeforeAnErfGelu) {
  GraphBuilder b;
  int x = b.source({4, 8});
  int w = b.source({8, 16});
  int bias = b.source({16});
  int product = b.matmul(x, w, {4, 16});
  int biased = b.elementwise("graph.add", {product, bias}, FusionRole::Add);
  int gelu = b.elementwise("graph.gelu", {biased});
  b.ret({gelu});
  FusionPlan p = plan(b.graph);
  EXPECT_EQ(groupOf(p, product).kind, FusionKind::MatMulEpilogue);
  EXPECT_EQ(groupOf(p, product).ops, (std::vector<int>{product, biased}));
  EXPECT_EQ(groupOf(p, gelu).kind, FusionKind::Elementwise);
}

TEST(FusionGrouping, GeluGradientJoinsTheMatmulProducingItsIncomingGradient) {
  GraphBuilder b;
  int pre = b.source({2, 4, 16}); // the gelu's input, saved by the forward
  int dy = b.source({2, 4, 32});
  int w = b.source({16, 32});
  int product = b.matmul(dy, w, {2, 4, 16}, false, true);
  int grad = b.elementwise("graph.gelu_grad", {pre, product}, FusionRole::TanhGeluGrad);
  int cast = b.elementwise("graph.cast", {grad}, FusionRole::WideningCast);
  b.ret({grad, cast});
  FusionPlan p = plan(b.graph);
  const FusionGroup &group = groupOf(p, product);
  EXPECT_EQ(group.kind, FusionKind::MatMulEpilogue);
  EXPECT_EQ(group.anchor, product);
  EXPECT_EQ(group.ops, (std::vector<int>{product, grad}));
  // The product itself is never written: DGELU stores only the gradient.
  EXPECT_EQ(group.outputs, values({grad}));
  EXPECT_EQ(groupOf(p, cast).kind, FusionKind::Elementwise);
}

TEST(FusionGrouping, GeluGradientEpilogueNeedsItsShapeAndTheOnlyReader) {
  GraphBuilder b;
  int w = b.source({16, 32});
  // The product read elsewhere too: cuBLASLt would have to write it before the gradient.
  int pre = b.source({4, 16});
  int dy = b.source({4, 32});
  int product = b.matmul(dy, w, {4, 16}, false, true);
  int grad = b.elementwise("graph.gelu_grad", {pre, product}, FusionRole::TanhGeluGrad);
  int other = b.elementwise("graph.exp", {product});
  // The product as the gelu's input rather than its incoming gradient.
  int dy2 = b.source({4, 16});
  int product2 = b.matmul(dy, w, {4, 16}, false, true);
  int grad2 = b.elementwise("graph.gelu_grad", {product2, dy2}, FusionRole::TanhGeluGrad);
  // A last dimension that is not a multiple of 8: cuBLASLt's aux row stride.
  int pre3 = b.source({4, 12});
  int w3 = b.source({12, 32});
  int product3 = b.matmul(dy, w3, {4, 12}, false, true);
  int grad3 = b.elementwise("graph.gelu_grad", {pre3, product3}, FusionRole::TanhGeluGrad);
  // An erf gelu's gradient has no role: cuBLASLt's DGELU is the tanh form's.
  int product4 = b.matmul(dy, w, {4, 16}, false, true);
  int grad4 = b.elementwise("graph.gelu_grad", {pre, product4});
  b.ret({grad, other, grad2, grad3, grad4});
  FusionPlan p = plan(b.graph);
  for (auto [matmul, reader] : {std::pair{product, grad}, std::pair{product2, grad2},
                                std::pair{product3, grad3}, std::pair{product4, grad4}}) {
    EXPECT_EQ(groupOf(p, matmul).kind, FusionKind::MatMul) << "matmul " << matmul;
    EXPECT_NE(p.groupOf[reader], p.groupOf[matmul]) << "matmul " << matmul;
  }
}

//===----------------------------------------------------------------------===//
// Bias gradients
//===----------------------------------------------------------------------===//

TEST(FusionGrouping, BiasGradientSumJoinsTheWeightGradientMatmul) {
  GraphBuilder b;
  int x = b.source({2, 4, 8});
  int w = b.source({8, 16});
  int dy = b.elementwise("graph.neg", {b.source({2, 4, 16})});
  // db = sum over the rows of dy (in f32); dw = x^T dy over the same rows; dx = dy w^T.
  int widened = b.elementwise("graph.cast", {dy}, FusionRole::WideningCast);
  int db = b.sum(widened, {0, 1}, {16});
  int dx = b.matmul(dy, w, {2, 4, 8}, false, true);
  int xRows =
      b.op("graph.reshape", FusionOpClass::DataMovement, FusionRole::Reshape, {x}, {{8, 8}});
  int dyRows =
      b.op("graph.reshape", FusionOpClass::DataMovement, FusionRole::Reshape, {dy}, {{8, 16}});
  int dw = b.matmul(xRows, dyRows, {8, 16}, true, false);
  b.ret({db, dx, dw});
  FusionPlan p = plan(b.graph);
  const FusionGroup &group = groupOf(p, dw);
  EXPECT_EQ(group.kind, FusionKind::BiasGrad);
  EXPECT_EQ(group.anchor, dw);
  // The reshapes only the matmul reads are views it reads through.
  EXPECT_EQ(group.ops, (std::vector<int>{widened, db, xRows, dyRows, dw}));
  EXPECT_EQ(group.outputs, values({db, dw}));
  EXPECT_EQ(groupOf(p, dx).kind, FusionKind::MatMul);
}

TEST(FusionGrouping, SumOverColumnsIsNotABiasGradient) {
  GraphBuilder b;
  int x = b.source({8, 8});
  int dy = b.elementwise("graph.neg", {b.source({8, 16})});
  int rowSums = b.sum(dy, {1}, {8});
  int dw = b.matmul(x, dy, {8, 16}, true, false);
  b.ret({rowSums, dw});
  FusionPlan p = plan(b.graph);
  EXPECT_EQ(groupOf(p, dw).kind, FusionKind::MatMul);
  EXPECT_EQ(groupOf(p, rowSums).kind, FusionKind::Reduction);
}

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

//===----------------------------------------------------------------------===//
// Guarantees
//===----------------------------------------------------------------------===//

TEST(FusionGrouping, DiamondThroughAMatmulIsNotFused) {
  // a = exp(x); m = a @ w; s = a * m. Fusing a and s would put the matmul both after and
  // before one kernel.
  GraphBuilder b;
  int x = b.source({4, 4});
  int w = b.source({4, 4});
  int a = b.elementwise("graph.exp", {x});
  int m = b.matmul(a, w, {4, 4});
  int s = b.elementwise("graph.mul", {a, m});
  b.ret({s});
  FusionPlan p = plan(b.graph);
  EXPECT_NE(p.groupOf[a], p.groupOf[s]);
  EXPECT_EQ(groupOf(p, a).outputs, values({a}));

  // The checker rejects the grouping that would have fused them.
  FusionPlan bad = p;
  int merged = bad.groupOf[a], dropped = bad.groupOf[s];
  bad.groupOf[s] = merged;
  bad.groups[merged].ops.push_back(s);
  bad.groups[merged].outputs = values({a, s});
  bad.groups.erase(bad.groups.begin() + dropped);
  for (int &group : bad.groupOf)
    if (group > dropped)
      --group;
  auto problem = checkFusionPlan(b.graph, bad);
  ASSERT_TRUE(problem);
  EXPECT_NE(problem->find("cycle"), std::string::npos) << *problem;
}

TEST(FusionGrouping, DiamondThroughAReductionIsNotFused) {
  // The consumer of a reduction also reads, through another reduction, a value the first
  // reduction's group produces: absorbing it would close a cycle.
  GraphBuilder b;
  int x = b.source({4, 8});
  int norm = b.op("graph.softmax", FusionOpClass::Reduction, FusionRole::None, {x}, {{4, 8}});
  int rowSums = b.sum(norm, {1}, {4});
  int back = b.op("graph.broadcast", FusionOpClass::DataMovement, FusionRole::Broadcast, {rowSums},
                  {{4, 8}});
  int divided =
      b.op("graph.div", FusionOpClass::Elementwise, FusionRole::None, {norm, back}, {{4, 8}});
  b.ret({divided});
  FusionPlan p = plan(b.graph);
  EXPECT_NE(p.groupOf[norm], p.groupOf[divided]);
}

TEST(FusionGrouping, MultiOutputGroupListsEveryValueReadOutside) {
  GraphBuilder b;
  int x = b.source({4, 8});
  int e = b.elementwise("graph.exp", {x});
  int n = b.elementwise("graph.neg", {e});
  int t = b.elementwise("graph.tanh", {n});
  // e and n are read outside the chain as well: both are written out.
  int rowSums = b.sum(e, {1}, {4});
  int product = b.matmul(n, b.source({8, 8}), {4, 8});
  b.ret({t, rowSums, product});
  FusionPlan p = plan(b.graph);
  const FusionGroup &group = groupOf(p, e);
  EXPECT_EQ(group.kind, FusionKind::Elementwise);
  EXPECT_EQ(group.ops, (std::vector<int>{e, n, t}));
  EXPECT_EQ(group.outputs, values({e, n, t}));
  EXPECT_NE(p.groupOf[rowSums], p.groupOf[e]);
}

TEST(FusionGrouping, CopyChainsThroughReshapesAreOneGather) {
  // split -> reshape -> transpose, three times (the heads of q, k, v).
  GraphBuilder b;
  int qkv = b.source({2, 4, 24});
  int split = b.op("graph.split", FusionOpClass::DataMovement, FusionRole::None, {qkv},
                   {{2, 4, 8}, {2, 4, 8}, {2, 4, 8}});
  std::vector<int> heads;
  std::vector<int> chain = {split};
  for (int i = 0; i < 3; ++i) {
    FusionOp reshape;
    reshape.name = "graph.reshape";
    reshape.opClass = FusionOpClass::DataMovement;
    reshape.role = FusionRole::Reshape;
    reshape.operands = {b.graph.operand(split, i)};
    reshape.results = {{2, 4, 2, 4}};
    int r = b.graph.add(reshape);
    int t =
        b.op("graph.transpose", FusionOpClass::DataMovement, FusionRole::None, {r}, {{2, 2, 4, 4}});
    heads.push_back(t);
    chain.push_back(r);
    chain.push_back(t);
  }
  int attention =
      b.op("graph.attention", FusionOpClass::Attention, FusionRole::None, heads, {{2, 2, 4, 4}});
  int r = b.op("graph.reshape", FusionOpClass::DataMovement, FusionRole::Reshape, {attention},
               {{2, 2, 16}});
  b.ret({r});
  FusionPlan p = plan(b.graph);
  EXPECT_EQ(groupOf(p, split).kind, FusionKind::Copy);
  EXPECT_EQ(groupOf(p, split).ops, chain);
  EXPECT_EQ(groupOf(p, split).anchor, split);
  EXPECT_EQ(groupOf(p, split).outputs, values({heads[0], heads[1], heads[2]}));
  EXPECT_EQ(groupOf(p, attention).kind, FusionKind::Attention);
  // A reshape read by no kernel (only returned) is a view of its own.
  EXPECT_EQ(groupOf(p, r).kind, FusionKind::View);
}

TEST(FusionGrouping, ExternalValuesAndEmptyGraphs) {
  EXPECT_TRUE(planFusion(FusionGraph{}).groups.empty());
  // Function arguments (op -1) are read like any other input.
  FusionGraph graph;
  FusionOp e;
  e.name = "graph.exp";
  e.opClass = FusionOpClass::Elementwise;
  e.operands = {FusionOperand{FusionValue{-1, 0}, {4}}};
  e.results = {{4}};
  int first = graph.add(e);
  FusionOp n = e;
  n.name = "graph.neg";
  n.operands = {graph.operand(first)};
  graph.add(n);
  FusionPlan p = plan(graph);
  EXPECT_EQ(p.groups.size(), 1u);
  EXPECT_TRUE(p.groups[0].outputs.empty());
}

//===----------------------------------------------------------------------===//
// graph-fuse on the tiny GPT
//===----------------------------------------------------------------------===//

TEST(FusionGrouping, ScheduleRunsEachGroupAfterWhatItReads) {
  // The classifier's loss (op 2) and gradient (op 4) are one group, numbered by the loss; the
  // gradient reads the loss seed (op 3), a later-numbered group: that group must run first.
  GraphBuilder b;
  int logits = b.source({8, 10});
  int labels = b.source({8});
  int loss = b.op("graph.cross_entropy", FusionOpClass::Reduction, FusionRole::CrossEntropy,
                  {logits, labels}, {{}});
  int seed = b.op("graph.grad_seed", FusionOpClass::Other, FusionRole::None, {}, {{}});
  int grad = b.op("graph.cross_entropy_grad", FusionOpClass::Reduction,
                  FusionRole::CrossEntropyGrad, {logits, labels, seed}, {{8, 10}});
  b.ret({loss, grad});
  FusionPlan grouping = plan(b.graph);
  ASSERT_EQ(grouping.groupOf[loss], grouping.groupOf[grad]);
  std::vector<int> order = scheduleFusionGroups(b.graph, grouping);
  ASSERT_EQ(order.size(), grouping.groups.size());
  const int lossGroup = grouping.groupOf[loss], seedGroup = grouping.groupOf[seed];
  ASSERT_LT(lossGroup, seedGroup);
  std::vector<int> position(order.size());
  for (size_t i = 0; i < order.size(); ++i)
    position[order[i]] = static_cast<int>(i);
  EXPECT_LT(position[seedGroup], position[lossGroup]);
  // Every data edge points forward in the schedule; otherwise it keeps the numbering.
  for (size_t op = 0; op < b.graph.ops.size(); ++op)
    for (const FusionOperand &operand : b.graph.ops[op].operands)
      if (operand.value.op >= 0 && grouping.groupOf[operand.value.op] != grouping.groupOf[op])
        EXPECT_LT(position[grouping.groupOf[operand.value.op]], position[grouping.groupOf[op]]);
  EXPECT_EQ(order, (std::vector<int>{0, 1, seedGroup, lossGroup, seedGroup + 1}));
}

TEST(FusionGrouping, TinyGptTrainingStep) {
  mlir::MLIRContext context;
  ampc::registerModelDialects(context);
  llvm::SourceMgr sourceMgr;
  mlir::SourceMgrDiagnosticHandler handler(sourceMgr, &context);
  auto loaded =
      ampc::loadModel(ampc::test_support::examplePath("gpt/tiny.mlir"), sourceMgr, context);
  ASSERT_TRUE(succeeded(loaded));
  ModelOp model = loaded->model;
  GraphBuildTrainingOptions training;
  training.accumSteps = 2;
  ASSERT_TRUE(succeeded(ampc::buildTraining(model, training)));
  GraphAssignPrecisionOptions precision;
  precision.mode = "fp16";
  GraphInsertLossScalingOptions scaling;
  ASSERT_TRUE(succeeded(ampc::assignPrecision(model, precision, &scaling)));
  mlir::PassManager pm(&context, ModelOp::getOperationName());
  pm.addPass(createGraphFuse());
  ASSERT_TRUE(succeeded(pm.run(model)));

  const std::set<std::string> knownKinds = {
      "none",      "view",          "elementwise", "copy",
      "reduction", "cross_entropy", "matmul",      "matmul_epilogue",
      "bias_grad", "attention",     "accumulate",  "optimizer"};
  for (const char *name : {"micro_step", "optimizer_step"}) {
    SCOPED_TRACE(name);
    auto function = mlir::SymbolTable::lookupNearestSymbolFrom<mlir::func::FuncOp>(
        model, mlir::StringAttr::get(&context, name));
    ASSERT_TRUE(function);
    auto schedule = function->getAttrOfType<mlir::DenseI64ArrayAttr>(
        ampc::graph::GraphDialect::kFusionScheduleAttrName);
    ASSERT_TRUE(schedule);
    int64_t numGroups = schedule.size();
    // Every op has a group; groups are numbered by their first op; the ops of a group agree on
    // its kind.
    int64_t numOps = 0, nextGroup = 0;
    std::map<std::string, int> kinds;
    std::map<int64_t, ampc::graph::GroupKind> kindOf;
    for (mlir::Operation &op : function.getBody().front()) {
      ++numOps;
      auto fusion =
          op.getAttrOfType<ampc::graph::FusionAttr>(ampc::graph::GraphDialect::kFusionAttrName);
      ASSERT_TRUE(fusion) << "no group: " << op.getName().getStringRef().str();
      ASSERT_LE(fusion.getGroup(), nextGroup);
      auto [known, first] = kindOf.try_emplace(fusion.getGroup(), fusion.getKind());
      EXPECT_EQ(known->second, fusion.getKind());
      if (first) {
        std::string kind = ampc::graph::stringifyGroupKind(fusion.getKind()).str();
        EXPECT_TRUE(knownKinds.count(kind)) << kind;
        ++kinds[kind];
        ++nextGroup;
      }
    }
    EXPECT_EQ(nextGroup, numGroups);
    if (std::string(name) == "micro_step") {
      // Two layers: four matmuls with a bias epilogue each (the attention projection and the
      // second MLP matmul adding the residual as C) and one with the gelu's gradient (DGELU),
      // the tied head's weight gradient adding the embedding's (C), a bias gradient per bias,
      // one fused classifier, an accumulation kernel per weight matrix and for the tied
      // embedding (the 19 biases', norms' and positions' column totals are divided by the loss
      // scale and accumulated by their sums' second stages), and far fewer groups than ops.
      EXPECT_EQ(kinds["matmul_epilogue"], 11);
      EXPECT_EQ(kinds["bias_grad"], 8);
      EXPECT_EQ(kinds["cross_entropy"], 1);
      EXPECT_EQ(kinds["accumulate"], 9);
      EXPECT_EQ(kinds["attention"], 4);
      EXPECT_LT(numGroups * 3, numOps * 2) << numGroups << " groups for " << numOps << " ops";
    } else {
      // global_norm, lr_schedule, the updates, update_loss_scale, return.
      EXPECT_EQ(kinds["optimizer"], 1);
      EXPECT_EQ(numGroups, 5);
    }
  }
}

} // namespace
