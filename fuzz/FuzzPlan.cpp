//===- FuzzPlan.cpp - Fuzz target: plan files -------------------------------===//
//
// The input is a plan file (docs/plan-format.md), as `ampc eval FILE.plan`, a training
// executable's appended plan and the Python package read one: readPlan decodes it and runs
// validatePlan, device program included (validateDeviceProgram). A plan that is accepted must
// encode to bytes that decode to the same encoding again, and answer what the runner asks of
// every plan (forwardInstructionCount). PlanError is the expected answer to bad bytes.
//
//===----------------------------------------------------------------------===//

#include "runtime/plan/Plan.h"

#include <cstdio>
#include <cstdlib>
#include <sstream>

using namespace ampc;

namespace {

std::string encode(const plan::Plan &plan) {
  std::ostringstream out;
  plan::writePlan(plan, out);
  return out.str();
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  plan::Plan decoded;
  try {
    std::istringstream in(std::string(reinterpret_cast<const char *>(data), size));
    decoded = plan::readPlan(in);
  } catch (const plan::PlanError &) {
    return 0;
  }
  // An accepted plan round-trips: its encoding reads back and encodes to the same bytes.
  const std::string first = encode(decoded);
  std::istringstream again(first);
  if (encode(plan::readPlan(again)) != first) {
    std::fprintf(stderr, "ampc fuzz: an accepted plan does not survive writePlan/readPlan\n");
    std::abort();
  }
  try {
    plan::forwardInstructionCount(decoded);
  } catch (const plan::PlanError &) {
  }
  return 0;
}
