//===- WeightsTest.cpp - Weights files, the moving average, validation ----===//
//
// matchWeights against a plan (every mistake named), the moving average's
// arithmetic, setting weights with their reduced-precision copies, the
// forward-only loss that validation runs (no state touched), and the new
// flags of the command line.
//
//===----------------------------------------------------------------------===//

#include "TrainTestUtils.h"

#include "runtime/cpu/Executor.h"
#include "runtime/numerics/Float16.h"
#include "runtime/train/Evaluation.h"
#include "runtime/train/Runner.h"
#include "runtime/train/Weights.h"

#include <gtest/gtest.h>

namespace ampc::train {
namespace {

std::string errorOf(const plan::Plan &plan, const safetensors::File &file) {
  try {
    matchWeights(plan, file, "w.safetensors");
  } catch (const safetensors::Error &error) {
    return error.what();
  }
  return "";
}

ParameterValues ramps(const plan::Plan &plan) {
  ParameterValues values;
  for (const plan::Parameter &parameter : plan.parameters) {
    std::vector<double> &v =
        values.emplace_back(static_cast<size_t>(plan::numElements(plan.buffers[parameter.buffer])));
    for (size_t i = 0; i < v.size(); ++i)
      v[i] = 0.01 * static_cast<double>(i % 17) - 0.05;
  }
  return values;
}

TEST(Weights, RoundTripThroughAFileAndEveryMismatchIsNamed) {
  const plan::Plan plan = test::bigramTrainingPlan(8, 2, 4, 1, 0.1);
  const ParameterValues values = ramps(plan);
  const safetensors::File file = weightsFile(plan, values);
  EXPECT_EQ(file.metadata.at("model"), plan.modelName);
  const ParameterValues back = matchWeights(plan, file, "w.safetensors");
  ASSERT_EQ(back.size(), values.size());
  for (size_t i = 0; i < values.size(); ++i)
    for (size_t j = 0; j < values[i].size(); ++j)
      EXPECT_EQ(back[i][j], static_cast<float>(values[i][j]));

  const std::string first = plan.parameters[0].name;
  safetensors::File missing = file;
  missing.tensors.erase(missing.tensors.begin());
  EXPECT_NE(errorOf(plan, missing)
                .find("w.safetensors: it has no tensor for the parameter '" + first + "'"),
            std::string::npos)
      << errorOf(plan, missing);
  safetensors::File extra = file;
  extra.tensors.push_back(safetensors::fromFloats("stray", {1}, {1}));
  EXPECT_NE(errorOf(plan, extra)
                .find("tensor 'stray' is not a parameter of the model @" + plan.modelName +
                      " (its parameters: " + first),
            std::string::npos)
      << errorOf(plan, extra);
  safetensors::File shape = file;
  shape.tensors[0].shape = {plan::numElements(shape.tensors[0].shape), 1};
  EXPECT_NE(errorOf(plan, shape).find("tensor '" + first + "' has shape ["), std::string::npos);
  safetensors::File narrow = weightsFile(plan, values, "BF16");
  const ParameterValues rounded = matchWeights(plan, narrow, "w.safetensors");
  EXPECT_EQ(rounded[0][1], static_cast<double>(numerics::roundToBF16(float(values[0][1]))));
}

TEST(Weights, MovingAverageIsDecayTimesAverageAndTheRestTimesWeights) {
  WeightAverage ema(0.75, {{1.0, -2.0}, {0.1}});
  ema.update({{3.0, 2.0}, {0.5}});
  EXPECT_DOUBLE_EQ(ema.values()[0][0], 1.5);  // 0.75 * 1 + 0.25 * 3
  EXPECT_DOUBLE_EQ(ema.values()[0][1], -1.0); // 0.75 * -2 + 0.25 * 2
  EXPECT_EQ(ema.values()[1][0], static_cast<float>(0.75 * static_cast<float>(0.1) + 0.25 * 0.5));
  EXPECT_EQ(ema.decay(), 0.75);
}

TEST(Weights, SettingWeightsRefreshesTheirCopies) {
  const plan::Plan base = test::bigramTrainingPlan(8, 2, 4, 1, 0.1);
  const plan::Plan plan = test::withParameterCopy(base, base.parameters[0].name, plan::DType::BF16);
  std::unique_ptr<TrainingBackend> backend = makeCpuBackend(plan);
  backend->initializeParameters(0);
  const ParameterValues values = ramps(plan);
  writeParameters(plan, *backend, values);
  const ParameterValues read = readParameters(plan, *backend);
  EXPECT_EQ(read[0][3], static_cast<float>(values[0][3]));
  const plan::ParameterCopy &copy = plan.parameterCopies.at(0);
  const std::vector<double> copied = backend->readBuffer(copy.buffer);
  for (size_t i = 0; i < copied.size(); ++i)
    EXPECT_EQ(copied[i], numerics::roundToBF16(static_cast<float>(values[0][i]))) << i;
}

TEST(Weights, TheForwardPassAloneGivesTheLossAndTouchesNoState) {
  const plan::Plan plan = test::bigramTrainingPlan(8, 2, 4, 1, 0.1);
  cpu::Executor executor(plan, cpu::Precision::F32);
  executor.initializeParameters(3);
  executor.randomizeInputs(5);
  std::vector<std::vector<double>> state;
  for (uint32_t id = 0; id < plan.buffers.size(); ++id)
    if (plan.buffers[id].role == plan::BufferRole::State)
      state.push_back(executor.bufferValues(id));
  cpu::RunOptions forward;
  forward.forwardOnly = true;
  const double loss = executor.run(forward);
  size_t k = 0;
  for (uint32_t id = 0; id < plan.buffers.size(); ++id)
    if (plan.buffers[id].role == plan::BufferRole::State)
      EXPECT_EQ(executor.bufferValues(id), state[k++]) << plan.buffers[id].name;
  EXPECT_LT(plan::forwardInstructionCount(plan), plan.instructions.size());
  // The whole micro step computes the same loss (and accumulates gradients).
  EXPECT_EQ(executor.run(cpu::RunOptions()), loss);
}

TEST(Weights, FlagsOfTheLifecycleAreParsedAndChecked) {
  const RunnerOptions options = parseRunnerArguments(
      {"--init-from", "a.safetensors", "--export-weights=b.safetensors", "--export-dtype", "bf16",
       "--val-data", "v.bin", "--eval-every", "7", "--eval-batches", "3", "--ema-decay", "0.99",
       "--export-ema", "e.safetensors", "--eval-ema"});
  EXPECT_EQ(options.initFrom, "a.safetensors");
  EXPECT_EQ(options.exportWeights, "b.safetensors");
  EXPECT_EQ(options.exportDtype, "BF16");
  EXPECT_EQ(options.valDataPath, "v.bin");
  EXPECT_EQ(options.evalEvery, 7u);
  EXPECT_EQ(options.evalBatches, 3u);
  EXPECT_EQ(options.emaDecay, 0.99);
  EXPECT_EQ(options.exportEma, "e.safetensors");
  EXPECT_TRUE(options.evalEma);
  const std::pair<std::vector<std::string>, std::string> wrong[] = {
      {{"--eval-batches", "2"}, "--eval-every and --eval-batches need --val-data FILE"},
      {{"--ema-decay", "0"}, "--ema-decay must be between 0 and 1 (exclusive), e.g. 0.999; got 0"},
      {{"--ema-decay", "x"}, "--ema-decay expects a number, got 'x'"},
      {{"--eval-ema", "--val-data", "v.bin"}, "--eval-ema needs --ema-decay D"},
      {{"--ema-decay", "0.9", "--eval-ema"}, "--eval-ema needs --val-data FILE"},
      {{"--init-from", ""}, "--init-from needs a file name"},
      {{"--val-data", "v", "--eval-every", "0"}, "--eval-every must be at least 1"}};
  for (const auto &[args, message] : wrong) {
    try {
      parseRunnerArguments(args);
      ADD_FAILURE() << message;
    } catch (const UsageError &error) {
      EXPECT_EQ(std::string(error.what()), message) << error.what();
    }
  }
}

} // namespace
} // namespace ampc::train
