//===- OpCodes.h - The plan's opcodes and what each one is ------*- C++ -*-===//
//
// The instruction opcodes and a table of what validation, the backends and
// the compiler need to know about each one (name, kind, arity), all generated
// from the one list in OpCodes.def. The numeric values are the on-disk codes.
//
//===----------------------------------------------------------------------===//

#ifndef AMPC_RUNTIME_PLAN_OPCODES_H
#define AMPC_RUNTIME_PLAN_OPCODES_H

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <optional>
#include <string_view>

namespace ampc::plan {

/// Instruction opcodes. The numeric values (the order of OpCodes.def, from 0)
/// are the on-disk codes; new opcodes are only ever appended.
enum class OpCode : uint16_t {
#define AMPC_OP(Name, Spelling, Kind, Operands, Results) Name,
#include "runtime/plan/OpCodes.def"
};

/// What family an opcode belongs to, which decides how it is checked and run
/// (the kind macros of OpCodes.def say what each family shares).
enum class OpKind : uint8_t {
  ElementwiseBinary,
  ElementwiseUnary,
  Layout,
  Reduction,
  Forward,
  Training,
  InPlace
};

/// OpInfo::operands of an opcode whose operand count varies.
inline constexpr int kVariadic = -1;

/// One line of OpCodes.def.
struct OpInfo {
  OpCode op;
  /// The name in diagnostics and docs ("matmul", "cross_entropy", ...).
  const char *name;
  OpKind kind;
  /// Number of operands, or kVariadic.
  int operands;
  /// Number of results without optional operands (see OpCodes.def).
  int results;
};

/// Every opcode, indexed by its numeric code.
inline constexpr OpInfo kOpTable[] = {
#define AMPC_OP(Name, Spelling, Kind, Operands, Results)                                           \
  {OpCode::Name, Spelling, OpKind::Kind, Operands, Results},
#include "runtime/plan/OpCodes.def"
};

/// Number of opcodes this runtime knows (one past the last code).
inline constexpr uint16_t kNumOpCodes = static_cast<uint16_t>(std::size(kOpTable));

/// The table entry of \p op, which must be below kNumOpCodes (validatePlan
/// rejects other values before anything looks an instruction up).
constexpr const OpInfo &opInfo(OpCode op) { return kOpTable[static_cast<size_t>(op)]; }

/// Whether \p op updates buffers in place: each of its results is one of its
/// operands. These are the only instructions that write parameter, parameter
/// copy or state buffers. False for a value outside the table.
constexpr bool isInPlace(OpCode op) {
  return static_cast<uint16_t>(op) < kNumOpCodes && opInfo(op).kind == OpKind::InPlace;
}

/// The opcode's name as written in diagnostics and docs ("matmul",
/// "cross_entropy", ...); "unknown" for a value outside the enum.
const char *opCodeName(OpCode op);
/// The opcode named \p name (opCodeName's inverse); nullopt for no opcode.
std::optional<OpCode> opCodeFromName(std::string_view name);

} // namespace ampc::plan

#endif // AMPC_RUNTIME_PLAN_OPCODES_H
