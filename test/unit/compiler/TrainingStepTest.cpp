//===- TrainingStepTest.cpp - compiled training steps on the CPU backend --===//
//
// Runs plans built by graph-build-training end to end:
//   - gradient accumulation: N micro-batches with accum-steps N give the same gradients,
//     losses and optimizer update as one batch N times their size with accum-steps 1;
//   - AdamW and SGD through the compiled optimizer step, three steps against an independent
//     fp64 re-computation (weight-decay defaults and overrides, clipping, schedules);
//   - what the pass does with parameters the loss ignores and with inputs;
//   - runTrainingPipeline's hook on its pass manager (how `ampc compile` applies MLIR's options).
//
//===--------------------------------------------------------------------------===//

#include "CompileHelpers.h"
#include "runtime/cpu/Executor.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <random>
#include <set>

using namespace ampc;

namespace {

double norm(const std::vector<double> &values) {
  double total = 0;
  for (double value : values)
    total += value * value;
  return std::sqrt(total);
}

/// ||a - b|| / ||b||.
double relativeError(const std::vector<double> &a, const std::vector<double> &b) {
  EXPECT_EQ(a.size(), b.size());
  double diff = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i)
    diff += (a[i] - b[i]) * (a[i] - b[i]);
  return std::sqrt(diff) / std::max(norm(b), 1e-300);
}

std::vector<double> difference(const std::vector<double> &a, const std::vector<double> &b) {
  std::vector<double> result(a.size());
  for (size_t i = 0; i < a.size(); ++i)
    result[i] = a[i] - b[i];
  return result;
}

std::vector<double> gradOf(const cpu::Executor &executor, const std::string &param) {
  return executor.bufferValues(plan::findBuffer(executor.plan(), param + ".grad"));
}

std::optional<plan::Plan> compileTraining(const std::string &text,
                                          const graph::GraphBuildTrainingOptions &options) {
  std::string diagnostics;
  auto compiled = test_support::compileTrainingText(text, options, &diagnostics);
  EXPECT_TRUE(compiled) << diagnostics;
  return compiled;
}

//===----------------------------------------------------------------------===//
// Gradient accumulation
//===----------------------------------------------------------------------===//

/// A one-layer GPT-like model over a [batch, 4] token batch: tied embedding and head, learned
/// positions, layernorm, one causal attention head, a gelu MLP and residuals. Nothing in it
/// mixes the rows of a batch, so a batch split into micro-batches has the same mean loss.
std::string smallLanguageModel(int64_t batch) {
  std::string b = std::to_string(batch);
  std::string x = "tensor<" + b + "x4x8xf32>";
  std::string text = R"mlir(
graph.model @small_lm {
  graph.param @wte : tensor<16x8xf32> init #graph.normal<std = 0.5>
  graph.param @wpe : tensor<4x8xf32> init #graph.normal<std = 0.5>
  graph.param @ln.g : tensor<8xf32> init #graph.ones
  graph.param @ln.b : tensor<8xf32> init #graph.zeros
  graph.param @qkv.w : tensor<8x24xf32> init #graph.normal<std = 0.3>
  graph.param @proj.w : tensor<8x8xf32> init #graph.normal<std = 0.3>
  graph.param @fc.w : tensor<8x16xf32> init #graph.normal<std = 0.3>
  graph.param @fc.b : tensor<16xf32> init #graph.uniform<low = -0.1, high = 0.1>
  graph.param @fc2.w : tensor<16x8xf32> init #graph.normal<std = 0.3>
  graph.input @tokens : tensor<Bx4xi32>
  graph.input @targets : tensor<Bx4xi32>
  func.func @forward() {
    %tokens = graph.get_input @tokens : tensor<Bx4xi32>
    %targets = graph.get_input @targets : tensor<Bx4xi32>
    %wte = graph.get_param @wte : tensor<16x8xf32>
    %wpe = graph.get_param @wpe : tensor<4x8xf32>
    %ln.g = graph.get_param @ln.g : tensor<8xf32>
    %ln.b = graph.get_param @ln.b : tensor<8xf32>
    %qkv.w = graph.get_param @qkv.w : tensor<8x24xf32>
    %proj.w = graph.get_param @proj.w : tensor<8x8xf32>
    %fc.w = graph.get_param @fc.w : tensor<8x16xf32>
    %fc.b = graph.get_param @fc.b : tensor<16xf32>
    %fc2.w = graph.get_param @fc2.w : tensor<16x8xf32>
    %tok = graph.embedding %wte[%tokens] : tensor<16x8xf32>, tensor<Bx4xi32>
    %x0 = graph.add %tok, %wpe : X, tensor<4x8xf32>
    %a = graph.layernorm %x0, %ln.g, %ln.b : X, tensor<8xf32>, tensor<8xf32>
    %qkv = graph.matmul %a, %qkv.w : X, tensor<8x24xf32>
    %q, %k, %v = graph.split %qkv axis 2 sizes [8, 8, 8] : tensor<Bx4x24xf32>
    %att = graph.attention %q, %k, %v causal : X, X, X
    %p = graph.matmul %att, %proj.w : X, tensor<8x8xf32>
    %x1 = graph.add %x0, %p : X, X
    %f0 = graph.matmul %x1, %fc.w : X, tensor<8x16xf32>
    %f1 = graph.add %f0, %fc.b : tensor<Bx4x16xf32>, tensor<16xf32>
    %f = graph.gelu tanh %f1 : tensor<Bx4x16xf32>
    %g = graph.matmul %f, %fc2.w : tensor<Bx4x16xf32>, tensor<16x8xf32>
    %x2 = graph.add %x1, %g : X, X
    %logits = graph.matmul %x2, %wte transpose_rhs : X, tensor<16x8xf32>
    %loss = graph.cross_entropy %logits, %targets : tensor<Bx4x16xf32>, tensor<Bx4xi32>
    graph.loss %loss : tensor<f32>
    return
  }
}
)mlir";
  auto replaceAll = [&](const std::string &from, const std::string &to) {
    for (size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size()))
      text.replace(at, from.size(), to);
  };
  replaceAll(" X", " " + x);
  replaceAll("<Bx", "<" + b + "x");
  return text;
}

struct StepResult {
  double loss = 0;     ///< the full batch's loss, or the mean of the micro-batches' losses
  double gradNorm = 0; ///< what runOptimizerStep returned
  std::map<std::string, std::vector<double>> initial, grads, after;
};

/// Feeds rows [first, first + rows) of `tokens`/`targets` ([8, 4] each) to the executor.
void feedRows(cpu::Executor &executor, const std::vector<int32_t> &tokens,
              const std::vector<int32_t> &targets, int64_t first, int64_t rows) {
  executor.setInput("tokens", tokens.data() + first * 4, rows * 4 * sizeof(int32_t));
  executor.setInput("targets", targets.data() + first * 4, rows * 4 * sizeof(int32_t));
}

/// One optimizer step of `compiled` (micro-batch size 8 / accumulationSteps) over the batch.
StepResult trainOneStep(const plan::Plan &compiled, const std::vector<int32_t> &tokens,
                        const std::vector<int32_t> &targets) {
  StepResult result;
  cpu::Executor executor(compiled, cpu::Precision::F32);
  executor.initializeParameters(3);
  for (const plan::Parameter &parameter : compiled.parameters)
    result.initial[parameter.name] = executor.parameterValues(parameter.name);
  const int64_t micro = compiled.accumulationSteps, rows = 8 / micro;
  for (int64_t i = 0; i < micro; ++i) {
    feedRows(executor, tokens, targets, i * rows, rows);
    cpu::RunOptions options;
    options.seed = 9;
    options.step = static_cast<uint64_t>(i);
    options.training = true;
    result.loss += executor.run(options) / static_cast<double>(micro);
  }
  for (const plan::Parameter &parameter : compiled.parameters)
    result.grads[parameter.name] = gradOf(executor, parameter.name);
  cpu::RunOptions options;
  options.step = 0;
  options.totalSteps = 1;
  result.gradNorm = executor.runOptimizerStep(options);
  for (const plan::Parameter &parameter : compiled.parameters)
    result.after[parameter.name] = executor.parameterValues(parameter.name);
  return result;
}

void checkAccumulationEquivalence(graph::GraphBuildTrainingOptions options) {
  options.accumSteps = 1;
  auto full = compileTraining(smallLanguageModel(8), options);
  options.accumSteps = 4;
  auto micro = compileTraining(smallLanguageModel(2), options);
  ASSERT_TRUE(full && micro);
  EXPECT_EQ(full->accumulationSteps, 1);
  EXPECT_EQ(micro->accumulationSteps, 4);

  std::mt19937 rng(21);
  std::uniform_int_distribution<int32_t> token(0, 15);
  std::vector<int32_t> tokens(32), targets(32);
  for (int32_t &t : tokens)
    t = token(rng);
  for (int32_t &t : targets)
    t = token(rng);

  StepResult a = trainOneStep(*full, tokens, targets);
  StepResult b = trainOneStep(*micro, tokens, targets);
  EXPECT_NEAR(b.loss, a.loss, 1e-5 * a.loss);
  EXPECT_NEAR(b.gradNorm, a.gradNorm, 1e-5 * a.gradNorm);
  ASSERT_EQ(a.initial.size(), 9u);
  for (const auto &[name, initial] : a.initial) {
    SCOPED_TRACE(name);
    // Initial values depend only on the seed and the parameter, not on the batch size.
    EXPECT_EQ(b.initial[name], initial);
    EXPECT_GT(norm(a.grads[name]), 0);
    EXPECT_LT(relativeError(b.grads[name], a.grads[name]), 1e-5);
    EXPECT_LT(relativeError(b.after[name], a.after[name]), 1e-5);
    // The update itself, much smaller than the values, agrees too.
    std::vector<double> updateA = difference(a.after[name], initial);
    std::vector<double> updateB = difference(b.after[name], b.initial[name]);
    EXPECT_GT(norm(updateA), 0);
    EXPECT_LT(relativeError(updateB, updateA), 1e-5);
  }
}

TEST(TrainingStep, AccumulationMatchesTheFullBatchAdamW) {
  graph::GraphBuildTrainingOptions options;
  options.lr = 1e-2;
  checkAccumulationEquivalence(options);
}

/// SGD's update is proportional to the gradient (AdamW's first step is nearly its sign), so
/// this also catches a gradient off by a constant factor in the update.
TEST(TrainingStep, AccumulationMatchesTheFullBatchSgd) {
  graph::GraphBuildTrainingOptions options;
  options.optimizer = "sgd";
  options.lr = 0.1;
  options.clipNorm = 0;
  checkAccumulationEquivalence(options);
}

constexpr const char *kLinear = R"mlir(
graph.model @linear {
  graph.param @w : tensor<3x2xf32> init #graph.normal<std = 0.5>
  graph.param @b : tensor<2xf32> init #graph.normal<std = 0.5>
  graph.param @c : tensor<2xf32> init #graph.normal<mean = 1.0, std = 0.5> {weight_decay = true}
  graph.param @m : tensor<2x2xf32> init #graph.normal<mean = 0.5, std = 0.5> {weight_decay = false}
  graph.input @x : tensor<6x3xf32>
  graph.input @y : tensor<6x2xf32>
  func.func @forward() {
    %w = graph.get_param @w : tensor<3x2xf32>
    %b = graph.get_param @b : tensor<2xf32>
    %c = graph.get_param @c : tensor<2xf32>
    %m = graph.get_param @m : tensor<2x2xf32>
    %x = graph.get_input @x : tensor<6x3xf32>
    %y = graph.get_input @y : tensor<6x2xf32>
    %p0 = graph.matmul %x, %w : tensor<6x3xf32>, tensor<3x2xf32>
    %p = graph.add %p0, %b : tensor<6x2xf32>, tensor<2xf32>
    %q = graph.matmul %p, %m : tensor<6x2xf32>, tensor<2x2xf32>
    %r = graph.mul %q, %c : tensor<6x2xf32>, tensor<2xf32>
    %l = graph.mse_loss %r, %y : tensor<6x2xf32>
    graph.loss %l : tensor<f32>
    return
  }
}
)mlir";

/// A micro step's gradient, accumulated with accum-steps 1 and 4: the loss seed is
/// 1 / accum-steps.
TEST(TrainingStep, LossSeedIsOneOverAccumSteps) {
  graph::GraphBuildTrainingOptions options;
  auto one = compileTraining(kLinear, options);
  options.accumSteps = 4;
  auto four = compileTraining(kLinear, options);
  ASSERT_TRUE(one && four);
  cpu::Executor a(*one, cpu::Precision::F64), b(*four, cpu::Precision::F64);
  for (cpu::Executor *executor : {&a, &b}) {
    executor->initializeParameters(4);
    executor->randomizeInputs(5);
  }
  EXPECT_EQ(a.run({}), b.run({}));
  for (const char *name : {"w", "b", "c", "m"}) {
    std::vector<double> ga = gradOf(a, name), gb = gradOf(b, name);
    for (double &g : gb)
      g *= 4;
    EXPECT_LT(relativeError(gb, ga), 1e-14) << name;
  }
}

//===----------------------------------------------------------------------===//
// The optimizer step
//===----------------------------------------------------------------------===//

/// The schedule of graph.lr_schedule, written out again.
double expectedLearningRate(const graph::GraphBuildTrainingOptions &options, int64_t step,
                            int64_t totalSteps) {
  double lr = options.lr;
  if (step < options.warmupSteps)
    return lr * double(step + 1) / double(options.warmupSteps);
  if (options.schedule == "constant")
    return lr;
  double minLr = options.minLr >= 0 ? options.minLr : lr / 10;
  double decay = options.decaySteps > 0 ? double(options.decaySteps) : double(totalSteps);
  double progress = std::clamp((double(step) - double(options.warmupSteps)) /
                                   std::max(1.0, decay - double(options.warmupSteps)),
                               0.0, 1.0);
  return minLr + 0.5 * (1 + std::cos(M_PI * progress)) * (lr - minLr);
}

/// The linear model's parameters with the decay each should get: rank 2 decays unless
/// {weight_decay = false} (m), rank 1 does not unless {weight_decay = true} (c).
const std::map<std::string, bool> kLinearDecays = {
    {"w", true}, {"b", false}, {"c", true}, {"m", false}};

/// Runs three training steps of kLinear on fresh random data each step and checks every
/// parameter after each optimizer step against a re-computation in double from the gradients
/// read out of the accumulators. Returns the learning rates the plan reported.
std::vector<double> checkThreeSteps(const graph::GraphBuildTrainingOptions &options) {
  const int64_t steps = 3;
  std::vector<double> rates;
  auto compiled = compileTraining(kLinear, options);
  if (!compiled)
    return rates;
  cpu::Executor executor(*compiled, cpu::Precision::F64);
  executor.initializeParameters(6);
  std::map<std::string, std::vector<double>> params, first, second;
  for (const auto &[name, decays] : kLinearDecays) {
    params[name] = executor.parameterValues(name);
    first[name].assign(params[name].size(), 0.0);
    second[name].assign(params[name].size(), 0.0);
  }
  for (int64_t step = 0; step < steps; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    executor.randomizeInputs(100 + step);
    cpu::RunOptions run;
    run.step = step;
    run.training = true;
    executor.run(run);

    std::map<std::string, std::vector<double>> grads;
    double total = 0;
    for (const auto &[name, decays] : kLinearDecays) {
      grads[name] = gradOf(executor, name);
      total += norm(grads[name]) * norm(grads[name]);
    }
    const double gradNorm = std::sqrt(total);
    double clip = 1.0;
    if (options.clipNorm > 0) {
      clip = std::min(1.0, options.clipNorm / (gradNorm + 1e-6));
      // The data is chosen so that clipping acts in every step.
      EXPECT_LT(clip, 1.0) << "gradient norm " << gradNorm;
    }
    const double lr = expectedLearningRate(options, step, steps);

    for (const auto &[name, decays] : kLinearDecays) {
      std::vector<double> &p = params[name], &m = first[name], &v = second[name];
      const double decay = decays ? options.weightDecay : 0.0;
      for (size_t i = 0; i < p.size(); ++i) {
        const double g = clip * grads[name][i];
        if (options.optimizer == "adamw") {
          const double t = double(step + 1);
          p[i] *= 1 - lr * decay;
          m[i] = options.beta1 * m[i] + (1 - options.beta1) * g;
          v[i] = options.beta2 * v[i] + (1 - options.beta2) * g * g;
          const double mHat = m[i] / (1 - std::pow(options.beta1, t));
          const double vHat = v[i] / (1 - std::pow(options.beta2, t));
          p[i] -= lr * mHat / (std::sqrt(vHat) + options.eps);
        } else {
          const double d = g + decay * p[i];
          m[i] = options.momentum * m[i] + d; // the momentum buffer (0 before step 0)
          p[i] -= lr * m[i];
        }
      }
    }

    cpu::RunOptions optimizer;
    optimizer.step = step;
    optimizer.totalSteps = steps;
    EXPECT_NEAR(executor.runOptimizerStep(optimizer), gradNorm, 1e-12 * gradNorm);
    rates.push_back(executor.learningRate());
    EXPECT_NEAR(rates.back(), lr, 1e-15);
    for (const auto &[name, decays] : kLinearDecays) {
      EXPECT_LT(relativeError(executor.parameterValues(name), params[name]), 1e-12) << name;
      // The step consumed the accumulator.
      EXPECT_EQ(norm(gradOf(executor, name)), 0.0) << name;
    }
  }
  return rates;
}

TEST(TrainingStep, AdamWThreeStepsWithCosineScheduleAndClipping) {
  graph::GraphBuildTrainingOptions options;
  options.optimizer = "adamw";
  options.lr = 0.1;
  options.beta1 = 0.8;
  options.beta2 = 0.9;
  options.eps = 1e-6;
  options.weightDecay = 0.2;
  options.clipNorm = 0.5;
  options.schedule = "cosine";
  options.minLr = 0.01;
  // decay-steps 0: the cosine spans the run's 3 steps.
  std::vector<double> rates = checkThreeSteps(options);
  // min_lr + (lr - min_lr) (1 + cos(pi s / 3)) / 2 for s = 0, 1, 2.
  ASSERT_EQ(rates.size(), 3u);
  EXPECT_NEAR(rates[0], 0.1, 1e-15);
  EXPECT_NEAR(rates[1], 0.0775, 1e-15);
  EXPECT_NEAR(rates[2], 0.0325, 1e-15);
}

TEST(TrainingStep, SgdThreeStepsWithWarmupAndClipping) {
  graph::GraphBuildTrainingOptions options;
  options.optimizer = "sgd";
  options.lr = 0.05;
  options.momentum = 0.7;
  options.weightDecay = 0.3;
  options.clipNorm = 0.5;
  options.warmupSteps = 2;
  std::vector<double> rates = checkThreeSteps(options);
  ASSERT_EQ(rates.size(), 3u);
  EXPECT_NEAR(rates[0], 0.025, 1e-15);
  EXPECT_NEAR(rates[1], 0.05, 1e-15);
  EXPECT_NEAR(rates[2], 0.05, 1e-15);
}

TEST(TrainingStep, SgdThreeStepsWithoutClipping) {
  graph::GraphBuildTrainingOptions options;
  options.optimizer = "sgd";
  options.lr = 0.02;
  options.momentum = 0.0;
  options.weightDecay = 0.1;
  options.clipNorm = 0;
  options.schedule = "cosine";
  options.decaySteps = 4;
  checkThreeSteps(options);
}

/// Warmup, then a cosine from lr to the default min-lr (lr / 10) over [warmup, decay-steps),
/// then min-lr.
TEST(TrainingStep, CosineScheduleWithWarmup) {
  graph::GraphBuildTrainingOptions options;
  options.lr = 0.1;
  options.schedule = "cosine";
  options.warmupSteps = 2;
  options.decaySteps = 6;
  auto compiled = compileTraining(kLinear, options);
  ASSERT_TRUE(compiled);
  cpu::Executor executor(*compiled, cpu::Precision::F64);
  executor.initializeParameters(1);
  const double c = std::cos(M_PI / 4);
  const std::vector<double> expected = {
      0.05, 0.1, 0.1, 0.01 + 0.045 * (1 + c), 0.055, 0.01 + 0.045 * (1 - c), 0.01, 0.01};
  for (size_t step = 0; step < expected.size(); ++step) {
    cpu::RunOptions options;
    options.step = step;
    options.totalSteps = 100; // ignored: decay-steps is given
    executor.runOptimizerStep(options);
    EXPECT_NEAR(executor.learningRate(), expected[step], 1e-15) << "step " << step;
  }
}

//===----------------------------------------------------------------------===//
// What the pass trains
//===----------------------------------------------------------------------===//

/// @w trains; @never is not read, @dead is read but unused, and @ids_from feeds the loss only
/// through a cast to integer ids (no gradient flows through it).
constexpr const char *kUnusedParameters = R"mlir(
graph.model @unused {
  graph.param @w : tensor<3x2xf32> init #graph.normal<std = 0.5>
  graph.param @never : tensor<3xf32> init #graph.normal<std = 1.0> {weight_decay = true}
  graph.param @dead : tensor<2x2xf32> init #graph.normal<std = 1.0>
  graph.param @ids_from : tensor<4xf32> init #graph.uniform<low = 0.0, high = 2.9>
      {weight_decay = true}
  graph.param @table : tensor<3x2xf32> init #graph.normal<std = 1.0>
  graph.input @x : tensor<4x3xf32>
  func.func @forward() {
    %w = graph.get_param @w : tensor<3x2xf32>
    %dead = graph.get_param @dead : tensor<2x2xf32>
    %ids_from = graph.get_param @ids_from : tensor<4xf32>
    %table = graph.get_param @table : tensor<3x2xf32>
    %x = graph.get_input @x : tensor<4x3xf32>
    %ids = graph.cast %ids_from : tensor<4xf32> -> tensor<4xi32>
    %e = graph.embedding %table[%ids] : tensor<3x2xf32>, tensor<4xi32>
    %p = graph.matmul %x, %w : tensor<4x3xf32>, tensor<3x2xf32>
    %l = graph.mse_loss %p, %e : tensor<4x2xf32>
    graph.loss %l : tensor<f32>
    return
  }
}
)mlir";

TEST(TrainingPass, ParametersTheLossIgnoresGetAWarningAndStayUnchanged) {
  graph::GraphBuildTrainingOptions options;
  options.lr = 0.1;
  options.weightDecay = 0.5; // would move every trained parameter, even with a zero gradient
  std::string diagnostics;
  auto compiled = test_support::compileTrainingText(kUnusedParameters, options, &diagnostics);
  ASSERT_TRUE(compiled) << diagnostics;
  for (const char *name : {"never", "dead", "ids_from"}) {
    EXPECT_NE(
        diagnostics.find(std::string("warning: parameter @") + name + " does not affect the loss"),
        std::string::npos)
        << name << "\n"
        << diagnostics;
    EXPECT_THROW(plan::findBuffer(*compiled, std::string(name) + ".grad"), plan::PlanError);
  }
  for (const char *name : {"w", "table"})
    EXPECT_EQ(diagnostics.find(std::string("parameter @") + name), std::string::npos)
        << diagnostics;

  cpu::Executor executor(*compiled, cpu::Precision::F64);
  executor.initializeParameters(2);
  std::map<std::string, std::vector<double>> before;
  for (const plan::Parameter &parameter : compiled->parameters)
    before[parameter.name] = executor.parameterValues(parameter.name);
  for (uint64_t step = 0; step < 2; ++step) {
    executor.randomizeInputs(step);
    cpu::RunOptions options;
    options.step = step;
    options.training = true;
    executor.run(options);
    executor.runOptimizerStep(options);
  }
  for (const char *name : {"never", "dead", "ids_from"})
    EXPECT_EQ(executor.parameterValues(name), before[name]) << name;
  for (const char *name : {"w", "table"})
    EXPECT_NE(executor.parameterValues(name), before[name]) << name;
}

TEST(TrainingPass, InputsGetNoGradientOrState) {
  // Integer token ids and labels, and a float input added to the activations.
  constexpr const char *model = R"mlir(
graph.model @inputs {
  graph.param @emb : tensor<8x4xf32> init #graph.normal<std = 1.0>
  graph.param @head : tensor<4x5xf32> init #graph.normal<std = 1.0>
  graph.input @tokens : tensor<2x3xi32>
  graph.input @labels : tensor<2x3xi64>
  graph.input @noise : tensor<2x3x4xf32>
  func.func @forward() {
    %emb = graph.get_param @emb : tensor<8x4xf32>
    %head = graph.get_param @head : tensor<4x5xf32>
    %tokens = graph.get_input @tokens : tensor<2x3xi32>
    %labels = graph.get_input @labels : tensor<2x3xi64>
    %noise = graph.get_input @noise : tensor<2x3x4xf32>
    %x = graph.embedding %emb[%tokens] : tensor<8x4xf32>, tensor<2x3xi32>
    %h = graph.add %x, %noise : tensor<2x3x4xf32>, tensor<2x3x4xf32>
    %logits = graph.matmul %h, %head : tensor<2x3x4xf32>, tensor<4x5xf32>
    %l = graph.cross_entropy %logits, %labels : tensor<2x3x5xf32>, tensor<2x3xi64>
    graph.loss %l : tensor<f32>
    return
  }
}
)mlir";
  for (const char *optimizer : {"adamw", "sgd"}) {
    SCOPED_TRACE(optimizer);
    graph::GraphBuildTrainingOptions options;
    options.optimizer = optimizer;
    std::string diagnostics;
    auto compiled = test_support::compileTrainingText(model, options, &diagnostics);
    ASSERT_TRUE(compiled) << diagnostics;
    EXPECT_EQ(diagnostics, "");
    std::set<std::string> states;
    for (const plan::Buffer &buffer : compiled->buffers)
      if (buffer.role == plan::BufferRole::State)
        states.insert(buffer.name);
    std::set<std::string> expected =
        std::string(optimizer) == "adamw"
            ? std::set<std::string>{"emb.grad",  "emb.adam_m",  "emb.adam_v",
                                    "head.grad", "head.adam_m", "head.adam_v"}
            : std::set<std::string>{"emb.grad", "emb.momentum", "head.grad", "head.momentum"};
    EXPECT_EQ(states, expected);
    // Nothing of the backward pass writes an input.
    for (const plan::Input &input : compiled->inputs)
      for (const plan::Instruction &instruction : compiled->instructions)
        for (uint32_t result : instruction.results)
          EXPECT_NE(result, input.buffer) << input.name;
    // The integer inputs keep their roles; the model still trains.
    cpu::Executor executor(*compiled, cpu::Precision::F64);
    executor.initializeParameters(1);
    executor.randomizeInputs(2);
    executor.run({});
    EXPECT_GT(norm(gradOf(executor, "emb")), 0);
    EXPECT_GT(norm(gradOf(executor, "head")), 0);
  }
}

TEST(TrainingPass, RejectsBadOptionsAndModelsWithNothingToTrain) {
  std::string diagnostics;
  graph::GraphBuildTrainingOptions options;
  options.accumSteps = 0;
  EXPECT_FALSE(test_support::compileTrainingText(kLinear, options, &diagnostics));
  EXPECT_NE(diagnostics.find("invalid accum-steps"), std::string::npos) << diagnostics;

  options = {};
  options.optimizer = "adam";
  EXPECT_FALSE(test_support::compileTrainingText(kLinear, options, &diagnostics));
  EXPECT_NE(diagnostics.find("invalid optimizer"), std::string::npos) << diagnostics;

  EXPECT_FALSE(test_support::compileTrainingText(R"mlir(
graph.model @nothing {
  graph.param @w : tensor<2xf32> init #graph.zeros
  graph.input @x : tensor<2xf32>
  func.func @forward() {
    %x = graph.get_input @x : tensor<2xf32>
    %l = graph.mse_loss %x, %x : tensor<2xf32>
    graph.loss %l : tensor<f32>
    return
  }
}
)mlir",
                                                 {}, &diagnostics));
  EXPECT_NE(diagnostics.find("nothing to train"), std::string::npos) << diagnostics;
}

/// Whether the model holds a function named `name`.
bool hasFunction(graph::ModelOp model, llvm::StringRef name) {
  bool found = false;
  model.walk([&](mlir::func::FuncOp function) { found |= function.getSymName() == name; });
  return found;
}

TEST(TrainingPipeline, ConfigureSeesThePipelineAndItsFailureRunsNoPass) {
  mlir::MLIRContext context;
  registerModelDialects(context);
  llvm::SourceMgr sourceMgr;
  mlir::SourceMgrDiagnosticHandler handler(sourceMgr, &context);

  auto loaded = loadModel(test_support::examplePath("mlp/mlp.mlir"), sourceMgr, context);
  ASSERT_TRUE(succeeded(loaded));
  auto refuse = [](mlir::PassManager &pm) {
    EXPECT_GT(pm.size(), 0u); // The pipeline is built before the hook sees it.
    return mlir::failure();
  };
  EXPECT_TRUE(failed(runTrainingPipeline(*loaded, {}, graph::PipelinePart::All, refuse)));
  EXPECT_FALSE(hasFunction(loaded->model, "micro_step"));

  int calls = 0;
  auto count = [&](mlir::PassManager &) {
    ++calls;
    return mlir::success();
  };
  EXPECT_TRUE(succeeded(runTrainingPipeline(*loaded, {}, graph::PipelinePart::All, count)));
  EXPECT_EQ(calls, 1);
  EXPECT_TRUE(hasFunction(loaded->model, "micro_step"));
}

} // namespace
