//===- CudaMatmulGpuTest.cpp - cuBLASLt matmuls and CUDA graphs on a GPU --===//
//
// Every matmul configuration the backend uses, run through Matmul on a GPU
// and compared with a reference computed in double from the same (rounded)
// inputs: bf16/f16/f32 inputs with same-type or f32 outputs, each transpose
// pair, an odd shape, batches (packed and with B broadcast), in-place
// accumulation (beta = 1), a residual C of its own (beta = 1, C not D), and
// each epilogue: bias, gelu_tanh + bias against the tanh-GELU formula, gelu
// with its aux pre-activation, the gelu gradient (DGELU: the product times
// the tanh GELU's derivative at an aux input), and the bias gradients against
// column / row sums. Errors are relative norms; tolerances follow the output
// precision (bf16 keeps 8 significant bits, f16 11, f32 accumulates exactly
// enough for 1e-5). Then CUDA graphs: a captured step (kernels and a matmul)
// replays the same results as eager execution, and a step that cannot be
// captured falls back to eager execution, saying why once. Every test skips
// without a driver or a GPU.
//
//===----------------------------------------------------------------------===//

#include "CudaGpuTestUtils.h"

#include "runtime/cuda/CublasLt.h"
#include "runtime/cuda/CudaGraph.h"
#include "runtime/cuda/Module.h"
#include "runtime/cuda/Nvrtc.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <vector>

namespace {

using namespace ampc::cuda;
using namespace ampc::cuda::testing;
using ampc::plan::DType;
using ampc::plan::dtypeName;

/// The Matmul every test shares (its algorithm cache grows as they run).
Matmul &sharedMatmul(Device &device) {
  static Matmul *matmul = new Matmul(device);
  return *matmul;
}

double geluTanh(double x) {
  const double c = std::sqrt(2.0 / M_PI);
  return 0.5 * x * (1.0 + std::tanh(c * (x + 0.044715 * x * x * x)));
}

/// The derivative of geluTanh.
double geluTanhDerivative(double x) {
  const double c = std::sqrt(2.0 / M_PI);
  const double t = std::tanh(c * (x + 0.044715 * x * x * x));
  return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * c * (1.0 + 3.0 * 0.044715 * x * x);
}

double geluErf(double x) { return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))); }

/// The norm-wise relative error a correct result stays below when stored
/// as \p type (rounding: 2^-9 for bf16, 2^-12 for f16, at most per element).
double tolerance(DType type) {
  switch (type) {
  case DType::BF16:
    return 5e-3;
  case DType::F16:
    return 1e-3;
  default:
    return 1e-5;
  }
}

struct MatmulCase {
  std::string name;
  DType input, output;
  bool transposeA = false, transposeB = false;
  MatmulEpilogue epilogue = MatmulEpilogue::None;
  int64_t m = 48, n = 40, k = 72;
  int64_t batch = 1;
  bool broadcastB = false;
  float beta = 0.0f; // 1: accumulate into D in place
  /// With beta 1: C is a buffer of its own (a residual added to the product), D starts as NaNs.
  bool separateC = false;
};

std::string caseName(const ::testing::TestParamInfo<MatmulCase> &info) { return info.param.name; }

/// Names the case in test listings (ctest shows this) instead of its bytes.
void PrintTo(const MatmulCase &c, std::ostream *out) { *out << c.name; }

class CudaMatmulGpu : public ::testing::TestWithParam<MatmulCase> {};

TEST_P(CudaMatmulGpu, MatchesTheReference) {
  AMPC_REQUIRE_GPU(device);
  const MatmulCase c = GetParam();
  if ((c.input == DType::BF16 || c.output == DType::BF16) && !device.info().supportsBf16())
    GTEST_SKIP() << "no bf16 on " << device.info().summary();

  MatmulDesc desc;
  desc.m = c.m;
  desc.n = c.n;
  desc.k = c.k;
  desc.transposeA = c.transposeA;
  desc.transposeB = c.transposeB;
  desc.inputType = c.input;
  desc.outputType = c.output;
  desc.batchCount = c.batch;
  desc.epilogue = c.epilogue;
  if (c.broadcastB)
    desc.batchStrideB = 0;
  ASSERT_EQ(matmulDescProblem(desc), "");

  const int64_t m = c.m, n = c.n, k = c.k;
  const int64_t aSize = m * k, bSize = k * n, dSize = m * n;
  const int64_t bBatches = c.broadcastB ? 1 : c.batch;
  std::mt19937 generator(std::hash<std::string>()(c.name) & 0xffffffffu);
  const std::vector<double> a = randomValues(aSize * c.batch, c.input, generator);
  const std::vector<double> b = randomValues(bSize * bBatches, c.input, generator);
  const std::vector<double> d0 = randomValues(dSize * c.batch, c.output, generator);
  const std::vector<double> bias =
      randomValues(static_cast<size_t>(std::max(m, n)), c.output, generator);
  // DGELU's input: the GELU's input, spread (sd 2) over where its derivative varies most.
  const std::vector<double> auxIn = c.epilogue == MatmulEpilogue::GeluGrad
                                        ? randomValues(dSize * c.batch, c.output, generator, 2.0)
                                        : std::vector<double>();

  // The reference in double.
  auto opA = [&](int64_t p, int64_t i, int64_t l) {
    return a[p * aSize + (c.transposeA ? l * m + i : i * k + l)];
  };
  auto opB = [&](int64_t p, int64_t l, int64_t j) {
    const int64_t q = c.broadcastB ? 0 : p;
    return b[q * bSize + (c.transposeB ? j * k + l : l * n + j)];
  };
  std::vector<double> expectedD(dSize * c.batch), expectedAux(dSize * c.batch);
  std::vector<double> expectedBias;
  for (int64_t p = 0; p < c.batch; ++p)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double sum = 0;
        for (int64_t l = 0; l < k; ++l)
          sum += opA(p, i, l) * opB(p, l, j);
        double value = sum + c.beta * d0[p * dSize + i * n + j];
        if (c.epilogue == MatmulEpilogue::Bias)
          value += bias[j];
        if (c.epilogue == MatmulEpilogue::GeluBias || c.epilogue == MatmulEpilogue::GeluAuxBias) {
          expectedAux[p * dSize + i * n + j] = value + bias[j];
          value = geluTanh(value + bias[j]);
        }
        if (c.epilogue == MatmulEpilogue::GeluGrad)
          value *= geluTanhDerivative(auxIn[p * dSize + i * n + j]);
        expectedD[p * dSize + i * n + j] = value;
      }
  if (c.epilogue == MatmulEpilogue::BiasGradientB)
    for (int64_t j = 0; j < n; ++j) {
      double sum = 0;
      for (int64_t l = 0; l < k; ++l)
        sum += opB(0, l, j);
      expectedBias.push_back(sum);
    }
  if (c.epilogue == MatmulEpilogue::BiasGradientA)
    for (int64_t i = 0; i < m; ++i) {
      double sum = 0;
      for (int64_t l = 0; l < k; ++l)
        sum += opA(0, i, l);
      expectedBias.push_back(sum);
    }

  DeviceAllocation aBuffer = upload(device, a, c.input, "A");
  DeviceAllocation bBuffer = upload(device, b, c.input, "B");
  DeviceAllocation dBuffer = upload(device, d0, c.output, "D");
  DeviceAllocation cBuffer = upload(device, d0, c.output, "C");
  if (c.separateC)
    device.memsetAsync(dBuffer.pointer(), 0xff, dBuffer.bytes());
  DeviceAllocation biasBuffer = upload(device, bias, c.output, "bias");
  // Written by GELU_AUX (NaN bytes until then), read by DGELU.
  DeviceAllocation auxBuffer = c.epilogue == MatmulEpilogue::GeluGrad
                                   ? upload(device, auxIn, c.output, "aux")
                                   : device.allocate(dSize * c.batch * elementBytes(c.output), "aux");
  if (c.epilogue != MatmulEpilogue::GeluGrad)
    device.memsetAsync(auxBuffer.pointer(), 0xff, auxBuffer.bytes());

  MatmulOperands operands;
  operands.a = aBuffer.pointer();
  operands.b = bBuffer.pointer();
  operands.d = dBuffer.pointer();
  operands.c = c.beta == 0.0f ? 0 : c.separateC ? cBuffer.pointer() : dBuffer.pointer();
  operands.beta = c.beta;
  operands.bias = biasBuffer.pointer();
  operands.aux = auxBuffer.pointer();
  Matmul &matmul = sharedMatmul(device);
  matmul.run(desc, operands);

  const std::vector<double> d = download(device, dBuffer.pointer(), dSize * c.batch, c.output);
  const double error = relativeError(d, expectedD);
  const double limit =
      c.epilogue == MatmulEpilogue::GeluBias || c.epilogue == MatmulEpilogue::GeluAuxBias ||
              c.epilogue == MatmulEpilogue::GeluGrad
          // cuBLASLt may evaluate tanh with the hardware approximation.
          ? std::max(tolerance(c.output), 2e-3)
          : tolerance(c.output);
  EXPECT_LT(error, limit) << describeMatmul(desc);
  if (c.epilogue == MatmulEpilogue::GeluBias || c.epilogue == MatmulEpilogue::GeluAuxBias) {
    // Which GELU: print the distance to the erf form too.
    std::vector<double> erfForm(expectedAux.size());
    for (size_t i = 0; i < erfForm.size(); ++i)
      erfForm[i] = geluErf(expectedAux[i]);
    std::printf("%s: error vs gelu_tanh %.3g, vs gelu_erf %.3g\n", c.name.c_str(), error,
                relativeError(d, erfForm));
  }
  if (c.epilogue == MatmulEpilogue::GeluAuxBias)
    EXPECT_LT(relativeError(download(device, auxBuffer.pointer(), dSize * c.batch, c.output),
                            expectedAux),
              tolerance(c.output))
        << "aux";
  if (!expectedBias.empty())
    EXPECT_LT(relativeError(download(device, biasBuffer.pointer(), expectedBias.size(), c.output),
                            expectedBias),
              tolerance(c.output))
        << "bias gradient";

  // The same problem again reuses its cached algorithm.
  const size_t cached = matmul.cachedProblems();
  matmul.run(desc, operands);
  device.synchronize();
  EXPECT_EQ(matmul.cachedProblems(), cached);

  // The algorithm chosen by timing the heuristic's candidates computes the same product.
  // Timing overwrites D, aux and a bias gradient: D and the bias are uploaded again after it.
  Matmul timed(device);
  timed.prepare(desc, operands, MatmulSelection::Timed);
  device.synchronize();
  ASSERT_EQ(timed.cachedProblems(), 1u);
  for (const MatmulChoice &choice : timed.choices()) {
    std::printf("%s: %d candidates timed, chose #%d: %.4f ms against the first's %.4f ms\n",
                c.name.c_str(), choice.candidates, choice.chosen, choice.chosenMs,
                choice.heuristicMs);
    EXPECT_LE(choice.chosenMs, choice.heuristicMs);
  }
  DeviceAllocation dAgain = upload(device, d0, c.output, "D");
  DeviceAllocation biasAgain = upload(device, bias, c.output, "bias");
  device.copyOnDeviceAsync(dBuffer.pointer(), dAgain.pointer(), dAgain.bytes());
  device.copyOnDeviceAsync(biasBuffer.pointer(), biasAgain.pointer(), biasAgain.bytes());
  timed.run(desc, operands);
  EXPECT_EQ(timed.cachedProblems(), 1u);
  EXPECT_LT(relativeError(download(device, dBuffer.pointer(), dSize * c.batch, c.output),
                          expectedD),
            limit)
      << describeMatmul(desc) << " with the timed choice";
  if (!expectedBias.empty())
    EXPECT_LT(relativeError(download(device, biasBuffer.pointer(), expectedBias.size(), c.output),
                            expectedBias),
              tolerance(c.output))
        << "bias gradient with the timed choice";
}

std::vector<MatmulCase> matmulCases() {
  using E = MatmulEpilogue;
  const DType bf16 = DType::BF16, f16 = DType::F16, f32 = DType::F32;
  std::vector<MatmulCase> cases = {
      {"bf16_to_bf16", bf16, bf16},
      {"bf16_to_f32", bf16, f32},
      {"f16_to_f16", f16, f16},
      {"f16_to_f32", f16, f32},
      {"f32_to_f32", f32, f32},
      {"bf16_At", bf16, bf16, true, false},
      {"bf16_Bt", bf16, bf16, false, true},
      {"bf16_At_Bt", bf16, bf16, true, true},
      {"f16_At_Bt", f16, f16, true, true},
      {"f32_At_Bt", f32, f32, true, true},
      {"bf16_bias", bf16, bf16, false, false, E::Bias},
      {"f16_bias", f16, f16, false, false, E::Bias},
      {"bf16_to_f32_bias", bf16, f32, false, false, E::Bias},
      {"bf16_Bt_bias", bf16, bf16, false, true, E::Bias},
      {"bf16_gelu_bias", bf16, bf16, false, false, E::GeluBias},
      {"bf16_to_f32_gelu_bias", bf16, f32, false, false, E::GeluBias},
      {"f16_gelu_bias", f16, f16, false, false, E::GeluBias},
      {"bf16_gelu_aux_bias", bf16, bf16, false, false, E::GeluAuxBias},
      {"bf16_to_f32_gelu_aux_bias", bf16, f32, false, false, E::GeluAuxBias},
      // The weight gradient dW = x^T . dy and its bias gradient sum_k dy.
      {"bf16_to_f32_At_bias_grad_b", bf16, f32, true, false, E::BiasGradientB},
      {"bf16_At_bias_grad_b", bf16, bf16, true, false, E::BiasGradientB},
      {"bf16_to_f32_At_bias_grad_a", bf16, f32, true, false, E::BiasGradientA},
  };
  MatmulCase odd{"f32_odd_shape", f32, f32, true, true};
  odd.m = 33;
  odd.n = 17;
  odd.k = 29;
  cases.push_back(odd);
  MatmulCase oddBf16{"bf16_odd_shape", bf16, bf16};
  oddBf16.m = 33;
  oddBf16.n = 17;
  oddBf16.k = 29;
  cases.push_back(oddBf16);
  MatmulCase batched{"bf16_batch3", bf16, bf16};
  batched.batch = 3;
  cases.push_back(batched);
  MatmulCase broadcast{"bf16_batch3_broadcast_B", bf16, bf16, false, true};
  broadcast.batch = 3;
  broadcast.broadcastB = true;
  cases.push_back(broadcast);
  MatmulCase batchedBias{"f16_batch2_bias", f16, f16, false, false, E::Bias};
  batchedBias.batch = 2;
  cases.push_back(batchedBias);
  MatmulCase batchedAux{"bf16_batch2_gelu_aux_bias", bf16, bf16, false, false, E::GeluAuxBias};
  batchedAux.batch = 2;
  cases.push_back(batchedAux);
  // The MLP's second matmul backward: dh = dy . W2^T times gelu'(the first's pre-activation).
  // (bf16 and f16 only: the compiler fuses DGELU for those types alone.)
  for (auto [name, type] : {std::pair{"bf16_Bt_dgelu", bf16}, std::pair{"f16_Bt_dgelu", f16}})
    cases.push_back({name, type, type, false, true, E::GeluGrad});
  MatmulCase batchedGeluGrad{"bf16_batch2_dgelu", bf16, bf16, false, false, E::GeluGrad};
  batchedGeluGrad.batch = 2;
  cases.push_back(batchedGeluGrad);
  // The attention projection with the residual stream: D = x W + bias + C, C another buffer.
  MatmulCase residual{"bf16_bias_residual", bf16, bf16, false, false, E::Bias};
  residual.beta = 1.0f;
  residual.separateC = true;
  cases.push_back(residual);
  MatmulCase residualF32{"f32_residual", f32, f32};
  residualF32.beta = 1.0f;
  residualF32.separateC = true;
  cases.push_back(residualF32);
  // Gradient accumulation: D += x^T . dy in f32.
  MatmulCase accumulate{"bf16_to_f32_At_accumulate", bf16, f32, true, false};
  accumulate.beta = 1.0f;
  cases.push_back(accumulate);
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Cases, CudaMatmulGpu, ::testing::ValuesIn(matmulCases()), caseName);

TEST(CudaMatmulGpuErrors, InvalidDescriptionsAndMissingPointers) {
  AMPC_REQUIRE_GPU(device);
  Matmul &matmul = sharedMatmul(device);
  DeviceAllocation buffer = device.allocate(1 << 16, "operands");
  MatmulDesc desc;
  desc.m = 8;
  desc.n = 8;
  desc.k = 8;
  desc.inputType = DType::F32;
  desc.outputType = DType::BF16;
  MatmulOperands operands;
  operands.a = operands.b = operands.d = buffer.pointer();
  try {
    matmul.run(desc, operands);
    FAIL() << "an f32 -> bf16 matmul ran";
  } catch (const CudaError &error) {
    EXPECT_EQ(error.kind(), CudaErrorKind::InvalidArgument);
    EXPECT_STREQ(error.what(), "cannot run matmul m=8 n=8 k=8 f32 x f32 -> bf16: cuBLASLt "
                               "has no f32 x f32 -> bf16 matmul with fp32 accumulation "
                               "(outputs are f32 or the input type)");
  }
  desc.outputType = DType::F32;
  desc.epilogue = MatmulEpilogue::Bias;
  try {
    matmul.run(desc, operands);
    FAIL() << "a bias epilogue ran without a bias";
  } catch (const CudaError &error) {
    EXPECT_EQ(error.kind(), CudaErrorKind::InvalidArgument);
  }
}

//===----------------------------------------------------------------------===//
// CUDA graphs
//===----------------------------------------------------------------------===//

const char *const kIncrement = R"(
extern "C" __global__ void ampc_test_increment(float *x, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n)
    x[i] += 1.0f;
}
)";

/// A module with the increment kernel, compiled for this GPU.
std::unique_ptr<Module> incrementModule(Device &device) {
  KernelBinaries binaries;
  const int arch = device.info().computeMajor * 10 + device.info().computeMinor;
  binaries.ptx =
      compileToPtx(kIncrement, "increment.cu", "compute_" + std::to_string(std::min(arch, 90)));
  binaries.ptxArch = std::min(arch, 90);
  return std::make_unique<Module>(device, binaries, "the increment kernel");
}

TEST(CudaGraphGpu, CapturedStepReplaysTheSameResults) {
  AMPC_REQUIRE_GPU(device);
  if (!device.info().supportsBf16())
    GTEST_SKIP() << "no bf16 on " << device.info().summary();
  std::unique_ptr<Module> module = incrementModule(device);
  Kernel &increment = module->kernel("ampc_test_increment");

  // The step: two increments of x, then D = A . B (bf16 in, f32 out).
  const int count = 4096;
  DeviceAllocation x = device.allocate(count * 4, "x");
  device.memsetAsync(x.pointer(), 0, x.bytes());
  MatmulDesc desc;
  desc.m = 64;
  desc.n = 96;
  desc.k = 128;
  desc.outputType = DType::F32;
  std::mt19937 generator(7);
  DeviceAllocation a =
      upload(device, randomValues(desc.m * desc.k, DType::BF16, generator), DType::BF16, "A");
  DeviceAllocation b =
      upload(device, randomValues(desc.k * desc.n, DType::BF16, generator), DType::BF16, "B");
  DeviceAllocation eagerD = device.allocate(desc.m * desc.n * 4, "D eager");
  DeviceAllocation graphD = device.allocate(desc.m * desc.n * 4, "D graph");
  Matmul &matmul = sharedMatmul(device);
  MatmulOperands eager{a.pointer(), b.pointer(), 0, eagerD.pointer()};
  matmul.run(desc, eager);
  device.memsetAsync(graphD.pointer(), 0xff, graphD.bytes());

  CUdeviceptr xPointer = x.pointer();
  int n = count;
  std::vector<std::string> warnings;
  GraphCapture graph(device, "the test step",
                     [&](const std::string &line) { warnings.push_back(line); });
  int recorded = 0;
  auto step = [&] {
    ++recorded;
    const LaunchConfig config = LaunchConfig::linear((count + 255) / 256, 256);
    increment.launch(config, {&xPointer, &n});
    increment.launch(config, {&xPointer, &n});
    matmul.run(desc, {a.pointer(), b.pointer(), 0, graphD.pointer()});
  };
  EXPECT_EQ(graph.mode(), GraphCapture::Mode::WarmingUp);
  graph.run(step);
  EXPECT_EQ(graph.mode(), GraphCapture::Mode::Capturing);
  for (int run = 1; run < 5; ++run)
    graph.run(step);
  EXPECT_EQ(graph.mode(), GraphCapture::Mode::Replaying);
  EXPECT_EQ(recorded, 2) << "recorded once to warm up and once to capture";
  EXPECT_TRUE(warnings.empty()) << warnings.front();
  EXPECT_EQ(graph.fallbackReason(), "");

  // Five steps of two increments each, and the eager matmul's results (the
  // same cached algorithm: bit-identical unless it reduces with atomics).
  const std::vector<double> values = download(device, xPointer, count, DType::F32);
  for (int i = 0; i < count; ++i)
    ASSERT_EQ(values[i], 10.0) << i;
  const size_t elements = desc.m * desc.n;
  const std::vector<double> expected = download(device, eagerD.pointer(), elements, DType::F32);
  const std::vector<double> actual = download(device, graphD.pointer(), elements, DType::F32);
  EXPECT_LT(relativeError(actual, expected), 1e-6);
  std::printf("graph vs eager matmul: %s\n", actual == expected ? "bit-identical" : "within 1e-6");
}

TEST(CudaGraphGpu, UncapturableStepRunsEagerlyAndSaysWhyOnce) {
  AMPC_REQUIRE_GPU(device);
  std::unique_ptr<Module> module = incrementModule(device);
  Kernel &increment = module->kernel("ampc_test_increment");
  const int count = 1000;
  DeviceAllocation x = device.allocate(count * 4, "x");
  device.memsetAsync(x.pointer(), 0, x.bytes());
  CUdeviceptr xPointer = x.pointer();
  int n = count;
  std::vector<std::string> warnings;
  GraphCapture graph(device, "the test step",
                     [&](const std::string &line) { warnings.push_back(line); });
  // Synchronising a stream is not allowed while it is being captured.
  auto step = [&] {
    increment.launch(LaunchConfig::linear((count + 255) / 256, 256), {&xPointer, &n});
    device.synchronize("the test step's synchronisation");
  };
  for (int run = 0; run < 4; ++run)
    graph.run(step);
  EXPECT_EQ(graph.mode(), GraphCapture::Mode::Eager);
  ASSERT_EQ(warnings.size(), 1u);
  std::printf("%s\n", warnings[0].c_str());
  EXPECT_EQ(warnings[0].rfind("warning: cannot capture the test step into a "
                              "CUDA graph (",
                              0),
            0u)
      << warnings[0];
  EXPECT_NE(graph.fallbackReason().find("cuStreamSynchronize"), std::string::npos)
      << graph.fallbackReason();
  // Every run incremented exactly once: the failed capture ran no work,
  // and the step was then run eagerly.
  const std::vector<double> values = download(device, xPointer, count, DType::F32);
  for (int i = 0; i < count; ++i)
    ASSERT_EQ(values[i], 4.0) << i;
}

} // namespace
