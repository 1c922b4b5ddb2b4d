//===- CpuMatMulTest.cpp - MatMul: hand values, transposes, batches -------===//

#include "CpuTestUtils.h"
#include "runtime/cpu/Kernels.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <random>
#include <tuple>

using namespace ampc;
using namespace ampc::test;
using cpu::Precision;
using cpu::kernels::gemmWith;
using cpu::kernels::MatrixView;
using cpu::kernels::SimdIsa;
using cpu::kernels::simdIsaName;
using cpu::kernels::simdIsaSupported;

namespace {

Attrs flags(int64_t transposeA, int64_t transposeB) {
  return {{"transpose_a", transposeA}, {"transpose_b", transposeB}};
}

std::vector<double> randomValues(size_t count, unsigned seed) {
  std::mt19937 random(seed);
  std::uniform_int_distribution<int> small(-8, 8);
  std::vector<double> values(count);
  for (double &value : values)
    value = small(random) / 4.0; // exact in every float type
  return values;
}

/// Naive matmul of one [m, k] x [k, n] pair with element accessors.
template <typename A, typename B>
std::vector<double> naive(int64_t m, int64_t n, int64_t k, A a, B b) {
  std::vector<double> out(m * n, 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j)
      for (int64_t p = 0; p < k; ++p)
        out[i * n + j] += a(i, p) * b(p, j);
  return out;
}

TEST(CpuMatMul, HandValues) {
  // [[1, 2, 3], [4, 5, 6]] x [[7, 8], [9, 10], [11, 12]]
  auto out = runF32(
      OpCode::MatMul,
      {{DType::F32, {2, 3}, {1, 2, 3, 4, 5, 6}}, {DType::F32, {3, 2}, {7, 8, 9, 10, 11, 12}}},
      {2, 2}, flags(0, 0));
  expectNear(out, {58, 64, 139, 154}, 0);
}

TEST(CpuMatMul, TransposeFlags) {
  const int64_t m = 3, n = 4, k = 5;
  auto a = randomValues(m * k, 1), b = randomValues(k * n, 2);
  // Stored layouts: a as [m, k] or [k, m]; b as [k, n] or [n, k].
  for (int64_t ta : {0, 1}) {
    for (int64_t tb : {0, 1}) {
      auto aAt = [&](int64_t i, int64_t p) { return ta ? a[p * m + i] : a[i * k + p]; };
      auto bAt = [&](int64_t p, int64_t j) { return tb ? b[j * k + p] : b[p * n + j]; };
      Shape aShape = ta ? Shape{k, m} : Shape{m, k};
      Shape bShape = tb ? Shape{n, k} : Shape{k, n};
      auto out = runF32(OpCode::MatMul, {{DType::F32, aShape, a}, {DType::F32, bShape, b}}, {m, n},
                        flags(ta, tb));
      expectNear(out, naive(m, n, k, aAt, bAt), 0);
    }
  }
}

TEST(CpuMatMul, BatchDimsBroadcast) {
  // a [2, 1, 3, 4] x b [5, 4, 2] -> [2, 5, 3, 2].
  auto a = randomValues(2 * 3 * 4, 3), b = randomValues(5 * 4 * 2, 4);
  std::vector<double> expected;
  for (int64_t x = 0; x < 2; ++x)
    for (int64_t y = 0; y < 5; ++y) {
      auto entry = naive(
          3, 2, 4, [&](int64_t i, int64_t p) { return a[x * 12 + i * 4 + p]; },
          [&](int64_t p, int64_t j) { return b[y * 8 + p * 2 + j]; });
      expected.insert(expected.end(), entry.begin(), entry.end());
    }
  auto out = runF32(OpCode::MatMul, {{DType::F32, {2, 1, 3, 4}, a}, {DType::F32, {5, 4, 2}, b}},
                    {2, 5, 3, 2}, flags(0, 0));
  expectNear(out, expected, 0);
}

TEST(CpuMatMul, BatchedWithTransposedOperands) {
  // Attention-style q k^T: a [3, 2, 4], b [3, 5, 4] with transpose_b.
  auto a = randomValues(3 * 2 * 4, 5), b = randomValues(3 * 5 * 4, 6);
  std::vector<double> expected;
  for (int64_t h = 0; h < 3; ++h) {
    auto entry = naive(
        2, 5, 4, [&](int64_t i, int64_t p) { return a[h * 8 + i * 4 + p]; },
        [&](int64_t p, int64_t j) { return b[h * 20 + j * 4 + p]; });
    expected.insert(expected.end(), entry.begin(), entry.end());
  }
  auto out = runF32(OpCode::MatMul, {{DType::F32, {3, 2, 4}, a}, {DType::F32, {3, 5, 4}, b}},
                    {3, 2, 5}, flags(0, 1));
  expectNear(out, expected, 0);
  // And transpose_a on a batch: a stored [3, 4, 2].
  std::vector<double> aT(a.size());
  for (int64_t h = 0; h < 3; ++h)
    for (int64_t i = 0; i < 2; ++i)
      for (int64_t p = 0; p < 4; ++p)
        aT[h * 8 + p * 2 + i] = a[h * 8 + i * 4 + p];
  out = runF32(OpCode::MatMul, {{DType::F32, {3, 4, 2}, aT}, {DType::F32, {3, 5, 4}, b}}, {3, 2, 5},
               flags(1, 1));
  expectNear(out, expected, 0);
}

TEST(CpuMatMul, ActivationTimesWeight) {
  // A rank-3 activation [2, 3, 4] times a rank-2 weight [4, 5].
  auto a = randomValues(24, 7), b = randomValues(20, 8);
  auto expected = naive(
      6, 5, 4, [&](int64_t i, int64_t p) { return a[i * 4 + p]; },
      [&](int64_t p, int64_t j) { return b[p * 5 + j]; });
  auto out = runF32(OpCode::MatMul, {{DType::F32, {2, 3, 4}, a}, {DType::F32, {4, 5}, b}},
                    {2, 3, 5}, flags(0, 0));
  expectNear(out, expected, 0);
}

TEST(CpuMatMul, BlockedF32IsBitIdenticalToNaiveLoop) {
  // Sizes that cross every block and tile edge (k > the 256-deep panels).
  const int64_t m = 103, n = 37, k = 300;
  std::mt19937 random(11);
  std::normal_distribution<float> normal;
  std::vector<double> a(m * k), b(k * n);
  for (double &v : a)
    v = normal(random);
  for (double &v : b)
    v = normal(random);
  auto out = runOp(OpCode::MatMul, {{DType::F32, {m, k}, a}, {DType::F32, {k, n}, b}}, DType::F32,
                   {m, n}, flags(0, 0), Precision::F32);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      float sum = 0;
      for (int64_t p = 0; p < k; ++p) {
        volatile float product =
            static_cast<float>(a[i * k + p]) * static_cast<float>(b[p * n + j]);
        sum += product;
      }
      ASSERT_EQ(out[i * n + j], sum) << i << ", " << j;
    }
}

TEST(CpuMatMul, EverySimdTileGivesTheNaiveLoopsBits) {
  // Each instruction set's tile (the ones this CPU runs) at sizes that cross
  // every tile and block edge of each, from zero and from strided operands:
  // A transposed, as the weight gradient reads it.
  std::mt19937 random(12);
  std::normal_distribution<float> normal;
  for (auto [m, n, k] : {std::tuple<int64_t, int64_t, int64_t>{1, 1, 1},
                         {13, 35, 7},
                         {101, 67, 300},
                         {200, 2100, 20}}) {
    std::vector<float> a(m * k), b(k * n);
    for (float &v : a)
      v = normal(random);
    for (float &v : b)
      v = normal(random);
    std::vector<float> expected(m * n);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        float sum = 0;
        for (int64_t p = 0; p < k; ++p) {
          volatile float product = a[p * m + i] * b[p * n + j];
          sum += product;
        }
        expected[i * n + j] = sum;
      }
    int tested = 0;
    for (SimdIsa isa : {SimdIsa::Sse2, SimdIsa::Avx2, SimdIsa::Avx512}) {
      if (!simdIsaSupported(isa)) {
        std::printf("note: this CPU does not run %s; its tile is not tested here\n",
                    simdIsaName(isa));
        continue;
      }
      ++tested;
      std::vector<float> c(m * n, -1.0f);
      // a holds A^T [k x m]: element (i, p) of A is a[p * m + i].
      gemmWith(isa, m, n, k, MatrixView<float>{a.data(), 1, m}, {b.data(), n, 1}, c.data());
      for (int64_t e = 0; e < m * n; ++e)
        ASSERT_EQ(c[e], expected[e])
            << simdIsaName(isa) << " " << m << "x" << n << "x" << k << " element " << e;
    }
    EXPECT_GE(tested, 1); // the baseline tile always runs
  }
}

TEST(CpuMatMul, Bf16OperandsAccumulateInComputeType) {
  // bf16 inputs, f32 result: 1 + 2^-8 is not representable in bf16, but the
  // sum of products is accumulated and stored without bf16 rounding.
  auto out =
      runOp(OpCode::MatMul, {{DType::BF16, {1, 2}, {1, 1.0 / 256}}, {DType::BF16, {2, 1}, {1, 1}}},
            DType::F32, {1, 1}, flags(0, 0), Precision::F32);
  EXPECT_EQ(out[0], 1 + 1.0 / 256);
  out =
      runOp(OpCode::MatMul, {{DType::BF16, {1, 2}, {1, 1.0 / 256}}, {DType::BF16, {2, 1}, {1, 1}}},
            DType::BF16, {1, 1}, flags(0, 0), Precision::F32);
  EXPECT_EQ(out[0], 1.0); // the tie rounds to even
}

} // namespace
