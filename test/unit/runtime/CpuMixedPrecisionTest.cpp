//===- CpuMixedPrecisionTest.cpp - Parameter copies and loss scaling ------===//
//
// The CPU backend's side of mixed precision, through small training plans
// whose gradient is an input supplied by the test (already multiplied by the
// loss scale, as a scaled backward pass would produce it): accumulate's
// unscaling and found flag, adamw/sgd skipping a step (GradScaler's
// semantics, torch's applied-step count in the bias corrections) and
// refreshing the parameter's bf16/f16 copy, update_loss_scale's trajectory
// and floor report, injectNonFinite, and the debugNonFinite report. Expected
// values come from scalar loops and hand-written trajectories, not from the
// code under test.
//
//===----------------------------------------------------------------------===//

#include "CpuTestUtils.h"

#include "runtime/numerics/Float16.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

using namespace ampc;
using namespace ampc::test;
using cpu::Executor;
using cpu::Precision;
using cpu::RunOptions;
using plan::InitKind;
using plan::LossScaleMode;
using V = std::vector<int64_t>;

namespace {

constexpr int64_t kCount = 4;
const double kInf = std::numeric_limits<double>::infinity();
const double kNaN = std::numeric_limits<double>::quiet_NaN();

/// Loss-scaling settings of a ScaledPlan.
struct Scaling {
  LossScaleMode mode = LossScaleMode::Dynamic;
  float initialScale = 1024;
  float growthFactor = 2;
  float backoffFactor = 0.5;
  int64_t growthInterval = 2000;
  float minScale = 0;
};

/// One parameter w [4] (f32, Normal init) trained by adamw or sgd with loss
/// scaling (unless mode None) and, when \p copyDType is bf16 or f16, a
/// reduced-precision copy of w. The micro step unscales the input "g" into
/// w.grad and computes loss = sum(g); the optimizer step computes the
/// global norm, a constant learning rate, the optimizer, update_loss_scale.
struct ScaledPlan {
  PlanBuilder b;
  uint32_t w, g, grad, first, second = 0, copy = 0, norm, lr;
  uint32_t scale = 0, tracker = 0, found = 0, applied = 0;

  ScaledPlan(bool adamw, const Attrs &attrs, double learningRate, const Scaling &settings,
             DType copyDType = DType::F32) {
    w = b.parameter("w", DType::F32, {kCount}, InitKind::Normal, 0, 0.7);
    g = b.input("g", DType::F32, {kCount});
    grad = b.state("w.grad", {kCount});
    const bool scaled = settings.mode != LossScaleMode::None;
    if (copyDType != DType::F32) {
      copy = b.buffer("w.copy", copyDType, {kCount}, plan::BufferRole::ParameterCopy);
      b.plan.parameterCopies.push_back({copy, w});
    }
    if (scaled) {
      scale = b.state("scale", {});
      tracker = b.state("tracker", {});
      found = b.state("found", {});
      applied = b.state("applied", {});
      plan::LossScaling &s = b.plan.lossScaling;
      s.mode = settings.mode;
      s.initialScale = settings.initialScale;
      s.growthFactor = settings.growthFactor;
      s.backoffFactor = settings.backoffFactor;
      s.growthInterval = settings.growthInterval;
      s.minScale = settings.minScale;
      s.scale = scale;
      s.growthTracker = tracker;
      s.foundNonFinite = found;
      s.appliedSteps = applied;
      s.floorHits = b.state("floor_hits", {});
      b.instruction(OpCode::Accumulate, {grad, g, scale, found}, {grad, found});
    } else {
      b.instruction(OpCode::Accumulate, {grad, g}, {grad});
    }
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
    std::vector<uint32_t> operands = {w, grad, first};
    if (adamw) {
      second = b.state("w.v", {kCount});
      operands.push_back(second);
    }
    std::vector<uint32_t> results = operands;
    operands.insert(operands.end(), {lr, norm});
    if (scaled)
      operands.insert(operands.end(), {found, applied});
    if (copy) {
      operands.push_back(copy);
      results.push_back(copy);
    }
    b.instruction(adamw ? OpCode::AdamW : OpCode::Sgd, operands, results, attrs, true);
    if (scaled)
      b.instruction(OpCode::UpdateLossScale, {scale, tracker, found, applied},
                    {scale, tracker, found, applied},
                    {{"dynamic", int64_t(settings.mode == LossScaleMode::Dynamic)},
                     {"growth_factor", double(settings.growthFactor)},
                     {"backoff_factor", double(settings.backoffFactor)},
                     {"growth_interval", settings.growthInterval},
                     {"min_scale", double(settings.minScale)}},
                    true);
    b.plan.gradNorm = norm;
    b.plan.learningRate = lr;
  }
};

const Attrs kAdamW = {
    {"beta1", 0.9}, {"beta2", 0.999}, {"eps", 1e-8}, {"weight_decay", 0.1}, {"clip_norm", 0.0}};
const Attrs kSgd = {{"momentum", 0.9}, {"weight_decay", 0.01}, {"clip_norm", 0.0}};

/// Runs one micro step with gradient \p g (scaled by the caller) and returns
/// the optimizer step's gradient norm.
double step(Executor &executor, const ScaledPlan &setup, const std::vector<double> &g,
            uint64_t index, bool inject = false) {
  executor.setBufferValues(setup.g, g);
  RunOptions options;
  options.step = index;
  options.injectNonFinite = inject;
  executor.run(options);
  return executor.runOptimizerStep(options);
}

std::vector<double> times(const std::vector<double> &values, double factor) {
  std::vector<double> out;
  for (double value : values)
    out.push_back(value * factor);
  return out;
}

std::vector<double> roundedToBF16(const std::vector<double> &values) {
  std::vector<double> out;
  for (double value : values)
    out.push_back(numerics::roundToBF16(value));
  return out;
}

//===----------------------------------------------------------------------===//
// accumulate with unscaling
//===----------------------------------------------------------------------===//

TEST(CpuMixedPrecision, AccumulateUnscalesAndFlagsNonFiniteValues) {
  Scaling settings;
  settings.mode = LossScaleMode::Static;
  settings.initialScale = 8;
  for (Precision precision : {Precision::F32, Precision::F64}) {
    SCOPED_TRACE(precision == Precision::F32 ? "f32" : "f64");
    ScaledPlan setup(false, kSgd, 0.1, settings);
    Executor executor(setup.b.plan, precision);
    executor.initializeParameters(1);
    EXPECT_EQ(executor.bufferValues(setup.scale), std::vector<double>{8});
    RunOptions options;
    // Finite: acc = g / 8, found stays 0.
    executor.setBufferValues(setup.g, {8, -4, 1, 0});
    executor.run(options);
    EXPECT_EQ(executor.bufferValues(setup.grad), (std::vector<double>{1, -0.5, 0.125, 0}));
    EXPECT_EQ(executor.bufferValues(setup.found), std::vector<double>{0});
    // A second micro step adds; a scale of 3 divides in the compute type.
    executor.setBufferValues(setup.scale, {3});
    executor.setBufferValues(setup.g, {1, 2, 3, 0.1});
    executor.run(options);
    // (An f32 buffer holds floats in F32 mode and doubles in F64 mode.)
    std::vector<double> expected;
    const std::vector<double> before = {1, -0.5, 0.125, 0};
    const std::vector<double> g = {1, 2, 3, 0.1};
    for (int i = 0; i < kCount; ++i)
      expected.push_back(precision == Precision::F32 ? double(float(before[i]) + float(g[i]) / 3.0f)
                                                     : before[i] + g[i] / 3.0);
    EXPECT_EQ(executor.bufferValues(setup.grad), expected);
    EXPECT_EQ(executor.bufferValues(setup.found), std::vector<double>{0});
    // An infinite gradient sets found; the finite elements still add.
    executor.setBufferValues(setup.scale, {2});
    executor.setBufferValues(setup.grad, {0, 0, 0, 0});
    executor.setBufferValues(setup.g, {2, kInf, -6, 4});
    executor.run(options);
    std::vector<double> acc = executor.bufferValues(setup.grad);
    EXPECT_EQ(acc[0], 1);
    EXPECT_EQ(acc[1], kInf);
    EXPECT_EQ(acc[2], -3);
    EXPECT_EQ(acc[3], 2);
    EXPECT_EQ(executor.bufferValues(setup.found), std::vector<double>{1});
    // A later finite micro step does not clear the flag.
    executor.setBufferValues(setup.g, {2, 2, 2, 2});
    executor.run(options);
    EXPECT_EQ(executor.bufferValues(setup.found), std::vector<double>{1});
    // NaN is flagged like inf.
    executor.setBufferValues(setup.found, {0});
    executor.setBufferValues(setup.g, {kNaN, 0, 0, 0});
    executor.run(options);
    EXPECT_TRUE(std::isnan(executor.bufferValues(setup.grad)[0]));
    EXPECT_EQ(executor.bufferValues(setup.found), std::vector<double>{1});
  }
}

TEST(CpuMixedPrecision, UnscalingOverflowsInTheComputePrecision) {
  // 3e38 / 2^-4 overflows a float but not a double: the flag follows the
  // compute precision, as the value does.
  Scaling settings;
  settings.mode = LossScaleMode::Static;
  settings.initialScale = 0.0625f;
  for (Precision precision : {Precision::F32, Precision::F64}) {
    ScaledPlan setup(false, kSgd, 0.1, settings);
    Executor executor(setup.b.plan, precision);
    executor.initializeParameters(1);
    executor.setBufferValues(setup.g, {3e38, 0, 0, 0});
    executor.run({});
    const double expected = precision == Precision::F32 ? 1 : 0;
    EXPECT_EQ(executor.bufferValues(setup.found), std::vector<double>{expected});
    if (precision == Precision::F64)
      EXPECT_EQ(executor.bufferValues(setup.grad)[0], 3e38 * 16);
  }
}

//===----------------------------------------------------------------------===//
// adamw and sgd: skipped steps and copies
//===----------------------------------------------------------------------===//

const std::vector<double> kInitial = {0.3, -1.2, 2.5, 0.0};
const std::vector<std::vector<double>> kGradients = {
    {0.3, -0.2, 0.9, -1.1}, {-0.4, 0.6, 0.1, 0.7}, {1.5, 0.25, -0.8, 0.2}};

TEST(CpuMixedPrecision, AdamWSkipsOverflowingStepsLikeGradScaler) {
  // Step 1 applies, step 2 overflows (injected), step 3 applies. torch with
  // GradScaler: step 2 changes neither the parameter nor the moments, and
  // step 3 is AdamW's second step (state['step'] = 2), so its bias
  // corrections use t = 2.
  const double lr = 0.01, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, wd = 0.1;
  ScaledPlan setup(true, kAdamW, lr, Scaling(), DType::BF16);
  Executor executor(setup.b.plan, Precision::F64);
  executor.setParameterValues("w", kInitial);
  std::vector<double> param = kInitial, m(kCount, 0.0), v(kCount, 0.0);
  auto adamwStep = [&](const std::vector<double> &g, double t) {
    for (int64_t i = 0; i < kCount; ++i) {
      param[i] *= 1 - lr * wd;
      m[i] = beta1 * m[i] + (1 - beta1) * g[i];
      v[i] = beta2 * v[i] + (1 - beta2) * g[i] * g[i];
      const double denominator = std::sqrt(v[i]) / std::sqrt(1 - std::pow(beta2, t)) + eps;
      param[i] -= lr / (1 - std::pow(beta1, t)) * m[i] / denominator;
    }
  };

  // Step 1: scale 1024 (a power of two, so unscaling is exact).
  double scale = executor.lossScaleStatus().scale;
  EXPECT_EQ(scale, 1024);
  step(executor, setup, times(kGradients[0], scale), 0);
  adamwStep(kGradients[0], 1);
  expectNear(executor.parameterValues("w"), param, 1e-14);
  EXPECT_EQ(executor.bufferValues(setup.applied), std::vector<double>{1});
  EXPECT_FALSE(executor.lossScaleStatus().lastStepSkipped);

  // Step 2: overflow. Nothing but the gradient changes.
  const std::vector<double> paramBefore = executor.parameterValues("w");
  const std::vector<double> mBefore = executor.bufferValues(setup.first);
  const std::vector<double> vBefore = executor.bufferValues(setup.second);
  step(executor, setup, times(kGradients[1], scale), 1, /*inject=*/true);
  EXPECT_EQ(executor.parameterValues("w"), paramBefore);
  EXPECT_EQ(executor.bufferValues(setup.first), mBefore);
  EXPECT_EQ(executor.bufferValues(setup.second), vBefore);
  EXPECT_EQ(executor.bufferValues(setup.grad), std::vector<double>(kCount, 0.0));
  EXPECT_EQ(executor.bufferValues(setup.copy), roundedToBF16(paramBefore));
  EXPECT_EQ(executor.bufferValues(setup.applied), std::vector<double>{1});
  EXPECT_EQ(executor.bufferValues(setup.found), std::vector<double>{0});
  cpu::LossScaleStatus status = executor.lossScaleStatus();
  EXPECT_TRUE(status.lastStepSkipped);
  EXPECT_EQ(status.skippedSteps, 1);
  EXPECT_EQ(status.scale, 512);

  // Step 3: applied as AdamW's second step, at the halved scale.
  scale = status.scale;
  step(executor, setup, times(kGradients[2], scale), 2);
  const std::vector<double> mSaved = m, vSaved = v, paramSaved = param;
  adamwStep(kGradients[2], 2);
  expectNear(executor.parameterValues("w"), param, 1e-14);
  expectNear(executor.bufferValues(setup.first), m, 1e-14);
  expectNear(executor.bufferValues(setup.second), v, 1e-14);
  EXPECT_EQ(executor.bufferValues(setup.applied), std::vector<double>{2});
  EXPECT_EQ(executor.bufferValues(setup.copy), roundedToBF16(executor.parameterValues("w")));
  // Counting the skipped step (t = 3) would give a visibly different step.
  std::vector<double> withT3 = paramSaved;
  for (int64_t i = 0; i < kCount; ++i) {
    withT3[i] *= 1 - lr * wd;
    const double denominator =
        std::sqrt(vSaved[i] * beta2 + (1 - beta2) * kGradients[2][i] * kGradients[2][i]) /
            std::sqrt(1 - std::pow(beta2, 3)) +
        eps;
    withT3[i] -= lr / (1 - std::pow(beta1, 3)) *
                 (beta1 * mSaved[i] + (1 - beta1) * kGradients[2][i]) / denominator;
  }
  double largest = 0;
  for (int64_t i = 0; i < kCount; ++i)
    largest = std::max(largest, std::fabs(withT3[i] - param[i]));
  EXPECT_GT(largest, 1e-4);
}

TEST(CpuMixedPrecision, SgdSkipsOverflowingStepsAndRefreshesItsCopy) {
  const double lr = 0.1, momentum = 0.9, wd = 0.01;
  ScaledPlan setup(false, kSgd, lr, Scaling(), DType::F16);
  Executor executor(setup.b.plan, Precision::F64);
  executor.setParameterValues("w", kInitial);
  std::vector<double> param = kInitial, buffer(kCount, 0.0);
  for (int s = 0; s < 3; ++s) {
    SCOPED_TRACE(s);
    const bool overflow = s == 1;
    // An overflow in the gradient itself: one infinite element.
    std::vector<double> g = times(kGradients[s], executor.lossScaleStatus().scale);
    if (overflow)
      g[2] = kInf;
    step(executor, setup, g, static_cast<uint64_t>(s));
    if (!overflow)
      for (int64_t i = 0; i < kCount; ++i) {
        const double d = kGradients[s][i] + wd * param[i];
        buffer[i] = momentum * buffer[i] + d;
        param[i] -= lr * buffer[i];
      }
    expectNear(executor.parameterValues("w"), param, 1e-14);
    expectNear(executor.bufferValues(setup.first), buffer, 1e-14);
    EXPECT_EQ(executor.bufferValues(setup.grad), std::vector<double>(kCount, 0.0));
    std::vector<double> copy;
    for (double value : executor.parameterValues("w"))
      copy.push_back(numerics::roundToF16(value));
    EXPECT_EQ(executor.bufferValues(setup.copy), copy);
    EXPECT_EQ(executor.lossScaleStatus().lastStepSkipped, overflow);
  }
  EXPECT_EQ(executor.bufferValues(setup.applied), std::vector<double>{2});
  EXPECT_EQ(executor.lossScaleStatus().skippedSteps, 1);
}

TEST(CpuMixedPrecision, CopiesFollowTheirParameter) {
  for (Precision precision : {Precision::F32, Precision::F64}) {
    ScaledPlan setup(true, kAdamW, 0.01, Scaling(), DType::BF16);
    Executor executor(setup.b.plan, precision);
    // At initialisation: the rounded Normal draws (which bf16 cannot hold
    // exactly, so the rounding is visible).
    executor.initializeParameters(7);
    const std::vector<double> drawn = executor.parameterValues("w");
    EXPECT_EQ(executor.bufferValues(setup.copy), roundedToBF16(drawn));
    EXPECT_NE(executor.bufferValues(setup.copy), drawn);
    // After setParameterValues: ties round to even (1 + 2^-8 -> 1,
    // 1 + 3 * 2^-8 -> 1 + 2^-6).
    executor.setParameterValues("w", {1 + 0x1p-8, 1 + 3 * 0x1p-8, -2.0, 0.1});
    EXPECT_EQ(executor.bufferValues(setup.copy),
              (std::vector<double>{1, 1 + 0x1p-6, -2, 0.10009765625}));
    // And after setBufferValues on the parameter.
    executor.setBufferValues(setup.w, {3, 3, 3, 1.0 / 3});
    EXPECT_EQ(executor.bufferValues(setup.copy), (std::vector<double>{3, 3, 3, 0.333984375}));
    // After an applied AdamW step.
    step(executor, setup, times(kGradients[0], 1024), 0);
    const std::vector<double> updated = executor.parameterValues("w");
    EXPECT_NE(updated[0], 3);
    EXPECT_EQ(executor.bufferValues(setup.copy), roundedToBF16(updated));
    // A copy cannot be set directly.
    EXPECT_THROW(executor.setBufferValues(setup.copy, {0, 0, 0, 0}), cpu::ExecutionError);
  }
}

//===----------------------------------------------------------------------===//
// update_loss_scale
//===----------------------------------------------------------------------===//

/// Runs one optimizer step per character of \p pattern ('F' finite, 'I'
/// injected overflow) and returns the scale after each.
std::vector<double> trajectory(Executor &executor, const ScaledPlan &setup,
                               const std::string &pattern, std::string *skipped = nullptr) {
  std::vector<double> scales;
  for (size_t i = 0; i < pattern.size(); ++i) {
    step(executor, setup, {0.5, 0.5, 0.5, 0.5}, i, pattern[i] == 'I');
    const cpu::LossScaleStatus status = executor.lossScaleStatus();
    EXPECT_TRUE(status.enabled);
    scales.push_back(status.scale);
    if (skipped)
      *skipped += status.lastStepSkipped ? 'I' : 'F';
  }
  return scales;
}

TEST(CpuMixedPrecision, DynamicScaleFollowsGradScaler) {
  Scaling settings;
  settings.growthInterval = 3;
  ScaledPlan setup(false, kSgd, 0.1, settings);
  for (Precision precision : {Precision::F32, Precision::F64}) {
    Executor executor(setup.b.plan, precision);
    executor.initializeParameters(3);
    //                      step: 1     2     3     4     5     6     7    8
    //                            9     10    11
    const std::string pattern = "FFFIFFIFFFF";
    std::string skipped;
    EXPECT_EQ(trajectory(executor, setup, pattern, &skipped),
              (std::vector<double>{1024, 1024, 2048, 1024, 1024, 1024, 512, 512, 512, 1024, 1024}));
    EXPECT_EQ(skipped, pattern);
    // 9 finite steps applied; the tracker counts the one since the growth.
    EXPECT_EQ(executor.bufferValues(setup.applied), std::vector<double>{9});
    EXPECT_EQ(executor.bufferValues(setup.tracker), std::vector<double>{1});
    EXPECT_EQ(executor.lossScaleStatus().skippedSteps, 2);
    EXPECT_FALSE(executor.lossScaleStatus().floorReachedNow);

    // resetState restores the initial scale and the counters.
    executor.resetState();
    const cpu::LossScaleStatus reset = executor.lossScaleStatus();
    EXPECT_EQ(reset.scale, 1024);
    EXPECT_EQ(reset.skippedSteps, 0);
    EXPECT_FALSE(reset.lastStepSkipped);
    EXPECT_EQ(executor.bufferValues(setup.applied), std::vector<double>{0});
    EXPECT_EQ(executor.bufferValues(setup.tracker), std::vector<double>{0});
  }
}

TEST(CpuMixedPrecision, FloorIsReportedOnce) {
  Scaling settings;
  settings.minScale = 256;
  ScaledPlan setup(false, kSgd, 0.1, settings);
  Executor executor(setup.b.plan, Precision::F32);
  executor.initializeParameters(3);
  std::vector<bool> reported;
  std::vector<double> scales;
  for (int i = 0; i < 5; ++i) {
    step(executor, setup, {1, 1, 1, 1}, i, true);
    reported.push_back(executor.lossScaleStatus().floorReachedNow);
    scales.push_back(executor.lossScaleStatus().scale);
  }
  // 1024 -> 512 -> 256 (exactly the floor: not stopped) -> 256 (stopped:
  // report) -> 256 (stopped again: no second report).
  EXPECT_EQ(scales, (std::vector<double>{512, 256, 256, 256, 256}));
  EXPECT_EQ(reported, (std::vector<bool>{false, false, true, false, false}));
  EXPECT_EQ(executor.lossScaleStatus().skippedSteps, 5);
  EXPECT_EQ(executor.bufferValues(setup.applied), std::vector<double>{0});
  // After a reset the floor is reported again.
  executor.resetState();
  for (int i = 0; i < 3; ++i)
    step(executor, setup, {1, 1, 1, 1}, i, true);
  EXPECT_TRUE(executor.lossScaleStatus().floorReachedNow);
}

TEST(CpuMixedPrecision, GrowthStopsBeforeInfinity) {
  Scaling settings;
  settings.initialScale = 0x1p127f;
  settings.growthInterval = 1;
  ScaledPlan setup(false, kSgd, 0.1, settings);
  Executor executor(setup.b.plan, Precision::F32);
  executor.initializeParameters(3);
  // 2^127 * 2 is infinite in f32, so the scale stays; a backoff still works.
  EXPECT_EQ(trajectory(executor, setup, "FFI"), (std::vector<double>{0x1p127, 0x1p127, 0x1p126}));
}

TEST(CpuMixedPrecision, StaticScaleStillSkips) {
  Scaling settings;
  settings.mode = LossScaleMode::Static;
  settings.growthInterval = 1;
  ScaledPlan setup(false, kSgd, 0.1, settings);
  Executor executor(setup.b.plan, Precision::F32);
  executor.initializeParameters(3);
  std::string skipped;
  EXPECT_EQ(trajectory(executor, setup, "FIFF", &skipped),
            (std::vector<double>{1024, 1024, 1024, 1024}));
  EXPECT_EQ(skipped, "FIFF");
  EXPECT_EQ(executor.bufferValues(setup.applied), std::vector<double>{3});
  EXPECT_EQ(executor.bufferValues(setup.tracker), std::vector<double>{0});
}

TEST(CpuMixedPrecision, InjectNonFiniteNeedsLossScaling) {
  // Without loss scaling the option does nothing: the step is applied.
  Scaling none;
  none.mode = LossScaleMode::None;
  ScaledPlan plain(false, kSgd, 0.1, none);
  Executor executor(plain.b.plan, Precision::F64);
  executor.setParameterValues("w", kInitial);
  step(executor, plain, kGradients[0], 0, true);
  EXPECT_NE(executor.parameterValues("w"), kInitial);
  const cpu::LossScaleStatus status = executor.lossScaleStatus();
  EXPECT_FALSE(status.enabled);
  EXPECT_FALSE(status.lastStepSkipped);
  EXPECT_EQ(status.skippedSteps, 0);

  // With it, the micro step sets the flag and the step is skipped.
  ScaledPlan scaled(false, kSgd, 0.1, Scaling());
  Executor scaledExecutor(scaled.b.plan, Precision::F64);
  scaledExecutor.setParameterValues("w", kInitial);
  scaledExecutor.setBufferValues(scaled.g, kGradients[0]);
  RunOptions options;
  options.injectNonFinite = true;
  scaledExecutor.run(options);
  EXPECT_EQ(scaledExecutor.bufferValues(scaled.found), std::vector<double>{1});
  scaledExecutor.runOptimizerStep(options);
  EXPECT_EQ(scaledExecutor.parameterValues("w"), kInitial);
  EXPECT_TRUE(scaledExecutor.lossScaleStatus().lastStepSkipped);
}

//===----------------------------------------------------------------------===//
// debugNonFinite
//===----------------------------------------------------------------------===//

/// loss = sum(log(x * w)) with w = 1 and an SGD step on the input "g":
/// a negative x makes the log (instruction 1) the first NaN; the sum after
/// it is NaN too, but is not the first.
plan::Plan logPlan(bool debug) {
  PlanBuilder b;
  const uint32_t w = b.parameter("w", DType::F32, {3}, InitKind::Ones);
  const uint32_t x = b.input("x", DType::F32, {3});
  const uint32_t g = b.input("g", DType::F32, {3});
  const uint32_t product = b.op(OpCode::Mul, {x, w}, DType::F32, {3}, {}, "nan.mlir:3:7");
  const uint32_t logs = b.op(OpCode::Log, {product}, DType::F32, {3}, {}, "nan.mlir:4:7");
  b.plan.loss = b.op(OpCode::Sum, {logs}, DType::F32, {},
                     {{"axes", V{0}}, {"keepdims", int64_t(0)}}, "nan.mlir:5:3");
  const uint32_t grad = b.state("w.grad", {3});
  b.instruction(OpCode::Accumulate, {grad, g}, {grad});
  const uint32_t norm = b.optimizerOp(OpCode::GlobalNorm, {grad}, DType::F32, {});
  const uint32_t lr = b.optimizerOp(OpCode::LrSchedule, {}, DType::F32, {},
                                    {{"kind", int64_t(0)},
                                     {"lr", 0.0},
                                     {"min_lr", 0.0},
                                     {"warmup_steps", int64_t(0)},
                                     {"decay_steps", int64_t(0)}});
  const uint32_t momentum = b.state("w.momentum", {3});
  b.instruction(OpCode::Sgd, {w, grad, momentum, lr, norm}, {w, grad, momentum}, kSgd, true);
  b.plan.gradNorm = norm;
  b.plan.learningRate = lr;
  b.plan.debugNonFinite = debug;
  return b.plan;
}

TEST(CpuMixedPrecision, FirstNonFiniteNamesTheInstruction) {
  Executor executor(logPlan(true), Precision::F32);
  executor.initializeParameters(0);
  executor.setBufferValues(executor.plan().inputs[1].buffer, {0, 0, 0});
  const uint32_t x = executor.plan().inputs[0].buffer;
  RunOptions options;
  options.keepTemporaries = false;
  EXPECT_EQ(executor.firstNonFinite(), "");
  executor.setBufferValues(x, {1, 2, 3});
  EXPECT_TRUE(std::isfinite(executor.run(options)));
  EXPECT_EQ(executor.firstNonFinite(), "");
  // A negative element: log gives NaN.
  executor.setBufferValues(x, {1, -2, 3});
  EXPECT_TRUE(std::isnan(executor.run(options)));
  EXPECT_EQ(executor.firstNonFinite(), "instruction 1 (log at nan.mlir:4:7)");
  // A later finite micro step of the same optimizer step keeps the record,
  // and it survives the optimizer step.
  executor.setBufferValues(x, {1, 2, 3});
  executor.run(options);
  EXPECT_EQ(executor.firstNonFinite(), "instruction 1 (log at nan.mlir:4:7)");
  executor.runOptimizerStep(options);
  EXPECT_EQ(executor.firstNonFinite(), "instruction 1 (log at nan.mlir:4:7)");
  // The next optimizer step's first micro step starts afresh.
  executor.run(options);
  EXPECT_EQ(executor.firstNonFinite(), "");
  // A zero gives -inf: also reported.
  executor.setBufferValues(x, {0, 2, 3});
  executor.run(options);
  EXPECT_EQ(executor.firstNonFinite(), "instruction 1 (log at nan.mlir:4:7)");

  // Without debugNonFinite nothing is recorded.
  Executor quiet(logPlan(false), Precision::F32);
  quiet.initializeParameters(0);
  quiet.setBufferValues(quiet.plan().inputs[1].buffer, {0, 0, 0});
  quiet.setBufferValues(quiet.plan().inputs[0].buffer, {1, -2, 3});
  EXPECT_TRUE(std::isnan(quiet.run(options)));
  EXPECT_EQ(quiet.firstNonFinite(), "");
}

} // namespace
