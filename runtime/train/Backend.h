//===- Backend.h - Where a training executable runs its steps -------------===//
//
// The training loop (Runner.cpp) drives a TrainingBackend: the CPU reference
// backend (cpu::Executor) or the CUDA backend (cuda::Executor, only in
// runners built with the CUDA toolkit). The loop is the same for both:
// queue the micro steps and the optimizer step, then read the metrics once.
// On the GPU that read is the step's only synchronisation.
//
// `--device auto` (the default) picks the GPU when the driver loads, a GPU
// is there and the plan has a device program, and otherwise the CPU with one
// line saying why. A GPU that is there but fails (too old a driver, out of
// memory, a kernel that does not load) is never hidden: auto stops with the
// error, unless `--cpu-fallback` asks to train on the CPU anyway (with a
// warning). `--device cuda` fails with the reason in every case;
// `--device cpu` never touches the GPU. chooseDevice() is that rule with the
// GPU probe passed in, so it is tested on machines without one.
//
//===----------------------------------------------------------------------===//

#ifndef AMPC_RUNTIME_TRAIN_BACKEND_H
#define AMPC_RUNTIME_TRAIN_BACKEND_H

#include "runtime/cpu/Executor.h"
#include "runtime/plan/Plan.h"

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace ampc::train {

/// What the loop shows and logs after an optimizer step.
struct BackendMetrics {
  /// The mean loss of the optimizer step's micro steps.
  double loss = 0;
  double gradNorm = 0, learningRate = 0;
  /// The loss scale before the step (with loss scaling).
  double scaleBefore = 0;
  cpu::LossScaleStatus lossScale;
  /// The first instruction that produced a non-finite value ("" if none or
  /// the backend does not check).
  std::string firstNonFinite;
  /// The GPU time of the step in milliseconds (CUDA events); negative on
  /// the CPU, whose steps the loop times with the host clock.
  double deviceMilliseconds = -1;
};

/// Device memory of a GPU backend (measured: false on the CPU).
struct BackendMemory {
  bool measured = false;
  uint64_t planned = 0, allocated = 0, deviceUsed = 0, deviceTotal = 0;
};

class TrainingBackend {
public:
  virtual ~TrainingBackend() = default;
  /// "cpu" or "cuda".
  virtual const char *device() const = 0;
  /// One line describing where it runs, for the start of training ("" for
  /// the CPU, which prints nothing, as before there was a choice).
  virtual std::string description() const = 0;
  virtual void initializeParameters(uint64_t seed) = 0;
  virtual void setInput(const std::string &name, const void *data, size_t bytes) = 0;
  virtual void randomizeInputs(uint64_t seed) = 0;
  virtual void runMicroStep(const cpu::RunOptions &options) = 0;
  virtual void runOptimizerStep(const cpu::RunOptions &options) = 0;
  /// The loss of the inputs set last, from the forward pass alone (no
  /// backward pass, no gradient accumulation, no change to any parameter or
  /// state; \p options.training false turns dropout off). Waits for a GPU.
  virtual double evaluateLoss(const cpu::RunOptions &options) = 0;
  /// The metrics of the last optimizer step (waits for a GPU).
  virtual BackendMetrics readMetrics() = 0;
  /// The values of a Parameter, State or ParameterCopy buffer (waits for a
  /// GPU), for checkpoints.
  virtual std::vector<double> readBuffer(uint32_t buffer) = 0;
  /// Restores a Parameter, State or ParameterCopy buffer from a checkpoint.
  /// Parameters are restored before their copies; a backend that refreshes a
  /// copy whenever its parameter is set (the CPU) may ignore the copy.
  virtual void writeBuffer(uint32_t buffer, const std::vector<double> &values) = 0;
  /// The device memory planned, held and in use (GPU backends).
  virtual BackendMemory memory() const { return {}; }
  /// Whether this backend can time its device steps (--profile).
  virtual bool canProfile() const { return false; }
  /// Starts timing every device step group (runs eagerly from now on).
  virtual void startProfiling() {}
  /// The --profile report of the groups timed since startProfiling: the
  /// top \p top rows; \p steps profiled optimizer steps; \p stepMilliseconds
  /// a step's time without profiling (negative: unknown).
  virtual std::string profileReport(size_t top, uint64_t steps, double stepMilliseconds) const {
    (void)top, (void)steps, (void)stepMilliseconds;
    return "";
  }
};

/// The CPU reference backend (F32).
std::unique_ptr<TrainingBackend> makeCpuBackend(const plan::Plan &plan);

/// True when this runner was built with the CUDA backend.
bool cudaBackendBuiltIn();

/// Why the GPU cannot be used; empty \c whyNot when it can.
struct GpuProbe {
  /// The one-line reason, or "".
  std::string whyNot;
  /// True when there is no GPU to use at all (no driver, no device, no
  /// device program, no CUDA backend in this build); false when a GPU is
  /// there and failed.
  bool absent = false;
};

/// How the CUDA backend chooses among implementations while it is built (RunOptions'
/// --matmul-algorithms and --attention).
struct CudaChoices {
  /// Each matmul's cuBLASLt algorithm by timing the heuristic's candidates rather than taking
  /// its first.
  bool timeMatmulAlgorithms = true;
  /// "timed", "ampc" or "cudnn" (cuda::AttentionSelection).
  std::string attention = "timed";
};

/// Opens GPU 0 and the CUDA backend for \p plan; on failure returns null
/// and fills \p probe with the one-line reason (no driver, no GPU, no bf16,
/// out of memory, no device program, no CUDA backend in this build) and
/// whether a GPU is there at all.
/// \p choices: how the backend chooses its matmul algorithms and attention while it is built.
std::unique_ptr<TrainingBackend> tryMakeCudaBackend(const plan::Plan &plan, GpuProbe &probe,
                                                    const CudaChoices &choices = CudaChoices());

/// The outcome of --device.
struct DeviceChoice {
  bool useCuda = false;
  /// For auto falling back to the CPU: "device: cpu (...)", a warning when
  /// a GPU failed; else "".
  std::string note;
  /// The note is a warning (a GPU failed and --cpu-fallback was given): it
  /// goes to stderr too.
  bool noteIsWarning = false;
  /// For --device cuda that cannot run, or auto on a GPU that failed (without
  /// --cpu-fallback): the one-line error; else "".
  std::string error;
};

/// The --device rule. \p requested is "auto", "cpu" or "cuda";
/// \p openCuda tries the GPU (it is not called for "cpu" nor without a
/// device program); \p cpuFallback lets auto train on the CPU when a GPU is
/// there but fails.
DeviceChoice chooseDevice(const std::string &requested, bool planHasDeviceProgram, bool cpuFallback,
                          const std::function<GpuProbe()> &openCuda);

/// The error (and fallback reason) for a plan without a device program.
inline constexpr const char *kPlanHasNoGpuCode =
    "this plan has no GPU code: it was compiled without the CUDA toolkit; "
    "use --device cpu";

} // namespace ampc::train

#endif // AMPC_RUNTIME_TRAIN_BACKEND_H
