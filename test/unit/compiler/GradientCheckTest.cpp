//===- GradientCheckTest.cpp - backward pass against finite differences ---===//
//
// graph-build-training's gradients of the tensor ops, checked numerically by
// GradientCheckHelpers.h: elementwise binary ops with broadcasting, unary ops (activations,
// clip, cast), matmul with every transpose and batch broadcasting, data movement and
// reductions. The neural-network ops are in GradientCheckLayersTest.cpp, composites and the
// example models in GradientCheckModelsTest.cpp.
//
//===--------------------------------------------------------------------------===//

#include "GradientCheckHelpers.h"

#include <gtest/gtest.h>

using namespace ampc;
using namespace ampc::test::gradient_check;

namespace {

//===----------------------------------------------------------------------===//
// Elementwise binary ops with broadcasting
//===----------------------------------------------------------------------===//

struct BinaryCase {
  Shape lhs, rhs, out;
};

void checkBinary(const std::string &op, const BinaryCase &shapes) {
  SCOPED_TRACE(op + " " + tensorType(shapes.lhs) + ", " + tensorType(shapes.rhs));
  // The divisor stays away from zero.
  std::string rhsInit = op == "div" ? kPositive : "#graph.normal<std = 1.0>";
  std::string body = "    %y = graph." + op + " %a, %b : " + tensorType(shapes.lhs) + ", " +
                     tensorType(shapes.rhs) + "\n";
  expectGradientsMatch(opModel({{"a", shapes.lhs}, {"b", shapes.rhs, rhsInit}}, body, shapes.out));
}

const std::vector<BinaryCase> kBroadcastCases = {
    {{3, 4}, {3, 4}, {3, 4}},       // same shape
    {{3, 4}, {4}, {3, 4}},          // a vector over rows
    {{4}, {3, 4}, {3, 4}},          // the lhs broadcasts
    {{3, 1}, {1, 4}, {3, 4}},       // both stretch
    {{2, 3, 4}, {}, {2, 3, 4}},     // a scalar
    {{}, {2, 3}, {2, 3}},           // a scalar lhs
    {{2, 1, 4}, {3, 1}, {2, 3, 4}}, // rank and size-1 broadcasting together
};

TEST(GradientCheck, Add) {
  for (const BinaryCase &shapes : kBroadcastCases)
    checkBinary("add", shapes);
}

TEST(GradientCheck, Sub) {
  for (const BinaryCase &shapes : kBroadcastCases)
    checkBinary("sub", shapes);
}

TEST(GradientCheck, Mul) {
  for (const BinaryCase &shapes : kBroadcastCases)
    checkBinary("mul", shapes);
}

TEST(GradientCheck, Div) {
  for (const BinaryCase &shapes : kBroadcastCases)
    checkBinary("div", shapes);
}

/// x * x: both operands of one op are the same value, whose gradient is the sum of both.
TEST(GradientCheck, MulOfAValueWithItself) {
  expectGradientsMatch(opModel(
      {{"a", {3, 4}}}, "    %y = graph.mul %a, %a : tensor<3x4xf32>, tensor<3x4xf32>\n", {3, 4}));
}

//===----------------------------------------------------------------------===//
// Elementwise unary ops
//===----------------------------------------------------------------------===//

void checkUnary(const std::string &op, const std::string &init = "#graph.normal<std = 1.0>",
                const std::map<std::string, std::vector<double>> &values = {}) {
  SCOPED_TRACE(op);
  GradCheck check;
  check.parameters = values;
  expectGradientsMatch(
      opModel({{"a", {3, 5}, init}}, "    %y = graph." + op + " %a : tensor<3x5xf32>\n", {3, 5}),
      check);
}

TEST(GradientCheck, Neg) { checkUnary("neg"); }

TEST(GradientCheck, Relu) {
  // Inputs at least 0.25 from the kink, with both signs.
  checkUnary("relu", "#graph.zeros", {{"a", awayFromZero(15, 3)}});
}

TEST(GradientCheck, Silu) { checkUnary("silu"); }
TEST(GradientCheck, Sigmoid) { checkUnary("sigmoid"); }
TEST(GradientCheck, Softplus) { checkUnary("softplus", "#graph.normal<std = 4.0>"); }
TEST(GradientCheck, Hardsigmoid) {
  // Below -3 (flat), between -3 and 3, above 3 (flat), at least 0.2 from either kink.
  checkUnary(
      "hardsigmoid", "#graph.zeros",
      {{"a", {-5.1, -4.2, -3.3, -2.7, -2.1, -1.3, -0.4, 0.3, 0.9, 1.6, 2.2, 2.7, 3.4, 4.5, 6.2}}});
}
TEST(GradientCheck, Hardswish) {
  // Below -3, between -3 and 3 and above 3, at least 0.2 from either kink.
  checkUnary(
      "hardswish", "#graph.zeros",
      {{"a", {-5.1, -4.2, -3.3, -2.7, -2.1, -1.3, -0.4, 0.3, 0.9, 1.6, 2.2, 2.7, 3.4, 4.5, 6.2}}});
}
TEST(GradientCheck, Tanh) { checkUnary("tanh"); }
TEST(GradientCheck, Exp) { checkUnary("exp"); }
TEST(GradientCheck, Log) { checkUnary("log", kPositive); }
TEST(GradientCheck, Sqrt) { checkUnary("sqrt", kPositive); }
TEST(GradientCheck, Rsqrt) { checkUnary("rsqrt", kPositive); }
TEST(GradientCheck, GeluErf) { checkUnary("gelu erf"); }
TEST(GradientCheck, GeluTanh) { checkUnary("gelu tanh"); }

TEST(GradientCheck, Clip) {
  // Below, inside and above [-1, 2], at least 0.1 from either bound.
  GradCheck check;
  check.parameters = {
      {"a", {-2.5, -1.6, -1.1, -0.9, -0.4, 0.0, 0.3, 0.8, 1.2, 1.7, 1.9, 2.1, 2.6, 3.3, 5.0}}};
  expectGradientsMatch(
      opModel({{"a", {3, 5}, "#graph.zeros"}},
              "    %y = graph.clip %a {min = -1.0 : f64, max = 2.0 : f64} : tensor<3x5xf32>\n",
              {3, 5}),
      check);
}

/// f32 -> f32 is the only cast whose finite differences mean anything in fp64 (a cast to bf16
/// rounds, so its derivative is almost everywhere 0); its gradient is the identity.
TEST(GradientCheck, CastF32ToF32) {
  std::string body = "    %c = graph.cast %a : tensor<3x4xf32> -> tensor<3x4xf32>\n"
                     "    %y = graph.exp %c : tensor<3x4xf32>\n";
  std::string diagnostics;
  auto compiled = test_support::compileTrainingText(opModel({{"a", {3, 4}}}, body, {3, 4}),
                                                    singleStep(), &diagnostics);
  if (!compiled)
    GTEST_SKIP() << "an f32 -> f32 cast is not accepted: " << diagnostics;
  checkGradients(*compiled, {});
}

//===----------------------------------------------------------------------===//
// Matmul
//===----------------------------------------------------------------------===//

/// lhs [..., M, K] (or [..., K, M] transposed) times rhs [..., K, N] (or [..., N, K]).
void checkMatmul(Shape lhsBatch, Shape rhsBatch, Shape outBatch, bool ta, bool tb) {
  const int64_t m = 3, k = 4, n = 5;
  Shape lhs = lhsBatch, rhs = rhsBatch, out = outBatch;
  Shape lhsMatrix = ta ? Shape{k, m} : Shape{m, k};
  Shape rhsMatrix = tb ? Shape{n, k} : Shape{k, n};
  lhs.insert(lhs.end(), lhsMatrix.begin(), lhsMatrix.end());
  rhs.insert(rhs.end(), rhsMatrix.begin(), rhsMatrix.end());
  out.insert(out.end(), {m, n});
  SCOPED_TRACE("matmul " + tensorType(lhs) + (ta ? " transpose_lhs" : "") + ", " + tensorType(rhs) +
               (tb ? " transpose_rhs" : ""));
  std::string body = std::string("    %y = graph.matmul %a, %b") + (ta ? " transpose_lhs" : "") +
                     (tb ? " transpose_rhs" : "") + " : " + tensorType(lhs) + ", " +
                     tensorType(rhs) + "\n";
  expectGradientsMatch(opModel({{"a", lhs}, {"b", rhs}}, body, out));
}

void checkMatmulAllTransposes(Shape lhsBatch, Shape rhsBatch, Shape outBatch) {
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      checkMatmul(lhsBatch, rhsBatch, outBatch, ta, tb);
}

TEST(GradientCheck, Matmul) { checkMatmulAllTransposes({}, {}, {}); }

/// A batch of activations times one weight, as in every linear layer.
TEST(GradientCheck, MatmulBatchedTimesMatrix) { checkMatmulAllTransposes({2}, {}, {2}); }

TEST(GradientCheck, MatmulMatrixTimesBatched) { checkMatmulAllTransposes({}, {2}, {2}); }

TEST(GradientCheck, MatmulBatchedTimesBatched) { checkMatmulAllTransposes({2}, {2}, {2}); }

/// Batch dimensions that broadcast: [2, 1] with [3] gives [2, 3]; [1] with [2] gives [2].
TEST(GradientCheck, MatmulBroadcastBatchDims) {
  checkMatmulAllTransposes({2, 1}, {3}, {2, 3});
  checkMatmul({1}, {2}, {2}, false, false);
  checkMatmul({2, 3}, {2, 1}, {2, 3}, false, true);
}

//===----------------------------------------------------------------------===//
// Data movement
//===----------------------------------------------------------------------===//

TEST(GradientCheck, Transpose) {
  expectGradientsMatch(opModel({{"a", {2, 3, 4}}},
                               "    %y = graph.transpose %a [2, 0, 1] : tensor<2x3x4xf32>\n",
                               {4, 2, 3}));
  expectGradientsMatch(opModel({{"a", {2, 3, 4, 5}}},
                               "    %y = graph.transpose %a [0, 2, 1, 3] : tensor<2x3x4x5xf32>\n",
                               {2, 4, 3, 5}));
}

TEST(GradientCheck, Reshape) {
  // Followed by a nonlinear op so that the gradient depends on where each element went.
  expectGradientsMatch(opModel({{"a", {2, 3, 4}}},
                               "    %s = graph.reshape %a : tensor<2x3x4xf32> -> tensor<3x8xf32>\n"
                               "    %y = graph.tanh %s : tensor<3x8xf32>\n",
                               {3, 8}));
}

TEST(GradientCheck, Broadcast) {
  expectGradientsMatch(opModel(
      {{"a", {4}}}, "    %y = graph.broadcast %a : tensor<4xf32> -> tensor<3x4xf32>\n", {3, 4}));
  expectGradientsMatch(
      opModel({{"a", {3, 1}}},
              "    %y = graph.broadcast %a : tensor<3x1xf32> -> tensor<2x3x5xf32>\n", {2, 3, 5}));
  expectGradientsMatch(opModel(
      {{"a", {}}}, "    %y = graph.broadcast %a : tensor<f32> -> tensor<2x3xf32>\n", {2, 3}));
}

TEST(GradientCheck, Slice) {
  expectGradientsMatch(
      opModel({{"a", {4, 6}}},
              "    %y = graph.slice %a starts [1, 2] sizes [2, 3] : tensor<4x6xf32>\n", {2, 3}));
  expectGradientsMatch(opModel(
      {{"a", {2, 3, 5}}},
      "    %y = graph.slice %a starts [1, 0, 4] sizes [1, 3, 1] : tensor<2x3x5xf32>\n", {1, 3, 1}));
}

TEST(GradientCheck, Split) {
  // Pieces 0 and 2 used (multiplied together), piece 1 left unused: its part of the gradient
  // is zero.
  expectGradientsMatch(
      opModel({{"a", {2, 8}}},
              "    %p:3 = graph.split %a axis 1 sizes [3, 2, 3] : tensor<2x8xf32>\n"
              "    %y = graph.mul %p#0, %p#2 : tensor<2x3xf32>, tensor<2x3xf32>\n",
              {2, 3}));
  // Only the middle piece used, along the first axis.
  expectGradientsMatch(
      opModel({{"a", {6, 2}}},
              "    %p:3 = graph.split %a axis 0 sizes [1, 3, 2] : tensor<6x2xf32>\n"
              "    %y = graph.exp %p#1 : tensor<3x2xf32>\n",
              {3, 2}));
}

TEST(GradientCheck, Pad) {
  expectGradientsMatch(opModel(
      {{"x", {2, 3}}}, "    %y = graph.pad %x low [1, 0] high [0, 2] : tensor<2x3xf32>\n", {3, 5}));
}

TEST(GradientCheck, Concat) {
  expectGradientsMatch(
      opModel({{"a", {2, 3}}, {"b", {2, 2}}},
              "    %y = graph.concat %a, %b axis 1 : tensor<2x3xf32>, tensor<2x2xf32>\n", {2, 5}));
  expectGradientsMatch(
      opModel({{"a", {1, 3}}, {"b", {2, 3}}, {"c", {3, 3}}},
              "    %y = graph.concat %a, %b, %c axis 0 : tensor<1x3xf32>, tensor<2x3xf32>, "
              "tensor<3x3xf32>\n",
              {6, 3}));
}

//===----------------------------------------------------------------------===//
// Reductions
//===----------------------------------------------------------------------===//

struct ReduceCase {
  std::string axes;
  bool keepdims;
  Shape out;
};

const std::vector<ReduceCase> kReduceCases = {
    {"[1]", false, {3, 5}},        {"[1]", true, {3, 1, 5}}, {"[0, 2]", false, {4}},
    {"[0, 2]", true, {1, 4, 1}},   {"[2]", false, {3, 4}},   {"[0, 1, 2]", false, {}},
    {"[0, 1, 2]", true, {1, 1, 1}}};

void checkReduce(const std::string &op) {
  for (const ReduceCase &reduce : kReduceCases) {
    SCOPED_TRACE(op + " axes " + reduce.axes + (reduce.keepdims ? " keepdims" : ""));
    std::string body = "    %y = graph." + op + " %a axes " + reduce.axes +
                       (reduce.keepdims ? " keepdims" : "") + " : tensor<3x4x5xf32>\n";
    // Random normal values: no ties within a group of max (nor within h of one).
    expectGradientsMatch(opModel({{"a", {3, 4, 5}}}, body, reduce.out));
  }
}

TEST(GradientCheck, Sum) { checkReduce("sum"); }
TEST(GradientCheck, Mean) { checkReduce("mean"); }
TEST(GradientCheck, Max) { checkReduce("max"); }

/// The mean as the loss's own reduction (the cotangent is 1 / count before R).
TEST(GradientCheck, MeanReducedLoss) {
  expectGradientsMatch(
      opModel({{"a", {3, 4}}}, "    %y = graph.tanh %a : tensor<3x4xf32>\n", {3, 4}, Reduce::Mean));
}

} // namespace
