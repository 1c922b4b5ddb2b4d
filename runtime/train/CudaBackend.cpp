//===- CudaBackend.cpp - The CUDA training backend (runners built with CUDA)
//
// cuda::Executor behind the TrainingBackend interface. Steps are queued on
// the GPU's stream; readMetrics() is the one synchronisation per optimizer
// step. Compiled only when the CUDA toolkit is present (AMPC_RUNNER_HAVE_CUDA).
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/Driver.h"
#include "runtime/cuda/Executor.h"
#include "runtime/cuda/GradientExchange.h"
#include "runtime/cuda/Profile.h"
#include "runtime/train/Backend.h"
#include "runtime/train/Distributed.h"

namespace ampc::train {

namespace {

/// A data parallel rank's executor ends a CUDA graph segment where a
/// gradient bucket becomes final, so its exchange can start there.
cuda::ExecutorOptions executorOptions(const plan::Plan &plan, const CudaChoices &choices) {
  cuda::ExecutorOptions options;
  options.matmulSelection = choices.timeMatmulAlgorithms ? cuda::MatmulSelection::Timed
                                                         : cuda::MatmulSelection::Heuristic;
  options.attentionSelection = choices.attention == "ampc"    ? cuda::AttentionSelection::Own
                               : choices.attention == "cudnn" ? cuda::AttentionSelection::Cudnn
                                                              : cuda::AttentionSelection::Timed;
  if (processLaunch().dataParallel)
    options.microStepCutsAfter = cuda::GradientExchange::cutsFor(plan);
  return options;
}

class CudaBackend final : public TrainingBackend, public DeviceGradientSync {
public:
  CudaBackend(const plan::Plan &plan, std::unique_ptr<cuda::Device> opened,
              const CudaChoices &choices)
      : gpu(std::move(opened)), executor(plan, *gpu, executorOptions(plan, choices)) {}

  // Data parallel (DeviceGradientSync): NCCL, bucket by bucket.
  std::string newExchangeId() override {
    const cuda::NcclId id = cuda::NcclWorld::newId(cuda::ncclApi());
    return std::string(id.begin(), id.end());
  }
  void joinExchange(const std::string &id, int rank, int ranks, uint64_t microSteps) override {
    cuda::NcclId bytes{};
    std::copy(id.begin(), id.begin() + std::min(id.size(), bytes.size()), bytes.begin());
    nccl = std::make_unique<cuda::NcclWorld>(cuda::ncclApi(), bytes, rank, ranks);
    exchange = std::make_unique<cuda::GradientExchange>(executor, *nccl);
    localMicroSteps = microSteps;
  }
  void finishExchange() override {
    nccl->checkAsyncError();
    exchange->finish();
    microStepsQueued = 0;
  }
  std::string describeExchange() const override {
    const int version = nccl->api().version;
    return "NCCL " + std::to_string(version / 10000) + "." + std::to_string(version / 100 % 100) +
           "." + std::to_string(version % 100) + ", " + std::to_string(exchange->buckets().size()) +
           " gradient bucket" + (exchange->buckets().size() == 1 ? "" : "s");
  }

  const char *device() const override { return "cuda"; }
  /// The GPU, then which attention runs each distinct problem and why.
  std::string description() const override {
    std::string text = "device: cuda, " + gpu->info().summary();
    const std::string attention = cuda::formatAttentionChoices(executor.attentionChoices());
    if (!attention.empty())
      text += "\n" + attention.substr(0, attention.size() - 1);
    return text;
  }
  void initializeParameters(uint64_t seed) override { executor.initializeParameters(seed); }
  void setInput(const std::string &name, const void *data, size_t bytes) override {
    executor.setInput(name, data, bytes);
  }
  void randomizeInputs(uint64_t seed) override { executor.randomizeInputs(seed); }
  void runMicroStep(const cpu::RunOptions &options) override {
    // The last micro step of the optimizer step issues the gradient buckets
    // as its backward pass finishes them.
    if (exchange && ++microStepsQueued == localMicroSteps)
      exchange->armForLastMicroStep();
    executor.runMicroStep(options);
  }
  void runOptimizerStep(const cpu::RunOptions &options) override {
    executor.runOptimizerStep(options);
  }
  double evaluateLoss(const cpu::RunOptions &options) override {
    if (!forwardGroups)
      forwardGroups = plan::forwardGroupCount(executor.plan());
    executor.runGroups(cuda::PlanFunction::MicroStep, 0, forwardGroups, options);
    return executor.bufferValues(executor.plan().loss).at(0);
  }
  BackendMetrics readMetrics() override {
    const cuda::StepMetrics step = executor.readMetrics();
    BackendMetrics metrics;
    metrics.loss = step.loss;
    metrics.gradNorm = step.gradNorm;
    metrics.learningRate = step.learningRate;
    metrics.scaleBefore = step.scaleBefore;
    metrics.lossScale = step.lossScale;
    metrics.deviceMilliseconds = step.deviceMilliseconds;
    return metrics;
  }
  std::vector<double> readBuffer(uint32_t buffer) override { return executor.bufferValues(buffer); }
  void writeBuffer(uint32_t buffer, const std::vector<double> &values) override {
    executor.setBufferValues(buffer, values);
  }
  BackendMemory memory() const override {
    const cuda::DeviceMemoryUse use = executor.memoryUse();
    BackendMemory memory;
    memory.measured = true;
    memory.planned = use.planned;
    memory.allocated = use.allocated;
    memory.deviceUsed = use.deviceUsed;
    memory.deviceTotal = use.deviceTotal;
    return memory;
  }
  bool canProfile() const override { return true; }
  void startProfiling() override {
    // The floor memory-bound groups are reported against, measured before the profiled steps
    // (eagerly, outside any graph).
    copyBandwidth = cuda::measureCopyBandwidth(*gpu);
    executor.setProfiling(true);
  }
  std::string profileReport(size_t top, uint64_t steps, double stepMilliseconds) const override {
    const plan::Plan &plan = executor.plan();
    return cuda::formatProfile(plan, cuda::profileRows(plan, executor.groupTimes()), top, steps,
                               stepMilliseconds, copyBandwidth) +
           cuda::formatTimeModel(plan, executor.groupTimes(), gpu->info().name) +
           cuda::formatMatmulChoices(executor.matmulChoices()) +
           cuda::formatAttentionChoices(executor.attentionChoices());
  }

private:
  // Declared first: destroyed last, after everything allocated on it.
  std::unique_ptr<cuda::Device> gpu;
  cuda::Executor executor;
  // Data parallel: the communicator and the bucketed exchange over it.
  std::unique_ptr<cuda::NcclWorld> nccl;
  std::unique_ptr<cuda::GradientExchange> exchange;
  /// measureCopyBandwidth's result when profiling started (0: not measured).
  double copyBandwidth = 0;
  uint64_t localMicroSteps = 0, microStepsQueued = 0;
  /// plan::forwardGroupCount, computed on the first evaluateLoss.
  size_t forwardGroups = 0;
};

} // namespace

bool cudaBackendBuiltIn() { return true; }

std::unique_ptr<TrainingBackend> tryMakeCudaBackend(const plan::Plan &plan, GpuProbe &probe,
                                                    const CudaChoices &choices) {
  if (plan.device.empty()) {
    probe = {kPlanHasNoGpuCode, true};
    return nullptr;
  }
  try {
    // A data parallel rank trains on the GPU of its local rank, counted
    // among the GPUs it sees (a scheduler that gives each task one GPU
    // through CUDA_VISIBLE_DEVICES leaves it GPU 0).
    cuda::DeviceOptions options;
    if (processLaunch().dataParallel) {
      const cuda::DriverApi &api = cuda::driverApi();
      int count = 0;
      if (api.cuInit(0) == CUDA_SUCCESS && api.cuDeviceGetCount(&count) == CUDA_SUCCESS &&
          count > 0)
        options.index = processLaunch().localRank % count;
    }
    auto device = std::make_unique<cuda::Device>(options);
    return std::make_unique<CudaBackend>(plan, std::move(device), choices);
  } catch (const cuda::CudaError &error) {
    // The first line: a JIT log may follow on later lines.
    const std::string what = error.what();
    probe.whyNot = what.substr(0, what.find('\n'));
    probe.absent = error.kind() == cuda::CudaErrorKind::NoDriver ||
                   error.kind() == cuda::CudaErrorKind::NoDevice;
  }
  return nullptr;
}

} // namespace ampc::train
