//===- PlanEmitterTest.cpp - lowering graph models to plans ---------------===//
//
// Checks what the emitter writes into a plan (buffers, initializers, decay flags, id bounds,
// split lowering, constants, locations) and that a lowered model computes hand-derived values
// on the CPU backend.
//
//===--------------------------------------------------------------------------===//

#include "CompileHelpers.h"
#include "runtime/cpu/Executor.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

using namespace ampc;

namespace {

const plan::Parameter &parameterNamed(const plan::Plan &compiled, const std::string &name) {
  for (const plan::Parameter &parameter : compiled.parameters)
    if (parameter.name == name)
      return parameter;
  throw std::runtime_error("no parameter " + name);
}

const plan::Input &inputNamed(const plan::Plan &compiled, const std::string &name) {
  for (const plan::Input &input : compiled.inputs)
    if (input.name == name)
      return input;
  throw std::runtime_error("no input " + name);
}

constexpr const char *kLanguageModel = R"mlir(
graph.model @lm {
  graph.param @emb : tensor<16x4xf32> init #graph.normal<mean = 0.5, std = 0.02>
  graph.param @w : tensor<4x12xf32> init #graph.uniform<low = -0.1, high = 0.2>
  graph.param @b : tensor<12xf32> init #graph.zeros
  graph.param @g : tensor<4xf32> init #graph.ones {weight_decay = true}
  graph.param @m : tensor<4x4xf32> init #graph.zeros {weight_decay = false}
  graph.input @tokens : tensor<2x3xi32>
  graph.input @labels : tensor<6xi64>
  func.func private @project(%x: tensor<2x3x4xf32>, %w: tensor<4x12xf32>) -> tensor<2x3x12xf32> {
    %y = graph.matmul %x, %w : tensor<2x3x4xf32>, tensor<4x12xf32>
    return %y : tensor<2x3x12xf32>
  }
  func.func @forward() {
    %emb = graph.get_param @emb : tensor<16x4xf32>
    %w = graph.get_param @w : tensor<4x12xf32>
    %b = graph.get_param @b : tensor<12xf32>
    %t = graph.get_input @tokens : tensor<2x3xi32>
    %l = graph.get_input @labels : tensor<6xi64>
    %x = graph.embedding %emb[%t] : tensor<16x4xf32>, tensor<2x3xi32>
    %y = func.call @project(%x, %w) : (tensor<2x3x4xf32>, tensor<4x12xf32>) -> tensor<2x3x12xf32>
    %yb = graph.add %y, %b : tensor<2x3x12xf32>, tensor<12xf32>
    %p:3 = graph.split %yb axis 2 sizes [4, 4, 4] : tensor<2x3x12xf32>
    %c = graph.constant dense<[1.0, 2.0, 3.0, 4.0]> : tensor<4xf32>
    %q = graph.mul %p#1, %c : tensor<2x3x4xf32>, tensor<4xf32>
    %r = graph.reshape %q : tensor<2x3x4xf32> -> tensor<6x4xf32>
    %d = graph.dropout %r {p = 0.1 : f64} : tensor<6x4xf32>
    %e = graph.dropout %d {p = 0.2 : f64} : tensor<6x4xf32>
    %loss = graph.cross_entropy %e, %l : tensor<6x4xf32>, tensor<6xi64>
    graph.loss %loss : tensor<f32>
    return
  }
}
)mlir";

TEST(PlanEmitter, ParametersKeepInitializersAndDecayFlags) {
  std::string diagnostics;
  auto compiled = test_support::compileText(kLanguageModel, &diagnostics);
  ASSERT_TRUE(compiled) << diagnostics;
  const plan::Parameter &emb = parameterNamed(*compiled, "emb");
  EXPECT_EQ(emb.init, plan::InitKind::Normal);
  EXPECT_DOUBLE_EQ(emb.a, 0.5);
  EXPECT_DOUBLE_EQ(emb.b, 0.02);
  const plan::Parameter &w = parameterNamed(*compiled, "w");
  EXPECT_EQ(w.init, plan::InitKind::Uniform);
  EXPECT_DOUBLE_EQ(w.a, -0.1);
  EXPECT_DOUBLE_EQ(w.b, 0.2);
  // By default matrices decay and vectors (biases, gains) do not; the attribute overrides.
  EXPECT_TRUE(w.weightDecay);
  EXPECT_FALSE(parameterNamed(*compiled, "b").weightDecay);
  EXPECT_EQ(parameterNamed(*compiled, "b").init, plan::InitKind::Zeros);
  EXPECT_TRUE(parameterNamed(*compiled, "g").weightDecay);
  EXPECT_EQ(parameterNamed(*compiled, "g").init, plan::InitKind::Ones);
  EXPECT_FALSE(parameterNamed(*compiled, "m").weightDecay);
  EXPECT_EQ(compiled->buffers[emb.buffer].shape, (std::vector<int64_t>{16, 4}));
  EXPECT_EQ(compiled->buffers[emb.buffer].role, plan::BufferRole::Parameter);
}

TEST(PlanEmitter, IntegerInputsGetTheRangeOfValidIds) {
  auto compiled = test_support::compileText(kLanguageModel);
  ASSERT_TRUE(compiled);
  // Tokens index the 16-row table; labels name one of 4 classes.
  EXPECT_EQ(inputNamed(*compiled, "tokens").bound, 16);
  EXPECT_EQ(inputNamed(*compiled, "labels").bound, 4);
  EXPECT_EQ(compiled->buffers[inputNamed(*compiled, "labels").buffer].dtype, plan::DType::I64);
}

TEST(PlanEmitter, SplitBecomesOneSlicePerPiece) {
  auto compiled = test_support::compileText(kLanguageModel);
  ASSERT_TRUE(compiled);
  std::vector<std::vector<int64_t>> starts;
  for (const plan::Instruction &instruction : compiled->instructions)
    if (instruction.op == plan::OpCode::Slice)
      starts.push_back(std::get<std::vector<int64_t>>(instruction.attrs.at("starts")));
  EXPECT_EQ(starts, (std::vector<std::vector<int64_t>>{{0, 0, 0}, {0, 0, 4}, {0, 0, 8}}));
}

TEST(PlanEmitter, DropoutsGetDistinctStreams) {
  auto compiled = test_support::compileText(kLanguageModel);
  ASSERT_TRUE(compiled);
  std::vector<int64_t> streams;
  for (const plan::Instruction &instruction : compiled->instructions)
    if (instruction.op == plan::OpCode::Dropout)
      streams.push_back(std::get<int64_t>(instruction.attrs.at("stream")));
  EXPECT_EQ(streams, (std::vector<int64_t>{0, 1}));
}

TEST(PlanEmitter, ConstantsAreLittleEndianBitPatterns) {
  auto compiled = test_support::compileText(kLanguageModel);
  ASSERT_TRUE(compiled);
  ASSERT_EQ(compiled->constants.size(), 1u);
  const std::vector<uint8_t> &bytes = compiled->constants[0].bytes;
  ASSERT_EQ(bytes.size(), 16u);
  float values[4];
  std::memcpy(values, bytes.data(), sizeof(values));
  EXPECT_EQ(values[0], 1.0f);
  EXPECT_EQ(values[3], 4.0f);
}

TEST(PlanEmitter, InlinedInstructionsNameTheirCallSite) {
  auto compiled = test_support::compileText(kLanguageModel);
  ASSERT_TRUE(compiled);
  const plan::Instruction *matmul = nullptr;
  for (const plan::Instruction &instruction : compiled->instructions)
    if (instruction.op == plan::OpCode::MatMul)
      matmul = &instruction;
  ASSERT_NE(matmul, nullptr);
  // The matmul is on line 11 of the model text, called from line 21.
  EXPECT_NE(matmul->location.find("ampc_test_model.mlir:11:"), std::string::npos)
      << matmul->location;
  EXPECT_NE(matmul->location.find("(called from "), std::string::npos) << matmul->location;
  EXPECT_NE(matmul->location.find(":21:"), std::string::npos) << matmul->location;
}

TEST(PlanEmitter, BfloatConstantsKeepTheirBits) {
  auto compiled = test_support::compileText(R"mlir(
graph.model @c {
  func.func @forward() {
    %c = graph.constant dense<[1.0, -2.5]> : tensor<2xbf16>
    %f = graph.cast %c : tensor<2xbf16> -> tensor<2xf32>
    %s = graph.sum %f axes [0] : tensor<2xf32>
    graph.loss %s : tensor<f32>
    return
  }
}
)mlir");
  ASSERT_TRUE(compiled);
  ASSERT_EQ(compiled->constants.size(), 1u);
  // bf16 1.0 = 0x3F80, -2.5 = 0xC020.
  EXPECT_EQ(compiled->constants[0].bytes, (std::vector<uint8_t>{0x80, 0x3F, 0x20, 0xC0}));
  cpu::Executor executor(*compiled, cpu::Precision::F32);
  EXPECT_DOUBLE_EQ(executor.run({}), -1.5);
}

/// A linear model whose loss is worked out by hand: mean((x w + b - y)^2).
TEST(PlanEmitter, LoweredModelComputesHandDerivedLoss) {
  auto compiled = test_support::compileText(R"mlir(
graph.model @linear {
  graph.param @w : tensor<2x1xf32> init #graph.zeros
  graph.param @b : tensor<1xf32> init #graph.zeros
  graph.input @x : tensor<3x2xf32>
  graph.input @y : tensor<3x1xf32>
  func.func @forward() {
    %w = graph.get_param @w : tensor<2x1xf32>
    %b = graph.get_param @b : tensor<1xf32>
    %x = graph.get_input @x : tensor<3x2xf32>
    %y = graph.get_input @y : tensor<3x1xf32>
    %p = graph.matmul %x, %w : tensor<3x2xf32>, tensor<2x1xf32>
    %q = graph.add %p, %b : tensor<3x1xf32>, tensor<1xf32>
    %l = graph.mse_loss %q, %y : tensor<3x1xf32>
    graph.loss %l : tensor<f32>
    return
  }
}
)mlir");
  ASSERT_TRUE(compiled);
  cpu::Executor executor(*compiled, cpu::Precision::F64);
  executor.setParameterValues("w", {2.0, -1.0});
  executor.setParameterValues("b", {0.5});
  float x[] = {1, 2, 3, 4, 5, 6};
  float y[] = {0, 1, 2};
  executor.setInput("x", x, sizeof(x));
  executor.setInput("y", y, sizeof(y));
  // Predictions: 1*2-2*1+0.5 = 0.5, 3*2-4+0.5 = 2.5, 5*2-6+0.5 = 4.5; errors 0.5, 1.5, 2.5.
  double expected = (0.25 + 2.25 + 6.25) / 3.0;
  EXPECT_NEAR(executor.run({}), expected, 1e-12);
}

TEST(PlanEmitter, UnknownFileIsAReadableError) {
  std::string diagnostics;
  auto compiled = test_support::compileFile("/nonexistent/model.mlir", &diagnostics);
  EXPECT_FALSE(compiled);
  EXPECT_NE(diagnostics.find("cannot read model file '/nonexistent/model.mlir'"), std::string::npos)
      << diagnostics;
}

} // namespace
