//===- CpuReductionTest.cpp - Sum, Mean, Max over axes --------------------===//

#include "CpuTestUtils.h"

#include <gtest/gtest.h>

#include <cmath>

using namespace ampc;
using namespace ampc::test;
using V = std::vector<int64_t>;

namespace {

// x [2, 3] = [[1, 2, 3], [4, 5, 6]]
const TensorSpec kMatrix{DType::F32, {2, 3}, {1, 2, 3, 4, 5, 6}};

Attrs axes(V list, int64_t keepDims = 0) { return {{"axes", list}, {"keepdims", keepDims}}; }

TEST(CpuReduction, SumOverEachAxis) {
  expectNear(runF32(OpCode::Sum, {kMatrix}, {3}, axes({0})), {5, 7, 9}, 0);
  expectNear(runF32(OpCode::Sum, {kMatrix}, {2}, axes({1})), {6, 15}, 0);
  expectNear(runF32(OpCode::Sum, {kMatrix}, {}, axes({0, 1})), {21}, 0);
  expectNear(runF32(OpCode::Sum, {kMatrix}, {2, 1}, axes({1}, 1)), {6, 15}, 0);
  // A reduction names at least one axis (validatePlan rejects an empty list).
  EXPECT_THROW(runF32(OpCode::Sum, {kMatrix}, {2, 3}, axes({})), plan::PlanError);
}

TEST(CpuReduction, MeanAndMax) {
  expectNear(runF32(OpCode::Mean, {kMatrix}, {3}, axes({0})), {2.5, 3.5, 4.5}, 0);
  expectNear(runF32(OpCode::Mean, {kMatrix}, {1, 1}, axes({0, 1}, 1)), {3.5}, 0);
  expectNear(runF32(OpCode::Max, {kMatrix}, {2}, axes({1})), {3, 6}, 0);
  expectNear(runF32(OpCode::Max, {{DType::F32, {3}, {-5, -2, -9}}}, {}, axes({0})), {-2}, 0);
}

TEST(CpuReduction, MiddleAxisOfRank3) {
  // x [2, 3, 2]; reduce axis 1: out[i][k] = sum_j x[i][j][k].
  std::vector<double> x = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  TensorSpec spec{DType::F32, {2, 3, 2}, x};
  expectNear(runF32(OpCode::Sum, {spec}, {2, 2}, axes({1})), {9, 12, 27, 30}, 0);
  expectNear(runF32(OpCode::Max, {spec}, {2, 1, 2}, axes({1}, 1)), {5, 6, 11, 12}, 0);
  // Axes 0 and 2: out[j] = sum_{i,k} x[i][j][k].
  expectNear(runF32(OpCode::Mean, {spec}, {3}, axes({0, 2})),
             {(1 + 2 + 7 + 8) / 4.0, (3 + 4 + 9 + 10) / 4.0, (5 + 6 + 11 + 12) / 4.0}, 0);
}

TEST(CpuReduction, MaxPropagatesNaN) {
  auto out = runF32(OpCode::Max, {{DType::F32, {2, 2}, {1, std::nan(""), 3, 4}}}, {2}, axes({1}));
  EXPECT_TRUE(std::isnan(out[0]));
  EXPECT_EQ(out[1], 4);
}

TEST(CpuReduction, LongSumsAccumulateAccurately) {
  // 2^20 copies of 0.1f: a float running sum drifts by percent, the double
  // accumulator stays at the rounding level of the result.
  const int64_t count = 1 << 20;
  auto out = runF32(OpCode::Sum, {{DType::F32, {count}, std::vector<double>(count, 0.1)}}, {},
                    axes({0}), cpu::Precision::F32);
  const double exact = count * static_cast<double>(0.1f);
  EXPECT_NEAR(out[0], exact, exact * 1e-7);
}

} // namespace
