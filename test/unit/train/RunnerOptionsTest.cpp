//===- RunnerOptionsTest.cpp - A training executable's command line -------===//
//
// parseRunnerArguments and runnerUsage (RunnerOptions.cpp), and the --device
// rule (chooseDevice, Backend.h) with the GPU probe passed in.
//
//===----------------------------------------------------------------------===//

#include "runtime/train/Backend.h"
#include "runtime/train/Runner.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

using namespace ampc;
using train::RunnerOptions;
using train::UsageError;

namespace {

RunnerOptions parse(std::vector<std::string> args) { return train::parseRunnerArguments(args); }

/// Expects parsing \p args to fail with a message containing \p fragment.
void expectUsageError(std::vector<std::string> args, const std::string &fragment) {
  try {
    parse(args);
    ADD_FAILURE() << "expected a UsageError mentioning: " << fragment;
  } catch (const UsageError &error) {
    EXPECT_NE(std::string(error.what()).find(fragment), std::string::npos) << error.what();
  }
}

TEST(TrainRunner, ParsesDefaultsAndEveryFlag) {
  RunnerOptions defaults = parse({});
  EXPECT_EQ(defaults.steps, 100u);
  EXPECT_EQ(defaults.seed, 0u);
  EXPECT_EQ(defaults.device, "auto");
  EXPECT_EQ(defaults.threads, 0);
  EXPECT_TRUE(defaults.dataPath.empty());
  EXPECT_FALSE(defaults.dataFormat);
  EXPECT_FALSE(defaults.quiet || defaults.info || defaults.help || defaults.cpuFallback);

  RunnerOptions all = parse({"--steps", "7", "--seed=42", "--data", "d.txt", "--data-format",
                             "tokens", "--log", "m.jsonl", "--device", "cuda", "--threads=3",
                             "--quiet", "--info", "--help", "--cpu-fallback"});
  EXPECT_EQ(all.steps, 7u);
  EXPECT_EQ(all.seed, 42u);
  EXPECT_EQ(all.dataPath, "d.txt");
  EXPECT_EQ(all.dataFormat, train::DataFormat::Tokens);
  EXPECT_EQ(all.logPath, "m.jsonl");
  EXPECT_EQ(all.device, "cuda");
  EXPECT_EQ(all.threads, 3);
  EXPECT_TRUE(all.quiet && all.info && all.help && all.cpuFallback);
  EXPECT_EQ(parse({"--seed", "18446744073709551615"}).seed + 1, 0u);
}

TEST(TrainRunner, RejectsBadArguments) {
  expectUsageError({"--steps", "0"}, "--steps must be at least 1");
  expectUsageError({"--steps", "-3"}, "--steps expects a non-negative integer, got '-3'");
  expectUsageError({"--steps", "1e3"}, "got '1e3'");
  expectUsageError({"--seed", "18446744073709551616"}, "--seed is at most 18446744073709551615");
  expectUsageError({"--steps"}, "--steps needs a value");
  expectUsageError({"--seed", ""}, "--seed expects a non-negative integer");
  expectUsageError({"--device", "tpu"}, "--device is auto, cpu or cuda, got 'tpu'");
  EXPECT_EQ(parse({"--device=cpu"}).device, "cpu");
  EXPECT_EQ(parse({}).matmulAlgorithms, "timed");
  EXPECT_EQ(parse({"--matmul-algorithms", "heuristic"}).matmulAlgorithms, "heuristic");
  expectUsageError({"--matmul-algorithms", "fastest"},
                   "--matmul-algorithms is timed or heuristic, got 'fastest'");
  EXPECT_EQ(parse({}).attention, "timed");
  EXPECT_EQ(parse({"--attention", "ampc"}).attention, "ampc");
  EXPECT_EQ(parse({"--attention=cudnn"}).attention, "cudnn");
  expectUsageError({"--attention", "flash"}, "--attention is timed, ampc or cudnn, got 'flash'");
  expectUsageError({"--data-format", "csv", "--data", "x"},
                   "--data-format is tokens (uint16 .bin) or text, got 'csv'");
  expectUsageError({"--data-format", "text"}, "--data-format needs --data FILE");
  expectUsageError({"--threads", "0"}, "--threads must be between 1 and 4096");
  expectUsageError({"--lr", "3"}, "unknown option '--lr'");
  expectUsageError({"--quiet=yes"}, "--quiet takes no value");
  expectUsageError({"model.mlir"}, "unexpected argument 'model.mlir'");
}

TEST(TrainRunner, DeviceChoiceRule) {
  int probes = 0;
  auto gpuOk = [&] {
    ++probes;
    return train::GpuProbe{};
  };
  auto noDriver = [&] {
    ++probes;
    return train::GpuProbe{"no NVIDIA driver found (libcuda.so.1 could not be "
                           "loaded): use --device cpu",
                           true};
  };
  auto outOfMemory = [&] {
    ++probes;
    return train::GpuProbe{"out of GPU memory: 9.6 GB asked, 2.1 GB free", false};
  };
  // cpu never probes; without a device program nothing probes either.
  train::DeviceChoice cpu = train::chooseDevice("cpu", true, false, gpuOk);
  EXPECT_FALSE(cpu.useCuda);
  EXPECT_EQ(cpu.note + cpu.error, "");
  EXPECT_FALSE(train::chooseDevice("auto", false, false, gpuOk).useCuda);
  EXPECT_EQ(probes, 0);
  EXPECT_TRUE(train::chooseDevice("auto", true, false, gpuOk).useCuda);
  EXPECT_TRUE(train::chooseDevice("cuda", true, false, gpuOk).useCuda);
  // No GPU at all: auto trains on the CPU and says why; cuda is an error.
  train::DeviceChoice fallback = train::chooseDevice("auto", true, false, noDriver);
  EXPECT_FALSE(fallback.useCuda);
  EXPECT_EQ(fallback.error, "");
  EXPECT_EQ(fallback.note, "device: cpu (the GPU cannot be used: no NVIDIA "
                           "driver found (libcuda.so.1 could not be loaded))");
  train::DeviceChoice refused = train::chooseDevice("cuda", true, false, noDriver);
  EXPECT_FALSE(refused.useCuda);
  EXPECT_EQ(refused.error, "no NVIDIA driver found (libcuda.so.1 could not be "
                           "loaded): use --device cpu");
  EXPECT_EQ(train::chooseDevice("cuda", false, false, gpuOk).error, train::kPlanHasNoGpuCode);
  EXPECT_EQ(probes, 4);
  // A GPU that is there but fails is never hidden by auto: an error, unless
  // --cpu-fallback asks for the CPU, and then a warning.
  train::DeviceChoice failed = train::chooseDevice("auto", true, false, outOfMemory);
  EXPECT_FALSE(failed.useCuda);
  EXPECT_EQ(failed.note, "");
  EXPECT_EQ(failed.error, "the GPU is there but failed: out of GPU memory: 9.6 GB asked, "
                          "2.1 GB free (--device cpu trains on the CPU; --cpu-fallback does "
                          "so whenever the GPU fails)");
  train::DeviceChoice allowed = train::chooseDevice("auto", true, true, outOfMemory);
  EXPECT_FALSE(allowed.useCuda);
  EXPECT_EQ(allowed.error, "");
  EXPECT_EQ(allowed.note, "warning: the GPU failed (out of GPU memory: 9.6 GB "
                          "asked, 2.1 GB free); training on the CPU as "
                          "--cpu-fallback asks");
  EXPECT_EQ(train::chooseDevice("cuda", true, true, outOfMemory).error,
            "out of GPU memory: 9.6 GB asked, 2.1 GB free");
  // --cpu-fallback changes nothing when there is no GPU at all.
  EXPECT_EQ(train::chooseDevice("auto", true, true, noDriver).note, fallback.note);
  EXPECT_EQ(probes, 8);
}

TEST(TrainRunner, ParsesInjectOverflow) {
  EXPECT_TRUE(parse({}).injectOverflow.empty());
  EXPECT_EQ(parse({"--inject-overflow", "5,2,5", "--steps", "10"}).injectOverflow,
            (std::vector<uint64_t>{2, 5}));
  EXPECT_EQ(parse({"--inject-overflow=7", "--inject-overflow", "1", "--steps", "7"}).injectOverflow,
            (std::vector<uint64_t>{1, 7}));
  // The default is 100 steps.
  EXPECT_EQ(parse({"--inject-overflow", "100"}).injectOverflow, (std::vector<uint64_t>{100}));
}

TEST(TrainRunner, RejectsBadInjectOverflow) {
  expectUsageError({"--inject-overflow"}, "--inject-overflow needs a value");
  expectUsageError({"--inject-overflow", ""}, "--inject-overflow expects STEP[,STEP...] (1-based "
                                              "optimizer steps), got ''");
  expectUsageError({"--inject-overflow", "3,,4"},
                   "--inject-overflow expects STEP[,STEP...] (1-based "
                   "optimizer steps), got '3,,4'");
  expectUsageError({"--inject-overflow", "3,"}, "got '3,'");
  expectUsageError({"--inject-overflow", "0"}, "--inject-overflow steps are 1-based, got 0");
  expectUsageError({"--inject-overflow", "2,x"},
                   "--inject-overflow expects a non-negative integer, got 'x'");
  expectUsageError({"--inject-overflow", "-1"},
                   "--inject-overflow expects a non-negative integer, got '-1'");
  expectUsageError({"--steps", "5", "--inject-overflow", "2,6"},
                   "--inject-overflow step 6 is beyond the last step "
                   "(--steps 5)");
  expectUsageError({"--inject-overflow", "101"}, "step 101 is beyond the last step (--steps 100)");
}

TEST(TrainRunner, HelpDocumentsInjectOverflowAsATestingAid) {
  const std::string usage = train::runnerUsage("train_x");
  const size_t aids = usage.find("\ntesting aids:\n");
  ASSERT_NE(aids, std::string::npos) << usage;
  EXPECT_NE(usage.find("--inject-overflow S[,S...]", aids), std::string::npos);
}

} // namespace
