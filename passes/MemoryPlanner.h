//===- MemoryPlanner.h - offsets of intermediate values in one arena -*- C++ -*-===//
//
// Static memory planning as plain data: each value has a size and a lifetime (the indices of
// the op that defines it and of its last reader, inclusive); the planner gives each value an
// aligned offset so that values whose lifetimes overlap never share bytes, keeping the arena
// small. No MLIR: graph-plan-memory adapts the IR to it, and the unit tests drive it directly.
//
// The algorithm is greedy with best fit, in three orders (largest first, earliest definition
// first, largest size x lifetime first; ties by earlier definition or size, then id, so the
// result is deterministic), keeping the smallest arena: each value goes into the smallest gap
// between the values already placed that overlap it in time and that fits it, or on top of them
// all. Its arena is never below the peak of live bytes, and is usually within a few percent of
// it on the chains of a training step.
//
//===--------------------------------------------------------------------------===//

#ifndef AMPC_PASSES_MEMORYPLANNER_H
#define AMPC_PASSES_MEMORYPLANNER_H

#include <cstdint>
#include <vector>

namespace ampc::graph {

/// A value to place: `bytes` live from op `first` to op `last` (inclusive).
struct BufferLifetime {
  int64_t bytes = 0;
  int64_t first = 0;
  int64_t last = 0;
};

struct MemoryPlan {
  /// Per value, in input order.
  std::vector<int64_t> offsets;
  /// The arena: one past the highest byte any value uses.
  int64_t arenaBytes = 0;
  /// The largest sum of (aligned) sizes live at one op: no arena can be smaller.
  int64_t peakLiveBytes = 0;
  /// The op index where that peak is reached.
  int64_t peakIndex = 0;
};

/// Rounds `bytes` up to a multiple of `alignment` (a power of two).
int64_t alignUp(int64_t bytes, int64_t alignment);

/// Places `values` in one arena; offsets are multiples of `alignment`.
MemoryPlan planMemory(const std::vector<BufferLifetime> &values, int64_t alignment = 256);

/// True if no two values that are live at the same op overlap in the arena and every offset is
/// aligned: the invariant every plan must satisfy.
bool isValidPlan(const std::vector<BufferLifetime> &values, const MemoryPlan &plan,
                 int64_t alignment);

} // namespace ampc::graph

#endif // AMPC_PASSES_MEMORYPLANNER_H
