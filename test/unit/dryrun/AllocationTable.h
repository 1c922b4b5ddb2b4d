//===- AllocationTable.h - Device allocations, live and freed -------------===//
//
// Both sides of the dry run need to answer "is [p, p + n) inside one live
// allocation, and if not, why": the recording driver while it runs (its
// allocations also carry their host memory), and DryRunChecker replaying the
// trace's alloc and free events. Allocations are numbered from 1 in the
// order they are made, so both sides name them alike ("allocation #3").
//
//===----------------------------------------------------------------------===//

#ifndef AMPC_TEST_UNIT_DRYRUN_ALLOCATIONTABLE_H
#define AMPC_TEST_UNIT_DRYRUN_ALLOCATIONTABLE_H

#include <cstdint>
#include <map>
#include <string>

namespace ampc::dryrun {

/// The check a violation failed ("pointer", "extent", "capture", ...).
using Check = const char *;

/// One cuMemAlloc, live or freed.
struct Allocation {
  uint64_t id = 0;
  uint64_t address = 0, bytes = 0;
  /// The recording driver's host memory behind it (null in the checker).
  uint8_t *host = nullptr;
  bool live = true;
  uint64_t allocatedAt = 0, freedAt = 0; ///< call indices
};

class AllocationTable {
public:
  Allocation &add(uint64_t address, uint64_t bytes, uint64_t call);
  /// Marks the allocation starting at \p address freed; null if there is
  /// no live allocation starting there.
  Allocation *free(uint64_t address, uint64_t call);
  /// The allocation holding \p address, live or freed; null if none.
  const Allocation *find(uint64_t address) const;
  /// "" when [address, address + bytes) lies inside one live allocation;
  /// else why not, with \p check set to "freed-memory", "pointer" (in no
  /// allocation) or "extent" (past the end of one).
  std::string rangeProblem(uint64_t address, uint64_t bytes, Check &check) const;
  /// "allocation #3 (1572864 bytes at 0x500000200000, allocated at call 12)".
  static std::string describe(const Allocation &allocation);

  std::map<uint64_t, Allocation> &all() { return byAddress; }

private:
  std::map<uint64_t, Allocation> byAddress;
  uint64_t nextId = 1;
};

/// "0x500000200000".
std::string hexAddress(uint64_t address);

} // namespace ampc::dryrun

#endif // AMPC_TEST_UNIT_DRYRUN_ALLOCATIONTABLE_H
