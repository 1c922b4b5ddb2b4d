//===- DeviceEmulator.h - Run CUDA device code on the host, thread by thread -===//
//
// Device headers (runtime/cuda/device/*.cuh) are CUDA C++ that NVRTC compiles. Without a GPU
// their logic can still be executed: this header makes the same source compile as host C++
// (included before the device header) and runs a kernel's grid with every CUDA thread as a
// cooperative fiber (ucontext), so that
//   - __syncthreads(), __syncthreads_or() and __syncwarp() are real barriers (a thread that
//     waits lets the others run; a barrier that can never complete is reported, not hung on),
//   - warp collectives exchange values between the lanes of a warp: __shfl_xor_sync,
//     __shfl_sync, and the tensor-core instructions mma.sync.m16n8k16 (bf16 and f16 with f32
//     accumulation) and ldmatrix (.x1/.x2/.x4, with and without .trans), each following the
//     register layouts of the PTX ISA (runtime/cuda/device/TensorCore.cuh calls them when
//     AMPC_DEVICE_EMULATION is defined),
//   - __shared__ variables are shared by the threads of a block (blocks run one at a time).
// Blocks run one after another, in blockIdx order, on the calling thread. It is meant for
// correctness tests of small shapes (layouts, masking, tiles that are partly outside a
// tensor), not for speed: every lane of an mma recomputes the whole 16x8x16 product.
//
// What it cannot show: races between blocks, timing, bank conflicts, register spills, and
// whether the PTX is accepted (the NVRTC tests check that); and if this header's reading of a
// PTX layout were wrong in the same way as a kernel's, both would agree here and be wrong on
// the GPU. Its layouts are pinned by DeviceEmulatorTest against the PTX ISA's tables.
//
//===----------------------------------------------------------------------===//

#ifndef AMPC_TEST_UNIT_EMULATION_DEVICEEMULATOR_H
#define AMPC_TEST_UNIT_EMULATION_DEVICEEMULATOR_H

#include <cmath>
#include <math.h> // exp2f, fmaxf, ... in the global namespace, as device code calls them
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <type_traits>

namespace ampc::emu {

struct Dim3 {
  unsigned x = 1, y = 1, z = 1;
};

/// Runs \p kernel once per thread of \p grid x \p block (a body calling the kernel function
/// with its arguments). Throws std::runtime_error when the threads of a block wait at
/// barriers that cannot complete.
void launch(Dim3 grid, Dim3 block, const std::function<void()> &kernel);

/// The calling fiber's indices (valid inside launch()).
const Dim3 &threadIndex();
const Dim3 &blockIndex();
const Dim3 &blockDimension();
const Dim3 &gridDimension();
/// The calling thread's lane in its warp (linear thread index mod 32).
unsigned laneId();

/// Block-wide barrier; exited threads count as arrived.
void syncThreads();
/// Warp-wide barrier (all live lanes of the calling thread's warp).
void syncWarp();
/// Block-wide barrier that returns whether any thread of the block passed true (exited
/// threads do not vote).
bool syncThreadsOr(bool predicate);

/// Publishes \p bytes (<= 64) of \p data for the lanes of the calling warp and waits until every
/// live lane published; published(lane) then reads what \p lane published until
/// exchangeDone(), which every lane calls before publishing again.
void publish(const void *data, size_t bytes);
const void *published(unsigned lane);
void exchangeDone();

template <typename T> T shuffle(T value, unsigned sourceLane) {
  static_assert(sizeof(T) <= 64 && std::is_trivially_copyable_v<T>);
  publish(&value, sizeof value);
  T result;
  std::memcpy(&result, published(sourceLane % 32), sizeof result);
  exchangeDone();
  return result;
}

/// mma.sync.aligned.m16n8k16.row.col.f32.{bf16,f16}.{bf16,f16}.f32 d, a, b, d: every lane of
/// the warp calls it with its fragment registers.
void mmaM16N8K16(bool bf16, float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]);
/// ldmatrix.sync.aligned.m8n8.x{count}[.trans].shared.b16: lanes 8i..8i+7 give the row
/// addresses of matrix i; register i of each lane receives its part of matrix i.
void ldmatrix(int count, bool transpose, uint32_t *registers, const void *rowAddress);

} // namespace ampc::emu

// CUDA C++ spelled as host C++.
#define AMPC_DEVICE_EMULATION 1
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__ static
#define __launch_bounds__(...)
#define threadIdx (::ampc::emu::threadIndex())
#define blockIdx (::ampc::emu::blockIndex())
#define blockDim (::ampc::emu::blockDimension())
#define gridDim (::ampc::emu::gridDimension())

inline void __syncthreads() { ::ampc::emu::syncThreads(); }
inline int __syncthreads_or(int predicate) { return ::ampc::emu::syncThreadsOr(predicate != 0); }
inline void __syncwarp(unsigned = 0xffffffffu) { ::ampc::emu::syncWarp(); }
template <typename T> T __shfl_xor_sync(unsigned, T value, int laneMask, int = 32) {
  return ::ampc::emu::shuffle(value, ::ampc::emu::laneId() ^ static_cast<unsigned>(laneMask));
}
template <typename T> T __shfl_sync(unsigned, T value, int sourceLane, int = 32) {
  return ::ampc::emu::shuffle(value, static_cast<unsigned>(sourceLane));
}
inline float __int_as_float(int bits) {
  float value;
  std::memcpy(&value, &bits, 4);
  return value;
}
inline int __float_as_int(float value) {
  int bits;
  std::memcpy(&bits, &value, 4);
  return bits;
}
inline float __uint_as_float(unsigned bits) {
  float value;
  std::memcpy(&value, &bits, 4);
  return value;
}
inline unsigned __float_as_uint(float value) {
  unsigned bits;
  std::memcpy(&bits, &value, 4);
  return bits;
}
/// CUDA's integer min and max (its overloads for mixed operand types convert as these do).
template <typename A, typename B> std::common_type_t<A, B> min(A a, B b) {
  return a < b ? a : b;
}
template <typename A, typename B> std::common_type_t<A, B> max(A a, B b) {
  return a < b ? b : a;
}
/// Fibers of one launch never run at the same time: a plain read-modify-write is atomic.
inline float atomicAdd(float *address, float value) {
  const float old = *address;
  *address = old + value;
  return old;
}
inline float atomicExch(float *address, float value) {
  const float old = *address;
  *address = value;
  return old;
}
inline unsigned atomicCAS(unsigned *address, unsigned compare, unsigned value) {
  const unsigned old = *address;
  if (old == compare)
    *address = value;
  return old;
}

#endif // AMPC_TEST_UNIT_EMULATION_DEVICEEMULATOR_H
