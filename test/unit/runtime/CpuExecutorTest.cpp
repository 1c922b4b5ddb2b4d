//===- CpuExecutorTest.cpp - Initialisation, inputs, runs, errors ---------===//

#include "CpuTestUtils.h"

#include "runtime/numerics/Float16.h"
#include "runtime/numerics/Philox.h"

#include <gtest/gtest.h>

#include <cmath>

using namespace ampc;
using namespace ampc::test;
using cpu::ExecutionError;
using cpu::Executor;
using cpu::Precision;
using plan::InitKind;
using V = std::vector<int64_t>;

namespace {

/// Expects \p body to throw ExecutionError mentioning \p fragment.
template <typename F> void expectError(F body, const std::string &fragment) {
  try {
    body();
    ADD_FAILURE() << "expected an ExecutionError mentioning " << fragment;
  } catch (const ExecutionError &error) {
    EXPECT_NE(std::string(error.what()).find(fragment), std::string::npos) << error.what();
  }
}

/// A plan with one parameter per init kind and loss = sum of the first.
plan::Plan parameterPlan(int64_t count, DType dtype = DType::F32) {
  PlanBuilder b;
  uint32_t w = b.parameter("w", dtype, {count}, InitKind::Normal, 0, 0.02);
  b.parameter("w2", dtype, {count}, InitKind::Normal, 0, 0.02);
  b.parameter("u", dtype, {count}, InitKind::Uniform, -3, 5);
  b.parameter("one", dtype, {4}, InitKind::Ones);
  b.parameter("zero", dtype, {4}, InitKind::Zeros);
  b.plan.loss = b.op(OpCode::Sum, {w}, DType::F32, {}, {{"axes", V{0}}, {"keepdims", int64_t(0)}});
  return b.plan;
}

void meanAndStd(const std::vector<double> &values, double &mean, double &std) {
  double sum = 0, squares = 0;
  for (double v : values)
    sum += v;
  mean = sum / values.size();
  for (double v : values)
    squares += (v - mean) * (v - mean);
  std = std::sqrt(squares / values.size());
}

TEST(CpuExecutor, NormalInitHasRequestedMoments) {
  Executor executor(parameterPlan(100000), Precision::F32);
  executor.initializeParameters(1234);
  double mean, std;
  meanAndStd(executor.parameterValues("w"), mean, std);
  // sd of the sample mean is 0.02 / sqrt(1e5) ~ 6.3e-5.
  EXPECT_NEAR(mean, 0.0, 3e-4);
  EXPECT_NEAR(std, 0.02, 0.02 * 0.01);
  auto uniform = executor.parameterValues("u");
  meanAndStd(uniform, mean, std);
  EXPECT_NEAR(mean, 1.0, 0.05);
  EXPECT_NEAR(std, 8 / std::sqrt(12.0), 0.02);
  for (double v : uniform)
    ASSERT_TRUE(v >= -3 && v < 5);
  EXPECT_EQ(executor.parameterValues("one"), std::vector<double>(4, 1.0));
  EXPECT_EQ(executor.parameterValues("zero"), std::vector<double>(4, 0.0));
}

TEST(CpuExecutor, GivenInitUsesTheStoredValues) {
  // An imported model's weights: the values, whatever the seed, rounded to the buffer's dtype.
  for (DType dtype : {DType::F32, DType::BF16}) {
    PlanBuilder b;
    uint32_t w = b.parameter("w", dtype, {3}, InitKind::Given);
    b.plan.parameters[0].values = {0.1f, -2.5f, 3.0f};
    b.plan.loss =
        b.op(OpCode::Sum, {w}, DType::F32, {}, {{"axes", V{0}}, {"keepdims", int64_t(0)}});
    Executor executor(b.plan, Precision::F32);
    for (uint64_t seed : {0u, 9u}) {
      executor.initializeParameters(seed);
      std::vector<double> expected = {0.1f, -2.5, 3.0};
      if (dtype == DType::BF16)
        expected[0] = numerics::roundToBF16(0.1f);
      EXPECT_EQ(executor.parameterValues("w"), expected);
    }
  }
}

TEST(CpuExecutor, InitIsReproducibleAndKeyedByName) {
  Executor first(parameterPlan(1000), Precision::F32);
  Executor second(parameterPlan(1000), Precision::F32);
  first.initializeParameters(7);
  second.initializeParameters(7);
  EXPECT_EQ(first.parameterValues("w"), second.parameterValues("w"));
  EXPECT_NE(first.parameterValues("w"), first.parameterValues("w2"));
  second.initializeParameters(8);
  EXPECT_NE(first.parameterValues("w"), second.parameterValues("w"));
  // The documented formula: mean + std * standardNormal(seed, 0,
  // fnv1a32(name), e), rounded to the buffer's dtype.
  const uint32_t stream = numerics::fnv1a32("w", 1);
  EXPECT_EQ(first.parameterValues("w")[5],
            static_cast<float>(0.02 * numerics::standardNormal(7, 0, stream, 5)));
}

TEST(CpuExecutor, InitRoundsToBufferDType) {
  for (Precision precision : {Precision::F32, Precision::F64}) {
    Executor executor(parameterPlan(256, DType::BF16), precision);
    executor.initializeParameters(3);
    for (double v : executor.parameterValues("w"))
      ASSERT_EQ(v, numerics::roundToBF16(v));
  }
  // F64 keeps f32 parameters as doubles (the fp64 reference).
  Executor f64(parameterPlan(64), Precision::F64);
  f64.initializeParameters(3);
  bool anyBeyondFloat = false;
  for (double v : f64.parameterValues("w"))
    anyBeyondFloat |= v != static_cast<float>(v);
  EXPECT_TRUE(anyBeyondFloat);
}

/// ids [2, 3] (i32, bound 10) -> embedding table [10, 4] -> mean; plus an
/// unbounded i64 input and a float input.
plan::Plan inputPlan() {
  PlanBuilder b;
  uint32_t table = b.parameter("table", DType::F32, {10, 4}, InitKind::Normal, 0, 1);
  uint32_t ids = b.input("ids", DType::I32, {2, 3}, 10);
  b.input("raw", DType::I64, {2});
  uint32_t x = b.input("x", DType::BF16, {2, 3, 4});
  uint32_t e = b.op(OpCode::Embedding, {table, ids}, DType::F32, {2, 3, 4}, {}, "inputs.mlir:4:2");
  uint32_t sum =
      b.op(OpCode::Add, {e, b.op(OpCode::Cast, {x}, DType::F32, {2, 3, 4})}, DType::F32, {2, 3, 4});
  b.plan.loss =
      b.op(OpCode::Mean, {sum}, DType::F32, {}, {{"axes", V{0, 1, 2}}, {"keepdims", int64_t(0)}});
  return b.plan;
}

TEST(CpuExecutor, RandomizeInputsRespectsBoundsAndDTypes) {
  PlanBuilder b;
  uint32_t ids = b.input("ids", DType::I64, {1000}, 7);
  uint32_t x = b.input("x", DType::F16, {1000});
  uint32_t c = b.op(OpCode::Cast, {ids}, DType::F32, {1000});
  uint32_t sum =
      b.op(OpCode::Add, {c, b.op(OpCode::Cast, {x}, DType::F32, {1000})}, DType::F32, {1000});
  b.plan.loss =
      b.op(OpCode::Sum, {sum}, DType::F32, {}, {{"axes", V{0}}, {"keepdims", int64_t(0)}});
  Executor executor(b.plan, Precision::F32);
  executor.randomizeInputs(99);
  auto idValues = executor.bufferValues(ids);
  std::vector<int> histogram(7, 0);
  for (double v : idValues) {
    ASSERT_TRUE(v >= 0 && v < 7 && v == std::floor(v));
    ++histogram[static_cast<int>(v)];
  }
  for (int count : histogram)
    EXPECT_GT(count, 100);
  double mean, std;
  auto xValues = executor.bufferValues(x);
  meanAndStd(xValues, mean, std);
  EXPECT_NEAR(mean, 0, 0.15);
  EXPECT_NEAR(std, 1, 0.1);
  for (double v : xValues)
    ASSERT_EQ(v, numerics::roundToF16(v));
  // Same seed, same data.
  Executor again(b.plan, Precision::F32);
  again.randomizeInputs(99);
  EXPECT_EQ(again.bufferValues(x), xValues);
}

TEST(CpuExecutor, RandomizeNeedsBoundsForIntegerInputs) {
  Executor executor(inputPlan(), Precision::F32);
  executor.initializeParameters(1);
  expectError([&] { executor.randomizeInputs(1); }, "'raw'");
  // Nothing was filled: 'ids' (before 'raw') still has no data.
  expectError([&] { executor.run({}); }, "input 'ids' has no data");
}

TEST(CpuExecutor, RandomInputsAreTheSameInBothPrecisions) {
  PlanBuilder b;
  uint32_t x = b.input("x", DType::F32, {100});
  b.plan.loss = b.op(OpCode::Sum, {x}, DType::F32, {}, {{"axes", V{0}}, {"keepdims", int64_t(0)}});
  Executor f32(b.plan, Precision::F32), f64(b.plan, Precision::F64);
  f32.randomizeInputs(4);
  f64.randomizeInputs(4);
  EXPECT_EQ(f32.bufferValues(x), f64.bufferValues(x));
}

TEST(CpuExecutor, SetInputChecksNameSizeAndRange) {
  Executor executor(inputPlan(), Precision::F32);
  std::vector<uint8_t> ids = encodeValues(DType::I32, {0, 1, 2, 3, 4, 5});
  expectError([&] { executor.setInput("nope", ids.data(), ids.size()); }, "no input named 'nope'");
  expectError([&] { executor.setInput("ids", ids.data(), ids.size() - 1); },
              "needs 24 bytes, got 23");
  std::vector<uint8_t> bad = encodeValues(DType::I32, {0, 1, 2, 10, 4, 5});
  expectError([&] { executor.setInput("ids", bad.data(), bad.size()); }, "value 10 at index 3");
  EXPECT_NO_THROW(executor.setInput("ids", ids.data(), ids.size()));
  EXPECT_EQ(executor.bufferValues(1), (std::vector<double>{0, 1, 2, 3, 4, 5}));
}

TEST(CpuExecutor, RunNeedsParametersAndInputs) {
  Executor executor(inputPlan(), Precision::F32);
  expectError([&] { executor.run({}); }, "parameter 'table' has no values");
  executor.initializeParameters(1);
  expectError([&] { executor.run({}); }, "input 'ids' has no data");
}

TEST(CpuExecutor, RunsAndReportsTheLoss) {
  Executor executor(inputPlan(), Precision::F64);
  executor.initializeParameters(1);
  std::vector<double> table(40);
  for (int i = 0; i < 40; ++i)
    table[i] = i;
  executor.setParameterValues("table", table);
  auto ids = encodeValues(DType::I32, {0, 1, 2, 3, 4, 5});
  auto raw = encodeValues(DType::I64, {1, 2});
  auto x = encodeValues(DType::BF16, std::vector<double>(24, 0.5));
  executor.setInput("ids", ids.data(), ids.size());
  executor.setInput("raw", raw.data(), raw.size());
  executor.setInput("x", x.data(), x.size());
  // Rows 0..5 of the table hold 0..23: mean 11.5, plus 0.5.
  EXPECT_EQ(executor.run({}), 12.0);
  EXPECT_EQ(executor.parameterValues("table"), table);
}

TEST(CpuExecutor, SetParameterValuesRoundsToDType) {
  Executor executor(parameterPlan(4, DType::BF16), Precision::F64);
  executor.initializeParameters(0);
  executor.setParameterValues("one", {1 + 1.0 / 256, 3, 1.0 / 3, -0.0});
  auto values = executor.parameterValues("one");
  EXPECT_EQ(values[0], 1.0);
  EXPECT_EQ(values[2], numerics::roundToBF16(1.0 / 3));
  EXPECT_TRUE(std::signbit(values[3]));
  expectError([&] { executor.setParameterValues("one", {1, 2}); }, "has 4 elements");
  expectError([&] { executor.parameterValues("missing"); }, "no parameter named 'missing'");
}

TEST(CpuExecutor, ConstantsDecodeFromTheirDType) {
  PlanBuilder b;
  uint32_t c = b.constant("c", DType::BF16, {3}, {1.5, -2, 1.0 / 3});
  uint32_t i = b.constant("i", DType::I32, {2}, {-7, 9});
  uint32_t ci = b.op(OpCode::Cast, {i}, DType::F32, {2});
  uint32_t sum = b.op(OpCode::Sum, {c}, DType::F32, {}, {{"axes", V{0}}, {"keepdims", int64_t(0)}});
  uint32_t sumI =
      b.op(OpCode::Sum, {ci}, DType::F32, {}, {{"axes", V{0}}, {"keepdims", int64_t(0)}});
  b.plan.loss = b.op(OpCode::Add, {sum, sumI}, DType::F32, {});
  Executor executor(b.plan, Precision::F64);
  EXPECT_EQ(executor.bufferValues(c),
            (std::vector<double>{1.5, -2, numerics::roundToBF16(1.0 / 3)}));
  EXPECT_EQ(executor.bufferValues(i), (std::vector<double>{-7, 9}));
  EXPECT_EQ(executor.run({}), 1.5 - 2 + numerics::roundToBF16(1.0 / 3) + 2);
}

TEST(CpuExecutor, ReleasedTemporariesAreNotReadable) {
  plan::Plan plan = everyOpcodePlan();
  Executor executor(plan, Precision::F32);
  executor.initializeParameters(5);
  executor.randomizeInputs(5);
  cpu::RunOptions options;
  const double kept = executor.run(options);
  const uint32_t embedding = plan.instructions[0].results[0];
  EXPECT_NO_THROW(executor.bufferValues(embedding));
  options.keepTemporaries = false;
  EXPECT_EQ(executor.run(options), kept);
  expectError([&] { executor.bufferValues(embedding); }, "holds no values");
  EXPECT_EQ(executor.bufferValues(plan.loss)[0], kept);
}

TEST(CpuExecutor, RecycledStorageGivesTheSameBitsRunAfterRun) {
  // Without kept temporaries, a dead temporary's storage is handed (zeroed) to the next result
  // of its size, run after run. Every run must still give the bits of an executor that keeps
  // every temporary in its own storage.
  plan::Plan plan = everyOpcodePlan();
  Executor recycling(plan, Precision::F32), keeping(plan, Precision::F32);
  for (Executor *executor : {&recycling, &keeping}) {
    executor->initializeParameters(7);
    executor->randomizeInputs(8);
  }
  cpu::RunOptions options;
  options.training = true;
  options.seed = 3;
  for (uint64_t step = 0; step < 3; ++step) {
    options.step = step;
    options.keepTemporaries = false;
    const double recycled = recycling.run(options);
    options.keepTemporaries = true;
    const double kept = keeping.run(options);
    ASSERT_TRUE(std::isfinite(kept));
    EXPECT_EQ(recycled, kept) << "run " << step;
  }
}

TEST(CpuExecutor, EveryOpcodePlanAgreesAcrossPrecisions) {
  plan::Plan plan = everyOpcodePlan();
  Executor f32(plan, Precision::F32), f64(plan, Precision::F64);
  for (Executor *executor : {&f32, &f64}) {
    executor->initializeParameters(11);
    executor->randomizeInputs(12);
  }
  cpu::RunOptions options;
  options.training = true;
  options.seed = 3;
  const double loss32 = f32.run(options), loss64 = f64.run(options);
  ASSERT_TRUE(std::isfinite(loss32));
  // The only bf16 store (the logits) can flip by one bf16 ulp between the
  // precisions, so agreement is at the bf16 level, not 1e-7.
  EXPECT_NEAR(loss32, loss64, 2e-2 * std::fabs(loss64));
  EXPECT_NE(loss32, loss64);
  // Deterministic: the same run again gives the same bits.
  EXPECT_EQ(f32.run(options), loss32);
}

TEST(CpuExecutor, F64DiffersFromF32AtRoundingLevel) {
  // loss = mean(tanh(x @ w)) in f32 buffers: the two precisions agree to a
  // few float ulps but not exactly.
  PlanBuilder b;
  uint32_t x = b.input("x", DType::F32, {8, 16});
  uint32_t w = b.parameter("w", DType::F32, {16, 16}, InitKind::Normal, 0, 0.3);
  uint32_t h = b.op(OpCode::MatMul, {x, w}, DType::F32, {8, 16},
                    {{"transpose_a", int64_t(0)}, {"transpose_b", int64_t(0)}});
  uint32_t t = b.op(OpCode::Tanh, {h}, DType::F32, {8, 16});
  b.plan.loss =
      b.op(OpCode::Mean, {t}, DType::F32, {}, {{"axes", V{0, 1}}, {"keepdims", int64_t(0)}});
  Executor f32(b.plan, Precision::F32), f64(b.plan, Precision::F64);
  for (Executor *executor : {&f32, &f64}) {
    executor->initializeParameters(21);
    executor->randomizeInputs(22);
  }
  f64.setParameterValues("w", f32.parameterValues("w")); // same float weights
  f32.run({});
  f64.run({});
  auto a = f32.bufferValues(t), c = f64.bufferValues(t);
  double largest = 0;
  for (size_t i = 0; i < a.size(); ++i)
    largest = std::max(largest, std::fabs(a[i] - c[i]));
  EXPECT_GT(largest, 1e-9);
  EXPECT_LT(largest, 2e-6);
}

} // namespace
