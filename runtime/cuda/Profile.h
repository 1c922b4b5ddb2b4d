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

#include <cstdint>
#include <string>
#include <vector>

namespace ampc::cuda {

/// What one run of a step group must move and compute.
struct GroupCost {
  /// Bytes of every distinct buffer the group reads plus those of every
  /// distinct buffer it writes: the least it must move, what a copy's
  /// "read + written" bandwidth is compared with. A buffer read and
  /// written (an optimizer's parameters and moments, an accumulator, a
  /// matmul adding into D) counts twice; a view counts as its own buffer.
  uint64_t bytes = 0;
  /// 2 m n k per matmul; attention forward 4 B H Tq Tk D, backward 2.5x
  /// that (halved when causal; FlashAttention-2's count of the gradient's
  /// work, which a backward reading the saved o and lse does without a
  /// forward). Elementwise arithmetic is not counted.
  double flops = 0;
};
GroupCost groupCost(const plan::Plan &plan, const plan::DeviceGroup &group);

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

/// The matmuls whose cuBLASLt algorithm was chosen by timing, slowest first: the first
/// candidate's and the chosen one's time per run and the speed-up, then the total over the
/// problems (each counted once, not per use). "" when there are none.
std::string formatMatmulChoices(const std::vector<MatmulChoice> &choices);

} // namespace ampc::cuda

#endif // AMPC_RUNTIME_CUDA_PROFILE_H
