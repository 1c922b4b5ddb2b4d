//===- NvrtcTest.cpp - Device-side numerics headers compile under NVRTC ---===//
//
// Generated kernels include runtime/numerics/Float16.h, Philox.h and
// LossScale.h; this
// proves those headers compile as device code for the GPUs ampc targets
// (sm_80, sm_90, and PTX for newer ones). Nothing is launched: no GPU needed.
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/Nvrtc.h"

#include <gtest/gtest.h>

using namespace ampc::cuda;

namespace {

/// A kernel that calls every device-usable numerics function.
const char *kProbeKernel = R"(
#include <cuda_bf16.h>
#include "runtime/numerics/Float16.h"
#include "runtime/numerics/Philox.h"
#include "runtime/numerics/LossScale.h"

namespace an = ampc::numerics;

// The loss scale is updated on the device, with no host synchronisation.
extern "C" __global__ void ampc_loss_scale_probe(an::LossScaleState *state,
                                                 const int *foundNonFinite,
                                                 int *stepApplied) {
  an::LossScaleConfig config;
  config.minScale = 1.0f;
  stepApplied[0] = an::updateLossScale(*state, config, *foundNonFinite != 0).stepApplied;
}

extern "C" __global__ void ampc_numerics_probe(
    const float *x, unsigned short *bf16, unsigned short *f16,
    unsigned short *bf16FromDouble, unsigned short *f16FromDouble,
    float *roundTrip, float *uniform, double *normal, unsigned int *hash,
    unsigned long long seed, unsigned long long step, unsigned int n) {
  const unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n)
    return;
  bf16[i] = an::floatToBF16Bits(x[i]);
  f16[i] = an::floatToF16Bits(x[i]);
  bf16FromDouble[i] = an::doubleToBF16Bits(static_cast<double>(x[i]) / 3.0);
  f16FromDouble[i] = an::doubleToF16Bits(static_cast<double>(x[i]) / 3.0);
  roundTrip[i] = an::roundToBF16(x[i]) + an::roundToF16(x[i]) +
                 an::bf16BitsToFloat(bf16[i]) + an::f16BitsToFloat(f16[i]) +
                 __bfloat162float(__float2bfloat16_rn(x[i]));
  uniform[i] = an::uniform01(seed, step, 7u, i);
  normal[i] = an::standardNormal(seed, step, 7u, i) +
              an::roundToBF16(static_cast<double>(x[i]));
  const an::PhiloxBlock block = an::philox4x32x10(
      an::PhiloxBlock{{i, 0u, 0u, 0u}}, an::PhiloxKey{{1u, 2u}});
  const char name[] = "blocks.0.w";
  hash[i] = block.word[3] ^ an::fnv1a32(name, sizeof(name) - 1);
}
)";

std::vector<std::string> probeOptions() {
  std::vector<std::string> options = cudaIncludeOptions();
  options.push_back("-I" AMPC_REPO_ROOT);
  return options;
}

TEST(Nvrtc, NumericsHeadersCompileForSm90) {
  std::vector<char> cubin =
      compileToCubin(kProbeKernel, "numerics_probe.cu", "sm_90", probeOptions());
  ASSERT_GT(cubin.size(), 4u);
  EXPECT_EQ(std::string(cubin.data(), 4), "\x7f"
                                          "ELF");
}

TEST(Nvrtc, NumericsHeadersCompileForSm80) {
  std::vector<char> cubin =
      compileToCubin(kProbeKernel, "numerics_probe.cu", "sm_80", probeOptions());
  ASSERT_GT(cubin.size(), 4u);
  EXPECT_EQ(std::string(cubin.data(), 4), "\x7f"
                                          "ELF");
}

TEST(Nvrtc, NumericsHeadersCompileToPtx) {
  std::string ptx = compileToPtx(kProbeKernel, "numerics_probe.cu", "compute_90", probeOptions());
  EXPECT_NE(ptx.find(".entry ampc_numerics_probe"), std::string::npos);
  EXPECT_NE(ptx.find(".entry ampc_loss_scale_probe"), std::string::npos);
}

TEST(Nvrtc, ErrorCarriesLogAndSource) {
  const std::string source = "extern \"C\" __global__ void broken() { undeclared_name = 1; }\n";
  try {
    compileToCubin(source, "broken.cu", "sm_90");
    FAIL() << "expected NvrtcError";
  } catch (const NvrtcError &error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("broken.cu"), std::string::npos) << message;
    EXPECT_NE(message.find("undeclared_name"), std::string::npos) << message;
    EXPECT_NE(error.log().find("undeclared_name"), std::string::npos);
    EXPECT_EQ(error.source(), source);
  }
}

TEST(Nvrtc, ReportsVersion) {
  EXPECT_FALSE(nvrtcVersion().empty());
  EXPECT_NE(nvrtcVersion(), "0.0");
}

} // namespace
