//===- ShapeRules.cpp - Result-shape rules of plan instructions -----------===//

#include "runtime/plan/ShapeRules.h"

#include <algorithm>

namespace ampc::plan {

std::optional<Shape> broadcastShapes(const Shape &a, const Shape &b) {
  const size_t rank = std::max(a.size(), b.size());
  Shape result(rank);
  for (size_t i = 0; i < rank; ++i) {
    // Align from the trailing dim; a missing leading dim acts as 1.
    int64_t dimA = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    int64_t dimB = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    if (dimA != dimB && dimA != 1 && dimB != 1)
      return std::nullopt;
    result[i] = dimA == 1 ? dimB : dimA;
  }
  return result;
}

bool broadcastsTo(const Shape &from, const Shape &to) {
  if (from.size() > to.size())
    return false;
  const size_t offset = to.size() - from.size();
  for (size_t i = 0; i < from.size(); ++i)
    if (from[i] != 1 && from[i] != to[offset + i])
      return false;
  return true;
}

Shape rowMajorStrides(const Shape &shape) {
  Shape strides(shape.size());
  int64_t stride = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = stride;
    stride *= shape[i];
  }
  return strides;
}

Shape broadcastStrides(const Shape &from, const Shape &to) {
  const Shape own = rowMajorStrides(from);
  Shape strides(to.size(), 0);
  const size_t offset = to.size() - from.size();
  for (size_t i = 0; i < from.size(); ++i)
    strides[offset + i] = from[i] == 1 ? 0 : own[i];
  return strides;
}

Shape reducedShape(const Shape &shape, const std::vector<int64_t> &axes,
                   bool keepDims) {
  Shape result;
  for (size_t i = 0; i < shape.size(); ++i) {
    bool reduced =
        std::binary_search(axes.begin(), axes.end(), static_cast<int64_t>(i));
    if (!reduced)
      result.push_back(shape[i]);
    else if (keepDims)
      result.push_back(1);
  }
  return result;
}

std::optional<MatMulDims> matMulDims(const Shape &a, const Shape &b,
                                     bool transposeA, bool transposeB) {
  if (a.size() < 2 || b.size() < 2)
    return std::nullopt;
  MatMulDims dims;
  dims.batchA.assign(a.begin(), a.end() - 2);
  dims.batchB.assign(b.begin(), b.end() - 2);
  const int64_t rowsA = a[a.size() - 2], colsA = a.back();
  const int64_t rowsB = b[b.size() - 2], colsB = b.back();
  dims.m = transposeA ? colsA : rowsA;
  dims.k = transposeA ? rowsA : colsA;
  const int64_t kB = transposeB ? colsB : rowsB;
  dims.n = transposeB ? rowsB : colsB;
  if (kB != dims.k)
    return std::nullopt;
  std::optional<Shape> batch = broadcastShapes(dims.batchA, dims.batchB);
  if (!batch)
    return std::nullopt;
  dims.batch = *batch;
  return dims;
}

} // namespace ampc::plan
