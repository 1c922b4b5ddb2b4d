//===- Memory.h - The arena and the persistent buffers on the GPU ---------===//
//
// The CUDA backend allocates device memory twice, up front, and never during
// a step:
//
//  * a DeviceArena per plan function holds every intermediate value at the
//    offset graph-plan-memory gave it (256-byte aligned, reused by every
//    micro-step); the arena is one allocation of the planned size and hands
//    out base + offset;
//  * a PersistentPool holds what lives across steps (fp32 master weights,
//    their reduced-precision copies, gradient accumulators, optimizer
//    state, inputs, constants): one allocation, carved by bump allocation in
//    the order the executor asks, each buffer 256-byte aligned.
//
// BumpLayout is the pool's offset arithmetic with no GPU behind it, so the
// executor can size the pool before allocating it and the tests can check
// the offsets on any machine.
//
//===----------------------------------------------------------------------===//

#ifndef AMPC_RUNTIME_CUDA_MEMORY_H
#define AMPC_RUNTIME_CUDA_MEMORY_H

#include "runtime/cuda/Device.h"

#include <cstddef>
#include <cstdint>
#include <string>

namespace ampc::cuda {

/// The alignment of every buffer the backend places: the plan's arena
/// alignment, and enough for 16-byte vector loads and cuBLASLt's fastest
/// kernels.
inline constexpr size_t kBufferAlignment = 256;

/// \p bytes rounded up to a multiple of \p alignment (a power of two).
constexpr uint64_t alignUp(uint64_t bytes, uint64_t alignment = kBufferAlignment) {
  return (bytes + alignment - 1) & ~(alignment - 1);
}

/// Bump allocation of aligned offsets within a capacity (0: unbounded, to
/// measure how much a set of buffers needs).
class BumpLayout {
public:
  explicit BumpLayout(uint64_t capacity = 0) : capacity(capacity) {}

  /// The offset of a new buffer of \p bytes, kBufferAlignment-aligned.
  /// Throws CudaError(InvalidArgument) naming \p what when a bounded layout
  /// has no room left.
  uint64_t reserve(uint64_t bytes, const std::string &what);
  /// Bytes used so far, including alignment padding.
  uint64_t used() const { return end; }
  uint64_t limit() const { return capacity; }

private:
  uint64_t capacity;
  uint64_t end = 0;
};

/// One allocation holding a plan function's intermediates at planned offsets.
class DeviceArena {
public:
  /// Allocates \p bytes on \p device; \p name is used in errors ("the
  /// micro_step arena"). Throws CudaError(OutOfMemory) when it does not fit.
  DeviceArena(Device &device, uint64_t bytes, std::string name);

  /// The address of the buffer at \p offset spanning \p bytes. Throws
  /// CudaError(InvalidArgument) when the offset is not kBufferAlignment-
  /// aligned or the span leaves the arena (a plan that does not match its
  /// arena).
  CUdeviceptr at(uint64_t offset, uint64_t bytes) const;

  CUdeviceptr base() const { return allocation.pointer(); }
  uint64_t size() const { return allocation.bytes(); }
  const std::string &name() const { return arenaName; }

private:
  DeviceAllocation allocation;
  std::string arenaName;
};

/// One allocation carved into persistent buffers by bump allocation.
class PersistentPool {
public:
  /// Allocates \p capacity bytes (size it with a BumpLayout over the same
  /// buffers, or sum alignUp of their sizes).
  PersistentPool(Device &device, uint64_t capacity, std::string name);

  /// A new kBufferAlignment-aligned buffer of \p bytes named \p what.
  /// Throws CudaError(InvalidArgument) when the pool is full.
  CUdeviceptr allocate(uint64_t bytes, const std::string &what);

  CUdeviceptr base() const { return allocation.pointer(); }
  uint64_t capacity() const { return allocation.bytes(); }
  uint64_t used() const { return layout.used(); }

private:
  DeviceAllocation allocation;
  BumpLayout layout;
  std::string poolName;
};

} // namespace ampc::cuda

#endif // AMPC_RUNTIME_CUDA_MEMORY_H
