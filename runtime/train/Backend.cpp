//===- Backend.cpp - The CPU training backend and the --device rule -------===//

#include "runtime/train/Backend.h"

namespace ampc::train {

namespace {

/// cpu::Executor behind the TrainingBackend interface: every call runs at
/// once, so readMetrics only hands back what the steps returned.
class CpuBackend final : public TrainingBackend {
public:
  explicit CpuBackend(const plan::Plan &plan) : executor(plan, cpu::Precision::F32) {}

  const char *device() const override { return "cpu"; }
  std::string description() const override { return ""; }
  void initializeParameters(uint64_t seed) override { executor.initializeParameters(seed); }
  void setInput(const std::string &name, const void *data, size_t bytes) override {
    executor.setInput(name, data, bytes);
  }
  void randomizeInputs(uint64_t seed) override { executor.randomizeInputs(seed); }
  void runMicroStep(const cpu::RunOptions &options) override {
    if (microSteps == 0) {
      scaleBefore = executor.lossScaleStatus().scale;
      lossSum = 0;
    }
    lossSum += executor.run(options);
    ++microSteps;
  }
  void runOptimizerStep(const cpu::RunOptions &options) override {
    metrics.loss = lossSum / static_cast<double>(microSteps ? microSteps : 1);
    metrics.scaleBefore = scaleBefore;
    metrics.gradNorm = executor.runOptimizerStep(options);
    metrics.learningRate = executor.learningRate();
    metrics.lossScale = executor.lossScaleStatus();
    metrics.firstNonFinite = executor.firstNonFinite();
    microSteps = 0;
  }
  double evaluateLoss(const cpu::RunOptions &options) override {
    cpu::RunOptions forward = options;
    forward.forwardOnly = true;
    return executor.run(forward);
  }
  BackendMetrics readMetrics() override { return metrics; }
  std::vector<double> readBuffer(uint32_t buffer) override { return executor.bufferValues(buffer); }
  void writeBuffer(uint32_t buffer, const std::vector<double> &values) override {
    // Setting a parameter refreshed its copy already, exactly as the
    // optimizer step does (rounded to nearest even).
    if (executor.plan().buffers[buffer].role == plan::BufferRole::ParameterCopy)
      return;
    executor.setBufferValues(buffer, values);
  }

private:
  cpu::Executor executor;
  double lossSum = 0, scaleBefore = 0;
  uint64_t microSteps = 0;
  BackendMetrics metrics;
};

} // namespace

std::unique_ptr<TrainingBackend> makeCpuBackend(const plan::Plan &plan) {
  return std::make_unique<CpuBackend>(plan);
}

DeviceChoice chooseDevice(const std::string &requested, bool planHasDeviceProgram, bool cpuFallback,
                          const std::function<GpuProbe()> &openCuda) {
  DeviceChoice choice;
  if (requested == "cpu")
    return choice;
  GpuProbe probe;
  if (planHasDeviceProgram)
    probe = openCuda();
  else
    probe = {kPlanHasNoGpuCode, true};
  if (probe.whyNot.empty()) {
    choice.useCuda = true;
    return choice;
  }
  if (requested == "cuda") {
    choice.error = probe.whyNot;
    return choice;
  }
  std::string whyNot = probe.whyNot;
  // The advice to use the CPU is what auto does: drop it from the note.
  for (const char *advice : {"; use --device cpu", ": use --device cpu"}) {
    const std::string suffix = advice;
    if (whyNot.size() > suffix.size() &&
        whyNot.compare(whyNot.size() - suffix.size(), suffix.size(), suffix) == 0)
      whyNot.erase(whyNot.size() - suffix.size());
  }
  if (probe.absent)
    choice.note = "device: cpu (the GPU cannot be used: " + whyNot + ")";
  else if (cpuFallback) {
    choice.note =
        "warning: the GPU failed (" + whyNot + "); training on the CPU as --cpu-fallback asks";
    choice.noteIsWarning = true;
  } else
    choice.error = "the GPU is there but failed: " + whyNot +
                   " (--device cpu trains on the CPU; --cpu-fallback does so "
                   "whenever the GPU fails)";
  return choice;
}

#if !defined(AMPC_RUNNER_HAVE_CUDA)
bool cudaBackendBuiltIn() { return false; }

std::unique_ptr<TrainingBackend> tryMakeCudaBackend(const plan::Plan &, GpuProbe &probe,
                                                    const CudaChoices &) {
  probe.whyNot = "this binary was built without the CUDA toolkit, so it has "
                 "no CUDA backend; use --device cpu";
  probe.absent = true;
  return nullptr;
}
#endif

} // namespace ampc::train
