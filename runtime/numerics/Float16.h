//===- Float16.h - bf16 and fp16 conversions, round-to-nearest-even -------===//
//
// Conversions between fp32/fp64 and the two 16-bit floating-point storage
// formats ampc uses:
//   bf16: 1 sign, 8 exponent (bias 127), 7 mantissa bits; fp32's range.
//   fp16: IEEE binary16, 1 sign, 5 exponent (bias 15), 10 mantissa bits;
//         largest finite 65504, smallest subnormal 2^-24.
// Every narrowing conversion rounds to nearest, ties to even, handles
// subnormals in both directions, overflows to a signed infinity, keeps the
// sign of zero, and turns any NaN into a quiet NaN of the same sign (keeping
// the top payload bits that fit).
//
// The double -> 16-bit conversions round once, directly from the double.
// Going through float would round twice: 1 + 2^-8 + 2^-30 becomes the bf16
// tie 1 + 2^-8 as a float and then rounds to even (1.0), whereas the correctly
// rounded bf16 is 1 + 2^-7. The F64 reference backend relies on the single
// rounding.
//
// Everything here is usable from CUDA device code and compiles under NVRTC.
//
//===----------------------------------------------------------------------===//

#ifndef AMPC_RUNTIME_NUMERICS_FLOAT16_H
#define AMPC_RUNTIME_NUMERICS_FLOAT16_H

#include "runtime/numerics/HostDevice.h"

#if !defined(__CUDACC_RTC__)
#include <cstring>
#endif

namespace ampc {
namespace numerics {

//===----------------------------------------------------------------------===//
// Bit casts
//===----------------------------------------------------------------------===//

/// The IEEE bit pattern of \p value.
AMPC_HOST_DEVICE inline uint32_t floatToBits(float value) {
#if AMPC_DEVICE_PASS
  return __float_as_uint(value);
#else
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  return bits;
#endif
}

/// The float whose IEEE bit pattern is \p bits.
AMPC_HOST_DEVICE inline float bitsToFloat(uint32_t bits) {
#if AMPC_DEVICE_PASS
  return __uint_as_float(bits);
#else
  float value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
#endif
}

/// The IEEE bit pattern of \p value.
AMPC_HOST_DEVICE inline uint64_t doubleToBits(double value) {
#if AMPC_DEVICE_PASS
  return static_cast<uint64_t>(__double_as_longlong(value));
#else
  uint64_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  return bits;
#endif
}

/// The double whose IEEE bit pattern is \p bits.
AMPC_HOST_DEVICE inline double bitsToDouble(uint64_t bits) {
#if AMPC_DEVICE_PASS
  return __longlong_as_double(static_cast<long long>(bits));
#else
  double value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
#endif
}

//===----------------------------------------------------------------------===//
// fp32 <-> bf16
//===----------------------------------------------------------------------===//

/// Rounds \p value to the nearest bf16 (ties to even) and returns its bits.
AMPC_HOST_DEVICE inline uint16_t floatToBF16Bits(float value) {
  uint32_t bits = floatToBits(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) // NaN: truncate and force quiet.
    return static_cast<uint16_t>((bits >> 16) | 0x0040u);
  // bf16 keeps the top 16 bits. Adding 0x7fff rounds up exactly when the
  // dropped half is above the halfway point; the extra lsb of the kept part
  // turns the halfway case into round-to-even. A carry out of the mantissa
  // increments the exponent, which is how the largest values reach infinity;
  // fp32 subnormals map onto bf16 subnormals by the same arithmetic.
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

/// The exact float value of the bf16 with bits \p bits (NaNs made quiet).
AMPC_HOST_DEVICE inline float bf16BitsToFloat(uint16_t bits) {
  uint32_t wide = static_cast<uint32_t>(bits) << 16;
  if ((wide & 0x7fffffffu) > 0x7f800000u)
    wide |= 0x00400000u;
  return bitsToFloat(wide);
}

//===----------------------------------------------------------------------===//
// fp32 <-> fp16
//===----------------------------------------------------------------------===//

/// Rounds \p value to the nearest IEEE binary16 (ties to even) and returns its
/// bits.
AMPC_HOST_DEVICE inline uint16_t floatToF16Bits(float value) {
  const uint32_t bits = floatToBits(value);
  const uint32_t sign = (bits >> 16) & 0x8000u;
  const uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude > 0x7f800000u) // NaN: keep the top payload bits, set quiet.
    return static_cast<uint16_t>(sign | 0x7e00u | ((magnitude >> 13) & 0x3ffu));
  // 65520 = 0x477ff000 is halfway between 65504 (odd mantissa 0x3ff) and
  // 2^16; the tie goes to the even neighbour, which is infinity.
  if (magnitude >= 0x477ff000u)
    return static_cast<uint16_t>(sign | 0x7c00u);
  if (magnitude < 0x38800000u) {
    // Below 2^-14 the result is a subnormal in units of 2^-24. Anything up to
    // and including 2^-25 (0x33000000, a tie with zero) rounds to zero.
    if (magnitude <= 0x33000000u)
      return static_cast<uint16_t>(sign);
    const uint32_t exponent = magnitude >> 23; // 102..112
    const uint32_t mantissa = (magnitude & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126u - exponent; // 14..24
    uint32_t units = mantissa >> shift;
    const uint32_t remainder = mantissa & ((1u << shift) - 1u);
    const uint32_t halfway = 1u << (shift - 1u);
    if (remainder > halfway || (remainder == halfway && (units & 1u)))
      ++units; // 0x400 here is the smallest normal, encoded correctly.
    return static_cast<uint16_t>(sign | units);
  }
  // Normal: rebias the exponent (127 -> 15) and round away 13 mantissa bits
  // the same way as for bf16; the range check above rules out a carry to inf.
  const uint32_t rebased = magnitude - 0x38000000u;
  const uint32_t rounded = (rebased + 0xfffu + ((rebased >> 13) & 1u)) >> 13;
  return static_cast<uint16_t>(sign | rounded);
}

/// The exact float value of the fp16 with bits \p bits (NaNs made quiet).
AMPC_HOST_DEVICE inline float f16BitsToFloat(uint16_t bits) {
  const uint32_t sign = (static_cast<uint32_t>(bits) & 0x8000u) << 16;
  uint32_t exponent = (bits >> 10) & 0x1fu;
  uint32_t mantissa = bits & 0x3ffu;
  if (exponent == 0x1fu) {
    uint32_t special = sign | 0x7f800000u | (mantissa << 13);
    if (mantissa != 0)
      special |= 0x00400000u;
    return bitsToFloat(special);
  }
  if (exponent == 0) {
    if (mantissa == 0)
      return bitsToFloat(sign);
    // Subnormal mantissa * 2^-24: normalise it into an fp32 normal.
    exponent = 113; // fp32 biased exponent of 2^-14
    while ((mantissa & 0x400u) == 0) {
      mantissa <<= 1;
      --exponent;
    }
    mantissa &= 0x3ffu;
    return bitsToFloat(sign | (exponent << 23) | (mantissa << 13));
  }
  return bitsToFloat(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

//===----------------------------------------------------------------------===//
// fp64 -> bf16 / fp16, rounded once
//===----------------------------------------------------------------------===//

namespace detail {
/// Rounds \p value to nearest-even in a binary format with \p mantissaBits
/// stored mantissa bits and \p exponentBits exponent bits (bf16: 7, 8; fp16:
/// 10, 5), directly from the double, and returns the encoding.
AMPC_HOST_DEVICE inline uint16_t roundDoubleToNarrowBits(double value, int mantissaBits,
                                                         int exponentBits) {
  const uint64_t bits = doubleToBits(value);
  const uint32_t sign = static_cast<uint32_t>(bits >> 63) << (mantissaBits + exponentBits);
  const uint64_t magnitude = bits & 0x7fffffffffffffffull;
  const uint32_t infinity = ((1u << exponentBits) - 1u) << mantissaBits;
  if (magnitude >= 0x7ff0000000000000ull) {
    if (magnitude == 0x7ff0000000000000ull)
      return static_cast<uint16_t>(sign | infinity);
    const uint32_t payload =
        static_cast<uint32_t>((magnitude >> (52 - mantissaBits)) & ((1u << mantissaBits) - 1u));
    return static_cast<uint16_t>(sign | infinity | (1u << (mantissaBits - 1)) | payload);
  }
  // Zero and double subnormals (< 2^-1022) are far below half the smallest
  // subnormal of either target format.
  if ((magnitude >> 52) == 0)
    return static_cast<uint16_t>(sign);
  const int bias = (1 << (exponentBits - 1)) - 1;
  const int minExponent = 1 - bias;
  const int exponent = static_cast<int>(magnitude >> 52) - 1023;
  const uint64_t significand = (magnitude & 0xfffffffffffffull) | 0x10000000000000ull; // 53 bits
  // Keep mantissaBits + 1 significant bits for a normal result; for a
  // subnormal one, fewer: the units are fixed at 2^(minExponent-mantissaBits).
  int shift = 52 - mantissaBits;
  if (exponent < minExponent)
    shift += minExponent - exponent;
  // Beyond 53 the value is below half the smallest subnormal.
  if (shift > 53)
    return static_cast<uint16_t>(sign);
  uint64_t kept = significand >> shift;
  const uint64_t remainder = significand & ((1ull << shift) - 1ull);
  const uint64_t halfway = 1ull << (shift - 1);
  if (remainder > halfway || (remainder == halfway && (kept & 1ull)))
    ++kept;
  uint32_t result;
  if (exponent < minExponent) {
    // A subnormal; rounding up to 1 << mantissaBits yields the smallest
    // normal's encoding.
    result = static_cast<uint32_t>(kept);
  } else {
    // `kept` includes the implicit bit, so adding it to (biased exponent - 1)
    // carries into the exponent field when rounding overflows the mantissa.
    result =
        (static_cast<uint32_t>(exponent + bias - 1) << mantissaBits) + static_cast<uint32_t>(kept);
    if (result >= infinity)
      result = infinity;
  }
  return static_cast<uint16_t>(sign | result);
}
} // namespace detail

/// Rounds \p value once to the nearest bf16 (ties to even); returns its bits.
AMPC_HOST_DEVICE inline uint16_t doubleToBF16Bits(double value) {
  return detail::roundDoubleToNarrowBits(value, 7, 8);
}

/// Rounds \p value once to the nearest fp16 (ties to even); returns its bits.
AMPC_HOST_DEVICE inline uint16_t doubleToF16Bits(double value) {
  return detail::roundDoubleToNarrowBits(value, 10, 5);
}

//===----------------------------------------------------------------------===//
// Round-trips: the value a 16-bit store would keep
//===----------------------------------------------------------------------===//

/// \p value rounded to bf16, as a float (exact).
AMPC_HOST_DEVICE inline float roundToBF16(float value) {
  return bf16BitsToFloat(floatToBF16Bits(value));
}

/// \p value rounded to fp16, as a float (exact).
AMPC_HOST_DEVICE inline float roundToF16(float value) {
  return f16BitsToFloat(floatToF16Bits(value));
}

/// \p value rounded once to bf16, as a double (exact).
AMPC_HOST_DEVICE inline double roundToBF16(double value) {
  return static_cast<double>(bf16BitsToFloat(doubleToBF16Bits(value)));
}

/// \p value rounded once to fp16, as a double (exact).
AMPC_HOST_DEVICE inline double roundToF16(double value) {
  return static_cast<double>(f16BitsToFloat(doubleToF16Bits(value)));
}

} // namespace numerics
} // namespace ampc

#endif // AMPC_RUNTIME_NUMERICS_FLOAT16_H
