//===- Executor.h - The CUDA backend: a plan's device program on one GPU --===//
//
// cuda::Executor runs the device program of a validated training plan
// (docs/plan-format.md, "The device program") on a cuda::Device:
//
//  * memory, allocated once: one persistent pool (f32 parameters, their
//    bf16/f16 copies, inputs, constants, gradient accumulators, optimizer
//    and loss-scale state, the optimizer/norm tables, two error records, a
//    small metrics block and the run scalars), one arena of the larger function's size (the
//    micro step and the optimizer step never run at the same time, so they
//    share it), one scratch region of the larger size, and cuBLASLt's
//    workspace (and cuDNN's, where attention steps run cuDNN's fused
//    attention: ExecutorAttention.cpp). Before allocating, the executor checks
//    that the plan's part fits in free memory and says how much is needed and
//    how much is free;
//  * modules: every module's cubin for the GPU's architecture, else its PTX;
//  * a function (micro step, optimizer step) runs its groups in order on the
//    device's stream with no host synchronisation. Values that change per
//    run (the seed, the step, the total steps) are not launch arguments: the
//    generated kernels read them from a 24-byte run-scalar block in the
//    pool, which the executor rewrites (a stream-ordered copy, outside any
//    capture) before a run whose values differ. So no argument changes from
//    run to run, and each function is captured once into one CUDA graph
//    (after one eager warm-up) and replayed; data parallelism alone cuts the
//    micro step into segments, between which the gradient reductions queue;
//  * inputs and the run scalars are uploaded from pinned host slots, each
//    copy queued on the stream, so the host prepares and queues the next
//    micro step while the GPU computes the current one;
//  * metrics stay on the device: the loss of each micro step, the gradient
//    norm, the learning rate and the loss-scale counters before and after
//    the optimizer step are copied (device to device) into the metrics
//    block; readMetrics() is the one call that waits for the GPU.
//
// Parameters and random inputs come from the CPU backend's own code
// (cpu::Executor on the host), so both backends start from identical values.
//
// For tests: runGroups() runs a range of one function's step groups eagerly,
// and bufferValues() / setBufferValues() read and write any buffer with a
// device address, so a test can feed a group the CPU backend's inputs and
// compare what it writes (writtenBuffers()) with the CPU's values.
//
//===----------------------------------------------------------------------===//

#ifndef AMPC_RUNTIME_CUDA_EXECUTOR_H
#define AMPC_RUNTIME_CUDA_EXECUTOR_H

#include "runtime/cpu/Executor.h"
#include "runtime/cuda/CublasLt.h"
#include "runtime/cuda/Device.h"
#include "runtime/plan/Plan.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace ampc::cuda {

/// The one-line error for a plan without GPU code.
inline constexpr const char *kNoDeviceProgramMessage =
    "this plan has no GPU code: it was compiled without the CUDA toolkit; "
    "use --device cpu";

/// Which function of the plan.
enum class PlanFunction { MicroStep, OptimizerStep };

/// "micro_step" or "optimizer_step".
const char *planFunctionName(PlanFunction function);

/// Which implementation runs each attention step of 16-bit storage (f32 steps always run the
/// backend's own kernels).
enum class AttentionSelection : uint8_t {
  /// cuDNN's fused attention where it builds for the step's problem, gives the backend's
  /// kernels' results on random inputs (to kAttentionAgreement) and runs faster, each pass
  /// (forward, backward) compared and timed once while the executor is built.
  Timed,
  /// The backend's own flash-attention kernels (FlashAttentionMma.cuh) everywhere.
  Own,
  /// cuDNN's wherever it builds and (where the step's buffers allow) reproduces ours on random
  /// inputs, untimed.
  Cudnn,
};

/// How closely cuDNN's attention must reproduce the backend's kernels on random inputs to be
/// used: the relative-norm difference of every output (both round P and dS to 16 bits, at
/// different points; at GPT shapes they differ by about 3e-3).
inline constexpr double kAttentionAgreement = 2e-2;

/// "timed", "ampc" or "cudnn" (the runner's --attention values).
const char *attentionSelectionName(AttentionSelection selection);

/// How one distinct attention problem's pass was chosen (AttentionSelection::Timed, Cudnn).
struct AttentionChoice {
  std::string problem; ///< "forward [B 16, H 12, T 1024, S 1024, D 64, causal, bf16]"
  bool cudnn = false;  ///< cuDNN's ran (else the backend's own kernels)
  /// Per run, measured while choosing (0: not timed).
  double ownMs = 0, cudnnMs = 0;
  /// cuDNN's outputs against ours on the same random inputs, the largest relative-norm
  /// difference of its outputs (o and lse, or dq, dk and dv); negative: not compared.
  double difference = -1;
  /// Why cuDNN's did not run, when it did not: the first line of its error, or "slower".
  std::string why;
  /// cuDNN's version and engine, when it built.
  std::string engine;
};

/// The choices as lines for a report ("" when there are none).
std::string formatAttentionChoices(const std::vector<AttentionChoice> &choices);

struct ExecutorOptions {
  /// Capture segments into CUDA graphs after a warm-up (false: always eager).
  bool useGraphs = true;
  /// Load PTX even when a cubin fits (to test the JIT path).
  bool forcePtx = false;
  /// Data parallel: micro-step groups after which a segment (and so a CUDA
  /// graph) must end, so that work can be queued on another stream right
  /// after them (the gradient buckets' ready points, GradientBuckets.h).
  std::vector<size_t> microStepCutsAfter;
  /// How each distinct matmul's cuBLASLt algorithm is chosen while the
  /// executor is built (Timed: the fastest of several, run on the GPU).
  MatmulSelection matmulSelection = MatmulSelection::Timed;
  /// Which attention runs each 16-bit attention step (cuDNN's only on a Device that uses the
  /// system's libcuda: Device::usesSystemDriver).
  AttentionSelection attentionSelection = AttentionSelection::Timed;
};

/// What readMetrics returns: the state after the last optimizer step.
struct StepMetrics {
  /// The mean loss over the micro steps since the previous optimizer step
  /// (or the last micro step's loss if no optimizer step ran since).
  double loss = 0;
  double gradNorm = 0, learningRate = 0;
  /// The loss scale before the last optimizer step (with loss scaling).
  double scaleBefore = 0;
  cpu::LossScaleStatus lossScale;
  /// GPU time of the last optimizer step in milliseconds, measured with
  /// CUDA events from the first upload or launch of its first micro step to
  /// the end of the optimizer step (gaps where the GPU waited for the host
  /// included); negative when no whole step was timed.
  double deviceMilliseconds = -1;
};

/// Device memory as the executor measured it.
struct DeviceMemoryUse {
  uint64_t planned = 0;   ///< deviceMemoryNeeds(plan).total()
  uint64_t allocated = 0; ///< what the executor holds (cuMemAlloc)
  /// total - free as the driver reports it now: every process's use of the
  /// GPU, this one's context, modules and libraries included.
  uint64_t deviceUsed = 0;
  uint64_t deviceTotal = 0;
};

/// The accumulated CUDA-event time of one step group while profiling.
struct GroupTime {
  PlanFunction function = PlanFunction::MicroStep;
  size_t group = 0;
  double milliseconds = 0; ///< summed over runs
  uint64_t runs = 0;
};

/// Bytes a plan needs on the device (for the out-of-memory check and
/// reports). Pure: no GPU needed.
struct DeviceMemoryNeeds {
  uint64_t persistent = 0; ///< the pool: buffers, tables, records, metrics
  uint64_t arena = 0;      ///< max of the two functions' arenas
  uint64_t scratch = 0;    ///< max of the two functions' scratch
  uint64_t workspace = 0;  ///< cuBLASLt's
  uint64_t total() const { return persistent + arena + scratch + workspace; }
};
DeviceMemoryNeeds deviceMemoryNeeds(const plan::Plan &plan);

/// Where everything persistent lives in the one pool allocation: byte
/// offsets from the pool's base, each kBufferAlignment-aligned. Sizing
/// (deviceMemoryNeeds) and allocation both use it. Pure: no GPU needed.
struct PoolLayout {
  static constexpr uint64_t kNotInPool = ~0ull;
  /// Per buffer id: its offset, or kNotInPool (temporaries).
  std::vector<uint64_t> buffers;
  /// Each function's table arrays, in the order its launches name them.
  std::vector<uint64_t> microTables, optimizerTables;
  uint64_t errorRecords = 0; ///< the micro step's, then the optimizer's
  uint64_t metrics = 0;
  /// The run-scalar block (plan::RunScalarBlock) RunScalars arguments point to.
  uint64_t runScalars = 0;
  uint64_t bytes = 0; ///< the pool's size, padding included
};
PoolLayout layoutPool(const plan::Plan &plan);

/// One resolved kernel argument, as it is passed to cuLaunchKernel: every
/// argument kind is 8 bytes (a pointer or an i64). None changes from run to
/// run (the seed and the step are read from the run-scalar block), so a
/// captured graph may replay them.
struct ResolvedArgument {
  uint64_t value = 0;
};

/// The addresses argument resolution needs; pure data, so the resolution is
/// testable without a GPU.
struct AddressMap {
  /// Device address of each buffer id (0: no storage).
  std::vector<uint64_t> buffers;
  uint64_t scratch = 0;
  uint64_t errorRecord = 0;
  /// The run-scalar block (RunScalars arguments).
  uint64_t runScalars = 0;
  /// Device address of each table argument's array, in the order the
  /// function's launches name them (filled by the executor).
  std::vector<uint64_t> tables;
};

/// Resolves the arguments of \p launch against \p addresses; \p nextTable
/// indexes addresses.tables and advances past each table argument. Throws
/// CudaError(InvalidArgument) for a buffer argument without storage and for
/// a per-run value passed by value (seed, step, total steps).
std::vector<ResolvedArgument> resolveArguments(const plan::LaunchStep &launch,
                                               const AddressMap &addresses, size_t &nextTable);

/// The bytes of a table argument's device array (OptimizerTensor: 88 bytes
/// per entry, NormTensor: 24; docs/plan-format.md), with buffer pointers
/// from \p buffers.
std::vector<uint8_t> encodeTable(const plan::Plan &plan, const plan::DeviceTable &table,
                                 const std::vector<uint64_t> &buffers);

/// The buffers a step group writes and reads (runtime/plan/DeviceProgram.h).
using plan::readBuffers;
using plan::writtenBuffers;

/// The CUDA backend. Not copyable; \p device must outlive it.
class Executor {
public:
  /// Validates \p plan, checks it has a device program (CudaError
  /// InvalidArgument with kNoDeviceProgramMessage otherwise) and that the
  /// GPU runs its dtypes, allocates (CudaError OutOfMemory naming the bytes
  /// needed and free), loads every module and uploads constants, tables and
  /// the initial state. Parameters and inputs are not set yet.
  Executor(const plan::Plan &plan, Device &device,
           const ExecutorOptions &options = ExecutorOptions());
  ~Executor();
  Executor(const Executor &) = delete;
  Executor &operator=(const Executor &) = delete;

  /// As cpu::Executor::initializeParameters (the same values: computed by
  /// the CPU backend on the host, then uploaded with the parameter copies).
  void initializeParameters(uint64_t seed);
  /// As cpu::Executor::randomizeInputs.
  void randomizeInputs(uint64_t seed);
  /// As cpu::Executor::setInput (same checks and errors), then queues the
  /// upload through a pinned staging slot and returns without waiting for
  /// the GPU (unless every slot of the input still holds a copy the stream
  /// may not have reached: see ExecutorHostData.cpp, "Staging"); \p data
  /// may be reused at once.
  void setInput(const std::string &name, const void *data, size_t bytes);
  /// Zeroes the state; the loss scale gets its initial value.
  void resetState();

  /// Queues the micro step (options.step = the global micro step). Does not
  /// wait for the GPU.
  void runMicroStep(const cpu::RunOptions &options);
  /// Queues the optimizer step (options.step = the optimizer step). Does
  /// not wait for the GPU.
  void runOptimizerStep(const cpu::RunOptions &options);
  /// Waits for the GPU and returns the metrics of the last optimizer step;
  /// cpu::ExecutionError when a kernel reported bad data (worded as the CPU
  /// backend words it), CudaError for a fault.
  StepMetrics readMetrics();

  /// Runs groups [first, last) of \p function eagerly (no graph, no metrics
  /// copies, no error-record reset) with \p options.
  void runGroups(PlanFunction function, size_t first, size_t last, const cpu::RunOptions &options);
  /// The values of buffer \p buffer (waits for the GPU); only buffers with
  /// a device address (persistent, placed, views).
  std::vector<double> bufferValues(uint32_t buffer);
  /// Overwrites buffer \p buffer, each value rounded to its dtype.
  void setBufferValues(uint32_t buffer, const std::vector<double> &values);
  /// Whether \p buffer has a device address.
  bool hasStorage(uint32_t buffer) const;
  /// The device address of \p buffer (0 without storage).
  uint64_t deviceAddress(uint32_t buffer) const;
  /// Data parallel: while set, called on the host after the micro step has
  /// queued groups [0, done) of a segment that ends after one of
  /// ExecutorOptions::microStepCutsAfter (and at the end), so the caller can
  /// queue work that waits for them on another stream. Empty: none.
  void setMicroStepObserver(std::function<void(size_t done)> observer);

  const plan::Plan &plan() const;
  Device &device() const;
  /// While on, every function runs eagerly (no graphs) with a CUDA event
  /// before each step group, and each group's time is added to
  /// groupTimes() (each function waits for the GPU at its end).
  void setProfiling(bool on);
  /// Every group's accumulated time (micro step groups, then the optimizer
  /// step's), since the executor was built.
  std::vector<GroupTime> groupTimes() const;
  /// Device memory: planned, held by the executor, in use on the GPU.
  DeviceMemoryUse memoryUse() const;

  /// How each module was loaded ("sm_90 cubin for compute capability 9.0").
  std::vector<std::string> moduleChoices() const;
  /// The matmuls whose algorithm was chosen by timing, with the times.
  std::vector<MatmulChoice> matmulChoices() const;
  /// Each distinct attention problem's passes and which implementation runs them (empty when
  /// every attention step runs the backend's own kernels without a choice to make).
  std::vector<AttentionChoice> attentionChoices() const;
  /// Segments run as graph replays in the last run of \p function.
  size_t replayedSegments(PlanFunction function) const;

  class Impl;

private:
  std::unique_ptr<Impl> impl;
};

} // namespace ampc::cuda

#endif // AMPC_RUNTIME_CUDA_EXECUTOR_H
