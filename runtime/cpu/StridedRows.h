//===- StridedRows.h - Row-by-row walk over broadcast or permuted views ---===//
//
// Many kernels read operands through strides that differ from the output's
// row-major layout (broadcasting, transposes, slices, reductions). Computing
// an offset per element from a flat index would dominate their cost, so they
// walk the output one innermost row at a time: StridedRows keeps the
// multi-index of the current row and one running offset per operand, and the
// kernel runs a tight loop over the row with each operand's innermost stride.
//
//===----------------------------------------------------------------------===//

#ifndef AMPC_RUNTIME_CPU_STRIDEDROWS_H
#define AMPC_RUNTIME_CPU_STRIDEDROWS_H

#include <array>
#include <cstdint>
#include <vector>

namespace ampc::cpu {

/// Walks the rows (all dims but the last) of a tensor of shape `shape`,
/// tracking the offsets of up to kMaxOperands operands with the given
/// per-dim strides (in elements; 0 for a broadcast dim).
class StridedRows {
public:
  static constexpr int kMaxOperands = 3;

  /// Starts at row \p firstRow (rows counted in row-major order).
  StridedRows(const std::vector<int64_t> &shape,
              const std::vector<const std::vector<int64_t> *> &strides, int64_t firstRow)
      : shape(shape), operandCount(static_cast<int>(strides.size())),
        index(shape.empty() ? 0 : shape.size() - 1, 0) {
    for (int o = 0; o < operandCount; ++o) {
      stride[o] = strides[o];
      offset[o] = 0;
    }
    // Decompose the starting row into its multi-index (row-major).
    int64_t rest = firstRow;
    for (size_t d = index.size(); d-- > 0;) {
      index[d] = rest % shape[d];
      rest /= shape[d];
      for (int o = 0; o < operandCount; ++o)
        offset[o] += index[d] * (*stride[o])[d];
    }
  }

  /// Length of every row (1 for a scalar).
  int64_t rowLength() const { return shape.empty() ? 1 : shape.back(); }
  /// Stride of operand \p o along the row.
  int64_t innerStride(int o) const { return shape.empty() ? 0 : (*stride[o])[shape.size() - 1]; }
  /// Offset of operand \p o at the start of the current row.
  int64_t rowOffset(int o) const { return offset[o]; }

  /// Moves to the next row, like an odometer.
  void next() {
    for (size_t d = index.size(); d-- > 0;) {
      for (int o = 0; o < operandCount; ++o)
        offset[o] += (*stride[o])[d];
      if (++index[d] < shape[d])
        return;
      for (int o = 0; o < operandCount; ++o)
        offset[o] -= index[d] * (*stride[o])[d];
      index[d] = 0;
    }
  }

private:
  const std::vector<int64_t> &shape;
  int operandCount;
  std::vector<int64_t> index; // multi-index over the leading dims
  std::array<const std::vector<int64_t> *, kMaxOperands> stride{};
  std::array<int64_t, kMaxOperands> offset{};
};

} // namespace ampc::cpu

#endif // AMPC_RUNTIME_CPU_STRIDEDROWS_H
