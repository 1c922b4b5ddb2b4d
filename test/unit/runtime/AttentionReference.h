//===- AttentionReference.h - Inputs and references for attention kernel tests -===//
//
// What the flash-attention kernel tests share, whether the kernels run on a GPU
// (FlashAttentionGpuTest) or in the device emulator (FlashAttentionEmulatedTest): element
// encodings, random inputs already rounded to the storage type, the relative-norm error, and
// the expected outputs (o, dq, dk, dv from the CPU backend's kernels in double, and the
// log-sum-exp), and
// where the GPU binaries find the kernel headers.
//
//===----------------------------------------------------------------------===//

#ifndef AMPC_TEST_UNIT_RUNTIME_ATTENTIONREFERENCE_H
#define AMPC_TEST_UNIT_RUNTIME_ATTENTIONREFERENCE_H

#include "runtime/cpu/Kernels.h"
#include "runtime/numerics/Float16.h"

#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace ampc::test {

enum class Storage { Bf16, F16, F32 };

inline const char *storageName(Storage storage) {
  switch (storage) {
  case Storage::Bf16:
    return "bf16";
  case Storage::F16:
    return "f16";
  case Storage::F32:
    return "f32";
  }
  return "?";
}

inline size_t elementBytes(Storage storage) { return storage == Storage::F32 ? 4 : 2; }

/// The bytes of \p values in \p storage (rounded to nearest even).
inline std::vector<char> encode(const std::vector<double> &values, Storage storage) {
  std::vector<char> bytes(values.size() * elementBytes(storage));
  for (size_t i = 0; i < values.size(); ++i) {
    const float value = static_cast<float>(values[i]);
    if (storage == Storage::F32) {
      std::memcpy(bytes.data() + 4 * i, &value, 4);
    } else {
      const uint16_t bits = storage == Storage::Bf16 ? numerics::floatToBF16Bits(value)
                                                     : numerics::floatToF16Bits(value);
      std::memcpy(bytes.data() + 2 * i, &bits, 2);
    }
  }
  return bytes;
}

/// The values of \p bytes in \p storage, widened to double.
inline std::vector<double> decode(const std::vector<char> &bytes, Storage storage) {
  std::vector<double> values(bytes.size() / elementBytes(storage));
  for (size_t i = 0; i < values.size(); ++i) {
    if (storage == Storage::F32) {
      float value;
      std::memcpy(&value, bytes.data() + 4 * i, 4);
      values[i] = value;
    } else {
      uint16_t bits;
      std::memcpy(&bits, bytes.data() + 2 * i, 2);
      values[i] = storage == Storage::Bf16 ? numerics::bf16BitsToFloat(bits)
                                           : numerics::f16BitsToFloat(bits);
    }
  }
  return values;
}

/// Random N(0, 1) values already rounded to \p storage, so the kernels and the reference see
/// the same inputs.
inline std::vector<double> randomInputs(size_t count, Storage storage, std::mt19937 &generator) {
  std::normal_distribution<double> normal(0.0, 1.0);
  std::vector<double> values(count);
  for (double &value : values)
    value = normal(generator);
  return decode(encode(values, storage), storage);
}

/// ||actual - expected|| / ||expected|| (||actual - expected|| when expected is all zeros; NaN
/// if any element is NaN).
inline double relativeError(const std::vector<double> &actual,
                            const std::vector<double> &expected) {
  double difference = 0, reference = 0;
  for (size_t i = 0; i < expected.size(); ++i) {
    difference += (actual[i] - expected[i]) * (actual[i] - expected[i]);
    reference += expected[i] * expected[i];
  }
  return reference == 0 ? std::sqrt(difference) : std::sqrt(difference / reference);
}

/// lse[bh, t] = log sum_s exp(scale q[t] . k[s]) over the visible keys, for \p slices slices
/// of q [T, D] and k [S, D].
inline std::vector<double> referenceLse(const std::vector<double> &q, const std::vector<double> &k,
                                        int slices, int queries, int keys, int headDim,
                                        double scale, bool causal) {
  std::vector<double> lse(static_cast<size_t>(slices) * queries);
  std::vector<double> scores(keys);
  for (int bh = 0; bh < slices; ++bh)
    for (int t = 0; t < queries; ++t) {
      const int visible = causal ? std::min(keys, t + (keys - queries) + 1) : keys;
      double maximum = -std::numeric_limits<double>::infinity();
      for (int s = 0; s < visible; ++s) {
        double dot = 0;
        for (int d = 0; d < headDim; ++d)
          dot += q[(static_cast<size_t>(bh) * queries + t) * headDim + d] *
                 k[(static_cast<size_t>(bh) * keys + s) * headDim + d];
        scores[s] = dot * scale;
        maximum = std::max(maximum, scores[s]);
      }
      double sum = 0;
      for (int s = 0; s < visible; ++s)
        sum += std::exp(scores[s] - maximum);
      lse[static_cast<size_t>(bh) * queries + t] = maximum + std::log(sum);
    }
  return lse;
}

/// What attention and its gradient must give for one set of inputs.
struct AttentionExpected {
  std::vector<double> o, lse, dq, dk, dv;
};

/// The CPU backend's attention and attention gradient in double (and referenceLse) for
/// \p slices slices of q, dy [T, D] and k, v [S, D]: the reference every kernel test compares
/// with.
inline AttentionExpected referenceAttention(const std::vector<double> &q,
                                            const std::vector<double> &k,
                                            const std::vector<double> &v,
                                            const std::vector<double> &dy, int slices, int queries,
                                            int keys, int headDim, double scale, bool causal) {
  AttentionExpected expected;
  expected.o.resize(q.size());
  expected.dq.resize(q.size());
  expected.dk.resize(k.size());
  expected.dv.resize(k.size());
  cpu::kernels::attention<double>(q.data(), k.data(), v.data(), slices, queries, keys, headDim,
                                  headDim, scale, causal, expected.o.data());
  cpu::kernels::attentionGrad<double>(q.data(), k.data(), v.data(), dy.data(), slices, queries,
                                      keys, headDim, headDim, scale, causal, expected.dq.data(),
                                      expected.dk.data(), expected.dv.data());
  expected.lse = referenceLse(q, k, slices, queries, keys, headDim, scale, causal);
  return expected;
}

/// Where the GPU binaries find the device headers they compile with NVRTC:
/// $AMPC_KERNEL_INCLUDE, else kernel-include/ beside the executable (a GPU bundle carries it).
inline std::string kernelIncludeDirectory() {
  if (const char *fromEnvironment = std::getenv("AMPC_KERNEL_INCLUDE");
      fromEnvironment && *fromEnvironment)
    return fromEnvironment;
  char path[PATH_MAX];
  const ssize_t length = readlink("/proc/self/exe", path, sizeof(path) - 1);
  const std::string self = length > 0 ? std::string(path, length) : std::string();
  return self.substr(0, self.rfind('/') + 1) + "kernel-include";
}

} // namespace ampc::test

#endif // AMPC_TEST_UNIT_RUNTIME_ATTENTIONREFERENCE_H
