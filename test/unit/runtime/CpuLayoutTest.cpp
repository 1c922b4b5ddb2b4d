//===- CpuLayoutTest.cpp - Transpose, reshape, slice, concat, embedding ---===//

#include "CpuTestUtils.h"

#include <gtest/gtest.h>

#include <numeric>

using namespace ampc;
using namespace ampc::test;
using V = std::vector<int64_t>;

namespace {

std::vector<double> iota(size_t count) {
  std::vector<double> values(count);
  std::iota(values.begin(), values.end(), 0.0);
  return values;
}

TEST(CpuLayout, Transpose) {
  // x[i][j][k] = 12 i + 4 j + k, shape [2, 3, 4]; permutation [2, 0, 1]
  // gives out[k][i][j] = x[i][j][k], shape [4, 2, 3].
  auto out = runF32(OpCode::Transpose, {{DType::F32, {2, 3, 4}, iota(24)}}, {4, 2, 3},
                    {{"permutation", V{2, 0, 1}}});
  std::vector<double> expected;
  for (int k = 0; k < 4; ++k)
    for (int i = 0; i < 2; ++i)
      for (int j = 0; j < 3; ++j)
        expected.push_back(12 * i + 4 * j + k);
  expectNear(out, expected, 0);
}

TEST(CpuLayout, TransposeIntegers) {
  auto out = runOp(OpCode::Transpose, {{DType::I64, {2, 3}, {1, 2, 3, 4, 5, 6}}}, DType::I64,
                   {3, 2}, {{"permutation", V{1, 0}}});
  expectNear(out, {1, 4, 2, 5, 3, 6}, 0);
}

TEST(CpuLayout, Reshape) {
  auto out = runF32(OpCode::Reshape, {{DType::F32, {2, 3}, iota(6)}}, {3, 1, 2});
  expectNear(out, iota(6), 0);
}

TEST(CpuLayout, Slice) {
  // x [3, 4] = 0..11; rows 1..2, columns 1..3.
  auto out = runF32(OpCode::Slice, {{DType::F32, {3, 4}, iota(12)}}, {2, 3}, {{"starts", V{1, 1}}});
  expectNear(out, {5, 6, 7, 9, 10, 11}, 0);
}

TEST(CpuLayout, Concat) {
  // Along axis 1: [2, 1] ++ [2, 2] ++ [2, 1] -> [2, 4].
  auto out = runF32(OpCode::Concat,
                    {{DType::F32, {2, 1}, {1, 2}},
                     {DType::F32, {2, 2}, {3, 4, 5, 6}},
                     {DType::F32, {2, 1}, {7, 8}}},
                    {2, 4}, {{"axis", int64_t(1)}});
  expectNear(out, {1, 3, 4, 7, 2, 5, 6, 8}, 0);
  out = runF32(OpCode::Concat, {{DType::F32, {1, 2}, {1, 2}}, {DType::F32, {2, 2}, {3, 4, 5, 6}}},
               {3, 2}, {{"axis", int64_t(0)}});
  expectNear(out, {1, 2, 3, 4, 5, 6}, 0);
}

TEST(CpuLayout, Broadcast) {
  expectNear(runF32(OpCode::Broadcast, {{DType::F32, {3}, {1, 2, 3}}}, {2, 3}), {1, 2, 3, 1, 2, 3},
             0);
  expectNear(runF32(OpCode::Broadcast, {{DType::F32, {2, 1}, {1, 2}}}, {2, 3}), {1, 1, 1, 2, 2, 2},
             0);
  expectNear(runF32(OpCode::Broadcast, {{DType::F32, {}, {7}}}, {2, 2}), {7, 7, 7, 7}, 0);
}

TEST(CpuLayout, Embedding) {
  // table [4, 2] = 0..7; ids [2, 2] pick rows.
  auto out = runF32(OpCode::Embedding,
                    {{DType::F32, {4, 2}, iota(8)}, {DType::I32, {2, 2}, {3, 0, 1, 3}}}, {2, 2, 2});
  expectNear(out, {6, 7, 0, 1, 2, 3, 6, 7}, 0);
}

TEST(CpuLayout, EmbeddingOutOfRangeIdIsAnError) {
  try {
    runF32(OpCode::Embedding, {{DType::F32, {4, 2}, iota(8)}, {DType::I64, {3}, {1, 4, 9}}},
           {3, 2});
    FAIL() << "expected an error";
  } catch (const cpu::ExecutionError &error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("embedding at test.mlir:1:1"), std::string::npos) << message;
    EXPECT_NE(message.find("id 4 at index 1"), std::string::npos) << message;
    EXPECT_EQ(message.find('\n'), std::string::npos);
  }
}

} // namespace
