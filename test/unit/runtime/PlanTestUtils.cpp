//===- PlanTestUtils.cpp - Building small plans for the runtime tests -----===//

#include "PlanTestUtils.h"

#include "runtime/numerics/Float16.h"

#include <cstring>

namespace ampc::test {

using plan::BufferRole;
using plan::InitKind;

uint32_t PlanBuilder::buffer(const std::string &name, DType dtype, Shape shape, BufferRole role) {
  plan.buffers.push_back({name, dtype, std::move(shape), role});
  return static_cast<uint32_t>(plan.buffers.size() - 1);
}

uint32_t PlanBuilder::parameter(const std::string &name, DType dtype, Shape shape, InitKind init,
                                double a, double b) {
  uint32_t id = buffer(name, dtype, std::move(shape), BufferRole::Parameter);
  plan::Parameter parameter;
  parameter.name = name;
  parameter.buffer = id;
  parameter.init = init;
  parameter.a = a;
  parameter.b = b;
  plan.parameters.push_back(parameter);
  return id;
}

uint32_t PlanBuilder::input(const std::string &name, DType dtype, Shape shape, int64_t bound) {
  uint32_t id = buffer(name, dtype, std::move(shape), BufferRole::Input);
  plan.inputs.push_back({name, id, bound});
  return id;
}

uint32_t PlanBuilder::constant(const std::string &name, DType dtype, Shape shape,
                               const std::vector<double> &values) {
  uint32_t id = buffer(name, dtype, std::move(shape), BufferRole::Constant);
  plan.constants.push_back({id, encodeValues(dtype, values)});
  return id;
}

uint32_t PlanBuilder::op(OpCode op, std::vector<uint32_t> operands, DType dtype, Shape shape,
                         Attrs attrs, std::string location) {
  uint32_t result = buffer("", dtype, std::move(shape));
  plan::Instruction instruction;
  instruction.op = op;
  instruction.operands = std::move(operands);
  instruction.results = {result};
  instruction.attrs = std::move(attrs);
  instruction.location = std::move(location);
  plan.instructions.push_back(std::move(instruction));
  return result;
}

uint32_t PlanBuilder::state(const std::string &name, Shape shape) {
  return buffer(name, DType::F32, std::move(shape), BufferRole::State);
}

uint32_t PlanBuilder::optimizerOp(OpCode op, std::vector<uint32_t> operands, DType dtype,
                                  Shape shape, Attrs attrs) {
  uint32_t result = buffer("", dtype, std::move(shape));
  instruction(op, std::move(operands), {result}, std::move(attrs), true);
  return result;
}

void PlanBuilder::instruction(OpCode op, std::vector<uint32_t> operands,
                              std::vector<uint32_t> results, Attrs attrs, bool optimizer) {
  plan::Instruction instruction;
  instruction.op = op;
  instruction.operands = std::move(operands);
  instruction.results = std::move(results);
  instruction.attrs = std::move(attrs);
  (optimizer ? plan.optimizerInstructions : plan.instructions).push_back(std::move(instruction));
}

std::vector<uint8_t> encodeValues(DType dtype, const std::vector<double> &values) {
  std::vector<uint8_t> bytes;
  auto append = [&](uint64_t raw, size_t size) {
    for (size_t i = 0; i < size; ++i)
      bytes.push_back(static_cast<uint8_t>(raw >> (8 * i)));
  };
  for (double value : values) {
    switch (dtype) {
    case DType::F32:
      append(numerics::floatToBits(static_cast<float>(value)), 4);
      break;
    case DType::BF16:
      append(numerics::doubleToBF16Bits(value), 2);
      break;
    case DType::F16:
      append(numerics::doubleToF16Bits(value), 2);
      break;
    case DType::I32:
      append(static_cast<uint32_t>(static_cast<int32_t>(value)), 4);
      break;
    case DType::I64:
      append(static_cast<uint64_t>(static_cast<int64_t>(value)), 8);
      break;
    }
  }
  return bytes;
}

plan::Plan everyOpcodePlan() {
  using V = std::vector<int64_t>;
  PlanBuilder b("every_opcode");
  const DType f32 = DType::F32;
  const uint32_t x = b.input("x", f32, {2, 3, 4});
  const uint32_t ids = b.input("ids", DType::I64, {2, 3}, 5);
  const uint32_t labels = b.input("labels", DType::I32, {2, 3}, 4);
  const uint32_t w = b.parameter("w", f32, {4, 4}, InitKind::Normal, 0, 0.5);
  const uint32_t table = b.parameter("table", f32, {5, 4}, InitKind::Uniform, -1, 1);
  const uint32_t gamma = b.parameter("gamma", f32, {4}, InitKind::Ones);
  const uint32_t beta = b.parameter("beta", f32, {4}, InitKind::Zeros);
  b.plan.parameters.back().weightDecay = false;
  const uint32_t c = b.constant("c", f32, {4}, {0.5, 1.5, 2.0, 4.0});
  // Mixed precision: the matmul reads a bf16 copy of w, and the loss is
  // scaled dynamically.
  const uint32_t wCopy = b.buffer("w.bf16", DType::BF16, {4, 4}, BufferRole::ParameterCopy);
  b.plan.parameterCopies.push_back({wCopy, w});
  const uint32_t lossScale = b.state("loss_scale", {});
  const uint32_t growthTracker = b.state("loss_scale.growth_tracker", {});
  const uint32_t found = b.state("loss_scale.found_non_finite", {});
  const uint32_t applied = b.state("loss_scale.applied_steps", {});
  plan::LossScaling &scaling = b.plan.lossScaling;
  scaling.mode = plan::LossScaleMode::Dynamic;
  scaling.initialScale = 1024;
  scaling.growthFactor = 4;
  scaling.backoffFactor = 0.25;
  scaling.growthInterval = 3;
  scaling.minScale = 1.0f / 8;
  scaling.scale = lossScale;
  scaling.growthTracker = growthTracker;
  scaling.foundNonFinite = found;
  scaling.appliedSteps = applied;
  scaling.floorHits = b.state("loss_scale.floor_hits", {});
  b.plan.debugNonFinite = true;

  const uint32_t e = b.op(OpCode::Embedding, {table, ids}, f32, {2, 3, 4}, {}, "every.mlir:3:5");
  uint32_t h = b.op(OpCode::Add, {x, e}, f32, {2, 3, 4});
  h = b.op(OpCode::Sub, {h, c}, f32, {2, 3, 4});
  h = b.op(OpCode::Mul, {h, c}, f32, {2, 3, 4});
  h = b.op(OpCode::Div, {h, gamma}, f32, {2, 3, 4});
  h = b.op(OpCode::Neg, {h}, f32, {2, 3, 4});
  h = b.op(OpCode::Relu, {h}, f32, {2, 3, 4});
  h = b.op(OpCode::Silu, {h}, f32, {2, 3, 4});
  h = b.op(OpCode::Tanh, {h}, f32, {2, 3, 4});
  const uint32_t ex = b.op(OpCode::Exp, {h}, f32, {2, 3, 4});
  h = b.op(OpCode::Log, {ex}, f32, {2, 3, 4});
  h = b.op(OpCode::Add, {h, b.op(OpCode::Sqrt, {ex}, f32, {2, 3, 4})}, f32, {2, 3, 4});
  h = b.op(OpCode::Add, {h, b.op(OpCode::Rsqrt, {ex}, f32, {2, 3, 4})}, f32, {2, 3, 4});
  h = b.op(OpCode::Hardswish, {h}, f32, {2, 3, 4});
  h = b.op(OpCode::Sigmoid, {h}, f32, {2, 3, 4});
  h = b.op(OpCode::Hardsigmoid, {h}, f32, {2, 3, 4});
  h = b.op(OpCode::Softplus, {h}, f32, {2, 3, 4});
  h = b.op(OpCode::Gelu, {h}, f32, {2, 3, 4}, {{"approximate", int64_t(1)}});
  const uint32_t wUp = b.op(OpCode::Cast, {wCopy}, f32, {4, 4});
  const uint32_t mm =
      b.op(OpCode::MatMul, {h, wUp}, f32, {2, 3, 4},
           {{"transpose_a", int64_t(0)}, {"transpose_b", int64_t(1)}}, "every.mlir:9:7");
  // Images: mm as [N 2, C 3, H 2, W 2], a 1x1 convolution to 2 channels, clip, both pools.
  const uint32_t image = b.op(OpCode::Reshape, {mm}, f32, {2, 3, 2, 2});
  const uint32_t kernel = b.op(OpCode::Reshape, {b.op(OpCode::Slice, {wUp}, f32, {2, 3},
                                                      {{"starts", V{0, 0}}})},
                               f32, {2, 3, 1, 1});
  const Attrs convAttrs = {{"strides", V{1, 1}}, {"pads", V{0, 0, 0, 0}},
                           {"dilations", V{1, 1}}, {"groups", int64_t(1)}};
  const uint32_t conv = b.op(OpCode::Conv2d, {image, kernel}, f32, {2, 2, 2, 2}, convAttrs,
                             "every.mlir:10:3");
  const uint32_t clipped =
      b.op(OpCode::Clip, {conv}, f32, {2, 2, 2, 2}, {{"min", 0.0}, {"max", 6.0}});
  const Attrs maxPoolAttrs = {{"kernel_shape", V{2, 2}}, {"strides", V{1, 1}},
                              {"pads", V{0, 0, 0, 0}}, {"dilations", V{1, 1}},
                              {"ceil_mode", int64_t(0)}};
  const uint32_t maxPooled = b.op(OpCode::MaxPool2d, {clipped}, f32, {2, 2, 1, 1}, maxPoolAttrs);
  const Attrs avgPoolAttrs = {{"kernel_shape", V{2, 2}}, {"strides", V{2, 2}},
                              {"pads", V{1, 1, 1, 1}}, {"ceil_mode", int64_t(0)},
                              {"count_include_pad", int64_t(1)}};
  const uint32_t avgPooled = b.op(OpCode::AvgPool2d, {clipped}, f32, {2, 2, 2, 2}, avgPoolAttrs);
  // A batch norm over the convolution's 2 channels, its running statistics untrained.
  const uint32_t channelGain = b.op(OpCode::Slice, {gamma}, f32, {2}, {{"starts", V{0}}});
  const uint32_t runningMean = b.parameter("bn.running_mean", f32, {2});
  const uint32_t runningVar = b.parameter("bn.running_var", f32, {2}, plan::InitKind::Ones);
  for (size_t i = b.plan.parameters.size() - 2; i < b.plan.parameters.size(); ++i) {
    b.plan.parameters[i].trained = false;
    b.plan.parameters[i].weightDecay = false;
  }
  const uint32_t normalized =
      b.op(OpCode::BatchNorm, {conv, channelGain, channelGain, runningMean, runningVar}, f32,
           {2, 2, 2, 2}, {{"epsilon", 1e-5}});
  b.instruction(OpCode::UpdateRunningStats, {runningMean, runningVar, conv},
                {runningMean, runningVar}, {{"momentum", 0.1}});
  b.op(OpCode::Transpose, {mm}, f32, {2, 4, 3}, {{"permutation", V{0, 2, 1}}});
  const uint32_t flat = b.op(OpCode::Reshape, {mm}, f32, {6, 4});
  const uint32_t part = b.op(OpCode::Slice, {flat}, f32, {4, 4}, {{"starts", V{1, 0}}});
  b.op(OpCode::Concat, {part, part}, f32, {8, 4}, {{"axis", int64_t(0)}});
  b.op(OpCode::Broadcast, {c}, f32, {3, 4});
  b.op(OpCode::Sum, {mm}, f32, {2, 3, 1}, {{"axes", V{2}}, {"keepdims", int64_t(1)}});
  b.op(OpCode::Mean, {mm}, f32, {4}, {{"axes", V{0, 1}}, {"keepdims", int64_t(0)}});
  b.op(OpCode::Max, {mm}, f32, {2, 4}, {{"axes", V{1}}, {"keepdims", int64_t(0)}});
  const uint32_t ln =
      b.op(OpCode::LayerNorm, {mm, gamma, beta}, f32, {2, 3, 4}, {{"epsilon", 1e-5}});
  const uint32_t rn = b.op(OpCode::RmsNorm, {ln, gamma}, f32, {2, 3, 4}, {{"epsilon", 1e-6}});
  const uint32_t sm = b.op(OpCode::Softmax, {rn}, f32, {2, 3, 4}, {{"causal", int64_t(1)}});
  const uint32_t at = b.op(OpCode::Attention, {rn, rn, rn}, f32, {2, 3, 4},
                           {{"causal", int64_t(1)}, {"scale", 0.5}});
  // qkv [2, 3, 12]: q, k, v of 2 heads of 2 side by side; its lse [2, 2, 3].
  const uint32_t qkv = b.op(OpCode::Concat, {rn, rn, rn}, f32, {2, 3, 12}, {{"axis", int64_t(2)}});
  const uint32_t packedOut = b.buffer("packed_out", f32, {2, 3, 4});
  const uint32_t packedLse = b.buffer("packed_lse", f32, {2, 2, 3});
  b.instruction(OpCode::QkvAttention, {qkv}, {packedOut, packedLse},
                {{"heads", int64_t(2)}, {"causal", int64_t(1)}, {"scale", 0.5}});
  const uint32_t dr =
      b.op(OpCode::Dropout, {at}, f32, {2, 3, 4}, {{"p", 0.25}, {"stream", int64_t(7)}});
  const uint32_t logits = b.op(OpCode::Cast, {dr}, DType::BF16, {2, 3, 4});
  const uint32_t ce =
      b.op(OpCode::CrossEntropy, {logits, labels}, f32, {},
           {{"ignore_index", int64_t(-100)}, {"reduction", int64_t(0)}}, "every.mlir:20:3");
  const uint32_t mse = b.op(OpCode::MseLoss, {sm, at}, f32, {});
  b.plan.loss = b.op(OpCode::Add, {ce, mse}, f32, {});

  // The backward pass and accumulation (values are not meaningful: this
  // plan exercises the format, not the gradients).
  b.plan.inputs[1].use = plan::InputUse::Indices;
  b.plan.inputs[2].use = plan::InputUse::Labels;
  const uint32_t seed = b.op(OpCode::GradSeed, {lossScale}, f32, {}, {{"accum_steps", int64_t(2)}},
                             "every.mlir:30:1");
  const uint32_t dlogits = b.op(OpCode::CrossEntropyGrad, {logits, labels, seed}, f32, {2, 3, 4},
                                {{"ignore_index", int64_t(-100)}, {"reduction", int64_t(0)}});
  uint32_t g = b.op(OpCode::ReluGrad, {mm, dlogits}, f32, {2, 3, 4});
  g = b.op(OpCode::SiluGrad, {mm, g}, DType::BF16, {2, 3, 4});
  g = b.op(OpCode::HardswishGrad, {mm, g}, f32, {2, 3, 4});
  g = b.op(OpCode::SigmoidGrad, {mm, g}, f32, {2, 3, 4});
  g = b.op(OpCode::HardsigmoidGrad, {mm, g}, f32, {2, 3, 4});
  g = b.op(OpCode::SoftplusGrad, {mm, g}, f32, {2, 3, 4});
  g = b.op(OpCode::GeluGrad, {mm, g}, f32, {2, 3, 4}, {{"approximate", int64_t(0)}});
  g = b.op(OpCode::SoftmaxGrad, {sm, g}, f32, {2, 3, 4});
  const uint32_t dq = b.buffer("dq", f32, {2, 3, 4});
  const uint32_t dk = b.buffer("dk", f32, {2, 3, 4});
  const uint32_t dv = b.buffer("dv", f32, {2, 3, 4});
  b.instruction(OpCode::AttentionGrad, {rn, rn, rn, g}, {dq, dk, dv},
                {{"causal", int64_t(1)}, {"scale", 0.5}});
  b.op(OpCode::QkvAttentionGrad, {qkv, g, packedOut, packedLse}, f32, {2, 3, 12},
       {{"heads", int64_t(2)}, {"causal", int64_t(1)}, {"scale", 0.5}});
  const uint32_t dx = b.buffer("dx", f32, {2, 3, 4});
  const uint32_t dgamma = b.buffer("dgamma", f32, {4});
  const uint32_t dbeta = b.buffer("dbeta", f32, {4});
  b.instruction(OpCode::LayerNormGrad, {mm, gamma, dq}, {dx, dgamma, dbeta}, {{"epsilon", 1e-5}});
  const uint32_t drx = b.buffer("drx", f32, {2, 3, 4});
  const uint32_t drg = b.buffer("drg", f32, {4});
  b.instruction(OpCode::RmsNormGrad, {ln, gamma, dx}, {drx, drg}, {{"epsilon", 1e-6}});
  const uint32_t maxOut =
      b.op(OpCode::Max, {drx}, f32, {2, 4}, {{"axes", V{1}}, {"keepdims", int64_t(0)}});
  g = b.op(OpCode::MaxGrad, {drx, maxOut}, f32, {2, 3, 4},
           {{"axes", V{1}}, {"keepdims", int64_t(0)}});
  b.instruction(OpCode::BatchNormGrad, {conv, channelGain, normalized},
                {b.buffer("bn_dx", f32, {2, 2, 2, 2}), b.buffer("bn_dgamma", f32, {2}),
                 b.buffer("bn_dbeta", f32, {2})},
                {{"epsilon", 1e-5}});
  b.op(OpCode::ClipGrad, {conv, clipped}, f32, {2, 2, 2, 2}, {{"max", 6.0}});
  b.op(OpCode::Conv2dGradInput, {conv, kernel}, f32, {2, 3, 2, 2}, convAttrs);
  b.op(OpCode::Conv2dGradWeight, {image, conv}, f32, {2, 3, 1, 1}, convAttrs);
  b.op(OpCode::MaxPool2dGrad, {clipped, maxPooled}, f32, {2, 2, 2, 2}, maxPoolAttrs);
  b.op(OpCode::AvgPool2dGrad, {avgPooled}, f32, {2, 2, 2, 2}, avgPoolAttrs);
  const uint32_t padded = b.op(OpCode::Pad, {part}, f32, {6, 4}, {{"low", V{1, 0}}});
  const uint32_t dtable = b.op(OpCode::EmbeddingGrad, {ids, g}, f32, {5, 4});
  const uint32_t gradTable = b.state("table.grad", {5, 4});
  const uint32_t gradW = b.state("w.grad", {4, 4});
  b.instruction(OpCode::Accumulate, {gradTable, dtable, lossScale, found}, {gradTable, found});
  b.instruction(
      OpCode::Accumulate,
      {gradW, b.op(OpCode::Slice, {padded}, f32, {4, 4}, {{"starts", V{2, 0}}}), lossScale, found},
      {gradW, found});

  // The optimizer step: AdamW for the table, SGD for w.
  const uint32_t norm = b.optimizerOp(OpCode::GlobalNorm, {gradTable, gradW}, f32, {});
  const uint32_t lr = b.optimizerOp(OpCode::LrSchedule, {}, f32, {},
                                    {{"kind", int64_t(1)},
                                     {"lr", 3e-4},
                                     {"min_lr", 3e-5},
                                     {"warmup_steps", int64_t(10)},
                                     {"decay_steps", int64_t(0)}});
  const uint32_t m = b.state("table.m", {5, 4});
  const uint32_t v = b.state("table.v", {5, 4});
  b.instruction(
      OpCode::AdamW, {table, gradTable, m, v, lr, norm, found, applied}, {table, gradTable, m, v},
      {{"beta1", 0.9}, {"beta2", 0.95}, {"eps", 1e-8}, {"weight_decay", 0.1}, {"clip_norm", 1.0}},
      true);
  const uint32_t momentum = b.state("w.momentum", {4, 4});
  b.instruction(OpCode::Sgd, {w, gradW, momentum, lr, norm, found, applied, wCopy},
                {w, gradW, momentum, wCopy},
                {{"momentum", 0.9}, {"weight_decay", 0.0}, {"clip_norm", 0.0}}, true);
  b.plan.optimizerInstructions.back().location = "every.mlir:40:2";
  b.instruction(OpCode::UpdateLossScale, {lossScale, growthTracker, found, applied},
                {lossScale, growthTracker, found, applied},
                {{"dynamic", int64_t(1)},
                 {"growth_factor", 4.0},
                 {"backoff_factor", 0.25},
                 {"growth_interval", int64_t(3)},
                 {"min_scale", 0.125}},
                true);
  b.plan.gradNorm = norm;
  b.plan.learningRate = lr;
  b.plan.accumulationSteps = 2;
  b.plan.trainingSummary = "adamw lr=3e-4 betas=(0.9,0.95) eps=1e-8 wd=0.1 "
                           "clip=1 schedule=cosine warmup=10";
  return b.plan;
}

} // namespace ampc::test
