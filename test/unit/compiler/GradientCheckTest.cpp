//===- GradientCheckTest.cpp - backward pass against finite differences ---===//
//
// Checks graph-build-training's gradients numerically. Each test compiles a model's training
// step (accum-steps 1, so the loss seed is 1 and `<param>.grad` holds dL/dparam after one micro
// step), runs it once on the fp64 CPU executor, reads the accumulators, and compares them to
// central finite differences (L(p + h e_i) - L(p - h e_i)) / 2h computed with forward runs of the
// same plan: same dropout seed and step, so a dropout mask is the same in every run.
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

#include "CompileHelpers.h"
#include "runtime/cpu/Executor.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <optional>
#include <random>
#include <sstream>

using namespace ampc;

namespace {

//===----------------------------------------------------------------------===//
// Model text
//===----------------------------------------------------------------------===//

using Shape = std::vector<int64_t>;

std::string tensorType(const Shape &shape, const std::string &element = "f32") {
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
std::string opModel(const std::vector<Param> &params, const std::string &body, const Shape &out,
                    Reduce reduce = Reduce::Sum, const std::string &decls = "") {
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

graph::GraphBuildTrainingOptions singleStep() {
  graph::GraphBuildTrainingOptions options;
  options.accumSteps = 1;
  return options;
}

/// Compiles `text`'s training step; fails the test (returning nullopt) on error.
std::optional<plan::Plan> compileForCheck(const std::string &text) {
  std::string diagnostics;
  auto compiled = test_support::compileTrainingText(text, singleStep(), &diagnostics);
  EXPECT_TRUE(compiled) << diagnostics << "\n" << text;
  return compiled;
}

/// Indices of the elements of a `count`-element tensor to check.
std::vector<size_t> sampleIndices(size_t count, size_t samples, std::mt19937_64 &rng) {
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
std::map<std::string, double> checkGradients(const plan::Plan &compiled, const GradCheck &check,
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
void expectGradientsMatch(const std::string &text, const GradCheck &check = {}) {
  auto compiled = compileForCheck(text);
  if (!compiled)
    return;
  checkGradients(*compiled, check);
}

/// `count` values with magnitude in [0.25, 1.25] and random signs (inputs of relu kept away
/// from its kink).
std::vector<double> awayFromZero(size_t count, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> magnitude(0.25, 1.25);
  std::vector<double> values(count);
  for (double &value : values)
    value = (rng() & 1 ? 1 : -1) * magnitude(rng);
  return values;
}

const char *kPositive = "#graph.uniform<low = 0.5, high = 2.0>";

//===----------------------------------------------------------------------===//
// Elementwise binary ops with broadcasting
//===----------------------------------------------------------------------===//

struct BinaryCase {
  Shape lhs, rhs, out;
};

void checkBinary(const std::string &op, const BinaryCase &shapes) {
  SCOPED_TRACE(op + " " + tensorType(shapes.lhs) + ", " + tensorType(shapes.rhs));
  // The divisor stays away from zero.
  std::string rhsInit = op == "div" ? kPositive : "#graph.normal<std = 1.0>";
  std::string body = "    %y = graph." + op + " %a, %b : " + tensorType(shapes.lhs) + ", " +
                     tensorType(shapes.rhs) + "\n";
  expectGradientsMatch(opModel({{"a", shapes.lhs}, {"b", shapes.rhs, rhsInit}}, body, shapes.out));
}

const std::vector<BinaryCase> kBroadcastCases = {
    {{3, 4}, {3, 4}, {3, 4}},       // same shape
    {{3, 4}, {4}, {3, 4}},          // a vector over rows
    {{4}, {3, 4}, {3, 4}},          // the lhs broadcasts
    {{3, 1}, {1, 4}, {3, 4}},       // both stretch
    {{2, 3, 4}, {}, {2, 3, 4}},     // a scalar
    {{}, {2, 3}, {2, 3}},           // a scalar lhs
    {{2, 1, 4}, {3, 1}, {2, 3, 4}}, // rank and size-1 broadcasting together
};

TEST(GradientCheck, Add) {
  for (const BinaryCase &shapes : kBroadcastCases)
    checkBinary("add", shapes);
}

TEST(GradientCheck, Sub) {
  for (const BinaryCase &shapes : kBroadcastCases)
    checkBinary("sub", shapes);
}

TEST(GradientCheck, Mul) {
  for (const BinaryCase &shapes : kBroadcastCases)
    checkBinary("mul", shapes);
}

TEST(GradientCheck, Div) {
  for (const BinaryCase &shapes : kBroadcastCases)
    checkBinary("div", shapes);
}

/// x * x: both operands of one op are the same value, whose gradient is the sum of both.
TEST(GradientCheck, MulOfAValueWithItself) {
  expectGradientsMatch(opModel(
      {{"a", {3, 4}}}, "    %y = graph.mul %a, %a : tensor<3x4xf32>, tensor<3x4xf32>\n", {3, 4}));
}

//===----------------------------------------------------------------------===//
// Elementwise unary ops
//===----------------------------------------------------------------------===//

void checkUnary(const std::string &op, const std::string &init = "#graph.normal<std = 1.0>",
                const std::map<std::string, std::vector<double>> &values = {}) {
  SCOPED_TRACE(op);
  GradCheck check;
  check.parameters = values;
  expectGradientsMatch(
      opModel({{"a", {3, 5}, init}}, "    %y = graph." + op + " %a : tensor<3x5xf32>\n", {3, 5}),
      check);
}

TEST(GradientCheck, Neg) { checkUnary("neg"); }

TEST(GradientCheck, Relu) {
  // Inputs at least 0.25 from the kink, with both signs.
  checkUnary("relu", "#graph.zeros", {{"a", awayFromZero(15, 3)}});
}

TEST(GradientCheck, Silu) { checkUnary("silu"); }
TEST(GradientCheck, Sigmoid) { checkUnary("sigmoid"); }
TEST(GradientCheck, Softplus) { checkUnary("softplus", "#graph.normal<std = 4.0>"); }
TEST(GradientCheck, Hardsigmoid) {
  // Below -3 (flat), between -3 and 3, above 3 (flat), at least 0.2 from either kink.
  checkUnary("hardsigmoid", "#graph.zeros",
             {{"a", {-5.1, -4.2, -3.3, -2.7, -2.1, -1.3, -0.4, 0.3, 0.9, 1.6, 2.2, 2.7, 3.4,
                     4.5, 6.2}}});
}
TEST(GradientCheck, Hardswish) {
  // Below -3, between -3 and 3 and above 3, at least 0.2 from either kink.
  checkUnary("hardswish", "#graph.zeros",
             {{"a", {-5.1, -4.2, -3.3, -2.7, -2.1, -1.3, -0.4, 0.3, 0.9, 1.6, 2.2, 2.7, 3.4,
                     4.5, 6.2}}});
}
TEST(GradientCheck, Tanh) { checkUnary("tanh"); }
TEST(GradientCheck, Exp) { checkUnary("exp"); }
TEST(GradientCheck, Log) { checkUnary("log", kPositive); }
TEST(GradientCheck, Sqrt) { checkUnary("sqrt", kPositive); }
TEST(GradientCheck, Rsqrt) { checkUnary("rsqrt", kPositive); }
TEST(GradientCheck, GeluErf) { checkUnary("gelu erf"); }
TEST(GradientCheck, GeluTanh) { checkUnary("gelu tanh"); }

//===----------------------------------------------------------------------===//
// Matmul
//===----------------------------------------------------------------------===//

/// lhs [..., M, K] (or [..., K, M] transposed) times rhs [..., K, N] (or [..., N, K]).
void checkMatmul(Shape lhsBatch, Shape rhsBatch, Shape outBatch, bool ta, bool tb) {
  const int64_t m = 3, k = 4, n = 5;
  Shape lhs = lhsBatch, rhs = rhsBatch, out = outBatch;
  Shape lhsMatrix = ta ? Shape{k, m} : Shape{m, k};
  Shape rhsMatrix = tb ? Shape{n, k} : Shape{k, n};
  lhs.insert(lhs.end(), lhsMatrix.begin(), lhsMatrix.end());
  rhs.insert(rhs.end(), rhsMatrix.begin(), rhsMatrix.end());
  out.insert(out.end(), {m, n});
  SCOPED_TRACE("matmul " + tensorType(lhs) + (ta ? " transpose_lhs" : "") + ", " + tensorType(rhs) +
               (tb ? " transpose_rhs" : ""));
  std::string body = std::string("    %y = graph.matmul %a, %b") + (ta ? " transpose_lhs" : "") +
                     (tb ? " transpose_rhs" : "") + " : " + tensorType(lhs) + ", " +
                     tensorType(rhs) + "\n";
  expectGradientsMatch(opModel({{"a", lhs}, {"b", rhs}}, body, out));
}

void checkMatmulAllTransposes(Shape lhsBatch, Shape rhsBatch, Shape outBatch) {
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      checkMatmul(lhsBatch, rhsBatch, outBatch, ta, tb);
}

TEST(GradientCheck, Matmul) { checkMatmulAllTransposes({}, {}, {}); }

/// A batch of activations times one weight, as in every linear layer.
TEST(GradientCheck, MatmulBatchedTimesMatrix) { checkMatmulAllTransposes({2}, {}, {2}); }

TEST(GradientCheck, MatmulMatrixTimesBatched) { checkMatmulAllTransposes({}, {2}, {2}); }

TEST(GradientCheck, MatmulBatchedTimesBatched) { checkMatmulAllTransposes({2}, {2}, {2}); }

/// Batch dimensions that broadcast: [2, 1] with [3] gives [2, 3]; [1] with [2] gives [2].
TEST(GradientCheck, MatmulBroadcastBatchDims) {
  checkMatmulAllTransposes({2, 1}, {3}, {2, 3});
  checkMatmul({1}, {2}, {2}, false, false);
  checkMatmul({2, 3}, {2, 1}, {2, 3}, false, true);
}

//===----------------------------------------------------------------------===//
// Data movement
//===----------------------------------------------------------------------===//

TEST(GradientCheck, Transpose) {
  expectGradientsMatch(opModel({{"a", {2, 3, 4}}},
                               "    %y = graph.transpose %a [2, 0, 1] : tensor<2x3x4xf32>\n",
                               {4, 2, 3}));
  expectGradientsMatch(opModel({{"a", {2, 3, 4, 5}}},
                               "    %y = graph.transpose %a [0, 2, 1, 3] : tensor<2x3x4x5xf32>\n",
                               {2, 4, 3, 5}));
}

TEST(GradientCheck, Reshape) {
  // Followed by a nonlinear op so that the gradient depends on where each element went.
  expectGradientsMatch(opModel({{"a", {2, 3, 4}}},
                               "    %s = graph.reshape %a : tensor<2x3x4xf32> -> tensor<3x8xf32>\n"
                               "    %y = graph.tanh %s : tensor<3x8xf32>\n",
                               {3, 8}));
}

TEST(GradientCheck, Broadcast) {
  expectGradientsMatch(opModel(
      {{"a", {4}}}, "    %y = graph.broadcast %a : tensor<4xf32> -> tensor<3x4xf32>\n", {3, 4}));
  expectGradientsMatch(
      opModel({{"a", {3, 1}}},
              "    %y = graph.broadcast %a : tensor<3x1xf32> -> tensor<2x3x5xf32>\n", {2, 3, 5}));
  expectGradientsMatch(opModel(
      {{"a", {}}}, "    %y = graph.broadcast %a : tensor<f32> -> tensor<2x3xf32>\n", {2, 3}));
}

TEST(GradientCheck, Slice) {
  expectGradientsMatch(
      opModel({{"a", {4, 6}}},
              "    %y = graph.slice %a starts [1, 2] sizes [2, 3] : tensor<4x6xf32>\n", {2, 3}));
  expectGradientsMatch(opModel(
      {{"a", {2, 3, 5}}},
      "    %y = graph.slice %a starts [1, 0, 4] sizes [1, 3, 1] : tensor<2x3x5xf32>\n", {1, 3, 1}));
}

TEST(GradientCheck, Split) {
  // Pieces 0 and 2 used (multiplied together), piece 1 left unused: its part of the gradient
  // is zero.
  expectGradientsMatch(
      opModel({{"a", {2, 8}}},
              "    %p:3 = graph.split %a axis 1 sizes [3, 2, 3] : tensor<2x8xf32>\n"
              "    %y = graph.mul %p#0, %p#2 : tensor<2x3xf32>, tensor<2x3xf32>\n",
              {2, 3}));
  // Only the middle piece used, along the first axis.
  expectGradientsMatch(
      opModel({{"a", {6, 2}}},
              "    %p:3 = graph.split %a axis 0 sizes [1, 3, 2] : tensor<6x2xf32>\n"
              "    %y = graph.exp %p#1 : tensor<3x2xf32>\n",
              {3, 2}));
}

TEST(GradientCheck, Concat) {
  expectGradientsMatch(
      opModel({{"a", {2, 3}}, {"b", {2, 2}}},
              "    %y = graph.concat %a, %b axis 1 : tensor<2x3xf32>, tensor<2x2xf32>\n", {2, 5}));
  expectGradientsMatch(
      opModel({{"a", {1, 3}}, {"b", {2, 3}}, {"c", {3, 3}}},
              "    %y = graph.concat %a, %b, %c axis 0 : tensor<1x3xf32>, tensor<2x3xf32>, "
              "tensor<3x3xf32>\n",
              {6, 3}));
}

//===----------------------------------------------------------------------===//
// Reductions
//===----------------------------------------------------------------------===//

struct ReduceCase {
  std::string axes;
  bool keepdims;
  Shape out;
};

const std::vector<ReduceCase> kReduceCases = {
    {"[1]", false, {3, 5}},        {"[1]", true, {3, 1, 5}}, {"[0, 2]", false, {4}},
    {"[0, 2]", true, {1, 4, 1}},   {"[2]", false, {3, 4}},   {"[0, 1, 2]", false, {}},
    {"[0, 1, 2]", true, {1, 1, 1}}};

void checkReduce(const std::string &op) {
  for (const ReduceCase &reduce : kReduceCases) {
    SCOPED_TRACE(op + " axes " + reduce.axes + (reduce.keepdims ? " keepdims" : ""));
    std::string body = "    %y = graph." + op + " %a axes " + reduce.axes +
                       (reduce.keepdims ? " keepdims" : "") + " : tensor<3x4x5xf32>\n";
    // Random normal values: no ties within a group of max (nor within h of one).
    expectGradientsMatch(opModel({{"a", {3, 4, 5}}}, body, reduce.out));
  }
}

TEST(GradientCheck, Sum) { checkReduce("sum"); }
TEST(GradientCheck, Mean) { checkReduce("mean"); }
TEST(GradientCheck, Max) { checkReduce("max"); }

/// The mean as the loss's own reduction (the cotangent is 1 / count before R).
TEST(GradientCheck, MeanReducedLoss) {
  expectGradientsMatch(
      opModel({{"a", {3, 4}}}, "    %y = graph.tanh %a : tensor<3x4xf32>\n", {3, 4}, Reduce::Mean));
}

//===----------------------------------------------------------------------===//
// Neural-network ops
//===----------------------------------------------------------------------===//

void setIntInput(cpu::Executor &executor, const std::string &name,
                 const std::vector<int32_t> &values) {
  executor.setInput(name, values.data(), values.size() * sizeof(int32_t));
}

TEST(GradientCheck, EmbeddingWithRepeatedIds) {
  GradCheck check;
  check.prepare = [](cpu::Executor &executor) {
    // Row 2 is read three times, row 0 twice, row 4 never.
    setIntInput(executor, "ids", {0, 2, 2, 5, 1, 0, 2, 3});
  };
  expectGradientsMatch(
      opModel({{"table", {6, 3}}},
              "    %ids = graph.get_input @ids : tensor<2x4xi32>\n"
              "    %y = graph.embedding %table[%ids] : tensor<6x3xf32>, tensor<2x4xi32>\n",
              {2, 4, 3}, Reduce::Sum, "  graph.input @ids : tensor<2x4xi32>\n"),
      check);
}

TEST(GradientCheck, LayerNorm) {
  GradCheck check;
  expectGradientsMatch(
      opModel({{"x", {3, 5}}, {"g", {5}, "#graph.normal<mean = 1.0, std = 0.5>"}, {"b", {5}}},
              "    %y = graph.layernorm %x, %g, %b : tensor<3x5xf32>, tensor<5xf32>, "
              "tensor<5xf32>\n",
              {3, 5}),
      check);
  // A batch of rows with a larger epsilon.
  expectGradientsMatch(
      opModel({{"x", {2, 3, 4}}, {"g", {4}, "#graph.normal<mean = 1.0, std = 0.5>"}, {"b", {4}}},
              "    %y = graph.layernorm %x, %g, %b {epsilon = 0.1 : f64} : tensor<2x3x4xf32>, "
              "tensor<4xf32>, tensor<4xf32>\n",
              {2, 3, 4}),
      check);
}

TEST(GradientCheck, RmsNorm) {
  expectGradientsMatch(opModel({{"x", {3, 5}}, {"g", {5}, "#graph.normal<mean = 1.0, std = 0.5>"}},
                               "    %y = graph.rmsnorm %x, %g : tensor<3x5xf32>, tensor<5xf32>\n",
                               {3, 5}));
  expectGradientsMatch(opModel(
      {{"x", {2, 3, 4}}, {"g", {4}, "#graph.normal<mean = 1.0, std = 0.5>"}},
      "    %y = graph.rmsnorm %x, %g {epsilon = 0.1 : f64} : tensor<2x3x4xf32>, tensor<4xf32>\n",
      {2, 3, 4}));
}

TEST(GradientCheck, Softmax) {
  expectGradientsMatch(
      opModel({{"x", {2, 3, 4}}}, "    %y = graph.softmax %x : tensor<2x3x4xf32>\n", {2, 3, 4}));
}

TEST(GradientCheck, SoftmaxCausal) {
  expectGradientsMatch(opModel(
      {{"x", {2, 4, 4}}}, "    %y = graph.softmax %x causal : tensor<2x4x4xf32>\n", {2, 4, 4}));
  // More keys than queries (S = 5 > T = 3): query i sees keys up to i + 2. The masked inputs
  // get no gradient (the check still covers them: their finite difference is 0).
  expectGradientsMatch(opModel(
      {{"x", {2, 3, 5}}}, "    %y = graph.softmax %x causal : tensor<2x3x5xf32>\n", {2, 3, 5}));
}

void checkAttention(const Shape &q, const Shape &k, const Shape &v, const Shape &out,
                    const std::string &attrs) {
  SCOPED_TRACE("attention " + tensorType(q) + " " + tensorType(k) + " " + tensorType(v) + attrs);
  expectGradientsMatch(opModel({{"q", q}, {"k", k}, {"v", v}},
                               "    %y = graph.attention %q, %k, %v" + attrs + " : " +
                                   tensorType(q) + ", " + tensorType(k) + ", " + tensorType(v) +
                                   "\n",
                               out));
}

//===----------------------------------------------------------------------===//
// Convolution, pooling, clip and pad
//===----------------------------------------------------------------------===//

TEST(GradientCheck, Conv2dStridedPaddedDilated) {
  // Asymmetric padding, unequal strides and dilations, a rectangular kernel.
  expectGradientsMatch(opModel({{"x", {2, 3, 7, 6}}, {"w", {4, 3, 3, 2}}},
                               "    %y = graph.conv2d %x, %w strides [2, 1] padding [1, 0, 2, 1] "
                               "dilations [1, 2] : tensor<2x3x7x6xf32>, tensor<4x3x3x2xf32>\n",
                               {2, 4, 4, 5}));
}

TEST(GradientCheck, Conv2dGroups) {
  // Depthwise with a channel multiplier of 2, then two groups of a 1x1 convolution.
  expectGradientsMatch(opModel({{"x", {2, 4, 5, 5}}, {"w", {8, 1, 3, 3}}},
                               "    %y = graph.conv2d %x, %w padding [1, 1, 1, 1] groups 4 : "
                               "tensor<2x4x5x5xf32>, tensor<8x1x3x3xf32>\n",
                               {2, 8, 5, 5}));
  expectGradientsMatch(opModel({{"x", {1, 4, 4, 4}}, {"w", {6, 2, 1, 1}}},
                               "    %y = graph.conv2d %x, %w groups 2 : tensor<1x4x4x4xf32>, "
                               "tensor<6x2x1x1xf32>\n",
                               {1, 6, 4, 4}));
}

TEST(GradientCheck, MaxPool2d) {
  // Overlapping windows with padding and ceil_mode, then dilation; random inputs have no ties.
  expectGradientsMatch(opModel({{"x", {2, 2, 7, 7}}},
                               "    %y = graph.max_pool2d %x kernel_size [3, 3] strides [2, 2] "
                               "padding [1, 1, 1, 1] ceil_mode : tensor<2x2x7x7xf32>\n",
                               {2, 2, 4, 4}));
  expectGradientsMatch(opModel({{"x", {2, 2, 7, 7}}},
                               "    %y = graph.max_pool2d %x kernel_size [2, 2] strides [1, 2] "
                               "dilations [2, 1] : tensor<2x2x7x7xf32>\n",
                               {2, 2, 5, 3}));
}

TEST(GradientCheck, AvgPool2d) {
  // The divisor with and without the padding, a ceil_mode window hanging past it.
  expectGradientsMatch(opModel({{"x", {2, 2, 7, 7}}},
                               "    %y = graph.avg_pool2d %x kernel_size [3, 3] strides [2, 2] "
                               "padding [1, 1, 1, 1] ceil_mode count_include_pad : "
                               "tensor<2x2x7x7xf32>\n",
                               {2, 2, 4, 4}));
  expectGradientsMatch(opModel({{"x", {2, 2, 6, 5}}},
                               "    %y = graph.avg_pool2d %x kernel_size [2, 3] strides [2, 2] "
                               "padding [1, 1, 1, 1] ceil_mode : tensor<2x2x6x5xf32>\n",
                               {2, 2, 4, 3}));
}

TEST(GradientCheck, BatchNorm) {
  // Training mode: the batch's statistics over N and the spatial axes, per channel; the
  // running statistics are untrained parameters and get no gradient. The update of the running
  // statistics runs in every finite-difference run but never feeds the loss.
  const std::string decls =
      "  graph.param @rm : tensor<3xf32> init #graph.zeros untrained\n"
      "  graph.param @rv : tensor<3xf32> init #graph.ones untrained\n";
  const std::string body =
      "    %rm = graph.get_param @rm : tensor<3xf32>\n"
      "    %rv = graph.get_param @rv : tensor<3xf32>\n"
      "    %y = graph.batch_norm %x, %g, %b, %rm, %rv {epsilon = 0.01 : f64} : tensor<2x3x2x2xf32>, "
      "tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>\n"
      "    graph.update_running_stats %x {momentum = 0.1 : f64, mean = @rm, var = @rv} : "
      "tensor<2x3x2x2xf32>\n";
  expectGradientsMatch(opModel({{"x", {2, 3, 2, 2}},
                                {"g", {3}, "#graph.normal<mean = 1.0, std = 0.5>"},
                                {"b", {3}}},
                               body, {2, 3, 2, 2}, Reduce::Sum, decls));
  // [N, C] (BatchNorm1d): statistics over the batch alone.
  expectGradientsMatch(opModel({{"x", {4, 3}}, {"g", {3}, "#graph.normal<mean = 1.0, std = 0.5>"},
                                {"b", {3}}},
                               "    %rm = graph.get_param @rm : tensor<3xf32>\n"
                               "    %rv = graph.get_param @rv : tensor<3xf32>\n"
                               "    %y = graph.batch_norm %x, %g, %b, %rm, %rv : tensor<4x3xf32>, "
                               "tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>\n",
                               {4, 3}, Reduce::Sum, decls));
}

TEST(GradientCheck, Clip) {
  // Below, inside and above [-1, 2], at least 0.1 from either bound.
  GradCheck check;
  check.parameters = {
      {"a", {-2.5, -1.6, -1.1, -0.9, -0.4, 0.0, 0.3, 0.8, 1.2, 1.7, 1.9, 2.1, 2.6, 3.3, 5.0}}};
  expectGradientsMatch(
      opModel({{"a", {3, 5}, "#graph.zeros"}},
              "    %y = graph.clip %a {min = -1.0 : f64, max = 2.0 : f64} : tensor<3x5xf32>\n",
              {3, 5}),
      check);
}

TEST(GradientCheck, Pad) {
  expectGradientsMatch(opModel({{"x", {2, 3}}},
                               "    %y = graph.pad %x low [1, 0] high [0, 2] : tensor<2x3xf32>\n",
                               {3, 5}));
}

TEST(GradientCheck, Attention) {
  checkAttention({2, 3, 4}, {2, 3, 4}, {2, 3, 6}, {2, 3, 6}, "");
  // More keys than queries, and an explicit scale.
  checkAttention({2, 3, 4}, {2, 5, 4}, {2, 5, 6}, {2, 3, 6}, "");
  checkAttention({2, 3, 4}, {2, 5, 4}, {2, 5, 6}, {2, 3, 6}, " scale 0.7");
  // Heads: [B, H, T, Dh].
  checkAttention({2, 2, 3, 4}, {2, 2, 3, 4}, {2, 2, 3, 4}, {2, 2, 3, 4}, "");
}

TEST(GradientCheck, AttentionCausal) {
  checkAttention({2, 4, 3}, {2, 4, 3}, {2, 4, 5}, {2, 4, 5}, " causal");
  checkAttention({2, 3, 4}, {2, 5, 4}, {2, 5, 6}, {2, 3, 6}, " causal");
  checkAttention({2, 3, 4}, {2, 5, 4}, {2, 5, 6}, {2, 3, 6}, " causal scale 0.3");
  checkAttention({2, 2, 3, 4}, {2, 2, 3, 4}, {2, 2, 3, 4}, {2, 2, 3, 4}, " causal");
}

/// Cross-entropy of random logits against constant labels, two of them ignored; the loss
/// (a scalar) is multiplied by R.
void checkCrossEntropy(const std::string &attrs) {
  SCOPED_TRACE("cross_entropy" + attrs);
  expectGradientsMatch(opModel({{"logits", {2, 3, 5}, "#graph.normal<std = 2.0>"}},
                               "    %labels = graph.constant dense<[[1, -100, 4], [0, 3, -100]]> : "
                               "tensor<2x3xi64>\n"
                               "    %y = graph.cross_entropy %logits, %labels" +
                                   attrs + " : tensor<2x3x5xf32>, tensor<2x3xi64>\n",
                               {}));
}

TEST(GradientCheck, CrossEntropyMeanWithIgnoredLabels) { checkCrossEntropy(""); }

TEST(GradientCheck, CrossEntropySumWithIgnoredLabels) {
  checkCrossEntropy(" {reduction = 1 : i32}");
}

TEST(GradientCheck, CrossEntropyOtherIgnoreIndex) {
  // ignore_index 3: the rows labelled 3 are left out of the mean.
  expectGradientsMatch(opModel(
      {{"logits", {4, 5}, "#graph.normal<std = 2.0>"}},
      "    %labels = graph.constant dense<[3, 0, 4, 3]> : tensor<4xi32>\n"
      "    %y = graph.cross_entropy %logits, %labels {ignore_index = 3 : i64} : tensor<4x5xf32>, "
      "tensor<4xi32>\n",
      {}));
}

TEST(GradientCheck, MseLoss) {
  // Both the prediction and the target are parameters.
  expectGradientsMatch(opModel({{"p", {3, 4}}, {"t", {3, 4}}},
                               "    %y = graph.mse_loss %p, %t : tensor<3x4xf32>\n", {}));
}

/// Two dropouts of one value draw different masks (their own streams); each backward dropout
/// must reuse its forward's.
TEST(GradientCheck, TwoDropoutsWithTheirOwnMasks) {
  expectGradientsMatch(opModel({{"a", {4, 5}}},
                               "    %d1 = graph.dropout %a {p = 0.3 : f64} : tensor<4x5xf32>\n"
                               "    %d2 = graph.dropout %a {p = 0.5 : f64} : tensor<4x5xf32>\n"
                               "    %t = graph.tanh %d2 : tensor<4x5xf32>\n"
                               "    %y = graph.mul %d1, %t : tensor<4x5xf32>, tensor<4x5xf32>\n",
                               {4, 5}));
}

TEST(GradientCheck, DropoutWithAFixedMask) {
  // training = true with the same seed and step in every run: the finite differences
  // differentiate the same masked, rescaled function.
  auto compiled =
      compileForCheck(opModel({{"a", {4, 5}}},
                              "    %d = graph.dropout %a {p = 0.3 : f64} : tensor<4x5xf32>\n"
                              "    %y = graph.tanh %d : tensor<4x5xf32>\n",
                              {4, 5}));
  ASSERT_TRUE(compiled);
  checkGradients(*compiled, {});
  // The mask drops some elements and keeps others, so both cases are covered.
  cpu::Executor executor(*compiled, cpu::Precision::F64);
  executor.initializeParameters(1);
  executor.randomizeInputs(2);
  cpu::RunOptions options;
  options.seed = 5;
  options.step = 3;
  options.training = true;
  executor.run(options);
  std::vector<double> grad = executor.bufferValues(plan::findBuffer(*compiled, "a.grad"));
  size_t zeros = std::count(grad.begin(), grad.end(), 0.0);
  EXPECT_GT(zeros, 0u);
  EXPECT_LT(zeros, grad.size());
}

/// f32 -> f32 is the only cast whose finite differences mean anything in fp64 (a cast to bf16
/// rounds, so its derivative is almost everywhere 0); its gradient is the identity.
TEST(GradientCheck, CastF32ToF32) {
  std::string body = "    %c = graph.cast %a : tensor<3x4xf32> -> tensor<3x4xf32>\n"
                     "    %y = graph.exp %c : tensor<3x4xf32>\n";
  std::string diagnostics;
  auto compiled = test_support::compileTrainingText(opModel({{"a", {3, 4}}}, body, {3, 4}),
                                                    singleStep(), &diagnostics);
  if (!compiled)
    GTEST_SKIP() << "an f32 -> f32 cast is not accepted: " << diagnostics;
  checkGradients(*compiled, {});
}

//===----------------------------------------------------------------------===//
// Composites
//===----------------------------------------------------------------------===//

/// A table read by an embedding and, transposed, by the output matmul gets the sum of both
/// gradients.
TEST(GradientCheck, TiedEmbeddingAndHead) {
  GradCheck check;
  check.prepare = [](cpu::Executor &executor) { setIntInput(executor, "ids", {1, 4, 1, 0, 5, 4}); };
  std::string text = opModel(
      {{"table", {6, 4}}},
      "    %ids = graph.get_input @ids : tensor<2x3xi32>\n"
      "    %x = graph.embedding %table[%ids] : tensor<6x4xf32>, tensor<2x3xi32>\n"
      "    %h = graph.tanh %x : tensor<2x3x4xf32>\n"
      "    %y = graph.matmul %h, %table transpose_rhs : tensor<2x3x4xf32>, tensor<6x4xf32>\n",
      {2, 3, 6}, Reduce::Sum, "  graph.input @ids : tensor<2x3xi32>\n");
  expectGradientsMatch(text, check);
}

/// One intermediate value feeding several ops, through a small residual block.
TEST(GradientCheck, ValueWithSeveralUses) {
  expectGradientsMatch(opModel(
      {{"x", {2, 3, 4}},
       {"w", {4, 4}},
       {"g", {4}, "#graph.normal<mean = 1.0, std = 0.3>"},
       {"b", {4}}},
      "    %n = graph.layernorm %x, %g, %b : tensor<2x3x4xf32>, tensor<4xf32>, tensor<4xf32>\n"
      "    %m = graph.matmul %n, %w : tensor<2x3x4xf32>, tensor<4x4xf32>\n"
      "    %a = graph.gelu tanh %m : tensor<2x3x4xf32>\n"
      "    %s = graph.add %x, %a : tensor<2x3x4xf32>, tensor<2x3x4xf32>\n"
      "    %y = graph.mul %s, %n : tensor<2x3x4xf32>, tensor<2x3x4xf32>\n",
      {2, 3, 4}));
}

//===----------------------------------------------------------------------===//
// Whole models
//===----------------------------------------------------------------------===//

/// Checks a sample of every parameter tensor of an example model (random inputs), the finite
/// differences running the model's forward plan.
void checkExampleModel(const std::string &relative, size_t samples, double h) {
  std::string path = test_support::examplePath(relative), diagnostics;
  auto training = test_support::compileTrainingFile(path, singleStep(), &diagnostics);
  ASSERT_TRUE(training) << diagnostics;
  auto forward = test_support::compileFile(path, &diagnostics);
  ASSERT_TRUE(forward) << diagnostics;
  GradCheck check;
  check.samples = samples;
  check.h = h;
  auto errors = checkGradients(*training, check, &*forward);
  // Every parameter was checked.
  EXPECT_EQ(errors.size(), training->parameters.size());
}

/// h = 1e-5: a larger step moves some of the 64 x 256 relu inputs across 0 when a bias changes.
TEST(GradientCheck, MlpExample) { checkExampleModel("mlp/mlp.mlir", 40, 1e-5); }

/// 20 elements of each of the 28 tensors. The gradients of the layernorm parameters are small
/// (~1e-4 per element) next to the loss (~5.5), so rounding in the loss limits h = 1e-5 to a
/// relative error of ~3e-7; h = 3e-5 gives ~1e-7.
TEST(GradientCheck, TinyGptExample) { checkExampleModel("gpt/tiny.mlir", 20, 3e-5); }

} // namespace
