//===- CudaGpuTestUtils.h - Shared pieces of the CUDA device-layer GPU tests
//===//
//
// The GPU tests of runtime/cuda open one Device for the whole test binary
// and skip every test, with the reason, when there is no driver or no GPU
// (CI and the development machines). Values travel as doubles on the host
// and are encoded to and decoded from bf16/f16/f32 bytes with the runtime's
// own rounding (runtime/numerics/Float16.h).
//
//===----------------------------------------------------------------------===//

#ifndef AMPC_TEST_UNIT_RUNTIME_CUDAGPUTESTUTILS_H
#define AMPC_TEST_UNIT_RUNTIME_CUDAGPUTESTUTILS_H

#include "runtime/cuda/Device.h"
#include "runtime/numerics/Float16.h"
#include "runtime/plan/Plan.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

namespace ampc::cuda::testing {

/// The device every GPU test uses, opened on first use; null when there is
/// none, with the reason in gpuSkipReason(). Never closed: it lives until
/// the process exits, so no test depends on teardown order.
struct GpuState {
  Device *device = nullptr;
  std::string skipReason;
};

inline GpuState &gpuState() {
  static GpuState state = [] {
    GpuState opened;
    try {
      opened.device = new Device();
    } catch (const CudaError &error) {
      if (error.kind() != CudaErrorKind::NoDriver && error.kind() != CudaErrorKind::NoDevice)
        throw;
      opened.skipReason = error.what();
    }
    return opened;
  }();
  return state;
}

/// Skips the test (with the reason) without a GPU; else binds `device`.
#define AMPC_REQUIRE_GPU(device)                                                                   \
  if (!::ampc::cuda::testing::gpuState().device)                                                   \
    GTEST_SKIP() << ::ampc::cuda::testing::gpuState().skipReason;                                  \
  ::ampc::cuda::Device &device = *::ampc::cuda::testing::gpuState().device

inline size_t elementBytes(plan::DType type) { return type == plan::DType::F32 ? 4 : 2; }

/// \p values as \p type bytes (rounded to nearest even).
inline std::vector<char> encode(const std::vector<double> &values, plan::DType type) {
  std::vector<char> bytes(values.size() * elementBytes(type));
  for (size_t i = 0; i < values.size(); ++i) {
    const float value = static_cast<float>(values[i]);
    if (type == plan::DType::F32) {
      std::memcpy(bytes.data() + 4 * i, &value, 4);
    } else {
      const uint16_t bits = type == plan::DType::BF16 ? numerics::floatToBF16Bits(value)
                                                      : numerics::floatToF16Bits(value);
      std::memcpy(bytes.data() + 2 * i, &bits, 2);
    }
  }
  return bytes;
}

/// \p bytes of \p type as doubles.
inline std::vector<double> decode(const std::vector<char> &bytes, plan::DType type) {
  std::vector<double> values(bytes.size() / elementBytes(type));
  for (size_t i = 0; i < values.size(); ++i) {
    if (type == plan::DType::F32) {
      float value;
      std::memcpy(&value, bytes.data() + 4 * i, 4);
      values[i] = value;
    } else {
      uint16_t bits;
      std::memcpy(&bits, bytes.data() + 2 * i, 2);
      values[i] = type == plan::DType::BF16 ? numerics::bf16BitsToFloat(bits)
                                            : numerics::f16BitsToFloat(bits);
    }
  }
  return values;
}

/// N(0, scale^2) values already rounded to \p type, so the GPU and the
/// reference see the same inputs.
inline std::vector<double> randomValues(size_t count, plan::DType type, std::mt19937 &generator,
                                        double scale = 1.0) {
  std::normal_distribution<double> normal(0.0, scale);
  std::vector<double> values(count);
  for (double &value : values)
    value = normal(generator);
  return decode(encode(values, type), type);
}

/// ||actual - expected|| / ||expected|| (NaN when any element is NaN).
inline double relativeError(const std::vector<double> &actual,
                            const std::vector<double> &expected) {
  double difference = 0, reference = 0;
  for (size_t i = 0; i < expected.size(); ++i) {
    difference += (actual[i] - expected[i]) * (actual[i] - expected[i]);
    reference += expected[i] * expected[i];
  }
  return std::sqrt(difference / reference);
}

/// A device buffer holding \p values as \p type.
inline DeviceAllocation upload(Device &device, const std::vector<double> &values, plan::DType type,
                               const std::string &what) {
  const std::vector<char> bytes = encode(values, type);
  DeviceAllocation buffer = device.allocate(bytes.size(), what);
  device.copyToDevice(buffer.pointer(), bytes.data(), bytes.size());
  return buffer;
}

/// \p count elements of \p type at \p pointer, as doubles.
inline std::vector<double> download(Device &device, CUdeviceptr pointer, size_t count,
                                    plan::DType type) {
  std::vector<char> bytes(count * elementBytes(type));
  device.copyToHost(bytes.data(), pointer, bytes.size());
  return decode(bytes, type);
}

} // namespace ampc::cuda::testing

#endif // AMPC_TEST_UNIT_RUNTIME_CUDAGPUTESTUTILS_H
