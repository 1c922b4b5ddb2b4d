//===- GradientCheckLayersTest.cpp - neural-network ops' gradients --------===//
//
// graph-build-training's gradients of the neural-network ops, checked numerically by
// GradientCheckHelpers.h: embedding, the norms, softmax, attention, convolution, pooling, batch
// norm, the losses and dropout.
//
//===--------------------------------------------------------------------------===//

#include "GradientCheckHelpers.h"

#include <gtest/gtest.h>

using namespace ampc;
using namespace ampc::test::gradient_check;

namespace {

//===----------------------------------------------------------------------===//
// Embedding, norms and softmax
//===----------------------------------------------------------------------===//

TEST(GradientCheck, EmbeddingWithRepeatedIds) {
  GradCheck check;
  check.prepare = [](cpu::Executor &executor) {
    // Row 2 is read three times, row 0 twice, row 4 never.
    setIntInput(executor, "ids", {0, 2, 2, 5, 1, 0, 2, 3});
  };
  expectGradientsMatch(
      opModel({{"table", {6, 3}}},
              "    %ids = graph.get_input @ids : tensor<2x4xi32>\n"
              "    %y = graph.embedding %table[%ids] : tensor<6x3xf32>, tensor<2x4xi32>\n",
              {2, 4, 3}, Reduce::Sum, "  graph.input @ids : tensor<2x4xi32>\n"),
      check);
}

TEST(GradientCheck, LayerNorm) {
  GradCheck check;
  expectGradientsMatch(
      opModel({{"x", {3, 5}}, {"g", {5}, "#graph.normal<mean = 1.0, std = 0.5>"}, {"b", {5}}},
              "    %y = graph.layernorm %x, %g, %b : tensor<3x5xf32>, tensor<5xf32>, "
              "tensor<5xf32>\n",
              {3, 5}),
      check);
  // A batch of rows with a larger epsilon.
  expectGradientsMatch(
      opModel({{"x", {2, 3, 4}}, {"g", {4}, "#graph.normal<mean = 1.0, std = 0.5>"}, {"b", {4}}},
              "    %y = graph.layernorm %x, %g, %b {epsilon = 0.1 : f64} : tensor<2x3x4xf32>, "
              "tensor<4xf32>, tensor<4xf32>\n",
              {2, 3, 4}),
      check);
}

TEST(GradientCheck, RmsNorm) {
  expectGradientsMatch(opModel({{"x", {3, 5}}, {"g", {5}, "#graph.normal<mean = 1.0, std = 0.5>"}},
                               "    %y = graph.rmsnorm %x, %g : tensor<3x5xf32>, tensor<5xf32>\n",
                               {3, 5}));
  expectGradientsMatch(opModel(
      {{"x", {2, 3, 4}}, {"g", {4}, "#graph.normal<mean = 1.0, std = 0.5>"}},
      "    %y = graph.rmsnorm %x, %g {epsilon = 0.1 : f64} : tensor<2x3x4xf32>, tensor<4xf32>\n",
      {2, 3, 4}));
}

TEST(GradientCheck, Softmax) {
  expectGradientsMatch(
      opModel({{"x", {2, 3, 4}}}, "    %y = graph.softmax %x : tensor<2x3x4xf32>\n", {2, 3, 4}));
}

TEST(GradientCheck, SoftmaxCausal) {
  expectGradientsMatch(opModel(
      {{"x", {2, 4, 4}}}, "    %y = graph.softmax %x causal : tensor<2x4x4xf32>\n", {2, 4, 4}));
  // More keys than queries (S = 5 > T = 3): query i sees keys up to i + 2. The masked inputs
  // get no gradient (the check still covers them: their finite difference is 0).
  expectGradientsMatch(opModel(
      {{"x", {2, 3, 5}}}, "    %y = graph.softmax %x causal : tensor<2x3x5xf32>\n", {2, 3, 5}));
}

//===----------------------------------------------------------------------===//
// Convolution, pooling and batch norm
//===----------------------------------------------------------------------===//

TEST(GradientCheck, Conv2dStridedPaddedDilated) {
  // Asymmetric padding, unequal strides and dilations, a rectangular kernel.
  expectGradientsMatch(opModel({{"x", {2, 3, 7, 6}}, {"w", {4, 3, 3, 2}}},
                               "    %y = graph.conv2d %x, %w strides [2, 1] padding [1, 0, 2, 1] "
                               "dilations [1, 2] : tensor<2x3x7x6xf32>, tensor<4x3x3x2xf32>\n",
                               {2, 4, 4, 5}));
}

TEST(GradientCheck, Conv2dGroups) {
  // Depthwise with a channel multiplier of 2, then two groups of a 1x1 convolution.
  expectGradientsMatch(opModel({{"x", {2, 4, 5, 5}}, {"w", {8, 1, 3, 3}}},
                               "    %y = graph.conv2d %x, %w padding [1, 1, 1, 1] groups 4 : "
                               "tensor<2x4x5x5xf32>, tensor<8x1x3x3xf32>\n",
                               {2, 8, 5, 5}));
  expectGradientsMatch(opModel({{"x", {1, 4, 4, 4}}, {"w", {6, 2, 1, 1}}},
                               "    %y = graph.conv2d %x, %w groups 2 : tensor<1x4x4x4xf32>, "
                               "tensor<6x2x1x1xf32>\n",
                               {1, 6, 4, 4}));
}

TEST(GradientCheck, MaxPool2d) {
  // Overlapping windows with padding and ceil_mode, then dilation; random inputs have no ties.
  expectGradientsMatch(opModel({{"x", {2, 2, 7, 7}}},
                               "    %y = graph.max_pool2d %x kernel_size [3, 3] strides [2, 2] "
                               "padding [1, 1, 1, 1] ceil_mode : tensor<2x2x7x7xf32>\n",
                               {2, 2, 4, 4}));
  expectGradientsMatch(opModel({{"x", {2, 2, 7, 7}}},
                               "    %y = graph.max_pool2d %x kernel_size [2, 2] strides [1, 2] "
                               "dilations [2, 1] : tensor<2x2x7x7xf32>\n",
                               {2, 2, 5, 3}));
}

TEST(GradientCheck, AvgPool2d) {
  // The divisor with and without the padding, a ceil_mode window hanging past it.
  expectGradientsMatch(opModel({{"x", {2, 2, 7, 7}}},
                               "    %y = graph.avg_pool2d %x kernel_size [3, 3] strides [2, 2] "
                               "padding [1, 1, 1, 1] ceil_mode count_include_pad : "
                               "tensor<2x2x7x7xf32>\n",
                               {2, 2, 4, 4}));
  expectGradientsMatch(opModel({{"x", {2, 2, 6, 5}}},
                               "    %y = graph.avg_pool2d %x kernel_size [2, 3] strides [2, 2] "
                               "padding [1, 1, 1, 1] ceil_mode : tensor<2x2x6x5xf32>\n",
                               {2, 2, 4, 3}));
}

TEST(GradientCheck, BatchNorm) {
  // Training mode: the batch's statistics over N and the spatial axes, per channel; the
  // running statistics are untrained parameters and get no gradient. The update of the running
  // statistics runs in every finite-difference run but never feeds the loss.
  const std::string decls = "  graph.param @rm : tensor<3xf32> init #graph.zeros untrained\n"
                            "  graph.param @rv : tensor<3xf32> init #graph.ones untrained\n";
  const std::string body =
      "    %rm = graph.get_param @rm : tensor<3xf32>\n"
      "    %rv = graph.get_param @rv : tensor<3xf32>\n"
      "    %y = graph.batch_norm %x, %g, %b, %rm, %rv {epsilon = 0.01 : f64} : "
      "tensor<2x3x2x2xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>\n"
      "    graph.update_running_stats %x {momentum = 0.1 : f64, mean = @rm, var = @rv} : "
      "tensor<2x3x2x2xf32>\n";
  expectGradientsMatch(
      opModel({{"x", {2, 3, 2, 2}}, {"g", {3}, "#graph.normal<mean = 1.0, std = 0.5>"}, {"b", {3}}},
              body, {2, 3, 2, 2}, Reduce::Sum, decls));
  // [N, C] (BatchNorm1d): statistics over the batch alone.
  expectGradientsMatch(
      opModel({{"x", {4, 3}}, {"g", {3}, "#graph.normal<mean = 1.0, std = 0.5>"}, {"b", {3}}},
              "    %rm = graph.get_param @rm : tensor<3xf32>\n"
              "    %rv = graph.get_param @rv : tensor<3xf32>\n"
              "    %y = graph.batch_norm %x, %g, %b, %rm, %rv : tensor<4x3xf32>, "
              "tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>\n",
              {4, 3}, Reduce::Sum, decls));
}

//===----------------------------------------------------------------------===//
// Attention, losses and dropout
//===----------------------------------------------------------------------===//

void checkAttention(const Shape &q, const Shape &k, const Shape &v, const Shape &out,
                    const std::string &attrs) {
  SCOPED_TRACE("attention " + tensorType(q) + " " + tensorType(k) + " " + tensorType(v) + attrs);
  expectGradientsMatch(opModel({{"q", q}, {"k", k}, {"v", v}},
                               "    %y = graph.attention %q, %k, %v" + attrs + " : " +
                                   tensorType(q) + ", " + tensorType(k) + ", " + tensorType(v) +
                                   "\n",
                               out));
}

TEST(GradientCheck, Attention) {
  checkAttention({2, 3, 4}, {2, 3, 4}, {2, 3, 6}, {2, 3, 6}, "");
  // More keys than queries, and an explicit scale.
  checkAttention({2, 3, 4}, {2, 5, 4}, {2, 5, 6}, {2, 3, 6}, "");
  checkAttention({2, 3, 4}, {2, 5, 4}, {2, 5, 6}, {2, 3, 6}, " scale 0.7");
  // Heads: [B, H, T, Dh].
  checkAttention({2, 2, 3, 4}, {2, 2, 3, 4}, {2, 2, 3, 4}, {2, 2, 3, 4}, "");
}

TEST(GradientCheck, AttentionCausal) {
  checkAttention({2, 4, 3}, {2, 4, 3}, {2, 4, 5}, {2, 4, 5}, " causal");
  checkAttention({2, 3, 4}, {2, 5, 4}, {2, 5, 6}, {2, 3, 6}, " causal");
  checkAttention({2, 3, 4}, {2, 5, 4}, {2, 5, 6}, {2, 3, 6}, " causal scale 0.3");
  checkAttention({2, 2, 3, 4}, {2, 2, 3, 4}, {2, 2, 3, 4}, {2, 2, 3, 4}, " causal");
}

/// Cross-entropy of random logits against constant labels, two of them ignored; the loss
/// (a scalar) is multiplied by R.
void checkCrossEntropy(const std::string &attrs) {
  SCOPED_TRACE("cross_entropy" + attrs);
  expectGradientsMatch(opModel({{"logits", {2, 3, 5}, "#graph.normal<std = 2.0>"}},
                               "    %labels = graph.constant dense<[[1, -100, 4], [0, 3, -100]]> : "
                               "tensor<2x3xi64>\n"
                               "    %y = graph.cross_entropy %logits, %labels" +
                                   attrs + " : tensor<2x3x5xf32>, tensor<2x3xi64>\n",
                               {}));
}

TEST(GradientCheck, CrossEntropyMeanWithIgnoredLabels) { checkCrossEntropy(""); }

TEST(GradientCheck, CrossEntropySumWithIgnoredLabels) {
  checkCrossEntropy(" {reduction = 1 : i32}");
}

TEST(GradientCheck, CrossEntropyOtherIgnoreIndex) {
  // ignore_index 3: the rows labelled 3 are left out of the mean.
  expectGradientsMatch(opModel(
      {{"logits", {4, 5}, "#graph.normal<std = 2.0>"}},
      "    %labels = graph.constant dense<[3, 0, 4, 3]> : tensor<4xi32>\n"
      "    %y = graph.cross_entropy %logits, %labels {ignore_index = 3 : i64} : tensor<4x5xf32>, "
      "tensor<4xi32>\n",
      {}));
}

TEST(GradientCheck, MseLoss) {
  // Both the prediction and the target are parameters.
  expectGradientsMatch(opModel({{"p", {3, 4}}, {"t", {3, 4}}},
                               "    %y = graph.mse_loss %p, %t : tensor<3x4xf32>\n", {}));
}

/// Two dropouts of one value draw different masks (their own streams); each backward dropout
/// must reuse its forward's.
TEST(GradientCheck, TwoDropoutsWithTheirOwnMasks) {
  expectGradientsMatch(opModel({{"a", {4, 5}}},
                               "    %d1 = graph.dropout %a {p = 0.3 : f64} : tensor<4x5xf32>\n"
                               "    %d2 = graph.dropout %a {p = 0.5 : f64} : tensor<4x5xf32>\n"
                               "    %t = graph.tanh %d2 : tensor<4x5xf32>\n"
                               "    %y = graph.mul %d1, %t : tensor<4x5xf32>, tensor<4x5xf32>\n",
                               {4, 5}));
}

TEST(GradientCheck, DropoutWithAFixedMask) {
  // training = true with the same seed and step in every run: the finite differences
  // differentiate the same masked, rescaled function.
  auto compiled =
      compileForCheck(opModel({{"a", {4, 5}}},
                              "    %d = graph.dropout %a {p = 0.3 : f64} : tensor<4x5xf32>\n"
                              "    %y = graph.tanh %d : tensor<4x5xf32>\n",
                              {4, 5}));
  ASSERT_TRUE(compiled);
  checkGradients(*compiled, {});
  // The mask drops some elements and keeps others, so both cases are covered.
  cpu::Executor executor(*compiled, cpu::Precision::F64);
  executor.initializeParameters(1);
  executor.randomizeInputs(2);
  cpu::RunOptions options;
  options.seed = 5;
  options.step = 3;
  options.training = true;
  executor.run(options);
  std::vector<double> grad = executor.bufferValues(plan::findBuffer(*compiled, "a.grad"));
  size_t zeros = std::count(grad.begin(), grad.end(), 0.0);
  EXPECT_GT(zeros, 0u);
  EXPECT_LT(zeros, grad.size());
}

} // namespace
