//===- PlanValidateTraining.cpp - Checks of training instructions ---------===//
//
// The InstructionChecker rules of the instructions only training plans use:
// the gradient ops, grad_seed, accumulate, global_norm, lr_schedule, the
// optimizers (adamw, sgd) and update_loss_scale, including how their operands
// relate to the parameter copies and the loss-scaling buffers.
//
//===----------------------------------------------------------------------===//

#include "runtime/plan/InstructionChecker.h"
#include "runtime/plan/ShapeRules.h"

#include <string>
#include <utility>
#include <vector>

namespace ampc::plan::detail {

void InstructionChecker::checkElementwiseGrad() {
  // (x or y, dy) -> dx: both float (the forward value and the incoming
  // gradient may be stored in different float dtypes), one shape.
  floatOperand(0);
  floatOperand(1);
  operandShapeOf(1, 0);
  floatResult();
  resultShape(operand(0).shape);
  if (instruction.op == OpCode::GeluGrad)
    attribute(attr::approximate);
  if (instruction.op == OpCode::SoftmaxGrad && operand(0).shape.empty())
    fail(operandName(0) + " must have rank >= 1");
}

void InstructionChecker::checkPad() {
  // As slice, whose gradient it is: any dtype; a float operand may be stored
  // in any float dtype, an integer one keeps its dtype.
  if (isFloatDType(operand(0).dtype))
    floatResult();
  else
    resultDTypeOf(0);
  std::string error;
  if (!plan::checkPad(operand(0).shape, attribute(attr::low), result().shape, error))
    fail(error);
}

void InstructionChecker::checkMaxGrad() {
  floatOperand(0);
  floatOperand(1);
  floatResult();
  std::string error;
  Shape reduced = checked(
      reduceShape(operand(0).shape, attribute(attr::axes), attribute(attr::keepdims), error),
      error);
  if (operand(1).shape != reduced)
    fail(operandName(1) + " must have the reduced shape " + shapeToString(reduced));
  resultShape(operand(0).shape);
}

void InstructionChecker::checkEmbeddingGrad() {
  integerOperand(0);
  floatOperand(1);
  floatResult();
  std::string error;
  if (!plan::checkEmbeddingGrad(operand(0).shape, operand(1).shape, result().shape, error))
    fail(error);
}

void InstructionChecker::checkNormGrad() {
  // (x, gamma, dy) -> (dx, dgamma[, dbeta]).
  for (size_t i = 0; i < 3; ++i)
    floatOperand(i);
  const Shape &x = operand(0).shape;
  std::string error;
  if (!checkNormParameter(x, operand(1).shape, "gamma", error))
    fail(error);
  operandShapeOf(2, 0);
  for (size_t i = 0; i < instruction.results.size(); ++i) {
    floatResult(i);
    resultShape(i == 0 ? x : operand(1).shape, i);
  }
  if (attribute(attr::epsilon) < 0)
    fail("attribute 'epsilon' must be >= 0");
}

void InstructionChecker::checkAttentionGrad() {
  // (q, k, v, dy[, o, lse]) -> (dq, dk, dv).
  const size_t operands = instruction.operands.size();
  if (operands != 4 && operands != 6)
    fail("must have 4 operands (q, k, v, dy) or 6 (q, k, v, dy, o, lse), has " +
         std::to_string(operands));
  for (size_t i = 0; i < operands; ++i)
    floatOperand(i);
  std::string error;
  Shape out = checked(attentionShape(operand(0).shape, operand(1).shape, operand(2).shape,
                                     attribute(attr::causal), error),
                      error);
  if (operand(3).shape != out)
    fail(operandName(3) + " must have the attention output's shape " + shapeToString(out));
  if (operands == 6) {
    // The forward's saved output (q's dtype) and f32 row log-sum-exp [..., T].
    if (operand(4).shape != out || operand(4).dtype != operand(0).dtype)
      fail(operandName(4) + " (the saved output) must be " + dtypeName(operand(0).dtype) + " " +
           shapeToString(out));
    Shape rows = out;
    rows.pop_back();
    if (operand(5).shape != rows || operand(5).dtype != DType::F32)
      fail(operandName(5) + " (the saved log-sum-exp) must be f32 " + shapeToString(rows));
  }
  for (size_t i = 0; i < 3; ++i) {
    floatResult(i);
    resultShape(operand(i).shape, i);
  }
  attribute(attr::scale);
}

void InstructionChecker::checkQkvAttentionGrad() {
  // (qkv, dy[, o, lse]) -> dqkv.
  const size_t operands = instruction.operands.size();
  if (operands != 2 && operands != 4)
    fail("must have 2 operands (qkv, dy) or 4 (qkv, dy, o, lse), has " + std::to_string(operands));
  for (size_t i = 0; i < operands; ++i)
    floatOperand(i);
  const int64_t heads = attribute(attr::heads);
  std::string error;
  Shape out = checked(qkvAttentionShape(operand(0).shape, heads, error), error);
  if (operand(1).shape != out)
    fail(operandName(1) + " must have the attention output's shape " + shapeToString(out));
  if (operands == 4) {
    if (operand(2).shape != out || operand(2).dtype != operand(0).dtype)
      fail(operandName(2) + " (the saved output) must be " + dtypeName(operand(0).dtype) + " " +
           shapeToString(out));
    const Shape rows = qkvAttentionLseShape(operand(0).shape, heads);
    if (operand(3).shape != rows || operand(3).dtype != DType::F32)
      fail(operandName(3) + " (the saved log-sum-exp) must be f32 " + shapeToString(rows));
  }
  floatResult(0);
  resultShape(operand(0).shape, 0);
  attribute(attr::causal);
  attribute(attr::scale);
}

void InstructionChecker::checkCrossEntropyGrad() {
  // (logits, labels, dloss) -> dlogits.
  floatOperand(0);
  integerOperand(1);
  floatScalarOperand(2);
  std::string error;
  if (!checkCrossEntropy(operand(0).shape, operand(1).shape, error))
    fail(error);
  attribute(attr::ignoreIndex);
  int64_t reduction = attribute(attr::reduction);
  if (reduction != 0 && reduction != 1)
    fail("attribute 'reduction' must be 0 (mean) or 1 (sum), is " + std::to_string(reduction));
  floatResult();
  resultShape(operand(0).shape);
}

void InstructionChecker::checkGradSeed() {
  if (instruction.operands.size() > 1)
    fail("takes 0 or 1 operands, has " + std::to_string(instruction.operands.size()));
  if (!instruction.operands.empty())
    floatScalarOperand(0);
  if (attribute(attr::accumSteps) < 1)
    fail("attribute 'accum_steps' must be >= 1");
  f32ScalarResult();
}

void InstructionChecker::lossScalingOperand(size_t i, uint32_t expected, const char *what) const {
  if (instruction.operands[i] != expected)
    fail(operandName(i) + " must be the plan's " + what + ", " + describeBuffer(plan, expected));
}

void InstructionChecker::checkAccumulate() {
  // (acc, g) or, with loss scaling, (acc, g, scale, found) -> (acc, found).
  const size_t count = instruction.operands.size();
  if (count != 2 && count != 4)
    fail("takes 2 operands (acc, g) or 4 (acc, g, scale, found), has " + std::to_string(count));
  operandRole(0, BufferRole::State);
  floatOperand(1);
  operandShapeOf(1, 0);
  const LossScaling &scaling = plan.lossScaling;
  if (count == 4) {
    if (scaling.mode == LossScaleMode::None)
      fail("unscales by a loss scale, but the plan has no loss scaling");
    lossScalingOperand(2, scaling.scale, "loss scale");
    lossScalingOperand(3, scaling.foundNonFinite, "found-non-finite flag");
  } else if (scaling.mode != LossScaleMode::None) {
    fail("must unscale its gradient (operands acc, g, scale, found), since "
         "the plan has loss scaling");
  }
  // The data parallel gradient bucket (GradientBuckets.h), when given.
  if (has(instruction, attr::bucket) && attribute(attr::bucket) < 0)
    fail("has a negative gradient bucket " + std::to_string(attribute(attr::bucket)));
}

void InstructionChecker::checkGlobalNorm() {
  if (instruction.operands.empty())
    fail("takes at least 1 operand, has 0");
  for (size_t i = 0; i < instruction.operands.size(); ++i)
    floatOperand(i);
  f32ScalarResult();
}

void InstructionChecker::checkLrSchedule() {
  int64_t kind = attribute(attr::kind);
  if (kind != 0 && kind != 1)
    fail("attribute 'kind' must be 0 (constant) or 1 (cosine), is " + std::to_string(kind));
  attribute(attr::lr);
  attribute(attr::minLr);
  if (attribute(attr::warmupSteps) < 0)
    fail("attribute 'warmup_steps' must be >= 0");
  if (attribute(attr::decaySteps) < 0)
    fail("attribute 'decay_steps' must be >= 0");
  f32ScalarResult();
}

void InstructionChecker::checkOptimizer() {
  // adamw: (param, grad, m, v, lr, grad_norm); sgd: (param, grad, momentum,
  // lr, grad_norm); then, with loss scaling, (found, applied_steps); then,
  // when the parameter has a reduced-precision copy, the copy. The tensors
  // are f32 master copies updated in place.
  const bool adamw = instruction.op == OpCode::AdamW;
  const size_t tensors = adamw ? 4 : 3;
  const size_t base = tensors + 2;
  const size_t count = instruction.operands.size();
  if (count < base || count > base + 3)
    fail("takes " + std::to_string(base) + " to " + std::to_string(base + 3) + " operands, has " +
         std::to_string(count));
  const bool skips = count >= base + 2;
  const bool copies = count == base + 1 || count == base + 3;
  operandRole(0, BufferRole::Parameter);
  if (operand(0).dtype != DType::F32)
    fail(operandName(0) + " must be f32");
  for (const Parameter &parameter : plan.parameters)
    if (parameter.buffer == instruction.operands[0] && !parameter.trained)
      fail(operandName(0) + " is untrained model state, which no optimizer updates");
  for (size_t i = 1; i < tensors; ++i) {
    operandRole(i, BufferRole::State);
    operandShapeOf(i, 0);
  }
  floatScalarOperand(tensors);
  floatScalarOperand(tensors + 1);
  const LossScaling &scaling = plan.lossScaling;
  if (skips) {
    if (scaling.mode == LossScaleMode::None)
      fail("reads a found-non-finite flag, but the plan has no loss scaling");
    lossScalingOperand(base, scaling.foundNonFinite, "found-non-finite flag");
    lossScalingOperand(base + 1, scaling.appliedSteps, "applied-steps count");
  } else if (scaling.mode != LossScaleMode::None) {
    fail("must read the found-non-finite flag and the applied-steps count "
         "after grad_norm, since the plan has loss scaling");
  }
  const ParameterCopy *copy = nullptr;
  for (const ParameterCopy &entry : plan.parameterCopies)
    if (entry.source == instruction.operands[0])
      copy = &entry;
  if (copies) {
    operandRole(count - 1, BufferRole::ParameterCopy);
    if (!copy || copy->buffer != instruction.operands[count - 1])
      fail(operandName(count - 1) + " must be the copy of " + operandName(0));
  } else if (copy) {
    fail(operandName(0) + " has a copy, " + describeBuffer(plan, copy->buffer) +
         ", which must be the last operand and result so that it is "
         "refreshed");
  }
  if (adamw) {
    for (const AttrKey<double> &beta : {attr::beta1, attr::beta2}) {
      double value = attribute(beta);
      if (value < 0 || value >= 1)
        fail(std::string("attribute '") + beta.name + "' must be in [0, 1)");
    }
    if (attribute(attr::eps) < 0)
      fail("attribute 'eps' must be >= 0");
  } else {
    attribute(attr::momentum);
  }
  attribute(attr::weightDecay);
  attribute(attr::clipNorm);
}

void InstructionChecker::checkUpdateLossScale() {
  // (scale, growth tracker, found, applied steps), updated in place.
  const LossScaling &scaling = plan.lossScaling;
  if (scaling.mode == LossScaleMode::None)
    fail("the plan has no loss scaling");
  lossScalingOperand(0, scaling.scale, "loss scale");
  lossScalingOperand(1, scaling.growthTracker, "growth tracker");
  lossScalingOperand(2, scaling.foundNonFinite, "found-non-finite flag");
  lossScalingOperand(3, scaling.appliedSteps, "applied-steps count");
  // The attributes repeat the plan's settings, so the two cannot disagree.
  const bool dynamic = attribute(attr::dynamic) == 1;
  if (dynamic != (scaling.mode == LossScaleMode::Dynamic))
    fail(std::string("attribute 'dynamic' is ") + (dynamic ? "1" : "0") +
         ", but the plan's loss scaling is " + lossScaleModeName(scaling.mode));
  for (auto [key, expected] :
       {std::pair<AttrKey<double>, float>{attr::growthFactor, scaling.growthFactor},
        {attr::backoffFactor, scaling.backoffFactor},
        {attr::minScale, scaling.minScale}}) {
    const double value = attribute(key);
    if (static_cast<float>(value) != expected)
      fail(std::string("attribute '") + key.name + "' is " + std::to_string(value) +
           ", but the plan's loss scaling has " + std::to_string(expected));
  }
  if (attribute(attr::growthInterval) != scaling.growthInterval)
    fail("attribute 'growth_interval' is " + std::to_string(attribute(attr::growthInterval)) +
         ", but the plan's loss scaling has " + std::to_string(scaling.growthInterval));
}

} // namespace ampc::plan::detail
