//===- ElementwiseKernels.cpp - Unary, binary and dropout kernels ---------===//
//
// All arithmetic is in the compute type T; constants are converted to T
// first, so the F32 backend evaluates every formula in float.
//
//===----------------------------------------------------------------------===//

#include "runtime/cpu/Kernels.h"
#include "runtime/cpu/StridedRows.h"
#include "runtime/cpu/ThreadPool.h"
#include "runtime/numerics/Elementwise.h"
#include "runtime/numerics/Float16.h"
#include "runtime/numerics/Philox.h"
#include "runtime/plan/Plan.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace ampc::cpu::kernels {
namespace {

/// Elements per parallel chunk for cheap per-element work.
constexpr int64_t kElementGrain = 1 << 15;

/// y[i] = f(x[i]), in parallel chunks.
template <typename T, typename F> void mapElements(const T *x, T *y, int64_t count, F f) {
  parallelFor(count, kElementGrain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i)
      y[i] = f(x[i]);
  });
}

/// One innermost row of a broadcast binary op: `aStride`/`bStride` are 0
/// (broadcast) or 1. The four cases are separate loops so each vectorises.
template <typename T, typename F>
inline void binaryRow(const T *a, int64_t aStride, const T *b, int64_t bStride, T *out,
                      int64_t length, F f) {
  if (aStride == 1 && bStride == 1) {
    for (int64_t i = 0; i < length; ++i)
      out[i] = f(a[i], b[i]);
  } else if (aStride == 1) {
    const T bValue = b[0];
    for (int64_t i = 0; i < length; ++i)
      out[i] = f(a[i], bValue);
  } else if (bStride == 1) {
    const T aValue = a[0];
    for (int64_t i = 0; i < length; ++i)
      out[i] = f(aValue, b[i]);
  } else {
    const T value = f(a[0], b[0]);
    for (int64_t i = 0; i < length; ++i)
      out[i] = value;
  }
}

template <typename T, typename F>
void broadcastBinary(const T *a, const Shape &aShape, const T *b, const Shape &bShape, T *out,
                     const Shape &outShape, F f) {
  const int64_t count = plan::numElements(outShape);
  if (count == 0)
    return;
  // Same shapes (the common case): one flat loop.
  if (aShape == outShape && bShape == outShape) {
    parallelFor(count, kElementGrain, [&](int64_t begin, int64_t end) {
      binaryRow(a + begin, 1, b + begin, 1, out + begin, end - begin, f);
    });
    return;
  }
  const Shape aStrides = plan::broadcastStrides(aShape, outShape);
  const Shape bStrides = plan::broadcastStrides(bShape, outShape);
  const Shape outStrides = plan::rowMajorStrides(outShape);
  const int64_t length = outShape.empty() ? 1 : outShape.back();
  const int64_t rows = count / length;
  // Short rows (e.g. a [N, 1] column) get several rows per chunk.
  const int64_t grain = std::max<int64_t>(1, kElementGrain / length);
  parallelFor(rows, grain, [&](int64_t begin, int64_t end) {
    StridedRows walk(outShape, {&aStrides, &bStrides, &outStrides}, begin);
    for (int64_t row = begin; row < end; ++row, walk.next())
      binaryRow(a + walk.rowOffset(0), walk.innerStride(0), b + walk.rowOffset(1),
                walk.innerStride(1), out + walk.rowOffset(2), length, f);
  });
}

} // namespace

template <typename T> void unary(UnaryOp op, const T *x, T *y, int64_t count) {
  // Each opcode's element is numerics::ops::Name::apply (Elementwise.h), as on the device.
  switch (op) {
#define AMPC_UNARY_OP(Name, ...)                                                                   \
  case UnaryOp::Name:                                                                              \
    return mapElements(x, y, count, [](T v) { return numerics::ops::Name::apply(v); });
#include "runtime/plan/OpCodes.def"
  case UnaryOp::GeluErf:
    return mapElements(x, y, count, [](T v) { return numerics::ops::GeluErf::apply(v); });
  case UnaryOp::GeluTanh:
    return mapElements(x, y, count, [](T v) { return numerics::ops::GeluTanh::apply(v); });
  }
}

template <typename T>
void binary(BinaryOp op, const T *a, const Shape &aShape, const T *b, const Shape &bShape, T *out,
            const Shape &outShape) {
  switch (op) {
#define AMPC_BINARY_OP(Name, ...)                                                                  \
  case BinaryOp::Name:                                                                             \
    return broadcastBinary(a, aShape, b, bShape, out, outShape,                                    \
                           [](T l, T r) { return numerics::ops::Name::apply(l, r); });
#include "runtime/plan/OpCodes.def"
  }
}

template <typename T>
void dropout(const T *x, T *y, int64_t count, double p, uint64_t seed, uint64_t step,
             uint32_t stream) {
  // Element e survives iff uniform01(seed, step, stream, e) >= p, and is then
  // scaled by 1 / (1 - p) (the scale rounded to T once).
  const T scale = static_cast<T>(1.0 / (1.0 - p));
  parallelFor(count, 1 << 13, [&](int64_t begin, int64_t end) {
    for (int64_t e = begin; e < end; ++e) {
      const double u = numerics::uniform01(seed, step, stream, e);
      y[e] = u >= p ? x[e] * scale : T(0);
    }
  });
}

void roundFloatsToBF16(float *data, int64_t count) {
  // numerics::floatToBF16Bits then bf16BitsToFloat, without branches so that
  // the loop vectorises: a NaN keeps its top bits and is made quiet, any
  // other value rounds to nearest even by the carry of 0x7fff plus its lsb.
  for (int64_t i = 0; i < count; ++i) {
    uint32_t bits;
    std::memcpy(&bits, data + i, sizeof bits);
    const bool nan = (bits & 0x7fffffffu) > 0x7f800000u;
    const uint32_t rounded = nan ? (bits & 0xffff0000u) | 0x00400000u
                                 : (bits + 0x7fffu + ((bits >> 16) & 1u)) & 0xffff0000u;
    std::memcpy(data + i, &rounded, sizeof rounded);
  }
}

void roundFloatsToF16(float *data, int64_t count) {
  // A zero, or a magnitude from fp16's smallest normal 2^-14 (0x38800000) up
  // to below the overflow threshold 65520 (0x477ff000), keeps its exponent:
  // rounding the float's 23-bit mantissa to 10 bits in place (a carry into
  // the exponent included) is the fp16 rounding. Blocks where every value is
  // such run branch-free; others go value by value through Float16.h.
  constexpr int64_t kBlock = 256;
  for (int64_t begin = 0; begin < count; begin += kBlock) {
    const int64_t end = std::min(count, begin + kBlock);
    uint32_t outside = 0;
    for (int64_t i = begin; i < end; ++i) {
      uint32_t bits;
      std::memcpy(&bits, data + i, sizeof bits);
      const uint32_t magnitude = bits & 0x7fffffffu;
      outside |= magnitude != 0 && magnitude - 0x38800000u >= 0x477ff000u - 0x38800000u;
    }
    if (outside) {
      for (int64_t i = begin; i < end; ++i)
        data[i] = numerics::roundToF16(data[i]);
      continue;
    }
    for (int64_t i = begin; i < end; ++i) {
      uint32_t bits;
      std::memcpy(&bits, data + i, sizeof bits);
      const uint32_t rounded = (bits + 0xfffu + ((bits >> 13) & 1u)) & 0xffffe000u;
      std::memcpy(data + i, &rounded, sizeof rounded);
    }
  }
}

template void unary<float>(UnaryOp, const float *, float *, int64_t);
template void unary<double>(UnaryOp, const double *, double *, int64_t);
template void binary<float>(BinaryOp, const float *, const Shape &, const float *, const Shape &,
                            float *, const Shape &);
template void binary<double>(BinaryOp, const double *, const Shape &, const double *, const Shape &,
                             double *, const Shape &);
template void dropout<float>(const float *, float *, int64_t, double, uint64_t, uint64_t, uint32_t);
template void dropout<double>(const double *, double *, int64_t, double, uint64_t, uint64_t,
                              uint32_t);

} // namespace ampc::cpu::kernels
