//===- Memory.cpp - The arena and the persistent buffers on the GPU -------===//

#include "runtime/cuda/Memory.h"

#include <utility>

namespace ampc::cuda {

uint64_t BumpLayout::reserve(uint64_t bytes, const std::string &what) {
  const uint64_t offset = alignUp(end);
  if (capacity != 0 && (offset > capacity || bytes > capacity - offset))
    throw CudaError(CudaErrorKind::InvalidArgument,
                    "no room for " + what + ": " + std::to_string(bytes) + " bytes at offset " +
                        std::to_string(offset) + " exceed the pool's " + std::to_string(capacity) +
                        " bytes");
  end = offset + bytes;
  return offset;
}

DeviceArena::DeviceArena(Device &device, uint64_t bytes, std::string name)
    : allocation(device.allocate(bytes, name)), arenaName(std::move(name)) {}

CUdeviceptr DeviceArena::at(uint64_t offset, uint64_t bytes) const {
  if (offset % kBufferAlignment != 0 || offset > size() || bytes > size() - offset)
    throw CudaError(
        CudaErrorKind::InvalidArgument,
        arenaName + ": a buffer of " + std::to_string(bytes) + " bytes at offset " +
            std::to_string(offset) +
            (offset % kBufferAlignment != 0
                 ? " is not " + std::to_string(kBufferAlignment) + "-byte aligned"
                 : " does not fit in the arena's " + std::to_string(size()) + " bytes"));
  return base() + offset;
}

PersistentPool::PersistentPool(Device &device, uint64_t capacity, std::string name)
    : allocation(device.allocate(capacity, name)), layout(capacity), poolName(std::move(name)) {}

CUdeviceptr PersistentPool::allocate(uint64_t bytes, const std::string &what) {
  // A zero-capacity pool has no allocation; BumpLayout(0) would be
  // unbounded, so check here.
  if (capacity() == 0 && bytes > 0)
    throw CudaError(CudaErrorKind::InvalidArgument,
                    "no room for " + what + " in the empty " + poolName);
  return base() + layout.reserve(bytes, what + " in " + poolName);
}

} // namespace ampc::cuda
