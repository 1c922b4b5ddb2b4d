//===- AllocationTable.cpp - Device allocations, live and freed -----------===//

#include "AllocationTable.h"

#include <cinttypes>
#include <cstdio>
#include <iterator>

namespace ampc::dryrun {

std::string hexAddress(uint64_t address) {
  char text[24];
  std::snprintf(text, sizeof text, "0x%" PRIx64, address);
  return text;
}

Allocation &AllocationTable::add(uint64_t address, uint64_t bytes, uint64_t call) {
  Allocation allocation;
  allocation.id = nextId++;
  allocation.address = address;
  allocation.bytes = bytes;
  allocation.allocatedAt = call;
  return byAddress[address] = allocation;
}

Allocation *AllocationTable::free(uint64_t address, uint64_t call) {
  auto found = byAddress.find(address);
  if (found == byAddress.end() || !found->second.live)
    return nullptr;
  found->second.live = false;
  found->second.freedAt = call;
  return &found->second;
}

const Allocation *AllocationTable::find(uint64_t address) const {
  auto after = byAddress.upper_bound(address);
  if (after == byAddress.begin())
    return nullptr;
  const Allocation &allocation = std::prev(after)->second;
  return address < allocation.address + allocation.bytes ? &allocation : nullptr;
}

std::string AllocationTable::describe(const Allocation &allocation) {
  return "allocation #" + std::to_string(allocation.id) + " (" + std::to_string(allocation.bytes) +
         " bytes at " + hexAddress(allocation.address) + ", allocated at call " +
         std::to_string(allocation.allocatedAt) + ")";
}

std::string AllocationTable::rangeProblem(uint64_t address, uint64_t bytes, Check &check) const {
  const std::string range = "[" + hexAddress(address) + ", +" + std::to_string(bytes) + ")";
  const Allocation *allocation = find(address);
  if (!allocation) {
    check = "pointer";
    // Name the allocation it lies past, if any.
    auto after = byAddress.upper_bound(address);
    if (after != byAddress.begin()) {
      const Allocation &before = std::prev(after)->second;
      return range + " lies in no allocation: it starts " +
             std::to_string(address - before.address - before.bytes) + " bytes past the end of " +
             describe(before);
    }
    return range + " lies in no allocation";
  }
  if (!allocation->live) {
    check = "freed-memory";
    return range + " lies in " + describe(*allocation) + ", freed at call " +
           std::to_string(allocation->freedAt);
  }
  const uint64_t end = allocation->address + allocation->bytes;
  if (bytes > end - address) {
    check = "extent";
    return range + " runs " + std::to_string(address + bytes - end) + " bytes past the end of " +
           describe(*allocation);
  }
  return "";
}

} // namespace ampc::dryrun
