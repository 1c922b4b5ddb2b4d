//===- EmulatedElementwiseTest.cpp - Every elementwise opcode's kernel against the CPU -===//
//
// For every elementwise opcode of runtime/plan/OpCodes.def (binary, unary and activation
// gradient lines, and both forms of gelu and its gradient), a model whose forward applies the
// op to graph inputs and feeds the result to a matmul, so that the op's fused kernel stores it.
// The kernel is generated, compiled for the host and run in the device emulator; what it
// stores must be, bit for bit, what the CPU backend's kernel (runtime/cpu) computes from the
// same f32 values. Both evaluate numerics::ops::Name::apply (runtime/numerics/Elementwise.h), so
// this checks the generator's side: that the kernel calls the op's own function, with its
// operands in order (x before dy), and stores f32 without a rounding the CPU does not do.
// Inputs span -9 to 9 (both sides of every kink: 0, -3, 3), positive for log, sqrt and rsqrt.
//
//===----------------------------------------------------------------------===//

#include "CodegenHelpers.h"
#include "EmulatedKernelSupport.h"
#include "runtime/cpu/Kernels.h"
#include "runtime/plan/OpCodes.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <ostream>
#include <random>
#include <string>
#include <vector>

using namespace ampc;
using namespace ampc::test::emulated;

namespace {

constexpr int kRows = 8, kWidth = 64;
constexpr size_t kCount = kRows * kWidth;

/// One elementwise op: its textual form and the CPU backend's kernel for it.
struct ElementwiseCase {
  std::string name;     ///< for the test's name
  std::string spelling; ///< graph op with its attribute ("gelu tanh")
  int operands;         ///< 1 (unary) or 2 (binary, or an activation gradient's x and dy)
  bool positive;        ///< inputs > 0 (log, sqrt, rsqrt)
  std::function<void(const float *, const float *, float *)> cpu;
};

/// The case's op in test failure messages.
void PrintTo(const ElementwiseCase &c, std::ostream *os) { *os << c.spelling; }

std::vector<ElementwiseCase> allCases() {
  namespace k = cpu::kernels;
  std::vector<ElementwiseCase> cases;
  const std::vector<int64_t> shape = {kRows, kWidth};
#define AMPC_BINARY_OP(Name, Spelling, ...)                                                        \
  cases.push_back({#Name, Spelling, 2, false, [shape](const float *a, const float *b, float *y) {   \
                     k::binary(k::BinaryOp::Name, a, shape, b, shape, y, shape);                   \
                   }});
#define AMPC_UNARY_OP(Name, Spelling, ...)                                                         \
  cases.push_back({#Name, Spelling, 1, false, [](const float *x, const float *, float *y) {        \
                     k::unary(k::UnaryOp::Name, x, y, kCount);                                     \
                   }});
#define AMPC_UNARY_GRAD_OP(Name, Spelling, ...)                                                    \
  cases.push_back({#Name, Spelling, 2, false, [](const float *x, const float *dy, float *dx) {     \
                     k::unaryGrad(k::UnaryGradOp::Name, x, dy, dx, kCount);                        \
                   }});
#include "runtime/plan/OpCodes.def"
  for (ElementwiseCase &c : cases)
    c.positive = c.spelling == "log" || c.spelling == "sqrt" || c.spelling == "rsqrt";
  cases.push_back({"GeluErf", "gelu erf", 1, false, [](const float *x, const float *, float *y) {
                     k::unary(k::UnaryOp::GeluErf, x, y, kCount);
                   }});
  cases.push_back({"GeluTanh", "gelu tanh", 1, false, [](const float *x, const float *, float *y) {
                     k::unary(k::UnaryOp::GeluTanh, x, y, kCount);
                   }});
  cases.push_back(
      {"GeluErfGrad", "gelu_grad erf", 2, false, [](const float *x, const float *dy, float *dx) {
         k::unaryGrad(k::UnaryGradOp::GeluErfGrad, x, dy, dx, kCount);
       }});
  cases.push_back(
      {"GeluTanhGrad", "gelu_grad tanh", 2, false, [](const float *x, const float *dy, float *dx) {
         k::unaryGrad(k::UnaryGradOp::GeluTanhGrad, x, dy, dx, kCount);
       }});
  return cases;
}

/// y = op(x[, dy]) on graph inputs, then y @ m against a target: the op's kernel stores y.
std::string model(const ElementwiseCase &c) {
  const std::string t = "tensor<" + std::to_string(kRows) + "x" + std::to_string(kWidth) + "xf32>";
  const std::string operands = c.operands == 1 ? "%x" : "%x, %dy";
  const std::string types = c.operands == 1 || c.spelling.find("_grad") != std::string::npos
                                ? t
                                : t + ", " + t;
  return "graph.model @elementwise {\n"
         "  graph.param @m : tensor<64x16xf32> init #graph.normal<std = 1.0>\n"
         "  graph.input @x : " + t + "\n"
         "  graph.input @dy : " + t + "\n"
         "  graph.input @target : tensor<8x16xf32>\n"
         "  func.func @forward() {\n"
         "    %x = graph.get_input @x : " + t + "\n"
         "    %dy = graph.get_input @dy : " + t + "\n"
         "    %m = graph.get_param @m : tensor<64x16xf32>\n"
         "    %target = graph.get_input @target : tensor<8x16xf32>\n"
         "    %y = graph." + c.spelling + " " + operands + " : " + types + "\n"
         "    %z = graph.matmul %y, %m : " + t + ", tensor<64x16xf32>\n"
         "    %l = graph.mse_loss %z, %target : tensor<8x16xf32>\n"
         "    graph.loss %l : tensor<f32>\n"
         "    return\n"
         "  }\n"
         "}\n";
}

class EmulatedElementwise : public ::testing::TestWithParam<ElementwiseCase> {};

TEST_P(EmulatedElementwise, KernelStoresTheCpuBackendsBits) {
  const ElementwiseCase &c = GetParam();
  const std::vector<GeneratedKernel> kernels = generateForText(model(c), kPrecisions[2]);
  const std::string opName = "graph." + c.spelling.substr(0, c.spelling.find(' '));
  const GeneratedKernel *kernel = findKernel(kernels, "elementwise", opName);
  ASSERT_TRUE(kernel) << "no elementwise kernel computes " << opName;

  TemporaryDirectory directory;
  HostKernel host(*kernel, directory.path);
  ASSERT_TRUE(host.ok()) << host.error() << "\n" << kernel->source;
  Arguments arguments(*kernel);
  std::mt19937 generator(17);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<std::vector<float>> inputs(2, std::vector<float>(kCount));
  for (std::vector<float> &values : inputs)
    for (float &value : values) {
      value = normal(generator);
      if (c.positive)
        value = std::fabs(value) + 0.05f;
    }
  int bound = 0;
  for (const KernelParam &param : kernel->params) {
    if (param.role != KernelParam::Role::Input)
      continue;
    ASSERT_TRUE(param.value == "@x" || param.value == "@dy") << param.value << "\n"
                                                             << kernel->source;
    const std::vector<float> &values = inputs[param.value == "@x" ? 0 : 1];
    std::memcpy(arguments[param.name].data(), values.data(), kCount * sizeof(float));
    ++bound;
  }
  EXPECT_EQ(bound, c.operands) << kernel->source;
  host.run(kernel->launch, arguments.bind());

  std::vector<float> expected(kCount);
  c.cpu(inputs[0].data(), inputs[1].data(), expected.data());
  int outputs = 0;
  for (const KernelParam &param : kernel->params) {
    if (param.role != KernelParam::Role::Output)
      continue;
    ++outputs;
    ASSERT_EQ(param.elementType, "f32");
    const std::vector<char> &stored = arguments[param.name];
    size_t differing = 0;
    for (size_t i = 0; i < kCount; ++i) {
      float value;
      std::memcpy(&value, stored.data() + 4 * i, 4);
      if (std::memcmp(&value, &expected[i], 4) != 0 && differing++ < 5)
        ADD_FAILURE() << c.spelling << " element " << i << " of x = " << inputs[0][i]
                      << ", dy = " << inputs[1][i] << ": kernel " << value << ", CPU "
                      << expected[i];
    }
    EXPECT_EQ(differing, 0u) << kernel->source;
  }
  EXPECT_EQ(outputs, 1) << kernel->source;
}

INSTANTIATE_TEST_SUITE_P(Opcodes, EmulatedElementwise, ::testing::ValuesIn(allCases()),
                         [](const ::testing::TestParamInfo<ElementwiseCase> &info) {
                           return info.param.name;
                         });

} // namespace
