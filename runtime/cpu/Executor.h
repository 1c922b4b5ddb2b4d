//===- Executor.h - The CPU reference backend -----------------------------===//
//
// Runs a plan's instructions in order on the CPU. It is the oracle the test
// suite compares the CUDA backend and the gradient checks against, so its
// numerics are specified exactly:
//   - Every instruction computes in the compute precision: float
//     (Precision::F32) or double (Precision::F64).
//   - Every stored value is rounded to its buffer's dtype, once: bf16 and f16
//     buffers round to nearest even (from float in F32 mode, directly from
//     double in F64 mode); f32 buffers hold floats in F32 mode and keep the
//     double values in F64 mode (the fp64 reference of gradient checks).
//     Values inside one instruction are never rounded to a storage dtype.
//   - Integer buffers are stored as int64.
//   - Results do not depend on the number of threads.
// Per-op formulas and accumulation orders are in runtime/cpu/Kernels.h and
// docs/plan-format.md.
//
//===----------------------------------------------------------------------===//

#ifndef AMPC_RUNTIME_CPU_EXECUTOR_H
#define AMPC_RUNTIME_CPU_EXECUTOR_H

#include "runtime/plan/Plan.h"

#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace ampc::cpu {

/// The type every instruction computes in.
enum class Precision { F32, F64 };

/// Options of one run of the plan.
struct RunOptions {
  uint64_t seed = 0; ///< keys dropout's random numbers
  /// Part of dropout's counter; in training, run() gets the global micro
  /// step (step * accumulationSteps + i) and runOptimizerStep() the 0-based
  /// optimizer step, which lr_schedule and adamw's bias correction read.
  uint64_t step = 0;
  bool training = false; ///< dropout is active only when training
  /// Total optimizer steps of the run, for lr_schedule with decay_steps 0.
  uint64_t totalSteps = 0;
  /// Keep every temporary after the run (for bufferValues). When false, a
  /// temporary is freed after its last reader, which bounds memory by the
  /// live set (see peakTemporaryBytes) plus at most 2 GiB of freed storage
  /// kept for the next results of the same sizes; only the loss (and
  /// non-temporaries) can be read afterwards.
  /// Parameter and State buffers are never freed.
  bool keepTemporaries = true;
  /// When set, receives the wall-clock seconds of each instruction, indexed
  /// like plan.instructions (for profiling).
  std::vector<double> *instructionSeconds = nullptr;
  /// For testing overflow handling: the micro step behaves as if a gradient
  /// had overflowed, setting the plan's foundNonFinite flag to 1 (no effect
  /// when the plan has no loss scaling).
  bool injectNonFinite = false;
  /// run() executes only the forward pass of the micro step, up to the
  /// instruction that writes the loss (plan::forwardInstructionCount): the
  /// loss without backward pass, gradient accumulation or loss-scale checks,
  /// for a validation loss. Use with training false (no dropout).
  bool forwardOnly = false;
  /// Data parallel with a sharded optimizer (ZeRO-1, runtime/train/
  /// Distributed.h): when set, indexed by buffer id, the adamw/sgd of a
  /// parameter whose entry is false is not run (another rank updates it).
  const std::vector<bool> *ownedParameters = nullptr;
  /// When set, global_norm hands its sum of squares to this and takes the
  /// square root of what it returns (the sum over every rank's shard).
  std::function<double(double)> combineSquares;
};

/// The loss scaler after the last optimizer step.
struct LossScaleStatus {
  bool enabled = false;         ///< the plan has loss scaling
  double scale = 0;             ///< the scale after the update
  bool lastStepSkipped = false; ///< the last optimizer step was skipped
  /// The last update hit the floor (minScale) for the first time: warn once.
  bool floorReachedNow = false;
  int64_t skippedSteps = 0; ///< optimizer steps skipped so far
};

/// A run-time failure with a one-line cause: bad input data, missing data,
/// an embedding id or label out of range (naming the instruction).
class ExecutionError : public std::runtime_error {
public:
  using runtime_error::runtime_error;
};

class Executor {
public:
  /// Validates \p plan (throws plan::PlanError) and loads its constants.
  Executor(const plan::Plan &plan, Precision precision);
  ~Executor();
  Executor(Executor &&) noexcept;
  Executor &operator=(Executor &&) noexcept;

  /// Draws every parameter from its initialiser with Philox keyed (seed,
  /// step 0, stream fnv1a32(name), element): Zeros, Ones, Normal(mean, std)
  /// = mean + std * standardNormal, Uniform(low, high) = low + (high - low)
  /// * uniform01; then rounds to the buffer's dtype.
  void initializeParameters(uint64_t seed);

  /// Fills every input with random data: integer inputs uniformly in
  /// [0, bound) (an unbounded integer input is an error asking for data),
  /// float inputs standard normal rounded to the input's dtype (f32 too, as
  /// if supplied with setInput); stream fnv1a32(name) ^ 0x9e3779b9, step 0.
  void randomizeInputs(uint64_t seed);

  /// Sets input \p name from raw little-endian data in the input's dtype.
  /// Errors: unknown name, wrong size, integer value outside [0, bound).
  void setInput(const std::string &name, const void *data, size_t bytes);

  /// The values of parameter \p name, row-major.
  std::vector<double> parameterValues(const std::string &name) const;
  /// Overwrites parameter \p name (rounded to its dtype as stored).
  void setParameterValues(const std::string &name, const std::vector<double> &values);

  /// The current values of buffer \p buffer, row-major (after a run for
  /// temporaries).
  std::vector<double> bufferValues(uint32_t buffer) const;
  /// Overwrites a Parameter, State or Input buffer, each value rounded to the
  /// buffer's dtype as stored (integer inputs must hold whole numbers).
  void setBufferValues(uint32_t buffer, const std::vector<double> &values);

  /// Executes plan.instructions (the forward pass, or a training plan's micro
  /// step) in order and returns the loss.
  double run(const RunOptions &options);

  /// Executes plan.optimizerInstructions and returns the gradNorm buffer's
  /// value. plan::PlanError if the plan is not a training plan.
  double runOptimizerStep(const RunOptions &options);

  /// The plan.learningRate buffer's value (after the last optimizer step).
  double learningRate() const;

  /// Zeroes every State buffer (gradient accumulators and optimizer moments);
  /// the loss-scale buffer gets plan.lossScaling.initialScale.
  void resetState();

  /// The loss scaler's state after the last runOptimizerStep (enabled false
  /// when the plan has no loss scaling).
  LossScaleStatus lossScaleStatus() const;

  /// With plan.debugNonFinite: the instruction (describeInstruction) that
  /// first produced a non-finite value in the micro steps of the last
  /// optimizer step; "" if none. Cleared when the first micro step after
  /// runOptimizerStep starts.
  std::string firstNonFinite() const;

  /// Bytes of temporaries live at once during the last run() or
  /// runOptimizerStep(), each counted at its dtype's size as a device arena
  /// would hold it. Meaningful with RunOptions::keepTemporaries false: then a
  /// temporary is freed after its last reader (a result nothing reads right
  /// away), and a reshape or cross_entropy_grad whose operand dies there
  /// takes over the operand's storage instead of allocating.
  int64_t peakTemporaryBytes() const;

  /// The validated plan this executor runs.
  const plan::Plan &plan() const;
  /// The compute precision.
  Precision precision() const;

  class Impl;

private:
  std::unique_ptr<Impl> impl;
};

} // namespace ampc::cpu

#endif // AMPC_RUNTIME_CPU_EXECUTOR_H
