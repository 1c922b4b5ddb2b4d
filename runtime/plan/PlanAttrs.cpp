//===- PlanAttrs.cpp - The attribute table's checks and its document ------===//

#include "runtime/plan/PlanAttrs.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <sstream>

namespace ampc::plan {

const std::vector<OpAttr> &opAttrs() {
  static const std::vector<OpAttr> table = {
#define AMPC_OP_ATTR(Op, Key, Presence)                                                            \
  {OpCode::Op, attr::Key.name, attr::Key.type, std::string_view(#Presence) == "Required"},
#include "runtime/plan/PlanAttrs.def"
  };
  return table;
}

namespace {

const char *typeDescription(AttrType type) {
  switch (type) {
  case AttrType::Int:
  case AttrType::Flag:
    return "an integer";
  case AttrType::Real:
    return "a real number";
  case AttrType::IntList:
    return "a list of integers";
  }
  return "";
}

const char *typeName(AttrType type) {
  switch (type) {
  case AttrType::Int:
    return "int";
  case AttrType::Flag:
    return "int 0/1";
  case AttrType::Real:
    return "real";
  case AttrType::IntList:
    return "int list";
  }
  return "";
}

bool holds(const AttrValue &value, AttrType type) {
  switch (type) {
  case AttrType::Int:
  case AttrType::Flag:
    return std::holds_alternative<int64_t>(value);
  case AttrType::Real:
    return std::holds_alternative<double>(value);
  case AttrType::IntList:
    return std::holds_alternative<std::vector<int64_t>>(value);
  }
  return false;
}

} // namespace

namespace detail {
void attributeError(const Instruction &instruction, const char *name, bool missing,
                    AttrType wanted) {
  if (missing)
    throw PlanError(std::string(opCodeName(instruction.op)) + " is missing attribute '" + name +
                    "'");
  throw PlanError(std::string(opCodeName(instruction.op)) + " attribute '" + name + "' must be " +
                  typeDescription(wanted));
}
} // namespace detail

std::string checkAttributes(const Instruction &instruction) {
  const char *op = opCodeName(instruction.op);
  // The declared attributes the instruction has; the messages are built only on a failure.
  size_t present = 0;
  for (const OpAttr &entry : opAttrs()) {
    if (entry.op != instruction.op)
      continue;
    auto it = instruction.attrs.find(entry.name);
    if (it == instruction.attrs.end()) {
      if (entry.required)
        return std::string(op) + " is missing attribute '" + entry.name + "'";
      continue;
    }
    ++present;
    const std::string name = std::string("attribute '") + entry.name + "'";
    if (!holds(it->second, entry.type))
      return std::string(op) + " " + name + " must be " + typeDescription(entry.type);
    if (entry.type == AttrType::Flag) {
      const int64_t value = std::get<int64_t>(it->second);
      if (value != 0 && value != 1)
        return name + " must be 0 or 1, is " + std::to_string(value);
    }
    if (entry.type == AttrType::Real && !std::isfinite(std::get<double>(it->second)))
      return name + " must be finite";
  }
  if (present == instruction.attrs.size())
    return "";
  // Some attribute is not declared for the opcode: name it and the ones it takes.
  std::vector<std::string> declared;
  for (const OpAttr &entry : opAttrs())
    if (entry.op == instruction.op)
      declared.push_back(entry.name);
  for (const auto &[name, value] : instruction.attrs)
    if (std::find(declared.begin(), declared.end(), name) == declared.end()) {
      std::string takes;
      for (const std::string &known : declared)
        takes += (takes.empty() ? "" : ", ") + known;
      return std::string(op) + " has no attribute '" + name + "' (" +
             (takes.empty() ? std::string("it takes none") : "it takes " + takes) + ")";
    }
  return "";
}

std::string attributeTableMarkdown() {
  std::ostringstream out;
  out << "| opcode | attribute | type | presence |\n";
  out << "|--------|-----------|------|----------|\n";
  for (uint16_t code = 0; code < kNumOpCodes; ++code)
    for (const OpAttr &entry : opAttrs())
      if (static_cast<uint16_t>(entry.op) == code)
        out << "| " << code << " `" << opCodeName(entry.op) << "` | `" << entry.name << "` | "
            << typeName(entry.type) << " | " << (entry.required ? "required" : "optional")
            << " |\n";
  return out.str();
}

std::optional<Window2d> window2dOf(const Instruction &instruction,
                                   const std::vector<int64_t> &convKernel, std::string &error) {
  const bool conv = !has(instruction, attr::kernelShape);
  const std::vector<int64_t> none;
  return makeWindow2d(conv ? convKernel : get(instruction, attr::kernelShape),
                      get(instruction, attr::strides), get(instruction, attr::pads),
                      has(instruction, attr::dilations) ? get(instruction, attr::dilations) : none,
                      !conv && get(instruction, attr::ceilMode) != 0, error);
}

} // namespace ampc::plan
