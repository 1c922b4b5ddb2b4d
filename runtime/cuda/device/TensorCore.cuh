//===- TensorCore.cuh - Warp-level tensor-core primitives (sm_80+) --------===//
//
// The few PTX instructions the tensor-core kernels use, each behind a function whose fragment
// layout is the PTX ISA's:
//
//   mma16816<kBf16>(d, a, b)   d += a b, mma.sync.aligned.m16n8k16.row.col.f32.{bf16|f16}
//                              (A 16x16 row-major, B 16x8 column-major, D 16x8 f32). For
//                              lane l, g = l / 4, t = l % 4:
//                                a0 (row g, cols 2t..2t+1)   a1 (row g+8, cols 2t..2t+1)
//                                a2 (row g, cols 2t+8..+9)   a3 (row g+8, cols 2t+8..+9)
//                                b0 (rows 2t..2t+1, col g)   b1 (rows 2t+8..+9, col g)
//                                d0, d1 (row g, cols 2t..2t+1)  d2, d3 (row g+8, same cols)
//                              16-bit pairs keep the lower index in the lower half.
//   ldmatrixX4(r, row)         ldmatrix.sync.aligned.m8n8.x4.shared.b16: lanes 8i..8i+7 pass
//                              the shared-memory addresses of the 8 rows (16 bytes each) of
//                              matrix i; r[i] of lane l = matrix i, row l/4, cols 2(l%4)..+1.
//   ldmatrixX4Trans(r, row)    the same with .trans: r[i] = matrix i, rows 2(l%4)..+1, col l/4.
//   packPair<kBf16>(lo, hi)    two f32 rounded to nearest even into one 32-bit operand.
//   copyAsync16(dst, src, ok)  cp.async.cg of 16 bytes global -> shared (zero-filled when !ok),
//                              with commitAsyncCopies / waitAsyncCopies<N> (sm_80).
//
// The accumulator layout of one m16n8 product equals the A-operand layout of a k16 step when
// two adjacent n-tiles are packed (d of tile 2j -> a0, a1; tile 2j+1 -> a2, a3), so a product's
// result (attention's P or dS) feeds the next product from registers.
//
// Compiled by NVRTC for sm_80 and newer. With AMPC_DEVICE_EMULATION defined (a host test that
// included test/unit/emulation/DeviceEmulator.h first) the functions call the emulator's
// implementation of the same instructions.
//
//===----------------------------------------------------------------------===//

#ifndef AMPC_RUNTIME_CUDA_DEVICE_TENSORCORE_CUH
#define AMPC_RUNTIME_CUDA_DEVICE_TENSORCORE_CUH

#include "runtime/numerics/Float16.h"

namespace ampc {
namespace tc {

/// 16 bytes copied as one access (shared-memory tiles are staged in these).
struct alignas(16) Chunk16 {
  unsigned words[4];
};

/// Two f32 values as one operand register of 16-bit elements (\p lo in bits 0-15).
template <bool kBf16> __device__ __forceinline__ unsigned packPair(float lo, float hi) {
#if !defined(AMPC_DEVICE_EMULATION) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  // One cvt rounds both to nearest even (as the numerics helpers do): a to the upper half.
  unsigned packed;
  if (kBf16)
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(packed) : "f"(hi), "f"(lo));
  else
    asm("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(packed) : "f"(hi), "f"(lo));
  return packed;
#else
  const unsigned low = kBf16 ? numerics::floatToBF16Bits(lo) : numerics::floatToF16Bits(lo);
  const unsigned high = kBf16 ? numerics::floatToBF16Bits(hi) : numerics::floatToF16Bits(hi);
  return low | high << 16;
#endif
}

template <bool kBf16>
__device__ __forceinline__ void mma16816(float (&d)[4], const unsigned (&a)[4],
                                         const unsigned (&b)[2]) {
#if defined(AMPC_DEVICE_EMULATION)
  ::ampc::emu::mmaM16N8K16(kBf16, d, a, b);
#else
  if (kBf16)
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
                 "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  else
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, "
                 "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#endif
}

#if !defined(AMPC_DEVICE_EMULATION)
/// The shared-window address of a generic pointer into shared memory.
__device__ __forceinline__ unsigned sharedAddress(const void *pointer) {
  unsigned address;
  asm("{ .reg .u64 a; cvta.to.shared.u64 a, %1; cvt.u32.u64 %0, a; }\n"
      : "=r"(address)
      : "l"(pointer));
  return address;
}
#endif

__device__ __forceinline__ void ldmatrixX4(unsigned (&r)[4], const void *row) {
#if defined(AMPC_DEVICE_EMULATION)
  ::ampc::emu::ldmatrix(4, false, r, row);
#else
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(sharedAddress(row)));
#endif
}

__device__ __forceinline__ void ldmatrixX4Trans(unsigned (&r)[4], const void *row) {
#if defined(AMPC_DEVICE_EMULATION)
  ::ampc::emu::ldmatrix(4, true, r, row);
#else
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(sharedAddress(row)));
#endif
}

/// cp.async.cg.shared.global: copies 16 bytes from global \p src to shared \p dst
/// asynchronously, or (\p valid false) zero-fills them; visible after waitAsyncCopies and a
/// barrier. An emulated copy happens at once.
__device__ __forceinline__ void copyAsync16(void *dst, const void *src, bool valid) {
#if defined(AMPC_DEVICE_EMULATION)
  const Chunk16 zero = {{0u, 0u, 0u, 0u}};
  *static_cast<Chunk16 *>(dst) = valid ? *static_cast<const Chunk16 *>(src) : zero;
#else
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n"
               :
               : "r"(sharedAddress(dst)), "l"(src), "r"(valid ? 16 : 0));
#endif
}

/// Closes the group of copies issued since the last commit.
__device__ __forceinline__ void commitAsyncCopies() {
#if !defined(AMPC_DEVICE_EMULATION)
  asm volatile("cp.async.commit_group;\n" ::);
#endif
}

/// Waits until at most \p Pending committed groups are still in flight.
template <int Pending> __device__ __forceinline__ void waitAsyncCopies() {
#if !defined(AMPC_DEVICE_EMULATION)
  asm volatile("cp.async.wait_group %0;\n" ::"n"(Pending));
#endif
}

} // namespace tc
} // namespace ampc

#endif // AMPC_RUNTIME_CUDA_DEVICE_TENSORCORE_CUH
