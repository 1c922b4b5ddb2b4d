//===- PhiloxTest.cpp - Philox4x32-10 known answers and derived samples ---===//

#include "runtime/numerics/Philox.h"

#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <string>

using namespace ampc::numerics;

namespace {

void expectBlock(PhiloxBlock actual, uint32_t w0, uint32_t w1, uint32_t w2, uint32_t w3) {
  EXPECT_EQ(actual.word[0], w0);
  EXPECT_EQ(actual.word[1], w1);
  EXPECT_EQ(actual.word[2], w2);
  EXPECT_EQ(actual.word[3], w3);
}

// Random123's kat_vectors, "philox4x32 10" lines: counter, key -> output.
TEST(Philox, KnownAnswerZeros) {
  expectBlock(philox4x32x10({{0, 0, 0, 0}}, {{0, 0}}), 0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu,
              0x9b00dbd8u);
}

TEST(Philox, KnownAnswerAllOnes) {
  const uint32_t ones = 0xffffffffu;
  expectBlock(philox4x32x10({{ones, ones, ones, ones}}, {{ones, ones}}), 0x408f276du, 0x41c83b0eu,
              0xa20bc7c6u, 0x6d5451fdu);
}

TEST(Philox, KnownAnswerPiDigits) {
  expectBlock(philox4x32x10({{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}},
                            {{0xa4093822u, 0x299f31d0u}}),
              0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u);
}

TEST(Philox, ElementKeying) {
  // key = (seed lo, seed hi); counter = (element lo, element hi, stream, step)
  const uint64_t seed = 0x0123456789abcdefull, element = 0x0000000500000007ull;
  PhiloxBlock direct =
      philox4x32x10({{0x00000007u, 0x00000005u, 42u, 9u}}, {{0x89abcdefu, 0x01234567u}});
  PhiloxBlock keyed = philoxForElement(seed, 9, 42, element);
  for (int i = 0; i < 4; ++i)
    EXPECT_EQ(keyed.word[i], direct.word[i]);
}

TEST(Philox, UniformMapping) {
  double sum = 0;
  float lowest = 1, highest = 0;
  const int count = 100000;
  for (int e = 0; e < count; ++e) {
    const float u = uniform01(7, 0, 3, e);
    const PhiloxBlock out = philoxForElement(7, 0, 3, e);
    ASSERT_EQ(u, static_cast<float>(out.word[0] >> 8) / 16777216.0f);
    lowest = std::min(lowest, u);
    highest = std::max(highest, u);
    sum += u;
  }
  EXPECT_GE(lowest, 0.0f);
  EXPECT_LT(highest, 1.0f);
  EXPECT_LT(lowest, 1e-3f);
  EXPECT_GT(highest, 1 - 1e-3f);
  EXPECT_NEAR(sum / count, 0.5, 0.005); // sd of the mean is ~0.0009
}

TEST(Philox, NormalMapping) {
  const int count = 100000;
  double sum = 0, sumSquares = 0;
  for (int e = 0; e < count; ++e) {
    const double z = standardNormal(11, 2, 5, e);
    ASSERT_TRUE(std::isfinite(z));
    sum += z;
    sumSquares += z * z;
  }
  const double mean = sum / count;
  EXPECT_NEAR(mean, 0.0, 0.015);
  EXPECT_NEAR(std::sqrt(sumSquares / count - mean * mean), 1.0, 0.015);
  // The documented formula for one element.
  const PhiloxBlock out = philoxForElement(11, 2, 5, 17);
  const double u1 = (out.word[0] + 1.0) / 4294967296.0;
  const double u2 = out.word[1] / 4294967296.0;
  EXPECT_DOUBLE_EQ(standardNormal(11, 2, 5, 17),
                   std::sqrt(-2 * std::log(u1)) * std::cos(2 * M_PI * u2));
}

TEST(Philox, SameKeySameValueDifferentKeyDifferentValue) {
  EXPECT_EQ(uniform01(1, 2, 3, 4), uniform01(1, 2, 3, 4));
  EXPECT_EQ(standardNormal(1, 2, 3, 4), standardNormal(1, 2, 3, 4));
  std::set<double> values;
  values.insert(standardNormal(1, 2, 3, 4));
  values.insert(standardNormal(9, 2, 3, 4));                // seed
  values.insert(standardNormal(1, 9, 3, 4));                // step
  values.insert(standardNormal(1, 2, 9, 4));                // stream
  values.insert(standardNormal(1, 2, 3, 9));                // element
  values.insert(standardNormal(1ull << 32, 2, 3, 4));       // seed high word
  values.insert(standardNormal(1, 2, 3, 4 + (1ull << 32))); // element high
  EXPECT_EQ(values.size(), 7u);
}

TEST(Philox, Fnv1aKnownValues) {
  EXPECT_EQ(fnv1a32("", 0), 0x811c9dc5u);
  EXPECT_EQ(fnv1a32("a", 1), 0xe40c292cu);
  EXPECT_EQ(fnv1a32("foobar", 6), 0xbf9cf968u);
  const std::string name = "blocks.0.attn.w_qkv";
  EXPECT_NE(fnv1a32(name.data(), name.size()), fnv1a32("blocks.1.attn.w_qkv", name.size()));
}

} // namespace
