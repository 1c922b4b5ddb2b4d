//===- AttentionReference.h - Inputs and references for attention kernel tests -===//
//
// What the flash-attention kernel tests share, whether the kernels run on a GPU
// (FlashAttentionGpuTest) or in the device emulator (FlashAttentionEmulatedTest): element
// encodings, random inputs already rounded to the storage type, the relative-norm error, and
// the expected outputs (o, dq, dk, dv from the CPU backend's kernels in double, and the
// log-sum-exp), where the operands lie in the tests' buffers (contiguous, or read in place from
// a packed projection), and where the GPU binaries find the kernel headers.
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
#include <utility>
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

/// Where one operand of a kernel test lies in its buffer, in elements: element (b, h, t, d) of
/// its [batch, heads, rows, D] view is at offset + b batch + h head + t row + d (the plan's
/// AttentionLayout, in elements).
struct Placement {
  size_t offset = 0;
  int64_t batch = 0, head = 0, row = 0;

  size_t at(int b, int h, int t, int d) const {
    return offset + static_cast<size_t>(b * batch + h * head + t * row + d);
  }
};

/// Where a kernel test puts q, k, v (in one input buffer; dq, dk, dv in a gradient buffer of the
/// same shape, at the same places) and o (dO in a buffer of the same shape, at the same place).
/// Each buffer has kGuard unused elements before and after the operands, so a write outside its
/// windows shows.
struct AttentionPlacement {
  static constexpr size_t kGuard = 64; // 128 or 256 bytes: rows stay 16-byte aligned
  int batch = 1, heads = 1, queries = 0, keys = 0, headDim = 0;
  Placement q, k, v, o;
  size_t inputElements = 0, outputElements = 0;

  /// q, k, v one after another in the input buffer, each contiguous [batch, heads, rows, D];
  /// o contiguous [batch, heads, T, D].
  static AttentionPlacement contiguous(int batch, int heads, int queries, int keys, int headDim) {
    AttentionPlacement p{batch, heads, queries, keys, headDim};
    const int64_t D = headDim, qElements = int64_t(batch) * heads * queries * D,
                  kElements = int64_t(batch) * heads * keys * D;
    p.q = {kGuard, heads * queries * D, queries * D, D};
    p.k = {kGuard + size_t(qElements), heads * keys * D, keys * D, D};
    p.v = {kGuard + size_t(qElements + kElements), heads * keys * D, keys * D, D};
    p.o = p.q;
    p.inputElements = size_t(qElements + 2 * kElements) + 2 * kGuard;
    p.outputElements = size_t(qElements) + 2 * kGuard;
    return p;
  }

  /// q, k, v read in place from a packed projection [batch, T, 3 heads D] (T = S): windows at
  /// 0, heads D and 2 heads D of each row; o [batch, T, heads D]. \p padding extra elements
  /// end every row of both (a multiple of 16 bytes), so that the rows have gaps.
  static AttentionPlacement packed(int batch, int heads, int rows, int headDim, int padding = 0) {
    AttentionPlacement p{batch, heads, rows, rows, headDim};
    const int64_t D = headDim, width = heads * D;
    const int64_t inputRow = 3 * width + padding, outputRow = width + padding;
    p.q = {kGuard, rows * inputRow, D, inputRow};
    p.k = {kGuard + size_t(width), rows * inputRow, D, inputRow};
    p.v = {kGuard + size_t(2 * width), rows * inputRow, D, inputRow};
    p.o = {kGuard, rows * outputRow, D, outputRow};
    p.inputElements = size_t(batch * rows * inputRow) + 2 * kGuard;
    p.outputElements = size_t(batch * rows * outputRow) + 2 * kGuard;
    return p;
  }

  /// Writes \p values (contiguous [batch heads, rows, D]) into \p buffer where \p at says.
  void place(std::vector<double> &buffer, const std::vector<double> &values, const Placement &at,
             int rows) const {
    for (int b = 0; b < batch; ++b)
      for (int h = 0; h < heads; ++h)
        for (int t = 0; t < rows; ++t)
          for (int d = 0; d < headDim; ++d)
            buffer[at.at(b, h, t, d)] = values[((size_t(b) * heads + h) * rows + t) * headDim + d];
  }

  /// The operand \p at of \p buffer as contiguous [batch heads, rows, D] values.
  std::vector<double> gather(const std::vector<double> &buffer, const Placement &at,
                             int rows) const {
    std::vector<double> values(size_t(batch) * heads * rows * headDim);
    for (int b = 0; b < batch; ++b)
      for (int h = 0; h < heads; ++h)
        for (int t = 0; t < rows; ++t)
          for (int d = 0; d < headDim; ++d)
            values[((size_t(b) * heads + h) * rows + t) * headDim + d] = buffer[at.at(b, h, t, d)];
    return values;
  }

  /// Which elements of a buffer of \p elements the operands \p windows (with their rows)
  /// cover.
  std::vector<bool> covered(size_t elements,
                            const std::vector<std::pair<Placement, int>> &windows) const {
    std::vector<bool> mask(elements, false);
    for (const auto &[at, rows] : windows)
      for (int b = 0; b < batch; ++b)
        for (int h = 0; h < heads; ++h)
          for (int t = 0; t < rows; ++t)
            for (int d = 0; d < headDim; ++d)
              mask[at.at(b, h, t, d)] = true;
    return mask;
  }
};

/// How many elements of \p bytes (in \p storage) outside \p covered differ from \p before.
inline size_t changedOutside(const std::vector<char> &bytes, const std::vector<char> &before,
                             const std::vector<bool> &covered, Storage storage) {
  const size_t size = elementBytes(storage);
  size_t changed = 0;
  for (size_t i = 0; i < covered.size(); ++i)
    if (!covered[i] && std::memcmp(bytes.data() + i * size, before.data() + i * size, size) != 0)
      ++changed;
  return changed;
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
