//===- GradientCheckHelpers.h - finite-difference checks --------*- C++ -*-===//
//
// What the GradientCheck*Test.cpp files share: the text of a one-op model and the check of
// graph-build-training's gradients against finite differences. A check compiles a model's
// training step (accum-steps 1, so the loss seed is 1 and `<param>.grad` holds dL/dparam after
// one micro step), runs it once on the fp64 CPU executor, reads the accumulators, and compares
// them to central finite differences (L(p + h e_i) - L(p - h e_i)) / 2h computed with forward
// runs of the same plan: same dropout seed and step, so a dropout mask is the same in every run.
//
// Metric: for each parameter tensor, the norm-wise relative error over the checked elements S,
//   ||g_S - fd_S||_2 / ||fd_S||_2,
// which must be below the tolerance (1e-6 unless a case says otherwise). A check also requires
// ||fd_S||_2 to be well above zero, so a gradient that is identically zero on both sides cannot
// pass by accident.
//
// The op tests build tiny models whose parameters are the op's float operands and whose loss is
// sum(op(...) * R) (or its mean), R being a random float input of the op's result shape, so the
// cotangent reaching the op is not all ones.
//
//===--------------------------------------------------------------------------===//

#ifndef AMPC_TEST_UNIT_COMPILER_GRADIENTCHECKHELPERS_H
#define AMPC_TEST_UNIT_COMPILER_GRADIENTCHECKHELPERS_H

#include "CompileHelpers.h"
#include "runtime/cpu/Executor.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace ampc::test::gradient_check {

//===----------------------------------------------------------------------===//
// Model text
//===----------------------------------------------------------------------===//

using Shape = std::vector<int64_t>;

inline std::string tensorType(const Shape &shape, const std::string &element = "f32") {
  std::string text = "tensor<";
  for (int64_t dim : shape)
    text += std::to_string(dim) + "x";
  return text + element + ">";
}

/// A float operand of the op under test, declared as a parameter.
struct Param {
  std::string name;
  Shape shape;
  std::string init = "#graph.normal<std = 1.0>";
};

enum class Reduce { Sum, Mean };

/// A model whose parameters are `params` (read as %<name>), whose `body` defines %y of shape
/// `out`, and whose loss is sum (or mean) of %y * %r over every axis, @r being a float input of
/// shape `out`. `decls` adds declarations (integer inputs, say).
inline std::string opModel(const std::vector<Param> &params, const std::string &body,
                           const Shape &out, Reduce reduce = Reduce::Sum,
                           const std::string &decls = "") {
  std::ostringstream text;
  text << "graph.model @op {\n";
  for (const Param &param : params)
    text << "  graph.param @" << param.name << " : " << tensorType(param.shape) << " init "
         << param.init << "\n";
  text << "  graph.input @r : " << tensorType(out) << "\n" << decls;
  text << "  func.func @forward() {\n";
  for (const Param &param : params)
    text << "    %" << param.name << " = graph.get_param @" << param.name << " : "
         << tensorType(param.shape) << "\n";
  text << body;
  std::string outType = tensorType(out);
  text << "    %r = graph.get_input @r : " << outType << "\n";
  text << "    %yr = graph.mul %y, %r : " << outType << ", " << outType << "\n";
  if (out.empty()) {
    text << "    graph.loss %yr : tensor<f32>\n";
  } else {
    text << "    %l = graph." << (reduce == Reduce::Sum ? "sum" : "mean") << " %yr axes [";
    for (size_t i = 0; i < out.size(); ++i)
      text << (i ? ", " : "") << i;
    text << "] : " << outType << "\n";
    text << "    graph.loss %l : tensor<f32>\n";
  }
  text << "    return\n  }\n}\n";
  return text.str();
}

//===----------------------------------------------------------------------===//
// The check
//===----------------------------------------------------------------------===//

struct GradCheck {
  uint64_t initSeed = 1;
  uint64_t inputSeed = 2;
  /// Parameter values that replace the initialiser's.
  std::map<std::string, std::vector<double>> parameters;
  /// Runs after parameters and inputs are set (integer inputs, say).
  std::function<void(cpu::Executor &)> prepare;
  double h = 1e-5;
  double tolerance = 1e-6;
  /// Elements checked per parameter; 0 checks all of them.
  size_t samples = 0;
};

inline graph::GraphBuildTrainingOptions singleStep() {
  graph::GraphBuildTrainingOptions options;
  options.accumSteps = 1;
  return options;
}

/// Compiles `text`'s training step; fails the test (returning nullopt) on error.
inline std::optional<plan::Plan> compileForCheck(const std::string &text) {
  std::string diagnostics;
  auto compiled = test_support::compileTrainingText(text, singleStep(), &diagnostics);
  EXPECT_TRUE(compiled) << diagnostics << "\n" << text;
  return compiled;
}

/// Indices of the elements of a `count`-element tensor to check.
inline std::vector<size_t> sampleIndices(size_t count, size_t samples, std::mt19937_64 &rng) {
  std::vector<size_t> all(count);
  for (size_t i = 0; i < count; ++i)
    all[i] = i;
  if (samples == 0 || samples >= count)
    return all;
  std::shuffle(all.begin(), all.end(), rng);
  all.resize(samples);
  std::sort(all.begin(), all.end());
  return all;
}

/// Runs the gradient check of the description above on `compiled`; returns the relative error
/// of each checked parameter. The finite differences run `compiled` itself, or `forward` when
/// given: the same model lowered without its backward pass (faster), which must compute the
/// same loss.
inline std::map<std::string, double> checkGradients(const plan::Plan &compiled,
                                                    const GradCheck &check,
                                                    const plan::Plan *forward = nullptr) {
  std::map<std::string, double> errors;
  cpu::Executor executor(compiled, cpu::Precision::F64);
  executor.initializeParameters(check.initSeed);
  executor.randomizeInputs(check.inputSeed);
  for (const auto &[name, values] : check.parameters)
    executor.setParameterValues(name, values);
  if (check.prepare)
    check.prepare(executor);

  cpu::RunOptions options;
  options.seed = 5;
  options.step = 3;
  options.training = true;
  options.keepTemporaries = false;
  executor.resetState();
  double loss = executor.run(options);
  EXPECT_TRUE(std::isfinite(loss)) << loss;

  // Every accumulator is read before the finite-difference runs, which add to them.
  std::map<std::string, std::vector<double>> grads;
  for (const plan::Parameter &parameter : compiled.parameters)
    if (parameter.trained)
      grads[parameter.name] =
          executor.bufferValues(plan::findBuffer(compiled, parameter.name + ".grad"));

  std::optional<cpu::Executor> forwardExecutor;
  if (forward) {
    forwardExecutor.emplace(*forward, cpu::Precision::F64);
    for (const plan::Parameter &parameter : compiled.parameters)
      forwardExecutor->setParameterValues(parameter.name, executor.parameterValues(parameter.name));
    for (const plan::Input &input : compiled.inputs)
      forwardExecutor->setBufferValues(
          plan::findBuffer(*forward, compiled.buffers[input.buffer].name),
          executor.bufferValues(input.buffer));
    EXPECT_EQ(forwardExecutor->run(options), loss)
        << "the forward plan computes another loss than the training plan";
  }
  cpu::Executor &fdExecutor = forward ? *forwardExecutor : executor;

  std::mt19937_64 rng(17);
  for (const plan::Parameter &parameter : compiled.parameters) {
    if (!parameter.trained)
      continue; // model state (running statistics): no gradient
    const std::vector<double> &grad = grads[parameter.name];
    std::vector<double> values = executor.parameterValues(parameter.name);
    EXPECT_EQ(grad.size(), values.size()) << parameter.name;
    double diff2 = 0, fd2 = 0, grad2 = 0;
    for (size_t i : sampleIndices(values.size(), check.samples, rng)) {
      std::vector<double> perturbed = values;
      perturbed[i] = values[i] + check.h;
      fdExecutor.setParameterValues(parameter.name, perturbed);
      double plus = fdExecutor.run(options);
      perturbed[i] = values[i] - check.h;
      fdExecutor.setParameterValues(parameter.name, perturbed);
      double minus = fdExecutor.run(options);
      double fd = (plus - minus) / (2 * check.h);
      diff2 += (grad[i] - fd) * (grad[i] - fd);
      fd2 += fd * fd;
      grad2 += grad[i] * grad[i];
    }
    fdExecutor.setParameterValues(parameter.name, values);
    double error = std::sqrt(diff2) / std::max(std::sqrt(fd2), 1e-300);
    errors[parameter.name] = error;
    EXPECT_GT(std::sqrt(fd2), 1e-6) << parameter.name << ": the loss barely depends on it, so "
                                    << "the check would be vacuous";
    EXPECT_LT(error, check.tolerance)
        << parameter.name << ": |g - fd| / |fd| = " << error << " (|g| = " << std::sqrt(grad2)
        << ", |fd| = " << std::sqrt(fd2) << ")";
  }
  return errors;
}

/// Compiles `text` and checks every parameter's gradient.
inline void expectGradientsMatch(const std::string &text, const GradCheck &check = {}) {
  auto compiled = compileForCheck(text);
  if (!compiled)
    return;
  checkGradients(*compiled, check);
}

/// `count` values with magnitude in [0.25, 1.25] and random signs (inputs of relu kept away
/// from its kink).
inline std::vector<double> awayFromZero(size_t count, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> magnitude(0.25, 1.25);
  std::vector<double> values(count);
  for (double &value : values)
    value = (rng() & 1 ? 1 : -1) * magnitude(rng);
  return values;
}

inline constexpr const char *kPositive = "#graph.uniform<low = 0.5, high = 2.0>";

inline void setIntInput(cpu::Executor &executor, const std::string &name,
                        const std::vector<int32_t> &values) {
  executor.setInput(name, values.data(), values.size() * sizeof(int32_t));
}

} // namespace ampc::test::gradient_check

#endif // AMPC_TEST_UNIT_COMPILER_GRADIENTCHECKHELPERS_H
