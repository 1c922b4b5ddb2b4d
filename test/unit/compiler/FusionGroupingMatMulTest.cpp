//===- FusionGroupingMatMulTest.cpp - the fusion grouping around matmuls --===//
//
// The rules of passes/FusionGrouping.h that build cuBLASLt epilogues, on hand-built graphs: a
// matmul with its bias, tanh gelu or residual add, the gelu gradient's DGELU, and the bias
// gradient's column sum (BGRADA / BGRADB), with what each must not absorb.
//
//===--------------------------------------------------------------------------===//

#include "FusionGroupingHelpers.h"

#include <gtest/gtest.h>

using namespace ampc::graph;
using namespace ampc::test::fusion;

namespace {

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

} // namespace
