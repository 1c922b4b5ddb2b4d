//===- AttentionKernel.cpp - Scaled dot-product attention, row by row -----===//
//
// out[b, i, :] = sum_j p[i, j] v[b, j, :] with p[i, :] = softmax_j(scale *
// q[b, i, :] . k[b, j, :]), causal rows seeing only j <= i + (S - T); and,
// when asked for, lse[b, i] = log sum_j exp(scale q[b, i, :] . k[b, j, :])
// over the visible keys (what a flash backward rebuilds p from).
//
// Work items are (batch entry, block of query rows). Each item copies k[b]
// transposed into a per-thread [headDim x keys] scratch so the score loop
// runs over contiguous keys (and vectorises), then handles its query rows
// one at a time with one row of scores: memory per thread is O(keys *
// headDim), never a full T x S score matrix. Every dot product is summed in
// head-dim order and every output in key order, in the compute type.
//
//===----------------------------------------------------------------------===//

#include "runtime/cpu/AttentionRows.h"
#include "runtime/cpu/Kernels.h"
#include "runtime/cpu/ThreadPool.h"

#include <algorithm>
#include <vector>

namespace ampc::cpu::kernels {

template <typename T>
void attention(const T *q, const T *k, const T *v, int64_t batch, int64_t queries, int64_t keys,
               int64_t headDim, int64_t valueDim, double scale, bool causal, T *out, T *lse) {
  constexpr int64_t kQueryBlock = 32;
  const int64_t blocksPerEntry = (queries + kQueryBlock - 1) / kQueryBlock;
  const T scaleT = static_cast<T>(scale);
  parallelFor(batch * blocksPerEntry, 1, [&](int64_t begin, int64_t end) {
    thread_local std::vector<T> keysTransposed, scores;
    keysTransposed.resize(headDim * keys);
    scores.resize(keys);
    int64_t loadedEntry = -1;
    for (int64_t item = begin; item < end; ++item) {
      const int64_t b = item / blocksPerEntry;
      const int64_t firstQuery = (item % blocksPerEntry) * kQueryBlock;
      const int64_t lastQuery = std::min(queries, firstQuery + kQueryBlock);
      const T *kEntry = k + b * keys * headDim;
      const T *vEntry = v + b * keys * valueDim;
      if (b != loadedEntry) {
        transposeRows(kEntry, keys, headDim, keysTransposed.data());
        loadedEntry = b;
      }
      for (int64_t i = firstQuery; i < lastQuery; ++i) {
        const T *qRow = q + (b * queries + i) * headDim;
        T *outRow = out + (b * queries + i) * valueDim;
        // Rows before the first visible key (more queries than keys) see none: valid 0.
        const int64_t valid =
            causal ? std::clamp<int64_t>(i + (keys - queries) + 1, 0, keys) : keys;
        // scores[j] = scale * (q_i . k_j) for the visible keys.
        dotWithColumns(qRow, keysTransposed.data(), keys, headDim, valid, scores.data());
        for (int64_t j = 0; j < valid; ++j)
          scores[j] *= scaleT;
        softmaxRow(scores.data(), valid, valid, scores.data(),
                   lse ? lse + b * queries + i : nullptr);
        // out_i = sum_j p_ij v_j over the visible keys.
        std::fill(outRow, outRow + valueDim, T(0));
        for (int64_t j = 0; j < valid; ++j) {
          const T probability = scores[j];
          const T *vRow = vEntry + j * valueDim;
          for (int64_t e = 0; e < valueDim; ++e)
            outRow[e] += probability * vRow[e];
        }
      }
    }
  });
}

template void attention<float>(const float *, const float *, const float *, int64_t, int64_t,
                               int64_t, int64_t, int64_t, double, bool, float *, float *);
template void attention<double>(const double *, const double *, const double *, int64_t, int64_t,
                                int64_t, int64_t, int64_t, double, bool, double *, double *);

} // namespace ampc::cpu::kernels
