//===- NormKernels.cpp - LayerNorm, RmsNorm and softmax over rows ---------===//
//
// Row statistics (means, variances, maxima, sums of exponentials) accumulate
// in the compute type T over one row of the model's width, in index order;
// rows run in parallel.
//
//===----------------------------------------------------------------------===//

#include "runtime/cpu/Kernels.h"
#include "runtime/cpu/RowStatistics.h"
#include "runtime/cpu/ThreadPool.h"
#include "runtime/plan/Plan.h"

#include <algorithm>
#include <cmath>

namespace ampc::cpu::kernels {

// y[j] = exp(x[j] - max) / sum_k exp(x[k] - max) for j < valid, 0 beyond;
// *logSumExp = max + log(sum_k exp(x[k] - max)) when asked for.
template <typename T>
void softmaxRow(const T *x, int64_t width, int64_t valid, T *y, T *logSumExp) {
  T maximum = rowMaximum(x, valid);
  // A row of -inf would give exp(nan); subtract 0 instead so it yields NaN
  // only through 0/0, as PyTorch does.
  if (std::isinf(maximum))
    maximum = maximum > 0 ? maximum : T(0);
  T sum = 0;
  for (int64_t j = 0; j < valid; ++j) {
    y[j] = std::exp(x[j] - maximum);
    sum += y[j];
  }
  if (logSumExp)
    *logSumExp = maximum + std::log(sum);
  // Divide rather than multiply by 1/sum: one rounding instead of two.
  for (int64_t j = 0; j < valid; ++j)
    y[j] /= sum;
  for (int64_t j = valid; j < width; ++j)
    y[j] = T(0);
}

template <typename T>
void layerNorm(const T *x, int64_t rows, int64_t width, const T *gamma, const T *beta,
               double epsilon, T *y) {
  // mean = sum(x) / D; var = sum((x - mean)^2) / D (biased);
  // y = (x - mean) / sqrt(var + eps) * gamma + beta
  const T eps = static_cast<T>(epsilon);
  parallelFor(rows, rowGrain(width), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const T *in = x + r * width;
      T *out = y + r * width;
      const auto [mean, inverseStd] = rowMeanAndInverseStd(in, width, eps);
      for (int64_t j = 0; j < width; ++j)
        out[j] = (in[j] - mean) * inverseStd * gamma[j] + beta[j];
    }
  });
}

template <typename T>
void rmsNorm(const T *x, int64_t rows, int64_t width, const T *gamma, double epsilon, T *y) {
  // y = x / sqrt(mean(x^2) + eps) * gamma
  const T eps = static_cast<T>(epsilon);
  parallelFor(rows, rowGrain(width), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const T *in = x + r * width;
      T *out = y + r * width;
      const T inverseRms = rowInverseRms(in, width, eps);
      for (int64_t j = 0; j < width; ++j)
        out[j] = in[j] * inverseRms * gamma[j];
    }
  });
}

template <typename T> void softmax(const T *x, const Shape &shape, bool causal, T *y) {
  // y[..., j] = exp(x[..., j] - max) / sum_k exp(x[..., k] - max) over the
  // last dim; causal rows see only j <= i + (S - T).
  const int64_t width = shape.back();
  const int64_t rows = width == 0 ? 0 : plan::numElements(shape) / width;
  const int64_t queries = causal ? shape[shape.size() - 2] : 1;
  parallelFor(rows, rowGrain(width), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      int64_t valid = width;
      if (causal)
        valid = std::clamp<int64_t>(r % queries + (width - queries) + 1, 0, width);
      softmaxRow(x + r * width, width, valid, y + r * width);
    }
  });
}

template void layerNorm<float>(const float *, int64_t, int64_t, const float *, const float *,
                               double, float *);
template void layerNorm<double>(const double *, int64_t, int64_t, const double *, const double *,
                                double, double *);
template void rmsNorm<float>(const float *, int64_t, int64_t, const float *, double, float *);
template void rmsNorm<double>(const double *, int64_t, int64_t, const double *, double, double *);
template void softmax<float>(const float *, const Shape &, bool, float *);
template void softmax<double>(const double *, const Shape &, bool, double *);

template void softmaxRow<float>(const float *, int64_t, int64_t, float *, float *);
template void softmaxRow<double>(const double *, int64_t, int64_t, double *, double *);

} // namespace ampc::cpu::kernels
