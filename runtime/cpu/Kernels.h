//===- Kernels.h - CPU reference kernels, one family per source file ------===//
//
// Each kernel computes one plan opcode on contiguous row-major arrays of the
// compute type T (float for Precision::F32, double for Precision::F64; the
// layout kernels also run on int64_t). Kernels do not round to the result's
// storage dtype: the executor does that once per stored value. Kernels that
// can fail on data (ids, labels) check all of it before any parallel work, so
// the reported offending element does not depend on thread timing, and throw
// KernelError; the executor adds the instruction and location.
//
//===----------------------------------------------------------------------===//

#ifndef AMPC_RUNTIME_CPU_KERNELS_H
#define AMPC_RUNTIME_CPU_KERNELS_H

#include "runtime/plan/ShapeRules.h"

#include <cstdint>
#include <stdexcept>
#include <vector>

namespace ampc::cpu::kernels {

using plan::Shape;

/// A data-dependent failure inside a kernel (id or label out of range).
class KernelError : public std::runtime_error {
public:
  using runtime_error::runtime_error;
};

//===----------------------------------------------------------------------===//
// Elementwise (ElementwiseKernels.cpp)
//===----------------------------------------------------------------------===//

enum class UnaryOp {
  Neg,
  Relu,
  Silu,
  Tanh,
  Exp,
  Log,
  Sqrt,
  Rsqrt,
  GeluErf,
  GeluTanh
};
enum class BinaryOp { Add, Sub, Mul, Div };

/// y[i] = op(x[i]) for i < count.
template <typename T> void unary(UnaryOp op, const T *x, T *y, int64_t count);

/// out = a op b with NumPy broadcasting of aShape and bShape to outShape.
template <typename T>
void binary(BinaryOp op, const T *a, const Shape &aShape, const T *b,
            const Shape &bShape, T *out, const Shape &outShape);

/// Training-mode dropout: y[e] = x[e] / (1 - p) if uniform01(seed, step,
/// stream, e) >= p, else 0.
template <typename T>
void dropout(const T *x, T *y, int64_t count, double p, uint64_t seed,
             uint64_t step, uint32_t stream);

//===----------------------------------------------------------------------===//
// MatMul (MatMulKernel.cpp)
//===----------------------------------------------------------------------===//

/// A strided matrix: element (i, j) is data[i * rowStride + j * colStride].
template <typename T> struct MatrixView {
  const T *data;
  int64_t rowStride, colStride;
};

/// c[m x n] (row-major, leading dim n) = a[m x k] * b[k x n]. Each element is
/// summed in increasing k order, exactly like a naive triple loop, whatever
/// the blocking and thread count.
template <typename T>
void gemm(int64_t m, int64_t n, int64_t k, MatrixView<T> a, MatrixView<T> b,
          T *c);

/// The MatMul opcode: optional transposes of the last two dims, broadcast
/// batch dims; out is [batch..., m, n].
template <typename T>
void matMul(const T *a, const Shape &aShape, bool transposeA, const T *b,
            const Shape &bShape, bool transposeB, T *out);

//===----------------------------------------------------------------------===//
// Layout (LayoutKernels.cpp); E is T or int64_t
//===----------------------------------------------------------------------===//

/// out[i] = in[offset + sum_d index_d(i) * inStrides[d]] over outShape: the
/// common core of transpose, slice and broadcast.
template <typename E>
void stridedCopy(const E *in, int64_t offset, const Shape &inStrides, E *out,
                 const Shape &outShape);

/// Result dim i = operand dim permutation[i].
template <typename E>
void transpose(const E *in, const Shape &inShape,
               const std::vector<int64_t> &permutation, E *out);

/// out = in[starts[0] : starts[0] + outShape[0], ...].
template <typename E>
void slice(const E *in, const Shape &inShape,
           const std::vector<int64_t> &starts, E *out, const Shape &outShape);

/// Concatenation of \p parts along \p axis.
template <typename E>
void concat(const std::vector<const E *> &parts,
            const std::vector<Shape> &partShapes, int64_t axis, E *out);

/// NumPy broadcast of in to outShape.
template <typename E>
void broadcast(const E *in, const Shape &inShape, E *out,
               const Shape &outShape);

/// out[r, :] = table[ids[r], :]; throws KernelError for an id outside
/// [0, rows).
template <typename T>
void embedding(const T *table, int64_t rows, int64_t width, const int64_t *ids,
               int64_t count, T *out);

//===----------------------------------------------------------------------===//
// Reductions (ReductionKernels.cpp)
//===----------------------------------------------------------------------===//

enum class ReduceOp { Sum, Mean, Max };

/// Reduces \p x over the sorted, unique \p axes; out has the reduced shape
/// (keepdims only changes the shape, not the data layout).
template <typename T>
void reduce(ReduceOp op, const T *x, const Shape &shape,
            const std::vector<int64_t> &axes, T *out);

//===----------------------------------------------------------------------===//
// Normalisation and softmax (NormKernels.cpp)
//===----------------------------------------------------------------------===//

/// y = (x - mean) / sqrt(var + eps) * gamma + beta over rows of \p width.
template <typename T>
void layerNorm(const T *x, int64_t rows, int64_t width, const T *gamma,
               const T *beta, double epsilon, T *y);

/// y = x / sqrt(mean(x^2) + eps) * gamma over rows of \p width.
template <typename T>
void rmsNorm(const T *x, int64_t rows, int64_t width, const T *gamma,
             double epsilon, T *y);

/// Softmax of one row of \p width entries over its first \p valid ones; the
/// rest are masked (probability 0).
template <typename T>
void softmaxRow(const T *x, int64_t width, int64_t valid, T *y);

/// Softmax over the last dim. When causal, with T = shape[-2] and S =
/// shape[-1], element [..., i, j] is masked (0) when j > i + (S - T).
template <typename T>
void softmax(const T *x, const Shape &shape, bool causal, T *y);

//===----------------------------------------------------------------------===//
// Attention (AttentionKernel.cpp)
//===----------------------------------------------------------------------===//

/// out[b] = softmax(scale * q[b] k[b]^T, causal) v[b] for each of \p batch
/// slices, q [queries, headDim], k [keys, headDim], v [keys, valueDim].
template <typename T>
void attention(const T *q, const T *k, const T *v, int64_t batch,
               int64_t queries, int64_t keys, int64_t headDim, int64_t valueDim,
               double scale, bool causal, T *out);

//===----------------------------------------------------------------------===//
// Losses (LossKernels.cpp)
//===----------------------------------------------------------------------===//

/// Cross-entropy of \p rows rows of \p classes logits against \p labels,
/// skipping rows labelled \p ignoreIndex; the mean over the rest (NaN if
/// none), or their sum. Throws KernelError for a label outside [0, classes)
/// that is not ignoreIndex.
template <typename T>
T crossEntropy(const T *logits, int64_t rows, int64_t classes,
               const int64_t *labels, int64_t ignoreIndex, bool sum);

/// mean((pred - target)^2).
template <typename T> T mseLoss(const T *pred, const T *target, int64_t count);

} // namespace ampc::cpu::kernels

#endif // AMPC_RUNTIME_CPU_KERNELS_H
