//===- Plan.cpp - Names, sizes and attribute access for plans -------------===//

#include "runtime/plan/Plan.h"

#include <sstream>

namespace ampc::plan {

const char *opCodeName(OpCode op) {
  const size_t code = static_cast<size_t>(op);
  return code < kNumOpCodes ? kOpTable[code].name : "unknown";
}

std::optional<OpCode> opCodeFromName(std::string_view name) {
  for (const OpInfo &info : kOpTable)
    if (name == info.name)
      return info.op;
  return std::nullopt;
}

const char *dtypeName(DType dtype) {
  switch (dtype) {
  case DType::F32:
    return "f32";
  case DType::BF16:
    return "bf16";
  case DType::F16:
    return "f16";
  case DType::I32:
    return "i32";
  case DType::I64:
    return "i64";
  }
  return "unknown";
}

size_t dtypeBytes(DType dtype) {
  switch (dtype) {
  case DType::F32:
  case DType::I32:
    return 4;
  case DType::BF16:
  case DType::F16:
    return 2;
  case DType::I64:
    return 8;
  }
  return 0;
}

int64_t numElements(const std::vector<int64_t> &shape) {
  int64_t count = 1;
  for (int64_t dim : shape)
    count *= dim;
  return count;
}

int64_t numElements(const Buffer &buffer) { return numElements(buffer.shape); }

bool isFloatDType(DType dtype) {
  return dtype == DType::F32 || dtype == DType::BF16 || dtype == DType::F16;
}

bool isIntegerDType(DType dtype) { return dtype == DType::I32 || dtype == DType::I64; }

const char *bufferRoleName(BufferRole role) {
  switch (role) {
  case BufferRole::Parameter:
    return "parameter";
  case BufferRole::Input:
    return "input";
  case BufferRole::Constant:
    return "constant";
  case BufferRole::Temporary:
    return "temporary";
  case BufferRole::State:
    return "state";
  case BufferRole::ParameterCopy:
    return "parameter_copy";
  }
  return "unknown";
}

const char *lossScaleModeName(LossScaleMode mode) {
  switch (mode) {
  case LossScaleMode::None:
    return "none";
  case LossScaleMode::Static:
    return "static";
  case LossScaleMode::Dynamic:
    return "dynamic";
  }
  return "unknown";
}

const char *initKindName(InitKind init) {
  switch (init) {
  case InitKind::Zeros:
    return "zeros";
  case InitKind::Ones:
    return "ones";
  case InitKind::Normal:
    return "normal";
  case InitKind::Uniform:
    return "uniform";
  case InitKind::Given:
    return "given";
  }
  return "unknown";
}

const char *inputUseName(InputUse use) {
  switch (use) {
  case InputUse::None:
    return "none";
  case InputUse::Indices:
    return "indices";
  case InputUse::Labels:
    return "labels";
  }
  return "unknown";
}

uint32_t findBuffer(const Plan &plan, const std::string &name) {
  for (size_t i = 0; i < plan.buffers.size(); ++i)
    if (plan.buffers[i].name == name)
      return static_cast<uint32_t>(i);
  throw PlanError("the plan has no buffer named '" + name + "'");
}

std::string shapeToString(const std::vector<int64_t> &shape) {
  std::ostringstream text;
  text << '[';
  for (size_t i = 0; i < shape.size(); ++i)
    text << (i ? ", " : "") << shape[i];
  text << ']';
  return text.str();
}

std::string describeInstruction(const Instruction &instruction, size_t index) {
  std::string text = "instruction " + std::to_string(index) + " (" + opCodeName(instruction.op);
  if (!instruction.location.empty())
    text += " at " + instruction.location;
  return text + ")";
}

size_t forwardInstructionCount(const Plan &plan) {
  for (size_t index = 0; index < plan.instructions.size(); ++index) {
    const Instruction &instruction = plan.instructions[index];
    // The running statistics' update does nothing outside training.
    if (instruction.op == OpCode::UpdateRunningStats)
      continue;
    for (uint32_t result : instruction.results) {
      const BufferRole role = plan.buffers.at(result).role;
      if (role == BufferRole::Parameter || role == BufferRole::State)
        throw PlanError(describeInstruction(instruction, index) + " writes the " +
                        bufferRoleName(role) + " buffer '" + plan.buffers[result].name +
                        "' before the loss is computed: the forward pass cannot run alone");
    }
    for (uint32_t result : instruction.results)
      if (result == plan.loss)
        return index + 1;
  }
  throw PlanError("no instruction writes the loss '" + plan.buffers.at(plan.loss).name + "'");
}

bool isSplat(const Plan &plan, const Constant &constant) {
  const Buffer &buffer = plan.buffers.at(constant.buffer);
  return numElements(buffer) > 1 && constant.bytes.size() == dtypeBytes(buffer.dtype);
}

} // namespace ampc::plan
