//===- GradientCheckModelsTest.cpp - gradients of whole models ------------===//
//
// graph-build-training's gradients where ops combine, checked numerically by
// GradientCheckHelpers.h: a table read twice (tied embedding and head), a value with several
// readers, and samples of every parameter of the example MLP and tiny GPT.
//
//===--------------------------------------------------------------------------===//

#include "GradientCheckHelpers.h"

#include <gtest/gtest.h>

using namespace ampc;
using namespace ampc::test::gradient_check;

namespace {

//===----------------------------------------------------------------------===//
// Composites
//===----------------------------------------------------------------------===//

/// A table read by an embedding and, transposed, by the output matmul gets the sum of both
/// gradients.
TEST(GradientCheck, TiedEmbeddingAndHead) {
  GradCheck check;
  check.prepare = [](cpu::Executor &executor) { setIntInput(executor, "ids", {1, 4, 1, 0, 5, 4}); };
  std::string text = opModel(
      {{"table", {6, 4}}},
      "    %ids = graph.get_input @ids : tensor<2x3xi32>\n"
      "    %x = graph.embedding %table[%ids] : tensor<6x4xf32>, tensor<2x3xi32>\n"
      "    %h = graph.tanh %x : tensor<2x3x4xf32>\n"
      "    %y = graph.matmul %h, %table transpose_rhs : tensor<2x3x4xf32>, tensor<6x4xf32>\n",
      {2, 3, 6}, Reduce::Sum, "  graph.input @ids : tensor<2x3xi32>\n");
  expectGradientsMatch(text, check);
}

/// One intermediate value feeding several ops, through a small residual block.
TEST(GradientCheck, ValueWithSeveralUses) {
  expectGradientsMatch(opModel(
      {{"x", {2, 3, 4}},
       {"w", {4, 4}},
       {"g", {4}, "#graph.normal<mean = 1.0, std = 0.3>"},
       {"b", {4}}},
      "    %n = graph.layernorm %x, %g, %b : tensor<2x3x4xf32>, tensor<4xf32>, tensor<4xf32>\n"
      "    %m = graph.matmul %n, %w : tensor<2x3x4xf32>, tensor<4x4xf32>\n"
      "    %a = graph.gelu tanh %m : tensor<2x3x4xf32>\n"
      "    %s = graph.add %x, %a : tensor<2x3x4xf32>, tensor<2x3x4xf32>\n"
      "    %y = graph.mul %s, %n : tensor<2x3x4xf32>, tensor<2x3x4xf32>\n",
      {2, 3, 4}));
}

//===----------------------------------------------------------------------===//
// Whole models
//===----------------------------------------------------------------------===//

/// Checks a sample of every parameter tensor of an example model (random inputs), the finite
/// differences running the model's forward plan.
void checkExampleModel(const std::string &relative, size_t samples, double h) {
  std::string path = test_support::examplePath(relative), diagnostics;
  auto training = test_support::compileTrainingFile(path, singleStep(), &diagnostics);
  ASSERT_TRUE(training) << diagnostics;
  auto forward = test_support::compileFile(path, &diagnostics);
  ASSERT_TRUE(forward) << diagnostics;
  GradCheck check;
  check.samples = samples;
  check.h = h;
  auto errors = checkGradients(*training, check, &*forward);
  // Every parameter was checked.
  EXPECT_EQ(errors.size(), training->parameters.size());
}

/// h = 1e-5: a larger step moves some of the 64 x 256 relu inputs across 0 when a bias changes.
TEST(GradientCheck, MlpExample) { checkExampleModel("mlp/mlp.mlir", 40, 1e-5); }

/// 20 elements of each of the 28 tensors. The gradients of the layernorm parameters are small
/// (~1e-4 per element) next to the loss (~5.5), so rounding in the loss limits h = 1e-5 to a
/// relative error of ~3e-7; h = 3e-5 gives ~1e-7.
TEST(GradientCheck, TinyGptExample) { checkExampleModel("gpt/tiny.mlir", 20, 3e-5); }

} // namespace
