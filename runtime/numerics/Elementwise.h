//===- Elementwise.h - The scalar math of every elementwise opcode -*- C++ -*-===//
//
// One struct per elementwise opcode of runtime/plan/OpCodes.def, named as the opcode, whose
// static apply() computes one element: the forward ops (AMPC_UNARY_OP, AMPC_BINARY_OP) from
// their operands, the activation gradients (AMPC_UNARY_GRAD_OP) dx from the forward input x
// and the result's gradient dy. This is the only place these formulas are written:
//   - the CPU backend (runtime/cpu/ElementwiseKernels.cpp, GradKernels.cpp) maps apply over
//     arrays in its compute type T (float, or double for gradient checks);
//   - the CUDA code generator (compiler/cuda/CudaCodegen.cpp) writes a call of apply on the
//     element's f32 value into each fused kernel, which includes this header through NVRTC;
//   - the device emulator compiles those kernels as host C++ with the same header.
// So the CPU oracle and the GPU evaluate the same expression in the same order by construction.
//
// Every constant is converted to T before use, so the f32 evaluation rounds each constant
// once, as the device's f32 literals do. The gelu opcode has two forms (its `approximate`
// attribute), GeluErf and GeluTanh, each with its gradient.
//
// Compiled three ways (host C++, nvcc, NVRTC): no standard headers under NVRTC, and the
// transcendental functions go through `math` below, the device's f32 functions in device code
// and <cmath>'s overloads on the host.
//
//===----------------------------------------------------------------------===//

#ifndef AMPC_RUNTIME_NUMERICS_ELEMENTWISE_H
#define AMPC_RUNTIME_NUMERICS_ELEMENTWISE_H

#include "runtime/numerics/HostDevice.h"

#if !defined(__CUDACC_RTC__)
#include <cmath>
#endif

namespace ampc::numerics {

/// exp, log, log1p, tanh, erf and sqrt for float and double, on the host and the device.
namespace math {
#if defined(__CUDA_ARCH__)
__device__ __forceinline__ float exp(float x) { return ::expf(x); }
__device__ __forceinline__ float log(float x) { return ::logf(x); }
__device__ __forceinline__ float tanh(float x) { return ::tanhf(x); }
__device__ __forceinline__ float erf(float x) { return ::erff(x); }
__device__ __forceinline__ float sqrt(float x) { return ::sqrtf(x); }
__device__ __forceinline__ float log1p(float x) { return ::log1pf(x); }
__device__ __forceinline__ double exp(double x) { return ::exp(x); }
__device__ __forceinline__ double log(double x) { return ::log(x); }
__device__ __forceinline__ double tanh(double x) { return ::tanh(x); }
__device__ __forceinline__ double erf(double x) { return ::erf(x); }
__device__ __forceinline__ double sqrt(double x) { return ::sqrt(x); }
__device__ __forceinline__ double log1p(double x) { return ::log1p(x); }
#else
using std::erf;
using std::exp;
using std::log;
using std::log1p;
using std::sqrt;
using std::tanh;
#endif
} // namespace math

/// The elementwise opcodes, each named as its OpCodes.def line.
namespace ops {

//===----------------------------------------------------------------------===//
// Binary (NumPy broadcast of two operands)
//===----------------------------------------------------------------------===//

struct Add {
  template <typename T> AMPC_HOST_DEVICE static T apply(T a, T b) { return a + b; }
};
struct Sub {
  template <typename T> AMPC_HOST_DEVICE static T apply(T a, T b) { return a - b; }
};
struct Mul {
  template <typename T> AMPC_HOST_DEVICE static T apply(T a, T b) { return a * b; }
};
struct Div {
  template <typename T> AMPC_HOST_DEVICE static T apply(T a, T b) { return a / b; }
};

//===----------------------------------------------------------------------===//
// Unary
//===----------------------------------------------------------------------===//

struct Neg {
  template <typename T> AMPC_HOST_DEVICE static T apply(T x) { return -x; }
};

/// max(x, 0) that keeps NaN, as PyTorch does.
struct Relu {
  template <typename T> AMPC_HOST_DEVICE static T apply(T x) {
    return x > T(0) || x != x ? x : T(0);
  }
};
/// dy * (x > 0 ? 1 : 0): a NaN or infinite dy stays visible as NaN.
struct ReluGrad {
  template <typename T> AMPC_HOST_DEVICE static T apply(T x, T dy) {
    return dy * (x > T(0) ? T(1) : T(0));
  }
};

/// 1 / (1 + e^-x): 0, not NaN, where e^-x overflows.
struct Sigmoid {
  template <typename T> AMPC_HOST_DEVICE static T apply(T x) {
    return T(1) / (T(1) + math::exp(-x));
  }
};
/// x * sigmoid(x) = x / (1 + e^-x); exp overflow gives -0, not NaN.
struct Silu {
  template <typename T> AMPC_HOST_DEVICE static T apply(T x) {
    return x / (T(1) + math::exp(-x));
  }
};
/// d/dx x s(x) = s (1 + x (1 - s)), s = 1 / (1 + e^-x).
struct SiluGrad {
  template <typename T> AMPC_HOST_DEVICE static T apply(T x, T dy) {
    const T s = Sigmoid::apply(x);
    return dy * s * (T(1) + x * (T(1) - s));
  }
};

struct Tanh {
  template <typename T> AMPC_HOST_DEVICE static T apply(T x) { return math::tanh(x); }
};
struct Exp {
  template <typename T> AMPC_HOST_DEVICE static T apply(T x) { return math::exp(x); }
};
struct Log {
  template <typename T> AMPC_HOST_DEVICE static T apply(T x) { return math::log(x); }
};
struct Sqrt {
  template <typename T> AMPC_HOST_DEVICE static T apply(T x) { return math::sqrt(x); }
};
struct Rsqrt {
  template <typename T> AMPC_HOST_DEVICE static T apply(T x) { return T(1) / math::sqrt(x); }
};

/// gelu, exact form: 0.5 x (1 + erf(x / sqrt 2)).
struct GeluErf {
  template <typename T> AMPC_HOST_DEVICE static T apply(T x) {
    const T invSqrt2 = T(0.70710678118654752440);
    return T(0.5) * x * (T(1) + math::erf(x * invSqrt2));
  }
};
/// d/dx 0.5 x (1 + erf(x / sqrt 2)) = Phi(x) + x phi(x), phi(x) = e^(-x^2 / 2) / sqrt(2 pi).
struct GeluErfGrad {
  template <typename T> AMPC_HOST_DEVICE static T apply(T x, T dy) {
    const T invSqrt2 = T(0.70710678118654752440);
    const T invSqrt2Pi = T(0.39894228040143267794);
    const T cdf = T(0.5) * (T(1) + math::erf(x * invSqrt2));
    const T pdf = invSqrt2Pi * math::exp(T(-0.5) * x * x);
    return dy * (cdf + x * pdf);
  }
};

/// gelu, tanh form: 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))).
struct GeluTanh {
  template <typename T> AMPC_HOST_DEVICE static T apply(T x) {
    const T sqrt2OverPi = T(0.79788456080286535588);
    const T cubic = T(0.044715);
    return T(0.5) * x * (T(1) + math::tanh(sqrt2OverPi * (x + cubic * x * x * x)));
  }
};
/// y = 0.5 x (1 + tanh u), u = sqrt(2/pi) (x + 0.044715 x^3):
/// y' = 0.5 (1 + tanh u) + 0.5 x (1 - tanh^2 u) sqrt(2/pi) (1 + 3 0.044715 x^2).
struct GeluTanhGrad {
  template <typename T> AMPC_HOST_DEVICE static T apply(T x, T dy) {
    const T sqrt2OverPi = T(0.79788456080286535588);
    const T cubic = T(0.044715);
    const T th = math::tanh(sqrt2OverPi * (x + cubic * x * x * x));
    const T du = sqrt2OverPi * (T(1) + T(3) * cubic * x * x);
    return dy * (T(0.5) * (T(1) + th) + T(0.5) * x * (T(1) - th * th) * du);
  }
};

/// x * relu6(x + 3) / 6 = x * min(max(x + 3, 0), 6) / 6, as PyTorch computes it (NaN stays).
struct Hardswish {
  template <typename T> AMPC_HOST_DEVICE static T apply(T x) {
    const T shifted = x + T(3);
    const T low = shifted < T(0) ? T(0) : shifted;
    return x * (T(6) < low ? T(6) : low) / T(6);
  }
};
/// 0 below -3; dy (x / 3 + 1/2) from -3 to 3; dy above (and for NaN x), as PyTorch's.
struct HardswishGrad {
  template <typename T> AMPC_HOST_DEVICE static T apply(T x, T dy) {
    if (x < T(-3))
      return T(0);
    if (x <= T(3))
      return dy * (x / T(3) + T(0.5));
    return dy;
  }
};

/// dy (1 - s) s, s = sigmoid(x), in PyTorch's order.
struct SigmoidGrad {
  template <typename T> AMPC_HOST_DEVICE static T apply(T x, T dy) {
    const T s = Sigmoid::apply(x);
    return dy * (T(1) - s) * s;
  }
};

/// relu6(x + 3) / 6 = min(max(x + 3, 0), 6) / 6, as PyTorch computes it (NaN stays).
struct Hardsigmoid {
  template <typename T> AMPC_HOST_DEVICE static T apply(T x) {
    const T shifted = x + T(3);
    const T low = shifted < T(0) ? T(0) : shifted;
    return (T(6) < low ? T(6) : low) / T(6);
  }
};
/// dy / 6 (as dy times the rounded 1/6, PyTorch's) strictly between -3 and 3, else 0.
struct HardsigmoidGrad {
  template <typename T> AMPC_HOST_DEVICE static T apply(T x, T dy) {
    return x > T(-3) && x < T(3) ? dy * (T(1) / T(6)) : T(0);
  }
};

/// log(1 + e^x), and x itself above PyTorch's threshold 20 (beta 1), where they agree in f32.
struct Softplus {
  template <typename T> AMPC_HOST_DEVICE static T apply(T x) {
    return x > T(20) ? x : math::log1p(math::exp(x));
  }
};
/// dy e^x / (e^x + 1) = dy sigmoid(x), and dy above the threshold, in PyTorch's order.
struct SoftplusGrad {
  template <typename T> AMPC_HOST_DEVICE static T apply(T x, T dy) {
    const T z = math::exp(x);
    return x > T(20) ? dy : dy * z / (z + T(1));
  }
};

//===----------------------------------------------------------------------===//
// With bounds (the clip opcodes: an absent bound is an infinite one)
//===----------------------------------------------------------------------===//

/// min(max(x, lo), hi); NaN stays NaN (torch.clamp).
struct Clip {
  template <typename T> AMPC_HOST_DEVICE static T apply(T x, T lo, T hi) {
    const T low = x < lo ? lo : x;
    return low > hi ? hi : low;
  }
};
/// dy where lo <= x <= hi, else 0 (torch.clamp's backward: the bounds pass the gradient).
struct ClipGrad {
  template <typename T> AMPC_HOST_DEVICE static T apply(T x, T dy, T lo, T hi) {
    return x >= lo && x <= hi ? dy : T(0);
  }
};

} // namespace ops
} // namespace ampc::numerics

#endif // AMPC_RUNTIME_NUMERICS_ELEMENTWISE_H
