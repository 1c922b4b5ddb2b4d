//===- CpuElementwiseTest.cpp - Elementwise ops, dropout, cast, rounding --===//

#include "CpuTestUtils.h"
#include "runtime/cpu/Kernels.h"

#include "runtime/numerics/Float16.h"
#include "runtime/numerics/Philox.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

using namespace ampc;
using namespace ampc::test;
using cpu::Precision;

namespace {

TEST(CpuElementwise, BinarySameShape) {
  TensorSpec a{DType::F32, {2, 3}, {1, 2, 3, 4, 5, 6}};
  TensorSpec b{DType::F32, {2, 3}, {0.5, -1, 2, 8, 0.25, -4}};
  expectNear(runF32(OpCode::Add, {a, b}, {2, 3}), {1.5, 1, 5, 12, 5.25, 2}, 0);
  expectNear(runF32(OpCode::Sub, {a, b}, {2, 3}), {0.5, 3, 1, -4, 4.75, 10}, 0);
  expectNear(runF32(OpCode::Mul, {a, b}, {2, 3}), {0.5, -2, 6, 32, 1.25, -24}, 0);
  expectNear(runF32(OpCode::Div, {a, b}, {2, 3}), {2, -2, 1.5, 0.5, 20, -1.5}, 0);
}

TEST(CpuElementwise, BinaryBroadcasting) {
  // a [2, 1, 3] + b [4, 1] -> [2, 4, 3]: out[i][j][k] = a[i][0][k] + b[j][0].
  std::vector<double> aValues = {1, 2, 3, 10, 20, 30};
  std::vector<double> bValues = {100, 200, 300, 400};
  std::vector<double> expected;
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 4; ++j)
      for (int k = 0; k < 3; ++k)
        expected.push_back(aValues[i * 3 + k] + bValues[j]);
  expectNear(runF32(OpCode::Add, {{DType::F32, {2, 1, 3}, aValues}, {DType::F32, {4, 1}, bValues}},
                    {2, 4, 3}),
             expected, 0);
  // A row vector times a matrix, and a scalar divided by a matrix.
  expectNear(runF32(OpCode::Mul,
                    {{DType::F32, {3}, {1, 2, 3}}, {DType::F32, {2, 3}, {1, 1, 1, 2, 2, 2}}},
                    {2, 3}),
             {1, 2, 3, 2, 4, 6}, 0);
  expectNear(
      runF32(OpCode::Div, {{DType::F32, {}, {8}}, {DType::F32, {2, 2}, {1, 2, 4, 8}}}, {2, 2}),
      {8, 4, 2, 1}, 0);
  // Broadcasting on both sides: [3, 1] - [1, 2] -> [3, 2].
  expectNear(runF32(OpCode::Sub, {{DType::F32, {3, 1}, {1, 2, 3}}, {DType::F32, {1, 2}, {10, 20}}},
                    {3, 2}),
             {-9, -19, -8, -18, -7, -17}, 0);
}

TEST(CpuElementwise, UnaryOps) {
  const std::vector<double> x = {-2, -0.5, 0, 0.5, 1, 3};
  auto run = [&](OpCode op, Attrs attrs = {}) {
    return runF32(op, {{DType::F32, {6}, x}}, {6}, attrs);
  };
  std::vector<double> neg, relu, silu, tanh, exp;
  for (double v : x) {
    neg.push_back(-v);
    relu.push_back(v > 0 ? v : 0);
    silu.push_back(v / (1 + std::exp(-v)));
    tanh.push_back(std::tanh(v));
    exp.push_back(std::exp(v));
  }
  expectNear(run(OpCode::Neg), neg, 0);
  expectNear(run(OpCode::Relu), relu, 0);
  expectNear(run(OpCode::Silu), silu, 1e-15);
  expectNear(run(OpCode::Tanh), tanh, 1e-15);
  expectNear(run(OpCode::Exp), exp, 1e-14);
  // x * min(max(x + 3, 0), 6) / 6: 0 up to -3, x beyond 3, NaN kept.
  expectNear(runF32(OpCode::Hardswish, {{DType::F32, {7}, {-4, -3, -1.5, 0, 1.5, 3, 4}}}, {7}),
             {0, 0, -0.375, 0, 1.125, 3, 4}, 0);
  EXPECT_TRUE(std::isnan(runF32(OpCode::Hardswish, {{DType::F32, {1}, {NAN}}}, {1})[0]));
  // min(max(x + 3, 0), 6) / 6.
  expectNear(runF32(OpCode::Hardsigmoid, {{DType::F32, {5}, {-4, -3, 0, 1.5, 4}}}, {5}),
             {0, 0, 0.5, 0.75, 1}, 1e-7);
  // 1 / (1 + e^-x), 0 (not NaN) where e^-x overflows; log(1 + e^x), and x above 20.
  expectNear(runF32(OpCode::Sigmoid, {{DType::F32, {3}, {0, -200, 200}}}, {3}), {0.5, 0, 1},
             1e-30);
  expectNear(runF32(OpCode::Softplus, {{DType::F32, {4}, {0, -200, 30, 1}}}, {4}),
             {std::log(2.0), 0, 30, std::log1p(std::exp(1.0))}, 1e-6);
  const std::vector<double> positive = {0.25, 1, 4, 9};
  auto runPositive = [&](OpCode op) { return runF32(op, {{DType::F32, {4}, positive}}, {4}); };
  expectNear(runPositive(OpCode::Log), {std::log(0.25), 0, std::log(4.0), std::log(9.0)}, 1e-15);
  expectNear(runPositive(OpCode::Sqrt), {0.5, 1, 2, 3}, 0);
  expectNear(runPositive(OpCode::Rsqrt), {2, 1, 0.5, 1.0 / 3}, 1e-16);
  // GELU at 1: erf form 0.5 (1 + erf(1/sqrt 2)); tanh form with 0.044715.
  auto gelu = [&](int64_t approximate) {
    return runF32(OpCode::Gelu, {{DType::F32, {3}, {1, -1, 0}}}, {3},
                  {{"approximate", approximate}});
  };
  expectNear(gelu(0), {0.8413447460685429, -0.15865525393145707, 0}, 1e-15);
  expectNear(gelu(1), {0.8411919906082768, -0.15880800939172324, 0}, 1e-15);
}

TEST(CpuElementwise, ReluKeepsNaNAndLogOfZero) {
  auto out = runF32(OpCode::Relu, {{DType::F32, {2}, {std::nan(""), -1}}}, {2});
  EXPECT_TRUE(std::isnan(out[0]));
  EXPECT_EQ(out[1], 0);
  out = runF32(OpCode::Log, {{DType::F32, {2}, {0, -1}}}, {2});
  EXPECT_EQ(out[0], -std::numeric_limits<double>::infinity());
  EXPECT_TRUE(std::isnan(out[1]));
}

cpu::RunOptions training(uint64_t seed, uint64_t step) {
  cpu::RunOptions options;
  options.training = true;
  options.seed = seed;
  options.step = step;
  return options;
}

TEST(CpuElementwise, DropoutMaskIsDeterministicAndScaled) {
  const int64_t count = 1000;
  const double p = 0.3;
  TensorSpec x{DType::F32, {count}, std::vector<double>(count, 2.0)};
  Attrs attrs = {{"p", p}, {"stream", int64_t(42)}};
  auto first =
      runOp(OpCode::Dropout, {x}, DType::F32, {count}, attrs, Precision::F64, training(5, 3));
  auto again =
      runOp(OpCode::Dropout, {x}, DType::F32, {count}, attrs, Precision::F64, training(5, 3));
  auto otherStep =
      runOp(OpCode::Dropout, {x}, DType::F32, {count}, attrs, Precision::F64, training(5, 4));
  EXPECT_EQ(first, again);
  EXPECT_NE(first, otherStep);
  const double kept = 2.0 * (1.0 / (1 - p));
  for (int64_t e = 0; e < count; ++e) {
    // The documented mask: keep iff uniform01(seed, step, stream, e) >= p.
    const bool keep = numerics::uniform01(5, 3, 42, e) >= p;
    EXPECT_NEAR(first[e], keep ? kept : 0.0, 1e-12) << e;
  }
}

TEST(CpuElementwise, DropoutRateAndEvalIdentity) {
  const int64_t count = 200000;
  const double p = 0.1;
  TensorSpec x{DType::F32, {count}, std::vector<double>(count, 1.0)};
  Attrs attrs = {{"p", p}, {"stream", int64_t(9)}};
  auto out =
      runOp(OpCode::Dropout, {x}, DType::F32, {count}, attrs, Precision::F32, training(1, 0));
  int64_t dropped = 0;
  for (double v : out)
    dropped += v == 0;
  // sd of the dropped fraction is sqrt(p (1 - p) / n) ~ 0.00067.
  EXPECT_NEAR(static_cast<double>(dropped) / count, p, 0.004);
  // Evaluation mode is the identity.
  auto eval =
      runOp(OpCode::Dropout, {x}, DType::F32, {count}, attrs, Precision::F32, cpu::RunOptions{});
  EXPECT_EQ(eval, x.values);
}

TEST(CpuElementwise, StoredValuesRoundToBF16ButIntermediatesDoNot) {
  const double a = 1 + std::ldexp(1.0, -7); // exact in bf16
  TensorSpec x{DType::BF16, {1}, {a}};
  // a * a = 1 + 2^-6 + 2^-14 is exact in float and kept by an f32 result.
  EXPECT_EQ(runOp(OpCode::Mul, {x, x}, DType::F32, {1})[0], a * a);
  // A bf16 result rounds it once: 2^-14 is below half a bf16 ulp at 1.
  EXPECT_EQ(runOp(OpCode::Mul, {x, x}, DType::BF16, {1})[0], 1 + std::ldexp(1.0, -6));
  // GELU into bf16: the cube, tanh, etc. stay in the compute type and only
  // the stored result is rounded, in both precisions.
  auto geluTanh = [](auto x) {
    using T = decltype(x);
    return T(0.5) * x *
           (T(1) + std::tanh(T(0.79788456080286535588) * (x + T(0.044715) * x * x * x)));
  };
  auto f32 = runOp(OpCode::Gelu, {{DType::BF16, {1}, {a}}}, DType::BF16, {1},
                   {{"approximate", int64_t(1)}}, Precision::F32);
  EXPECT_EQ(f32[0], numerics::roundToBF16(geluTanh(static_cast<float>(a))));
  auto f64 = runOp(OpCode::Gelu, {{DType::BF16, {1}, {a}}}, DType::BF16, {1},
                   {{"approximate", int64_t(1)}}, Precision::F64);
  EXPECT_EQ(f64[0], numerics::roundToBF16(geluTanh(a)));
}

TEST(CpuElementwise, CastRoundsIntoNarrowTypes) {
  const double tie = 1 + std::ldexp(1.0, -8);       // bf16 tie -> 1
  const double above = 1 + 3 * std::ldexp(1.0, -9); // rounds up
  auto bf16 = runOp(OpCode::Cast, {{DType::F32, {3}, {tie, above, 65520}}}, DType::BF16, {3});
  expectNear(bf16, {1, 1 + std::ldexp(1.0, -7), 65536}, 0);
  auto f16 = runOp(OpCode::Cast, {{DType::F32, {2}, {65520, 65519}}}, DType::F16, {2});
  EXPECT_EQ(f16[0], std::numeric_limits<double>::infinity());
  EXPECT_EQ(f16[1], 65504);
  // Integers round once to bf16: 257 is a tie between 256 and 258.
  auto fromInt = runOp(OpCode::Cast, {{DType::I64, {2}, {257, 259}}}, DType::BF16, {2});
  expectNear(fromInt, {256, 260}, 0);
}

TEST(CpuElementwise, CastToIntegerTruncatesAndSaturates) {
  auto out = runOp(OpCode::Cast, {{DType::F32, {6}, {-1.7, 1.7, 2.5, std::nan(""), 3e9, -3e9}}},
                   DType::I32, {6});
  expectNear(out, {-1, 1, 2, 0, 2147483647, -2147483648.0}, 0);
  // i64 -> i32 wraps modulo 2^32.
  out = runOp(OpCode::Cast, {{DType::I64, {2}, {4294967301.0, -1}}}, DType::I32, {2});
  expectNear(out, {5, -1}, 0);
}

TEST(CpuElementwise, F64DiffersFromF32AtRoundingLevel) {
  // exp of values that are not exactly representable results: F32 computes
  // in float, F64 in double (with f32 buffers kept as double).
  std::vector<double> x;
  for (int i = 0; i < 64; ++i)
    x.push_back(0.1 + 0.037 * i);
  TensorSpec spec{DType::F32, {64}, x};
  auto f32 = runF32(OpCode::Exp, {spec}, {64}, {}, Precision::F32);
  auto f64 = runF32(OpCode::Exp, {spec}, {64}, {}, Precision::F64);
  double largest = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double relative = std::fabs(f32[i] - f64[i]) / f64[i];
    largest = std::max(largest, relative);
    EXPECT_EQ(f32[i], static_cast<float>(f32[i])); // stored as floats
  }
  EXPECT_GT(largest, 1e-9);
  EXPECT_LT(largest, 2e-7);
}

TEST(CpuStorageRounding, BulkRoundingGivesFloat16hsBits) {
  // Every upper half of a float's bits with lower halves at bf16's and
  // fp16's rounding boundaries (below, at and above each halfway point, with
  // the kept lsb odd and even), then random patterns: every sign, zero,
  // subnormal, normal, overflowing, infinite and NaN input. Blocks mix the
  // fp16 fast and slow cases, so both paths run.
  const uint32_t lows[] = {0x0000, 0x0001, 0x0fff, 0x1000, 0x1001, 0x2fff, 0x3000,
                           0x3001, 0x7fff, 0x8000, 0x8001, 0xefff, 0xf000, 0xffff};
  std::vector<uint32_t> patterns;
  for (uint32_t high = 0; high < 0x10000; ++high)
    for (uint32_t low : lows)
      patterns.push_back(high << 16 | low);
  std::mt19937 random(5);
  for (int i = 0; i < 1 << 20; ++i)
    patterns.push_back(static_cast<uint32_t>(random()));
  // Long runs of in-range fp16 values, so the branch-free blocks run too.
  for (int i = 0; i < 1 << 16; ++i)
    patterns.push_back(0x38800000u + static_cast<uint32_t>(random()) % (0x477ff000u - 0x38800000u));
  std::vector<float> values(patterns.size());
  std::memcpy(values.data(), patterns.data(), patterns.size() * sizeof(float));

  std::vector<float> bf16 = values, f16 = values;
  cpu::kernels::roundFloatsToBF16(bf16.data(), static_cast<int64_t>(bf16.size()));
  cpu::kernels::roundFloatsToF16(f16.data(), static_cast<int64_t>(f16.size()));
  for (size_t i = 0; i < values.size(); ++i) {
    // Alone, a value takes the fp16 path its own range picks (in a block, one outside value
    // sends the whole block down the slow path): fp16's boundaries 2^-14 and 65520 included.
    float alone = values[i];
    cpu::kernels::roundFloatsToF16(&alone, 1);
    ASSERT_EQ(numerics::floatToBits(alone), numerics::floatToBits(numerics::roundToF16(values[i])))
        << "f16 of 0x" << std::hex << patterns[i] << " alone";
    ASSERT_EQ(numerics::floatToBits(bf16[i]),
              numerics::floatToBits(numerics::roundToBF16(values[i])))
        << "bf16 of 0x" << std::hex << patterns[i];
    ASSERT_EQ(numerics::floatToBits(f16[i]), numerics::floatToBits(numerics::roundToF16(values[i])))
        << "f16 of 0x" << std::hex << patterns[i];
  }
}

} // namespace
