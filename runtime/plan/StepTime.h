//===- StepTime.h - What a device step group moves, computes and costs ---===//
//
// The cost of one step group of a plan's device program, from the plan alone: the bytes it
// must move (every distinct buffer it reads plus every one it writes; a buffer updated in place
// counts twice) and the floating-point operations of its matmuls and attention. The `--profile`
// report puts them beside the measured times; the time model turns them into a predicted time
// on a GPU it describes, without one:
//
//   memory-bound kinds   t = launch + bytes / (efficiency(kind) x copy bandwidth)
//   matmul kinds         t = max(launch + flops / throughput(kind), bytes / copy bandwidth)
//   attention            t = max(launch + flops / throughput(pass), bytes / copy bandwidth)
//
// and the floor of a group is max(bytes / copy bandwidth, flops / tensor peak): what it would
// take at the speed a device copy reaches and at the tensor cores' dense peak. The bandwidth is
// a device-to-device copy measured on each GPU; the efficiencies and throughputs per kind were
// fitted to GPT-124M's profile on an H200 (bench/results/2026-11-26-h200/profile_gpt124m.txt,
// docs/performance.md says how far off the model is there, kind by kind). Pure: no GPU.
//
//===----------------------------------------------------------------------===//

#ifndef AMPC_RUNTIME_PLAN_STEPTIME_H
#define AMPC_RUNTIME_PLAN_STEPTIME_H

#include "runtime/plan/Plan.h"

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace ampc::plan {

/// What one run of a step group must move and compute.
struct GroupCost {
  /// Bytes of every distinct buffer the group reads plus those of every distinct buffer it
  /// writes: the least it must move, what a copy's "read + written" bandwidth is compared with.
  /// A buffer read and written (an optimizer's parameters and moments, an accumulator, a matmul
  /// adding into D) counts twice; a view counts as its own buffer.
  uint64_t bytes = 0;
  /// 2 m n k per matmul; attention forward 4 B H Tq Tk D, backward 2.5x that (halved when
  /// causal; FlashAttention-2's count of the gradient's work, which a backward reading the
  /// saved o and lse does without a forward). Elementwise arithmetic is not counted.
  double flops = 0;
};
GroupCost groupCost(const Plan &plan, const DeviceGroup &group);

/// What a group is, for a report row: "[m x n x k in->out epilogue] " for each matmul, then its
/// distinct source locations, call sites stripped (at most three, "(+N)" for the rest).
std::string groupDescription(const Plan &plan, const DeviceGroup &group,
                             const std::vector<Instruction> &instructions);

/// A GPU as the time model sees it.
struct GpuModel {
  std::string name;             ///< "h200"
  std::string description;      ///< where the figures come from
  double copyBandwidth = 0;     ///< bytes/s a device-to-device copy moves, read + written
  double tensorPeak = 0;        ///< dense bf16 tensor-core FLOP/s (the data sheet's)
  double launchSeconds = 0;     ///< a group's fixed cost (launch, tail)
  /// Memory-bound kinds: the share of the copy bandwidth a group of the kind reaches;
  /// `defaultEfficiency` for kinds not listed.
  std::map<std::string, double> efficiency;
  double defaultEfficiency = 0;
  /// Matmul kinds (matmul, matmul_epilogue, matmul_accumulate, bias_grad): FLOP/s reached.
  std::map<std::string, double> matmulThroughput;
  double attentionForward = 0, attentionBackward = 0; ///< FLOP/s of our attention kernels
};

/// The GPUs the model knows ("h200", "h100"); empty when \p name is none of them.
const GpuModel *findGpuModel(const std::string &name);
/// "h200, h100".
std::string gpuModelNames();

/// What the model predicts for one run of a group.
struct PredictedTime {
  double seconds = 0;
  double floorSeconds = 0; ///< max(bytes / copy bandwidth, flops / tensor peak)
  const char *bound = "memory"; ///< "memory", "compute" or "launch": what dominates
};
PredictedTime predictGroupTime(const Plan &plan, const DeviceGroup &group, const GpuModel &gpu);

} // namespace ampc::plan

#endif // AMPC_RUNTIME_PLAN_STEPTIME_H
