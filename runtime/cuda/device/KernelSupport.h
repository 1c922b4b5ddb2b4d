//===- KernelSupport.h - Device helpers shared by generated kernels -------===//
//
// Every kernel the compiler generates (compiler/cuda/CudaCodegen.cpp) includes this header. It
// holds what each kernel would otherwise repeat: the storage types of tensor elements and their
// conversions to and from the f32 that all arithmetic runs in (rounding to nearest even through
// runtime/numerics/Float16.h, the same code the CPU backend rounds with), 16-byte vector packs,
// and warp/block reductions in f32. NVRTC-compilable: no standard library headers.
//
//===----------------------------------------------------------------------===//

#ifndef AMPC_RUNTIME_CUDA_DEVICE_KERNELSUPPORT_H
#define AMPC_RUNTIME_CUDA_DEVICE_KERNELSUPPORT_H

#include "runtime/numerics/Float16.h"

namespace ampc {
namespace device {

/// A bf16 element, kept as its bit pattern (arithmetic converts to f32 first).
struct bfloat16 {
  unsigned short bits;
};
/// An IEEE binary16 element, kept as its bit pattern.
struct half16 {
  unsigned short bits;
};

// On the GPU the conversions are the hardware's (cvt, round to nearest even; bf16 <-> f32 from
// sm_80), which give the bits of runtime/numerics/Float16.h for every value but NaN (the hardware
// writes the canonical quiet NaN, Float16.h keeps the payload's top bits) and take one
// instruction instead of the software rounding's 5 (bf16) to 20 (f16) with branches.
// KernelSupportGpu.ConvertsAsTheCpuBackend checks them against Float16.h on the device. The
// device emulator and older GPUs take Float16.h's code.
#if defined(__CUDA_ARCH__) && !defined(AMPC_DEVICE_EMULATION)
#define AMPC_DEVICE_F16_CVT 1
#if __CUDA_ARCH__ >= 800
#define AMPC_DEVICE_BF16_CVT 1
#endif
#endif

/// The f32 value of a stored element.
__device__ __forceinline__ float toFloat(float value) { return value; }
__device__ __forceinline__ float toFloat(bfloat16 value) {
#ifdef AMPC_DEVICE_BF16_CVT
  return __uint_as_float(static_cast<unsigned>(value.bits) << 16);
#else
  return numerics::bf16BitsToFloat(value.bits);
#endif
}
__device__ __forceinline__ float toFloat(half16 value) {
#ifdef AMPC_DEVICE_F16_CVT
  float result;
  asm("cvt.f32.f16 %0, %1;" : "=f"(result) : "h"(value.bits));
  return result;
#else
  return numerics::f16BitsToFloat(value.bits);
#endif
}
__device__ __forceinline__ float toFloat(int value) { return static_cast<float>(value); }
__device__ __forceinline__ float toFloat(long long value) { return static_cast<float>(value); }

/// An f32 value rounded (to nearest even) into the storage type T.
template <typename T> __device__ __forceinline__ T fromFloat(float value);
template <> __device__ __forceinline__ float fromFloat<float>(float value) { return value; }
template <> __device__ __forceinline__ bfloat16 fromFloat<bfloat16>(float value) {
#ifdef AMPC_DEVICE_BF16_CVT
  unsigned short bits;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(bits) : "f"(value));
  return bfloat16{bits};
#else
  return bfloat16{numerics::floatToBF16Bits(value)};
#endif
}
template <> __device__ __forceinline__ half16 fromFloat<half16>(float value) {
#ifdef AMPC_DEVICE_F16_CVT
  unsigned short bits;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(bits) : "f"(value));
  return half16{bits};
#else
  return half16{numerics::floatToF16Bits(value)};
#endif
}

/// \p value rounded to the precision of T and returned as f32: what a value of type T holds
/// after it is computed in f32, so a fused chain rounds exactly where the unfused ops would
/// have stored.
template <typename T> __device__ __forceinline__ float roundAs(float value) {
  return toFloat(fromFloat<T>(value));
}
template <> __device__ __forceinline__ float roundAs<float>(float value) { return value; }

/// e^x for a value that ends up stored in 16 bits, as 2^(x log2 e): the multiply and the
/// multiprocessor's exp2 (a few instructions, where expf takes about 8). Its relative error,
/// about |x| 2^-23 from the product's rounding, is far below a 16-bit type's step at the
/// magnitudes softmax-like kernels exponentiate (x <= 0 after subtracting the maximum).
__device__ __forceinline__ float expForStorage16(float value) {
  return exp2f(value * 1.4426950408889634f);
}

/// N consecutive elements, loaded and stored as one access (N * sizeof(T) is 8 or 16 bytes).
template <typename T, int N> struct alignas(sizeof(T) * N) Pack { T v[N]; };

/// True unless \p value is infinite or NaN.
__device__ __forceinline__ bool isFinite(float value) {
  return value == value && value - value == 0.0f;
}

/// The sum of \p value over the 32 lanes of a warp (every lane gets it).
__device__ __forceinline__ float warpSum(float value) {
  for (int offset = 16; offset > 0; offset >>= 1)
    value += __shfl_xor_sync(0xffffffffu, value, offset);
  return value;
}
/// The maximum of \p value over the lanes of a warp (NaN-propagating like fmaxf is not:
/// the larger of two numbers; a NaN is kept by the row kernels' explicit checks).
__device__ __forceinline__ float warpMax(float value) {
  for (int offset = 16; offset > 0; offset >>= 1)
    value = fmaxf(value, __shfl_xor_sync(0xffffffffu, value, offset));
  return value;
}

/// The sum of \p value over the block; every thread gets it. \p scratch holds 32 floats in
/// shared memory; the block size is a multiple of 32 and at most 1024.
__device__ __forceinline__ float blockSum(float value, float *scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int warps = (blockDim.x + 31) >> 5;
  value = warpSum(value);
  __syncthreads(); // scratch may still be read by a previous reduction
  if (lane == 0)
    scratch[warp] = value;
  __syncthreads();
  value = lane < warps ? scratch[lane] : 0.0f;
  return warpSum(value);
}
/// The maximum of \p value over the block, as blockSum.
__device__ __forceinline__ float blockMax(float value, float *scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int warps = (blockDim.x + 31) >> 5;
  value = warpMax(value);
  __syncthreads();
  if (lane == 0)
    scratch[warp] = value;
  __syncthreads();
  value = lane < warps ? scratch[lane] : -__int_as_float(0x7f800000);
  return warpMax(value);
}

/// The (value, index) with the largest value over the block, the lowest index among equal
/// values (the first maximum in row-major order); a NaN counts as the largest.
__device__ __forceinline__ void blockArgMax(float &value, long long &index, float *scratchValue,
                                            long long *scratchIndex) {
  auto better = [](float a, long long ia, float b, long long ib) {
    const bool aNan = a != a, bNan = b != b;
    if (aNan != bNan)
      return aNan;
    if (a != b && !aNan)
      return a > b;
    return ia < ib;
  };
  for (int offset = 16; offset > 0; offset >>= 1) {
    const float otherValue = __shfl_xor_sync(0xffffffffu, value, offset);
    const long long otherIndex = __shfl_xor_sync(0xffffffffu, index, offset);
    if (better(otherValue, otherIndex, value, index)) {
      value = otherValue;
      index = otherIndex;
    }
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int warps = (blockDim.x + 31) >> 5;
  __syncthreads();
  if (lane == 0) {
    scratchValue[warp] = value;
    scratchIndex[warp] = index;
  }
  __syncthreads();
  value = lane < warps ? scratchValue[lane] : -__int_as_float(0x7f800000);
  index = lane < warps ? scratchIndex[lane] : 0x7fffffffffffffffll;
  for (int offset = 16; offset > 0; offset >>= 1) {
    const float otherValue = __shfl_xor_sync(0xffffffffu, value, offset);
    const long long otherIndex = __shfl_xor_sync(0xffffffffu, index, offset);
    if (better(otherValue, otherIndex, value, index)) {
      value = otherValue;
      index = otherIndex;
    }
  }
}

} // namespace device
} // namespace ampc

#endif // AMPC_RUNTIME_CUDA_DEVICE_KERNELSUPPORT_H
