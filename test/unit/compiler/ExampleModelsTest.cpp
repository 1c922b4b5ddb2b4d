//===- ExampleModelsTest.cpp - the example models, end to end -------------===//
//
// Every example compiles to a valid plan; the GPTs' parameter counts equal the PyTorch
// reference's; at initialisation the GPT losses are within 2% of ln(vocab) (GPT-2 init makes
// the logits nearly uniform, so a larger gap means a wiring mistake in the graph); the loss is
// reproducible for a seed and survives a trip through a plan file.
//
//===--------------------------------------------------------------------------===//

#include <unistd.h>

#include "CompileHelpers.h"
#include "runtime/cpu/Executor.h"

#include <gtest/gtest.h>

#include <cmath>

using namespace ampc;

namespace {

int64_t parameterCount(const plan::Plan &compiled) {
  int64_t total = 0;
  for (const plan::Parameter &parameter : compiled.parameters)
    total += plan::numElements(compiled.buffers[parameter.buffer]);
  return total;
}

/// PyTorch's count for the baseline GPT with a tied head: V d + T d + L (12 d^2 + 13 d) + 2 d.
int64_t gptParameterCount(int64_t vocab, int64_t context, int64_t layers, int64_t width) {
  return vocab * width + context * width + layers * (12 * width * width + 13 * width) + 2 * width;
}

double evalLoss(const plan::Plan &compiled, uint64_t seed) {
  cpu::Executor executor(compiled, cpu::Precision::F32);
  executor.initializeParameters(seed);
  executor.randomizeInputs(seed);
  return executor.run({seed, 0, false});
}

int64_t vocabulary(const plan::Plan &compiled) {
  for (const plan::Parameter &parameter : compiled.parameters)
    if (parameter.name == "wte")
      return compiled.buffers[parameter.buffer].shape[0];
  return 0;
}

struct GptCase {
  const char *name;
  int64_t vocab, context, layers, width;
  std::string file() const {
    return test_support::examplePath(std::string("gpt/") + name + ".mlir");
  }
};

void PrintTo(const GptCase &c, std::ostream *os) { *os << c.name; }

const GptCase kTiny{"tiny", 256, 32, 2, 64};
const GptCase kGpt10m{"gpt10m", 8192, 256, 6, 384};
const GptCase kGpt30m{"gpt30m", 8192, 512, 8, 512};
const GptCase kGpt124m{"gpt124m", 50304, 1024, 12, 768};

std::string caseName(const ::testing::TestParamInfo<GptCase> &info) { return info.param.name; }

/// Every GPT size: compiled in the suite.
class ExampleGpt : public ::testing::TestWithParam<GptCase> {};
/// The sizes small enough to evaluate on the CPU in the suite.
class EvaluatedGpt : public ::testing::TestWithParam<GptCase> {};

TEST_P(ExampleGpt, CompilesWithTheReferenceParameterCount) {
  const GptCase &c = GetParam();
  std::string diagnostics;
  auto compiled = test_support::compileFile(c.file(), &diagnostics);
  ASSERT_TRUE(compiled) << diagnostics;
  EXPECT_EQ(parameterCount(*compiled), gptParameterCount(c.vocab, c.context, c.layers, c.width));
  EXPECT_EQ(vocabulary(*compiled), c.vocab);
}

TEST_P(EvaluatedGpt, InitialLossIsNearLogVocabulary) {
  const GptCase &c = GetParam();
  auto compiled = test_support::compileFile(c.file());
  ASSERT_TRUE(compiled);
  double loss = evalLoss(*compiled, 0);
  double uniform = std::log(static_cast<double>(c.vocab));
  EXPECT_LT(std::abs(loss - uniform) / uniform, 0.02) << "loss " << loss << " vs ln(V) " << uniform;
}

INSTANTIATE_TEST_SUITE_P(Gpt, ExampleGpt, ::testing::Values(kTiny, kGpt10m, kGpt30m, kGpt124m),
                         caseName);
INSTANTIATE_TEST_SUITE_P(Gpt, EvaluatedGpt, ::testing::Values(kTiny, kGpt10m), caseName);

TEST(ExampleModels, Gpt124mMatchesThePublishedCount) {
  EXPECT_EQ(gptParameterCount(50304, 1024, 12, 768), 124475904);
}

TEST(ExampleModels, LossIsReproducibleForASeedAndVariesAcrossSeeds) {
  auto compiled = test_support::compileFile(test_support::examplePath("gpt/tiny.mlir"));
  ASSERT_TRUE(compiled);
  double first = evalLoss(*compiled, 7);
  EXPECT_EQ(first, evalLoss(*compiled, 7));
  EXPECT_NE(first, evalLoss(*compiled, 8));
}

TEST(ExampleModels, PlanFileRoundTripKeepsTheLoss) {
  auto compiled = test_support::compileFile(test_support::examplePath("gpt/tiny.mlir"));
  ASSERT_TRUE(compiled);
  std::string path = ::testing::TempDir() + "ampc_tiny." + std::to_string(::getpid()) + ".plan";
  plan::savePlan(*compiled, path);
  plan::Plan reloaded = plan::loadPlan(path);
  std::remove(path.c_str());
  EXPECT_EQ(evalLoss(*compiled, 3), evalLoss(reloaded, 3));
}

TEST(ExampleModels, MlpInitialLossIsNearLogClasses) {
  std::string diagnostics;
  auto compiled =
      test_support::compileFile(test_support::examplePath("mlp/mlp.mlir"), &diagnostics);
  ASSERT_TRUE(compiled) << diagnostics;
  EXPECT_EQ(parameterCount(*compiled), 784 * 256 + 256 + 256 * 10 + 10);
  double loss = evalLoss(*compiled, 0);
  // PyTorch-default init on standard-normal inputs gives logits of standard deviation ~0.3, so
  // the loss stays within a few percent of ln(10).
  EXPECT_LT(std::abs(loss - std::log(10.0)) / std::log(10.0), 0.1) << loss;
}

} // namespace
