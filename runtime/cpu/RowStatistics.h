//===- RowStatistics.h - Per-row statistics shared by forward and backward -===//
//
// The norm, softmax and cross-entropy kernels and their gradients all reduce
// rows of one model dimension, and a gradient must see exactly the values its
// forward computed. These helpers are that one computation: each accumulates
// in the compute type T, in increasing index order, so the forward and the
// backward kernels (compiled, like all runtime sources, with
// -ffp-contract=off) get the same bits.
//
//===----------------------------------------------------------------------===//

#ifndef AMPC_RUNTIME_CPU_ROWSTATISTICS_H
#define AMPC_RUNTIME_CPU_ROWSTATISTICS_H

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

namespace ampc::cpu::kernels {

/// Rows per parallel chunk for rows of \p width elements.
inline int64_t rowGrain(int64_t width) {
  return std::max<int64_t>(1, 8192 / std::max<int64_t>(width, 1));
}

/// max(x[0], ..., x[count - 1]) folded from -inf with std::max in index
/// order, so NaN entries are skipped (std::max keeps the running value);
/// -inf for count 0.
template <typename T> T rowMaximum(const T *x, int64_t count) {
  T maximum = -std::numeric_limits<T>::infinity();
  for (int64_t j = 0; j < count; ++j)
    maximum = std::max(maximum, x[j]);
  return maximum;
}

/// LayerNorm's statistics of one row.
template <typename T> struct MeanAndInverseStd { T mean, inverseStd; };

/// Over the D = \p width entries of \p x: mean = (sum_j x[j]) / D and
/// inverseStd = 1 / sqrt((sum_j (x[j] - mean)^2) / D + eps), the biased
/// variance; both sums in T, in increasing j.
template <typename T> MeanAndInverseStd<T> rowMeanAndInverseStd(const T *x, int64_t width, T eps) {
  const T count = static_cast<T>(width);
  T sum = 0;
  for (int64_t j = 0; j < width; ++j)
    sum += x[j];
  const T mean = sum / count;
  T squares = 0;
  for (int64_t j = 0; j < width; ++j) {
    const T centred = x[j] - mean;
    squares += centred * centred;
  }
  return {mean, T(1) / std::sqrt(squares / count + eps)};
}

/// RmsNorm's scale of one row of D = \p width entries:
/// 1 / sqrt((sum_j x[j]^2) / D + eps), the sum in T, in increasing j.
template <typename T> T rowInverseRms(const T *x, int64_t width, T eps) {
  T squares = 0;
  for (int64_t j = 0; j < width; ++j)
    squares += x[j] * x[j];
  return T(1) / std::sqrt(squares / static_cast<T>(width) + eps);
}

} // namespace ampc::cpu::kernels

#endif // AMPC_RUNTIME_CPU_ROWSTATISTICS_H
