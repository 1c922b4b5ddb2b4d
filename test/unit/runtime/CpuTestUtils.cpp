//===- CpuTestUtils.cpp - Running one instruction on the CPU backend ------===//

#include "CpuTestUtils.h"

#include <gtest/gtest.h>

namespace ampc::test {

std::vector<double> runOp(OpCode op, const std::vector<TensorSpec> &operands, DType resultDType,
                          const Shape &resultShape, const Attrs &attrs, cpu::Precision precision,
                          const cpu::RunOptions &options) {
  PlanBuilder builder;
  std::vector<uint32_t> ids;
  for (size_t i = 0; i < operands.size(); ++i)
    ids.push_back(builder.input("x" + std::to_string(i), operands[i].dtype, operands[i].shape));
  const uint32_t result = builder.op(op, ids, resultDType, resultShape, attrs, "test.mlir:1:1");
  uint32_t loss = result;
  if (!resultShape.empty() || !plan::isFloatDType(resultDType)) {
    uint32_t summed = result;
    if (!plan::isFloatDType(resultDType))
      summed = builder.op(OpCode::Cast, {result}, DType::F32, resultShape);
    std::vector<int64_t> axes;
    for (size_t d = 0; d < resultShape.size(); ++d)
      axes.push_back(static_cast<int64_t>(d));
    loss = builder.op(OpCode::Sum, {summed}, DType::F32, {},
                      {{"axes", axes}, {"keepdims", int64_t(0)}});
  }
  builder.plan.loss = loss;
  cpu::Executor executor(builder.plan, precision);
  for (size_t i = 0; i < operands.size(); ++i) {
    std::vector<uint8_t> bytes = encodeValues(operands[i].dtype, operands[i].values);
    executor.setInput("x" + std::to_string(i), bytes.data(), bytes.size());
  }
  executor.run(options);
  return executor.bufferValues(result);
}

std::vector<double> runF32(OpCode op, const std::vector<TensorSpec> &operands,
                           const Shape &resultShape, const Attrs &attrs, cpu::Precision precision) {
  return runOp(op, operands, DType::F32, resultShape, attrs, precision);
}

void expectNear(const std::vector<double> &actual, const std::vector<double> &expected,
                double tolerance) {
  ASSERT_EQ(actual.size(), expected.size());
  for (size_t i = 0; i < actual.size(); ++i)
    EXPECT_NEAR(actual[i], expected[i], tolerance) << "at index " << i;
}

} // namespace ampc::test
