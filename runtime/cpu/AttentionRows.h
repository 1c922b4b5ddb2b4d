//===- AttentionRows.h - Dot products of a query with every key -----------===//
//
// The CPU attention kernels (forward and gradient) score a query row against
// all keys at once: k (or v) copied transposed, [dim x keys], and the dot
// products accumulated across keys one dim at a time. Each dot product is
// still summed from zero in dim order, as a naive loop sums it, so the bits
// are the same; the loop over keys is contiguous and vectorises. Always
// inlined, so that a caller compiled for a wider instruction set (a target
// attribute) gets these loops in it.
//
//===----------------------------------------------------------------------===//

#ifndef AMPC_RUNTIME_CPU_ATTENTIONROWS_H
#define AMPC_RUNTIME_CPU_ATTENTIONROWS_H

#include <algorithm>
#include <cstdint>

namespace ampc::cpu::kernels {

/// A [count x dim] row-major matrix transposed into [dim x count].
template <typename T>
[[gnu::always_inline]] inline void transposeRows(const T *rows, int64_t count, int64_t dim,
                                                 T *out) {
  for (int64_t j = 0; j < count; ++j)
    for (int64_t d = 0; d < dim; ++d)
      out[d * count + j] = rows[j * dim + d];
}

/// dots[j] = row . column j of \p columns ([dim x stride]) for j < valid,
/// each summed in dim order from zero: a naive dot product's bits, computed
/// for all j at once.
template <typename T>
[[gnu::always_inline]] inline void dotWithColumns(const T *row, const T *columns, int64_t stride,
                                                  int64_t dim, int64_t valid, T *dots) {
  std::fill(dots, dots + valid, T(0));
  for (int64_t d = 0; d < dim; ++d) {
    const T value = row[d];
    const T *column = columns + d * stride;
    for (int64_t j = 0; j < valid; ++j)
      dots[j] += value * column[j];
  }
}

} // namespace ampc::cpu::kernels

#endif // AMPC_RUNTIME_CPU_ATTENTIONROWS_H
