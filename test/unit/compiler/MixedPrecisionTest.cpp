//===- MixedPrecisionTest.cpp - mixed-precision training plans on the CPU backend ------===//
//
// Plans built by graph-build-training, graph-assign-precision and graph-insert-loss-scaling,
// run end to end by the CPU executor (Precision::F32, so every bf16/f16 buffer is rounded to its
// dtype as stored):
//   - fp16 gradient underflow: without loss scaling a small gradient rounds to zero and nothing
//     trains; dynamic loss scaling recovers it;
//   - an injected overflow skips exactly its optimizer step and halves the scale;
//   - the scale's trajectory follows GradScaler's rules (and the min-scale floor);
//   - bf16 and fp16 training of the tiny GPT ends where fp32 training does;
//   - the precision the plan gives each buffer (parameter copies, f32 state).
//
//===--------------------------------------------------------------------------===//

#include "CompileHelpers.h"
#include "runtime/cpu/Executor.h"
#include "runtime/numerics/Float16.h"
#include "runtime/train/Data.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <random>
#include <set>

using namespace ampc;

namespace {

std::vector<double> valuesOf(const cpu::Executor &executor, const std::string &buffer) {
  return executor.bufferValues(plan::findBuffer(executor.plan(), buffer));
}

double maxAbs(const std::vector<double> &values) {
  double result = 0;
  for (double value : values)
    result = std::max(result, std::fabs(value));
  return result;
}

graph::GraphAssignPrecisionOptions precisionMode(const std::string &mode) {
  graph::GraphAssignPrecisionOptions options;
  options.mode = mode;
  return options;
}

graph::GraphInsertLossScalingOptions scalingMode(const std::string &mode) {
  graph::GraphInsertLossScalingOptions options;
  options.mode = mode;
  return options;
}

std::optional<plan::Plan> compileMixed(const std::string &text,
                                       const graph::GraphBuildTrainingOptions &training,
                                       const graph::GraphAssignPrecisionOptions &precision,
                                       const graph::GraphInsertLossScalingOptions &scaling) {
  std::string diagnostics;
  auto compiled =
      test_support::compileMixedPrecisionText(text, training, precision, scaling, &diagnostics);
  EXPECT_TRUE(compiled) << diagnostics;
  return compiled;
}

/// `count` values drawn uniformly from [-1, 1] (deterministic).
std::vector<double> uniformValues(size_t count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> dist(-1.0, 1.0);
  std::vector<double> values(count);
  for (double &value : values)
    value = dist(rng);
  return values;
}

//===----------------------------------------------------------------------===//
// fp16 gradient underflow
//===----------------------------------------------------------------------===//

/// y = x @ w with an MSE loss multiplied by 5e-8. The backward pass seeds the MSE with
/// dl = 5e-8 (an f32 scalar), and mse_loss's gradient, stored in f16 like every activation
/// gradient, is
///   dp = 2 (p - y) / 32 * 5e-8 = 3.125e-9 (p - y)       (32 = 8 x 4 elements).
/// With x in [-1, 1], y = x @ w* with |w*| <= 0.5 (so |y| <= 2) and |w| < 1.5 (16 draws of
/// N(0, 0.25); the test checks the bound): |p| <= 4 * 1.5 = 6, |p - y| <= 8 and
/// |dp| <= 2.5e-8, below half the smallest f16 subnormal (2^-24 = 5.96e-8, half 2.98e-8): every
/// element of dp rounds to 0, and so does dw = x^T @ dp. In f32 the same dw is ~1e-8, not 0.
///
/// With dynamic loss scaling the seed is 65536 * 5e-8 = 3.3e-3 and dp = 2.0e-4 (p - y): a
/// normal f16 for |p - y| > 0.3 and a nonzero subnormal down to |p - y| ~ 3e-4, so dw keeps its
/// information and the accumulator (f32, divided by 65536 again) holds the true ~1e-8 gradient.
constexpr const char *kTinyLoss = R"mlir(
graph.model @tiny_loss {
  graph.param @w : tensor<4x4xf32> init #graph.normal<std = 0.5>
  graph.input @x : tensor<8x4xf32>
  graph.input @y : tensor<8x4xf32>
  func.func @forward() {
    %w = graph.get_param @w : tensor<4x4xf32>
    %x = graph.get_input @x : tensor<8x4xf32>
    %y = graph.get_input @y : tensor<8x4xf32>
    %p = graph.matmul %x, %w : tensor<8x4xf32>, tensor<4x4xf32>
    %mse = graph.mse_loss %p, %y : tensor<8x4xf32>
    %tiny = graph.constant dense<5.0e-8> : tensor<f32>
    %l = graph.mul %mse, %tiny : tensor<f32>, tensor<f32>
    graph.loss %l : tensor<f32>
    return
  }
}
)mlir";

/// AdamW without weight decay (which would move w even with a zero gradient) and with an eps
/// far below the ~1e-8 gradients, so the update is about lr * sign(g) whatever their size.
graph::GraphBuildTrainingOptions tinyLossTraining() {
  graph::GraphBuildTrainingOptions options;
  options.lr = 0.05;
  options.weightDecay = 0;
  options.eps = 1e-14;
  return options;
}

/// x in [-1, 1]; y = x @ w* with w* in [-0.5, 0.5], so training w toward w* lowers the loss.
void feedTinyLoss(cpu::Executor &executor) {
  std::vector<double> x = uniformValues(32, 11), wStar = uniformValues(16, 12);
  std::vector<double> y(32, 0.0);
  for (int r = 0; r < 8; ++r)
    for (int c = 0; c < 4; ++c)
      for (int k = 0; k < 4; ++k)
        y[r * 4 + c] += x[r * 4 + k] * 0.5 * wStar[k * 4 + c];
  executor.setBufferValues(plan::findBuffer(executor.plan(), "x"), x);
  executor.setBufferValues(plan::findBuffer(executor.plan(), "y"), y);
}

struct TinyLossRun {
  std::vector<double> w0, grad0, w;
  std::vector<double> losses; ///< the loss of each step (before its update)
};

/// Trains kTinyLoss for `steps` optimizer steps (one micro step each) on fixed data.
TinyLossRun trainTinyLoss(const plan::Plan &compiled, int steps) {
  TinyLossRun result;
  cpu::Executor executor(compiled, cpu::Precision::F32);
  executor.initializeParameters(5);
  feedTinyLoss(executor);
  result.w0 = executor.parameterValues("w");
  for (int step = 0; step < steps; ++step) {
    cpu::RunOptions options;
    options.step = static_cast<uint64_t>(step);
    options.training = true;
    options.totalSteps = static_cast<uint64_t>(steps);
    result.losses.push_back(executor.run(options));
    if (step == 0)
      result.grad0 = valuesOf(executor, "w.grad");
    executor.runOptimizerStep(options);
  }
  result.w = executor.parameterValues("w");
  return result;
}

TEST(MixedPrecision, Fp16GradientsUnderflowWithoutLossScaling) {
  const int steps = 10;
  auto f32 =
      compileMixed(kTinyLoss, tinyLossTraining(), precisionMode("fp32"), scalingMode("none"));
  auto fp16 =
      compileMixed(kTinyLoss, tinyLossTraining(), precisionMode("fp16"), scalingMode("none"));
  auto scaled =
      compileMixed(kTinyLoss, tinyLossTraining(), precisionMode("fp16"), scalingMode("dynamic"));
  ASSERT_TRUE(f32 && fp16 && scaled);
  EXPECT_EQ(fp16->lossScaling.mode, plan::LossScaleMode::None);
  EXPECT_EQ(scaled->lossScaling.mode, plan::LossScaleMode::Dynamic);
  EXPECT_EQ(scaled->lossScaling.initialScale, 65536.0f);

  TinyLossRun reference = trainTinyLoss(*f32, steps);
  TinyLossRun unscaled = trainTinyLoss(*fp16, steps);
  TinyLossRun dynamic = trainTinyLoss(*scaled, steps);

  // The premise of the comment above: |w| < 1.5, and in f32 the gradient is ~1e-8, not 0.
  ASSERT_LT(maxAbs(reference.w0), 1.5);
  EXPECT_GT(maxAbs(reference.grad0), 1e-9);
  EXPECT_LT(maxAbs(reference.grad0), 1e-7);
  // The same initial weights in all three runs.
  EXPECT_EQ(unscaled.w0, reference.w0);
  EXPECT_EQ(dynamic.w0, reference.w0);

  // fp16 without scaling: the accumulated gradient is exactly zero after one micro step ...
  ASSERT_EQ(unscaled.grad0.size(), 16u);
  for (double g : unscaled.grad0)
    EXPECT_EQ(g, 0.0);
  // ... so AdamW (m = v = 0, no decay) leaves w bit-identical after every step, and the loss
  // never moves.
  EXPECT_EQ(unscaled.w, unscaled.w0);
  EXPECT_EQ(unscaled.losses.front(), unscaled.losses.back());

  // fp16 with dynamic scaling: the unscaled accumulator holds the f32 gradient up to f16
  // rounding of the scaled activation gradients (11 significant bits, ~1e-3 relative).
  ASSERT_EQ(dynamic.grad0.size(), 16u);
  for (size_t i = 0; i < 16; ++i)
    EXPECT_NEAR(dynamic.grad0[i], reference.grad0[i], 5e-3 * maxAbs(reference.grad0)) << i;
  // The weights move and the loss falls, as in the f32 run.
  double moved = 0;
  for (size_t i = 0; i < 16; ++i)
    moved = std::max(moved, std::fabs(dynamic.w[i] - dynamic.w0[i]));
  EXPECT_GT(moved, 0.1); // ten AdamW steps of about lr = 0.05 each
  EXPECT_LT(dynamic.losses.back(), 0.5 * dynamic.losses.front());
  EXPECT_LT(reference.losses.back(), 0.5 * reference.losses.front());
}

//===----------------------------------------------------------------------===//
// Injected overflow
//===----------------------------------------------------------------------===//

/// A two-layer MLP with an MSE loss; two micro-batches of 8 rows per optimizer step.
constexpr const char *kMlp = R"mlir(
graph.model @mlp {
  graph.param @w1 : tensor<4x16xf32> init #graph.normal<std = 0.5>
  graph.param @b1 : tensor<16xf32> init #graph.zeros
  graph.param @w2 : tensor<16x3xf32> init #graph.normal<std = 0.3>
  graph.input @x : tensor<8x4xf32>
  graph.input @y : tensor<8x3xf32>
  func.func @forward() {
    %w1 = graph.get_param @w1 : tensor<4x16xf32>
    %b1 = graph.get_param @b1 : tensor<16xf32>
    %w2 = graph.get_param @w2 : tensor<16x3xf32>
    %x = graph.get_input @x : tensor<8x4xf32>
    %y = graph.get_input @y : tensor<8x3xf32>
    %h0 = graph.matmul %x, %w1 : tensor<8x4xf32>, tensor<4x16xf32>
    %h1 = graph.add %h0, %b1 : tensor<8x16xf32>, tensor<16xf32>
    %h = graph.relu %h1 : tensor<8x16xf32>
    %p = graph.matmul %h, %w2 : tensor<8x16xf32>, tensor<16x3xf32>
    %l = graph.mse_loss %p, %y : tensor<8x3xf32>
    graph.loss %l : tensor<f32>
    return
  }
}
)mlir";

const std::vector<std::string> kMlpParams = {"w1", "b1", "w2"};

graph::GraphBuildTrainingOptions mlpTraining() {
  graph::GraphBuildTrainingOptions options;
  options.accumSteps = 2;
  options.lr = 0.02;
  return options;
}

/// Every persistent value a step can change: parameters and their State buffers.
using Snapshot = std::map<std::string, std::vector<double>>;

Snapshot snapshot(const cpu::Executor &executor) {
  Snapshot result;
  for (const std::string &name : kMlpParams) {
    result[name] = executor.parameterValues(name);
    for (const char *suffix : {".grad", ".adam_m", ".adam_v"})
      result[name + suffix] = valuesOf(executor, name + suffix);
  }
  return result;
}

/// Drives kMlp: the same two micro-batches every step, so the loss depends only on the weights.
class MlpTrainer {
public:
  explicit MlpTrainer(const plan::Plan &compiled) : executor(compiled, cpu::Precision::F32) {
    executor.initializeParameters(7);
    x = uniformValues(64, 21);
    // y = a fixed smooth function of x, one micro-batch after the other.
    y.resize(48);
    for (int r = 0; r < 16; ++r)
      for (int c = 0; c < 3; ++c)
        y[r * 3 + c] = std::sin(x[r * 4 + c] + x[r * 4 + 3]) + 0.5 * x[r * 4 + (c + 1) % 4];
  }

  /// One optimizer step; `inject` makes its first micro step report a non-finite gradient.
  /// Returns the mean of the two micro losses.
  double step(uint64_t index, bool inject) {
    double loss = 0;
    for (uint64_t i = 0; i < 2; ++i) {
      executor.setBufferValues(plan::findBuffer(executor.plan(), "x"),
                               std::vector<double>(x.begin() + i * 32, x.begin() + i * 32 + 32));
      executor.setBufferValues(plan::findBuffer(executor.plan(), "y"),
                               std::vector<double>(y.begin() + i * 24, y.begin() + i * 24 + 24));
      cpu::RunOptions options;
      options.step = index * 2 + i;
      options.training = true;
      options.injectNonFinite = inject && i == 0;
      loss += executor.run(options) / 2;
    }
    accumulated.clear();
    for (const std::string &name : kMlpParams)
      accumulated[name] = valuesOf(executor, name + ".grad");
    cpu::RunOptions options;
    options.step = index;
    options.totalSteps = 100;
    executor.runOptimizerStep(options);
    return loss;
  }

  cpu::Executor executor;
  /// The gradient accumulators just before the last optimizer step.
  std::map<std::string, std::vector<double>> accumulated;

private:
  std::vector<double> x, y;
};

TEST(MixedPrecision, InjectedOverflowSkipsExactlyThatStep) {
  const uint64_t steps = 8, skipped = 3;
  auto compiled = compileMixed(kMlp, mlpTraining(), precisionMode("fp16"), scalingMode("dynamic"));
  ASSERT_TRUE(compiled);
  ASSERT_EQ(compiled->lossScaling.mode, plan::LossScaleMode::Dynamic);
  MlpTrainer clean(*compiled), injected(*compiled);

  std::vector<Snapshot> cleanAfter;
  std::vector<double> cleanLoss, injectedLoss;
  for (uint64_t step = 0; step < steps; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    cleanLoss.push_back(clean.step(step, false));
    cleanAfter.push_back(snapshot(clean.executor));
    EXPECT_FALSE(clean.executor.lossScaleStatus().lastStepSkipped);

    Snapshot before = snapshot(injected.executor);
    injectedLoss.push_back(injected.step(step, step == skipped));
    Snapshot after = snapshot(injected.executor);
    const cpu::LossScaleStatus status = injected.executor.lossScaleStatus();
    ASSERT_TRUE(status.enabled);
    EXPECT_EQ(status.lastStepSkipped, step == skipped);
    EXPECT_EQ(status.skippedSteps, step >= skipped ? 1 : 0);
    // 2^16 until the overflow, then 2^15 (growth-interval 2000 is never reached).
    EXPECT_EQ(status.scale, step >= skipped ? 32768.0 : 65536.0);

    for (const std::string &name : kMlpParams) {
      // Every step consumes the accumulators, the skipped one included.
      EXPECT_GT(maxAbs(injected.accumulated[name]), 0.0) << name;
      EXPECT_EQ(maxAbs(after[name + ".grad"]), 0.0) << name;
      if (step == skipped) {
        // Nothing else changes across the skipped step.
        EXPECT_EQ(after[name], before[name]) << name;
        EXPECT_EQ(after[name + ".adam_m"], before[name + ".adam_m"]) << name;
        EXPECT_EQ(after[name + ".adam_v"], before[name + ".adam_v"]) << name;
      } else {
        EXPECT_NE(after[name], before[name]) << name;
        EXPECT_NE(after[name + ".adam_m"], before[name + ".adam_m"]) << name;
      }
    }
    // Before the overflow both runs are the same run.
    if (step < skipped)
      EXPECT_EQ(after, cleanAfter[step]);
    // After it, the injected run is the clean run one step late: the data is the same every
    // step, AdamW's bias correction counts applied steps only (as torch does), and the two
    // scales (2^15 and 2^16) differ by a power of two, which scales every f16 activation
    // gradient exactly as long as none is subnormal or overflows (true of this data) and is
    // divided out exactly by the unscaling.
    if (step > skipped)
      EXPECT_EQ(after, cleanAfter[step - 1]);
  }
  // The injected step's own loss was computed normally (the overflow is only reported), and
  // the next step sees the same weights again.
  EXPECT_EQ(injectedLoss[skipped], cleanLoss[skipped]);
  EXPECT_EQ(injectedLoss[skipped + 1], injectedLoss[skipped]);
  // The loss falls at every applied step, before the overflow and after it.
  for (uint64_t step = 1; step < steps; ++step)
    if (step != skipped + 1)
      EXPECT_LT(injectedLoss[step], injectedLoss[step - 1]) << "step " << step;
  EXPECT_LT(injectedLoss.back(), 0.8 * injectedLoss.front());
}

//===----------------------------------------------------------------------===//
// The scale's trajectory
//===----------------------------------------------------------------------===//

/// GradScaler (torch.amp.GradScaler, _amp_update_scale_): a step with a non-finite gradient is
/// skipped, the scale is multiplied by backoff_factor (0.5) and the growth tracker reset to 0;
/// a finite step increments the tracker, and when it reaches growth_interval the scale is
/// multiplied by growth_factor (2) and the tracker reset. ampc adds a floor: a backoff below
/// min-scale gives min-scale (floorReachedNow the first time that happens).
///
/// initial-scale 8, growth-interval 3, min-scale 1.5, overflows injected at steps
/// 1, 5, 6, 7, 8 and 13:
///   step  0: finite   tracker 1                    scale 8
///   step  1: overflow tracker 0  8 * 0.5         = 4
///   step  2: finite   tracker 1                    4
///   step  3: finite   tracker 2                    4
///   step  4: finite   tracker 3 = interval: 4 * 2 = 8, tracker 0
///   step  5: overflow 8 * 0.5                    = 4
///   step  6: overflow 4 * 0.5                    = 2
///   step  7: overflow 2 * 0.5 = 1 < 1.5, floored = 1.5   (floor reached: the only warning)
///   step  8: overflow 1.5 * 0.5 = 0.75, floored  = 1.5   (already reported)
///   step  9: finite   tracker 1                    1.5
///   step 10: finite   tracker 2                    1.5
///   step 11: finite   tracker 3: 1.5 * 2         = 3, tracker 0
///   step 12: finite   tracker 1                    3
///   step 13: overflow 3 * 0.5 = 1.5, not below the floor: no floor hit
/// A tracker that was not reset on overflow would grow at step 3 instead of 4.
TEST(MixedPrecision, LossScaleTrajectoryFollowsGradScaler) {
  graph::GraphInsertLossScalingOptions scaling = scalingMode("dynamic");
  scaling.initialScale = 8;
  scaling.growthInterval = 3;
  scaling.minScale = 1.5;
  auto compiled = compileMixed(kMlp, mlpTraining(), precisionMode("fp16"), scaling);
  ASSERT_TRUE(compiled);
  MlpTrainer trainer(*compiled);

  const std::set<uint64_t> overflows = {1, 5, 6, 7, 8, 13};
  const std::vector<double> expectedScales = {8, 4, 4, 4, 8, 4, 2, 1.5, 1.5, 1.5, 1.5, 3, 3, 1.5};
  std::vector<double> scales;
  std::vector<uint64_t> floorSteps;
  int64_t expectedSkipped = 0;
  for (uint64_t step = 0; step < expectedScales.size(); ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    const bool overflow = overflows.count(step) > 0;
    const double loss = trainer.step(step, overflow);
    EXPECT_TRUE(std::isfinite(loss));
    const cpu::LossScaleStatus status = trainer.executor.lossScaleStatus();
    ASSERT_TRUE(status.enabled);
    scales.push_back(status.scale);
    if (status.floorReachedNow)
      floorSteps.push_back(step);
    EXPECT_EQ(status.lastStepSkipped, overflow);
    expectedSkipped += overflow ? 1 : 0;
    EXPECT_EQ(status.skippedSteps, expectedSkipped);
  }
  EXPECT_EQ(scales, expectedScales);
  EXPECT_EQ(floorSteps, std::vector<uint64_t>{7});

  // resetState starts the scaler over.
  trainer.executor.resetState();
  trainer.step(0, false);
  EXPECT_EQ(trainer.executor.lossScaleStatus().scale, 8.0);
  EXPECT_EQ(trainer.executor.lossScaleStatus().skippedSteps, 0);
}

//===----------------------------------------------------------------------===//
// The tiny GPT in bf16, fp16 and fp32
//===----------------------------------------------------------------------===//

graph::GraphBuildTrainingOptions gptTraining() {
  graph::GraphBuildTrainingOptions options;
  options.lr = 1e-3;
  return options;
}

std::optional<plan::Plan> compileTinyGpt(const std::string &mode) {
  std::string diagnostics;
  auto compiled = test_support::compileMixedPrecisionFile(
      test_support::examplePath("gpt/tiny.mlir"), gptTraining(), precisionMode(mode),
      scalingMode("auto"), &diagnostics);
  EXPECT_TRUE(compiled) << mode << "\n" << diagnostics;
  return compiled;
}

/// Trains `compiled` for `steps` steps on the synthetic language task (runtime/train/Data.h,
/// seed 1: the same batches for every precision) and returns each step's loss.
std::vector<double> trainTinyGpt(const plan::Plan &compiled, int steps) {
  train::Task task = train::analyzeTask(compiled);
  EXPECT_EQ(task.kind, train::TaskKind::Language);
  auto batches =
      train::makeLanguageBatches(task, std::make_unique<train::SyntheticTokens>(task.classes, 1));
  cpu::Executor executor(compiled, cpu::Precision::F32);
  executor.initializeParameters(2);
  std::vector<double> losses;
  for (int step = 0; step < steps; ++step) {
    for (const train::InputData &input : batches->batch(static_cast<uint64_t>(step)))
      executor.setInput(input.name, input.bytes.data(), input.bytes.size());
    cpu::RunOptions options;
    options.seed = 3;
    options.step = static_cast<uint64_t>(step);
    options.training = true;
    options.totalSteps = static_cast<uint64_t>(steps);
    options.keepTemporaries = false;
    losses.push_back(executor.run(options));
    executor.runOptimizerStep(options);
    EXPECT_FALSE(executor.lossScaleStatus().lastStepSkipped) << "step " << step;
  }
  return losses;
}

double meanOfLast(const std::vector<double> &values, size_t count) {
  double total = 0;
  for (size_t i = values.size() - count; i < values.size(); ++i)
    total += values[i];
  return total / double(count);
}

TEST(MixedPrecision, TinyGptBf16AndFp16TrainLikeFp32) {
  const int steps = 120;
  std::map<std::string, double> finalLoss;
  std::map<std::string, std::vector<double>> allLosses;
  for (const char *mode : {"fp32", "bf16", "fp16"}) {
    SCOPED_TRACE(mode);
    auto compiled = compileTinyGpt(mode);
    ASSERT_TRUE(compiled);
    // auto: dynamic loss scaling for fp16 only.
    EXPECT_EQ(compiled->lossScaling.mode, std::string(mode) == "fp16" ? plan::LossScaleMode::Dynamic
                                                                      : plan::LossScaleMode::None);
    std::vector<double> losses = trainTinyGpt(*compiled, steps);
    ASSERT_EQ(losses.size(), size_t(steps));
    allLosses[mode] = losses;
    // Every run starts near ln 256 = 5.545 (the weights are small) ...
    EXPECT_NEAR(losses.front(), std::log(256.0), 0.05);
    finalLoss[mode] = meanOfLast(losses, 5);
    // ... and has clearly learned something by the end.
    EXPECT_LT(finalLoss[mode], std::log(256.0) - 0.5);
  }
  // Step by step, the reduced runs follow fp32 within about half a rounding
  // unit of their storage type (bf16 2^-8 = 3.9e-3, fp16 2^-11 = 4.9e-4):
  // activations are stored rounded, while the loss, the norms and the
  // updates are computed in f32 from fp32 master weights, so the rounding
  // does not compound. Measured over these 120 steps (lr 1e-3): bf16 3.5e-4,
  // fp16 7.3e-5.
  const std::map<std::string, double> bound = {{"bf16", 2e-3}, {"fp16", 4e-4}};
  for (const char *mode : {"bf16", "fp16"}) {
    double worst = 0;
    int worstStep = 0;
    for (int step = 0; step < steps; ++step) {
      const double difference =
          std::fabs(allLosses[mode][step] - allLosses["fp32"][step]) / allLosses["fp32"][step];
      if (difference > worst) {
        worst = difference;
        worstStep = step + 1;
      }
    }
    EXPECT_LT(worst, bound.at(mode)) << mode << " against fp32, worst at step " << worstStep;
    // The reduced runs did compute in their own precision.
    EXPECT_NE(allLosses[mode], allLosses["fp32"]) << mode;
  }
}

//===----------------------------------------------------------------------===//
// The precision the plan assigns
//===----------------------------------------------------------------------===//

TEST(MixedPrecision, Bf16TinyGptPlanHasCopiesForMatmulWeightsAndF32State) {
  auto compiled = compileTinyGpt("bf16");
  ASSERT_TRUE(compiled);
  const plan::Plan &p = *compiled;
  EXPECT_EQ(p.lossScaling.mode, plan::LossScaleMode::None); // auto: none for bf16

  // The copies, by source parameter.
  std::map<std::string, plan::DType> copies;
  for (const plan::ParameterCopy &copy : p.parameterCopies) {
    EXPECT_EQ(p.buffers[copy.buffer].role, plan::BufferRole::ParameterCopy);
    EXPECT_EQ(p.buffers[copy.source].role, plan::BufferRole::Parameter);
    EXPECT_EQ(p.buffers[copy.buffer].shape, p.buffers[copy.source].shape);
    copies[p.buffers[copy.source].name] = p.buffers[copy.buffer].dtype;
  }
  for (int layer = 0; layer < 2; ++layer) {
    const std::string h = "h" + std::to_string(layer) + ".";
    for (const char *weight : {"attn.qkv.w", "attn.proj.w", "mlp.fc.w", "mlp.fc2.w"}) {
      ASSERT_TRUE(copies.count(h + weight)) << h + weight;
      EXPECT_EQ(copies[h + weight], plan::DType::BF16) << h + weight;
    }
    // LayerNorm runs in f32 and reads its gain and bias in f32.
    for (const char *norm : {"ln1.g", "ln1.b", "ln2.g", "ln2.b"})
      EXPECT_FALSE(copies.count(h + norm)) << h + norm;
  }
  // The token table feeds the embedding gather and the (tied) output head's matmul; the
  // positions are added to the gathered bf16 rows, in bf16.
  for (const char *table : {"wte", "wpe"}) {
    ASSERT_TRUE(copies.count(table)) << table;
    EXPECT_EQ(copies[table], plan::DType::BF16) << table;
  }
  EXPECT_FALSE(copies.count("ln_f.g"));
  EXPECT_FALSE(copies.count("ln_f.b"));

  // The micro step reads the copies, never the f32 master of a copied parameter: the
  // conversion happens once per optimizer step.
  std::set<uint32_t> copyBuffers, copiedMasters, read;
  for (const plan::ParameterCopy &copy : p.parameterCopies) {
    copyBuffers.insert(copy.buffer);
    copiedMasters.insert(copy.source);
  }
  for (const plan::Instruction &instruction : p.instructions)
    for (uint32_t operand : instruction.operands) {
      read.insert(operand);
      EXPECT_FALSE(copiedMasters.count(operand))
          << plan::describeInstruction(instruction, 0) << " reads " << p.buffers[operand].name;
    }
  for (uint32_t copy : copyBuffers)
    EXPECT_TRUE(read.count(copy)) << p.buffers[copy].name << " is never read";

  // Every micro-step matmul (forward and backward) reads bf16 operands.
  int matmuls = 0;
  for (const plan::Instruction &instruction : p.instructions) {
    if (instruction.op != plan::OpCode::MatMul)
      continue;
    ++matmuls;
    for (uint32_t operand : instruction.operands)
      EXPECT_EQ(p.buffers[operand].dtype, plan::DType::BF16)
          << plan::describeInstruction(instruction, 0) << " reads " << p.buffers[operand].name;
  }
  // 2 layers x 4 matmuls + the head, each with two gradient matmuls (input and weight).
  EXPECT_EQ(matmuls, 9 * 3);

  // Master weights, gradient accumulators and optimizer state are f32.
  int states = 0;
  for (const plan::Buffer &buffer : p.buffers) {
    if (buffer.role == plan::BufferRole::Parameter || buffer.role == plan::BufferRole::State) {
      EXPECT_EQ(buffer.dtype, plan::DType::F32) << buffer.name;
      states += buffer.role == plan::BufferRole::State;
    }
  }
  EXPECT_EQ(states, 3 * int(p.parameters.size())); // .grad, .adam_m, .adam_v
  for (const plan::Parameter &parameter : p.parameters)
    for (const char *suffix : {".grad", ".adam_m", ".adam_v"})
      EXPECT_EQ(p.buffers[plan::findBuffer(p, parameter.name + suffix)].dtype, plan::DType::F32);
  // Every accumulation adds an f32 gradient into an f32 accumulator.
  int accumulations = 0;
  for (const plan::Instruction &instruction : p.instructions)
    if (instruction.op == plan::OpCode::Accumulate) {
      ++accumulations;
      EXPECT_EQ(p.buffers[instruction.operands[0]].dtype, plan::DType::F32);
      EXPECT_EQ(p.buffers[instruction.operands[1]].dtype, plan::DType::F32);
    }
  EXPECT_EQ(accumulations, int(p.parameters.size()));

  // At run time each copy holds its master rounded to bf16 (nearest even), after initialisation
  // and after an optimizer step has moved the masters.
  cpu::Executor executor(p, cpu::Precision::F32);
  executor.initializeParameters(4);
  executor.randomizeInputs(5);
  for (int step = 0; step < 2; ++step) {
    SCOPED_TRACE("after " + std::to_string(step) + " optimizer steps");
    for (const plan::ParameterCopy &copy : p.parameterCopies) {
      std::vector<double> master = executor.bufferValues(copy.source);
      std::vector<double> reduced = executor.bufferValues(copy.buffer);
      ASSERT_EQ(reduced.size(), master.size());
      size_t mismatches = 0;
      for (size_t i = 0; i < master.size(); ++i)
        mismatches += reduced[i] != double(numerics::roundToBF16(float(master[i])));
      EXPECT_EQ(mismatches, 0u) << p.buffers[copy.buffer].name;
    }
    cpu::RunOptions options;
    options.step = static_cast<uint64_t>(step);
    options.training = true;
    executor.run(options);
    executor.runOptimizerStep(options);
  }
}

TEST(MixedPrecision, Fp32TinyGptPlanHasNoReducedBuffers) {
  auto compiled = compileTinyGpt("fp32");
  ASSERT_TRUE(compiled);
  EXPECT_TRUE(compiled->parameterCopies.empty());
  EXPECT_EQ(compiled->lossScaling.mode, plan::LossScaleMode::None);
  for (const plan::Buffer &buffer : compiled->buffers) {
    EXPECT_NE(buffer.dtype, plan::DType::BF16) << buffer.name;
    EXPECT_NE(buffer.dtype, plan::DType::F16) << buffer.name;
    EXPECT_NE(buffer.role, plan::BufferRole::ParameterCopy) << buffer.name;
  }
  for (const plan::Instruction &instruction : compiled->instructions)
    EXPECT_NE(instruction.op, plan::OpCode::Cast) << plan::describeInstruction(instruction, 0);
}

} // namespace
