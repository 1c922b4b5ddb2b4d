//===- PlanValidatePrecisionTest.cpp - validatePlan on mixed precision ----===//
//
// Starts from a small valid mixed-precision training plan (a bf16 copy of
// the weight read by a bf16 matmul, the gradient unscaled into state, an
// AdamW step that skips on overflow and refreshes the copy, then
// update_loss_scale) and breaks one rule per check: parameter copies, the
// loss-scaling buffers and settings, and the operands of accumulate, adamw,
// sgd and update_loss_scale.
//
//===----------------------------------------------------------------------===//

#include "PlanTestUtils.h"
#include "PlanValidateTestUtils.h"

#include <gtest/gtest.h>

using namespace ampc;
using namespace ampc::test;
using plan::BufferRole;
using plan::InitKind;
using plan::LossScaleMode;
using V = std::vector<int64_t>;

namespace {

/// x [2, 3] (cast to bf16) @ w.bf16 [3, 4] = y, loss = mean(y); the seed is
/// the loss scale, dw = x^T dy is unscaled into w.grad; optimizer: norm, lr,
/// adamw(w, w.grad, w.m, w.v, lr, norm, found, applied, w.bf16), then
/// update_loss_scale.
struct MixedPlan {
  PlanBuilder b;
  uint32_t x, w, copy, xb, y, seed, dy, dw, grad, m, v, norm, lr;
  uint32_t scale, tracker, found, applied;
  MixedPlan() {
    x = b.input("x", DType::F32, {2, 3});
    w = b.parameter("w", DType::F32, {3, 4}, InitKind::Normal, 0, 0.02);
    copy = b.buffer("w.bf16", DType::BF16, {3, 4}, BufferRole::ParameterCopy);
    b.plan.parameterCopies.push_back({copy, w});
    scale = b.state("loss_scale", {});
    tracker = b.state("growth_tracker", {});
    found = b.state("found_non_finite", {});
    applied = b.state("applied_steps", {});
    plan::LossScaling &scaling = b.plan.lossScaling;
    scaling.mode = LossScaleMode::Dynamic;
    scaling.scale = scale;
    scaling.growthTracker = tracker;
    scaling.foundNonFinite = found;
    scaling.appliedSteps = applied;
    scaling.floorHits = b.state("floor_hits", {});

    xb = b.op(OpCode::Cast, {x}, DType::BF16, {2, 3});
    y = b.op(OpCode::MatMul, {xb, copy}, DType::BF16, {2, 4},
             {{"transpose_a", int64_t(0)}, {"transpose_b", int64_t(0)}});
    b.plan.loss =
        b.op(OpCode::Mean, {y}, DType::F32, {}, {{"axes", V{0, 1}}, {"keepdims", int64_t(0)}});
    seed = b.op(OpCode::GradSeed, {scale}, DType::F32, {}, {{"accum_steps", int64_t(1)}});
    dy = b.op(OpCode::Broadcast, {seed}, DType::F32, {2, 4});
    dw = b.op(OpCode::MatMul, {x, dy}, DType::F32, {3, 4},
              {{"transpose_a", int64_t(1)}, {"transpose_b", int64_t(0)}});
    grad = b.state("w.grad", {3, 4});
    b.instruction(OpCode::Accumulate, {grad, dw, scale, found}, {grad, found});
    norm = b.optimizerOp(OpCode::GlobalNorm, {grad}, DType::F32, {});
    lr = b.optimizerOp(OpCode::LrSchedule, {}, DType::F32, {},
                       {{"kind", int64_t(0)},
                        {"lr", 0.01},
                        {"min_lr", 0.0},
                        {"warmup_steps", int64_t(0)},
                        {"decay_steps", int64_t(0)}});
    m = b.state("w.m", {3, 4});
    v = b.state("w.v", {3, 4});
    b.instruction(OpCode::AdamW, {w, grad, m, v, lr, norm, found, applied, copy},
                  {w, grad, m, v, copy},
                  {{"beta1", 0.9},
                   {"beta2", 0.999},
                   {"eps", 1e-8},
                   {"weight_decay", 0.0},
                   {"clip_norm", 0.0}},
                  true);
    b.instruction(OpCode::UpdateLossScale, {scale, tracker, found, applied},
                  {scale, tracker, found, applied},
                  {{"dynamic", int64_t(1)},
                   {"growth_factor", 2.0},
                   {"backoff_factor", 0.5},
                   {"growth_interval", int64_t(2000)},
                   {"min_scale", 0.0}},
                  true);
    b.plan.gradNorm = norm;
    b.plan.learningRate = lr;
  }
  plan::Plan &plan() { return b.plan; }
  plan::Instruction &accumulate() { return b.plan.instructions[6]; }
  plan::Instruction &adamw() { return b.plan.optimizerInstructions[2]; }
  plan::Instruction &update() { return b.plan.optimizerInstructions[3]; }
};

TEST(PlanValidatePrecision, AcceptsMixedPrecisionPlans) {
  MixedPlan mixed;
  EXPECT_NO_THROW(plan::validatePlan(mixed.plan()));
  // Static scaling: the same plan with dynamic 0.
  MixedPlan fixed;
  fixed.plan().lossScaling.mode = LossScaleMode::Static;
  fixed.update().attrs["dynamic"] = int64_t(0);
  EXPECT_NO_THROW(plan::validatePlan(fixed.plan()));
  // An f16 copy and a floor are fine too.
  MixedPlan half;
  half.plan().buffers[half.copy].dtype = DType::F16;
  half.plan().buffers[half.y].dtype = DType::F16;
  half.plan().buffers[half.xb].dtype = DType::F16;
  half.plan().lossScaling.minScale = 1;
  half.update().attrs["min_scale"] = 1.0;
  EXPECT_NO_THROW(plan::validatePlan(half.plan()));
}

TEST(PlanValidatePrecision, CopiesHaveAReducedDType) {
  MixedPlan mixed;
  mixed.plan().buffers[mixed.copy].dtype = DType::F32;
  expectInvalid(mixed.plan(), {"parameter copy 0", "'w.bf16' (f32 [3, 4])", "must be bf16 or f16"});
}

TEST(PlanValidatePrecision, CopiesHaveTheShapeOfTheirSource) {
  MixedPlan mixed;
  mixed.plan().buffers[mixed.copy].shape = {4, 3};
  expectInvalid(mixed.plan(), {"parameter copy 0", "must have the shape of "
                                                   "its source buffer 1 'w'"});
}

TEST(PlanValidatePrecision, CopiesComeFromF32Parameters) {
  MixedPlan state;
  state.plan().parameterCopies[0].source = state.grad;
  expectInvalid(state.plan(), {"parameter copy 0", "its source buffer", "'w.grad'",
                               "must be a parameter buffer, is a state"});

  MixedPlan range;
  range.plan().parameterCopies[0].source = 999;
  expectInvalid(range.plan(), {"parameter copy 0", "has source buffer 999"});

  MixedPlan bf16;
  bf16.plan().buffers[bf16.w].dtype = DType::BF16;
  expectInvalid(bf16.plan(), {"parameter copy 0", "must be f32"});

  // One copy per parameter.
  MixedPlan twice;
  const uint32_t other = twice.b.buffer("w.f16", DType::F16, {3, 4}, BufferRole::ParameterCopy);
  twice.plan().parameterCopies.push_back({other, twice.w});
  expectInvalid(twice.plan(), {"parameter copy 1", "already has a copy"});
}

TEST(PlanValidatePrecision, CopyBuffersHaveTheirRoleAndOneEntry) {
  MixedPlan role;
  role.plan().buffers[role.copy].role = BufferRole::Temporary;
  expectInvalid(role.plan(), {"parameter copy 0", "whose role is temporary", "not parameter_copy"});

  MixedPlan orphan;
  orphan.plan().parameterCopies.clear();
  expectInvalid(orphan.plan(), {"'w.bf16'", "has role parameter_copy but no "
                                            "parameter_copy entry"});
}

TEST(PlanValidatePrecision, CopiesAreWrittenOnlyByTheirOptimizer) {
  // A micro-step instruction writing the copy.
  MixedPlan written;
  written.plan().instructions[0].results = {written.copy};
  expectInvalid(written.plan(),
                {"instruction 0 (cast)", "parameter_copy", "only temporaries can be written"});

  // The optimizer of w must refresh w's copy.
  MixedPlan missing;
  missing.adamw().operands.pop_back();
  missing.adamw().results.pop_back();
  expectInvalid(missing.plan(), {"optimizer step instruction 2 (adamw)", "has a copy", "'w.bf16'",
                                 "must be the last operand and result"});

  // The copy operand must be a copy, and the copy of this parameter.
  MixedPlan wrongRole;
  wrongRole.adamw().operands.back() = wrongRole.m;
  wrongRole.adamw().results.back() = wrongRole.m;
  expectInvalid(wrongRole.plan(), {"adamw", "result 4", "written a second"});
  MixedPlan notACopy;
  const uint32_t state = notACopy.b.state("spare", {3, 4});
  notACopy.adamw().operands.back() = state;
  notACopy.adamw().results.back() = state;
  expectInvalid(notACopy.plan(), {"operand 8", "must be a parameter_copy "
                                               "buffer, is a state"});

  // The copy result must alias the last operand.
  MixedPlan alias;
  alias.adamw().results.back() = alias.grad;
  expectInvalid(alias.plan(), {"result 4", "must be operand 8"});
}

TEST(PlanValidatePrecision, LossScalingBuffersAreF32ScalarState) {
  MixedPlan shape;
  shape.plan().buffers[shape.scale].shape = {1};
  expectInvalid(shape.plan(), {"loss scaling (dynamic)", "the scale buffer",
                               "'loss_scale' (f32 [1])", "must be an f32 scalar state buffer"});

  MixedPlan role;
  role.plan().buffers[role.applied].role = BufferRole::Temporary;
  expectInvalid(role.plan(), {"the applied-steps count", "'applied_steps'",
                              "must be an f32 scalar state buffer"});

  // State buffers are f32 anyway; a bf16 one fails the general rule first.
  MixedPlan dtype;
  dtype.plan().buffers[dtype.tracker].dtype = DType::BF16;
  expectInvalid(dtype.plan(), {"'growth_tracker'", "has role state, which "
                                                   "must be f32"});

  MixedPlan range;
  range.plan().lossScaling.foundNonFinite = 777;
  expectInvalid(range.plan(), {"the found-non-finite flag buffer 777 is out of range"});

  MixedPlan shared;
  shared.plan().lossScaling.growthTracker = shared.scale;
  expectInvalid(shared.plan(), {"the growth tracker and the scale are one buffer"});
}

TEST(PlanValidatePrecision, FloorHitCountIsItsOwnStateBuffer) {
  MixedPlan range;
  range.plan().lossScaling.floorHits = 777;
  expectInvalid(range.plan(), {"the floor-hit count buffer 777 is out of range"});

  MixedPlan shared;
  shared.plan().lossScaling.floorHits = shared.applied;
  expectInvalid(shared.plan(), {"the floor-hit count and the applied-steps "
                                "count are one buffer"});

  MixedPlan shape;
  shape.plan().buffers[shape.plan().lossScaling.floorHits].shape = {2};
  expectInvalid(shape.plan(), {"the floor-hit count", "'floor_hits' (f32 [2])",
                               "must be an f32 scalar state buffer"});

  // Only the device program's update_loss_scale kernel touches it.
  MixedPlan read;
  read.update().operands[1] = read.plan().lossScaling.floorHits;
  expectInvalid(read.plan(), {"the floor-hit count",
                              "is read by instruction "
                              "3 (update_loss_scale)",
                              "only the device program uses it"});
}

TEST(PlanValidatePrecision, LossScalingSettings) {
  auto settingError = [](void (*change)(plan::LossScaling &), const char *fragment) {
    MixedPlan mixed;
    change(mixed.plan().lossScaling);
    expectInvalid(mixed.plan(), {"loss scaling (dynamic)", fragment});
  };
  settingError([](plan::LossScaling &s) { s.initialScale = 0; },
               "the initial scale must be finite and > 0");
  settingError([](plan::LossScaling &s) { s.growthFactor = 1; },
               "the growth factor must be finite and > 1");
  settingError([](plan::LossScaling &s) { s.backoffFactor = 1; },
               "the backoff factor must be in (0, 1)");
  settingError([](plan::LossScaling &s) { s.growthInterval = 0; },
               "the growth interval must be in [1, 2^24]");
  settingError([](plan::LossScaling &s) { s.growthInterval = (1 << 24) + 1; },
               "the growth interval must be in [1, 2^24]");
  settingError([](plan::LossScaling &s) { s.minScale = 1e6f; },
               "the minimum scale must be in [0, initial scale]");

  // A static scale ignores the dynamic settings.
  MixedPlan fixed;
  fixed.plan().lossScaling.mode = LossScaleMode::Static;
  fixed.plan().lossScaling.growthFactor = 1;
  fixed.update().attrs["dynamic"] = int64_t(0);
  fixed.update().attrs["growth_factor"] = 1.0;
  EXPECT_NO_THROW(plan::validatePlan(fixed.plan()));
  fixed.plan().lossScaling.initialScale = -1;
  expectInvalid(fixed.plan(),
                {"loss scaling (static)", "the initial scale must be finite and > 0"});

  MixedPlan mode;
  mode.plan().lossScaling.mode = static_cast<LossScaleMode>(7);
  expectInvalid(mode.plan(), {"unknown loss scale mode 7"});

  // Loss scaling needs an optimizer step.
  PlanBuilder forward;
  const uint32_t x = forward.input("x", DType::F32, {3});
  forward.plan.loss =
      forward.op(OpCode::Sum, {x}, DType::F32, {}, {{"axes", V{0}}, {"keepdims", int64_t(0)}});
  forward.plan.lossScaling.mode = LossScaleMode::Static;
  expectInvalid(forward.plan, {"loss scaling (static) needs a training plan"});
}

TEST(PlanValidatePrecision, AccumulateUnscalesByThePlansBuffers) {
  MixedPlan scale;
  const uint32_t other = scale.b.state("other_scale", {});
  scale.accumulate().operands[2] = other;
  expectInvalid(scale.plan(), {"instruction 6 (accumulate)", "operand 2", "'other_scale'",
                               "must be the plan's loss scale, buffer 3 "
                               "'loss_scale'"});

  MixedPlan found;
  found.accumulate().operands[3] = found.tracker;
  found.accumulate().results[1] = found.tracker;
  expectInvalid(found.plan(), {"instruction 6 (accumulate)", "operand 3",
                               "must be the plan's found-non-finite flag"});

  MixedPlan result;
  result.accumulate().results[1] = result.scale;
  expectInvalid(result.plan(), {"instruction 6 (accumulate)", "result 1", "must be operand 3"});

  // With loss scaling every accumulate unscales.
  MixedPlan plain;
  plain.accumulate().operands.resize(2);
  plain.accumulate().results.resize(1);
  expectInvalid(plain.plan(), {"instruction 6 (accumulate)", "must unscale its gradient"});

  MixedPlan three;
  three.accumulate().operands.resize(3);
  three.accumulate().results.resize(1);
  expectInvalid(three.plan(), {"takes 2 operands (acc, g) or 4"});

  // Without loss scaling, unscaling is an error.
  MixedPlan none;
  none.plan().lossScaling.mode = LossScaleMode::None;
  none.plan().optimizerInstructions.pop_back();
  none.adamw().operands = {none.w, none.grad, none.m, none.v, none.lr, none.norm, none.copy};
  expectInvalid(none.plan(), {"instruction 6 (accumulate)", "the plan has no loss scaling"});
}

TEST(PlanValidatePrecision, OptimizersReadTheFlagAndCount) {
  MixedPlan swapped;
  std::swap(swapped.adamw().operands[6], swapped.adamw().operands[7]);
  expectInvalid(swapped.plan(), {"optimizer step instruction 2 (adamw)", "operand 6",
                                 "must be the plan's "
                                 "found-non-finite flag"});

  MixedPlan missing;
  missing.adamw().operands = {missing.w,  missing.grad, missing.m,   missing.v,
                              missing.lr, missing.norm, missing.copy};
  expectInvalid(missing.plan(), {"adamw", "must read the found-non-finite "
                                          "flag and the applied-steps count"});

  MixedPlan many;
  many.adamw().operands.push_back(many.copy);
  many.adamw().results.pop_back(); // 10 operands: no copy result
  expectInvalid(many.plan(), {"adamw", "takes 6 to 9 operands, has 10"});

  // Without loss scaling, no flag.
  MixedPlan none;
  none.plan().lossScaling.mode = LossScaleMode::None;
  none.plan().optimizerInstructions.pop_back();
  none.accumulate().operands.resize(2);
  none.accumulate().results.resize(1);
  expectInvalid(none.plan(), {"adamw", "reads a found-non-finite flag, but "
                                       "the plan has no loss scaling"});
  // ... and with both removed, the plan is a plain mixed-precision one.
  none.adamw().operands = {none.w, none.grad, none.m, none.v, none.lr, none.norm, none.copy};
  EXPECT_NO_THROW(plan::validatePlan(none.plan()));
}

TEST(PlanValidatePrecision, SgdTakesTheSameOptionalOperands) {
  MixedPlan sgd;
  const uint32_t momentum = sgd.m;
  sgd.adamw().op = OpCode::Sgd;
  sgd.adamw().operands = {sgd.w,    sgd.grad,  momentum,    sgd.lr,
                          sgd.norm, sgd.found, sgd.applied, sgd.copy};
  sgd.adamw().results = {sgd.w, sgd.grad, momentum, sgd.copy};
  sgd.adamw().attrs = {{"momentum", 0.9}, {"weight_decay", 0.0}, {"clip_norm", 0.0}};
  EXPECT_NO_THROW(plan::validatePlan(sgd.plan()));
  sgd.adamw().results.pop_back();
  expectInvalid(sgd.plan(), {"(sgd", "must have exactly 4 results, has 3"});
}

TEST(PlanValidatePrecision, UpdateLossScaleOperandsAndPlace) {
  MixedPlan order;
  std::swap(order.update().operands[0], order.update().operands[1]);
  std::swap(order.update().results[0], order.update().results[1]);
  expectInvalid(order.plan(), {"optimizer step instruction 3 "
                               "(update_loss_scale)",
                               "operand 0", "must be the plan's loss scale"});

  MixedPlan last;
  std::swap(last.plan().optimizerInstructions[2], last.plan().optimizerInstructions[3]);
  expectInvalid(last.plan(), {"update_loss_scale", "must be the last instruction of the "
                                                   "optimizer step"});

  MixedPlan micro;
  micro.plan().instructions.push_back(micro.update());
  expectInvalid(micro.plan(),
                {"instruction 7 (update_loss_scale)", "runs only in the optimizer step"});

  MixedPlan absent;
  absent.plan().optimizerInstructions.pop_back();
  expectInvalid(absent.plan(), {"the plan has loss scaling (dynamic), so its "
                                "optimizer step must end with "
                                "update_loss_scale"});

  MixedPlan none;
  none.plan().lossScaling.mode = LossScaleMode::None;
  expectInvalid(none.plan(), {"instruction 6 (accumulate)"});

  // Only update_loss_scale (and accumulate's found) writes the loss-scaling
  // buffers: an sgd using the scalar scale buffer as its momentum cannot.
  PlanBuilder b;
  const uint32_t p = b.parameter("p", DType::F32, {});
  b.plan.loss = b.op(OpCode::Mul, {p, p}, DType::F32, {});
  const uint32_t g = b.state("p.grad", {});
  const uint32_t s = b.state("s", {}), t = b.state("t", {}), f = b.state("f", {}),
                 a = b.state("a", {});
  b.plan.lossScaling.mode = LossScaleMode::Static;
  b.plan.lossScaling.scale = s;
  b.plan.lossScaling.growthTracker = t;
  b.plan.lossScaling.foundNonFinite = f;
  b.plan.lossScaling.appliedSteps = a;
  b.plan.lossScaling.floorHits = b.state("floor_hits", {});
  b.instruction(OpCode::Accumulate, {g, b.plan.loss, s, f}, {g, f});
  const uint32_t norm = b.optimizerOp(OpCode::GlobalNorm, {g}, DType::F32, {});
  b.plan.gradNorm = norm;
  b.plan.learningRate = norm;
  b.instruction(OpCode::Sgd, {p, g, t, norm, norm, f, a}, {p, g, t},
                {{"momentum", 0.9}, {"weight_decay", 0.0}, {"clip_norm", 0.0}}, true);
  b.instruction(OpCode::UpdateLossScale, {s, t, f, a}, {s, t, f, a},
                {{"dynamic", int64_t(0)},
                 {"growth_factor", 2.0},
                 {"backoff_factor", 0.5},
                 {"growth_interval", int64_t(2000)},
                 {"min_scale", 0.0}},
                true);
  expectInvalid(b.plan,
                {"optimizer step instruction 1 (sgd)", "result 2", "is a loss-scaling buffer"});
}

TEST(PlanValidatePrecision, UpdateLossScaleAttributesMatchThePlan) {
  MixedPlan dynamic;
  dynamic.update().attrs["dynamic"] = int64_t(0);
  expectInvalid(dynamic.plan(), {"attribute 'dynamic' is 0, but the plan's "
                                 "loss scaling is dynamic"});

  MixedPlan growth;
  growth.update().attrs["growth_factor"] = 3.0;
  expectInvalid(growth.plan(),
                {"attribute 'growth_factor' is 3", "but the plan's loss scaling has 2"});

  MixedPlan interval;
  interval.update().attrs["growth_interval"] = int64_t(100);
  expectInvalid(interval.plan(), {"attribute 'growth_interval' is 100, but "
                                  "the plan's loss scaling has 2000"});

  MixedPlan missing;
  missing.update().attrs.erase("min_scale");
  expectInvalid(missing.plan(), {"update_loss_scale", "min_scale"});
}

} // namespace
