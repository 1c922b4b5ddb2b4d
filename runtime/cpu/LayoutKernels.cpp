//===- LayoutKernels.cpp - Transpose, slice, concat, broadcast, embedding -===//
//
// Data movement only: values are copied, never rounded or converted. The
// element type E is the compute type for float buffers and int64_t for
// integer buffers.
//
//===----------------------------------------------------------------------===//

#include "runtime/cpu/Kernels.h"
#include "runtime/cpu/StridedRows.h"
#include "runtime/cpu/ThreadPool.h"
#include "runtime/plan/Plan.h"

#include <algorithm>
#include <cstring>
#include <string>

namespace ampc::cpu::kernels {

template <typename E>
void stridedCopy(const E *in, int64_t offset, const Shape &inStrides, E *out,
                 const Shape &outShape) {
  const int64_t count = plan::numElements(outShape);
  if (count == 0)
    return;
  const int64_t length = outShape.empty() ? 1 : outShape.back();
  const int64_t rows = count / length;
  const Shape outStrides = plan::rowMajorStrides(outShape);
  const int64_t grain = std::max<int64_t>(1, (1 << 14) / length);
  parallelFor(rows, grain, [&](int64_t begin, int64_t end) {
    StridedRows walk(outShape, {&inStrides, &outStrides}, begin);
    const int64_t stride = walk.innerStride(0);
    for (int64_t row = begin; row < end; ++row, walk.next()) {
      const E *source = in + offset + walk.rowOffset(0);
      E *target = out + walk.rowOffset(1);
      if (stride == 1) {
        std::memcpy(target, source, length * sizeof(E));
      } else {
        for (int64_t i = 0; i < length; ++i)
          target[i] = source[i * stride];
      }
    }
  });
}

template <typename E>
void transpose(const E *in, const Shape &inShape, const std::vector<int64_t> &permutation, E *out) {
  // Result dim i walks operand dim permutation[i].
  const Shape inRowMajor = plan::rowMajorStrides(inShape);
  Shape outShape(permutation.size()), inStrides(permutation.size());
  for (size_t i = 0; i < permutation.size(); ++i) {
    outShape[i] = inShape[permutation[i]];
    inStrides[i] = inRowMajor[permutation[i]];
  }
  stridedCopy(in, 0, inStrides, out, outShape);
}

template <typename E>
void slice(const E *in, const Shape &inShape, const std::vector<int64_t> &starts, E *out,
           const Shape &outShape) {
  // The window starts at sum(starts[d] * stride[d]) and keeps the operand's
  // strides (step 1 in every dim).
  const Shape inStrides = plan::rowMajorStrides(inShape);
  int64_t offset = 0;
  for (size_t d = 0; d < starts.size(); ++d)
    offset += starts[d] * inStrides[d];
  stridedCopy(in, offset, inStrides, out, outShape);
}

template <typename E>
void concat(const std::vector<const E *> &parts, const std::vector<Shape> &partShapes, int64_t axis,
            E *out) {
  // View every tensor as [outer, axis dim * inner]: each part contributes a
  // contiguous chunk to every one of the `outer` rows of the result.
  const Shape &first = partShapes[0];
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d)
    outer *= first[d];
  for (size_t d = axis + 1; d < first.size(); ++d)
    inner *= first[d];
  int64_t outRow = 0;
  std::vector<int64_t> chunk(parts.size()), position(parts.size());
  for (size_t p = 0; p < parts.size(); ++p) {
    chunk[p] = partShapes[p][axis] * inner;
    position[p] = outRow;
    outRow += chunk[p];
  }
  parallelFor(outer, std::max<int64_t>(1, (1 << 14) / std::max<int64_t>(outRow, 1)),
              [&](int64_t begin, int64_t end) {
                for (int64_t r = begin; r < end; ++r)
                  for (size_t p = 0; p < parts.size(); ++p)
                    std::copy_n(parts[p] + r * chunk[p], chunk[p], out + r * outRow + position[p]);
              });
}

template <typename E>
void broadcast(const E *in, const Shape &inShape, E *out, const Shape &outShape) {
  stridedCopy(in, 0, plan::broadcastStrides(inShape, outShape), out, outShape);
}

void checkIds(const int64_t *ids, int64_t count, int64_t rows) {
  // Check every id first (in order) so the error names the first bad one.
  for (int64_t i = 0; i < count; ++i)
    if (ids[i] < 0 || ids[i] >= rows)
      throw KernelError("id " + std::to_string(ids[i]) + " at index " + std::to_string(i) +
                        " is outside the table's rows [0, " + std::to_string(rows) + ")");
}

template <typename T>
void embedding(const T *table, int64_t rows, int64_t width, const int64_t *ids, int64_t count,
               T *out) {
  checkIds(ids, count, rows);
  // out[i, :] = table[ids[i], :]
  parallelFor(count, std::max<int64_t>(1, (1 << 14) / std::max<int64_t>(width, 1)),
              [&](int64_t begin, int64_t end) {
                for (int64_t i = begin; i < end; ++i)
                  std::copy_n(table + ids[i] * width, width, out + i * width);
              });
}

#define AMPC_INSTANTIATE_LAYOUT(E)                                                                 \
  template void stridedCopy<E>(const E *, int64_t, const Shape &, E *, const Shape &);             \
  template void transpose<E>(const E *, const Shape &, const std::vector<int64_t> &, E *);         \
  template void slice<E>(const E *, const Shape &, const std::vector<int64_t> &, E *,              \
                         const Shape &);                                                           \
  template void concat<E>(const std::vector<const E *> &, const std::vector<Shape> &, int64_t,     \
                          E *);                                                                    \
  template void broadcast<E>(const E *, const Shape &, E *, const Shape &);
AMPC_INSTANTIATE_LAYOUT(float)
AMPC_INSTANTIATE_LAYOUT(double)
AMPC_INSTANTIATE_LAYOUT(int64_t)
#undef AMPC_INSTANTIATE_LAYOUT

template void embedding<float>(const float *, int64_t, int64_t, const int64_t *, int64_t, float *);
template void embedding<double>(const double *, int64_t, int64_t, const int64_t *, int64_t,
                                double *);

} // namespace ampc::cpu::kernels
