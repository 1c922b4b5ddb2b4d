//===- Sharding.h - How ZeRO-1 splits the optimizer state over ranks ------===//
//
// With --shard-optimizer each rank updates a contiguous group of whole
// parameters, in the optimizer step's order, of about 1/N of the elements.
// The runner (Distributed.cpp) and `ampc report memory --world-size N` use
// this one rule, so the report states what the runner holds. Header-only: it
// needs nothing, and the compiler includes it without linking the runner.
//
//===----------------------------------------------------------------------===//

#ifndef AMPC_RUNTIME_TRAIN_SHARDING_H
#define AMPC_RUNTIME_TRAIN_SHARDING_H

#include <algorithm>
#include <cstddef>
#include <vector>

namespace ampc::train {

/// The split of parameters of \p sizes elements (in order) over \p ranks:
/// ranks + 1 element offsets at parameter boundaries, rank r owning
/// [bounds[r], bounds[r + 1]). Boundary r is the first parameter start at or
/// after r / ranks of the elements (a rank may own nothing when one
/// parameter is larger than a share).
inline std::vector<size_t> shardBoundsOf(const std::vector<size_t> &sizes, int ranks) {
  size_t total = 0;
  for (size_t size : sizes)
    total += size;
  const size_t count = static_cast<size_t>(std::max(1, ranks));
  std::vector<size_t> bounds(count + 1, total);
  bounds[0] = 0;
  size_t entry = 0, offset = 0;
  for (size_t r = 1; r < count; ++r) {
    const size_t ideal = total * r / count;
    while (entry < sizes.size() && offset < ideal)
      offset += sizes[entry++];
    bounds[r] = offset;
  }
  return bounds;
}

/// The largest rank's share of per-parameter bytes \p bytes (indexed like
/// \p sizes) under shardBoundsOf(\p sizes, \p ranks).
inline size_t largestShare(const std::vector<size_t> &sizes, const std::vector<size_t> &bytes,
                           int ranks) {
  const std::vector<size_t> bounds = shardBoundsOf(sizes, ranks);
  std::vector<size_t> share(bounds.size() - 1, 0);
  size_t offset = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    for (size_t r = 0; r + 1 < bounds.size(); ++r)
      if (offset >= bounds[r] && offset < bounds[r + 1])
        share[r] += bytes[i];
    offset += sizes[i];
  }
  return share.empty() ? 0 : *std::max_element(share.begin(), share.end());
}

} // namespace ampc::train

#endif // AMPC_RUNTIME_TRAIN_SHARDING_H
