//===- KernelSupportGpuTest.cpp - The generated kernels' helpers on a GPU -===//
//
// On a GPU: the conversions between f32 and the 16-bit storage types that every generated
// kernel includes (runtime/cuda/device/KernelSupport.h), which on the device are the hardware's
// cvt instructions, give the bits of runtime/numerics/Float16.h (the CPU backend's rounding) for
// every bf16 and f16 bit pattern and for f32 values around every rounding boundary (halfway
// cases of both parities, subnormals, overflow to infinity); NaN stays NaN. expForStorage16
// stays within its documented error of exp. Skips without a driver or a GPU.
//
//===----------------------------------------------------------------------===//

#include "AttentionReference.h"
#include "CudaGpuTestUtils.h"

#include "runtime/cuda/Memory.h"
#include "runtime/cuda/Module.h"
#include "runtime/cuda/Nvrtc.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace {

using namespace ampc::cuda;
using namespace ampc::cuda::testing;
namespace numerics = ampc::numerics;

const char *const kConversionKernels = R"(
#include "runtime/cuda/device/KernelSupport.h"
using namespace ampc::device;

// f32 -> bf16 and f16 bits, their f32 values back (roundAs), and e^x as expForStorage16.
extern "C" __global__ void ampc_test_from_float(const float *x, unsigned short *bf16Bits,
                                                unsigned short *f16Bits, float *bf16Rounded,
                                                float *f16Rounded, float *exp16, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    bf16Bits[i] = fromFloat<bfloat16>(x[i]).bits;
    f16Bits[i] = fromFloat<half16>(x[i]).bits;
    bf16Rounded[i] = roundAs<bfloat16>(x[i]);
    f16Rounded[i] = roundAs<half16>(x[i]);
    exp16[i] = expForStorage16(x[i]);
  }
}

// Every 16-bit pattern as bf16 and as f16, to f32.
extern "C" __global__ void ampc_test_to_float(float *fromBf16, float *fromF16) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < 65536) {
    fromBf16[i] = toFloat(bfloat16{static_cast<unsigned short>(i)});
    fromF16[i] = toFloat(half16{static_cast<unsigned short>(i)});
  }
}
)";

const KernelBinaries &conversionBinaries() {
  static const KernelBinaries binaries = [] {
    std::vector<std::string> options = cudaIncludeOptions();
    options.push_back("-I" + ampc::test::kernelIncludeDirectory());
    KernelBinaries compiled;
    compiled.cubins.push_back(
        {80, compileToCubin(kConversionKernels, "conversions.cu", "sm_80", options)});
    compiled.cubins.push_back(
        {90, compileToCubin(kConversionKernels, "conversions.cu", "sm_90", options)});
    compiled.ptx = compileToPtx(kConversionKernels, "conversions.cu", "compute_80", options);
    compiled.ptxArch = 80;
    return compiled;
  }();
  return binaries;
}

template <typename T> std::vector<T> downloadRaw(Device &device, CUdeviceptr pointer, size_t n) {
  std::vector<T> values(n);
  device.copyToHost(values.data(), pointer, n * sizeof(T));
  return values;
}

TEST(KernelSupportGpu, ConvertsAsTheCpuBackend) {
  AMPC_REQUIRE_GPU(device);
  if (!device.info().supportsBf16())
    GTEST_SKIP() << "the generated kernels need sm_80 or newer";
  Module module(device, conversionBinaries(), "conversions");

  // Every high half with low halves at and around bf16's halfway point (0x8000) and f16's
  // (0x1000, bit 12; 0x3000 has the kept lsb set), then random values.
  std::vector<float> x;
  for (uint32_t high = 0; high < 65536; ++high)
    for (uint32_t low : {0x0000u, 0x0001u, 0x0fffu, 0x1000u, 0x1001u, 0x3000u, 0x7fffu, 0x8000u,
                         0x8001u, 0xffffu})
      x.push_back(numerics::bitsToFloat(high << 16 | low));
  std::mt19937 generator(3);
  std::uniform_int_distribution<uint32_t> anyBits;
  for (int i = 0; i < 1000000; ++i)
    x.push_back(numerics::bitsToFloat(anyBits(generator)));
  const size_t n = x.size();

  DeviceAllocation input = device.allocate(n * 4, "x");
  device.copyToDevice(input.pointer(), x.data(), n * 4);
  DeviceAllocation bf16Bits = device.allocate(n * 2, "bf16 bits");
  DeviceAllocation f16Bits = device.allocate(n * 2, "f16 bits");
  DeviceAllocation bf16Rounded = device.allocate(n * 4, "bf16 rounded");
  DeviceAllocation f16Rounded = device.allocate(n * 4, "f16 rounded");
  DeviceAllocation exp16 = device.allocate(n * 4, "exp");
  CUdeviceptr pointers[] = {input.pointer(), bf16Bits.pointer(), f16Bits.pointer(),
                            bf16Rounded.pointer(), f16Rounded.pointer(), exp16.pointer()};
  int count = static_cast<int>(n);
  module.kernel("ampc_test_from_float")
      .launch(LaunchConfig::linear(1024, 256), {&pointers[0], &pointers[1], &pointers[2],
                                                &pointers[3], &pointers[4], &pointers[5], &count});
  const auto gotBf16 = downloadRaw<uint16_t>(device, bf16Bits.pointer(), n);
  const auto gotF16 = downloadRaw<uint16_t>(device, f16Bits.pointer(), n);
  const auto gotBf16Rounded = downloadRaw<float>(device, bf16Rounded.pointer(), n);
  const auto gotF16Rounded = downloadRaw<float>(device, f16Rounded.pointer(), n);
  const auto gotExp = downloadRaw<float>(device, exp16.pointer(), n);

  size_t wrong = 0, expWrong = 0;
  for (size_t i = 0; i < n; ++i) {
    const float value = x[i];
    if (std::isnan(value)) {
      // NaN payloads differ (the hardware writes the canonical NaN); NaN must stay NaN.
      EXPECT_TRUE(std::isnan(numerics::bf16BitsToFloat(gotBf16[i])) &&
                  std::isnan(numerics::f16BitsToFloat(gotF16[i])) &&
                  std::isnan(gotBf16Rounded[i]) && std::isnan(gotF16Rounded[i]))
          << "NaN " << std::hex << numerics::floatToBits(value);
      continue;
    }
    const bool same = gotBf16[i] == numerics::floatToBF16Bits(value) &&
                      gotF16[i] == numerics::floatToF16Bits(value) &&
                      numerics::floatToBits(gotBf16Rounded[i]) == numerics::floatToBits(numerics::roundToBF16(value)) &&
                      numerics::floatToBits(gotF16Rounded[i]) == numerics::floatToBits(numerics::roundToF16(value));
    if (!same && wrong++ < 5)
      ADD_FAILURE() << "f32 0x" << std::hex << numerics::floatToBits(value) << ": bf16 0x" << gotBf16[i]
                    << " (CPU 0x" << numerics::floatToBF16Bits(value) << "), f16 0x" << gotF16[i]
                    << " (CPU 0x" << numerics::floatToF16Bits(value) << ")";
    // e^x for x <= 0 (what the kernels exponentiate): relative error within 2^-21 plus
    // |x| 2^-23, the product's rounding; underflow to 0 past e^-87 within 2^-126 absolute.
    if (value <= 0.0f && value > -100.0f) {
      const double expected = std::exp(static_cast<double>(value));
      const double error = std::abs(gotExp[i] - expected);
      if (!(error <= expected * (std::ldexp(1.0, -21) + -value * std::ldexp(1.0, -23)) +
                         std::ldexp(1.0, -126)) &&
          expWrong++ < 5)
        ADD_FAILURE() << "expForStorage16(" << value << ") = " << gotExp[i] << ", e^x "
                      << expected;
    }
  }
  EXPECT_EQ(wrong, 0u) << "conversions that differ from the CPU backend's";
  EXPECT_EQ(expWrong, 0u) << "exponentials outside the error bound";

  DeviceAllocation fromBf16 = device.allocate(65536 * 4, "from bf16");
  DeviceAllocation fromF16 = device.allocate(65536 * 4, "from f16");
  CUdeviceptr fromBf16Pointer = fromBf16.pointer(), fromF16Pointer = fromF16.pointer();
  module.kernel("ampc_test_to_float")
      .launch(LaunchConfig::linear(256, 256), {&fromBf16Pointer, &fromF16Pointer});
  const auto wideBf16 = downloadRaw<float>(device, fromBf16Pointer, 65536);
  const auto wideF16 = downloadRaw<float>(device, fromF16Pointer, 65536);
  for (uint32_t bits = 0; bits < 65536; ++bits) {
    const float bf16 = numerics::bf16BitsToFloat(static_cast<uint16_t>(bits));
    const float f16 = numerics::f16BitsToFloat(static_cast<uint16_t>(bits));
    if (std::isnan(bf16))
      EXPECT_TRUE(std::isnan(wideBf16[bits])) << std::hex << bits;
    else
      ASSERT_EQ(numerics::floatToBits(wideBf16[bits]), numerics::floatToBits(bf16)) << "bf16 0x" << std::hex << bits;
    if (std::isnan(f16))
      EXPECT_TRUE(std::isnan(wideF16[bits])) << std::hex << bits;
    else
      ASSERT_EQ(numerics::floatToBits(wideF16[bits]), numerics::floatToBits(f16)) << "f16 0x" << std::hex << bits;
  }
}

} // namespace
