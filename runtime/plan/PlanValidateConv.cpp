//===- PlanValidateConv.cpp - Checks of convolution and pooling -----------===//
//
// The InstructionChecker rules of clip, conv2d, max_pool2d, avg_pool2d and their gradients:
// the window attributes (makeWindow2d) and the shapes they imply (conv2dShape, pool2dShape),
// the same rules the graph dialect's verifiers apply.
//
//===----------------------------------------------------------------------===//

#include "runtime/plan/InstructionChecker.h"
#include "runtime/plan/ShapeRules.h"

#include <cstdio>
#include <string>
#include <vector>

namespace ampc::plan::detail {

Window2d InstructionChecker::window(const std::vector<int64_t> &convKernel) const {
  std::string error;
  return checked(window2dOf(instruction, convKernel, error), error);
}

void InstructionChecker::checkClip() {
  // clip: (x) -> y; clip_grad: (x, dy) -> dx.
  for (size_t i = 0; i < instruction.operands.size(); ++i)
    floatOperand(i);
  if (instruction.op == OpCode::ClipGrad)
    operandShapeOf(1, 0);
  floatResult();
  resultShape(operand(0).shape);
  if (has(instruction, attr::lower) && has(instruction, attr::upper) &&
      attribute(attr::lower) > attribute(attr::upper)) {
    char text[96];
    std::snprintf(text, sizeof(text), "attribute 'min' (%g) must not exceed 'max' (%g)",
                  attribute(attr::lower), attribute(attr::upper));
    fail(text);
  }
}

void InstructionChecker::checkConv2d() {
  // conv2d: (x, w) -> y; conv2d_grad_input: (dy, w) -> dx; conv2d_grad_weight: (x, dy) -> dw.
  floatOperand(0);
  floatOperand(1);
  floatResult();
  const Shape *input = &operand(0).shape, *weight = &operand(1).shape;
  const Shape *output = &result().shape;
  if (instruction.op == OpCode::Conv2dGradInput) {
    input = &result().shape;
    output = &operand(0).shape;
  } else if (instruction.op == OpCode::Conv2dGradWeight) {
    weight = &result().shape;
    output = &operand(1).shape;
  }
  std::vector<int64_t> kernel = {1, 1};
  if (weight->size() == 4)
    kernel = {(*weight)[2], (*weight)[3]};
  std::string error;
  Shape expected = checked(
      conv2dShape(*input, *weight, window(kernel), attribute(attr::groups), error), error);
  if (*output != expected)
    fail("the convolution of " + shapeToString(*input) + " by " + shapeToString(*weight) +
         " gives " + shapeToString(expected) + ", not " + shapeToString(*output));
}

void InstructionChecker::checkPool2d() {
  // max_pool2d / avg_pool2d: (x) -> y; max_pool2d_grad: (x, dy) -> dx; avg_pool2d_grad: (dy) -> dx.
  for (size_t i = 0; i < instruction.operands.size(); ++i)
    floatOperand(i);
  floatResult();
  const bool fromResult = instruction.op == OpCode::AvgPool2dGrad;
  const Shape &input = fromResult ? result().shape : operand(0).shape;
  const Shape *output = &result().shape;
  if (instruction.op == OpCode::MaxPool2dGrad) {
    resultShape(operand(0).shape);
    output = &operand(1).shape;
  } else if (fromResult) {
    output = &operand(0).shape;
  }
  std::string error;
  Shape expected = checked(pool2dShape(input, window({}), error), error);
  if (*output != expected)
    fail("pooling " + shapeToString(input) + " gives " + shapeToString(expected) + ", not " +
         shapeToString(*output));
}

void InstructionChecker::checkBatchNorm() {
  // batch_norm: (x, gamma, beta, running_mean, running_var) -> y;
  // batch_norm_grad: (x, gamma, dy) -> (dx, dgamma, dbeta).
  for (size_t i = 0; i < instruction.operands.size(); ++i)
    floatOperand(i);
  const Shape &x = operand(0).shape;
  if (x.size() < 2)
    fail(operandName(0) + " must be [N, C, ...]");
  const bool gradient = instruction.op == OpCode::BatchNormGrad;
  for (size_t i = 1; i < instruction.operands.size(); ++i) {
    if (gradient && i == 2) {
      operandShapeOf(2, 0);
      continue;
    }
    if (operand(i).shape != Shape{x[1]})
      fail(operandName(i) + " must be [" + std::to_string(x[1]) + "] (the channels of x)");
  }
  for (size_t i = 0; i < instruction.results.size(); ++i) {
    floatResult(i);
    resultShape(i == 0 ? x : Shape{x[1]}, i);
  }
  if (attribute(attr::epsilon) < 0)
    fail("attribute 'epsilon' must be >= 0");
}

void InstructionChecker::checkUpdateRunningStats() {
  // (mean, var[, count], x) -> (mean, var[, count]): untrained f32 parameters updated in place.
  const size_t count = instruction.operands.size();
  if (count != 3 && count != 4)
    fail("takes 3 operands (mean, var, x) or 4 (mean, var, count, x), has " +
         std::to_string(count));
  floatOperand(count - 1);
  const Shape &x = operand(count - 1).shape;
  if (x.size() < 2)
    fail(operandName(count - 1) + " must be [N, C, ...]");
  for (size_t i = 0; i + 1 < count; ++i) {
    operandRole(i, BufferRole::Parameter);
    const Parameter *state = nullptr;
    for (const Parameter &parameter : plan.parameters)
      if (parameter.buffer == instruction.operands[i])
        state = &parameter;
    if (!state || state->trained)
      fail(operandName(i) + " must be an untrained parameter (model state)");
    if (operand(i).dtype != DType::F32)
      fail(operandName(i) + " must be f32");
    const Shape expected = i < 2 ? Shape{x[1]} : Shape{};
    if (operand(i).shape != expected)
      fail(operandName(i) + " must have shape " + shapeToString(expected));
  }
  const double momentum = attribute(attr::momentum);
  if (!(momentum >= 0 && momentum <= 1))
    fail("attribute 'momentum' must be in [0, 1]");
}

} // namespace ampc::plan::detail
