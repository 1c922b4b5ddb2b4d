//===- PlanValidateTrainingTest.cpp - validatePlan on training plans -------===//
//
// Starts from a small valid training plan (one matmul, its weight gradient
// accumulated into state, an AdamW step) and breaks one rule per check:
// state dtypes, list visibility, in-place results, the gradient and
// optimizer opcodes' shapes and attributes, and the training fields.
//
//===----------------------------------------------------------------------===//

#include "PlanTestUtils.h"
#include "PlanValidateTestUtils.h"

#include <gtest/gtest.h>

using namespace ampc;
using namespace ampc::test;
using plan::BufferRole;
using plan::InitKind;
using V = std::vector<int64_t>;

namespace {

/// x [2, 3] @ w [3, 4] = y, loss = mean(y); dw = x^T dy accumulated into
/// state w.grad; optimizer: norm, lr, adamw(w, w.grad, w.m, w.v).
struct TrainingPlan {
  PlanBuilder b;
  uint32_t x, w, y, seed, dy, dw, grad, m, v, norm, lr;
  TrainingPlan() {
    x = b.input("x", DType::F32, {2, 3});
    w = b.parameter("w", DType::F32, {3, 4}, InitKind::Normal, 0, 0.02);
    y = b.op(OpCode::MatMul, {x, w}, DType::F32, {2, 4},
             {{"transpose_a", int64_t(0)}, {"transpose_b", int64_t(0)}});
    b.plan.loss =
        b.op(OpCode::Mean, {y}, DType::F32, {}, {{"axes", V{0, 1}}, {"keepdims", int64_t(0)}});
    seed = b.op(OpCode::GradSeed, {}, DType::F32, {}, {{"accum_steps", int64_t(1)}});
    dy = b.op(OpCode::Broadcast, {seed}, DType::F32, {2, 4});
    dw = b.op(OpCode::MatMul, {x, dy}, DType::F32, {3, 4},
              {{"transpose_a", int64_t(1)}, {"transpose_b", int64_t(0)}});
    grad = b.state("w.grad", {3, 4});
    b.instruction(OpCode::Accumulate, {grad, dw}, {grad});
    norm = b.optimizerOp(OpCode::GlobalNorm, {grad}, DType::F32, {});
    lr = b.optimizerOp(OpCode::LrSchedule, {}, DType::F32, {},
                       {{"kind", int64_t(0)},
                        {"lr", 0.01},
                        {"min_lr", 0.0},
                        {"warmup_steps", int64_t(0)},
                        {"decay_steps", int64_t(0)}});
    m = b.state("w.m", {3, 4});
    v = b.state("w.v", {3, 4});
    b.instruction(OpCode::AdamW, {w, grad, m, v, lr, norm}, {w, grad, m, v},
                  {{"beta1", 0.9},
                   {"beta2", 0.999},
                   {"eps", 1e-8},
                   {"weight_decay", 0.0},
                   {"clip_norm", 0.0}},
                  true);
    b.plan.gradNorm = norm;
    b.plan.learningRate = lr;
  }
  plan::Instruction &accumulate() { return b.plan.instructions[5]; }
  plan::Instruction &adamw() { return b.plan.optimizerInstructions[2]; }
};

TEST(PlanValidateTraining, AcceptsTrainingPlans) {
  TrainingPlan training;
  EXPECT_NO_THROW(plan::validatePlan(training.b.plan));
  EXPECT_NO_THROW(plan::validatePlan(everyOpcodePlan()));
}

TEST(PlanValidateTraining, StateBuffersAreF32) {
  TrainingPlan training;
  training.b.plan.buffers[training.m].dtype = DType::BF16;
  expectInvalid(training.b.plan, {"buffer", "'w.m'", "has role state, which must be f32"});
}

TEST(PlanValidateTraining, OptimizerCannotReadMicroStepTemporaries) {
  TrainingPlan training;
  training.b.plan.optimizerInstructions[0].operands = {training.dw};
  expectInvalid(training.b.plan,
                {"optimizer step instruction 0 (global_norm)", "is a temporary of the micro step"});
}

TEST(PlanValidateTraining, InPlaceResultsAreTheirOperands) {
  TrainingPlan adamw;
  std::swap(adamw.adamw().results[2], adamw.adamw().results[3]);
  expectInvalid(adamw.b.plan,
                {"optimizer step instruction 2 (adamw)", "result 2", "must be operand 2"});

  TrainingPlan accumulate;
  const uint32_t other = accumulate.b.state("other", {3, 4});
  accumulate.accumulate().results = {other};
  expectInvalid(accumulate.b.plan, {"instruction 5 (accumulate)", "must be operand 0"});
}

TEST(PlanValidateTraining, AccumulateShapesAndRoles) {
  TrainingPlan shape;
  shape.b.plan.buffers[shape.grad].shape = {4, 3};
  // The optimizer's shapes would fail too; the accumulate comes first.
  expectInvalid(shape.b.plan, {"instruction 5 (accumulate)", "must have the shape of operand 0"});

  TrainingPlan role;
  role.accumulate().operands[0] = role.dy;
  role.accumulate().results[0] = role.dy;
  expectInvalid(role.b.plan, {"operand 0", "must be a state buffer, is a temporary"});
}

TEST(PlanValidateTraining, StateIsWrittenOnlyInPlace) {
  TrainingPlan training;
  training.b.plan.instructions[3].results = {training.m};
  expectInvalid(training.b.plan, {"instruction 3 (broadcast)", "role state", "only in place"});
}

TEST(PlanValidateTraining, TemporariesAreWrittenOnceAcrossBothLists) {
  TrainingPlan training;
  training.b.plan.optimizerInstructions[1].results = {training.seed};
  expectInvalid(training.b.plan, {"optimizer step instruction 1", "written a second time"});
}

TEST(PlanValidateTraining, ResultCounts) {
  PlanBuilder b;
  const uint32_t x = b.input("x", DType::F32, {2, 4});
  const uint32_t g = b.parameter("g", DType::F32, {4});
  const uint32_t dx = b.buffer("dx", DType::F32, {2, 4});
  b.instruction(OpCode::LayerNormGrad, {x, g, x}, {dx}, {{"epsilon", 1e-5}});
  expectInvalid(b.plan, {"layernorm_grad", "exactly 3 results, has 1"});
}

TEST(PlanValidateTraining, TrainingFields) {
  TrainingPlan steps;
  steps.b.plan.accumulationSteps = 0;
  expectInvalid(steps.b.plan, {"accumulation steps must be >= 1"});

  TrainingPlan norm;
  norm.b.plan.gradNorm = norm.seed;
  expectInvalid(norm.b.plan, {"the grad norm", "is not written by the optimizer step"});

  TrainingPlan lr;
  lr.b.plan.learningRate = lr.grad;
  expectInvalid(lr.b.plan, {"the learning rate", "must be an f32 scalar"});

  TrainingPlan range;
  range.b.plan.gradNorm = 999;
  expectInvalid(range.b.plan, {"grad norm buffer 999 is out of range"});
}

TEST(PlanValidateTraining, InputUses) {
  PlanBuilder b;
  b.input("x", DType::F32, {2});
  b.plan.inputs[0].use = plan::InputUse::Labels;
  expectInvalid(b.plan, {"input 'x'", "only integer inputs can have use "
                                      "labels"});
}

TEST(PlanValidateTraining, GradientOpcodeShapes) {
  PlanBuilder pad;
  uint32_t x = pad.input("x", DType::F32, {2, 3});
  pad.op(OpCode::Pad, {x}, DType::F32, {4, 3}, {{"low", V{3, 0}}});
  expectInvalid(pad.plan, {"pad places 2 elements at offset 3 along "
                           "dimension 0, outside the result's extent 4"});

  PlanBuilder embedding;
  uint32_t ids = embedding.input("ids", DType::I64, {2, 3}, 5);
  uint32_t dy = embedding.input("dy", DType::F32, {2, 4, 8});
  embedding.op(OpCode::EmbeddingGrad, {ids, dy}, DType::F32, {5, 8});
  expectInvalid(embedding.plan, {"needs an incoming gradient [2, 3, 8]"});

  PlanBuilder attention;
  uint32_t q = attention.input("q", DType::F32, {2, 3, 4});
  uint32_t k = attention.input("k", DType::F32, {2, 5, 4});
  uint32_t v = attention.input("v", DType::F32, {2, 5, 6});
  uint32_t g = attention.input("g", DType::F32, {2, 3, 4});
  uint32_t dq = attention.buffer("dq", DType::F32, {2, 3, 4});
  uint32_t dk = attention.buffer("dk", DType::F32, {2, 5, 4});
  uint32_t dv = attention.buffer("dv", DType::F32, {2, 5, 6});
  attention.instruction(OpCode::AttentionGrad, {q, k, v, g}, {dq, dk, dv},
                        {{"causal", int64_t(1)}, {"scale", 0.5}});
  expectInvalid(attention.plan, {"attention output's shape [2, 3, 6]"});
  attention.plan.buffers[g].shape = {2, 3, 6};
  attention.plan.loss = attention.op(OpCode::Sum, {dq}, DType::F32, {},
                                     {{"axes", V{0, 1, 2}}, {"keepdims", int64_t(0)}});
  EXPECT_NO_THROW(plan::validatePlan(attention.plan));
  attention.plan.buffers[dv].shape = {2, 5, 4};
  expectInvalid(attention.plan, {"result 2", "must have shape [2, 5, 6]"});
  attention.plan.buffers[dv].shape = {2, 5, 6};

  // The forward's saved output and row log-sum-exp: q's dtype with the output's shape, and
  // f32 [..., T]; 4 or 6 operands.
  uint32_t o = attention.input("o", DType::F32, {2, 3, 6});
  uint32_t lse = attention.input("lse", DType::F32, {2, 3});
  plan::Instruction &grad = attention.plan.instructions[0];
  grad.operands = {q, k, v, g, o, lse};
  EXPECT_NO_THROW(plan::validatePlan(attention.plan));
  attention.plan.buffers[lse].dtype = DType::BF16;
  expectInvalid(attention.plan, {"operand 5", "(the saved log-sum-exp) must be f32 [2, 3]"});
  attention.plan.buffers[lse].dtype = DType::F32;
  attention.plan.buffers[o].shape = {2, 3, 4};
  expectInvalid(attention.plan, {"operand 4", "(the saved output) must be f32 [2, 3, 6]"});
  attention.plan.buffers[o].shape = {2, 3, 6};
  grad.operands = {q, k, v, g, o};
  expectInvalid(attention.plan, {"must have 4 operands (q, k, v, dy) or 6"});

  // The forward with its log-sum-exp: a second f32 result [..., T].
  PlanBuilder forward;
  uint32_t fq = forward.input("q", DType::F32, {2, 3, 4});
  uint32_t fout = forward.buffer("o", DType::F32, {2, 3, 4});
  uint32_t flse = forward.buffer("lse", DType::F32, {2, 3});
  forward.instruction(OpCode::Attention, {fq, fq, fq}, {fout, flse},
                      {{"causal", int64_t(0)}, {"scale", 0.5}});
  forward.plan.loss = forward.op(OpCode::Sum, {flse}, DType::F32, {},
                                 {{"axes", V{0, 1}}, {"keepdims", int64_t(0)}});
  EXPECT_NO_THROW(plan::validatePlan(forward.plan));
  forward.plan.buffers[flse].shape = {2, 3, 1};
  expectInvalid(forward.plan, {"result 1", "must have shape [2, 3]"});
  forward.plan.buffers[flse].shape = {2, 3};
  forward.plan.buffers[flse].dtype = DType::BF16;
  expectInvalid(forward.plan, {"result 1", "(the row log-sum-exp) must be f32, is bf16"});

  PlanBuilder max;
  x = max.input("x", DType::F32, {2, 3});
  dy = max.input("dy", DType::F32, {2, 1});
  max.op(OpCode::MaxGrad, {x, dy}, DType::F32, {2, 3}, {{"axes", V{1}}, {"keepdims", int64_t(0)}});
  expectInvalid(max.plan, {"must have the reduced shape [2]"});

  PlanBuilder crossEntropy;
  uint32_t logits = crossEntropy.input("logits", DType::F32, {3, 5});
  uint32_t labels = crossEntropy.input("labels", DType::I32, {3});
  uint32_t dloss = crossEntropy.input("dloss", DType::F32, {1});
  crossEntropy.op(OpCode::CrossEntropyGrad, {logits, labels, dloss}, DType::F32, {3, 5},
                  {{"ignore_index", int64_t(-100)}, {"reduction", int64_t(0)}});
  expectInvalid(crossEntropy.plan, {"operand 2", "must be a float scalar"});

  PlanBuilder norm;
  x = norm.input("x", DType::F32, {2, 4});
  uint32_t gamma = norm.parameter("gamma", DType::F32, {4});
  uint32_t dx = norm.buffer("dx", DType::F32, {2, 4});
  uint32_t dgamma = norm.buffer("dgamma", DType::F32, {2, 4});
  norm.instruction(OpCode::RmsNormGrad, {x, gamma, x}, {dx, dgamma}, {{"epsilon", 1e-6}});
  expectInvalid(norm.plan, {"result 1", "must have shape [4]"});
}

TEST(PlanValidateTraining, OptimizerOpcodeRules) {
  TrainingPlan beta;
  beta.adamw().attrs["beta1"] = 1.0;
  expectInvalid(beta.b.plan, {"attribute 'beta1' must be in [0, 1)"});

  PlanBuilder parameter;
  const uint32_t x = parameter.input("x", DType::F32, {});
  parameter.plan.loss = parameter.op(OpCode::Neg, {x}, DType::F32, {});
  const uint32_t p = parameter.parameter("p", DType::BF16, {2});
  const uint32_t g = parameter.state("p.grad", {2});
  const uint32_t m = parameter.state("p.m", {2});
  const uint32_t v = parameter.state("p.v", {2});
  const uint32_t norm = parameter.optimizerOp(OpCode::GlobalNorm, {g}, DType::F32, {});
  parameter.plan.gradNorm = parameter.plan.learningRate = norm;
  parameter.instruction(
      OpCode::AdamW, {p, g, m, v, norm, norm}, {p, g, m, v},
      {{"beta1", 0.9}, {"beta2", 0.999}, {"eps", 1e-8}, {"weight_decay", 0.0}, {"clip_norm", 0.0}},
      true);
  expectInvalid(parameter.plan,
                {"optimizer step instruction 1 (adamw)", "operand 0", "must be f32"});
  parameter.plan.buffers[p].dtype = DType::F32;
  EXPECT_NO_THROW(plan::validatePlan(parameter.plan));

  TrainingPlan role;
  const uint32_t fake = role.b.state("fake", {3, 4});
  role.adamw().operands[0] = role.adamw().results[0] = fake;
  expectInvalid(role.b.plan, {"operand 0", "must be a parameter buffer, is a state"});

  TrainingPlan alias;
  alias.adamw().operands[3] = alias.adamw().results[3] = alias.m;
  expectInvalid(alias.b.plan, {"result 3", "written a second time"});

  TrainingPlan schedule;
  schedule.b.plan.optimizerInstructions[1].attrs["kind"] = int64_t(2);
  expectInvalid(schedule.b.plan, {"lr_schedule", "'kind' must be 0 (constant) or 1 (cosine)"});

  TrainingPlan seed;
  seed.b.plan.instructions[2].attrs["accum_steps"] = int64_t(0);
  expectInvalid(seed.b.plan, {"grad_seed", "'accum_steps' must be >= 1"});

  TrainingPlan empty;
  empty.b.plan.optimizerInstructions[0].operands.clear();
  expectInvalid(empty.b.plan, {"global_norm", "at least 1 operand"});
}

} // namespace
