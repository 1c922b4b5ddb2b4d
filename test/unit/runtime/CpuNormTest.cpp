//===- CpuNormTest.cpp - LayerNorm, RmsNorm, softmax (causal too) ---------===//

#include "CpuTestUtils.h"

#include <gtest/gtest.h>

#include <cmath>

using namespace ampc;
using namespace ampc::test;

namespace {

TEST(CpuNorm, LayerNormHandValues) {
  // Row [1, 2, 3, 4]: mean 2.5, biased variance 1.25.
  // Row [2, 2, 2, 2]: variance 0, so y = beta exactly.
  const double eps = 1e-5;
  const std::vector<double> gamma = {1, 2, 0.5, -1}, beta = {0, 1, -1, 0.25};
  auto out = runF32(OpCode::LayerNorm,
                    {{DType::F32, {2, 4}, {1, 2, 3, 4, 2, 2, 2, 2}},
                     {DType::F32, {4}, gamma},
                     {DType::F32, {4}, beta}},
                    {2, 4}, {{"epsilon", eps}});
  std::vector<double> expected;
  const double inverseStd = 1 / std::sqrt(1.25 + eps);
  for (int j = 0; j < 4; ++j)
    expected.push_back((j + 1 - 2.5) * inverseStd * gamma[j] + beta[j]);
  expected.insert(expected.end(), beta.begin(), beta.end());
  expectNear(out, expected, 1e-14);
}

TEST(CpuNorm, RmsNormHandValues) {
  // Row [3, 4]: mean square 12.5.
  const double eps = 1e-6;
  auto out = runF32(OpCode::RmsNorm, {{DType::F32, {1, 2}, {3, 4}}, {DType::F32, {2}, {1, 0.5}}},
                    {1, 2}, {{"epsilon", eps}});
  const double inverseRms = 1 / std::sqrt(12.5 + eps);
  expectNear(out, {3 * inverseRms, 4 * inverseRms * 0.5}, 1e-14);
}

TEST(CpuNorm, SoftmaxRows) {
  auto out = runF32(OpCode::Softmax, {{DType::F32, {2, 3}, {0, 0, 0, 1, 2, 3}}}, {2, 3},
                    {{"causal", int64_t(0)}});
  const double total = std::exp(1.0) + std::exp(2.0) + std::exp(3.0);
  expectNear(out,
             {1.0 / 3, 1.0 / 3, 1.0 / 3, std::exp(1.0) / total, std::exp(2.0) / total,
              std::exp(3.0) / total},
             1e-15);
}

TEST(CpuNorm, SoftmaxIsStableForLargeLogits) {
  auto out =
      runF32(OpCode::Softmax, {{DType::F32, {2}, {1000, 1000}}}, {2}, {{"causal", int64_t(0)}});
  expectNear(out, {0.5, 0.5}, 0);
}

TEST(CpuNorm, CausalSoftmaxWithMoreKeysThanQueries) {
  // T = 2 queries, S = 4 keys: row i sees keys j <= i + (S - T) = i + 2.
  std::vector<double> x = {0.5, 1, 1.5, 2, -1, 0, 1, 2};
  auto out =
      runF32(OpCode::Softmax, {{DType::F32, {1, 2, 4}, x}}, {1, 2, 4}, {{"causal", int64_t(1)}});
  std::vector<double> expected(8, 0.0);
  for (int i = 0; i < 2; ++i) {
    double total = 0;
    for (int j = 0; j <= i + 2; ++j)
      total += std::exp(x[i * 4 + j]);
    for (int j = 0; j <= i + 2; ++j)
      expected[i * 4 + j] = std::exp(x[i * 4 + j]) / total;
  }
  expectNear(out, expected, 1e-15);
  EXPECT_EQ(out[3], 0.0); // row 0 cannot see key 3
}

TEST(CpuNorm, CausalSquareSoftmaxIsLowerTriangular) {
  // Two batch entries of 3 x 3: row i keeps j <= i.
  std::vector<double> x(18, 0.0);
  auto out =
      runF32(OpCode::Softmax, {{DType::F32, {2, 3, 3}, x}}, {2, 3, 3}, {{"causal", int64_t(1)}});
  std::vector<double> row = {1, 0, 0, 0.5, 0.5, 0, 1.0 / 3, 1.0 / 3, 1.0 / 3};
  std::vector<double> expected = row;
  expected.insert(expected.end(), row.begin(), row.end());
  expectNear(out, expected, 1e-16);
}

} // namespace
