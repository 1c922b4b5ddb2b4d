//===- CpuAttentionTest.cpp - Attention against hand values and a naive ---===//

#include "CpuTestUtils.h"
#include "runtime/cpu/Kernels.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
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

/// attentionGrad's documented order of operations (docs/plan-format.md, "Numerics of the CPU
/// reference backend"), one key at a time: dot products over the dims summed in f32 from zero
/// in index order, the sums over queries or keys in double in increasing index order. Products
/// go through volatile, so the compiler can neither fuse nor reorder them.
void naiveAttentionGrad(const float *q, const float *k, const float *v, const float *dy,
                        int64_t batch, int64_t queries, int64_t keys, int64_t headDim,
                        int64_t valueDim, float scale, bool causal, float *dq, float *dk,
                        float *dv) {
  for (int64_t b = 0; b < batch; ++b) {
    std::vector<double> dkTotal(keys * headDim, 0.0), dvTotal(keys * valueDim, 0.0);
    const float *kb = k + b * keys * headDim, *vb = v + b * keys * valueDim;
    for (int64_t i = 0; i < queries; ++i) {
      const int64_t valid = causal ? std::clamp<int64_t>(i + (keys - queries) + 1, 0, keys) : keys;
      const float *qi = q + (b * queries + i) * headDim, *dyi = dy + (b * queries + i) * valueDim;
      std::vector<float> p(keys, 0.0f), dS(keys, 0.0f);
      for (int64_t j = 0; j < valid; ++j) {
        float dot = 0;
        for (int64_t d = 0; d < headDim; ++d) {
          volatile float product = qi[d] * kb[j * headDim + d];
          dot += product;
        }
        p[j] = dot * scale;
      }
      cpu::kernels::softmaxRow(p.data(), keys, valid, p.data());
      double rowTotal = 0;
      for (int64_t j = 0; j < valid; ++j) {
        float dot = 0;
        for (int64_t e = 0; e < valueDim; ++e) {
          volatile float product = dyi[e] * vb[j * valueDim + e];
          dot += product;
        }
        dS[j] = dot;
        volatile float weighted = dot * p[j];
        rowTotal += static_cast<double>(weighted);
      }
      const float rowSum = static_cast<float>(rowTotal);
      for (int64_t j = 0; j < valid; ++j) {
        volatile float difference = dS[j] - rowSum;
        dS[j] = p[j] * difference;
      }
      for (int64_t d = 0; d < headDim; ++d) {
        double total = 0;
        for (int64_t j = 0; j < valid; ++j) {
          volatile float product = dS[j] * kb[j * headDim + d];
          total += static_cast<double>(product);
        }
        dq[(b * queries + i) * headDim + d] = static_cast<float>(total) * scale;
      }
      for (int64_t j = 0; j < valid; ++j) {
        for (int64_t d = 0; d < headDim; ++d) {
          volatile float product = dS[j] * qi[d];
          dkTotal[j * headDim + d] += static_cast<double>(product);
        }
        for (int64_t e = 0; e < valueDim; ++e) {
          volatile float product = p[j] * dyi[e];
          dvTotal[j * valueDim + e] += static_cast<double>(product);
        }
      }
    }
    for (int64_t x = 0; x < keys * headDim; ++x)
      dk[b * keys * headDim + x] = static_cast<float>(dkTotal[x]) * scale;
    for (int64_t x = 0; x < keys * valueDim; ++x)
      dv[b * keys * valueDim + x] = static_cast<float>(dvTotal[x]);
  }
}

/// Restores the kernels' instruction set when a test ends, failed assertions included.
struct SimdIsaGuard {
  cpu::kernels::SimdIsa original = cpu::kernels::simdIsa();
  ~SimdIsaGuard() { cpu::kernels::setSimdIsa(original); }
};

TEST(CpuAttention, GradientGivesTheNaiveOrdersBitsOnEveryInstructionSet) {
  // attentionGrad's f32 code runs the dot products of a query with every key at once, over
  // transposed k and v, compiled for the baseline and (where the CPU has it) AVX-512: each sum
  // must keep its order, so the bits are those of the one-key-at-a-time loops.
  using cpu::kernels::SimdIsa;
  SimdIsaGuard guard;
  std::mt19937 random(21);
  std::normal_distribution<float> normal;
  auto fill = [&](int64_t count) {
    std::vector<float> values(count);
    for (float &v : values)
      v = normal(random);
    return values;
  };
  struct Case {
    int64_t batch, queries, keys, headDim, valueDim;
    bool causal;
  };
  // Equal lengths, more keys than queries (causal: the rows see the keys before them plus the
  // extra ones), and key counts around a vector's width.
  for (const Case &c : {Case{3, 37, 37, 24, 20, false}, Case{3, 37, 37, 24, 20, true},
                        Case{2, 9, 40, 16, 16, true}, Case{2, 17, 33, 64, 32, false}}) {
    const auto q = fill(c.batch * c.queries * c.headDim), k = fill(c.batch * c.keys * c.headDim),
               v = fill(c.batch * c.keys * c.valueDim), dy = fill(c.batch * c.queries * c.valueDim);
    const int64_t dqSize = c.batch * c.queries * c.headDim, dkSize = c.batch * c.keys * c.headDim;
    std::vector<float> expected(dqSize + dkSize + c.batch * c.keys * c.valueDim);
    naiveAttentionGrad(q.data(), k.data(), v.data(), dy.data(), c.batch, c.queries, c.keys,
                       c.headDim, c.valueDim, 0.2f, c.causal, expected.data(),
                       expected.data() + dqSize, expected.data() + dqSize + dkSize);
    for (SimdIsa isa : {SimdIsa::Sse2, SimdIsa::Avx2, SimdIsa::Avx512}) {
      if (!cpu::kernels::simdIsaSupported(isa)) {
        std::printf("note: this CPU does not run %s; its code is not tested here\n",
                    cpu::kernels::simdIsaName(isa));
        continue;
      }
      cpu::kernels::setSimdIsa(isa);
      std::vector<float> grads(expected.size(), -1.0f);
      cpu::kernels::attentionGrad(q.data(), k.data(), v.data(), dy.data(), c.batch, c.queries,
                                  c.keys, c.headDim, c.valueDim, 0.2, c.causal, grads.data(),
                                  grads.data() + dqSize, grads.data() + dqSize + dkSize);
      for (size_t i = 0; i < grads.size(); ++i)
        ASSERT_EQ(grads[i], expected[i])
            << cpu::kernels::simdIsaName(isa) << " T=" << c.queries << " S=" << c.keys
            << (c.causal ? " causal" : "") << " element " << i;
    }
  }
}

} // namespace
