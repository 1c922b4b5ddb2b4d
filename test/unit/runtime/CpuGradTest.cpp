//===- CpuGradTest.cpp - Gradient kernels: hand values and finite differences
//
// Each gradient opcode is checked twice: on small inputs whose gradient can
// be worked out by hand, and against central finite differences of its
// forward opcode run by the same executor in Precision::F64. For a forward
// op y = f(x) and an incoming gradient dy, the gradient opcode must give
// dL/dx of L(x) = sum(f(x) * dy), which the test estimates as
// (L(x + h e_i) - L(x - h e_i)) / 2h for every element i.
//
//===----------------------------------------------------------------------===//

#include "CpuTestUtils.h"

#include <gtest/gtest.h>

#include <cmath>
#include <optional>
#include <random>
#include <string>

using namespace ampc;
using namespace ampc::test;
using cpu::ExecutionError;
using cpu::Executor;
using cpu::Precision;
using V = std::vector<int64_t>;

namespace {

/// A result buffer of an instruction under test.
struct ResultSpec {
  DType dtype;
  Shape shape;
};

/// Runs one instruction with inputs \p operands (set with setBufferValues,
/// so F64 runs see the exact doubles) and returns every result.
std::vector<std::vector<double>> evaluate(OpCode op, const std::vector<TensorSpec> &operands,
                                          const std::vector<ResultSpec> &results,
                                          const Attrs &attrs = {},
                                          Precision precision = Precision::F64) {
  PlanBuilder b;
  std::vector<uint32_t> ids, resultIds;
  for (size_t i = 0; i < operands.size(); ++i)
    ids.push_back(b.input("x" + std::to_string(i), operands[i].dtype, operands[i].shape));
  for (size_t i = 0; i < results.size(); ++i)
    resultIds.push_back(b.buffer("r" + std::to_string(i), results[i].dtype, results[i].shape));
  b.instruction(op, ids, resultIds, attrs);
  b.plan.instructions.back().location = "grad.mlir:1:1";
  // The loss: the sum of the first result (cast to f32 if an integer).
  uint32_t summed = resultIds[0];
  if (!plan::isFloatDType(results[0].dtype))
    summed = b.op(OpCode::Cast, {summed}, DType::F32, results[0].shape);
  std::vector<int64_t> axes;
  for (size_t d = 0; d < results[0].shape.size(); ++d)
    axes.push_back(static_cast<int64_t>(d));
  b.plan.loss = axes.empty() ? summed
                             : b.op(OpCode::Sum, {summed}, DType::F32, {},
                                    {{"axes", axes}, {"keepdims", int64_t(0)}});
  Executor executor(b.plan, precision);
  for (size_t i = 0; i < operands.size(); ++i)
    executor.setBufferValues(ids[i], operands[i].values);
  executor.run({});
  std::vector<std::vector<double>> values;
  for (uint32_t id : resultIds)
    values.push_back(executor.bufferValues(id));
  return values;
}

/// evaluate() for one f32 result.
std::vector<double> evaluateOne(OpCode op, const std::vector<TensorSpec> &operands,
                                const Shape &shape, const Attrs &attrs = {},
                                Precision precision = Precision::F64) {
  return evaluate(op, operands, {{DType::F32, shape}}, attrs, precision)[0];
}

/// Deterministic values uniform in [low, high).
std::vector<double> randomValues(size_t count, uint64_t seed, double low = -1, double high = 1) {
  std::mt19937_64 engine(seed);
  std::vector<double> values(count);
  for (double &value : values)
    value = low + (high - low) * static_cast<double>(engine() >> 11) * 0x1p-53;
  return values;
}

/// Central-difference estimate of d/d(operand \p which) of
/// sum(forward(operands) * dy).
std::vector<double> numericGradient(OpCode forward, std::vector<TensorSpec> operands, size_t which,
                                    const Shape &resultShape, const Attrs &attrs,
                                    const std::vector<double> &dy, double h = 1e-5) {
  auto loss = [&](const std::vector<TensorSpec> &at) {
    const std::vector<double> y = evaluateOne(forward, at, resultShape, attrs);
    double total = 0;
    for (size_t i = 0; i < y.size(); ++i)
      total += y[i] * dy[i];
    return total;
  };
  std::vector<double> gradient(operands[which].values.size());
  for (size_t i = 0; i < gradient.size(); ++i) {
    const double original = operands[which].values[i];
    operands[which].values[i] = original + h;
    const double plus = loss(operands);
    operands[which].values[i] = original - h;
    const double minus = loss(operands);
    operands[which].values[i] = original;
    gradient[i] = (plus - minus) / (2 * h);
  }
  return gradient;
}

/// Expects max |actual - expected| / max |expected| < \p tolerance (and a
/// non-trivial expected gradient, so the check cannot pass vacuously).
void expectRelativeClose(const std::vector<double> &actual, const std::vector<double> &expected,
                         double tolerance = 1e-6) {
  ASSERT_EQ(actual.size(), expected.size());
  double scale = 0, error = 0;
  for (size_t i = 0; i < actual.size(); ++i) {
    scale = std::max(scale, std::abs(expected[i]));
    error = std::max(error, std::abs(actual[i] - expected[i]));
  }
  ASSERT_GT(scale, 1e-3) << "the expected gradient is (nearly) zero";
  EXPECT_LT(error / scale, tolerance) << "max abs error " << error;
}

/// Values in [-1, 1) kept at least \p gap away from 0 (for kinks at 0).
std::vector<double> awayFromZero(size_t count, uint64_t seed, double gap) {
  std::vector<double> values = randomValues(count, seed);
  for (double &value : values)
    value = value < 0 ? value - gap : value + gap;
  return values;
}

//===----------------------------------------------------------------------===//
// Hand-derived values
//===----------------------------------------------------------------------===//

TEST(CpuGrad, ReluGradHandValues) {
  auto dx = evaluateOne(
      OpCode::ReluGrad,
      {{DType::F32, {5}, {-1, 0, 2, 3, -0.5}}, {DType::F32, {5}, {5, 6, 7, -8, 9}}}, {5});
  EXPECT_EQ(dx, (std::vector<double>{0, 0, 7, -8, 0}));
}

TEST(CpuGrad, HardswishGradHandValues) {
  // PyTorch's: 0 below -3, dy (x / 3 + 1/2) on [-3, 3] (both ends included), dy above.
  auto grad = evaluateOne(OpCode::HardswishGrad,
                          {{DType::F32, {7}, {-4, -3, -1.5, 0, 1.5, 3, 4}},
                           {DType::F32, {7}, {2, 2, 2, 2, 2, 2, 2}}},
                          {7});
  expectNear(grad, {0, -1, 0, 1, 2, 3, 2}, 0);
}

TEST(CpuGrad, SigmoidHardsigmoidAndSoftplusGradHandValues) {
  // sigmoid'(0) = 1/4; hardsigmoid' = 1/6 strictly inside (-3, 3), 0 at and beyond the ends;
  // softplus'(0) = 1/2, and exactly 1 above the threshold 20.
  const TensorSpec dy{DType::F32, {5}, {4, 6, 6, 6, 6}};
  expectNear(evaluateOne(OpCode::SigmoidGrad, {{DType::F32, {5}, {0, 0, 0, 0, 0}}, dy}, {5}),
             {1, 1.5, 1.5, 1.5, 1.5}, 0);
  expectNear(evaluateOne(OpCode::HardsigmoidGrad, {{DType::F32, {5}, {-3, -2.9, 0, 2.9, 3}}, dy},
                         {5}),
             {0, 1, 1, 1, 0}, 1e-6);
  expectNear(evaluateOne(OpCode::SoftplusGrad, {{DType::F32, {5}, {0, 25, -200, 0, 0}}, dy}, {5}),
             {2, 6, 0, 3, 3}, 1e-30);
}

TEST(CpuGrad, SiluAndGeluGradHandValues) {
  // silu'(0) = s(0) = 1/2; silu'(x) -> 1 for large x, -> 0 for very negative x.
  auto silu = evaluateOne(OpCode::SiluGrad,
                          {{DType::F32, {3}, {0, 1000, -1000}}, {DType::F32, {3}, {2, 3, 4}}}, {3});
  expectNear(silu, {1, 3, 0}, 0);
  // gelu'(0) = 1/2 for both forms; gelu'(x) -> 1 for large x.
  for (int64_t approximate : {0, 1}) {
    auto gelu =
        evaluateOne(OpCode::GeluGrad, {{DType::F32, {2}, {0, 40}}, {DType::F32, {2}, {2, 3}}}, {2},
                    {{"approximate", approximate}});
    expectNear(gelu, {1, 3}, 1e-15);
  }
  // erf form at x = 1: 0.5 (1 + erf(1/sqrt 2)) + exp(-1/2) / sqrt(2 pi).
  auto one = evaluateOne(OpCode::GeluGrad, {{DType::F32, {1}, {1}}, {DType::F32, {1}, {1}}}, {1},
                         {{"approximate", int64_t(0)}});
  EXPECT_NEAR(one[0],
              0.5 * (1 + std::erf(1 / std::sqrt(2.0))) + std::exp(-0.5) / std::sqrt(2 * M_PI),
              1e-15);
}

TEST(CpuGrad, PadHandValues) {
  auto out =
      evaluateOne(OpCode::Pad, {{DType::F32, {2, 2}, {1, 2, 3, 4}}}, {4, 3}, {{"low", V{1, 0}}});
  EXPECT_EQ(out, (std::vector<double>{0, 0, 0, 1, 2, 0, 3, 4, 0, 0, 0, 0}));
  // Integer tensors pad too (slice applies to them).
  auto ints =
      evaluate(OpCode::Pad, {{DType::I32, {2}, {7, -8}}}, {{DType::I32, {5}}}, {{"low", V{2}}})[0];
  EXPECT_EQ(ints, (std::vector<double>{0, 0, 7, -8, 0}));
  // A scalar-like rank-3 pad in the middle dimension.
  auto middle =
      evaluateOne(OpCode::Pad, {{DType::F32, {1, 1, 2}, {5, 6}}}, {1, 3, 2}, {{"low", V{0, 2, 0}}});
  EXPECT_EQ(middle, (std::vector<double>{0, 0, 0, 0, 5, 6}));
}

TEST(CpuGrad, MaxGradGoesToTheFirstMaximum) {
  // Rows [1, 5, 5] and [7, 2, 7]: ties go to the lowest index.
  auto rows = evaluateOne(OpCode::MaxGrad,
                          {{DType::F32, {2, 3}, {1, 5, 5, 7, 2, 7}}, {DType::F32, {2}, {10, 20}}},
                          {2, 3}, {{"axes", V{1}}, {"keepdims", int64_t(0)}});
  EXPECT_EQ(rows, (std::vector<double>{0, 10, 0, 20, 0, 0}));
  // Over axis 0 with keepdims: columns [1, 4], [5, 5], [3, 0].
  auto columns = evaluateOne(
      OpCode::MaxGrad, {{DType::F32, {2, 3}, {1, 5, 3, 4, 5, 0}}, {DType::F32, {1, 3}, {1, 2, 3}}},
      {2, 3}, {{"axes", V{0}}, {"keepdims", int64_t(1)}});
  EXPECT_EQ(columns, (std::vector<double>{0, 2, 3, 1, 0, 0}));
  // A NaN is the maximum (as in max), so it takes the gradient.
  auto nan = evaluateOne(OpCode::MaxGrad, {{DType::F32, {3}, {1, NAN, 2}}, {DType::F32, {}, {4}}},
                         {3}, {{"axes", V{0}}, {"keepdims", int64_t(0)}});
  EXPECT_EQ(nan, (std::vector<double>{0, 4, 0}));
}

TEST(CpuGrad, EmbeddingGradSumsRepeatedIds) {
  auto table =
      evaluateOne(OpCode::EmbeddingGrad,
                  {{DType::I64, {3}, {2, 0, 2}}, {DType::F32, {3, 2}, {1, 2, 3, 4, 5, 6}}}, {4, 2});
  EXPECT_EQ(table, (std::vector<double>{3, 4, 0, 0, 6, 8, 0, 0}));
}

TEST(CpuGrad, EmbeddingGradRejectsBadIds) {
  try {
    evaluateOne(OpCode::EmbeddingGrad,
                {{DType::I64, {3}, {0, 4, -1}}, {DType::F32, {3, 1}, {1, 2, 3}}}, {4, 1});
    FAIL() << "expected ExecutionError";
  } catch (const ExecutionError &error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("embedding_grad at grad.mlir:1:1"), std::string::npos) << message;
    EXPECT_NE(message.find("id 4 at index 1"), std::string::npos) << message;
  }
}

TEST(CpuGrad, LayerNormGradHandValues) {
  // gamma = 1 and a constant dy: dxhat is constant, so mean(dxhat) = dxhat
  // and mean(dxhat xhat) = 0, giving dx = 0; dbeta = dy; dgamma = xhat.
  const double eps = 1e-5;
  auto grads =
      evaluate(OpCode::LayerNormGrad,
               {{DType::F32, {1, 4}, {1, 2, 3, 4}},
                {DType::F32, {4}, {1, 1, 1, 1}},
                {DType::F32, {1, 4}, {2, 2, 2, 2}}},
               {{DType::F32, {1, 4}}, {DType::F32, {4}}, {DType::F32, {4}}}, {{"epsilon", eps}});
  expectNear(grads[0], {0, 0, 0, 0}, 1e-15);
  const double rstd = 1 / std::sqrt(1.25 + eps);
  expectNear(grads[1], {-1.5 * 2 * rstd, -0.5 * 2 * rstd, 0.5 * 2 * rstd, 1.5 * 2 * rstd}, 1e-14);
  expectNear(grads[2], {2, 2, 2, 2}, 0);
}

TEST(CpuGrad, RmsNormGradHandValues) {
  // x = [3, 4], eps = 0: r = 1/5; dy = [4, -3] is orthogonal to x, so
  // mean(dxhat x) = 0 and dx = r dy; dgamma = dy x r.
  auto grads = evaluate(
      OpCode::RmsNormGrad,
      {{DType::F32, {1, 2}, {3, 4}}, {DType::F32, {2}, {1, 1}}, {DType::F32, {1, 2}, {4, -3}}},
      {{DType::F32, {1, 2}}, {DType::F32, {2}}}, {{"epsilon", 0.0}});
  const double r = 1 / std::sqrt(12.5);
  expectNear(grads[0], {4 * r, -3 * r}, 1e-15);
  expectNear(grads[1], {12 * r, -12 * r}, 1e-14);
}

TEST(CpuGrad, SoftmaxGradHandValues) {
  // y = [1/2, 1/2], dy = [1, 0]: sum(dy y) = 1/2, dx = y (dy - 1/2).
  auto dx = evaluateOne(OpCode::SoftmaxGrad,
                        {{DType::F32, {1, 2}, {0.5, 0.5}}, {DType::F32, {1, 2}, {1, 0}}}, {1, 2});
  expectNear(dx, {0.25, -0.25}, 0);
}

TEST(CpuGrad, AttentionGradWithOneKey) {
  // One key: P = 1 whatever q and k, so out = v for every query: dv = the
  // sum of dy over queries, and dq = dk = 0.
  auto grads = evaluate(OpCode::AttentionGrad,
                        {{DType::F32, {2, 2}, {0.3, -1, 2, 0.5}},
                         {DType::F32, {1, 2}, {1.5, -0.25}},
                         {DType::F32, {1, 2}, {7, 8}},
                         {DType::F32, {2, 2}, {1, 2, 3, 4}}},
                        {{DType::F32, {2, 2}}, {DType::F32, {1, 2}}, {DType::F32, {1, 2}}},
                        {{"causal", int64_t(0)}, {"scale", 0.5}});
  expectNear(grads[0], {0, 0, 0, 0}, 0);
  expectNear(grads[1], {0, 0}, 0);
  expectNear(grads[2], {4, 6}, 0);
}

TEST(CpuGrad, CrossEntropyGradHandValues) {
  // Mean over rows [0, 0] (label 1) and an ignored row: count = 1.
  auto mean = evaluateOne(
      OpCode::CrossEntropyGrad,
      {{DType::F32, {2, 2}, {0, 0, 5, 6}}, {DType::I64, {2}, {1, -100}}, {DType::F32, {}, {1}}},
      {2, 2}, {{"ignore_index", int64_t(-100)}, {"reduction", int64_t(0)}});
  expectNear(mean, {0.5, -0.5, 0, 0}, 1e-16);
  // Sum with dloss = 2: row [ln 3, 0] has softmax [3/4, 1/4].
  auto sum = evaluateOne(OpCode::CrossEntropyGrad,
                         {{DType::F32, {2, 2}, {0, 0, std::log(3.0), 0}},
                          {DType::I32, {2}, {0, 0}},
                          {DType::F32, {}, {2}}},
                         {2, 2}, {{"ignore_index", int64_t(-1)}, {"reduction", int64_t(1)}});
  expectNear(sum, {-1, 1, -0.5, 0.5}, 1e-15);
  // Every row ignored: the mean has no gradient.
  auto none =
      evaluateOne(OpCode::CrossEntropyGrad,
                  {{DType::F32, {1, 2}, {1, 2}}, {DType::I64, {1}, {-100}}, {DType::F32, {}, {1}}},
                  {1, 2}, {{"ignore_index", int64_t(-100)}, {"reduction", int64_t(0)}});
  EXPECT_EQ(none, (std::vector<double>{0, 0}));
}

TEST(CpuGrad, CrossEntropyGradRejectsBadLabels) {
  try {
    evaluateOne(OpCode::CrossEntropyGrad,
                {{DType::F32, {2, 3}, {0, 0, 0, 0, 0, 0}},
                 {DType::I64, {2}, {1, 3}},
                 {DType::F32, {}, {1}}},
                {2, 3}, {{"ignore_index", int64_t(-100)}, {"reduction", int64_t(0)}});
    FAIL() << "expected ExecutionError";
  } catch (const ExecutionError &error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("cross_entropy_grad at grad.mlir:1:1"), std::string::npos) << message;
    EXPECT_NE(message.find("label 3 at row 1"), std::string::npos) << message;
  }
}

TEST(CpuGrad, GradSeedAndGlobalNorm) {
  EXPECT_EQ(
      evaluateOne(OpCode::GradSeed, {{DType::F32, {}, {1024}}}, {}, {{"accum_steps", int64_t(4)}}),
      (std::vector<double>{256}));
  EXPECT_EQ(evaluateOne(OpCode::GradSeed, {}, {}, {{"accum_steps", int64_t(2)}}),
            (std::vector<double>{0.5}));
  // sqrt(3^2 + 4^2 + 12^2) = 13 over two buffers of different dtypes.
  EXPECT_EQ(evaluateOne(OpCode::GlobalNorm,
                        {{DType::F32, {2}, {3, 4}}, {DType::BF16, {1, 1}, {-12}}}, {}),
            (std::vector<double>{13}));
}

//===----------------------------------------------------------------------===//
// Finite differences of the forward opcodes
//===----------------------------------------------------------------------===//

TEST(CpuGradFiniteDifferences, Elementwise) {
  // Every activation gradient opcode (OpCodes.def's AMPC_UNARY_GRAD_OP lines, "name_grad")
  // against central differences of its forward opcode "name", at inputs on both sides of every
  // kink the activations have (0 for relu, -3 and 3 for the hard ones) and at least 0.15 from it.
  const Shape shape = {2, 3, 4};
  const std::vector<double> x = {-6.1, -5.3, -4.4, -3.6, -3.15, -2.8, -2.2, -1.7,
                                 -1.1, -0.6, -0.2, 0.15,  0.45,  0.9,  1.4,  1.9,
                                 2.35, 2.8,  3.2,  3.7,  4.3,   5.1,  6.6,  -0.95};
  const std::vector<double> dy = randomValues(24, 2);
  const TensorSpec xSpec{DType::F32, shape, x}, dySpec{DType::F32, shape, dy};
  struct Case {
    OpCode forward, grad;
    Attrs attrs;
  };
  std::vector<Case> cases = {
      Case{OpCode::Gelu, OpCode::GeluGrad, {{"approximate", int64_t(0)}}},
      Case{OpCode::Gelu, OpCode::GeluGrad, {{"approximate", int64_t(1)}}}};
#define AMPC_UNARY_GRAD_OP(Name, Spelling, ...)                                                    \
  {                                                                                                \
    const std::string name = Spelling;                                                             \
    std::optional<OpCode> forward = plan::opCodeFromName(name.substr(0, name.size() - 5));         \
    ASSERT_TRUE(forward) << name;                                                                  \
    cases.push_back(Case{*forward, OpCode::Name, {}});                                             \
  }
#include "runtime/plan/OpCodes.def"
  EXPECT_GE(cases.size(), 5u);
  for (const Case &c : cases) {
    SCOPED_TRACE(plan::opCodeName(c.grad));
    expectRelativeClose(evaluateOne(c.grad, {xSpec, dySpec}, shape, c.attrs),
                        numericGradient(c.forward, {xSpec}, 0, shape, c.attrs, dy));
  }
}

TEST(CpuGradFiniteDifferences, PadIsTheGradientOfSlice) {
  const TensorSpec x{DType::F32, {3, 5}, randomValues(15, 3)};
  const std::vector<double> dy = randomValues(4, 4);
  const std::vector<int64_t> starts = {1, 2};
  expectRelativeClose(
      evaluateOne(OpCode::Pad, {{DType::F32, {2, 2}, dy}}, {3, 5}, {{"low", starts}}),
      numericGradient(OpCode::Slice, {x}, 0, {2, 2}, {{"starts", starts}}, dy));
}

TEST(CpuGradFiniteDifferences, Max) {
  // Distinct random values: the maximum is unique and stable under +-h.
  const TensorSpec x{DType::F32, {2, 3, 4}, randomValues(24, 5)};
  struct Case {
    std::vector<int64_t> axes;
    int64_t keepdims;
    Shape reduced;
  };
  for (const Case &c : {Case{{1}, 0, {2, 4}}, Case{{0, 2}, 1, {1, 3, 1}}}) {
    const Attrs attrs = {{"axes", c.axes}, {"keepdims", c.keepdims}};
    const std::vector<double> dy =
        randomValues(static_cast<size_t>(plan::numElements(c.reduced)), 6);
    expectRelativeClose(
        evaluateOne(OpCode::MaxGrad, {x, {DType::F32, c.reduced, dy}}, {2, 3, 4}, attrs),
        numericGradient(OpCode::Max, {x}, 0, c.reduced, attrs, dy));
  }
}

TEST(CpuGradFiniteDifferences, Embedding) {
  const TensorSpec table{DType::F32, {4, 3}, randomValues(12, 7)};
  const TensorSpec ids{DType::I64, {2, 3}, {3, 0, 3, 1, 3, 0}};
  const std::vector<double> dy = randomValues(18, 8);
  expectRelativeClose(
      evaluateOne(OpCode::EmbeddingGrad, {ids, {DType::F32, {2, 3, 3}, dy}}, {4, 3}),
      numericGradient(OpCode::Embedding, {table, ids}, 0, {2, 3, 3}, {}, dy));
}

TEST(CpuGradFiniteDifferences, LayerNorm) {
  const Shape shape = {3, 5};
  const TensorSpec x{DType::F32, shape, randomValues(15, 9, -2, 2)};
  const TensorSpec gamma{DType::F32, {5}, randomValues(5, 10, 0.5, 1.5)};
  const TensorSpec beta{DType::F32, {5}, randomValues(5, 11)};
  const std::vector<double> dy = randomValues(15, 12);
  const Attrs attrs = {{"epsilon", 1e-5}};
  auto grads = evaluate(OpCode::LayerNormGrad, {x, gamma, {DType::F32, shape, dy}},
                        {{DType::F32, shape}, {DType::F32, {5}}, {DType::F32, {5}}}, attrs);
  for (size_t which = 0; which < 3; ++which) {
    SCOPED_TRACE(which);
    expectRelativeClose(grads[which], numericGradient(OpCode::LayerNorm, {x, gamma, beta}, which,
                                                      shape, attrs, dy));
  }
}

TEST(CpuGradFiniteDifferences, RmsNorm) {
  const Shape shape = {2, 2, 5};
  const TensorSpec x{DType::F32, shape, randomValues(20, 13, -2, 2)};
  const TensorSpec gamma{DType::F32, {5}, randomValues(5, 14, 0.5, 1.5)};
  const std::vector<double> dy = randomValues(20, 15);
  const Attrs attrs = {{"epsilon", 1e-6}};
  auto grads = evaluate(OpCode::RmsNormGrad, {x, gamma, {DType::F32, shape, dy}},
                        {{DType::F32, shape}, {DType::F32, {5}}}, attrs);
  for (size_t which = 0; which < 2; ++which) {
    SCOPED_TRACE(which);
    expectRelativeClose(grads[which],
                        numericGradient(OpCode::RmsNorm, {x, gamma}, which, shape, attrs, dy));
  }
}

TEST(CpuGradFiniteDifferences, Softmax) {
  // [2, 3, 4] scores: T = 3 queries, S = 4 keys when causal.
  const Shape shape = {2, 3, 4};
  const TensorSpec x{DType::F32, shape, randomValues(24, 16, -2, 2)};
  const std::vector<double> dy = randomValues(24, 17);
  for (int64_t causal : {0, 1}) {
    SCOPED_TRACE(causal);
    const Attrs attrs = {{"causal", causal}};
    const std::vector<double> y = evaluateOne(OpCode::Softmax, {x}, shape, attrs);
    expectRelativeClose(
        evaluateOne(OpCode::SoftmaxGrad, {{DType::F32, shape, y}, {DType::F32, shape, dy}}, shape),
        numericGradient(OpCode::Softmax, {x}, 0, shape, attrs, dy));
  }
}

TEST(CpuGradFiniteDifferences, Attention) {
  // Two batch dims, T = 3 queries, S = 5 keys, head dim 4, value dim 3.
  const TensorSpec q{DType::F32, {2, 2, 3, 4}, randomValues(48, 18)};
  const TensorSpec k{DType::F32, {2, 2, 5, 4}, randomValues(80, 19)};
  const TensorSpec v{DType::F32, {2, 2, 5, 3}, randomValues(60, 20)};
  const Shape out = {2, 2, 3, 3};
  const std::vector<double> dy = randomValues(36, 21);
  for (int64_t causal : {0, 1}) {
    SCOPED_TRACE(causal);
    const Attrs attrs = {{"causal", causal}, {"scale", 0.7}};
    auto grads =
        evaluate(OpCode::AttentionGrad, {q, k, v, {DType::F32, out, dy}},
                 {{DType::F32, q.shape}, {DType::F32, k.shape}, {DType::F32, v.shape}}, attrs);
    for (size_t which = 0; which < 3; ++which) {
      SCOPED_TRACE(which);
      expectRelativeClose(grads[which],
                          numericGradient(OpCode::Attention, {q, k, v}, which, out, attrs, dy));
    }
    // The forward with its row log-sum-exp: the same output, lse = log sum_j exp(scale q.k_j)
    // over the visible keys; the gradient reading the saved (o, lse) is the same.
    const Shape rows = {2, 2, 3};
    auto forward = evaluate(OpCode::Attention, {q, k, v},
                            {{DType::F32, out}, {DType::F32, rows}}, attrs);
    EXPECT_EQ(forward[0], evaluateOne(OpCode::Attention, {q, k, v}, out, attrs));
    for (int64_t slice = 0; slice < 4; ++slice)
      for (int64_t t = 0; t < 3; ++t) {
        const int64_t visible = causal ? t + (5 - 3) + 1 : 5;
        double total = 0;
        for (int64_t s = 0; s < visible; ++s) {
          double dot = 0;
          for (int64_t d = 0; d < 4; ++d)
            dot += q.values[(slice * 3 + t) * 4 + d] * k.values[(slice * 5 + s) * 4 + d];
          total += std::exp(0.7 * dot);
        }
        EXPECT_NEAR(forward[1][slice * 3 + t], std::log(total), 1e-12);
      }
    auto saved = evaluate(
        OpCode::AttentionGrad,
        {q, k, v, {DType::F32, out, dy}, {DType::F32, out, forward[0]}, {DType::F32, rows, forward[1]}},
        {{DType::F32, q.shape}, {DType::F32, k.shape}, {DType::F32, v.shape}}, attrs);
    EXPECT_EQ(saved, grads);
  }
}

TEST(CpuGradFiniteDifferences, QkvAttention) {
  // qkv [2, T = 3, 3 x H = 2 x Dh = 4]: q, k, v side by side, heads inside each.
  const int64_t batch = 2, tokens = 3, heads = 2, headDim = 4, width = heads * headDim;
  const TensorSpec qkv{DType::F32, {batch, tokens, 3 * width}, randomValues(144, 40)};
  const Shape out = {batch, tokens, width}, rows = {batch, heads, tokens};
  const std::vector<double> dy = randomValues(48, 41);
  // Part `part` of a packed [batch, tokens, parts x width] tensor as [batch, heads, tokens, Dh],
  // and back.
  auto index = [&](int64_t parts, int64_t part, int64_t b, int64_t h, int64_t t, int64_t d) {
    return ((b * tokens + t) * parts + part) * width + h * headDim + d;
  };
  auto unpack = [&](const std::vector<double> &packed, int64_t parts, int64_t part) {
    std::vector<double> slices;
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t h = 0; h < heads; ++h)
        for (int64_t t = 0; t < tokens; ++t)
          for (int64_t d = 0; d < headDim; ++d)
            slices.push_back(packed[index(parts, part, b, h, t, d)]);
    return slices;
  };
  const Shape sliceShape = {batch, heads, tokens, headDim};
  const TensorSpec q{DType::F32, sliceShape, unpack(qkv.values, 3, 0)},
      k{DType::F32, sliceShape, unpack(qkv.values, 3, 1)},
      v{DType::F32, sliceShape, unpack(qkv.values, 3, 2)},
      dySlices{DType::F32, sliceShape, unpack(dy, 1, 0)};
  for (int64_t causal : {0, 1}) {
    SCOPED_TRACE(causal);
    const Attrs attrs = {{"heads", heads}, {"causal", causal}, {"scale", 0.6}};
    const Attrs sliceAttrs = {{"causal", causal}, {"scale", 0.6}};
    // The forward is attention over the head-major slices, bit for bit, lse included.
    auto packed = evaluate(OpCode::QkvAttention, {qkv}, {{DType::F32, out}, {DType::F32, rows}},
                           attrs);
    auto sliced = evaluate(OpCode::Attention, {q, k, v},
                           {{DType::F32, sliceShape}, {DType::F32, rows}}, sliceAttrs);
    EXPECT_EQ(unpack(packed[0], 1, 0), sliced[0]);
    EXPECT_EQ(packed[1], sliced[1]);
    // The gradient: against finite differences, and bit for bit attention_grad's dq, dk, dv.
    const std::vector<double> grad = evaluateOne(
        OpCode::QkvAttentionGrad, {qkv, {DType::F32, out, dy}}, qkv.shape, attrs);
    expectRelativeClose(grad, numericGradient(OpCode::QkvAttention, {qkv}, 0, out, attrs, dy));
    auto slicedGrads = evaluate(
        OpCode::AttentionGrad, {q, k, v, dySlices},
        {{DType::F32, sliceShape}, {DType::F32, sliceShape}, {DType::F32, sliceShape}},
        sliceAttrs);
    for (int64_t part = 0; part < 3; ++part)
      EXPECT_EQ(unpack(grad, 3, part), slicedGrads[part]) << "part " << part;
    // Reading the saved o and lse changes nothing.
    EXPECT_EQ(evaluateOne(OpCode::QkvAttentionGrad,
                          {qkv, {DType::F32, out, dy}, {DType::F32, out, packed[0]},
                           {DType::F32, rows, packed[1]}},
                          qkv.shape, attrs),
              grad);
  }
}

TEST(CpuGradFiniteDifferences, CrossEntropy) {
  const TensorSpec logits{DType::F32, {2, 3, 5}, randomValues(30, 22, -2, 2)};
  // One ignored label (-100) among the six rows.
  const TensorSpec labels{DType::I64, {2, 3}, {4, 0, -100, 2, 2, 1}};
  const double dloss = 0.7;
  for (int64_t reduction : {0, 1}) {
    SCOPED_TRACE(reduction);
    const Attrs attrs = {{"ignore_index", int64_t(-100)}, {"reduction", reduction}};
    const std::vector<double> grad = evaluateOne(
        OpCode::CrossEntropyGrad, {logits, labels, {DType::F32, {}, {dloss}}}, {2, 3, 5}, attrs);
    expectRelativeClose(
        grad, numericGradient(OpCode::CrossEntropy, {logits, labels}, 0, {}, attrs, {dloss}));
    for (int c = 0; c < 5; ++c)
      EXPECT_EQ(grad[2 * 5 + c], 0.0); // the ignored row
  }
}

//===----------------------------------------------------------------------===//
// Float precision follows the double reference
//===----------------------------------------------------------------------===//

TEST(CpuGrad, F32MatchesF64) {
  const TensorSpec q{DType::F32, {2, 4, 8}, randomValues(64, 23)};
  const TensorSpec k{DType::F32, {2, 6, 8}, randomValues(96, 24)};
  const TensorSpec v{DType::F32, {2, 6, 8}, randomValues(96, 25)};
  const TensorSpec dy{DType::F32, {2, 4, 8}, randomValues(64, 26)};
  const Attrs attrs = {{"causal", int64_t(1)}, {"scale", 0.35}};
  const std::vector<ResultSpec> results = {
      {DType::F32, q.shape}, {DType::F32, k.shape}, {DType::F32, v.shape}};
  // Inputs rounded to float first, so both precisions see the same data.
  std::vector<TensorSpec> operands = {q, k, v, dy};
  for (TensorSpec &operand : operands)
    for (double &value : operand.values)
      value = static_cast<float>(value);
  auto single = evaluate(OpCode::AttentionGrad, operands, results, attrs, Precision::F32);
  auto reference = evaluate(OpCode::AttentionGrad, operands, results, attrs, Precision::F64);
  for (size_t i = 0; i < 3; ++i)
    expectRelativeClose(single[i], reference[i], 1e-5);

  const TensorSpec x{DType::F32, {4, 16}, randomValues(64, 27)};
  const TensorSpec gamma{DType::F32, {16}, randomValues(16, 28)};
  const TensorSpec g{DType::F32, {4, 16}, randomValues(64, 29)};
  std::vector<TensorSpec> norm = {x, gamma, g};
  for (TensorSpec &operand : norm)
    for (double &value : operand.values)
      value = static_cast<float>(value);
  const std::vector<ResultSpec> normResults = {
      {DType::F32, {4, 16}}, {DType::F32, {16}}, {DType::F32, {16}}};
  auto normSingle =
      evaluate(OpCode::LayerNormGrad, norm, normResults, {{"epsilon", 1e-5}}, Precision::F32);
  auto normReference =
      evaluate(OpCode::LayerNormGrad, norm, normResults, {{"epsilon", 1e-5}}, Precision::F64);
  for (size_t i = 0; i < 3; ++i)
    expectRelativeClose(normSingle[i], normReference[i], 1e-5);
}

} // namespace
