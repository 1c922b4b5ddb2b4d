//===- NormKernels.cpp - LayerNorm, RmsNorm, softmax, batch norm ----------===//
//
// Row statistics (means, variances, maxima, sums of exponentials) accumulate
// in the compute type T over one row of the model's width, in index order;
// rows run in parallel. Batch norm's per-channel statistics accumulate in
// double (as PyTorch's CPU kernels), images in order; channels run in parallel.
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

namespace {

/// One channel's mean and the sum of squared deviations over its batch * inner elements,
/// accumulated in double (as PyTorch's CPU batch norm), images in order.
template <typename T>
std::pair<double, double> channelStatistics(const T *x, int64_t batch, int64_t channels,
                                            int64_t inner, int64_t c) {
  const double count = double(batch) * double(inner);
  double sum = 0;
  for (int64_t n = 0; n < batch; ++n) {
    const T *row = x + (n * channels + c) * inner;
    for (int64_t i = 0; i < inner; ++i)
      sum += double(row[i]);
  }
  const double mean = sum / count;
  double squares = 0;
  for (int64_t n = 0; n < batch; ++n) {
    const T *row = x + (n * channels + c) * inner;
    for (int64_t i = 0; i < inner; ++i)
      squares += (double(row[i]) - mean) * (double(row[i]) - mean);
  }
  return {mean, squares};
}

} // namespace

template <typename T>
void batchNorm(const T *x, int64_t batch, int64_t channels, int64_t inner, const T *gamma,
               const T *beta, const T *runningMean, const T *runningVar, double epsilon,
               bool training, T *y) {
  const double count = double(batch) * double(inner);
  parallelFor(channels, 1, [&](int64_t begin, int64_t end) {
    for (int64_t c = begin; c < end; ++c) {
      double mean = double(runningMean[c]), var = double(runningVar[c]);
      if (training) {
        auto [batchMean, squares] = channelStatistics(x, batch, channels, inner, c);
        mean = batchMean;
        var = squares / count;
      }
      const T invStd = T(1 / std::sqrt(var + epsilon));
      const T m = T(mean);
      for (int64_t n = 0; n < batch; ++n) {
        const T *in = x + (n * channels + c) * inner;
        T *out = y + (n * channels + c) * inner;
        for (int64_t i = 0; i < inner; ++i)
          out[i] = (in[i] - m) * invStd * gamma[c] + beta[c];
      }
    }
  });
}

template <typename T>
void batchNormGrad(const T *x, int64_t batch, int64_t channels, int64_t inner, const T *gamma,
                   const T *dy, double epsilon, T *dx, T *dgamma, T *dbeta) {
  const double count = double(batch) * double(inner);
  parallelFor(channels, 1, [&](int64_t begin, int64_t end) {
    for (int64_t c = begin; c < end; ++c) {
      auto [mean, squares] = channelStatistics(x, batch, channels, inner, c);
      const double invStd = 1 / std::sqrt(squares / count + epsilon);
      // sum dy and sum dy * (x - mean), in double.
      double sumDy = 0, dot = 0;
      for (int64_t n = 0; n < batch; ++n) {
        const T *in = x + (n * channels + c) * inner;
        const T *g = dy + (n * channels + c) * inner;
        for (int64_t i = 0; i < inner; ++i) {
          sumDy += double(g[i]);
          dot += double(g[i]) * (double(in[i]) - mean);
        }
      }
      dbeta[c] = T(sumDy);
      dgamma[c] = T(dot * invStd);
      // dx = gamma invstd (dy - mean(dy) - (x - mean) invstd^2 mean(dy (x - mean))).
      const T meanDy = T(sumDy / count), k = T(dot * invStd * invStd / count);
      const T scale = T(invStd) * gamma[c], m = T(mean);
      for (int64_t n = 0; n < batch; ++n) {
        const T *in = x + (n * channels + c) * inner;
        const T *g = dy + (n * channels + c) * inner;
        T *out = dx + (n * channels + c) * inner;
        for (int64_t i = 0; i < inner; ++i)
          out[i] = (g[i] - meanDy - (in[i] - m) * k) * scale;
      }
    }
  });
}

template <typename T>
void updateRunningStats(const T *x, int64_t batch, int64_t channels, int64_t inner,
                        double momentum, T *mean, T *var, T *count) {
  const double elements = double(batch) * double(inner);
  parallelFor(channels, 1, [&](int64_t begin, int64_t end) {
    for (int64_t c = begin; c < end; ++c) {
      auto [batchMean, squares] = channelStatistics(x, batch, channels, inner, c);
      // PyTorch's unbiased estimate (the biased one for a single element).
      const double unbiased = squares / std::max(elements - 1, 1.0);
      mean[c] = T((1 - momentum) * double(mean[c]) + momentum * batchMean);
      var[c] = T((1 - momentum) * double(var[c]) + momentum * unbiased);
    }
  });
  if (count)
    *count += T(1);
}

#define AMPC_BATCH_NORM_KERNELS(T)                                                                 \
  template void batchNorm<T>(const T *, int64_t, int64_t, int64_t, const T *, const T *,           \
                             const T *, const T *, double, bool, T *);                             \
  template void batchNormGrad<T>(const T *, int64_t, int64_t, int64_t, const T *, const T *,       \
                                 double, T *, T *, T *);                                           \
  template void updateRunningStats<T>(const T *, int64_t, int64_t, int64_t, double, T *, T *, T *);
AMPC_BATCH_NORM_KERNELS(float)
AMPC_BATCH_NORM_KERNELS(double)
#undef AMPC_BATCH_NORM_KERNELS

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
