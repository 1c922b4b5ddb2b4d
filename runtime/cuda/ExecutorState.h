//===- ExecutorState.h - The CUDA executor's state --------------*- C++ -*-===//
//
// cuda::Executor (Executor.h) is a pimpl; this is its Executor::Impl: the
// device memory a plan needs (pool, arena, scratch, metrics block), the loaded
// modules and cuBLASLt handle, and for each plan function (micro step and
// optimizer step) a FunctionState, its launches prepared once with resolved
// arguments and captured as one CUDA graph (several segments only where data
// parallelism cuts the micro step). Kernels read the seed, the step and the
// total steps from the run-scalar block, which is uploaded before a run that
// changes them, so no launch argument changes from run to run. The class is defined across
// four files by responsibility, and its methods are declared below in the
// same groups: Executor.cpp sets it up (memory, modules, preparation),
// ExecutorRun.cpp runs the steps (the step loop, graphs, profiling),
// ExecutorAttention.cpp chooses and runs the attention steps (our kernels or
// cuDNN's), and ExecutorHostData.cpp moves data between the host and the
// device (metrics, parameters and inputs, the test hooks). Private to
// runtime/cuda.
//
//===----------------------------------------------------------------------===//

#ifndef AMPC_RUNTIME_CUDA_EXECUTORSTATE_H
#define AMPC_RUNTIME_CUDA_EXECUTORSTATE_H

#include "runtime/cuda/CublasLt.h"
#include "runtime/cuda/CudaGraph.h"
#include "runtime/cuda/CudnnAttention.h"
#include "runtime/cuda/Executor.h"
#include "runtime/cuda/Memory.h"
#include "runtime/cuda/Module.h"

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace ampc::cuda {

using plan::kNoBuffer;

/// Bytes of \p buffer's storage.
uint64_t bufferBytes(const plan::Buffer &buffer);

/// Bytes of the metrics block: one 8-byte slot per micro step of an
/// optimizer step (the loss), then grad norm, learning rate, and the scale,
/// applied steps and floor hits before the optimizer step (8 bytes each).
uint64_t metricsBytes(const plan::Plan &plan);

/// A launch step with its kernel and argument values resolved once.
struct PreparedLaunch {
  Kernel *kernel = nullptr;
  LaunchConfig config;
  std::vector<ResolvedArgument> arguments;
  /// Pointers to each argument's value (cuLaunchKernel's kernelParams).
  std::vector<void *> pointers;
};

/// A run of groups captured as one graph: the whole function, or the groups
/// between two data-parallel cuts of the micro step.
struct Segment {
  size_t first = 0, last = 0; ///< groups [first, last)
  std::unique_ptr<GraphCapture> graph;
};

struct FunctionState {
  PlanFunction which = PlanFunction::MicroStep;
  const plan::DeviceFunction *program = nullptr;
  const std::vector<plan::Instruction> *instructions = nullptr;
  /// Per group, per step: the prepared launch (null for other steps).
  std::vector<std::vector<std::unique_ptr<PreparedLaunch>>> launches;
  std::vector<Segment> segments;
  /// Whether a launch reads the run scalars (else runs upload nothing).
  bool readsRunScalars = false;
  CUdeviceptr errorRecord = 0;
  size_t replayed = 0;
  /// Profiling: one event per group boundary (groups + 1), and each group's
  /// accumulated milliseconds and runs.
  std::vector<std::unique_ptr<Event>> groupEvents;
  std::vector<double> groupMilliseconds;
  uint64_t profiledRuns = 0;
};

/// Pinned host memory that one kind of host-to-device copy is queued from
/// (ExecutorHostData.cpp, "Staging"): a ring of equal slots, each with an
/// event recorded on the stream right after the copy from it, so the host
/// rewrites a slot only once the stream is past its previous copy.
struct StagingRing {
  struct Slot {
    size_t offset = 0;
    std::unique_ptr<Event> copied;
    /// Device::synchronizations() when the copy was queued; a later count
    /// means the stream drained since, so the slot is free without a wait.
    uint64_t syncsAtCopy = 0;
    bool pending = false;
  };
  StagingRing() = default;
  StagingRing(StagingRing &&) = default;
  StagingRing &operator=(StagingRing &&) = default;
  /// Waits for the copies that may still read the slots before their memory
  /// is freed (errors ignored: this runs in destructors).
  ~StagingRing();

  /// Empty when pinned memory could not be had: copies are then queued from
  /// the caller's pageable memory.
  PinnedHostBuffer memory;
  Device *device = nullptr;
  uint64_t slotBytes = 0;
  std::vector<Slot> slots;
  size_t next = 0;
};

/// Decodes \p count elements of \p dtype from \p bytes.
std::vector<double> decodeValues(const uint8_t *bytes, plan::DType dtype, size_t count);
/// \p values as \p dtype bytes (floats rounded to nearest even, integers truncated toward
/// zero: callers pass whole numbers).
std::vector<uint8_t> encodeValues(const std::vector<double> &values, plan::DType dtype);

class Executor::Impl {
public:
  // Construction, memory and modules (Executor.cpp).

  Impl(const plan::Plan &source, Device &device, const ExecutorOptions &options);

  /// Throws OutOfMemory, before allocating anything, when the plan cannot
  /// fit in the GPU's free memory.
  void checkMemory();

  void allocate();

  void loadModules();

  /// Resolves every launch of \p f, uploads its tables and cuts it into
  /// segments.
  void prepare(FunctionState &f);

  // Running device steps (ExecutorRun.cpp).

  /// Queues the upload of \p run's seed, step and total steps into the
  /// run-scalar block where it holds other values (outside any capture);
  /// for functions that read them (FunctionState::readsRunScalars).
  void uploadRunScalars(const cpu::RunOptions &run);

  /// Queues step \p s of group \p g; any CudaError names the step, the
  /// group and the instructions it computes.
  void runStep(FunctionState &f, size_t g, size_t s);

  std::string describeStep(const FunctionState &f, size_t g, size_t s) const;

  CUdeviceptr address(uint32_t buffer) const {
    return buffer == kNoBuffer ? 0 : addresses.buffers.at(buffer);
  }
  /// An attention operand's first element: its buffer at its layout's byte offset.
  CUdeviceptr attentionOperand(uint32_t buffer, const plan::AttentionLayout &layout) const {
    return address(buffer) + layout.offset;
  }
  /// An attention step's row log-sum-exp: its lse buffer, or scratch where it has none.
  CUdeviceptr attentionLse(const plan::AttentionStep &step) const {
    return step.lse != kNoBuffer ? address(step.lse) : scratch.pointer() + step.lseOffset;
  }
  /// Whether running a step while the executor is built (to time or compare it) may write
  /// \p buffer: none, a value of the step, or the state, which resetState zeroes after.
  /// Parameters, inputs and constants keep their values.
  bool writableWhileBuilding(uint32_t buffer) const {
    if (buffer == kNoBuffer)
      return true;
    const plan::BufferRole role = plan.buffers[buffer].role;
    return role == plan::BufferRole::Temporary || role == plan::BufferRole::State;
  }

  /// The cuBLASLt problem and pointers of \p step.
  std::pair<MatmulDesc, MatmulOperands> matmulCall(const plan::MatmulStep &step) const;
  void runMatmul(const plan::MatmulStep &step);
  /// Chooses every distinct matmul's algorithm (options.matmulSelection).
  /// Timing writes the matmuls' outputs, so it runs while the executor is
  /// built, before any buffer holds a value; a matmul writing a buffer that
  /// could already hold one (a parameter, an input) takes the heuristic's.
  void chooseMatmulAlgorithms();

  Kernel &kernelAt(uint32_t index);

  // Attention (ExecutorAttention.cpp).

  /// Chooses, for every attention step of 16-bit storage, cuDNN's fused attention or the
  /// backend's kernels (options.attentionSelection); each distinct problem and pass once.
  /// Timing writes the steps' outputs, so it runs while the executor is built, before any
  /// buffer holds a value; a step writing a buffer that could already hold one keeps the
  /// backend's kernels.
  void chooseAttention();
  /// Queues an attention step: cuDNN's, when chosen for it, else the backend's kernels.
  void runAttention(const plan::AttentionStep &step);
  /// The backend's flash-attention kernels for \p step.
  void runOwnAttention(const plan::AttentionStep &step);
  /// Fills \p step's inputs with random values, runs our kernels and cuDNN's on them, sets
  /// \p difference to the largest relative-norm difference of their 16-bit outputs and returns
  /// why cuDNN's must not be used ("" when they agree: kAttentionAgreement, and an lse within
  /// 1e-3 of ours element by element).
  std::string compareWithOurs(const plan::AttentionStep &step, const CudnnAttention &attention,
                              double &difference);
  /// cuDNN's attention for \p step, with its workspace.
  void runCudnnAttention(const plan::AttentionStep &step, const CudnnAttention &attention);

  void runGroupRange(FunctionState &f, size_t first, size_t last);

  /// Uploads the run scalars, then runs every segment of \p f through its
  /// graph (eagerly when graphs are off).
  void runFunction(FunctionState &f, const cpu::RunOptions &run);

  /// Runs every group of \p f eagerly between CUDA events, waits for the
  /// last, and adds each group's time to f.groupMilliseconds.
  void runProfiled(FunctionState &f);

  /// Records the step-start event unless this optimizer step's first
  /// upload or launch already did.
  void markStepStart();

  void runMicroStep(const cpu::RunOptions &run);

  void runOptimizerStep(const cpu::RunOptions &run);

  // Metrics, host data and test hooks (ExecutorHostData.cpp).

  /// One scalar of \p dtype at \p bytes.
  static double scalarAt(const uint8_t *bytes, plan::DType dtype);

  StepMetrics readMetrics();

  /// Allocates the pinned staging rings of the inputs and the run scalars
  /// (allocate() calls it).
  void allocateStaging();

  /// Queues the copy of \p bytes at \p data to \p destination through the
  /// next slot of \p ring, waiting first only if the stream may not have
  /// reached that slot's previous copy.
  void stageCopy(StagingRing &ring, CUdeviceptr destination, const void *data, size_t bytes);

  void requireParameters() const;

  void upload(uint32_t buffer, const std::vector<double> &values);

  void initializeParameters(uint64_t seed);

  void randomizeInputs(uint64_t seed);

  void setInput(const std::string &name, const void *data, size_t bytes);

  void resetState();

  void runGroups(PlanFunction which, size_t first, size_t last, const cpu::RunOptions &run);

  std::vector<double> bufferValues(uint32_t buffer);

  void setBufferValues(uint32_t buffer, const std::vector<double> &values);

  const plan::Plan plan;
  Device &device;
  ExecutorOptions options;
  AddressMap addresses;
  PoolLayout poolLayout;
  DeviceAllocation pool;
  std::unique_ptr<DeviceArena> arena;
  DeviceAllocation scratch;
  CUdeviceptr microRecord = 0, optimizerRecord = 0, metrics = 0;
  /// The run-scalar block, and what the last upload wrote into it (nothing
  /// until the first run).
  CUdeviceptr runScalars = 0;
  plan::RunScalarBlock heldRunScalars;
  bool runScalarsHeld = false;
  PinnedHostBuffer pinnedMetrics;
  /// Per plan input (in plan.inputs order), and for the run-scalar block.
  std::vector<StagingRing> inputStaging;
  StagingRing runScalarStaging;
  std::unique_ptr<Matmul> matmul;
  /// cuDNN's attention, per distinct problem (key: its description), and the steps that run
  /// it (chooseAttention); one workspace for all, the largest any needs.
  std::map<std::string, std::unique_ptr<CudnnAttention>> cudnnProblems;
  std::map<const plan::AttentionStep *, const CudnnAttention *> cudnnSteps;
  DeviceAllocation cudnnWorkspace;
  std::vector<AttentionChoice> attentionChoices;
  std::vector<std::unique_ptr<Module>> modules;
  FunctionState micro, optimizer;
  bool parametersSet = false;
  /// Whole-step timing: recorded by markStepStart and at the end of the
  /// optimizer step; stepTimed once both are recorded for one step.
  std::unique_ptr<Event> stepStart, stepEnd;
  bool stepOpen = false, stepTimed = false;
  bool profiling = false;
  uint64_t optimizerSteps = 0;
  uint64_t microStepsSinceOptimizer = 0, lossesForMean = 0, lastMicroSlot = 0;
  /// Executor::setMicroStepObserver.
  std::function<void(size_t)> microObserver;
};

} // namespace ampc::cuda

#endif // AMPC_RUNTIME_CUDA_EXECUTORSTATE_H
