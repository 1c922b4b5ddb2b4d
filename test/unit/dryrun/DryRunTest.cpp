//===- DryRunTest.cpp - Every example over the recording driver -----------===//
//
// For the MLP and the four GPTs, in bf16, fp16 and fp32, with and without a
// memory budget: `ampc compile` the model with gradient accumulation, run the
// training executable itself with --device cuda for a few optimizer steps
// over the recording driver and cuBLASLt, so that the real training loop
// drives the real cuda::Executor: it must construct (allocating, loading
// every module), launch every device step, capture and replay its CUDA
// graphs and read its metrics, and the trace must show zero violations,
// from the driver's checks and from DryRunChecker's against the plan. Within
// the loop every upload comes from pinned memory and the host synchronises
// once per optimizer step.
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

#include <map>
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
  // Every run of both functions, every step of each, some from graphs. No launch takes a
  // per-run value (the run scalars are in device memory), so each function is one graph,
  // replayed in every run after its warm-up (the capture's run launches it too).
  EXPECT_EQ(report.functionRuns, uint64_t(kOptimizerSteps) * (kAccumulationSteps + 1))
      << report.summary();
  EXPECT_EQ(report.graphsCaptured, 2u) << report.summary();
  EXPECT_EQ(report.graphReplays,
            uint64_t(kOptimizerSteps) * kAccumulationSteps - 1 + uint64_t(kOptimizerSteps) - 1)
      << report.summary();
  EXPECT_GT(report.replayedSteps, 0u) << report.summary();
  EXPECT_GE(report.metricReads, uint64_t(kOptimizerSteps)) << report.summary();
  // cuBLASLt's candidates were timed while the executor was built (the recording heuristic
  // offers three for every problem).
  EXPECT_GT(report.timedMatmuls, 0u) << report.summary();

  // The host never waits for the GPU inside an optimizer step: every upload of the loop (each
  // micro step's inputs, the run scalars) is queued from pinned memory, no staging slot is
  // waited for, and the stream is synchronised once per optimizer step (the metrics read) and
  // once when the device closes.
  const LoopTraffic traffic = loopTraffic(readTraceFile(tracePath));
  EXPECT_EQ(traffic.pageableUploads, 0u);
  EXPECT_EQ(traffic.eventSyncs, 0u);
  EXPECT_EQ(traffic.contextSyncs, 0u);
  EXPECT_EQ(traffic.streamSyncs, uint64_t(kOptimizerSteps) + 1);
  std::map<uint64_t, uint64_t> perStep; // input bytes -> uploads of that size
  for (const plan::Input &input : plan.inputs)
    perStep[plan::numElements(plan.buffers[input.buffer]) *
            plan::dtypeBytes(plan.buffers[input.buffer].dtype)] +=
        uint64_t(kOptimizerSteps) * kAccumulationSteps;
  ASSERT_FALSE(perStep.empty());
  for (const auto &[bytes, uploads] : perStep) {
    const uint64_t staged =
        traffic.pinnedUploadsOfBytes.count(bytes) ? traffic.pinnedUploadsOfBytes.at(bytes) : 0;
    if (bytes == sizeof(plan::RunScalarBlock)) // the run scalars are staged too
      EXPECT_GE(staged, uploads) << bytes << "-byte inputs";
    else
      EXPECT_EQ(staged, uploads) << bytes << "-byte inputs";
  }

  // Weight gradients are added into their f32 accumulators by the matmuls that compute them
  // (C == D == the accumulator, beta 1), in every micro step; with loss scaling the unscaling
  // accumulate kernels stay. The state starts at zero and the optimizer step zeroes it again.
  uint64_t accumulating = 0;
  for (const plan::DeviceGroup &group : plan.device.microStep.groups)
    for (const plan::DeviceStep &step : group.steps)
      if (const auto *matmul = std::get_if<plan::MatmulStep>(&step);
          matmul && matmul->c == matmul->d && matmul->c != plan::kNoBuffer) {
        ++accumulating;
        EXPECT_EQ(plan.buffers[matmul->d].role, plan::BufferRole::State);
        EXPECT_EQ(plan.buffers[matmul->d].dtype, plan::DType::F32);
        EXPECT_EQ(matmul->beta, 1.0f);
        EXPECT_EQ(matmul->alpha, 1.0f);
      }
  if (config.precision == "fp16")
    EXPECT_EQ(accumulating, 0u);
  else
    EXPECT_GT(accumulating, 0u);
  EXPECT_EQ(report.accumulatingMatmuls,
            accumulating * uint64_t(kOptimizerSteps) * kAccumulationSteps)
      << report.summary();
}

/// Compiles the tiny GPT (bf16) to \p dir/train, \p dir being folder \p name of the dry-run
/// work folder; the compiler's output when it fails, else empty.
std::string compileTinyGpt(const std::string &name, std::string &dir) {
  dir = std::string(AMPC_DRYRUN_WORK_DIR) + "/" + name;
  ::mkdir(AMPC_DRYRUN_WORK_DIR, 0755);
  ::mkdir(dir.c_str(), 0755);
  std::string budget;
  const test::CommandResult compiled =
      compileModel(ModelConfig{"gpt/tiny", "bf16", false}, dir + "/train", budget);
  return compiled.status == 0 ? std::string()
                              : "exit " + std::to_string(compiled.status) + ": " + compiled.output;
}

// The CUDA backend's side of a run's lifecycle: weights set from a file
// (--init-from: parameters and their bf16 copies uploaded), read back every
// step for the moving average and at the end (--export-weights), and the
// validation loss from the micro step's forward groups alone (--val-data),
// run eagerly between optimizer steps.
TEST(DryRunLifecycle, WeightsValidationAndMovingAverageOnTheCudaBackend) {
  std::string dir;
  ASSERT_EQ(compileTinyGpt("lifecycle", dir), "");
  const std::string executable = dir + "/train";
  const plan::Plan plan = train::readEmbeddedPlan(executable);
  // Weights to start from, written by a CPU run; held-out tokens.
  const test::CommandResult cpu =
      test::runCommand("'" + executable + "' --steps 1 --device cpu --quiet --export-weights '" +
                       dir + "/init.safetensors'");
  ASSERT_EQ(cpu.status, 0) << cpu.output;
  std::string tokens;
  for (int i = 0; i < 4000; ++i)
    tokens += std::string{static_cast<char>(i * 7 % 251), 0};
  test::writeFile(dir + "/val.bin", tokens);

  const std::string tracePath = dir + "/trace.txt", logPath = dir + "/metrics.jsonl";
  const test::CommandResult run = runOverRecordingDriver(
      executable, tracePath, logPath,
      "--init-from '" + dir + "/init.safetensors' --val-data '" + dir + "/val.bin' " +
          "--eval-every 1 --eval-batches 2 --ema-decay 0.9 --export-weights '" + dir +
          "/out.safetensors' --export-ema '" + dir + "/ema.safetensors'");
  test::writeFile(dir + "/output.txt", run.output);
  ASSERT_EQ(run.status, 0) << run.output;
  std::istringstream log(test::readFile(logPath));
  int validated = 0;
  for (std::string line; std::getline(log, line);)
    validated += line.find("\"val_loss\"") != std::string::npos;
  EXPECT_EQ(validated, kOptimizerSteps);
  EXPECT_NE(test::readFile(dir + "/out.safetensors").size(), 0u);
  EXPECT_NE(test::readFile(dir + "/ema.safetensors").size(), 0u);

  // The eager forward runs are prefixes of the micro step, checked launch by
  // launch against the plan like every other run.
  DryRunSchedule schedule{kOptimizerSteps, /*seed=*/0};
  schedule.evalEvery = 1;
  schedule.evalBatches = 2;
  const DryRunReport report = checkDryRun(plan, readTraceFile(tracePath), schedule);
  test::writeFile(dir + "/report.txt", report.summary() + "\n");
  EXPECT_TRUE(report.violations.empty()) << report.summary();
  // Every training run and every forward-only run, complete.
  EXPECT_EQ(report.functionRuns,
            uint64_t(kOptimizerSteps) * (kAccumulationSteps + 1 + schedule.evalBatches))
      << report.summary();
}

// --profile over the recording driver: the bandwidth probe (two allocations, a memset and
// timed copies) and the eager, event-timed groups run, and the report comes out. (The
// recording driver's events measure no time, so there is no floor line.)
TEST(DryRunProfile, ProfilesTheTinyGptOverTheRecordingDriver) {
  std::string dir;
  ASSERT_EQ(compileTinyGpt("profile", dir), "");
  const std::string executable = dir + "/train";
  const test::CommandResult run = runOverRecordingDriver(
      executable, dir + "/trace.txt", dir + "/metrics.jsonl", "--profile=1 --profile-top 5");
  ASSERT_EQ(run.status, 0) << run.output;
  EXPECT_NE(run.output.find("profile of @tiny over 1 optimizer steps"), std::string::npos)
      << run.output;
  EXPECT_NE(run.output.find("memory-bound groups"), std::string::npos) << run.output;
}

std::vector<ModelConfig> everyExample() {
  std::vector<ModelConfig> configs;
  for (const char *model : {"mlp/mlp", "gpt/tiny", "gpt/gpt10m", "gpt/gpt30m", "gpt/gpt124m"})
    for (const char *precision : {"bf16", "fp16", "fp32"})
      for (bool budget : {false, true})
        configs.push_back({model, precision, budget});
  // Every activation opcode's kernels (hardswish, sigmoid, hardsigmoid, softplus and their
  // gradients), without the budget: the model has no activations worth recomputing.
  for (const char *precision : {"bf16", "fp16", "fp32"})
    configs.push_back({"mlp/mlp_gates", precision, false});
  return configs;
}

INSTANTIATE_TEST_SUITE_P(Examples, DryRun, ::testing::ValuesIn(everyExample()),
                         [](const ::testing::TestParamInfo<ModelConfig> &info) {
                           return configName(info.param);
                         });

} // namespace
} // namespace ampc::dryrun
