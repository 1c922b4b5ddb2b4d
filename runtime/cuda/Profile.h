//===- Profile.h - Where a training step's GPU time goes ------------------===//
//
// `--profile` on a training executable times every step group of the device
// program with CUDA events (cuda::Executor::setProfiling) over the last few
// optimizer steps. This file turns those times into the report: per group
// the bytes it must move (every buffer it reads, once, plus every buffer it
// writes, once: a buffer updated in place counts twice) and the
// floating-point operations of its matmuls and attention, so the achieved
// TB/s or TFLOP/s sits next to the time; groups that are the same code at
// the same source location in different layers (`a <- b` locations that
// differ only in the call site) are summed into one row with their count.
// Pure: no GPU needed, so it is tested with made-up times.
//
//===----------------------------------------------------------------------===//

#ifndef AMPC_RUNTIME_CUDA_PROFILE_H
#define AMPC_RUNTIME_CUDA_PROFILE_H

#include "runtime/cuda/Executor.h"
#include "runtime/plan/Plan.h"
#include "runtime/plan/StepTime.h"

#include <cstdint>
#include <string>
#include <vector>

namespace ampc::cuda {

/// What a step group moves and computes (runtime/plan/StepTime.h).
using plan::GroupCost;
using plan::groupCost;

/// One row of the report: groups with the same function, kind, cost and
/// source locations (call sites aside).
struct ProfileRow {
  PlanFunction function = PlanFunction::MicroStep;
  std::string kind;
  /// The groups' distinct op locations, call sites stripped ("gpt.mlir:190:13").
  std::string locations;
  size_t instances = 0;    ///< groups summed into the row
  double milliseconds = 0; ///< per optimizer step, all instances
  uint64_t bytes = 0;      ///< per optimizer step, all instances
  double flops = 0;        ///< per optimizer step, all instances
  /// The first group of the row (for "micro_step group 17").
  size_t firstGroup = 0;
};

/// The rows for \p times (as Executor::groupTimes returns them), largest
/// time first. Per optimizer step: a micro step group's mean time per run
/// counts accumulationSteps times.
std::vector<ProfileRow> profileRows(const plan::Plan &plan, const std::vector<GroupTime> &times);

/// The report: the top \p top rows with time, share of the profiled step,
/// kind, GB moved, TB/s, GFLOP, TFLOP/s, instances and locations, then the
/// totals. \p stepMilliseconds is the whole step's time measured without
/// profiling (graphs), for comparison (negative: unknown). With
/// \p copyBandwidth (bytes/s, measureCopyBandwidth; 0: unknown), every
/// memory-bound row also says its share of that floor ("% floor").
std::string formatProfile(const plan::Plan &plan, const std::vector<ProfileRow> &rows, size_t top,
                          uint64_t profiledSteps, double stepMilliseconds,
                          double copyBandwidth = 0);

/// The time model's prediction (runtime/plan/StepTime.h) beside the measured \p times, per kind
/// and for the step, with the ratio, when \p deviceName is a GPU the model knows ("NVIDIA
/// H200" is h200); "" otherwise.
std::string formatTimeModel(const plan::Plan &plan, const std::vector<GroupTime> &times,
                            const std::string &deviceName);

/// The matmuls whose cuBLASLt algorithm was chosen by timing, slowest first: the first
/// candidate's and the chosen one's time per run and the speed-up, then the total over the
/// problems (each counted once, not per use). "" when there are none.
std::string formatMatmulChoices(const std::vector<MatmulChoice> &choices);

} // namespace ampc::cuda

#endif // AMPC_RUNTIME_CUDA_PROFILE_H
