//===- DryRunTest.cpp - Every example over the recording driver -----------===//
//
// For the MLP and the four GPTs, in bf16, fp16 and fp32, with and without a
// memory budget: `ampc compile` the model with gradient accumulation, run the
// training executable itself with --device cuda for a few optimizer steps
// over the recording driver and cuBLASLt, so that the real training loop
// drives the real cuda::Executor: it must construct (allocating, loading
// every module), launch every device step, capture and replay its CUDA
// graphs and read its metrics, and the trace must show zero violations,
// from the driver's checks and from DryRunChecker's against the plan.
// Kernels do not run, so the losses are zeros: the GPU tests check numbers.
//
// Each configuration leaves its executable, output, metrics, trace and the
// checker's report in
// runs/<model>_<precision>[_budget]/ beside this binary.
//
//===----------------------------------------------------------------------===//

#include "DryRunChecker.h"
#include "DryRunTestUtils.h"
#include "runtime/train/Bundle.h"

#include <gtest/gtest.h>

#include <sys/stat.h>

#include <sstream>

namespace ampc::dryrun {
namespace {

class DryRun : public ::testing::TestWithParam<ModelConfig> {};

TEST_P(DryRun, TrainsOverTheRecordingDriverWithoutViolations) {
  const ModelConfig &config = GetParam();
  const std::string dir = std::string(AMPC_DRYRUN_WORK_DIR) + "/" + configName(config);
  ::mkdir(AMPC_DRYRUN_WORK_DIR, 0755);
  ::mkdir(dir.c_str(), 0755);
  const std::string executable = dir + "/train";
  const std::string tracePath = dir + "/trace.txt";
  const std::string logPath = dir + "/metrics.jsonl";

  std::string budget;
  const test::CommandResult compiled = compileModel(config, executable, budget);
  ASSERT_EQ(compiled.status, 0) << compiled.output;
  const plan::Plan plan = train::readEmbeddedPlan(executable);
  ASSERT_FALSE(plan.device.empty()) << "the plan has no device program";
  ASSERT_EQ(plan.accumulationSteps, kAccumulationSteps);
  if (config.budget)
    RecordProperty("memory_budget", budget);

  const test::CommandResult run = runOverRecordingDriver(executable, tracePath, logPath);
  test::writeFile(dir + "/output.txt", run.output);
  EXPECT_EQ(run.status, 0) << run.output;
  EXPECT_NE(run.output.find("device: cuda, GPU 0 (NVIDIA H100 80GB HBM3 "
                            "(recording driver)"),
            std::string::npos)
      << run.output;
  // The loop read the metrics of every step, on the GPU.
  std::istringstream log(test::readFile(logPath));
  int records = 0;
  for (std::string line; std::getline(log, line); ++records)
    EXPECT_NE(line.find("\"device\": \"cuda\""), std::string::npos) << line;
  EXPECT_EQ(records, kOptimizerSteps);

  const DryRunReport report =
      checkDryRun(plan, readTraceFile(tracePath), {kOptimizerSteps, /*seed=*/0});
  test::writeFile(dir + "/report.txt", report.summary() + "\n");
  EXPECT_TRUE(report.violations.empty()) << report.summary();
  // Every run of both functions, every step of each, some from graphs.
  EXPECT_EQ(report.functionRuns, uint64_t(kOptimizerSteps) * (kAccumulationSteps + 1))
      << report.summary();
  EXPECT_GE(report.graphsCaptured, 2u) << report.summary();
  EXPECT_GT(report.replayedSteps, 0u) << report.summary();
  EXPECT_GE(report.metricReads, uint64_t(kOptimizerSteps)) << report.summary();
}

std::vector<ModelConfig> everyExample() {
  std::vector<ModelConfig> configs;
  for (const char *model : {"mlp/mlp", "gpt/tiny", "gpt/gpt10m", "gpt/gpt30m", "gpt/gpt124m"})
    for (const char *precision : {"bf16", "fp16", "fp32"})
      for (bool budget : {false, true})
        configs.push_back({model, precision, budget});
  return configs;
}

INSTANTIATE_TEST_SUITE_P(Examples, DryRun, ::testing::ValuesIn(everyExample()),
                         [](const ::testing::TestParamInfo<ModelConfig> &info) {
                           return configName(info.param);
                         });

} // namespace
} // namespace ampc::dryrun
