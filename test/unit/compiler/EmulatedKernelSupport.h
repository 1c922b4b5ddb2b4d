//===- EmulatedKernelSupport.h - Arguments and references of emulated kernels -*- C++ -*-===//
//
// What the emulated-kernel tests share: a generated kernel's arguments as host memory
// (Arguments), element reads and writes in a kernel's dtypes, random fills, the element-wise
// comparison with a reference in double, and finding a kernel of a model by the op it computes.
// The kernels themselves are compiled for the host by HostKernel.h.
//
//===----------------------------------------------------------------------===//

#ifndef AMPC_TEST_UNIT_COMPILER_EMULATEDKERNELSUPPORT_H
#define AMPC_TEST_UNIT_COMPILER_EMULATEDKERNELSUPPORT_H

#include "HostKernel.h"
#include "compiler/cuda/DeviceProgramBuilder.h"
#include "runtime/numerics/Float16.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace ampc::test::emulated {

using test::HostKernel;

/// A temporary directory for the emulated kernels, removed with this object.
struct TemporaryDirectory : test::TemporaryDirectory {
  TemporaryDirectory() : test::TemporaryDirectory("ampc_emulated_kernels") {}
};

inline size_t elementBytes(const std::string &type) {
  return type == "i64" || type == "u64" ? 8 : type == "bf16" || type == "f16" ? 2 : 4;
}

inline double readElement(const std::vector<char> &bytes, const std::string &type, size_t i) {
  if (type == "f32") {
    float value;
    std::memcpy(&value, bytes.data() + 4 * i, 4);
    return value;
  }
  if (type == "bf16" || type == "f16") {
    uint16_t bits;
    std::memcpy(&bits, bytes.data() + 2 * i, 2);
    return type == "bf16" ? numerics::bf16BitsToFloat(bits) : numerics::f16BitsToFloat(bits);
  }
  if (type == "i32") {
    int32_t value;
    std::memcpy(&value, bytes.data() + 4 * i, 4);
    return value;
  }
  int64_t value;
  std::memcpy(&value, bytes.data() + 8 * i, 8);
  return static_cast<double>(value);
}

inline void writeElement(std::vector<char> &bytes, const std::string &type, size_t i,
                         double value) {
  if (type == "f32") {
    const float f = static_cast<float>(value);
    std::memcpy(bytes.data() + 4 * i, &f, 4);
  } else if (type == "bf16" || type == "f16") {
    const float f = static_cast<float>(value);
    const uint16_t bits =
        type == "bf16" ? numerics::floatToBF16Bits(f) : numerics::floatToF16Bits(f);
    std::memcpy(bytes.data() + 2 * i, &bits, 2);
  } else if (type == "i32") {
    const int32_t v = static_cast<int32_t>(value);
    std::memcpy(bytes.data() + 4 * i, &v, 4);
  } else {
    const int64_t v = static_cast<int64_t>(value);
    std::memcpy(bytes.data() + 8 * i, &v, 8);
  }
}

/// A generated kernel's arguments as host memory: one buffer per tensor, scratch, table or
/// error record argument (inputs filled by the test, outputs poisoned with NaN bytes), and the
/// scalar sizes from its launch.
struct Arguments {
  const GeneratedKernel &kernel;
  std::map<std::string, std::vector<char>> buffers; ///< by parameter name
  std::vector<void *> pointers;                     ///< one per parameter, as cuLaunchKernel's
  std::vector<void *> addresses;
  std::vector<long long> scalars;

  explicit Arguments(const GeneratedKernel &k) : kernel(k) {
    for (const KernelParam &param : kernel.params) {
      if (param.role == KernelParam::Role::Scalar)
        continue;
      int64_t elements = 1;
      for (int64_t size : param.shape)
        elements *= size;
      const size_t bytes = param.role == KernelParam::Role::ErrorRecord
                               ? 32
                               : static_cast<size_t>(elements) * elementBytes(param.elementType);
      buffers[param.name] = std::vector<char>(std::max<size_t>(bytes, 16), '\xff');
    }
  }

  std::vector<char> &operator[](const std::string &name) { return buffers.at(name); }
  const KernelParam &param(const std::string &name) const {
    for (const KernelParam &param : kernel.params)
      if (param.name == name)
        return param;
    throw std::runtime_error("no parameter " + name + " in " + kernel.name);
  }
  /// The parameter whose binding is \p value ("@x", "%3", ...).
  const KernelParam &bound(const std::string &value) const {
    for (const KernelParam &param : kernel.params)
      if (param.value == value)
        return param;
    throw std::runtime_error("no parameter bound to " + value + " in " + kernel.name);
  }

  std::vector<void *> &bind() {
    const KernelLaunch &launch = kernel.launch;
    pointers.clear();
    addresses.assign(kernel.params.size(), nullptr);
    scalars.assign(kernel.params.size(), 0);
    for (size_t i = 0; i < kernel.params.size(); ++i) {
      const KernelParam &param = kernel.params[i];
      if (param.role != KernelParam::Role::Scalar) {
        addresses[i] = buffers.at(param.name).data();
        pointers.push_back(&addresses[i]);
        continue;
      }
      long long value = 0;
      if (param.value == "elements")
        value = launch.elements;
      else if (param.value == "rows")
        value = launch.rows;
      else if (param.value == "row_length")
        value = launch.rowLength;
      scalars[i] = value;
      pointers.push_back(&scalars[i]);
    }
    return pointers;
  }
};

/// Fills \p bytes (a tensor of \p type) with N(0, 1) values rounded to the type; returns them.
inline std::vector<double> fillRandom(std::vector<char> &bytes, const std::string &type,
                                      std::mt19937 &generator, double mean = 0) {
  std::normal_distribution<double> normal(mean, 1.0);
  const size_t count = bytes.size() / elementBytes(type);
  std::vector<double> values(count);
  for (size_t i = 0; i < count; ++i) {
    writeElement(bytes, type, i, normal(generator));
    values[i] = readElement(bytes, type, i);
  }
  return values;
}

inline std::vector<double> readAll(const std::vector<char> &bytes, const std::string &type,
                                   size_t count) {
  std::vector<double> values(count);
  for (size_t i = 0; i < count; ++i)
    values[i] = readElement(bytes, type, i);
  return values;
}

/// Expects every element of \p actual within |actual - expected| <= relative |expected| +
/// absolute of \p expected; reports the first few that are not and how many.
inline void expectElementsNear(const std::vector<double> &actual,
                               const std::vector<double> &expected, double relative,
                               double absolute, const std::string &what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  size_t wrong = 0;
  for (size_t i = 0; i < expected.size(); ++i) {
    const double error = std::abs(actual[i] - expected[i]);
    if (!(error <= relative * std::abs(expected[i]) + absolute)) {
      if (wrong < 5)
        ADD_FAILURE() << what << " element " << i << ": " << actual[i] << ", expected "
                      << expected[i];
      ++wrong;
    }
  }
  EXPECT_EQ(wrong, 0u) << what << ": elements outside the tolerance";
}

/// The root mean square of \p values.
inline double rms(const std::vector<double> &values) {
  double squares = 0;
  for (double value : values)
    squares += value * value;
  return values.empty() ? 0 : std::sqrt(squares / values.size());
}

/// A bf16/f16/f32 value's relative rounding step: one unit in the last place of the stored type.
inline double storedStep(const std::string &type) {
  return type == "bf16" ? 1.0 / 128 : type == "f16" ? 1.0 / 1024 : 1e-5;
}

/// Whether a row kernel holds its row in registers, read in 16-byte packs (the packed walk).
inline bool readsPacks(const GeneratedKernel &kernel) {
  return kernel.source.find("const Pack<") != std::string::npos;
}

inline const GeneratedKernel *kernelWith(const std::vector<GeneratedKernel> &kernels,
                                         KernelLaunch::Space space, const std::string &op) {
  for (const GeneratedKernel &kernel : kernels)
    if (kernel.launch.space == space)
      for (const std::string &fused : kernel.fusedOps)
        if (fused.rfind(op + " at ", 0) == 0)
          return &kernel;
  return nullptr;
}

/// \p value as it is stored in \p type.
inline double storedAs(const std::string &type, double value) {
  std::vector<char> bytes(8);
  writeElement(bytes, type, 0, value);
  return readElement(bytes, type, 0);
}

} // namespace ampc::test::emulated

#endif // AMPC_TEST_UNIT_COMPILER_EMULATEDKERNELSUPPORT_H
