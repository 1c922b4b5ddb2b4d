//===- InstructionChecker.h - Checks one instruction of a plan --*- C++ -*-===//
//
// validatePlan makes one InstructionChecker for every instruction of both
// lists. Its fail, operandName and resultName word the structural failures
// validatePlan finds itself (ids, result counts, in-place aliasing, who may
// write what); check() then applies the operand count of the opcode table
// (OpCodes.def) and the opcode's own rules on dtypes, shapes (ShapeRules.h),
// roles and attributes. The per-opcode checks are defined by family:
// PlanValidate.cpp holds check() and the forward ops, PlanValidateTraining.cpp
// the gradient, optimizer and loss-scaling ops.
//
//===----------------------------------------------------------------------===//

#ifndef AMPC_RUNTIME_PLAN_INSTRUCTIONCHECKER_H
#define AMPC_RUNTIME_PLAN_INSTRUCTIONCHECKER_H

#include "runtime/plan/Plan.h"
#include "runtime/plan/PlanAttrs.h"
#include "runtime/plan/ShapeRules.h"
#include "runtime/plan/ValidationDiagnostics.h"

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace ampc::plan::detail {

/// Checks one instruction of a plan; `fail` prefixes the instruction.
class InstructionChecker {
public:
  /// \p list is "" for plan.instructions, "optimizer step " for
  /// plan.optimizerInstructions, so diagnostics say which list.
  InstructionChecker(const Plan &plan, const Instruction &instruction, size_t index,
                     const char *list = "")
      : plan(plan), instruction(instruction), index(index), list(list) {}

  [[noreturn]] void fail(const std::string &message) const {
    detail::fail(list + describeInstruction(instruction, index) + ": " + message);
  }

  /// The value of a shape rule, or a failure carrying the rule's message.
  template <typename T> T checked(std::optional<T> value, const std::string &error) const {
    if (!value)
      fail(error);
    return *value;
  }

  void operandCount(size_t expected) const {
    if (instruction.operands.size() != expected)
      fail("takes " + std::to_string(expected) + " operand" + (expected == 1 ? "" : "s") +
           ", has " + std::to_string(instruction.operands.size()));
  }

  const Buffer &operand(size_t i) const { return plan.buffers[instruction.operands[i]]; }
  const Buffer &result(size_t i = 0) const { return plan.buffers[instruction.results[i]]; }

  std::string operandName(size_t i) const {
    return "operand " + std::to_string(i) + " " + describeBuffer(plan, instruction.operands[i]);
  }
  std::string resultName(size_t i = 0) const {
    // Single-result instructions keep the plain "result" wording.
    return (instruction.results.size() == 1 ? "result " : "result " + std::to_string(i) + " ") +
           describeBuffer(plan, instruction.results[i]);
  }

  void floatOperand(size_t i) const {
    if (!isFloatDType(operand(i).dtype))
      fail(operandName(i) + " must have a float dtype");
  }
  void integerOperand(size_t i) const {
    if (!isIntegerDType(operand(i).dtype))
      fail(operandName(i) + " must have an integer dtype");
  }
  void floatResult(size_t i = 0) const {
    if (!isFloatDType(result(i).dtype))
      fail(resultName(i) + " must have a float dtype");
  }
  void f32ScalarResult() const {
    if (result().dtype != DType::F32 || !result().shape.empty())
      fail(resultName() + " must be an f32 scalar");
  }
  void floatScalarOperand(size_t i) const {
    if (!isFloatDType(operand(i).dtype) || !operand(i).shape.empty())
      fail(operandName(i) + " must be a float scalar");
  }
  void operandShapeOf(size_t i, size_t j) const {
    if (operand(i).shape != operand(j).shape)
      fail(operandName(i) + " must have the shape of " + operandName(j));
  }
  void operandRole(size_t i, BufferRole role) const {
    if (operand(i).role != role)
      fail(operandName(i) + " must be a " + bufferRoleName(role) + " buffer, is a " +
           bufferRoleName(operand(i).role));
  }
  void resultDTypeOf(size_t i) const {
    if (result().dtype != operand(i).dtype)
      fail(resultName() + " must have the dtype of " + operandName(i));
  }
  void resultShape(const Shape &expected, size_t i = 0) const {
    if (result(i).shape != expected)
      fail(resultName(i) + " must have shape " + shapeToString(expected));
  }

  /// The value of the attribute \p key (its presence, type, flag values and
  /// finiteness were checked against PlanAttrs.def before the opcode's rules).
  template <typename T> const T &attribute(const AttrKey<T> &key) const {
    try {
      return plan::get(instruction, key);
    } catch (const PlanError &error) {
      fail(error.what());
    }
  }

  /// Checks the operand count of the opcode table (OpCodes.def), then the
  /// opcode's own rules.
  void check();

private:
  void checkElementwiseBinary();
  void checkElementwiseUnary();
  void checkMatMul();
  void checkLayout();
  void checkReduction();
  void checkEmbedding();
  void checkNorm();
  void checkSoftmax();
  void checkAttention();
  void checkQkvAttention();
  void checkLoss();
  void checkElementwiseGrad();
  void checkPad();
  void checkMaxGrad();
  void checkEmbeddingGrad();
  void checkNormGrad();
  void checkAttentionGrad();
  void checkQkvAttentionGrad();
  void checkCrossEntropyGrad();
  void checkGradSeed();
  void checkAccumulate();
  void checkGlobalNorm();
  void checkLrSchedule();
  void checkOptimizer();
  void checkUpdateLossScale();
  void checkClip();
  void checkConv2d();
  void checkPool2d();
  void checkBatchNorm();
  void checkUpdateRunningStats();
  /// The window of a convolution or pooling instruction (PlanValidateConv.cpp).
  Window2d window(const std::vector<int64_t> &convKernel) const;
  /// Fails unless operand \p i is the loss-scaling buffer \p expected.
  void lossScalingOperand(size_t i, uint32_t expected, const char *what) const;

  const Plan &plan;
  const Instruction &instruction;
  size_t index;
  std::string list;
};

} // namespace ampc::plan::detail

#endif // AMPC_RUNTIME_PLAN_INSTRUCTIONCHECKER_H
