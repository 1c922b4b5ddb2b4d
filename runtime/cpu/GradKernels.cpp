//===- GradKernels.cpp - Gradients of the elementwise, layout, norm and loss ops
//
// Backward kernels of training plans. As in the forward kernels, per-element
// formulas and per-row statistics are evaluated in the compute type T; sums
// over many rows or positions (dgamma, dbeta, embedding rows) and the row
// sums of softmax-like gradients accumulate in double. Work is split across
// threads only over independent outputs (rows, or columns of the
// parameter gradients), so results do not depend on the thread count.
//
//===----------------------------------------------------------------------===//

#include "runtime/cpu/Kernels.h"
#include "runtime/numerics/Elementwise.h"
#include "runtime/cpu/RowStatistics.h"
#include "runtime/cpu/StridedRows.h"
#include "runtime/cpu/ThreadPool.h"
#include "runtime/plan/Plan.h"

#include <algorithm>
#include <cmath>

namespace ampc::cpu::kernels {
namespace {

/// Elements per parallel chunk for cheap per-element work.
constexpr int64_t kElementGrain = 1 << 15;

/// dx[i] = f(x[i], dy[i]) in parallel chunks.
template <typename T, typename F>
void mapPairs(const T *x, const T *dy, T *dx, int64_t count, F f) {
  parallelFor(count, kElementGrain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i)
      dx[i] = f(x[i], dy[i]);
  });
}

/// Columns per parallel chunk when summing a [rows, width] array over rows.
constexpr int64_t kColumnGrain = 64;

/// out[j] = sum_r term(r, j) over rows in increasing r, in double; the
/// columns are split across threads, each walking its columns row by row
/// so memory is read in row-major runs.
template <typename T, typename F> void sumOverRows(int64_t rows, int64_t width, T *out, F term) {
  parallelFor(width, kColumnGrain, [&](int64_t begin, int64_t end) {
    std::vector<double> totals(end - begin, 0.0);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = begin; j < end; ++j)
        totals[j - begin] += static_cast<double>(term(r, j));
    for (int64_t j = begin; j < end; ++j)
      out[j] = static_cast<T>(totals[j - begin]);
  });
}

} // namespace

template <typename T>
void unaryGrad(UnaryGradOp op, const T *x, const T *dy, T *dx, int64_t count) {
  // Each opcode's element is numerics::ops::Name::apply (Elementwise.h), as on the device.
  switch (op) {
#define AMPC_UNARY_GRAD_OP(Name, ...)                                                              \
  case UnaryGradOp::Name:                                                                          \
    return mapPairs(x, dy, dx, count, [](T v, T g) { return numerics::ops::Name::apply(v, g); });
#include "runtime/plan/OpCodes.def"
  case UnaryGradOp::GeluErfGrad:
    return mapPairs(x, dy, dx, count,
                    [](T v, T g) { return numerics::ops::GeluErfGrad::apply(v, g); });
  case UnaryGradOp::GeluTanhGrad:
    return mapPairs(x, dy, dx, count,
                    [](T v, T g) { return numerics::ops::GeluTanhGrad::apply(v, g); });
  }
}

template <typename E>
void pad(const E *in, const Shape &inShape, const std::vector<int64_t> &low, E *out,
         const Shape &outShape) {
  std::fill(out, out + plan::numElements(outShape), E(0));
  const int64_t count = plan::numElements(inShape);
  if (count == 0)
    return;
  // Walk the input's rows; each lands at the same multi-index + low in out.
  const Shape inStrides = plan::rowMajorStrides(inShape);
  const Shape outStrides = plan::rowMajorStrides(outShape);
  int64_t base = 0;
  for (size_t d = 0; d < low.size(); ++d)
    base += low[d] * outStrides[d];
  const int64_t length = inShape.empty() ? 1 : inShape.back();
  const int64_t rows = count / length;
  parallelFor(rows, std::max<int64_t>(1, (1 << 14) / length), [&](int64_t begin, int64_t end) {
    StridedRows walk(inShape, {&inStrides, &outStrides}, begin);
    for (int64_t row = begin; row < end; ++row, walk.next())
      std::copy_n(in + walk.rowOffset(0), length, out + base + walk.rowOffset(1));
  });
}

template <typename T>
void maxGrad(const T *x, const Shape &shape, const std::vector<int64_t> &axes, const T *dy, T *dx) {
  const int64_t inCount = plan::numElements(shape);
  std::fill(dx, dx + inCount, T(0));
  if (inCount == 0)
    return;
  const Shape outShape = plan::reducedShape(shape, axes, /*keepDims=*/false);
  const int64_t outCount = plan::numElements(outShape);
  // Walk the input in row-major order (as the forward reduction does) and
  // keep, per output, the index of the first maximum: a later element
  // replaces it only if strictly greater, or NaN (which stays).
  std::vector<int64_t> best(outCount, -1);
  const Shape inStrides = plan::rowMajorStrides(shape);
  const Shape outStrides = reducedOutputStrides(shape, axes);
  StridedRows walk(shape, {&inStrides, &outStrides}, 0);
  const int64_t length = walk.rowLength();
  const int64_t rows = inCount / length;
  const int64_t stride = walk.innerStride(1);
  for (int64_t row = 0; row < rows; ++row, walk.next()) {
    const int64_t first = walk.rowOffset(0);
    int64_t *slot = best.data() + walk.rowOffset(1);
    for (int64_t i = 0; i < length; ++i) {
      int64_t &b = slot[i * stride];
      const T value = x[first + i];
      if (b < 0) {
        b = first + i;
        continue;
      }
      const T current = x[b];
      if (current != current)
        continue;
      if (value != value || value > current)
        b = first + i;
    }
  }
  for (int64_t o = 0; o < outCount; ++o)
    dx[best[o]] = dy[o];
}

template <typename T>
void embeddingGrad(const int64_t *ids, int64_t count, const T *dy, int64_t rows, int64_t width,
                   T *dtable) {
  checkIds(ids, count, rows);
  // Group the positions by id (a stable counting sort), so each table row is
  // summed by one thread, over its positions in increasing order.
  std::vector<int64_t> start(rows + 1, 0), order(count);
  for (int64_t i = 0; i < count; ++i)
    ++start[ids[i] + 1];
  for (int64_t v = 0; v < rows; ++v)
    start[v + 1] += start[v];
  std::vector<int64_t> next(start.begin(), start.end() - 1);
  for (int64_t i = 0; i < count; ++i)
    order[next[ids[i]]++] = i;
  parallelFor(rows, rowGrain(width), [&](int64_t begin, int64_t end) {
    std::vector<double> total(width);
    for (int64_t v = begin; v < end; ++v) {
      std::fill(total.begin(), total.end(), 0.0);
      for (int64_t p = start[v]; p < start[v + 1]; ++p) {
        const T *row = dy + order[p] * width;
        for (int64_t j = 0; j < width; ++j)
          total[j] += static_cast<double>(row[j]);
      }
      for (int64_t j = 0; j < width; ++j)
        dtable[v * width + j] = static_cast<T>(total[j]);
    }
  });
}

template <typename T>
void layerNormGrad(const T *x, int64_t rows, int64_t width, const T *gamma, const T *dy,
                   double epsilon, T *dx, T *dgamma, T *dbeta) {
  // Row statistics exactly as the forward kernel computes them.
  const T eps = static_cast<T>(epsilon);
  std::vector<T> means(rows), inverseStds(rows);
  parallelFor(rows, rowGrain(width), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const T *in = x + r * width;
      const T *g = dy + r * width;
      const auto [mean, rstd] = rowMeanAndInverseStd(in, width, eps);
      means[r] = mean;
      inverseStds[r] = rstd;
      // dx = rstd (dxhat - mean(dxhat) - xhat mean(dxhat xhat)), dxhat = dy g.
      double sumDxhat = 0, sumDxhatXhat = 0;
      for (int64_t j = 0; j < width; ++j) {
        const T xhat = (in[j] - mean) * rstd;
        const T dxhat = g[j] * gamma[j];
        sumDxhat += static_cast<double>(dxhat);
        sumDxhatXhat += static_cast<double>(dxhat * xhat);
      }
      const T meanDxhat = static_cast<T>(sumDxhat / static_cast<double>(width));
      const T meanDxhatXhat = static_cast<T>(sumDxhatXhat / static_cast<double>(width));
      T *out = dx + r * width;
      for (int64_t j = 0; j < width; ++j) {
        const T xhat = (in[j] - mean) * rstd;
        const T dxhat = g[j] * gamma[j];
        out[j] = rstd * (dxhat - meanDxhat - xhat * meanDxhatXhat);
      }
    }
  });
  // dgamma = sum_rows dy xhat; dbeta = sum_rows dy.
  sumOverRows(rows, width, dgamma, [&](int64_t r, int64_t j) {
    return dy[r * width + j] * ((x[r * width + j] - means[r]) * inverseStds[r]);
  });
  sumOverRows(rows, width, dbeta, [&](int64_t r, int64_t j) { return dy[r * width + j]; });
}

template <typename T>
void rmsNormGrad(const T *x, int64_t rows, int64_t width, const T *gamma, const T *dy,
                 double epsilon, T *dx, T *dgamma) {
  const T eps = static_cast<T>(epsilon);
  std::vector<T> inverseRms(rows);
  parallelFor(rows, rowGrain(width), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const T *in = x + r * width;
      const T *g = dy + r * width;
      const T rms = rowInverseRms(in, width, eps);
      inverseRms[r] = rms;
      // dx = r dxhat - x r^3 mean(dxhat x), dxhat = dy g.
      double sumDxhatX = 0;
      for (int64_t j = 0; j < width; ++j)
        sumDxhatX += static_cast<double>(g[j] * gamma[j] * in[j]);
      const T meanDxhatX = static_cast<T>(sumDxhatX / static_cast<double>(width));
      const T rCubed = rms * rms * rms;
      T *out = dx + r * width;
      for (int64_t j = 0; j < width; ++j)
        out[j] = rms * (g[j] * gamma[j]) - in[j] * rCubed * meanDxhatX;
    }
  });
  // dgamma = sum_rows dy x r.
  sumOverRows(rows, width, dgamma, [&](int64_t r, int64_t j) {
    return dy[r * width + j] * x[r * width + j] * inverseRms[r];
  });
}

template <typename T>
void softmaxGrad(const T *y, const T *dy, int64_t rows, int64_t width, T *dx) {
  parallelFor(rows, rowGrain(width), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const T *p = y + r * width;
      const T *g = dy + r * width;
      double dot = 0;
      for (int64_t j = 0; j < width; ++j)
        dot += static_cast<double>(g[j] * p[j]);
      const T total = static_cast<T>(dot);
      T *out = dx + r * width;
      for (int64_t j = 0; j < width; ++j)
        out[j] = p[j] * (g[j] - total);
    }
  });
}

template <typename T>
void crossEntropyGrad(const T *logits, int64_t rows, int64_t classes, const int64_t *labels,
                      int64_t ignoreIndex, bool sum, T dloss, T *dlogits) {
  const int64_t counted = countLabelledRows(labels, rows, classes, ignoreIndex);
  // A mean over no rows has no gradient: every row is ignored, so all zero.
  const T scale = sum ? dloss : (counted == 0 ? T(0) : dloss / static_cast<T>(counted));
  parallelFor(rows, rowGrain(classes), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      T *out = dlogits + r * classes;
      if (labels[r] == ignoreIndex) {
        std::fill(out, out + classes, T(0));
        continue;
      }
      // softmax as the forward's logsumexp: the row maximum subtracted.
      const T *row = logits + r * classes;
      const T maximum = rowMaximum(row, classes);
      T total = 0;
      for (int64_t c = 0; c < classes; ++c) {
        out[c] = std::exp(row[c] - maximum);
        total += out[c];
      }
      for (int64_t c = 0; c < classes; ++c) {
        const T probability = out[c] / total;
        out[c] = (probability - (c == labels[r] ? T(1) : T(0))) * scale;
      }
    }
  });
}

#define AMPC_INSTANTIATE_GRAD(T)                                                                   \
  template void unaryGrad<T>(UnaryGradOp, const T *, const T *, T *, int64_t);                     \
  template void maxGrad<T>(const T *, const Shape &, const std::vector<int64_t> &, const T *,      \
                           T *);                                                                   \
  template void embeddingGrad<T>(const int64_t *, int64_t, const T *, int64_t, int64_t, T *);      \
  template void layerNormGrad<T>(const T *, int64_t, int64_t, const T *, const T *, double, T *,   \
                                 T *, T *);                                                        \
  template void rmsNormGrad<T>(const T *, int64_t, int64_t, const T *, const T *, double, T *,     \
                               T *);                                                               \
  template void softmaxGrad<T>(const T *, const T *, int64_t, int64_t, T *);                       \
  template void crossEntropyGrad<T>(const T *, int64_t, int64_t, const int64_t *, int64_t, bool,   \
                                    T, T *);
AMPC_INSTANTIATE_GRAD(float)
AMPC_INSTANTIATE_GRAD(double)
#undef AMPC_INSTANTIATE_GRAD

template void pad<float>(const float *, const Shape &, const std::vector<int64_t> &, float *,
                         const Shape &);
template void pad<double>(const double *, const Shape &, const std::vector<int64_t> &, double *,
                          const Shape &);
template void pad<int64_t>(const int64_t *, const Shape &, const std::vector<int64_t> &, int64_t *,
                           const Shape &);

} // namespace ampc::cpu::kernels
