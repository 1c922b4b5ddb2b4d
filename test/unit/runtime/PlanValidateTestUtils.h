//===- PlanValidateTestUtils.h - Expecting validatePlan to reject a plan --===//

#ifndef AMPC_TEST_UNIT_RUNTIME_PLANVALIDATETESTUTILS_H
#define AMPC_TEST_UNIT_RUNTIME_PLANVALIDATETESTUTILS_H

#include "runtime/plan/Plan.h"

#include <gtest/gtest.h>

#include <initializer_list>
#include <string>

namespace ampc::test {

/// Expects validatePlan to reject \p plan with a one-line PlanError whose
/// message contains every one of \p fragments.
inline void expectInvalid(const plan::Plan &plan, std::initializer_list<const char *> fragments) {
  try {
    plan::validatePlan(plan);
    ADD_FAILURE() << "plan was accepted";
  } catch (const plan::PlanError &error) {
    const std::string message = error.what();
    EXPECT_EQ(message.find('\n'), std::string::npos);
    for (const char *fragment : fragments)
      EXPECT_NE(message.find(fragment), std::string::npos)
          << "'" << fragment << "' not in: " << message;
  }
}

} // namespace ampc::test

#endif // AMPC_TEST_UNIT_RUNTIME_PLANVALIDATETESTUTILS_H
