//===- CpuTestUtils.h - Running one instruction on the CPU backend --------===//

#ifndef AMPC_TEST_UNIT_RUNTIME_CPUTESTUTILS_H
#define AMPC_TEST_UNIT_RUNTIME_CPUTESTUTILS_H

#include "PlanTestUtils.h"
#include "runtime/cpu/Executor.h"

namespace ampc::test {

/// One operand of a single-op test: an input with given data.
struct TensorSpec {
  DType dtype;
  Shape shape;
  std::vector<double> values;
};

/// Builds a plan whose inputs are \p operands and whose one instruction is
/// \p op (plus a sum as the loss when the result is not a float scalar),
/// runs it on the CPU backend and returns the op's result values.
std::vector<double> runOp(OpCode op, const std::vector<TensorSpec> &operands, DType resultDType,
                          const Shape &resultShape, const Attrs &attrs = {},
                          cpu::Precision precision = cpu::Precision::F64,
                          const cpu::RunOptions &options = {});

/// runOp with F32 operands and result.
std::vector<double> runF32(OpCode op, const std::vector<TensorSpec> &operands,
                           const Shape &resultShape, const Attrs &attrs = {},
                           cpu::Precision precision = cpu::Precision::F64);

/// Expects \p actual to match \p expected element-wise within \p tolerance.
void expectNear(const std::vector<double> &actual, const std::vector<double> &expected,
                double tolerance);

} // namespace ampc::test

#endif // AMPC_TEST_UNIT_RUNTIME_CPUTESTUTILS_H
