//===- ValidationDiagnostics.h - How validation words failures --*- C++ -*-===//
//
// Every rule validatePlan enforces fails the same way: one PlanError whose
// message starts "invalid plan: " and names what broke the rule, with buffers
// spelled by describeBuffer. The checks of the tables and instructions
// (PlanValidate.cpp, PlanValidateTraining.cpp, through InstructionChecker) and
// those of the device program (PlanValidateDevice.cpp) share these two
// functions, so all of validation reads alike. Both are defined in
// PlanValidate.cpp.
//
//===----------------------------------------------------------------------===//

#ifndef AMPC_RUNTIME_PLAN_VALIDATIONDIAGNOSTICS_H
#define AMPC_RUNTIME_PLAN_VALIDATIONDIAGNOSTICS_H

#include "runtime/plan/Plan.h"

#include <cstdint>
#include <string>

namespace ampc::plan::detail {

/// Throws PlanError("invalid plan: " + \p message).
[[noreturn]] void fail(const std::string &message);

/// How validation names a buffer: "buffer 4 'h1' (bf16 [2, 3])". \p id must
/// be below plan.buffers.size().
std::string describeBuffer(const Plan &plan, uint32_t id);

} // namespace ampc::plan::detail

#endif // AMPC_RUNTIME_PLAN_VALIDATIONDIAGNOSTICS_H
