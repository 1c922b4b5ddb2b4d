//===- QkvAttentionKernels.cpp - Attention over a packed q, k, v projection --===//
//
// qkv_attention reads q, k and v side by side in one [batch, T, 3 H Dh] tensor and writes its
// result as [batch, T, H Dh]: exactly graph.attention over the [batch, H, T, Dh] slices that
// splitting, reshaping and transposing that tensor give. The reference does just that: it
// gathers the three slices into head-major scratch, runs attention() / attentionGrad(), and
// scatters the result (the gradient: dq, dk, dv side by side again). The moves are exact, so
// the values are those of the unpacked graph bit for bit.
//
//===----------------------------------------------------------------------===//

#include "runtime/cpu/Kernels.h"

#include <algorithm>
#include <vector>

namespace ampc::cpu::kernels {

namespace {

/// The sizes of one packed problem: \p batch entries of \p tokens rows of `parts` x heads x
/// headDim columns.
struct Packed {
  int64_t batch, tokens, heads, headDim;

  int64_t width(int64_t parts) const { return parts * heads * headDim; }
  /// Calls \p move(packedOffset, sliceOffset) for the first element of every head row of part
  /// \p part of a [batch, tokens, parts x heads x headDim] tensor and of its place in the
  /// [batch, heads, tokens, headDim] slices; each row is headDim contiguous elements in both.
  template <typename F> void rows(int64_t parts, int64_t part, F move) const {
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t t = 0; t < tokens; ++t)
        for (int64_t h = 0; h < heads; ++h)
          move((b * tokens + t) * width(parts) + (part * heads + h) * headDim,
               ((b * heads + h) * tokens + t) * headDim);
  }
  /// Part \p part of \p packed into \p slices.
  template <typename T> void gather(const T *packed, int64_t parts, int64_t part, T *slices) const {
    rows(parts, part, [&](int64_t from, int64_t to) {
      std::copy(packed + from, packed + from + headDim, slices + to);
    });
  }
  /// \p slices into part \p part of \p packed.
  template <typename T> void scatter(const T *slices, int64_t parts, int64_t part, T *packed) const {
    rows(parts, part, [&](int64_t to, int64_t from) {
      std::copy(slices + from, slices + from + headDim, packed + to);
    });
  }
  int64_t sliceElements() const { return batch * heads * tokens * headDim; }
};

} // namespace

template <typename T>
void qkvAttention(const T *qkv, int64_t batch, int64_t tokens, int64_t heads, int64_t headDim,
                  double scale, bool causal, T *out, T *lse) {
  const Packed packed{batch, tokens, heads, headDim};
  std::vector<T> q(packed.sliceElements()), k(q.size()), v(q.size()), o(q.size());
  packed.gather(qkv, 3, 0, q.data());
  packed.gather(qkv, 3, 1, k.data());
  packed.gather(qkv, 3, 2, v.data());
  attention(q.data(), k.data(), v.data(), batch * heads, tokens, tokens, headDim, headDim, scale,
            causal, o.data(), lse);
  packed.scatter(o.data(), 1, 0, out);
}

template <typename T>
void qkvAttentionGrad(const T *qkv, const T *dy, int64_t batch, int64_t tokens, int64_t heads,
                      int64_t headDim, double scale, bool causal, T *dqkv) {
  const Packed packed{batch, tokens, heads, headDim};
  std::vector<T> q(packed.sliceElements()), k(q.size()), v(q.size()), dO(q.size());
  std::vector<T> dq(q.size()), dk(q.size()), dv(q.size());
  packed.gather(qkv, 3, 0, q.data());
  packed.gather(qkv, 3, 1, k.data());
  packed.gather(qkv, 3, 2, v.data());
  packed.gather(dy, 1, 0, dO.data());
  attentionGrad(q.data(), k.data(), v.data(), dO.data(), batch * heads, tokens, tokens, headDim,
                headDim, scale, causal, dq.data(), dk.data(), dv.data());
  packed.scatter(dq.data(), 3, 0, dqkv);
  packed.scatter(dk.data(), 3, 1, dqkv);
  packed.scatter(dv.data(), 3, 2, dqkv);
}

template void qkvAttention<float>(const float *, int64_t, int64_t, int64_t, int64_t, double, bool,
                                  float *, float *);
template void qkvAttention<double>(const double *, int64_t, int64_t, int64_t, int64_t, double,
                                   bool, double *, double *);
template void qkvAttentionGrad<float>(const float *, const float *, int64_t, int64_t, int64_t,
                                      int64_t, double, bool, float *);
template void qkvAttentionGrad<double>(const double *, const double *, int64_t, int64_t, int64_t,
                                       int64_t, double, bool, double *);

} // namespace ampc::cpu::kernels
