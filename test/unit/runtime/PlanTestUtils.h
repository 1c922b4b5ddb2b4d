//===- PlanTestUtils.h - Building small plans and running one op ----------===//

#ifndef AMPC_TEST_UNIT_RUNTIME_PLANTESTUTILS_H
#define AMPC_TEST_UNIT_RUNTIME_PLANTESTUTILS_H

#include "runtime/plan/Plan.h"

#include <string>
#include <vector>

namespace ampc::test {

using plan::AttrValue;
using plan::DType;
using plan::OpCode;
using Attrs = std::map<std::string, AttrValue>;
using Shape = std::vector<int64_t>;

/// Appends buffers, table entries and instructions to a plan.
class PlanBuilder {
public:
  explicit PlanBuilder(std::string modelName = "test_model") {
    plan.modelName = std::move(modelName);
  }

  uint32_t buffer(const std::string &name, DType dtype, Shape shape,
                  plan::BufferRole role = plan::BufferRole::Temporary);
  uint32_t parameter(const std::string &name, DType dtype, Shape shape,
                     plan::InitKind init = plan::InitKind::Zeros, double a = 0, double b = 0);
  uint32_t input(const std::string &name, DType dtype, Shape shape, int64_t bound = 0);
  /// A constant holding \p values encoded in \p dtype.
  uint32_t constant(const std::string &name, DType dtype, Shape shape,
                    const std::vector<double> &values);
  /// A zero-initialised f32 training-state buffer.
  uint32_t state(const std::string &name, Shape shape);
  /// Appends an instruction writing a new temporary; returns its buffer.
  uint32_t op(OpCode op, std::vector<uint32_t> operands, DType dtype, Shape shape, Attrs attrs = {},
              std::string location = "");
  /// op() appended to the optimizer step.
  uint32_t optimizerOp(OpCode op, std::vector<uint32_t> operands, DType dtype, Shape shape,
                       Attrs attrs = {});
  /// Appends an instruction with explicit results (several, or in place) to
  /// the micro step, or to the optimizer step when \p optimizer.
  void instruction(OpCode op, std::vector<uint32_t> operands, std::vector<uint32_t> results,
                   Attrs attrs = {}, bool optimizer = false);

  plan::Plan plan;
};

/// \p values encoded little-endian in \p dtype (floats rounded to nearest).
std::vector<uint8_t> encodeValues(DType dtype, const std::vector<double> &values);

/// A small training plan that uses every opcode, every attribute type,
/// every buffer role and input use, and every training and mixed-precision
/// field (a bf16 parameter copy, dynamic loss scaling, debugNonFinite).
plan::Plan everyOpcodePlan();

} // namespace ampc::test

#endif // AMPC_TEST_UNIT_RUNTIME_PLANTESTUTILS_H
