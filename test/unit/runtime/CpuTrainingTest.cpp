//===- CpuTrainingTest.cpp - Optimizer steps, schedules and the training API
//
// AdamW and SGD are run for three optimizer steps through a small training
// plan (gradients fed as an input, accumulated into state, then the
// optimizer step) and compared with a plain scalar loop in double written
// here from the torch.optim formulas. The learning-rate schedule is checked
// at hand-computed points; the executor's training API (state, reset,
// setBufferValues, runOptimizerStep, learningRate) on small plans.
//
//===----------------------------------------------------------------------===//

#include "CpuTestUtils.h"

#include <gtest/gtest.h>

#include <cmath>

using namespace ampc;
using namespace ampc::test;
using cpu::ExecutionError;
using cpu::Executor;
using cpu::Precision;
using cpu::RunOptions;
using plan::InitKind;
using V = std::vector<int64_t>;

namespace {

constexpr int64_t kCount = 5;

/// A training plan for one parameter w [5]: the micro step accumulates the
/// input "g" (the gradient, supplied by the test) into state w.grad and
/// computes loss = sum(g); the optimizer step computes the global norm, a
/// constant learning rate, and one adamw or sgd step.
struct OptimizerPlan {
  PlanBuilder b;
  uint32_t w, g, grad, first, second = 0, norm, lr;

  OptimizerPlan(bool adamw, const Attrs &attrs, double learningRate,
                int64_t accumulationSteps = 1) {
    w = b.parameter("w", DType::F32, {kCount});
    g = b.input("g", DType::F32, {kCount});
    grad = b.state("w.grad", {kCount});
    b.instruction(OpCode::Accumulate, {grad, g}, {grad});
    b.plan.loss =
        b.op(OpCode::Sum, {g}, DType::F32, {}, {{"axes", V{0}}, {"keepdims", int64_t(0)}});
    norm = b.optimizerOp(OpCode::GlobalNorm, {grad}, DType::F32, {});
    lr = b.optimizerOp(OpCode::LrSchedule, {}, DType::F32, {},
                       {{"kind", int64_t(0)},
                        {"lr", learningRate},
                        {"min_lr", 0.0},
                        {"warmup_steps", int64_t(0)},
                        {"decay_steps", int64_t(0)}});
    first = b.state(adamw ? "w.m" : "w.momentum", {kCount});
    if (adamw) {
      second = b.state("w.v", {kCount});
      b.instruction(OpCode::AdamW, {w, grad, first, second, lr, norm}, {w, grad, first, second},
                    attrs, true);
    } else {
      b.instruction(OpCode::Sgd, {w, grad, first, lr, norm}, {w, grad, first}, attrs, true);
    }
    b.plan.gradNorm = norm;
    b.plan.learningRate = lr;
    b.plan.accumulationSteps = accumulationSteps;
  }
};

const std::vector<double> kInitial = {0.5, -1.25, 2.0, 0.0, -0.75};
/// The gradients of the three steps.
const std::vector<std::vector<double>> kGradients = {
    {0.3, -0.2, 0.9, -1.1, 0.05}, {-0.4, 0.6, 0.1, 0.7, -0.3}, {1.5, 0.25, -0.8, 0.2, 0.4}};

double l2(const std::vector<double> &values) {
  double total = 0;
  for (double value : values)
    total += value * value;
  return std::sqrt(total);
}

/// torch's clip_grad_norm_ factor.
double clipFactor(double clipNorm, double norm) {
  return clipNorm > 0 ? std::min(1.0, clipNorm / (norm + 1e-6)) : 1.0;
}

/// Feeds kGradients[step] as the gradient, runs the micro step and optimizer
/// step \p step; returns the gradient norm the optimizer step computed.
double runStep(Executor &executor, const OptimizerPlan &setup, int step) {
  executor.setBufferValues(setup.g, kGradients[step]);
  RunOptions options;
  options.step = static_cast<uint64_t>(step);
  executor.run(options);
  return executor.runOptimizerStep(options);
}

struct AdamWCase {
  double lr, beta1, beta2, eps, weightDecay, clipNorm;
};

/// Three AdamW steps on the executor, compared with a scalar loop.
void checkAdamW(const AdamWCase &c, Precision precision, double tolerance) {
  OptimizerPlan setup(true,
                      {{"beta1", c.beta1},
                       {"beta2", c.beta2},
                       {"eps", c.eps},
                       {"weight_decay", c.weightDecay},
                       {"clip_norm", c.clipNorm}},
                      c.lr);
  Executor executor(setup.b.plan, precision);
  executor.setParameterValues("w", kInitial);

  std::vector<double> param = kInitial, m(kCount, 0.0), v(kCount, 0.0);
  for (int step = 0; step < 3; ++step) {
    SCOPED_TRACE(step);
    const double norm = runStep(executor, setup, step);

    // The reference: torch.optim.AdamW after clip_grad_norm_.
    const double expectedNorm = l2(kGradients[step]);
    const double clip = clipFactor(c.clipNorm, expectedNorm);
    const double t = step + 1;
    for (int64_t i = 0; i < kCount; ++i) {
      const double g = kGradients[step][i] * clip;
      param[i] *= 1 - c.lr * c.weightDecay;
      m[i] = c.beta1 * m[i] + (1 - c.beta1) * g;
      v[i] = c.beta2 * v[i] + (1 - c.beta2) * g * g;
      const double denominator = std::sqrt(v[i]) / std::sqrt(1 - std::pow(c.beta2, t)) + c.eps;
      param[i] -= c.lr / (1 - std::pow(c.beta1, t)) * m[i] / denominator;
    }
    EXPECT_NEAR(norm, expectedNorm, tolerance * expectedNorm);
    EXPECT_NEAR(executor.learningRate(), c.lr, tolerance * c.lr);
    expectNear(executor.parameterValues("w"), param, tolerance);
    expectNear(executor.bufferValues(setup.first), m, tolerance);
    expectNear(executor.bufferValues(setup.second), v, tolerance);
    expectNear(executor.bufferValues(setup.grad), std::vector<double>(kCount, 0.0), 0);
  }
}

TEST(CpuTraining, AdamWClippingInactive) {
  // clip_norm 10 is above every step's norm (at most ~1.6): no scaling.
  const AdamWCase c{0.01, 0.9, 0.999, 1e-8, 0.1, 10.0};
  checkAdamW(c, Precision::F64, 1e-14);
  checkAdamW(c, Precision::F32, 2e-6);
  // clip_norm 0 disables clipping.
  checkAdamW({0.02, 0.8, 0.95, 1e-6, 0.0, 0.0}, Precision::F64, 1e-14);
}

TEST(CpuTraining, AdamWClippingActive) {
  // Every step's norm is above 0.5, so each gradient is scaled down.
  for (const auto &g : kGradients)
    ASSERT_GT(l2(g), 0.5);
  const AdamWCase c{0.05, 0.9, 0.95, 1e-8, 0.01, 0.5};
  checkAdamW(c, Precision::F64, 1e-14);
  checkAdamW(c, Precision::F32, 2e-6);
}

struct SgdCase {
  double lr, momentum, weightDecay, clipNorm;
};

void checkSgd(const SgdCase &c, Precision precision, double tolerance) {
  OptimizerPlan setup(
      false, {{"momentum", c.momentum}, {"weight_decay", c.weightDecay}, {"clip_norm", c.clipNorm}},
      c.lr);
  Executor executor(setup.b.plan, precision);
  executor.setParameterValues("w", kInitial);
  std::vector<double> param = kInitial, buffer(kCount, 0.0);
  for (int step = 0; step < 3; ++step) {
    SCOPED_TRACE(step);
    runStep(executor, setup, step);

    // The reference: torch.optim.SGD (dampening 0, no Nesterov) after
    // clip_grad_norm_; the first step sets buf = d_p.
    const double clip = clipFactor(c.clipNorm, l2(kGradients[step]));
    for (int64_t i = 0; i < kCount; ++i) {
      const double d = kGradients[step][i] * clip + c.weightDecay * param[i];
      buffer[i] = step == 0 ? d : c.momentum * buffer[i] + d;
      param[i] -= c.lr * (c.momentum != 0 ? buffer[i] : d);
    }
    expectNear(executor.parameterValues("w"), param, tolerance);
    expectNear(executor.bufferValues(setup.first), buffer, tolerance);
    expectNear(executor.bufferValues(setup.grad), std::vector<double>(kCount, 0.0), 0);
  }
}

TEST(CpuTraining, SgdWithMomentumAndWeightDecay) {
  checkSgd({0.1, 0.9, 0.01, 0.0}, Precision::F64, 1e-14);  // no clipping
  checkSgd({0.1, 0.9, 0.01, 10.0}, Precision::F64, 1e-14); // inactive
  checkSgd({0.1, 0.9, 0.01, 0.5}, Precision::F64, 1e-14);  // active
  checkSgd({0.1, 0.9, 0.01, 0.5}, Precision::F32, 2e-6);
}

TEST(CpuTraining, PlainSgd) { checkSgd({0.2, 0.0, 0.0, 0.0}, Precision::F64, 1e-15); }

//===----------------------------------------------------------------------===//
// lr_schedule
//===----------------------------------------------------------------------===//

double learningRateAt(int64_t kind, double lr, double minLr, int64_t warmup, int64_t decay,
                      uint64_t step, uint64_t totalSteps = 0) {
  RunOptions options;
  options.step = step;
  options.totalSteps = totalSteps;
  return runOp(OpCode::LrSchedule, {}, DType::F32, {},
               {{"kind", kind},
                {"lr", lr},
                {"min_lr", minLr},
                {"warmup_steps", warmup},
                {"decay_steps", decay}},
               Precision::F64, options)[0];
}

TEST(CpuTraining, LrScheduleConstant) {
  EXPECT_EQ(learningRateAt(0, 3e-4, 0, 0, 0, 0), 3e-4);
  EXPECT_EQ(learningRateAt(0, 3e-4, 0, 0, 0, 12345), 3e-4);
  // min_lr and decay_steps do not matter for a constant schedule.
  EXPECT_EQ(learningRateAt(0, 3e-4, 1e-5, 0, 10, 50), 3e-4);
}

TEST(CpuTraining, LrScheduleWarmup) {
  // Linear warmup over 10 steps: step s gives lr (s + 1) / 10.
  EXPECT_DOUBLE_EQ(learningRateAt(0, 1e-3, 0, 10, 0, 0), 1e-4);
  EXPECT_DOUBLE_EQ(learningRateAt(0, 1e-3, 0, 10, 0, 4), 5e-4);
  EXPECT_DOUBLE_EQ(learningRateAt(0, 1e-3, 0, 10, 0, 9), 1e-3);
  EXPECT_DOUBLE_EQ(learningRateAt(0, 1e-3, 0, 10, 0, 10), 1e-3);
  // Cosine warms up the same way.
  EXPECT_DOUBLE_EQ(learningRateAt(1, 1e-3, 1e-4, 10, 110, 4), 5e-4);
}

TEST(CpuTraining, LrScheduleCosine) {
  // lr 1e-3 -> 1e-4 over steps 10..110 (warmup 10, decay 110).
  EXPECT_DOUBLE_EQ(learningRateAt(1, 1e-3, 1e-4, 10, 110, 10), 1e-3); // start
  EXPECT_DOUBLE_EQ(learningRateAt(1, 1e-3, 1e-4, 10, 110, 60),
                   5.5e-4);                                            // middle: cos(pi/2) = 0
  EXPECT_DOUBLE_EQ(learningRateAt(1, 1e-3, 1e-4, 10, 110, 110), 1e-4); // end
  EXPECT_DOUBLE_EQ(learningRateAt(1, 1e-3, 1e-4, 10, 110, 500), 1e-4); // after
  // A quarter of the way: min + (1 + cos(pi/4)) / 2 (lr - min).
  EXPECT_DOUBLE_EQ(learningRateAt(1, 1e-3, 1e-4, 10, 110, 35),
                   1e-4 + 0.5 * (1 + std::sqrt(0.5)) * 9e-4);
}

TEST(CpuTraining, LrScheduleCosineUsesTotalStepsWhenDecayIsZero) {
  EXPECT_DOUBLE_EQ(learningRateAt(1, 1e-3, 1e-4, 10, 0, 60, 110), 5.5e-4);
  EXPECT_DOUBLE_EQ(learningRateAt(1, 1e-3, 1e-4, 10, 0, 110, 110), 1e-4);
  // A longer run decays more slowly: 50 of 200 decay steps.
  EXPECT_DOUBLE_EQ(learningRateAt(1, 1e-3, 1e-4, 10, 0, 60, 210),
                   1e-4 + 0.5 * (1 + std::sqrt(0.5)) * 9e-4);
  // decay_steps, when set, wins over totalSteps.
  EXPECT_DOUBLE_EQ(learningRateAt(1, 1e-3, 1e-4, 10, 110, 60, 210), 5.5e-4);
}

//===----------------------------------------------------------------------===//
// The executor's training API
//===----------------------------------------------------------------------===//

TEST(CpuTraining, MicroStepsAccumulateIntoState) {
  OptimizerPlan setup(false, {{"momentum", 0.0}, {"weight_decay", 0.0}, {"clip_norm", 0.0}}, 0.5,
                      2);
  Executor executor(setup.b.plan, Precision::F32);
  executor.setParameterValues("w", kInitial);
  // State starts at zero.
  EXPECT_EQ(executor.bufferValues(setup.grad), std::vector<double>(kCount, 0.0));
  std::vector<double> sum(kCount);
  for (int i = 0; i < 2; ++i) {
    executor.setBufferValues(setup.g, kGradients[i]);
    RunOptions options;
    options.step = static_cast<uint64_t>(i);
    // Freeing temporaries must leave state and parameters alone.
    options.keepTemporaries = false;
    executor.run(options);
    for (int64_t e = 0; e < kCount; ++e)
      sum[e] = static_cast<float>(sum[e] + static_cast<float>(kGradients[i][e]));
  }
  expectNear(executor.bufferValues(setup.grad), sum, 0);
  RunOptions options;
  options.keepTemporaries = false;
  const double norm = executor.runOptimizerStep(options);
  EXPECT_NEAR(norm, l2(sum), 1e-6);
  // The logged scalars outlive their last reader.
  EXPECT_NEAR(executor.bufferValues(setup.norm)[0], l2(sum), 1e-6);
  EXPECT_EQ(executor.learningRate(), 0.5);
  std::vector<double> expected(kCount);
  for (int64_t e = 0; e < kCount; ++e)
    expected[e] =
        static_cast<float>(static_cast<float>(kInitial[e]) - 0.5f * static_cast<float>(sum[e]));
  expectNear(executor.parameterValues("w"), expected, 0);
  expectNear(executor.bufferValues(setup.grad), std::vector<double>(kCount, 0.0), 0);
}

TEST(CpuTraining, ResetStateAndSetBufferValues) {
  OptimizerPlan setup(
      true,
      {{"beta1", 0.9}, {"beta2", 0.999}, {"eps", 1e-8}, {"weight_decay", 0.0}, {"clip_norm", 0.0}},
      0.01);
  Executor executor(setup.b.plan, Precision::F64);
  executor.setBufferValues(setup.first, {1, 2, 3, 4, 5});
  executor.setBufferValues(setup.grad, {0.5, 0.5, 0.5, 0.5, 0.5});
  EXPECT_EQ(executor.bufferValues(setup.first), (std::vector<double>{1, 2, 3, 4, 5}));
  executor.resetState();
  EXPECT_EQ(executor.bufferValues(setup.first), std::vector<double>(kCount, 0.0));
  EXPECT_EQ(executor.bufferValues(setup.grad), std::vector<double>(kCount, 0.0));
  // Parameters and inputs can be set too; temporaries cannot.
  executor.setBufferValues(setup.w, kInitial);
  EXPECT_EQ(executor.parameterValues("w"), kInitial);
  try {
    executor.setBufferValues(setup.b.plan.loss, {1});
    FAIL() << "expected ExecutionError";
  } catch (const ExecutionError &error) {
    EXPECT_NE(std::string(error.what()).find("is a temporary"), std::string::npos);
  }
  try {
    executor.setBufferValues(setup.grad, {1, 2});
    FAIL() << "expected ExecutionError";
  } catch (const ExecutionError &error) {
    EXPECT_NE(std::string(error.what()).find("has 5 elements, got 2"), std::string::npos);
  }
}

TEST(CpuTraining, SetBufferValuesRoundsToTheDType) {
  PlanBuilder b;
  const uint32_t h = b.input("h", DType::BF16, {2});
  const uint32_t ids = b.input("ids", DType::I32, {2}, 10);
  b.plan.loss = b.op(OpCode::Sum, {h}, DType::F32, {}, {{"axes", V{0}}, {"keepdims", int64_t(0)}});
  Executor executor(b.plan, Precision::F64);
  // bf16 has 8 significant bits, so near 1 its spacing is 2^-7: 1 + 2^-8
  // is a tie and rounds to even (1); 1 + 3 * 2^-8 is a tie between
  // 1 + 2^-7 (odd) and 1 + 2^-6 (even) and rounds to the latter.
  executor.setBufferValues(h, {1 + 0x1p-8, 1 + 3 * 0x1p-8});
  EXPECT_EQ(executor.bufferValues(h), (std::vector<double>{1, 1 + 0x1p-6}));
  executor.setBufferValues(ids, {3, 9});
  EXPECT_EQ(executor.bufferValues(ids), (std::vector<double>{3, 9}));
  EXPECT_THROW(executor.setBufferValues(ids, {3, 10}), ExecutionError);
  EXPECT_THROW(executor.setBufferValues(ids, {3, 1.5}), ExecutionError);
}

TEST(CpuTraining, ForwardPlansHaveNoOptimizerStep) {
  PlanBuilder b;
  const uint32_t x = b.input("x", DType::F32, {2});
  b.plan.loss = b.op(OpCode::Sum, {x}, DType::F32, {}, {{"axes", V{0}}, {"keepdims", int64_t(0)}});
  Executor executor(b.plan, Precision::F32);
  EXPECT_THROW(executor.runOptimizerStep({}), plan::PlanError);
  EXPECT_THROW(executor.learningRate(), plan::PlanError);
}

} // namespace
