//===- PlanValidate.cpp - Checks everything a backend relies on -----------===//
//
// A backend executes a validated plan without re-checking ids, shapes,
// dtypes or attributes, so every rule of docs/plan-format.md ("Validation"
// and the per-opcode table) is enforced here, each failure as one line that
// names the instruction, its opcode and its source location. This file holds
// the driver, the checks of the tables (parameter copies included) and of the
// loss-scaling settings, the wording of failures (ValidationDiagnostics.h)
// and InstructionChecker's forward-op rules; the training instructions' rules
// are in PlanValidateTraining.cpp, the device program's checks in
// PlanValidateDevice.cpp.
//
//===----------------------------------------------------------------------===//

#include "runtime/plan/InstructionChecker.h"
#include "runtime/plan/ShapeRules.h"
#include "runtime/plan/ValidationDiagnostics.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <set>

namespace ampc::plan {
namespace detail {

[[noreturn]] void fail(const std::string &message) { throw PlanError("invalid plan: " + message); }

std::string describeBuffer(const Plan &plan, uint32_t id) {
  const Buffer &buffer = plan.buffers[id];
  std::string text = "buffer " + std::to_string(id);
  if (!buffer.name.empty())
    text += " '" + buffer.name + "'";
  return text + " (" + dtypeName(buffer.dtype) + " " + shapeToString(buffer.shape) + ")";
}

void InstructionChecker::checkElementwiseBinary() {
  floatOperand(0);
  floatOperand(1);
  if (operand(0).dtype != operand(1).dtype)
    fail(operandName(0) + " and " + operandName(1) + " must have one dtype");
  floatResult();
  std::string error;
  resultShape(checked(broadcastShapes(operand(0).shape, operand(1).shape, &error), error));
}

void InstructionChecker::checkElementwiseUnary() {
  floatOperand(0);
  floatResult();
  resultShape(operand(0).shape);
  if (instruction.op == OpCode::Gelu)
    attribute(attr::approximate);
  if (instruction.op == OpCode::Dropout) {
    double p = attribute(attr::p);
    if (p < 0 || p >= 1)
      fail("attribute 'p' must be in [0, 1), is " + std::to_string(p));
    int64_t stream = attribute(attr::stream);
    if (stream < 0 || stream > int64_t(UINT32_MAX))
      fail("attribute 'stream' must fit in 32 bits, is " + std::to_string(stream));
  }
}

void InstructionChecker::checkMatMul() {
  floatOperand(0);
  floatOperand(1);
  if (operand(0).dtype != operand(1).dtype)
    fail(operandName(0) + " and " + operandName(1) + " must have one dtype");
  floatResult();
  bool transposeA = attribute(attr::transposeA);
  bool transposeB = attribute(attr::transposeB);
  std::string error;
  resultShape(checked(
      matMulShape(operand(0).shape, operand(1).shape, transposeA, transposeB, error), error));
}

void InstructionChecker::checkLayout() {
  OpCode op = instruction.op;
  if (op == OpCode::Concat && instruction.operands.empty())
    fail("takes at least 1 operand, has 0");
  resultDTypeOf(0);
  const Shape &in = operand(0).shape;
  std::string error;
  switch (op) {
  case OpCode::Transpose:
    resultShape(checked(transposeShape(in, attribute(attr::permutation), error), error));
    break;
  case OpCode::Reshape:
    if (numElements(result()) != numElements(operand(0)))
      fail(resultName() + " must have the element count of " + operandName(0));
    break;
  case OpCode::Slice:
    // The result's shape gives the slice sizes.
    checked(sliceShape(in, attribute(attr::starts), result().shape, error), error);
    break;
  case OpCode::Concat: {
    std::vector<Shape> parts;
    for (size_t i = 0; i < instruction.operands.size(); ++i) {
      if (operand(i).dtype != operand(0).dtype)
        fail(operandName(i) + " must have the dtype of " + operandName(0));
      parts.push_back(operand(i).shape);
    }
    resultShape(checked(concatShape(parts, attribute(attr::axis), error), error));
    break;
  }
  case OpCode::Broadcast:
    if (!broadcastsTo(in, result().shape, &error))
      fail(error);
    break;
  default:
    break;
  }
}

void InstructionChecker::checkReduction() {
  floatOperand(0);
  floatResult();
  std::string error;
  resultShape(checked(
      reduceShape(operand(0).shape, attribute(attr::axes), attribute(attr::keepdims), error),
      error));
}

void InstructionChecker::checkEmbedding() {
  floatOperand(0);
  integerOperand(1);
  floatResult();
  std::string error;
  resultShape(checked(embeddingShape(operand(0).shape, operand(1).shape, error), error));
}

void InstructionChecker::checkNorm() {
  // layer_norm: (x, gamma, beta); rms_norm: (x, gamma).
  for (size_t i = 0; i < instruction.operands.size(); ++i)
    floatOperand(i);
  floatResult();
  const Shape &x = operand(0).shape;
  std::string error;
  for (size_t i = 1; i < instruction.operands.size(); ++i)
    if (!checkNormParameter(x, operand(i).shape, i == 1 ? "gamma" : "beta", error))
      fail(error);
  resultShape(x);
  if (attribute(attr::epsilon) < 0)
    fail("attribute 'epsilon' must be >= 0");
}

void InstructionChecker::checkSoftmax() {
  floatOperand(0);
  floatResult();
  resultShape(operand(0).shape);
  if (operand(0).shape.empty())
    fail(operandName(0) + " must have rank >= 1");
  std::string error;
  if (attribute(attr::causal) && !checkCausalScores(operand(0).shape, error))
    fail(error);
}

void InstructionChecker::checkAttention() {
  for (size_t i = 0; i < 3; ++i)
    floatOperand(i);
  floatResult();
  std::string error;
  Shape out = checked(attentionShape(operand(0).shape, operand(1).shape, operand(2).shape,
                                     attribute(attr::causal), error),
                      error);
  resultShape(out);
  // The optional row log-sum-exp: f32 [..., T].
  if (instruction.results.size() == 2) {
    if (result(1).dtype != DType::F32)
      fail(resultName(1) + " (the row log-sum-exp) must be f32, is " +
           std::string(dtypeName(result(1).dtype)));
    out.pop_back();
    resultShape(out, 1);
  }
  attribute(attr::scale);
}

void InstructionChecker::checkQkvAttention() {
  floatOperand(0);
  floatResult();
  const int64_t heads = attribute(attr::heads);
  std::string error;
  resultShape(checked(qkvAttentionShape(operand(0).shape, heads, error), error));
  // The optional row log-sum-exp: f32 [..., H, T].
  if (instruction.results.size() == 2) {
    if (result(1).dtype != DType::F32)
      fail(resultName(1) + " (the row log-sum-exp) must be f32, is " +
           std::string(dtypeName(result(1).dtype)));
    resultShape(qkvAttentionLseShape(operand(0).shape, heads), 1);
  }
  attribute(attr::causal);
  attribute(attr::scale);
}

void InstructionChecker::checkLoss() {
  floatOperand(0);
  floatResult();
  resultShape({});
  if (instruction.op == OpCode::MseLoss) {
    floatOperand(1);
    if (operand(1).shape != operand(0).shape)
      fail(operandName(1) + " must have the shape of " + operandName(0));
    return;
  }
  integerOperand(1);
  std::string error;
  if (!checkCrossEntropy(operand(0).shape, operand(1).shape, error))
    fail(error);
  attribute(attr::ignoreIndex);
  int64_t reduction = attribute(attr::reduction);
  if (reduction != 0 && reduction != 1)
    fail("attribute 'reduction' must be 0 (mean) or 1 (sum), is " + std::to_string(reduction));
}

void InstructionChecker::check() {
  // validatePlan rejects these first; the table has no entry for them.
  if (static_cast<uint16_t>(instruction.op) >= kNumOpCodes)
    fail("unknown opcode " + std::to_string(static_cast<int>(instruction.op)));
  // A variadic opcode's own check bounds its operand count.
  const int operands = opInfo(instruction.op).operands;
  if (operands != kVariadic)
    operandCount(static_cast<size_t>(operands));
  // The attributes against PlanAttrs.def; the opcode's rules check their values.
  if (std::string error = checkAttributes(instruction); !error.empty())
    fail(error);
  switch (instruction.op) {
#define AMPC_BINARY_OP(Name, ...) case OpCode::Name:
#include "runtime/plan/OpCodes.def"
    return checkElementwiseBinary();
#define AMPC_UNARY_OP(Name, ...) case OpCode::Name:
#include "runtime/plan/OpCodes.def"
  case OpCode::Gelu:
  case OpCode::Dropout:
    return checkElementwiseUnary();
#define AMPC_LAYOUT_OP(Name, ...) case OpCode::Name:
#include "runtime/plan/OpCodes.def"
    return checkLayout();
#define AMPC_REDUCTION_OP(Name, ...) case OpCode::Name:
#include "runtime/plan/OpCodes.def"
    return checkReduction();
  case OpCode::MatMul:
    return checkMatMul();
  case OpCode::Cast:
    resultShape(operand(0).shape);
    return;
  case OpCode::Embedding:
    return checkEmbedding();
  case OpCode::LayerNorm:
  case OpCode::RmsNorm:
    return checkNorm();
  case OpCode::Softmax:
    return checkSoftmax();
  case OpCode::Attention:
    return checkAttention();
  case OpCode::QkvAttention:
    return checkQkvAttention();
  case OpCode::CrossEntropy:
  case OpCode::MseLoss:
    return checkLoss();
#define AMPC_UNARY_GRAD_OP(Name, ...) case OpCode::Name:
#include "runtime/plan/OpCodes.def"
  case OpCode::GeluGrad:
  case OpCode::SoftmaxGrad:
    return checkElementwiseGrad();
  case OpCode::Pad:
    return checkPad();
  case OpCode::MaxGrad:
    return checkMaxGrad();
  case OpCode::EmbeddingGrad:
    return checkEmbeddingGrad();
  case OpCode::LayerNormGrad:
  case OpCode::RmsNormGrad:
    return checkNormGrad();
  case OpCode::AttentionGrad:
    return checkAttentionGrad();
  case OpCode::QkvAttentionGrad:
    return checkQkvAttentionGrad();
  case OpCode::CrossEntropyGrad:
    return checkCrossEntropyGrad();
  case OpCode::GradSeed:
    return checkGradSeed();
  case OpCode::Accumulate:
    return checkAccumulate();
  case OpCode::GlobalNorm:
    return checkGlobalNorm();
  case OpCode::LrSchedule:
    return checkLrSchedule();
  case OpCode::AdamW:
  case OpCode::Sgd:
    return checkOptimizer();
  case OpCode::UpdateLossScale:
    return checkUpdateLossScale();
  case OpCode::Clip:
  case OpCode::ClipGrad:
    return checkClip();
  case OpCode::Conv2d:
  case OpCode::Conv2dGradInput:
  case OpCode::Conv2dGradWeight:
    return checkConv2d();
  case OpCode::MaxPool2d:
  case OpCode::MaxPool2dGrad:
  case OpCode::AvgPool2d:
  case OpCode::AvgPool2dGrad:
    return checkPool2d();
  case OpCode::BatchNorm:
  case OpCode::BatchNormGrad:
    return checkBatchNorm();
  case OpCode::UpdateRunningStats:
    return checkUpdateRunningStats();
  }
}

} // namespace detail

using namespace detail;

namespace {

/// How many results \p instruction writes: the table's count, plus one for
/// the optional operands of accumulate, adamw and sgd that add a result:
/// accumulate with (scale, found) also writes found; adamw and sgd with a
/// parameter copy also write it. attention and qkv_attention write their output, and with a
/// second result the row log-sum-exp: both counts are accepted.
size_t resultCount(const Instruction &instruction) {
  const size_t operands = instruction.operands.size();
  const size_t results = static_cast<size_t>(opInfo(instruction.op).results);
  switch (instruction.op) {
  case OpCode::Attention:
  case OpCode::QkvAttention:
    return instruction.results.size() == 2 ? 2 : results;
  case OpCode::Accumulate:
    return operands == 4 ? results + 1 : results;
  case OpCode::AdamW: // (param, grad, m, v, lr, norm[, found, applied][, copy])
    return operands == 7 || operands == 9 ? results + 1 : results;
  case OpCode::Sgd: // (param, grad, buf, lr, norm[, found, applied][, copy])
    return operands == 6 || operands == 8 ? results + 1 : results;
  case OpCode::UpdateRunningStats: // (mean, var[, count], x)
    return operands == 4 ? results + 1 : results;
  default:
    return results;
  }
}

/// The operand that result \p i of an in-place instruction updates: operand
/// i, except accumulate's found (operand 3) and the parameter copy of adamw
/// and sgd (the last operand).
size_t aliasedOperand(const Instruction &instruction, size_t i) {
  switch (instruction.op) {
  case OpCode::Accumulate:
    return i == 0 ? 0 : 3;
  case OpCode::AdamW:
    return i < 4 ? i : instruction.operands.size() - 1;
  case OpCode::Sgd:
    return i < 3 ? i : instruction.operands.size() - 1;
  default:
    return i;
  }
}

/// Records that the table entry \p what refers to buffer \p id, which must
/// exist, have \p role and have no other entry (checkTables' bookkeeping).
using ClaimEntry = std::function<void(uint32_t id, BufferRole role, const std::string &what)>;

/// Checks the parameter-copy table: bf16 or f16 copies of distinct f32
/// parameters, each of its source's shape. Part of checkTables.
void checkParameterCopies(const Plan &plan, const ClaimEntry &claim) {
  const size_t bufferCount = plan.buffers.size();
  std::vector<bool> hasCopy(bufferCount, false);
  for (size_t i = 0; i < plan.parameterCopies.size(); ++i) {
    const ParameterCopy &copy = plan.parameterCopies[i];
    std::string what = "parameter copy " + std::to_string(i);
    claim(copy.buffer, BufferRole::ParameterCopy, what);
    const Buffer &buffer = plan.buffers[copy.buffer];
    what += " " + describeBuffer(plan, copy.buffer);
    if (buffer.dtype != DType::BF16 && buffer.dtype != DType::F16)
      fail(what + " must be bf16 or f16");
    if (copy.source >= bufferCount)
      fail(what + " has source buffer " + std::to_string(copy.source) + ", but the plan has " +
           std::to_string(bufferCount) + " buffers");
    const Buffer &source = plan.buffers[copy.source];
    if (source.role != BufferRole::Parameter)
      fail(what + ": its source " + describeBuffer(plan, copy.source) +
           " must be a parameter buffer, is a " + bufferRoleName(source.role));
    if (source.dtype != DType::F32)
      fail(what + ": its source " + describeBuffer(plan, copy.source) + " must be f32");
    if (source.shape != buffer.shape)
      fail(what + " must have the shape of its source " + describeBuffer(plan, copy.source));
    if (hasCopy[copy.source])
      fail(what + ": its source " + describeBuffer(plan, copy.source) + " already has a copy");
    hasCopy[copy.source] = true;
  }
}

/// Checks the parameter, input and constant tables: ids, roles, dtypes,
/// initialiser arguments, data sizes, unique names, and that every buffer
/// with one of those roles has exactly one entry. (State buffers have no
/// table: they start at zero.)
void checkTables(const Plan &plan) {
  const size_t bufferCount = plan.buffers.size();
  std::vector<int> entries(bufferCount, 0);
  auto claim = [&](uint32_t id, BufferRole role, const std::string &what) {
    if (id >= bufferCount)
      fail(what + " refers to buffer " + std::to_string(id) +
           ", but the plan "
           "has " +
           std::to_string(bufferCount) + " buffers");
    if (plan.buffers[id].role != role)
      fail(what + " refers to " + describeBuffer(plan, id) + ", whose role is " +
           bufferRoleName(plan.buffers[id].role) + ", not " + bufferRoleName(role));
    if (entries[id]++)
      fail(what + " refers to " + describeBuffer(plan, id) + ", which already has an entry");
  };
  std::set<std::string> names;
  for (const Parameter &parameter : plan.parameters) {
    std::string what = "parameter '" + parameter.name + "'";
    if (parameter.name.empty() || !names.insert(parameter.name).second)
      fail(what + ": parameter names must be unique and non-empty");
    claim(parameter.buffer, BufferRole::Parameter, what);
    if (!isFloatDType(plan.buffers[parameter.buffer].dtype))
      fail(what + " must have a float dtype");
    if (static_cast<uint8_t>(parameter.init) > 4)
      fail(what + " has an unknown init kind");
    const int64_t elements = numElements(plan.buffers[parameter.buffer]);
    if (parameter.init == InitKind::Given) {
      if (static_cast<int64_t>(parameter.values.size()) != elements)
        fail(what + ": given init has " + std::to_string(parameter.values.size()) + " values for " +
             std::to_string(elements) + " elements");
      for (float value : parameter.values)
        if (!std::isfinite(value))
          fail(what + ": given init values must be finite");
    } else if (!parameter.values.empty()) {
      fail(what + ": only a given init carries values");
    }
    if (!std::isfinite(parameter.a) || !std::isfinite(parameter.b))
      fail(what + ": init arguments must be finite");
    if (parameter.init == InitKind::Normal && parameter.b < 0)
      fail(what + ": normal init needs std >= 0");
    if (parameter.init == InitKind::Uniform && parameter.a > parameter.b)
      fail(what + ": uniform init needs low <= high");
  }
  names.clear();
  for (const Input &input : plan.inputs) {
    std::string what = "input '" + input.name + "'";
    if (input.name.empty() || !names.insert(input.name).second)
      fail(what + ": input names must be unique and non-empty");
    claim(input.buffer, BufferRole::Input, what);
    if (input.bound < 0)
      fail(what + ": bound must be >= 0");
    if (input.bound > 0 && !isIntegerDType(plan.buffers[input.buffer].dtype))
      fail(what + ": only integer inputs can have a bound");
    if (static_cast<uint8_t>(input.use) > 2)
      fail(what + " has an unknown use");
    if (input.use != InputUse::None && !isIntegerDType(plan.buffers[input.buffer].dtype))
      fail(what + ": only integer inputs can have use " + inputUseName(input.use));
  }
  for (size_t i = 0; i < plan.constants.size(); ++i) {
    const Constant &constant = plan.constants[i];
    std::string what = "constant " + std::to_string(i);
    claim(constant.buffer, BufferRole::Constant, what);
    const Buffer &buffer = plan.buffers[constant.buffer];
    uint64_t expected = static_cast<uint64_t>(numElements(buffer)) * dtypeBytes(buffer.dtype);
    // Every element, or one that all repeat (a splat).
    if (constant.bytes.size() != expected && constant.bytes.size() != dtypeBytes(buffer.dtype))
      fail(what + " has " + std::to_string(constant.bytes.size()) + " bytes, but " +
           describeBuffer(plan, constant.buffer) + " needs " + std::to_string(expected) +
           " (or " + std::to_string(dtypeBytes(buffer.dtype)) + ", a splat)");
  }
  checkParameterCopies(plan, claim);
  for (uint32_t id = 0; id < bufferCount; ++id)
    if (plan.buffers[id].role != BufferRole::Temporary &&
        plan.buffers[id].role != BufferRole::State && entries[id] == 0)
      fail(describeBuffer(plan, id) + " has role " + bufferRoleName(plan.buffers[id].role) +
           " but no " + bufferRoleName(plan.buffers[id].role) + " entry");
}

/// The four loss-scaling buffers, in update_loss_scale's operand order.
std::vector<uint32_t> lossScalingBuffers(const LossScaling &scaling) {
  return {scaling.scale, scaling.growthTracker, scaling.foundNonFinite, scaling.appliedSteps};
}

/// Checks Plan::lossScaling: a known mode and, when enabled, a training
/// plan, a finite positive initial scale, GradScaler's constraints on the
/// dynamic settings and four distinct f32 scalar state buffers.
void checkLossScaling(const Plan &plan) {
  const LossScaling &scaling = plan.lossScaling;
  if (static_cast<uint8_t>(scaling.mode) > 2)
    fail("unknown loss scale mode " + std::to_string(static_cast<int>(scaling.mode)));
  if (scaling.mode == LossScaleMode::None)
    return;
  const std::string what = std::string("loss scaling (") + lossScaleModeName(scaling.mode) + ")";
  if (plan.optimizerInstructions.empty())
    fail(what + " needs a training plan (one with an optimizer step)");
  if (!std::isfinite(scaling.initialScale) || scaling.initialScale <= 0)
    fail(what + ": the initial scale must be finite and > 0, is " +
         std::to_string(scaling.initialScale));
  // The growth, backoff and floor settings matter only to a dynamic scale.
  const bool dynamic = scaling.mode == LossScaleMode::Dynamic;
  if (dynamic && (!std::isfinite(scaling.growthFactor) || scaling.growthFactor <= 1))
    fail(what + ": the growth factor must be finite and > 1, is " +
         std::to_string(scaling.growthFactor));
  if (dynamic && !(scaling.backoffFactor > 0 && scaling.backoffFactor < 1))
    fail(what + ": the backoff factor must be in (0, 1), is " +
         std::to_string(scaling.backoffFactor));
  // The growth tracker is an f32 buffer: it counts exactly up to 2^24.
  if (dynamic && (scaling.growthInterval < 1 || scaling.growthInterval > (1 << 24)))
    fail(what + ": the growth interval must be in [1, 2^24], is " +
         std::to_string(scaling.growthInterval));
  if (dynamic && !(scaling.minScale >= 0 && scaling.minScale <= scaling.initialScale))
    fail(what + ": the minimum scale must be in [0, initial scale], is " +
         std::to_string(scaling.minScale));
  const char *names[] = {"scale", "growth tracker", "found-non-finite flag", "applied-steps count"};
  const std::vector<uint32_t> ids = lossScalingBuffers(scaling);
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] >= plan.buffers.size())
      fail(what + ": the " + names[i] + " buffer " + std::to_string(ids[i]) +
           " is out of range (the plan has " + std::to_string(plan.buffers.size()) + " buffers)");
    const Buffer &buffer = plan.buffers[ids[i]];
    if (buffer.role != BufferRole::State || buffer.dtype != DType::F32 || !buffer.shape.empty())
      fail(what + ": the " + names[i] + " " + describeBuffer(plan, ids[i]) +
           " must be an f32 scalar state buffer");
    for (size_t j = 0; j < i; ++j)
      if (ids[j] == ids[i])
        fail(what + ": the " + names[i] + " and the " + names[j] + " are one buffer, " +
             describeBuffer(plan, ids[i]));
  }
  // The count of backoffs stopped by the floor: the device program's
  // update_loss_scale kernel keeps it; no instruction touches it.
  const uint32_t floorHits = scaling.floorHits;
  if (floorHits >= plan.buffers.size())
    fail(what + ": the floor-hit count buffer " + std::to_string(floorHits) +
         " is out of range (the plan has " + std::to_string(plan.buffers.size()) + " buffers)");
  const Buffer &count = plan.buffers[floorHits];
  if (count.role != BufferRole::State || count.dtype != DType::F32 || !count.shape.empty())
    fail(what + ": the floor-hit count " + describeBuffer(plan, floorHits) +
         " must be an f32 scalar state buffer");
  for (size_t j = 0; j < ids.size(); ++j)
    if (ids[j] == floorHits)
      fail(what + ": the floor-hit count and the " + names[j] + " are one buffer, " +
           describeBuffer(plan, floorHits));
  for (const std::vector<Instruction> *list : {&plan.instructions, &plan.optimizerInstructions})
    for (size_t i = 0; i < list->size(); ++i)
      for (uint32_t operand : (*list)[i].operands)
        if (operand == floorHits)
          fail(what + ": the floor-hit count " + describeBuffer(plan, floorHits) + " is read by " +
               describeInstruction((*list)[i], i) + "; only the device program uses it");
}

} // namespace

void validatePlan(const Plan &plan) {
  const size_t bufferCount = plan.buffers.size();
  if (bufferCount > UINT32_MAX)
    fail("too many buffers");
  for (uint32_t id = 0; id < bufferCount; ++id) {
    const Buffer &buffer = plan.buffers[id];
    if (static_cast<uint8_t>(buffer.dtype) > 4 || static_cast<uint8_t>(buffer.role) > 5)
      fail("buffer " + std::to_string(id) + " has an unknown dtype or role");
    // Accumulators and optimizer moments must not lose small updates.
    if (buffer.role == BufferRole::State && buffer.dtype != DType::F32)
      fail(describeBuffer(plan, id) + " has role state, which must be f32");
    // Element counts stay far from int64 overflow so byte offsets are safe.
    int64_t elements = 1;
    for (int64_t dim : buffer.shape) {
      if (dim < 0 || (dim > 0 && elements > (int64_t(1) << 50) / dim))
        fail(describeBuffer(plan, id) + " has a negative dim or more than 2^50 elements");
      elements *= dim;
    }
  }
  checkTables(plan);
  checkLossScaling(plan);
  const bool scaled = plan.lossScaling.mode != LossScaleMode::None;
  std::vector<bool> isLossScaling(bufferCount, false);
  if (scaled)
    for (uint32_t id : lossScalingBuffers(plan.lossScaling))
      isLossScaling[id] = true;
  // The floor-hit count belongs to the device program's update_loss_scale
  // kernel: no instruction writes it.
  if (scaled)
    isLossScaling[plan.lossScaling.floorHits] = true;

  // Every non-temporary buffer holds data before the first instruction; a
  // temporary becomes readable once the instruction that writes it has run,
  // and only within its own list: the optimizer step runs separately from
  // the micro steps, after their temporaries are gone.
  std::vector<bool> written(bufferCount, false);
  std::vector<bool> defined(bufferCount);
  auto resetVisibility = [&] {
    for (uint32_t id = 0; id < bufferCount; ++id)
      defined[id] = plan.buffers[id].role != BufferRole::Temporary;
  };
  auto checkList = [&](const std::vector<Instruction> &list, const char *listName) {
    resetVisibility();
    for (size_t index = 0; index < list.size(); ++index) {
      const Instruction &instruction = list[index];
      InstructionChecker checker(plan, instruction, index, listName);
      if (static_cast<uint16_t>(instruction.op) >= kNumOpCodes)
        checker.fail("unknown opcode " + std::to_string(static_cast<int>(instruction.op)));
      const size_t results = resultCount(instruction);
      if (instruction.results.size() != results)
        checker.fail("must have exactly " + std::to_string(results) + " result" +
                     (results == 1 ? "" : "s") + ", has " +
                     std::to_string(instruction.results.size()));
      for (uint32_t id : instruction.operands)
        if (id >= bufferCount)
          checker.fail("operand buffer " + std::to_string(id) + " is out of range (the plan has " +
                       std::to_string(bufferCount) + " buffers)");
      for (uint32_t result : instruction.results)
        if (result >= bufferCount)
          checker.fail("result buffer " + std::to_string(result) +
                       " is out of range (the plan has " + std::to_string(bufferCount) +
                       " buffers)");
      for (size_t i = 0; i < instruction.operands.size(); ++i) {
        const uint32_t id = instruction.operands[i];
        if (defined[id])
          continue;
        if (written[id])
          checker.fail(checker.operandName(i) + " is a temporary of the micro step, which the "
                                                "optimizer step cannot read");
        checker.fail(checker.operandName(i) + " is read before any instruction writes it");
      }
      if (isInPlace(instruction.op)) {
        // Roles and shapes of the updated operands are checked per opcode.
        for (size_t i = 0; i < results; ++i) {
          const size_t operand = aliasedOperand(instruction, i);
          if (operand >= instruction.operands.size() ||
              instruction.results[i] != instruction.operands[operand])
            checker.fail(checker.resultName(i) + " must be operand " + std::to_string(operand) +
                         ", which it updates in place");
          // Aliased updates (m and v in one buffer) would race each other.
          for (size_t j = 0; j < i; ++j)
            if (instruction.results[j] == instruction.results[i])
              checker.fail(checker.resultName(i) + " is written a second time");
          // The loss-scaling state changes only through update_loss_scale
          // and accumulate's found flag.
          const uint32_t result = instruction.results[i];
          if (isLossScaling[result] && instruction.op != OpCode::UpdateLossScale &&
              !(instruction.op == OpCode::Accumulate && i == 1))
            checker.fail(checker.resultName(i) + " is a loss-scaling buffer, which only "
                                                 "update_loss_scale (and accumulate's found flag) "
                                                 "may write");
        }
        if (instruction.op == OpCode::UpdateLossScale) {
          if (listName[0] == '\0')
            checker.fail("runs only in the optimizer step");
          if (index + 1 != list.size())
            checker.fail("must be the last instruction of the optimizer step");
        }
      } else {
        for (size_t i = 0; i < results; ++i) {
          const uint32_t result = instruction.results[i];
          if (plan.buffers[result].role != BufferRole::Temporary)
            checker.fail(checker.resultName(i) + " has role " +
                         bufferRoleName(plan.buffers[result].role) +
                         "; only temporaries can be written (parameters, "
                         "parameter copies and state only in place, by "
                         "accumulate, adamw, sgd, update_loss_scale and "
                         "update_running_stats)");
          if (written[result])
            checker.fail(checker.resultName(i) + " is written a second time");
          for (size_t j = 0; j < i; ++j)
            if (instruction.results[j] == result)
              checker.fail(checker.resultName(i) + " is written a second time");
        }
      }
      checker.check();
      for (uint32_t result : instruction.results) {
        defined[result] = true;
        if (plan.buffers[result].role == BufferRole::Temporary)
          written[result] = true;
      }
    }
  };

  checkList(plan.instructions, "");
  if (plan.loss >= bufferCount)
    fail("the loss buffer " + std::to_string(plan.loss) + " is out of range (the plan has " +
         std::to_string(bufferCount) + " buffers)");
  const Buffer &loss = plan.buffers[plan.loss];
  if (!loss.shape.empty() || !isFloatDType(loss.dtype))
    fail("the loss " + describeBuffer(plan, plan.loss) + " must be a float scalar");
  if (!defined[plan.loss])
    fail("the loss " + describeBuffer(plan, plan.loss) + " is never written");

  if (plan.accumulationSteps < 1)
    fail("accumulation steps must be >= 1, is " + std::to_string(plan.accumulationSteps));
  if (plan.optimizerInstructions.empty())
    return validateDeviceProgram(plan);
  checkList(plan.optimizerInstructions, "optimizer step ");
  if (scaled && plan.optimizerInstructions.back().op != OpCode::UpdateLossScale)
    fail(std::string("the plan has loss scaling (") + lossScaleModeName(plan.lossScaling.mode) +
         "), so its optimizer step must end with update_loss_scale");
  for (auto [id, what] : {std::pair<uint32_t, const char *>{plan.gradNorm, "grad norm"},
                          {plan.learningRate, "learning rate"}}) {
    if (id >= bufferCount)
      fail(std::string("the ") + what + " buffer " + std::to_string(id) +
           " is out of range (the plan has " + std::to_string(bufferCount) + " buffers)");
    const Buffer &buffer = plan.buffers[id];
    if (!buffer.shape.empty() || buffer.dtype != DType::F32)
      fail(std::string("the ") + what + " " + describeBuffer(plan, id) + " must be an f32 scalar");
    if (!defined[id])
      fail(std::string("the ") + what + " " + describeBuffer(plan, id) +
           " is not written by the optimizer step");
  }
  validateDeviceProgram(plan);
}

} // namespace ampc::plan
