//===- CpuConvTest.cpp - convolution, pooling, clip, batch norm by hand ---===//
//
// Hand-computed values of the conv2d, max_pool2d, avg_pool2d and clip opcodes and their
// gradients on the CPU backend: padding (asymmetric, and windows that lie mostly in it),
// strides, groups, PyTorch's choices for ties and NaN in max pooling, its divisor in average
// pooling (with and without the padding, and a ceil_mode window hanging past the input); batch
// norm with the batch's statistics and the running ones, and the update of the latter.
//
//===----------------------------------------------------------------------===//

#include "CpuTestUtils.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

using namespace ampc;
using namespace ampc::test;

namespace {

using Ints = std::vector<int64_t>;

Attrs convAttrs(Ints strides, Ints pads, Ints dilations = {1, 1}, int64_t groups = 1) {
  return {{"strides", strides}, {"pads", pads}, {"dilations", dilations}, {"groups", groups}};
}

Attrs maxPoolAttrs(Ints kernel, Ints strides, Ints pads, bool ceil = false) {
  return {{"kernel_shape", kernel}, {"strides", strides}, {"pads", pads},
          {"dilations", Ints{1, 1}}, {"ceil_mode", int64_t(ceil)}};
}

Attrs avgPoolAttrs(Ints kernel, Ints strides, Ints pads, bool ceil, bool includePad) {
  return {{"kernel_shape", kernel}, {"strides", strides}, {"pads", pads},
          {"ceil_mode", int64_t(ceil)}, {"count_include_pad", int64_t(includePad)}};
}

const std::vector<double> kOneToNine = {1, 2, 3, 4, 5, 6, 7, 8, 9};

TEST(CpuConv, Conv2dHandValues) {
  // x = 1..9 as 3x3, w = [[1, 2], [3, 4]]: y[0][0] = 1 + 2*2 + 3*4 + 4*5.
  auto out = runF32(OpCode::Conv2d,
                    {{DType::F32, {1, 1, 3, 3}, kOneToNine}, {DType::F32, {1, 1, 2, 2}, {1, 2, 3, 4}}},
                    {1, 1, 2, 2}, convAttrs({1, 1}, {0, 0, 0, 0}));
  expectNear(out, {37, 47, 67, 77}, 0);
  // Stride 2 with padding at the top and left only: the first window sees x[0][0] alone
  // (under w's last tap), the last sees x[1..2][1..2].
  out = runF32(OpCode::Conv2d,
               {{DType::F32, {1, 1, 3, 3}, kOneToNine}, {DType::F32, {1, 1, 2, 2}, {1, 2, 3, 4}}},
               {1, 1, 2, 2}, convAttrs({2, 2}, {1, 1, 0, 0}));
  expectNear(out, {4, 2 * 3 + 3 * 4, 4 * 2 + 7 * 4, 77}, 0);
}

TEST(CpuConv, Conv2dGroupsKeepChannelsApart) {
  // Two groups of one channel: y0 = 2 x0, y1 = -x1.
  auto out = runF32(OpCode::Conv2d,
                    {{DType::F32, {1, 2, 2, 2}, {1, 2, 3, 4, 10, 20, 30, 40}},
                     {DType::F32, {2, 1, 1, 1}, {2, -1}}},
                    {1, 2, 2, 2}, convAttrs({1, 1}, {0, 0, 0, 0}, {1, 1}, 2));
  expectNear(out, {2, 4, 6, 8, -10, -20, -30, -40}, 0);
}

TEST(CpuConv, Conv2dGradients) {
  // A one-hot dy at the first output puts w at the top-left of dx.
  auto dx = runF32(OpCode::Conv2dGradInput,
                   {{DType::F32, {1, 1, 2, 2}, {1, 0, 0, 0}}, {DType::F32, {1, 1, 2, 2}, {1, 2, 3, 4}}},
                   {1, 1, 3, 3}, convAttrs({1, 1}, {0, 0, 0, 0}));
  expectNear(dx, {1, 2, 0, 3, 4, 0, 0, 0, 0}, 0);
  // dy = 1 at outputs (0, 0) and (1, 1): dw[p][q] = x[p][q] + x[1 + p][1 + q].
  auto dw = runF32(OpCode::Conv2dGradWeight,
                   {{DType::F32, {1, 1, 3, 3}, kOneToNine}, {DType::F32, {1, 1, 2, 2}, {1, 0, 0, 1}}},
                   {1, 1, 2, 2}, convAttrs({1, 1}, {0, 0, 0, 0}));
  expectNear(dw, {1 + 5, 2 + 6, 4 + 8, 5 + 9}, 0);
}

TEST(CpuConv, MaxPoolOverlappingWindowsAndTheirGradient) {
  const std::vector<double> x = {1, 5, 2, 7, 3, 9, 4, 8, 6};
  auto out = runF32(OpCode::MaxPool2d, {{DType::F32, {1, 1, 3, 3}, x}}, {1, 1, 2, 2},
                    maxPoolAttrs({2, 2}, {1, 1}, {0, 0, 0, 0}));
  expectNear(out, {7, 9, 8, 9}, 0);
  // 9 wins two windows: its gradient is the sum of theirs.
  auto dx = runF32(OpCode::MaxPool2dGrad,
                   {{DType::F32, {1, 1, 3, 3}, x}, {DType::F32, {1, 1, 2, 2}, {1, 10, 100, 1000}}},
                   {1, 1, 3, 3}, maxPoolAttrs({2, 2}, {1, 1}, {0, 0, 0, 0}));
  expectNear(dx, {0, 0, 0, 1, 0, 1010, 0, 100, 0}, 0);
}

TEST(CpuConv, MaxPoolTiesGoFirstAndTheLastNaNWins) {
  auto dx = runF32(OpCode::MaxPool2dGrad,
                   {{DType::F32, {1, 1, 2, 2}, {3, 3, 3, 3}}, {DType::F32, {1, 1, 1, 1}, {1}}},
                   {1, 1, 2, 2}, maxPoolAttrs({2, 2}, {1, 1}, {0, 0, 0, 0}));
  expectNear(dx, {1, 0, 0, 0}, 0);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  auto out = runF32(OpCode::MaxPool2d, {{DType::F32, {1, 1, 2, 2}, {1, nan, 2, nan}}},
                    {1, 1, 1, 1}, maxPoolAttrs({2, 2}, {1, 1}, {0, 0, 0, 0}));
  EXPECT_TRUE(std::isnan(out[0]));
  dx = runF32(OpCode::MaxPool2dGrad,
              {{DType::F32, {1, 1, 2, 2}, {1, nan, 2, nan}}, {DType::F32, {1, 1, 1, 1}, {1}}},
              {1, 1, 2, 2}, maxPoolAttrs({2, 2}, {1, 1}, {0, 0, 0, 0}));
  expectNear(dx, {0, 0, 0, 1}, 0);
}

TEST(CpuConv, MaxPoolPaddingNeverWins) {
  // Each 2x2 window at stride 2 over the padded 4x4 holds one input element, negative ones too.
  auto out = runF32(OpCode::MaxPool2d, {{DType::F32, {1, 1, 2, 2}, {-1, -2, -3, -4}}},
                    {1, 1, 2, 2}, maxPoolAttrs({2, 2}, {2, 2}, {1, 1, 1, 1}, true));
  expectNear(out, {-1, -2, -3, -4}, 0);
}

TEST(CpuConv, AvgPoolDivisors) {
  const std::vector<double> x = {1, 2, 3, 4};
  // One input element per window: divided by the 4 taps with the padding, by 1 without.
  auto out = runF32(OpCode::AvgPool2d, {{DType::F32, {1, 1, 2, 2}, x}}, {1, 1, 2, 2},
                    avgPoolAttrs({2, 2}, {2, 2}, {1, 1, 1, 1}, false, true));
  expectNear(out, {0.25, 0.5, 0.75, 1}, 0);
  out = runF32(OpCode::AvgPool2d, {{DType::F32, {1, 1, 2, 2}, x}}, {1, 1, 2, 2},
               avgPoolAttrs({2, 2}, {2, 2}, {1, 1, 1, 1}, false, false));
  expectNear(out, x, 0);
  // ceil_mode over 3x3 without padding: the last windows hang past the input and count only
  // what lies inside it, even with count_include_pad (PyTorch's divisor).
  out = runF32(OpCode::AvgPool2d, {{DType::F32, {1, 1, 3, 3}, kOneToNine}}, {1, 1, 2, 2},
               avgPoolAttrs({2, 2}, {2, 2}, {0, 0, 0, 0}, true, true));
  expectNear(out, {(1 + 2 + 4 + 5) / 4.0, (3 + 6) / 2.0, (7 + 8) / 2.0, 9}, 0);
  // The gradient spreads dy / divisor over each window's input elements.
  auto dx = runF32(OpCode::AvgPool2dGrad, {{DType::F32, {1, 1, 2, 2}, {4, 2, 2, 1}}},
                   {1, 1, 3, 3}, avgPoolAttrs({2, 2}, {2, 2}, {0, 0, 0, 0}, true, true));
  expectNear(dx, {1, 1, 1, 1, 1, 1, 1, 1, 1}, 0);
}

TEST(CpuConv, ClipAndItsGradient) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  auto out = runF32(OpCode::Clip, {{DType::F32, {5}, {-2, -0.5, 0.5, 7, nan}}}, {5},
                    {{"min", -1.0}, {"max", 6.0}});
  expectNear({out.begin(), out.begin() + 4}, {-1, -0.5, 0.5, 6}, 0);
  EXPECT_TRUE(std::isnan(out[4]));
  // An absent bound is no bound.
  out = runF32(OpCode::Clip, {{DType::F32, {2}, {-2, 7}}}, {2}, {{"min", -1.0}});
  expectNear(out, {-1, 7}, 0);
  // The bounds themselves pass the gradient (torch.clamp); NaN does not.
  auto dx = runF32(OpCode::ClipGrad,
                   {{DType::F32, {5}, {-1, 0, 6, 6.5, nan}}, {DType::F32, {5}, {1, 1, 1, 1, 1}}},
                   {5}, {{"min", -1.0}, {"max", 6.0}});
  expectNear(dx, {1, 1, 1, 0, 0}, 0);
}

TEST(CpuConv, BatchNormBatchAndRunningStatistics) {
  // One channel of 1, 3, 5, 7 over two images: mean 4, biased variance 5.
  const double eps = 1e-5;
  const std::vector<TensorSpec> operands = {{DType::F32, {2, 1, 1, 2}, {1, 3, 5, 7}},
                                            {DType::F32, {1}, {2}},   // gamma
                                            {DType::F32, {1}, {0.5}}, // beta
                                            {DType::F32, {1}, {1}},   // running mean
                                            {DType::F32, {1}, {4}}};  // running variance
  cpu::RunOptions training;
  training.training = true;
  auto out = runOp(OpCode::BatchNorm, operands, DType::F32, {2, 1, 1, 2}, {{"epsilon", eps}},
                   cpu::Precision::F64, training);
  std::vector<double> expected;
  for (double x : {1, 3, 5, 7})
    expected.push_back((x - 4) / std::sqrt(5 + eps) * 2 + 0.5);
  expectNear(out, expected, 1e-15);
  // Evaluating: the running statistics.
  out = runOp(OpCode::BatchNorm, operands, DType::F32, {2, 1, 1, 2}, {{"epsilon", eps}},
              cpu::Precision::F64);
  expected.clear();
  for (double x : {1, 3, 5, 7})
    expected.push_back((x - 1) / std::sqrt(4 + eps) * 2 + 0.5);
  expectNear(out, expected, 1e-15);
}

TEST(CpuConv, UpdateRunningStatisticsWhileTrainingOnly) {
  // mean <- 0.9 * 1 + 0.1 * 4; var <- 0.9 * 4 + 0.1 * 20 / 3 (unbiased); count <- 2 + 1.
  PlanBuilder b;
  const uint32_t x = b.input("x", DType::F32, {2, 1, 1, 2});
  const uint32_t mean = b.parameter("mean", DType::F32, {1}, plan::InitKind::Ones);
  const uint32_t var = b.parameter("var", DType::F32, {1}, plan::InitKind::Ones);
  const uint32_t count = b.parameter("count", DType::F32, {});
  for (plan::Parameter &parameter : b.plan.parameters) {
    parameter.trained = false;
    parameter.weightDecay = false;
  }
  b.instruction(OpCode::UpdateRunningStats, {mean, var, count, x}, {mean, var, count},
                {{"momentum", 0.1}});
  b.plan.loss = b.op(OpCode::Sum, {x}, DType::F32, {},
                     {{"axes", Shape{0, 1, 2, 3}}, {"keepdims", int64_t(0)}});
  cpu::Executor executor(b.plan, cpu::Precision::F64);
  executor.initializeParameters(0);
  executor.setParameterValues("var", {4});
  executor.setParameterValues("count", {2});
  const std::vector<uint8_t> bytes = encodeValues(DType::F32, {1, 3, 5, 7});
  executor.setInput("x", bytes.data(), bytes.size());
  executor.run({}); // evaluating: unchanged
  expectNear(executor.parameterValues("mean"), {1}, 0);
  cpu::RunOptions training;
  training.training = true;
  executor.run(training);
  expectNear(executor.parameterValues("mean"), {0.9 + 0.4}, 1e-15);
  expectNear(executor.parameterValues("var"), {0.9 * 4 + 0.1 * 20.0 / 3}, 1e-15);
  expectNear(executor.parameterValues("count"), {3}, 0);
}

} // namespace
