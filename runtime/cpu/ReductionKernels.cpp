//===- ReductionKernels.cpp - Sum, Mean and Max over axes -----------------===//
//
// Sum and Mean accumulate in double in both precisions, so a reduction over
// millions of elements does not drift with tensor size and the reference
// stays an accurate oracle for GPU tree reductions; the result is then
// rounded to the compute type. Elements are added in row-major order of the
// input, whatever the thread count. Max propagates NaN, as PyTorch does.
//
//===----------------------------------------------------------------------===//

#include "runtime/cpu/Kernels.h"
#include "runtime/cpu/StridedRows.h"
#include "runtime/cpu/ThreadPool.h"
#include "runtime/plan/Plan.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace ampc::cpu::kernels {
namespace {

/// Folds \p value into a running maximum; NaN wins and stays.
template <typename A> inline void foldMax(A &running, A value) {
  if (running != running)
    return;
  if (value > running || value != value)
    running = value;
}

} // namespace

Shape reducedOutputStrides(const Shape &shape, const std::vector<int64_t> &axes) {
  const Shape compact = plan::rowMajorStrides(plan::reducedShape(shape, axes, /*keepDims=*/false));
  Shape strides(shape.size(), 0);
  for (size_t d = 0, k = 0; d < shape.size(); ++d) {
    if (std::binary_search(axes.begin(), axes.end(), int64_t(d)))
      continue;
    strides[d] = compact[k++];
  }
  return strides;
}

template <typename T>
void reduce(ReduceOp op, const T *x, const Shape &shape, const std::vector<int64_t> &axes, T *out) {
  const Shape outShape = plan::reducedShape(shape, axes, /*keepDims=*/false);
  const int64_t outCount = plan::numElements(outShape);
  const int64_t inCount = plan::numElements(shape);
  const int64_t reducedCount = outCount == 0 ? 0 : inCount / outCount;
  const bool isMax = op == ReduceOp::Max;
  const double initial = isMax ? -std::numeric_limits<double>::infinity() : 0.0;
  // Mean of nothing is 0/0 = NaN, as in NumPy and PyTorch.
  auto finish = [&](double total) {
    return static_cast<T>(op == ReduceOp::Mean ? total / static_cast<double>(reducedCount) : total);
  };

  // Reducing a suffix of the dims: every output is one contiguous run.
  bool suffix = true;
  for (size_t i = 0; i < axes.size(); ++i)
    suffix &= axes[i] == static_cast<int64_t>(shape.size() - axes.size() + i);
  if (suffix) {
    parallelFor(outCount, std::max<int64_t>(1, 4096 / std::max<int64_t>(reducedCount, 1)),
                [&](int64_t begin, int64_t end) {
                  for (int64_t o = begin; o < end; ++o) {
                    const T *run = x + o * reducedCount;
                    double total = initial;
                    for (int64_t i = 0; i < reducedCount; ++i) {
                      if (isMax)
                        foldMax(total, static_cast<double>(run[i]));
                      else
                        total += run[i];
                    }
                    out[o] = finish(total);
                  }
                });
    return;
  }

  // General case: walk the input in row-major order and fold each element
  // into its output slot; reduced dims have output stride 0.
  std::vector<double> totals(outCount, initial);
  if (inCount > 0) {
    const Shape inStrides = plan::rowMajorStrides(shape);
    const Shape outStrides = reducedOutputStrides(shape, axes);
    StridedRows walk(shape, {&inStrides, &outStrides}, 0);
    const int64_t length = walk.rowLength();
    const int64_t rows = inCount / length;
    const int64_t stride = walk.innerStride(1);
    for (int64_t row = 0; row < rows; ++row, walk.next()) {
      const T *in = x + walk.rowOffset(0);
      double *slot = totals.data() + walk.rowOffset(1);
      for (int64_t i = 0; i < length; ++i) {
        if (isMax)
          foldMax(slot[i * stride], static_cast<double>(in[i]));
        else
          slot[i * stride] += in[i];
      }
    }
  }
  for (int64_t o = 0; o < outCount; ++o)
    out[o] = finish(totals[o]);
}

template void reduce<float>(ReduceOp, const float *, const Shape &, const std::vector<int64_t> &,
                            float *);
template void reduce<double>(ReduceOp, const double *, const Shape &, const std::vector<int64_t> &,
                             double *);

} // namespace ampc::cpu::kernels
