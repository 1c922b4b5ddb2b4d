//===- MemoryPlanner.cpp - offsets of intermediate values in one arena ----===//

#include "passes/MemoryPlanner.h"

#include <algorithm>
#include <map>
#include <numeric>

namespace ampc::graph {

int64_t alignUp(int64_t bytes, int64_t alignment) {
  return (bytes + alignment - 1) / alignment * alignment;
}

static bool overlapInTime(const BufferLifetime &a, const BufferLifetime &b) {
  return a.first <= b.last && b.first <= a.last;
}

/// Places `values` one by one in `order`, each in the smallest gap that holds it among the
/// values already placed that overlap it in time, or on top of them; returns the arena size.
static int64_t placeInOrder(const std::vector<BufferLifetime> &values,
                            const std::vector<size_t> &order, int64_t alignment,
                            std::vector<int64_t> &offsets) {
  int64_t arenaBytes = 0;
  // Values placed so far, as (offset, end, index).
  struct Placed {
    int64_t offset, end;
    size_t index;
  };
  std::vector<Placed> placed;
  for (size_t index : order) {
    const BufferLifetime &value = values[index];
    int64_t size = alignUp(value.bytes, alignment);
    // The ranges taken by values live at the same time, in offset order.
    std::vector<std::pair<int64_t, int64_t>> taken;
    for (const Placed &other : placed)
      if (overlapInTime(value, values[other.index]))
        taken.emplace_back(other.offset, other.end);
    std::sort(taken.begin(), taken.end());
    // Best fit: the smallest gap that holds the value; else the top of the taken ranges.
    int64_t best = -1, bestGap = 0, cursor = 0;
    for (auto [start, end] : taken) {
      if (start > cursor) {
        int64_t gap = start - cursor;
        if (gap >= size && (best < 0 || gap < bestGap)) {
          best = cursor;
          bestGap = gap;
        }
      }
      cursor = std::max(cursor, end);
    }
    int64_t offset = best >= 0 ? best : cursor;
    offsets[index] = offset;
    placed.push_back({offset, offset + size, index});
    arenaBytes = std::max(arenaBytes, offset + size);
  }
  return arenaBytes;
}

MemoryPlan planMemory(const std::vector<BufferLifetime> &values, int64_t alignment) {
  MemoryPlan plan;
  plan.offsets.assign(values.size(), 0);

  // The peak of live bytes, by sweeping the lifetimes' starts and ends.
  std::map<int64_t, int64_t> delta;
  for (const BufferLifetime &value : values) {
    int64_t size = alignUp(value.bytes, alignment);
    delta[value.first] += size;
    delta[value.last + 1] -= size;
  }
  int64_t live = 0;
  for (auto [index, change] : delta) {
    live += change;
    if (live > plan.peakLiveBytes) {
      plan.peakLiveBytes = live;
      plan.peakIndex = index;
    }
  }

  // Three greedy orders, the smallest arena wins: largest first (ties by earlier definition),
  // earliest definition first (ties largest first), and largest size x lifetime first.
  std::vector<size_t> base(values.size());
  std::iota(base.begin(), base.end(), 0);
  auto largest = [&](size_t a, size_t b) {
    if (values[a].bytes != values[b].bytes)
      return values[a].bytes > values[b].bytes;
    return values[a].first < values[b].first;
  };
  auto earliest = [&](size_t a, size_t b) {
    if (values[a].first != values[b].first)
      return values[a].first < values[b].first;
    return values[a].bytes > values[b].bytes;
  };
  auto area = [&](size_t a, size_t b) {
    double areaA = double(values[a].bytes) * double(values[a].last - values[a].first + 1);
    double areaB = double(values[b].bytes) * double(values[b].last - values[b].first + 1);
    if (areaA != areaB)
      return areaA > areaB;
    return largest(a, b);
  };
  plan.arenaBytes = -1;
  std::vector<int64_t> offsets(values.size(), 0);
  for (int strategy = 0; strategy < 3; ++strategy) {
    std::vector<size_t> order = base;
    if (strategy == 0)
      std::stable_sort(order.begin(), order.end(), largest);
    else if (strategy == 1)
      std::stable_sort(order.begin(), order.end(), earliest);
    else
      std::stable_sort(order.begin(), order.end(), area);
    int64_t arena = placeInOrder(values, order, alignment, offsets);
    if (plan.arenaBytes < 0 || arena < plan.arenaBytes) {
      plan.arenaBytes = arena;
      plan.offsets = offsets;
    }
    if (plan.arenaBytes == plan.peakLiveBytes)
      break; // optimal
  }
  plan.arenaBytes = std::max<int64_t>(plan.arenaBytes, 0);
  return plan;
}

bool isValidPlan(const std::vector<BufferLifetime> &values, const MemoryPlan &plan,
                 int64_t alignment) {
  for (size_t i = 0; i < values.size(); ++i) {
    if (plan.offsets[i] % alignment != 0 || plan.offsets[i] + values[i].bytes > plan.arenaBytes)
      return false;
    for (size_t j = i + 1; j < values.size(); ++j) {
      if (!overlapInTime(values[i], values[j]))
        continue;
      int64_t iEnd = plan.offsets[i] + values[i].bytes;
      int64_t jEnd = plan.offsets[j] + values[j].bytes;
      if (plan.offsets[i] < jEnd && plan.offsets[j] < iEnd && values[i].bytes > 0 &&
          values[j].bytes > 0)
        return false;
    }
  }
  return true;
}

} // namespace ampc::graph
