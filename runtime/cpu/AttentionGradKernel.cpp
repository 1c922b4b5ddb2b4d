//===- AttentionGradKernel.cpp - Gradient of scaled dot-product attention -===//
//
// For each batch entry, with S = scale q k^T (causal keys masked) and
// P = softmax(S) recomputed exactly as the forward kernel computes it:
//   dv = P^T dy, dP = dy v^T, dS = P * (dP - rowsum(dP * P)),
//   dq = scale dS k, dk = scale dS^T q.
// Dot products over the head dims are summed in the compute type in index
// order (as the forward's scores); the sums over queries or keys (dv, dk,
// dq, and the row sums) accumulate in double in increasing index order.
// Batch entries are independent and run in parallel; each copies its k and v
// transposed ([dim x keys]) so that the dot products of a query row with all
// keys run over contiguous keys (and vectorise, each still summed in dim
// order), and handles its query rows one at a time with one row of
// probabilities (memory O(keys * headDim) per thread), so results do not
// depend on the thread count.
//
//===----------------------------------------------------------------------===//

#include "runtime/cpu/AttentionRows.h"
#include "runtime/cpu/Kernels.h"
#include "runtime/cpu/ThreadPool.h"

#include <algorithm>
#include <type_traits>
#include <vector>

namespace ampc::cpu::kernels {
namespace {

/// attentionGrad's operands and shape.
template <typename T> struct GradArgs {
  const T *q, *k, *v, *dy;
  int64_t queries, keys, headDim, valueDim;
  double scale;
  bool causal;
  T *dq, *dk, *dv;
};

/// Batch entries [begin, end) of attentionGrad. Always inlined, so that it is compiled for the
/// instruction set of the function that calls it.
template <typename T>
[[gnu::always_inline]] inline void gradEntries(const GradArgs<T> &args, int64_t begin,
                                               int64_t end) {
  const auto [q, k, v, dy, queries, keys, headDim, valueDim, scale, causal, dq, dk, dv] = args;
  const T scaleT = static_cast<T>(scale);
  std::vector<T> probabilities(keys), scores(keys);
  std::vector<T> keysTransposed(headDim * keys), valuesTransposed(valueDim * keys);
  std::vector<double> dkTotal(keys * headDim), dvTotal(keys * valueDim), dqTotal(headDim);
  for (int64_t b = begin; b < end; ++b) {
    const T *qEntry = q + b * queries * headDim;
    const T *kEntry = k + b * keys * headDim;
    const T *vEntry = v + b * keys * valueDim;
    const T *dyEntry = dy + b * queries * valueDim;
    transposeRows(kEntry, keys, headDim, keysTransposed.data());
    transposeRows(vEntry, keys, valueDim, valuesTransposed.data());
    std::fill(dkTotal.begin(), dkTotal.end(), 0.0);
    std::fill(dvTotal.begin(), dvTotal.end(), 0.0);
    for (int64_t i = 0; i < queries; ++i) {
      // Rows before the first visible key (more queries than keys) see none: valid 0.
      const int64_t valid = causal ? std::clamp<int64_t>(i + (keys - queries) + 1, 0, keys) : keys;
      const T *qRow = qEntry + i * headDim;
      const T *dyRow = dyEntry + i * valueDim;
      T *p = probabilities.data();
      T *dS = scores.data();
      // P: scores summed over the head dim in order, scaled, softmaxed.
      dotWithColumns(qRow, keysTransposed.data(), keys, headDim, valid, p);
      for (int64_t j = 0; j < valid; ++j)
        p[j] *= scaleT;
      softmaxRow(p, keys, valid, p);
      // dP[i, j] = dy_i . v_j, then dS = P (dP - sum_j dP P).
      dotWithColumns(dyRow, valuesTransposed.data(), keys, valueDim, valid, dS);
      double rowTotal = 0;
      for (int64_t j = 0; j < valid; ++j)
        rowTotal += static_cast<double>(dS[j] * p[j]);
      const T rowSum = static_cast<T>(rowTotal);
      for (int64_t j = 0; j < valid; ++j)
        dS[j] = p[j] * (dS[j] - rowSum);
      for (int64_t j = valid; j < keys; ++j)
        dS[j] = T(0);
      // dq_i = scale sum_j dS[i, j] k_j.
      std::fill(dqTotal.begin(), dqTotal.end(), 0.0);
      for (int64_t j = 0; j < valid; ++j) {
        const T weight = dS[j];
        for (int64_t d = 0; d < headDim; ++d)
          dqTotal[d] += static_cast<double>(weight * kEntry[j * headDim + d]);
      }
      T *dqRow = dq + (b * queries + i) * headDim;
      for (int64_t d = 0; d < headDim; ++d)
        dqRow[d] = static_cast<T>(dqTotal[d]) * scaleT;
      // dk_j += dS[i, j] q_i and dv_j += P[i, j] dy_i, in increasing i.
      for (int64_t j = 0; j < valid; ++j) {
        const T weight = dS[j], probability = p[j];
        double *dkRow = dkTotal.data() + j * headDim;
        double *dvRow = dvTotal.data() + j * valueDim;
        for (int64_t d = 0; d < headDim; ++d)
          dkRow[d] += static_cast<double>(weight * qRow[d]);
        for (int64_t e = 0; e < valueDim; ++e)
          dvRow[e] += static_cast<double>(probability * dyRow[e]);
      }
    }
    T *dkEntry = dk + b * keys * headDim;
    T *dvEntry = dv + b * keys * valueDim;
    for (int64_t x = 0; x < keys * headDim; ++x)
      dkEntry[x] = static_cast<T>(dkTotal[x]) * scaleT;
    for (int64_t x = 0; x < keys * valueDim; ++x)
      dvEntry[x] = static_cast<T>(dvTotal[x]);
  }
}

void gradEntriesDefault(const GradArgs<float> &args, int64_t begin, int64_t end) {
  gradEntries(args, begin, end);
}
void gradEntriesDefault(const GradArgs<double> &args, int64_t begin, int64_t end) {
  gradEntries(args, begin, end);
}
#if AMPC_CPU_X86
/// The f32 version in AVX-512 where the CPU has it: the same operations in the same order.
[[gnu::target("avx512f")]] void gradEntriesAvx512(const GradArgs<float> &args, int64_t begin,
                                                  int64_t end) {
  gradEntries(args, begin, end);
}
#endif

} // namespace

template <typename T>
void attentionGrad(const T *q, const T *k, const T *v, const T *dy, int64_t batch, int64_t queries,
                   int64_t keys, int64_t headDim, int64_t valueDim, double scale, bool causal,
                   T *dq, T *dk, T *dv) {
  const GradArgs<T> args{q, k, v, dy, queries, keys, headDim, valueDim, scale, causal, dq, dk, dv};
  parallelFor(batch, 1, [&](int64_t begin, int64_t end) {
#if AMPC_CPU_X86
    if constexpr (std::is_same_v<T, float>) {
      if (simdIsa() == SimdIsa::Avx512)
        return gradEntriesAvx512(args, begin, end);
    }
#endif
    gradEntriesDefault(args, begin, end);
  });
}

template void attentionGrad<float>(const float *, const float *, const float *, const float *,
                                   int64_t, int64_t, int64_t, int64_t, int64_t, double, bool,
                                   float *, float *, float *);
template void attentionGrad<double>(const double *, const double *, const double *, const double *,
                                    int64_t, int64_t, int64_t, int64_t, int64_t, double, bool,
                                    double *, double *, double *);

} // namespace ampc::cpu::kernels
