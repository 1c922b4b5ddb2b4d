//===- ShapeRules.h - Result-shape rules of plan instructions -------------===//
//
// The shape arithmetic that validatePlan checks and that backends use to lay
// out their loops, written once so both agree with docs/plan-format.md.
//
//===----------------------------------------------------------------------===//

#ifndef AMPC_RUNTIME_PLAN_SHAPERULES_H
#define AMPC_RUNTIME_PLAN_SHAPERULES_H

#include <cstdint>
#include <optional>
#include <vector>

namespace ampc::plan {

using Shape = std::vector<int64_t>;

/// NumPy broadcasting of \p a and \p b (trailing-aligned; each pair of dims
/// equal or one of them 1); nullopt if they are incompatible.
std::optional<Shape> broadcastShapes(const Shape &a, const Shape &b);

/// True if \p from broadcasts to exactly \p to.
bool broadcastsTo(const Shape &from, const Shape &to);

/// Row-major strides of a tensor of \p shape, in elements.
Shape rowMajorStrides(const Shape &shape);

/// Strides for reading a tensor of shape \p from as if it had the broadcast
/// shape \p to: row-major strides, 0 on broadcast (size-1 or missing) dims.
/// Requires broadcastsTo(from, to).
Shape broadcastStrides(const Shape &from, const Shape &to);

/// The shape of \p shape reduced over the sorted, unique \p axes; reduced
/// dims are kept as 1 when \p keepDims.
Shape reducedShape(const Shape &shape, const std::vector<int64_t> &axes,
                   bool keepDims);

/// The operand dims of a MatMul after the optional transposes of the last two
/// dims: a is [batchA..., m, k], b is [batchB..., k, n].
struct MatMulDims {
  Shape batchA, batchB, batch; ///< batch = broadcast(batchA, batchB)
  int64_t m = 0, k = 0, n = 0;
};

/// The MatMul dims of \p a and \p b, or nullopt when a rank is below 2, the
/// contraction dims differ, or the batch dims do not broadcast.
std::optional<MatMulDims> matMulDims(const Shape &a, const Shape &b,
                                     bool transposeA, bool transposeB);

} // namespace ampc::plan

#endif // AMPC_RUNTIME_PLAN_SHAPERULES_H
