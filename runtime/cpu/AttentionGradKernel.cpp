//===- AttentionGradKernel.cpp - Gradient of scaled dot-product attention -===//
//
// For each batch entry, with S = scale q k^T (causal keys masked) and
// P = softmax(S) recomputed exactly as the forward kernel computes it:
//   dv = P^T dy, dP = dy v^T, dS = P * (dP - rowsum(dP * P)),
//   dq = scale dS k, dk = scale dS^T q.
// Dot products over the head dims are summed in the compute type in index
// order (as the forward's scores); the sums over queries or keys (dv, dk,
// dq, and the row sums) accumulate in double in increasing index order.
// Batch entries are independent and run in parallel; each handles its query
// rows one at a time with one row of probabilities (memory O(keys * headDim)
// per thread), so results do not depend on the thread count.
//
//===----------------------------------------------------------------------===//

#include "runtime/cpu/Kernels.h"
#include "runtime/cpu/ThreadPool.h"

#include <algorithm>
#include <vector>

namespace ampc::cpu::kernels {

template <typename T>
void attentionGrad(const T *q, const T *k, const T *v, const T *dy, int64_t batch, int64_t queries,
                   int64_t keys, int64_t headDim, int64_t valueDim, double scale, bool causal,
                   T *dq, T *dk, T *dv) {
  const T scaleT = static_cast<T>(scale);
  parallelFor(batch, 1, [&](int64_t begin, int64_t end) {
    std::vector<T> probabilities(keys), scores(keys);
    std::vector<double> dkTotal(keys * headDim), dvTotal(keys * valueDim), dqTotal(headDim);
    for (int64_t b = begin; b < end; ++b) {
      const T *qEntry = q + b * queries * headDim;
      const T *kEntry = k + b * keys * headDim;
      const T *vEntry = v + b * keys * valueDim;
      const T *dyEntry = dy + b * queries * valueDim;
      std::fill(dkTotal.begin(), dkTotal.end(), 0.0);
      std::fill(dvTotal.begin(), dvTotal.end(), 0.0);
      for (int64_t i = 0; i < queries; ++i) {
        // Rows before the first visible key (more queries than keys) see none: valid 0.
        const int64_t valid =
            causal ? std::clamp<int64_t>(i + (keys - queries) + 1, 0, keys) : keys;
        const T *qRow = qEntry + i * headDim;
        const T *dyRow = dyEntry + i * valueDim;
        T *p = probabilities.data();
        T *dS = scores.data();
        // P: scores summed over the head dim in order, scaled, softmaxed.
        for (int64_t j = 0; j < valid; ++j) {
          T dot = 0;
          for (int64_t d = 0; d < headDim; ++d)
            dot += qRow[d] * kEntry[j * headDim + d];
          p[j] = dot * scaleT;
        }
        softmaxRow(p, keys, valid, p);
        // dP[i, j] = dy_i . v_j, then dS = P (dP - sum_j dP P).
        double rowTotal = 0;
        for (int64_t j = 0; j < valid; ++j) {
          T dot = 0;
          for (int64_t e = 0; e < valueDim; ++e)
            dot += dyRow[e] * vEntry[j * valueDim + e];
          dS[j] = dot;
          rowTotal += static_cast<double>(dot * p[j]);
        }
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
  });
}

template void attentionGrad<float>(const float *, const float *, const float *, const float *,
                                   int64_t, int64_t, int64_t, int64_t, int64_t, double, bool,
                                   float *, float *, float *);
template void attentionGrad<double>(const double *, const double *, const double *, const double *,
                                    int64_t, int64_t, int64_t, int64_t, int64_t, double, bool,
                                    double *, double *, double *);

} // namespace ampc::cpu::kernels
