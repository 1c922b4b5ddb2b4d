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

#include <vector>

namespace ampc::cpu::kernels {

namespace {

/// The sizes of one packed problem: \p batch entries of \p tokens rows of `parts` x heads x
/// headDim columns.
struct Packed {
  int64_t batch, tokens, heads, headDim;

  int64_t width(int64_t parts) const { return parts * heads * headDim; }
  /// Copies part \p part of \p packed ([batch, tokens, parts x heads x headDim]) into \p slices
  /// ([batch, heads, tokens, headDim]), or back when \p toPacked.
  template <typename T>
  void move(T *packed, int64_t parts, int64_t part, T *slices, bool toPacked) const {
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t t = 0; t < tokens; ++t)
        for (int64_t h = 0; h < heads; ++h) {
          T *row = packed + (b * tokens + t) * width(parts) + (part * heads + h) * headDim;
          T *slice = slices + ((b * heads + h) * tokens + t) * headDim;
          for (int64_t d = 0; d < headDim; ++d) {
            if (toPacked)
              row[d] = slice[d];
            else
              slice[d] = row[d];
          }
        }
  }
  int64_t sliceElements() const { return batch * heads * tokens * headDim; }
};

} // namespace

template <typename T>
void qkvAttention(const T *qkv, int64_t batch, int64_t tokens, int64_t heads, int64_t headDim,
                  double scale, bool causal, T *out, T *lse) {
  const Packed packed{batch, tokens, heads, headDim};
  std::vector<T> q(packed.sliceElements()), k(q.size()), v(q.size()), o(q.size());
  T *source = const_cast<T *>(qkv); // read only: move() copies out of it
  packed.move(source, 3, 0, q.data(), false);
  packed.move(source, 3, 1, k.data(), false);
  packed.move(source, 3, 2, v.data(), false);
  attention(q.data(), k.data(), v.data(), batch * heads, tokens, tokens, headDim, headDim, scale,
            causal, o.data(), lse);
  packed.move(out, 1, 0, o.data(), true);
}

template <typename T>
void qkvAttentionGrad(const T *qkv, const T *dy, int64_t batch, int64_t tokens, int64_t heads,
                      int64_t headDim, double scale, bool causal, T *dqkv) {
  const Packed packed{batch, tokens, heads, headDim};
  std::vector<T> q(packed.sliceElements()), k(q.size()), v(q.size()), dO(q.size());
  std::vector<T> dq(q.size()), dk(q.size()), dv(q.size());
  T *source = const_cast<T *>(qkv);
  packed.move(source, 3, 0, q.data(), false);
  packed.move(source, 3, 1, k.data(), false);
  packed.move(source, 3, 2, v.data(), false);
  packed.move(const_cast<T *>(dy), 1, 0, dO.data(), false);
  attentionGrad(q.data(), k.data(), v.data(), dO.data(), batch * heads, tokens, tokens, headDim,
                headDim, scale, causal, dq.data(), dk.data(), dv.data());
  packed.move(dqkv, 3, 0, dq.data(), true);
  packed.move(dqkv, 3, 1, dk.data(), true);
  packed.move(dqkv, 3, 2, dv.data(), true);
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
