//===- PlanAttrs.h - Typed instruction attributes, from PlanAttrs.def -*- C++ -*-===//
//
// An instruction stores its attributes by name (Instruction::attrs, the plan
// file's layout), but code never spells a name: it reads and writes through
// the typed keys PlanAttrs.def declares, plan::attr::causal and the like.
//
//   const bool causal = plan::get(instruction, plan::attr::causal) != 0;
//   instruction.attrs = {plan::attr::causal(1), plan::attr::scale(0.125)};
//
// A misspelled key does not compile, nor a value of another type (a list for
// an integer). Which opcodes take which attribute, and whether it is required,
// is declared in the same table; checkAttributes validates an instruction
// against it, and attributeTableMarkdown writes it for docs/plan-format.md.
//
//===----------------------------------------------------------------------===//

#ifndef AMPC_RUNTIME_PLAN_PLANATTRS_H
#define AMPC_RUNTIME_PLAN_PLANATTRS_H

#include "runtime/plan/Plan.h"
#include "runtime/plan/ShapeRules.h"

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace ampc::plan {

/// The type of an attribute's value (PlanAttrs.def's Type column).
enum class AttrType { Int, Flag, Real, IntList };

/// The C++ type an attribute of each AttrType is read as.
template <AttrType Type> struct AttrValueOf { using type = int64_t; };
template <> struct AttrValueOf<AttrType::Real> { using type = double; };
template <> struct AttrValueOf<AttrType::IntList> { using type = std::vector<int64_t>; };

/// A typed attribute key: its spelling, and the type of its value as T.
template <typename T> struct AttrKey {
  const char *name;
  AttrType type;

  /// The attribute with \p value, as an entry of Instruction::attrs.
  std::pair<const std::string, AttrValue> operator()(T value) const {
    return {name, AttrValue(std::move(value))};
  }
};

/// The keys, one per AMPC_ATTR line.
namespace attr {
#define AMPC_ATTR(Key, Spelling, Type)                                                             \
  inline constexpr AttrKey<AttrValueOf<AttrType::Type>::type> Key{Spelling, AttrType::Type};
#include "runtime/plan/PlanAttrs.def"
} // namespace attr

/// The declaration of one attribute of one opcode.
struct OpAttr {
  OpCode op;
  const char *name;
  AttrType type;
  bool required;
};

/// Every AMPC_OP_ATTR line, in the table's order.
const std::vector<OpAttr> &opAttrs();

/// Whether \p instruction has the attribute \p key.
template <typename T> bool has(const Instruction &instruction, const AttrKey<T> &key) {
  return instruction.attrs.count(key.name) != 0;
}

namespace detail {
/// PlanError: \p instruction lacks \p name, or holds another type.
[[noreturn]] void attributeError(const Instruction &instruction, const char *name, bool missing,
                                 AttrType wanted);
} // namespace detail

/// The value of \p key; PlanError when it is missing or of another type (never
/// for an instruction that passed validation and takes it as required).
template <typename T> const T &get(const Instruction &instruction, const AttrKey<T> &key) {
  auto it = instruction.attrs.find(key.name);
  if (it == instruction.attrs.end())
    detail::attributeError(instruction, key.name, true, key.type);
  if (const T *value = std::get_if<T>(&it->second))
    return *value;
  detail::attributeError(instruction, key.name, false, key.type);
}

/// Sets \p key to \p value.
template <typename T> void set(Instruction &instruction, const AttrKey<T> &key, T value) {
  instruction.attrs[key.name] = AttrValue(std::move(value));
}

/// The table's checks of \p instruction's attributes: each required one
/// present, each present one declared for its opcode and of its type, flags 0
/// or 1, reals finite. Returns the first failure's message, empty when none.
std::string checkAttributes(const Instruction &instruction);

/// The table as the Markdown of docs/plan-format.md's "Attributes" section.
std::string attributeTableMarkdown();

/// The window of a convolution or pooling instruction (conv2d*, max_pool2d*, avg_pool2d*) from
/// its attributes: the kernel from `kernel_shape`, or for a convolution \p convKernel (the
/// weight's [KH, KW]); nullopt with \p error set when an attribute is out of range.
std::optional<Window2d> window2dOf(const Instruction &instruction,
                                   const std::vector<int64_t> &convKernel, std::string &error);

} // namespace ampc::plan

#endif // AMPC_RUNTIME_PLAN_PLANATTRS_H
