//===- CpuAttentionTest.cpp - Attention against hand values and a naive ---===//

#include "CpuTestUtils.h"
#include "runtime/cpu/Kernels.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

using namespace ampc;
using namespace ampc::test;

namespace {

/// softmax(scale q k^T, causal) v for one [t, d] x [s, d] x [s, dv] entry,
/// the textbook way: full score matrix, masked entries set to -inf.
std::vector<double> naiveAttention(const double *q, const double *k, const double *v, int64_t t,
                                   int64_t s, int64_t d, int64_t dv, double scale, bool causal) {
  std::vector<double> out(t * dv, 0.0);
  for (int64_t i = 0; i < t; ++i) {
    std::vector<double> scores(s);
    double maximum = -INFINITY;
    for (int64_t j = 0; j < s; ++j) {
      double dot = 0;
      for (int64_t c = 0; c < d; ++c)
        dot += q[i * d + c] * k[j * d + c];
      scores[j] = causal && j > i + (s - t) ? -INFINITY : scale * dot;
      maximum = std::max(maximum, scores[j]);
    }
    double total = 0;
    for (double &score : scores)
      total += (score = std::exp(score - maximum));
    for (int64_t j = 0; j < s; ++j)
      for (int64_t c = 0; c < dv; ++c)
        out[i * dv + c] += scores[j] / total * v[j * dv + c];
  }
  return out;
}

Attrs attention(bool causal, double scale) {
  return {{"causal", int64_t(causal)}, {"scale", scale}};
}

TEST(CpuAttention, HandValues) {
  // One query [1, 0]; keys [1, 0], [0, 1]; values [1, 2], [3, 4]; scale 1:
  // scores [1, 0], p = [e, 1] / (e + 1), out = p0 [1, 2] + p1 [3, 4].
  auto out = runF32(OpCode::Attention,
                    {{DType::F32, {1, 2}, {1, 0}},
                     {DType::F32, {2, 2}, {1, 0, 0, 1}},
                     {DType::F32, {2, 2}, {1, 2, 3, 4}}},
                    {1, 2}, attention(false, 1.0));
  const double p0 = std::exp(1.0) / (std::exp(1.0) + 1), p1 = 1 - p0;
  expectNear(out, {p0 * 1 + p1 * 3, p0 * 2 + p1 * 4}, 1e-15);
  // Causal with T = S = 2: the first query sees only the first key.
  out = runF32(OpCode::Attention,
               {{DType::F32, {2, 2}, {1, 0, 1, 0}},
                {DType::F32, {2, 2}, {1, 0, 0, 1}},
                {DType::F32, {2, 2}, {1, 2, 3, 4}}},
               {2, 2}, attention(true, 1.0));
  expectNear(out, {1, 2, p0 * 1 + p1 * 3, p0 * 2 + p1 * 4}, 1e-15);
}

void checkAgainstNaive(bool causal, int64_t t, int64_t s) {
  // [batch 2, heads 3, t, d] queries; keys and values with s rows.
  const int64_t batch = 2, heads = 3, d = 8, dv = 5;
  std::mt19937 random(t * 100 + s + causal);
  std::normal_distribution<float> normal;
  auto draw = [&](int64_t count) {
    std::vector<double> values(count);
    for (double &value : values)
      value = normal(random);
    return values;
  };
  auto q = draw(batch * heads * t * d), k = draw(batch * heads * s * d),
       v = draw(batch * heads * s * dv);
  const double scale = 1 / std::sqrt(double(d));
  auto out = runF32(OpCode::Attention,
                    {{DType::F32, {batch, heads, t, d}, q},
                     {DType::F32, {batch, heads, s, d}, k},
                     {DType::F32, {batch, heads, s, dv}, v}},
                    {batch, heads, t, dv}, attention(causal, scale));
  std::vector<double> expected;
  for (int64_t e = 0; e < batch * heads; ++e) {
    auto entry =
        naiveAttention(&q[e * t * d], &k[e * s * d], &v[e * s * dv], t, s, d, dv, scale, causal);
    expected.insert(expected.end(), entry.begin(), entry.end());
  }
  expectNear(out, expected, 1e-12);
}

TEST(CpuAttention, MatchesNaiveWithoutMask) { checkAgainstNaive(false, 5, 7); }

TEST(CpuAttention, MatchesNaiveCausal) { checkAgainstNaive(true, 40, 40); }

TEST(CpuAttention, MatchesNaiveCausalWithMoreKeys) { checkAgainstNaive(true, 3, 6); }

TEST(CpuAttention, KernelRowsThatSeeNoKeyAreZero) {
  // A plan refuses causal attention with more queries than keys, but the kernel is also the
  // device kernels' reference (FlashAttentionEmulatedTest): T = 5, S = 3, query i sees keys
  // j <= i - 2, so queries 0 and 1 see none: their output is 0 and their lse -inf (as the CUDA
  // kernels write them), the others are the naive result.
  const int64_t t = 5, s = 3, d = 4, dv = 2;
  std::vector<double> q(t * d), k(s * d), v(s * dv), out(t * dv, 7.0), lse(t, 7.0);
  for (size_t i = 0; i < q.size(); ++i)
    q[i] = std::sin(0.3 * static_cast<double>(i));
  for (size_t i = 0; i < k.size(); ++i)
    k[i] = std::cos(0.5 * static_cast<double>(i));
  for (size_t i = 0; i < v.size(); ++i)
    v[i] = 0.25 * static_cast<double>(i) - 1;
  cpu::kernels::attention<double>(q.data(), k.data(), v.data(), 1, t, s, d, dv, 0.5, true,
                                  out.data(), lse.data());
  std::vector<double> expected =
      naiveAttention(q.data(), k.data(), v.data(), t, s, d, dv, 0.5, true);
  std::fill(expected.begin(), expected.begin() + 2 * dv, 0.0);
  for (size_t i = 0; i < out.size(); ++i)
    EXPECT_NEAR(out[i], expected[i], 1e-12) << i;
  EXPECT_TRUE(std::isinf(lse[0]) && lse[0] < 0) << lse[0];
  EXPECT_TRUE(std::isinf(lse[1]) && lse[1] < 0) << lse[1];
  EXPECT_TRUE(std::isfinite(lse[2])) << lse[2];
}

TEST(CpuAttention, F32IsCloseToF64) {
  std::vector<double> q(2 * 6 * 4), k(2 * 6 * 4), v(2 * 6 * 4);
  for (size_t i = 0; i < q.size(); ++i) {
    q[i] = std::sin(0.7 * i);
    k[i] = std::cos(0.3 * i);
    v[i] = std::sin(0.11 * i + 1);
  }
  std::vector<TensorSpec> operands = {
      {DType::F32, {2, 6, 4}, q}, {DType::F32, {2, 6, 4}, k}, {DType::F32, {2, 6, 4}, v}};
  auto f32 =
      runF32(OpCode::Attention, operands, {2, 6, 4}, attention(true, 0.5), cpu::Precision::F32);
  auto f64 =
      runF32(OpCode::Attention, operands, {2, 6, 4}, attention(true, 0.5), cpu::Precision::F64);
  expectNear(f32, f64, 1e-6);
}

TEST(CpuAttention, GradientGivesTheSameBitsOnEveryInstructionSet) {
  // attentionGrad's f32 code is compiled for SSE2 and, where the CPU has it,
  // AVX-512: every sum keeps its order, so the bits must not change.
  using cpu::kernels::SimdIsa;
  const int64_t batch = 3, queries = 37, keys = 37, headDim = 24, valueDim = 20;
  std::mt19937 random(21);
  std::normal_distribution<float> normal;
  auto fill = [&](int64_t count) {
    std::vector<float> values(count);
    for (float &v : values)
      v = normal(random);
    return values;
  };
  const auto q = fill(batch * queries * headDim), k = fill(batch * keys * headDim),
             v = fill(batch * keys * valueDim), dy = fill(batch * queries * valueDim);
  const SimdIsa original = cpu::kernels::simdIsa();
  for (bool causal : {false, true}) {
    std::vector<float> expected;
    for (SimdIsa isa : {SimdIsa::Sse2, SimdIsa::Avx2, SimdIsa::Avx512}) {
      if (!cpu::kernels::simdIsaSupported(isa))
        continue;
      cpu::kernels::setSimdIsa(isa);
      std::vector<float> grads(batch * (queries + keys) * headDim + batch * keys * valueDim);
      float *dq = grads.data(), *dk = dq + batch * queries * headDim,
            *dv = dk + batch * keys * headDim;
      cpu::kernels::attentionGrad(q.data(), k.data(), v.data(), dy.data(), batch, queries, keys,
                                  headDim, valueDim, 0.2, causal, dq, dk, dv);
      if (expected.empty()) {
        expected = grads;
        continue;
      }
      for (size_t i = 0; i < grads.size(); ++i)
        ASSERT_EQ(grads[i], expected[i]) << cpu::kernels::simdIsaName(isa) << " element " << i;
    }
  }
  cpu::kernels::setSimdIsa(original);
}

} // namespace
