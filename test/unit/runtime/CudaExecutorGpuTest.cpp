//===- CudaExecutorGpuTest.cpp - the CUDA backend against the CPU backend -===//
//
// Every example model (MLP, tiny GPT) in bf16, fp16 (dynamic loss scaling)
// and fp32, as `ampc plan --train` wrote it at build time with its device
// program (gpu-test-plans/ beside this binary, or $AMPC_GPU_TEST_PLANS), is
// run by cuda::Executor on a GPU next to cpu::Executor on the same plan,
// seed and inputs. The binary links no MLIR or LLVM, so it travels to a GPU
// machine with its plans.
//  * group by group: each step group of the micro step and the optimizer
//    step gets the CPU's values of every buffer it reads, runs alone, and
//    every temporary it writes must match the CPU's value of it; after the
//    micro step the GPU's own gradient accumulators, and after the
//    optimizer step its parameters, AdamW moments and reduced-precision
//    parameter copies must match the CPU's;
//  * the tiny GPT end to end: forward loss, every gradient accumulator after
//    one micro step, every parameter after one optimizer step;
//  * fp16 with an injected overflow: the same skipped steps and scales;
//  * CUDA-graph replay against eager runs; the profiling path against
//    unprofiled runs.
// Tolerances (see tolerance()): fp32 buffers 2e-5 of the value's scale
// (cuBLASLt and the block reductions sum in another order than the CPU;
// inputs are identical, so the difference is f32 rounding of long sums);
// bf16/f16 buffers 3 ulps of the stored type at the value's scale (one
// rounding of the stored result may land on the other side, plus the f32
// differences before it). The scale of an element is max(|cpu|, rms of the
// buffer), so near-zero elements of a large tensor are not held to a
// relative bound they cannot meet.
//
// Only a machine without the NVIDIA driver or without a GPU skips (with the
// reason); any other failure to open the GPU fails. Run by
// test/gpu/run-gpu-tests.sh and registered with ctest.
//
//===----------------------------------------------------------------------===//

#include "CudaGpuTestUtils.h"
#include "runtime/cpu/Executor.h"
#include "runtime/cuda/Executor.h"
#include "runtime/cuda/Profile.h"
#include "runtime/plan/Plan.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <set>
#include <variant>

using namespace ampc;

namespace {

#define REQUIRE_GPU()                                                                              \
  if (!cuda::testing::gpuState().device)                                                           \
  GTEST_SKIP() << cuda::testing::gpuState().skipReason

cuda::Device &gpu() { return *cuda::testing::gpuState().device; }

struct Precision {
  const char *mode;
  const char *lossScaling;
};
const Precision kPrecisions[] = {{"bf16", "none"}, {"fp16", "dynamic"}, {"fp32", "none"}};

/// The folder of the plans: $AMPC_GPU_TEST_PLANS, else gpu-test-plans/
/// beside this executable.
std::string planDirectory() {
  if (const char *fromEnvironment = std::getenv("AMPC_GPU_TEST_PLANS"))
    return fromEnvironment;
  char path[PATH_MAX];
  const ssize_t length = readlink("/proc/self/exe", path, sizeof(path) - 1);
  std::string self = length > 0 ? std::string(path, length) : std::string();
  return self.substr(0, self.rfind('/') + 1) + "gpu-test-plans";
}

/// The training plan of \p model ("mlp", "mlp_gates", "tiny") in \p precision with its
/// device program, as the build wrote it.
plan::Plan loadTestPlan(const std::string &model, const Precision &precision) {
  const std::string path = planDirectory() + "/" + model + "_" + precision.mode + ".plan";
  plan::Plan result = plan::loadPlan(path);
  EXPECT_FALSE(result.device.empty()) << path << " has no device program";
  return result;
}

/// The allowed |gpu - cpu| for an element of \p dtype at \p scale.
double tolerance(plan::DType dtype, double scale) {
  switch (dtype) {
  case plan::DType::BF16:
    return 3 * std::ldexp(1.0, -7) * scale;
  case plan::DType::F16:
    return 3 * std::ldexp(1.0, -10) * scale;
  case plan::DType::F32:
    return 2e-5 * scale;
  default:
    return 0; // integers: exact
  }
}

/// Compares \p gpuValues with \p cpuValues element by element; returns ""
/// or the first mismatch.
std::string compare(const std::vector<double> &gpuValues, const std::vector<double> &cpuValues,
                    plan::DType dtype, double extraTolerance = 0) {
  if (gpuValues.size() != cpuValues.size())
    return "sizes differ";
  double squares = 0;
  for (double value : cpuValues)
    squares += value * value;
  const double rms = cpuValues.empty() ? 0 : std::sqrt(squares / cpuValues.size());
  for (size_t i = 0; i < cpuValues.size(); ++i) {
    const double expected = cpuValues[i], actual = gpuValues[i];
    if (std::isnan(expected) && std::isnan(actual))
      continue;
    const double allowed = tolerance(dtype, std::max(std::fabs(expected), rms)) + extraTolerance;
    if (!(std::fabs(actual - expected) <= allowed))
      return "element " + std::to_string(i) + ": gpu " + std::to_string(actual) + ", cpu " +
             std::to_string(expected) + " (allowed difference " + std::to_string(allowed) +
             ", rms " + std::to_string(rms) + ")";
  }
  return "";
}

cpu::RunOptions trainingRun(uint64_t step, uint64_t totalSteps = 10) {
  cpu::RunOptions run;
  run.seed = 5;
  run.step = step;
  run.training = true;
  run.totalSteps = totalSteps;
  return run;
}

/// Runs every group of \p function alone on the GPU, fed the CPU's values,
/// and compares what it writes with the CPU's values after the function
/// (\p cpuAfter: the CPU executor after running the same function).
void compareGroups(const plan::Plan &plan, cuda::Executor &gpuExecutor, cpu::Executor &cpuAfter,
                   cuda::PlanFunction function, const cpu::RunOptions &run,
                   const std::string &label) {
  const plan::DeviceFunction &program =
      function == cuda::PlanFunction::MicroStep ? plan.device.microStep : plan.device.optimizerStep;
  // A buffer is compared after the last group that writes it (a memset
  // and the kernel that accumulates into it may be different groups);
  // read-write state is compared after the whole function.
  std::map<uint32_t, size_t> lastWriter;
  for (size_t g = 0; g < program.groups.size(); ++g)
    for (uint32_t buffer : cuda::writtenBuffers(program.groups[g]))
      lastWriter[buffer] = g;
  for (size_t g = 0; g < program.groups.size(); ++g) {
    for (uint32_t buffer : cuda::readBuffers(program.groups[g]))
      if (plan.buffers[buffer].role == plan::BufferRole::Temporary &&
          gpuExecutor.hasStorage(buffer))
        gpuExecutor.setBufferValues(buffer, cpuAfter.bufferValues(buffer));
    gpuExecutor.runGroups(function, g, g + 1, run);
    for (uint32_t buffer : cuda::writtenBuffers(program.groups[g])) {
      const plan::Buffer &b = plan.buffers[buffer];
      if (lastWriter[buffer] != g || b.role != plan::BufferRole::Temporary)
        continue;
      const std::string mismatch =
          compare(gpuExecutor.bufferValues(buffer), cpuAfter.bufferValues(buffer), b.dtype);
      EXPECT_EQ(mismatch, "") << label << " " << cuda::planFunctionName(function) << " group " << g
                              << " (" << program.groups[g].kind << "), buffer " << buffer << " '"
                              << b.name << "' " << plan::dtypeName(b.dtype);
    }
  }
}

/// Compares every persistent buffer that \p program writes (state,
/// parameters, parameter copies) on the GPU with the CPU's; returns how many.
size_t comparePersistent(const plan::Plan &plan, cuda::Executor &gpuExecutor,
                         cpu::Executor &cpuAfter, const plan::DeviceFunction &program,
                         const std::string &label) {
  std::set<uint32_t> written;
  for (const plan::DeviceGroup &group : program.groups)
    for (uint32_t buffer : cuda::writtenBuffers(group))
      if (plan.buffers[buffer].role != plan::BufferRole::Temporary)
        written.insert(buffer);
  for (uint32_t buffer : written) {
    const plan::Buffer &b = plan.buffers[buffer];
    // Parameters move by about the learning rate from values computed in
    // f32 on both sides: allow a few f32 ulps of the step on top.
    const double extra = b.role == plan::BufferRole::Parameter ? 1e-7 : 0;
    EXPECT_EQ(
        compare(gpuExecutor.bufferValues(buffer), cpuAfter.bufferValues(buffer), b.dtype, extra),
        "")
        << label << " persistent buffer " << buffer << " '" << b.name << "' "
        << plan::dtypeName(b.dtype);
  }
  return written.size();
}

class CudaExecutorModels : public ::testing::TestWithParam<std::tuple<const char *, Precision>> {};

/// Every group of \p plan's micro step and optimizer step on the GPU (\p executor), fed the
/// CPU's values, against the CPU's; then the persistent buffers each function writes.
void expectEveryGroupMatchesTheCpu(const plan::Plan &plan, cuda::Executor &executor,
                                   const std::string &label) {
  cpu::Executor reference(plan, cpu::Precision::F32);
  reference.initializeParameters(3);
  executor.initializeParameters(3);
  reference.randomizeInputs(4);
  executor.randomizeInputs(4);
  // The micro step: the CPU runs it, then the GPU group by group.
  const cpu::RunOptions run = trainingRun(0);
  reference.run(run);
  compareGroups(plan, executor, reference, cuda::PlanFunction::MicroStep, run, label);
  // What the GPU's own kernels wrote into the persistent state (gradient
  // accumulators; the loss-scale state).
  size_t compared = comparePersistent(plan, executor, reference, plan.device.microStep, label);
  EXPECT_GT(compared, 0u) << label << ": the micro step writes no state";
  // The optimizer step, from the CPU's accumulators and moments exactly.
  for (uint32_t id = 0; id < plan.buffers.size(); ++id)
    if (plan.buffers[id].role == plan::BufferRole::State)
      executor.setBufferValues(id, reference.bufferValues(id));
  const cpu::RunOptions optimizer = trainingRun(0);
  reference.runOptimizerStep(optimizer);
  compareGroups(plan, executor, reference, cuda::PlanFunction::OptimizerStep, optimizer, label);
  // Parameters, AdamW moments and reduced-precision copies.
  compared = comparePersistent(plan, executor, reference, plan.device.optimizerStep, label);
  EXPECT_GE(compared, 2 * plan.parameters.size() + plan.parameterCopies.size())
      << label << ": the optimizer step writes fewer buffers than expected";
}

TEST_P(CudaExecutorModels, EveryGroupMatchesTheCpu) {
  REQUIRE_GPU();
  const auto [model, precision] = GetParam();
  const plan::Plan plan = loadTestPlan(model, precision);
  ASSERT_FALSE(plan.device.empty());
  cuda::Executor executor(plan, gpu());
  expectEveryGroupMatchesTheCpu(plan, executor, std::string(model) + " " + precision.mode);
}

/// Relative L2 error.
double relativeError(const std::vector<double> &actual, const std::vector<double> &expected) {
  double difference = 0, reference = 0;
  for (size_t i = 0; i < expected.size(); ++i) {
    difference += (actual[i] - expected[i]) * (actual[i] - expected[i]);
    reference += expected[i] * expected[i];
  }
  return reference == 0 ? std::sqrt(difference) : std::sqrt(difference / reference);
}

/// An executor of \p plan whose 16-bit attention steps run cuDNN's fused attention
/// (--attention cudnn), or null (with the reason in \p why) where cuDNN's does not run them.
std::unique_ptr<cuda::Executor> withCudnnAttention(const plan::Plan &plan, std::string &why) {
  cuda::ExecutorOptions options;
  options.attentionSelection = cuda::AttentionSelection::Cudnn;
  auto executor = std::make_unique<cuda::Executor>(plan, gpu(), options);
  const std::vector<cuda::AttentionChoice> choices = executor->attentionChoices();
  why = cuda::formatAttentionChoices(choices);
  if (choices.size() != 2 || !choices[0].cudnn || !choices[1].cudnn)
    return nullptr;
  return executor;
}

TEST(CudaExecutorCudnnAttention, EveryGroupMatchesTheCpu) {
  REQUIRE_GPU();
  // The tiny GPT's attention steps on cuDNN's fused attention, the other groups as always,
  // each against the CPU backend, in bf16 and fp16 (a precision where cuDNN's does not build
  // is reported and skipped).
  int ran = 0;
  for (const Precision &precision : kPrecisions) {
    if (std::string(precision.mode) == "fp32")
      continue;
    const plan::Plan plan = loadTestPlan("tiny", precision);
    std::string why;
    std::unique_ptr<cuda::Executor> executor = withCudnnAttention(plan, why);
    if (!executor) {
      std::printf("tiny %s: cuDNN's attention does not run here:\n%s", precision.mode,
                  why.c_str());
      continue;
    }
    ++ran;
    expectEveryGroupMatchesTheCpu(plan, *executor,
                                  std::string("tiny ") + precision.mode + " (cuDNN attention)");
  }
  if (ran == 0)
    GTEST_SKIP() << "cuDNN's attention runs for no precision here";
}

TEST(CudaExecutorCudnnAttention, TrainsAsOurKernelsDo) {
  REQUIRE_GPU();
  // The tiny GPT in bf16 trained for a few optimizer steps the way the training loop runs it
  // (CUDA graphs captured and replayed), with cuDNN's attention and with ours: the same loss
  // at every step, to bf16's rounding of two different attention kernels.
  const plan::Plan plan = loadTestPlan("tiny", kPrecisions[0]);
  std::string why;
  std::unique_ptr<cuda::Executor> cudnn = withCudnnAttention(plan, why);
  if (!cudnn)
    GTEST_SKIP() << "cuDNN's attention does not run here:\n" << why;
  cuda::ExecutorOptions ownOptions;
  ownOptions.attentionSelection = cuda::AttentionSelection::Own;
  cuda::Executor ours(plan, gpu(), ownOptions);
  constexpr uint64_t kSteps = 4;
  for (cuda::Executor *executor : {cudnn.get(), &ours})
    executor->initializeParameters(1);
  for (uint64_t step = 0; step < kSteps; ++step) {
    double losses[2];
    int side = 0;
    for (cuda::Executor *executor : {cudnn.get(), &ours}) {
      executor->randomizeInputs(100 + step);
      executor->runMicroStep(trainingRun(step, kSteps));
      executor->runOptimizerStep(trainingRun(step, kSteps));
      losses[side++] = executor->readMetrics().loss;
    }
    EXPECT_NEAR(losses[0], losses[1], 2e-2 * std::fabs(losses[1])) << "step " << step;
  }
  // (Parameters are not compared element by element: AdamW's first updates are about
  // lr * sign(gradient), so an element whose gradient is near zero may move either way on the
  // two sides; the losses of the later steps carry the updates' effect.)
  EXPECT_GT(cudnn->replayedSegments(cuda::PlanFunction::MicroStep), 0u)
      << "the micro step never ran from its CUDA graph";
}

INSTANTIATE_TEST_SUITE_P(Examples, CudaExecutorModels,
                         ::testing::Combine(::testing::Values("mlp", "mlp_gates", "tiny"),
                                            ::testing::ValuesIn(kPrecisions)),
                         [](const auto &info) {
                           return std::string(std::get<0>(info.param)) + "_" +
                                  std::get<1>(info.param).mode;
                         });


TEST(CudaExecutorTinyGpt, LossGradientsAndUpdateMatchTheCpu) {
  REQUIRE_GPU();
  // End to end, the GPU feeding itself: errors compound through the layers,
  // so the bounds are on the whole tensor (relative L2), per precision.
  const struct {
    Precision precision;
    double loss, gradients, parameters;
  } cases[] = {{kPrecisions[0], 2e-3, 3e-2, 1e-3},
               {kPrecisions[1], 1e-3, 5e-3, 1e-3},
               {kPrecisions[2], 1e-5, 1e-4, 1e-5}};
  for (const auto &c : cases) {
    const plan::Plan plan = loadTestPlan("tiny", c.precision);
    cpu::Executor reference(plan, cpu::Precision::F32);
    cuda::Executor executor(plan, gpu());
    reference.initializeParameters(1);
    executor.initializeParameters(1);
    reference.randomizeInputs(2);
    executor.randomizeInputs(2);
    const double cpuLoss = reference.run(trainingRun(0));
    executor.runMicroStep(trainingRun(0));
    // Loss: read through the metrics path after an optimizer step below;
    // the accumulators first.
    std::vector<double> gpuGrads, cpuGrads;
    for (uint32_t id = 0; id < plan.buffers.size(); ++id)
      if (plan.buffers[id].role == plan::BufferRole::State &&
          plan::numElements(plan.buffers[id]) > 1) {
        const auto g = executor.bufferValues(id), r = reference.bufferValues(id);
        gpuGrads.insert(gpuGrads.end(), g.begin(), g.end());
        cpuGrads.insert(cpuGrads.end(), r.begin(), r.end());
      }
    EXPECT_LT(relativeError(gpuGrads, cpuGrads), c.gradients) << c.precision.mode;
    // Each parameter's CPU gradient, through the optimizer's table.
    std::map<uint32_t, uint32_t> gradientOf;
    for (const plan::DeviceGroup &group : plan.device.optimizerStep.groups)
      for (const plan::DeviceStep &step : group.steps)
        if (const auto *launch = std::get_if<plan::LaunchStep>(&step))
          for (const plan::DeviceArgument &argument : launch->args)
            if (argument.kind == plan::ArgKind::Table &&
                argument.table.kind == plan::TableKind::Optimizer)
              for (const plan::TableEntry &entry : argument.table.entries)
                gradientOf[entry.param] = entry.grad;
    std::vector<std::vector<double>> gradientsBefore;
    for (const plan::Parameter &parameter : plan.parameters) {
      ASSERT_TRUE(gradientOf.count(parameter.buffer)) << parameter.name;
      gradientsBefore.push_back(reference.bufferValues(gradientOf.at(parameter.buffer)));
    }
    reference.runOptimizerStep(trainingRun(0));
    executor.runOptimizerStep(trainingRun(0));
    const cuda::StepMetrics metrics = executor.readMetrics();
    EXPECT_NEAR(metrics.loss, cpuLoss, c.loss * std::fabs(cpuLoss)) << c.precision.mode;
    EXPECT_NEAR(metrics.learningRate, reference.learningRate(), 1e-12);
    // AdamW's first update is about lr * sign(gradient) per element, so an
    // element whose gradient is within the gradients' error of zero may move
    // either way on the two sides: the key bias's gradient, for one, is zero
    // up to rounding (softmax is invariant to it). Elements whose CPU
    // gradient exceeds that error must agree closely; the others only move
    // by at most the step (|update| <= lr, plus weight decay).
    const double lr = reference.learningRate();
    for (size_t p = 0; p < plan.parameters.size(); ++p) {
      const plan::Parameter &parameter = plan.parameters[p];
      const std::vector<double> gpu = executor.bufferValues(parameter.buffer),
                                cpu = reference.bufferValues(parameter.buffer),
                                gradient = gradientsBefore[p];
      double squares = 0;
      for (double g : gradient)
        squares += g * g;
      const double threshold =
          4 * c.gradients * std::sqrt(squares / std::max<size_t>(1, gradient.size()));
      std::vector<double> gpuDetermined, cpuDetermined;
      for (size_t i = 0; i < cpu.size(); ++i) {
        if (std::fabs(gradient[i]) > threshold) {
          gpuDetermined.push_back(gpu[i]);
          cpuDetermined.push_back(cpu[i]);
        } else {
          EXPECT_LE(std::fabs(gpu[i] - cpu[i]), 2.2 * lr)
              << c.precision.mode << " " << parameter.name << " element " << i;
        }
      }
      EXPECT_GT(gpuDetermined.size(), cpu.size() / 4) << c.precision.mode << " " << parameter.name;
      EXPECT_LT(relativeError(gpuDetermined, cpuDetermined), c.parameters)
          << c.precision.mode << " " << parameter.name;
    }
  }
}

TEST(CudaExecutorTinyGpt, InjectedOverflowSkipsLikeTheCpu) {
  REQUIRE_GPU();
  const plan::Plan plan = loadTestPlan("tiny", kPrecisions[1]);
  ASSERT_NE(plan.lossScaling.mode, plan::LossScaleMode::None);
  cpu::Executor reference(plan, cpu::Precision::F32);
  cuda::Executor executor(plan, gpu());
  reference.initializeParameters(0);
  executor.initializeParameters(0);
  const std::set<uint64_t> overflow = {1, 2, 4};
  for (uint64_t step = 0; step < 6; ++step) {
    reference.randomizeInputs(step);
    executor.randomizeInputs(step);
    cpu::RunOptions micro = trainingRun(step, 6);
    micro.injectNonFinite = overflow.count(step) > 0;
    reference.run(micro);
    executor.runMicroStep(micro);
    reference.runOptimizerStep(trainingRun(step, 6));
    executor.runOptimizerStep(trainingRun(step, 6));
    const cpu::LossScaleStatus expected = reference.lossScaleStatus();
    const cuda::StepMetrics actual = executor.readMetrics();
    EXPECT_EQ(actual.lossScale.lastStepSkipped, expected.lastStepSkipped) << "step " << step;
    EXPECT_EQ(actual.lossScale.scale, expected.scale) << "step " << step;
    EXPECT_EQ(actual.lossScale.skippedSteps, expected.skippedSteps) << "step " << step;
  }
}

TEST(CudaExecutorTinyGpt, GraphReplayMatchesEager) {
  REQUIRE_GPU();
  const plan::Plan plan = loadTestPlan("tiny", kPrecisions[0]);
  cuda::ExecutorOptions eagerOptions;
  eagerOptions.useGraphs = false;
  cuda::Executor eager(plan, gpu(), eagerOptions);
  cuda::Executor graphs(plan, gpu());
  std::vector<double> eagerLosses, graphLosses;
  eager.initializeParameters(7);
  graphs.initializeParameters(7);
  for (uint64_t step = 0; step < 4; ++step) {
    for (cuda::Executor *executor : {&eager, &graphs}) {
      executor->randomizeInputs(step);
      executor->runMicroStep(trainingRun(step, 4));
      executor->runOptimizerStep(trainingRun(step, 4));
      const double loss = executor->readMetrics().loss;
      (executor == &eager ? eagerLosses : graphLosses).push_back(loss);
    }
  }
  // From the third run on, each function is replayed as its one graph.
  EXPECT_EQ(graphs.replayedSegments(cuda::PlanFunction::MicroStep), 1u);
  EXPECT_EQ(graphs.replayedSegments(cuda::PlanFunction::OptimizerStep), 1u);
  for (size_t i = 0; i < eagerLosses.size(); ++i)
    EXPECT_NEAR(graphLosses[i], eagerLosses[i], 1e-6 * std::fabs(eagerLosses[i])) << "step " << i;
  for (const plan::Parameter &parameter : plan.parameters)
    EXPECT_LT(
        relativeError(graphs.bufferValues(parameter.buffer), eager.bufferValues(parameter.buffer)),
        1e-6)
        << parameter.name;
}

TEST(CudaExecutorTinyGpt, ProfilingTimesEveryGroupAndChangesNothing) {
  REQUIRE_GPU();
  const plan::Plan plan = loadTestPlan("tiny", kPrecisions[0]);
  cuda::Executor plain(plan, gpu());
  cuda::Executor profiled(plan, gpu());
  profiled.setProfiling(true);
  for (cuda::Executor *executor : {&plain, &profiled})
    executor->initializeParameters(11);
  std::vector<double> plainLosses, profiledLosses;
  for (uint64_t step = 0; step < 3; ++step)
    for (cuda::Executor *executor : {&plain, &profiled}) {
      executor->randomizeInputs(step);
      executor->runMicroStep(trainingRun(step, 3));
      executor->runOptimizerStep(trainingRun(step, 3));
      const cuda::StepMetrics metrics = executor->readMetrics();
      EXPECT_GT(metrics.deviceMilliseconds, 0) << "step " << step;
      (executor == &plain ? plainLosses : profiledLosses).push_back(metrics.loss);
    }
  // Not bit for bit: the loss and the embedding gradient are summed with f32
  // atomics, whose order varies from run to run (as in GraphReplayMatchesEager).
  ASSERT_EQ(profiledLosses.size(), plainLosses.size());
  for (size_t i = 0; i < plainLosses.size(); ++i)
    EXPECT_NEAR(profiledLosses[i], plainLosses[i], 1e-6 * std::fabs(plainLosses[i]))
        << "step " << i;
  const std::vector<cuda::GroupTime> times = profiled.groupTimes();
  ASSERT_EQ(times.size(),
            plan.device.microStep.groups.size() + plan.device.optimizerStep.groups.size());
  for (const cuda::GroupTime &time : times) {
    EXPECT_EQ(time.runs, 3u);
    EXPECT_GT(time.milliseconds, 0) << "group " << time.group;
  }
  EXPECT_TRUE(plain.groupTimes().empty());
  const std::string report = cuda::formatProfile(plan, cuda::profileRows(plan, times), 10, 3, -1);
  EXPECT_NE(report.find("matmuls"), std::string::npos) << report;
  const cuda::DeviceMemoryUse memory = profiled.memoryUse();
  EXPECT_EQ(memory.planned, cuda::deviceMemoryNeeds(plan).total());
  EXPECT_GE(memory.allocated, memory.planned);
  EXPECT_GE(memory.deviceUsed, memory.allocated);
}

} // namespace
