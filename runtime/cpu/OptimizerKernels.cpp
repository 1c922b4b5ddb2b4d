//===- OptimizerKernels.cpp - Accumulation, norms, schedules, optimizers --===//
//
// The training step's kernels. Scalar coefficients (learning rate, bias
// corrections, clip factor) are computed in double and converted to the
// compute type once; per-element updates run in the compute type, in the
// order of the torch.optim formulas they reproduce. The global norm sums
// squares in double in buffer and element order, on one thread, so it does
// not depend on the thread count.
//
//===----------------------------------------------------------------------===//

#include "runtime/cpu/Kernels.h"
#include "runtime/cpu/ThreadPool.h"

#include <algorithm>
#include <atomic>
#include <cmath>

namespace ampc::cpu::kernels {
namespace {

/// Elements per parallel chunk for cheap per-element work.
constexpr int64_t kElementGrain = 1 << 15;

} // namespace

template <typename T> void accumulate(T *acc, const T *g, int64_t count) {
  parallelFor(count, kElementGrain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i)
      acc[i] += g[i];
  });
}

template <typename T> bool accumulateUnscaled(T *acc, const T *g, T scale, int64_t count) {
  // Each chunk reports to one flag: the result is an OR, so it does not
  // depend on how the elements are split across threads.
  std::atomic<bool> nonFinite{false};
  parallelFor(count, kElementGrain, [&](int64_t begin, int64_t end) {
    bool chunkNonFinite = false;
    for (int64_t i = begin; i < end; ++i) {
      const T v = g[i] / scale;
      chunkNonFinite = chunkNonFinite || !std::isfinite(v);
      acc[i] += v;
    }
    if (chunkNonFinite)
      nonFinite.store(true, std::memory_order_relaxed);
  });
  return nonFinite.load(std::memory_order_relaxed);
}

template <typename T> void addSquares(const T *x, int64_t count, double &total) {
  for (int64_t i = 0; i < count; ++i) {
    const double value = static_cast<double>(x[i]);
    total += value * value;
  }
}

double scheduledLearningRate(const LrSchedule &schedule, uint64_t step, uint64_t totalSteps) {
  const double s = static_cast<double>(step);
  const double warmup = static_cast<double>(schedule.warmupSteps);
  if (s < warmup)
    return schedule.lr * (s + 1) / warmup;
  if (schedule.kind == 0)
    return schedule.lr;
  const double decay = schedule.decaySteps > 0 ? static_cast<double>(schedule.decaySteps)
                                               : static_cast<double>(totalSteps);
  const double progress = std::clamp((s - warmup) / std::max(1.0, decay - warmup), 0.0, 1.0);
  const double pi = 3.14159265358979323846;
  return schedule.minLr + 0.5 * (1 + std::cos(pi * progress)) * (schedule.lr - schedule.minLr);
}

double clipCoefficient(double clipNorm, double gradNorm) {
  if (clipNorm <= 0)
    return 1.0;
  // clamp(max=1) keeps a NaN coefficient (from a NaN norm), as torch does,
  // so a diverged step poisons every parameter instead of passing silently.
  const double coefficient = clipNorm / (gradNorm + 1e-6);
  return coefficient < 1.0 || coefficient != coefficient ? coefficient : 1.0;
}

template <typename T>
void adamW(const AdamWConfig &config, T *param, T *grad, T *m, T *v, int64_t count) {
  const double t = static_cast<double>(config.t);
  const T clip = static_cast<T>(config.clip);
  const T decay = static_cast<T>(1 - config.lr * config.weightDecay);
  const T beta1 = static_cast<T>(config.beta1);
  const T beta2 = static_cast<T>(config.beta2);
  const T oneMinusBeta1 = static_cast<T>(1 - config.beta1);
  const T oneMinusBeta2 = static_cast<T>(1 - config.beta2);
  const T stepSize = static_cast<T>(config.lr / (1 - std::pow(config.beta1, t)));
  const T correction2Sqrt = static_cast<T>(std::sqrt(1 - std::pow(config.beta2, t)));
  const T eps = static_cast<T>(config.eps);
  parallelFor(count, kElementGrain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const T g = grad[i] * clip;
      T p = param[i] * decay;
      m[i] = beta1 * m[i] + oneMinusBeta1 * g;
      v[i] = beta2 * v[i] + oneMinusBeta2 * (g * g);
      const T denominator = std::sqrt(v[i]) / correction2Sqrt + eps;
      param[i] = p - stepSize * (m[i] / denominator);
      grad[i] = T(0);
    }
  });
}

template <typename T>
void sgd(const SgdConfig &config, T *param, T *grad, T *buffer, int64_t count) {
  const T clip = static_cast<T>(config.clip);
  const T lr = static_cast<T>(config.lr);
  const T momentum = static_cast<T>(config.momentum);
  const T weightDecay = static_cast<T>(config.weightDecay);
  parallelFor(count, kElementGrain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      // The first step's buffer is 0, so this also gives torch's buf = g.
      const T g = grad[i] * clip + weightDecay * param[i];
      buffer[i] = momentum * buffer[i] + g;
      param[i] = param[i] - lr * buffer[i];
      grad[i] = T(0);
    }
  });
}

template void accumulate<float>(float *, const float *, int64_t);
template void accumulate<double>(double *, const double *, int64_t);
template bool accumulateUnscaled<float>(float *, const float *, float, int64_t);
template bool accumulateUnscaled<double>(double *, const double *, double, int64_t);
template void addSquares<float>(const float *, int64_t, double &);
template void addSquares<double>(const double *, int64_t, double &);
template void adamW<float>(const AdamWConfig &, float *, float *, float *, float *, int64_t);
template void adamW<double>(const AdamWConfig &, double *, double *, double *, double *, int64_t);
template void sgd<float>(const SgdConfig &, float *, float *, float *, int64_t);
template void sgd<double>(const SgdConfig &, double *, double *, double *, int64_t);

} // namespace ampc::cpu::kernels
