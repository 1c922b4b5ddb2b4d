//===- Float16Test.cpp - bf16/fp16 conversion edge cases and oracles ------===//
//
// Hand-picked edge cases (largest finite, the overflow threshold, subnormals,
// underflow, ties to even, NaN, -0), exhaustive round trips of every 16-bit
// pattern, and comparisons against an independent oracle that rounds by
// comparing distances to the two neighbouring representable values.
//
//===----------------------------------------------------------------------===//

#include "runtime/numerics/Float16.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define AMPC_TEST_HAVE_F16C 1
#endif

using namespace ampc::numerics;

namespace {

/// Format parameters for the oracle.
struct Format {
  int mantissaBits; // stored mantissa bits
  int minExponent;  // exponent of the smallest normal
  int maxExponent;  // exponent of the largest finite
  uint16_t (*fromDouble)(double);
  float (*toFloat)(uint16_t);
};

const Format kBF16{7, -126, 127, doubleToBF16Bits, bf16BitsToFloat};
const Format kF16{10, -14, 15, doubleToF16Bits, f16BitsToFloat};

/// The correctly rounded (nearest, ties to even) value of finite \p x in
/// \p format, by exact arithmetic on doubles: the two neighbours are found by
/// truncating x to a multiple of its ulp, and the nearer one wins.
double oracleRound(double x, const Format &format) {
  if (x == 0)
    return x;
  const double magnitude = std::fabs(x);
  int exponent = std::ilogb(magnitude);
  if (exponent < format.minExponent)
    exponent = format.minExponent; // subnormals share the smallest ulp
  const double ulp = std::ldexp(1.0, exponent - format.mantissaBits);
  const double units = std::trunc(magnitude / ulp); // exact: ulp is 2^k
  const double low = units * ulp, high = (units + 1) * ulp;
  const double below = magnitude - low, above = high - magnitude; // exact
  double rounded;
  if (below < above)
    rounded = low;
  else if (above < below)
    rounded = high;
  else
    rounded = std::fmod(units, 2.0) == 0 ? low : high;
  // Rounding is done as if the exponent were unbounded; a result at or above
  // 2^(maxExponent+1) overflows.
  if (rounded >= std::ldexp(1.0, format.maxExponent + 1))
    rounded = std::numeric_limits<double>::infinity();
  return std::copysign(rounded, x);
}

float bits(uint32_t pattern) { return bitsToFloat(pattern); }

TEST(Float16, BF16LargestFiniteAndOverflowThreshold) {
  // Largest finite bf16: 0x7f7f = (2 - 2^-7) * 2^127.
  EXPECT_EQ(floatToBF16Bits(bits(0x7f7f0000u)), 0x7f7fu);
  // Just below the midpoint to 2^128 stays finite; the midpoint is a tie with
  // an odd mantissa, so it rounds up to infinity; FLT_MAX overflows too.
  EXPECT_EQ(floatToBF16Bits(bits(0x7f7f7fffu)), 0x7f7fu);
  EXPECT_EQ(floatToBF16Bits(bits(0x7f7f8000u)), 0x7f80u);
  EXPECT_EQ(floatToBF16Bits(std::numeric_limits<float>::max()), 0x7f80u);
  EXPECT_EQ(floatToBF16Bits(-std::numeric_limits<float>::max()), 0xff80u);
  EXPECT_EQ(floatToBF16Bits(std::numeric_limits<float>::infinity()), 0x7f80u);
  EXPECT_EQ(floatToBF16Bits(-std::numeric_limits<float>::infinity()), 0xff80u);
}

TEST(Float16, BF16Subnormals) {
  // Smallest bf16 subnormal is 2^-133 (bits 0x0001).
  EXPECT_EQ(floatToBF16Bits(std::ldexp(1.0f, -133)), 0x0001u);
  EXPECT_EQ(bf16BitsToFloat(0x0001u), std::ldexp(1.0f, -133));
  // 2^-134 is halfway between 0 and 2^-133: ties to even, i.e. to zero.
  EXPECT_EQ(floatToBF16Bits(std::ldexp(1.0f, -134)), 0x0000u);
  EXPECT_EQ(floatToBF16Bits(std::ldexp(-1.0f, -134)), 0x8000u);
  // Just above the midpoint rounds up.
  EXPECT_EQ(floatToBF16Bits(std::ldexp(1.5f, -134)), 0x0001u);
  // 3 * 2^-134 is a tie between units 1 and 2: even is 2.
  EXPECT_EQ(floatToBF16Bits(std::ldexp(3.0f, -134)), 0x0002u);
  // The smallest float subnormal underflows to zero.
  EXPECT_EQ(floatToBF16Bits(std::numeric_limits<float>::denorm_min()), 0u);
  // The largest bf16 subnormal rounds up into the smallest normal.
  EXPECT_EQ(floatToBF16Bits(bits(0x007fffffu)), 0x0080u);
}

TEST(Float16, BF16TiesToEven) {
  // 1 + 2^-8 lies halfway between 1 (even) and 1 + 2^-7 (odd).
  EXPECT_EQ(floatToBF16Bits(1.0f + std::ldexp(1.0f, -8)), 0x3f80u);
  // 1 + 3 * 2^-8 lies halfway between 1 + 2^-7 (odd) and 1 + 2^-6 (even).
  EXPECT_EQ(floatToBF16Bits(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82u);
  EXPECT_EQ(floatToBF16Bits(-1.0f - std::ldexp(1.0f, -8)), 0xbf80u);
  EXPECT_EQ(floatToBF16Bits(-1.0f - 3 * std::ldexp(1.0f, -8)), 0xbf82u);
  // Off-tie values go to the nearer neighbour.
  EXPECT_EQ(floatToBF16Bits(bits(0x3f808001u)), 0x3f81u);
  EXPECT_EQ(floatToBF16Bits(bits(0x3f807fffu)), 0x3f80u);
}

TEST(Float16, BF16NaNAndSignedZero) {
  // A signalling NaN whose payload lives only in the low bits would truncate
  // to infinity; it must stay a (quiet) NaN, keeping its sign.
  uint16_t signalling = floatToBF16Bits(bits(0x7f800001u));
  EXPECT_TRUE(std::isnan(bf16BitsToFloat(signalling)));
  EXPECT_EQ(signalling & 0x0040u, 0x0040u);
  uint16_t negative = floatToBF16Bits(bits(0xffc00000u));
  EXPECT_TRUE(std::isnan(bf16BitsToFloat(negative)));
  EXPECT_EQ(negative & 0x8000u, 0x8000u);
  EXPECT_TRUE(std::isnan(bf16BitsToFloat(0x7f81u)));
  EXPECT_EQ(floatToBits(bf16BitsToFloat(0x7f81u)) & 0x00400000u, 0x00400000u);
  EXPECT_EQ(floatToBF16Bits(-0.0f), 0x8000u);
  EXPECT_TRUE(std::signbit(bf16BitsToFloat(0x8000u)));
  EXPECT_TRUE(std::signbit(roundToBF16(-0.0f)));
}

TEST(Float16, F16LargestFiniteAndOverflowThreshold) {
  EXPECT_EQ(floatToF16Bits(65504.0f), 0x7bffu);
  EXPECT_EQ(f16BitsToFloat(0x7bffu), 65504.0f);
  // 65520 is the midpoint between 65504 (odd mantissa) and 2^16: it ties to
  // infinity; the float just below it stays finite.
  EXPECT_EQ(floatToF16Bits(std::nextafter(65520.0f, 0.0f)), 0x7bffu);
  EXPECT_EQ(floatToF16Bits(65520.0f), 0x7c00u);
  EXPECT_EQ(floatToF16Bits(-65520.0f), 0xfc00u);
  EXPECT_EQ(floatToF16Bits(1e10f), 0x7c00u);
  EXPECT_EQ(floatToF16Bits(std::numeric_limits<float>::infinity()), 0x7c00u);
  EXPECT_EQ(floatToF16Bits(-std::numeric_limits<float>::infinity()), 0xfc00u);
}

TEST(Float16, F16Subnormals) {
  const float unit = std::ldexp(1.0f, -24); // smallest fp16 subnormal
  EXPECT_EQ(floatToF16Bits(unit), 0x0001u);
  EXPECT_EQ(f16BitsToFloat(0x0001u), unit);
  EXPECT_EQ(f16BitsToFloat(0x03ffu), 1023 * unit);           // largest subnormal
  EXPECT_EQ(floatToF16Bits(std::ldexp(1.0f, -14)), 0x0400u); // smallest normal
  // Half a unit ties to zero (even); a hair above rounds to one unit.
  EXPECT_EQ(floatToF16Bits(unit / 2), 0x0000u);
  EXPECT_EQ(floatToF16Bits(-unit / 2), 0x8000u);
  EXPECT_EQ(floatToF16Bits(std::nextafter(unit / 2, 1.0f)), 0x0001u);
  // 1.5 units and 2.5 units are ties: both go to 2 (even).
  EXPECT_EQ(floatToF16Bits(1.5f * unit), 0x0002u);
  EXPECT_EQ(floatToF16Bits(2.5f * unit), 0x0002u);
  EXPECT_EQ(floatToF16Bits(2.5001f * unit), 0x0003u);
  // 1023.5 units round up into the smallest normal.
  EXPECT_EQ(floatToF16Bits(1023.5f * unit), 0x0400u);
  // Far below half a unit underflows to a signed zero.
  EXPECT_EQ(floatToF16Bits(1e-10f), 0x0000u);
  EXPECT_EQ(floatToF16Bits(-1e-10f), 0x8000u);
}

TEST(Float16, F16TiesToEvenAndSpecials) {
  EXPECT_EQ(floatToF16Bits(1.0f + std::ldexp(1.0f, -11)), 0x3c00u);
  EXPECT_EQ(floatToF16Bits(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02u);
  EXPECT_EQ(floatToF16Bits(-1.0f - 3 * std::ldexp(1.0f, -11)), 0xbc02u);
  EXPECT_EQ(floatToF16Bits(-0.0f), 0x8000u);
  EXPECT_TRUE(std::signbit(f16BitsToFloat(0x8000u)));
  uint16_t nan = floatToF16Bits(bits(0x7f800001u));
  EXPECT_TRUE(std::isnan(f16BitsToFloat(nan)));
  EXPECT_EQ(nan & 0x0200u, 0x0200u); // quiet bit
  EXPECT_TRUE(std::signbit(f16BitsToFloat(floatToF16Bits(-NAN))));
  EXPECT_TRUE(std::isnan(f16BitsToFloat(0x7c01u)));
  EXPECT_EQ(floatToBits(f16BitsToFloat(0x7c01u)) & 0x00400000u, 0x00400000u);
}

TEST(Float16, EveryPatternRoundTrips) {
  for (uint32_t pattern = 0; pattern <= 0xffffu; ++pattern) {
    const uint16_t h = static_cast<uint16_t>(pattern);
    const float asF16 = f16BitsToFloat(h), asBF16 = bf16BitsToFloat(h);
    if (std::isnan(asF16)) {
      EXPECT_TRUE(std::isnan(f16BitsToFloat(floatToF16Bits(asF16))));
    } else {
      ASSERT_EQ(floatToF16Bits(asF16), h) << std::hex << pattern;
      ASSERT_EQ(doubleToF16Bits(asF16), h) << std::hex << pattern;
    }
    if (std::isnan(asBF16)) {
      EXPECT_TRUE(std::isnan(bf16BitsToFloat(floatToBF16Bits(asBF16))));
    } else {
      ASSERT_EQ(floatToBF16Bits(asBF16), h) << std::hex << pattern;
      ASSERT_EQ(doubleToBF16Bits(asBF16), h) << std::hex << pattern;
    }
  }
}

/// Checks both conversions of \p value against the oracle.
void expectMatchesOracle(float value) {
  if (std::isnan(value))
    return;
  ASSERT_EQ(static_cast<double>(roundToBF16(value)), oracleRound(value, kBF16))
      << std::hexfloat << value;
  ASSERT_EQ(static_cast<double>(roundToF16(value)), oracleRound(value, kF16))
      << std::hexfloat << value;
  // float -> double is exact, so the double path must agree bit for bit.
  ASSERT_EQ(doubleToBF16Bits(value), floatToBF16Bits(value));
  ASSERT_EQ(doubleToF16Bits(value), floatToF16Bits(value));
}

TEST(Float16, FloatConversionsMatchOracle) {
  // A stride through all 2^32 patterns plus every pattern near the rounding
  // points of bf16 (low 16 bits near 0x8000) and fp16 (low 13 near 0x1000).
  for (uint64_t pattern = 0; pattern <= 0xffffffffu; pattern += 65521)
    expectMatchesOracle(bits(static_cast<uint32_t>(pattern)));
  for (uint32_t high = 0; high <= 0xffffu; high += 3)
    for (uint32_t low : {0x7fffu, 0x8000u, 0x8001u, 0x0fffu, 0x1000u, 0x1001u, 0x3000u, 0x9000u})
      expectMatchesOracle(bits((high << 16) | low));
}

#ifdef AMPC_TEST_HAVE_F16C
__attribute__((target("f16c"))) uint16_t hardwareF16(float value) {
  return static_cast<uint16_t>(_cvtss_sh(value, _MM_FROUND_TO_NEAREST_INT));
}
__attribute__((target("f16c"))) float hardwareF16ToFloat(uint16_t value) {
  return _cvtsh_ss(value);
}
#endif

TEST(Float16, F16MatchesHardwareConversion) {
#ifdef AMPC_TEST_HAVE_F16C
  if (!__builtin_cpu_supports("f16c"))
    GTEST_SKIP() << "this CPU has no F16C instructions";
  for (uint64_t pattern = 0; pattern <= 0xffffffffu; pattern += 4099) {
    const float value = bits(static_cast<uint32_t>(pattern));
    if (std::isnan(value))
      continue;
    ASSERT_EQ(floatToF16Bits(value), hardwareF16(value)) << std::hexfloat << value;
  }
  for (uint32_t h = 0; h <= 0xffffu; ++h) {
    const float ours = f16BitsToFloat(static_cast<uint16_t>(h));
    const float theirs = hardwareF16ToFloat(static_cast<uint16_t>(h));
    if (std::isnan(theirs))
      ASSERT_TRUE(std::isnan(ours));
    else
      ASSERT_EQ(floatToBits(ours), floatToBits(theirs)) << std::hex << h;
  }
#else
  GTEST_SKIP() << "F16C comparison needs an x86-64 GCC or Clang build";
#endif
}

TEST(Float16, DoubleRoundsOnce) {
  // Through float, 1 + 2^-8 + 2^-30 first becomes the tie 1 + 2^-8 and then
  // rounds to even (1.0); rounded once it is above the tie: 1 + 2^-7.
  const double bf16Case = 1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -30);
  EXPECT_EQ(roundToBF16(static_cast<float>(bf16Case)), 1.0f);
  EXPECT_EQ(roundToBF16(bf16Case), 1.0 + std::ldexp(1.0, -7));
  const double f16Case = 1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40);
  EXPECT_EQ(roundToF16(static_cast<float>(f16Case)), 1.0f);
  EXPECT_EQ(roundToF16(f16Case), 1.0 + std::ldexp(1.0, -10));
  // The same in the subnormal range of fp16: 0.5 units + a bit -> 1 unit.
  const double tiny = std::ldexp(1.0, -25) + std::ldexp(1.0, -60);
  EXPECT_EQ(doubleToF16Bits(tiny), 0x0001u);
  EXPECT_EQ(floatToF16Bits(static_cast<float>(tiny)), 0x0000u);
}

TEST(Float16, DoubleEdges) {
  EXPECT_EQ(doubleToF16Bits(65520.0), 0x7c00u);
  EXPECT_EQ(doubleToF16Bits(std::nextafter(65520.0, 0.0)), 0x7bffu);
  EXPECT_EQ(doubleToF16Bits(1e300), 0x7c00u);
  EXPECT_EQ(doubleToF16Bits(-1e300), 0xfc00u);
  EXPECT_EQ(doubleToBF16Bits(1e300), 0x7f80u);
  const double bf16Threshold = std::ldexp(255.0 / 128.0 + 1.0 / 256, 127);
  EXPECT_EQ(doubleToBF16Bits(bf16Threshold), 0x7f80u);
  EXPECT_EQ(doubleToBF16Bits(std::nextafter(bf16Threshold, 0.0)), 0x7f7fu);
  EXPECT_EQ(doubleToBF16Bits(1e-300), 0x0000u);
  EXPECT_EQ(doubleToBF16Bits(-1e-300), 0x8000u);
  EXPECT_EQ(doubleToF16Bits(-std::numeric_limits<double>::denorm_min()), 0x8000u);
  EXPECT_EQ(doubleToBF16Bits(-0.0), 0x8000u);
  EXPECT_EQ(doubleToF16Bits(std::ldexp(1.0, -25)), 0x0000u); // tie -> even 0
  EXPECT_EQ(doubleToBF16Bits(std::ldexp(1.0, -134)), 0x0000u);
  EXPECT_EQ(doubleToBF16Bits(std::ldexp(1.5, -134)), 0x0001u);
  EXPECT_TRUE(std::isnan(roundToBF16(std::numeric_limits<double>::quiet_NaN())));
  EXPECT_TRUE(std::isnan(roundToF16(-std::numeric_limits<double>::quiet_NaN())));
  EXPECT_TRUE(std::signbit(roundToF16(-std::numeric_limits<double>::quiet_NaN())));
  uint64_t signallingBits = 0x7ff0000000000001ull;
  double signalling;
  std::memcpy(&signalling, &signallingBits, sizeof signalling);
  EXPECT_TRUE(std::isnan(roundToBF16(signalling)));
  EXPECT_TRUE(std::isnan(roundToF16(signalling)));
  EXPECT_EQ(doubleToBF16Bits(std::numeric_limits<double>::infinity()), 0x7f80u);
  EXPECT_EQ(doubleToF16Bits(-std::numeric_limits<double>::infinity()), 0xfc00u);
}

TEST(Float16, DoubleConversionsMatchOracle) {
  std::mt19937_64 random(12345);
  auto check = [](double value) {
    ASSERT_EQ(roundToBF16(value), oracleRound(value, kBF16)) << std::hexfloat << value;
    ASSERT_EQ(roundToF16(value), oracleRound(value, kF16)) << std::hexfloat << value;
  };
  for (int i = 0; i < 400000; ++i) {
    // Exponents spanning both formats' subnormal, normal and overflow ranges.
    const double value = std::ldexp(std::uniform_real_distribution<double>(-2.0, 2.0)(random),
                                    std::uniform_int_distribution<int>(-140, 130)(random));
    check(value);
  }
  // Every exact tie and its two double neighbours, in both formats.
  for (int i = 0; i < 100000; ++i) {
    const uint16_t h = static_cast<uint16_t>(random());
    const double low = f16BitsToFloat(h), high = f16BitsToFloat(h + 1);
    const double lowBF = bf16BitsToFloat(h), highBF = bf16BitsToFloat(h + 1);
    for (double tie : {(low + high) / 2, (lowBF + highBF) / 2}) {
      if (!std::isfinite(tie) || (h & 0x7fffu) >= 0x7bffu)
        continue;
      check(tie);
      check(std::nextafter(tie, 0.0));
      check(std::nextafter(tie, tie * 2));
    }
  }
}

} // namespace
