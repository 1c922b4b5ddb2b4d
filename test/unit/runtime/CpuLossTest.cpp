//===- CpuLossTest.cpp - Cross-entropy and MSE ----------------------------===//

#include "CpuTestUtils.h"

#include <gtest/gtest.h>

#include <cmath>

using namespace ampc;
using namespace ampc::test;

namespace {

Attrs crossEntropy(int64_t ignoreIndex, int64_t reduction) {
  return {{"ignore_index", ignoreIndex}, {"reduction", reduction}};
}

double logSumExp(std::initializer_list<double> row) {
  double total = 0;
  for (double x : row)
    total += std::exp(x);
  return std::log(total);
}

TEST(CpuLoss, CrossEntropyHandValues) {
  // Rows: [0, 0] label 0 -> ln 2; [1, 2, ...] as [1, 2] label 1.
  auto out =
      runF32(OpCode::CrossEntropy, {{DType::F32, {2, 2}, {0, 0, 1, 2}}, {DType::I64, {2}, {0, 1}}},
             {}, crossEntropy(-100, 0));
  const double row1 = logSumExp({1, 2}) - 2;
  expectNear(out, {(std::log(2.0) + row1) / 2}, 1e-15);
  out =
      runF32(OpCode::CrossEntropy, {{DType::F32, {2, 2}, {0, 0, 1, 2}}, {DType::I64, {2}, {0, 1}}},
             {}, crossEntropy(-100, 1));
  expectNear(out, {std::log(2.0) + row1}, 1e-15);
}

TEST(CpuLoss, CrossEntropyIgnoresRows) {
  // [2, 2, 3] logits, labels [2, 2] with two rows ignored (-100): the mean
  // is over the two remaining rows.
  std::vector<double> logits = {1, 2, 3, 0, 0, 0, 5, 1, 0, -1, 2, 0.5};
  auto out = runF32(OpCode::CrossEntropy,
                    {{DType::F32, {2, 2, 3}, logits}, {DType::I32, {2, 2}, {2, -100, -100, 1}}}, {},
                    crossEntropy(-100, 0));
  const double row0 = logSumExp({1, 2, 3}) - 3;
  const double row3 = logSumExp({-1, 2, 0.5}) - 2;
  expectNear(out, {(row0 + row3) / 2}, 1e-14);
  // A non-negative ignore_index works the same way.
  out = runF32(OpCode::CrossEntropy,
               {{DType::F32, {2, 3}, {1, 2, 3, 0, 0, 0}}, {DType::I32, {2}, {2, 0}}}, {},
               crossEntropy(0, 1));
  expectNear(out, {row0}, 1e-14);
}

TEST(CpuLoss, CrossEntropyAllIgnoredIsNaN) {
  auto out = runF32(OpCode::CrossEntropy,
                    {{DType::F32, {2, 2}, {0, 1, 2, 3}}, {DType::I64, {2}, {-1, -1}}}, {},
                    crossEntropy(-1, 0));
  EXPECT_TRUE(std::isnan(out[0]));
  out = runF32(OpCode::CrossEntropy,
               {{DType::F32, {2, 2}, {0, 1, 2, 3}}, {DType::I64, {2}, {-1, -1}}}, {},
               crossEntropy(-1, 1));
  EXPECT_EQ(out[0], 0.0); // sum of nothing
}

TEST(CpuLoss, CrossEntropyIsStableForLargeLogits) {
  auto out = runF32(OpCode::CrossEntropy, {{DType::F32, {1, 2}, {1000, 0}}, {DType::I64, {1}, {1}}},
                    {}, crossEntropy(-100, 0), cpu::Precision::F32);
  expectNear(out, {1000}, 1e-3);
}

TEST(CpuLoss, CrossEntropyLabelOutOfRangeIsAnError) {
  try {
    runF32(OpCode::CrossEntropy,
           {{DType::F32, {3, 2}, {0, 0, 0, 0, 0, 0}}, {DType::I64, {3}, {1, 0, 2}}}, {},
           crossEntropy(-100, 0));
    FAIL() << "expected an error";
  } catch (const cpu::ExecutionError &error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("cross_entropy at test.mlir:1:1"), std::string::npos) << message;
    EXPECT_NE(message.find("label 2 at row 2"), std::string::npos) << message;
  }
}

TEST(CpuLoss, MeanSquaredError) {
  auto out = runF32(OpCode::MseLoss,
                    {{DType::F32, {2, 2}, {1, 2, 3, 4}}, {DType::F32, {2, 2}, {1, 0, 3, 7}}}, {});
  expectNear(out, {(0 + 4 + 0 + 9) / 4.0}, 0);
}

} // namespace
