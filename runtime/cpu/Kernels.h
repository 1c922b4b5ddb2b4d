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

/// The unary elementwise opcodes (OpCodes.def), each named as its opcode, and
/// the two forms of gelu.
enum class UnaryOp {
#define AMPC_UNARY_OP(Name, ...) Name,
#include "runtime/plan/OpCodes.def"
  GeluErf,
  GeluTanh
};
/// The binary elementwise opcodes (OpCodes.def), each named as its opcode.
enum class BinaryOp {
#define AMPC_BINARY_OP(Name, ...) Name,
#include "runtime/plan/OpCodes.def"
};

/// y[i] = op(x[i]) for i < count.
template <typename T> void unary(UnaryOp op, const T *x, T *y, int64_t count);

/// out = a op b with NumPy broadcasting of aShape and bShape to outShape.
template <typename T>
void binary(BinaryOp op, const T *a, const Shape &aShape, const T *b, const Shape &bShape, T *out,
            const Shape &outShape);

/// Rounds each float of data[0, count) to bf16 (f16) in place: the bits of
/// numerics::roundToBF16 (roundToF16) element by element, in SIMD code for
/// every value but f16's subnormals, overflows and NaNs. Single-threaded:
/// the executor splits the work.
void roundFloatsToBF16(float *data, int64_t count);
void roundFloatsToF16(float *data, int64_t count);

/// Training-mode dropout: y[e] = x[e] / (1 - p) if uniform01(seed, step,
/// stream, e) >= p, else 0.
template <typename T>
void dropout(const T *x, T *y, int64_t count, double p, uint64_t seed, uint64_t step,
             uint32_t stream);

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
/// The f32 version runs the widest SIMD tile the CPU has (simdIsa()).
template <typename T>
void gemm(int64_t m, int64_t n, int64_t k, MatrixView<T> a, MatrixView<T> b, T *c);
template <>
void gemm<float>(int64_t m, int64_t n, int64_t k, MatrixView<float> a, MatrixView<float> b,
                 float *c);
template <>
void gemm<double>(int64_t m, int64_t n, int64_t k, MatrixView<double> a, MatrixView<double> b,
                  double *c);

/// Whether the kernels have x86-64 code for AVX2 and AVX-512F beside the
/// baseline's (target attributes and __builtin_cpu_supports are x86's).
#if defined(__x86_64__) && defined(__GNUC__)
#define AMPC_CPU_X86 1
#else
#define AMPC_CPU_X86 0
#endif

/// The instruction sets the f32 kernels are compiled for (gemm's register
/// tiles, attentionGrad). Each gives the same bits: only the speed differs.
enum class SimdIsa { Sse2, Avx2, Avx512 };
const char *simdIsaName(SimdIsa isa);
/// Whether this CPU runs \p isa.
bool simdIsaSupported(SimdIsa isa);
/// The one the kernels use: the widest this CPU runs, unless setSimdIsa or
/// AMPC_CPU_ISA (sse2, avx2 or avx512f) chose a narrower one.
SimdIsa simdIsa();
/// Makes the kernels use \p isa, which the CPU must run (tests compare them).
void setSimdIsa(SimdIsa isa);
/// gemm<float> with the tile of \p isa, which the CPU must support.
void gemmWith(SimdIsa isa, int64_t m, int64_t n, int64_t k, MatrixView<float> a,
              MatrixView<float> b, float *c);

/// The MatMul opcode: optional transposes of the last two dims, broadcast
/// batch dims; out is [batch..., m, n].
template <typename T>
void matMul(const T *a, const Shape &aShape, bool transposeA, const T *b, const Shape &bShape,
            bool transposeB, T *out);

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
void transpose(const E *in, const Shape &inShape, const std::vector<int64_t> &permutation, E *out);

/// out = in[starts[0] : starts[0] + outShape[0], ...].
template <typename E>
void slice(const E *in, const Shape &inShape, const std::vector<int64_t> &starts, E *out,
           const Shape &outShape);

/// Concatenation of \p parts along \p axis.
template <typename E>
void concat(const std::vector<const E *> &parts, const std::vector<Shape> &partShapes, int64_t axis,
            E *out);

/// NumPy broadcast of in to outShape.
template <typename E>
void broadcast(const E *in, const Shape &inShape, E *out, const Shape &outShape);

/// Throws KernelError for the first of ids[0..count) (in index order)
/// outside [0, rows).
void checkIds(const int64_t *ids, int64_t count, int64_t rows);

/// out[r, :] = table[ids[r], :]; throws KernelError for an id outside
/// [0, rows).
template <typename T>
void embedding(const T *table, int64_t rows, int64_t width, const int64_t *ids, int64_t count,
               T *out);

//===----------------------------------------------------------------------===//
// Convolution and pooling over NCHW images (ConvKernels.cpp)
//===----------------------------------------------------------------------===//

/// y [N, O, OH, OW] = conv2d(x [N, C, H, W], w [O, C / groups, KH, KW]) over \p window (the
/// window's kernel is the weight's). Each output element is one dot product summed in
/// (channel, kernel row, kernel column) order, whatever the thread count.
template <typename T>
void conv2d(const T *x, const Shape &xShape, const T *w, const Shape &wShape,
            const plan::Window2d &window, int64_t groups, T *y, const Shape &yShape);

/// dx [N, C, H, W] from dy [N, O, OH, OW] and w: the transposed convolution.
template <typename T>
void conv2dGradInput(const T *dy, const Shape &dyShape, const T *w, const Shape &wShape,
                     const plan::Window2d &window, int64_t groups, T *dx, const Shape &dxShape);

/// dw [O, C / groups, KH, KW] from x and dy, summed over the batch in order.
template <typename T>
void conv2dGradWeight(const T *x, const Shape &xShape, const T *dy, const Shape &dyShape,
                      const plan::Window2d &window, int64_t groups, T *dw, const Shape &dwShape);

/// y [N, C, OH, OW]: each window's maximum (padding never wins; the first maximum in row-major
/// order, or the last NaN, as PyTorch). A window with no input element gives -inf.
template <typename T>
void maxPool2d(const T *x, const Shape &xShape, const plan::Window2d &window, T *y,
               const Shape &yShape);

/// dx (x's shape): each window's dy added at the position maxPool2d took.
template <typename T>
void maxPool2dGrad(const T *x, const Shape &xShape, const T *dy, const Shape &dyShape,
                   const plan::Window2d &window, T *dx);

/// y [N, C, OH, OW]: each window's sum (row-major order) divided by PyTorch's divisor (the
/// window clipped to the padded input with \p countIncludePad, else the input elements in it).
template <typename T>
void avgPool2d(const T *x, const Shape &xShape, const plan::Window2d &window,
               bool countIncludePad, T *y, const Shape &yShape);

/// dx [N, C, H, W]: each window's dy / divisor added over its input elements.
template <typename T>
void avgPool2dGrad(const T *dy, const Shape &dyShape, const plan::Window2d &window,
                   bool countIncludePad, T *dx, const Shape &dxShape);

/// Batch normalisation of x [N, C, inner...] (\p inner elements per image and channel) with
/// the batch's statistics (\p training) or \p runningMean / \p runningVar.
template <typename T>
void batchNorm(const T *x, int64_t batch, int64_t channels, int64_t inner, const T *gamma,
               const T *beta, const T *runningMean, const T *runningVar, double epsilon,
               bool training, T *y);

/// dx, dgamma, dbeta of the training-mode batchNorm, the statistics recomputed from x.
template <typename T>
void batchNormGrad(const T *x, int64_t batch, int64_t channels, int64_t inner, const T *gamma,
                   const T *dy, double epsilon, T *dx, T *dgamma, T *dbeta);

/// The running statistics after one training batch: mean <- (1 - m) mean + m batch mean,
/// var <- (1 - m) var + m unbiased batch variance, *count += 1 (when given).
template <typename T>
void updateRunningStats(const T *x, int64_t batch, int64_t channels, int64_t inner,
                        double momentum, T *mean, T *var, T *count);

//===----------------------------------------------------------------------===//
// Reductions (ReductionKernels.cpp)
//===----------------------------------------------------------------------===//

/// The reduction opcodes (OpCodes.def), each named as its opcode.
enum class ReduceOp {
#define AMPC_REDUCTION_OP(Name, ...) Name,
#include "runtime/plan/OpCodes.def"
};

/// Reduces \p x over the sorted, unique \p axes; out has the reduced shape
/// (keepdims only changes the shape, not the data layout).
template <typename T>
void reduce(ReduceOp op, const T *x, const Shape &shape, const std::vector<int64_t> &axes, T *out);

/// The strides, per dim of \p shape, of the row-major reduced output (the
/// reduced dims dropped) over the sorted, unique \p axes: 0 along a reduced
/// dim, so walking the input with them lands each element on its output.
Shape reducedOutputStrides(const Shape &shape, const std::vector<int64_t> &axes);

//===----------------------------------------------------------------------===//
// Normalisation and softmax (NormKernels.cpp)
//===----------------------------------------------------------------------===//

/// y = (x - mean) / sqrt(var + eps) * gamma + beta over rows of \p width.
template <typename T>
void layerNorm(const T *x, int64_t rows, int64_t width, const T *gamma, const T *beta,
               double epsilon, T *y);

/// y = x / sqrt(mean(x^2) + eps) * gamma over rows of \p width.
template <typename T>
void rmsNorm(const T *x, int64_t rows, int64_t width, const T *gamma, double epsilon, T *y);

/// Softmax of one row of \p width entries over its first \p valid ones; the
/// rest are masked (probability 0). With \p logSumExp, also stores the row's
/// log-sum-exp over the valid entries there (x may be y).
template <typename T>
void softmaxRow(const T *x, int64_t width, int64_t valid, T *y, T *logSumExp = nullptr);

/// Softmax over the last dim. When causal, with T = shape[-2] and S =
/// shape[-1], element [..., i, j] is masked (0) when j > i + (S - T).
template <typename T> void softmax(const T *x, const Shape &shape, bool causal, T *y);

//===----------------------------------------------------------------------===//
// Attention (AttentionKernel.cpp)
//===----------------------------------------------------------------------===//

/// out[b] = softmax(scale * q[b] k[b]^T, causal) v[b] for each of \p batch
/// slices, q [queries, headDim], k [keys, headDim], v [keys, valueDim]. With
/// \p lse ([batch, queries]), also each query row's natural log-sum-exp of
/// its scaled, visible scores.
template <typename T>
void attention(const T *q, const T *k, const T *v, int64_t batch, int64_t queries, int64_t keys,
               int64_t headDim, int64_t valueDim, double scale, bool causal, T *out,
               T *lse = nullptr);

/// attention() for each of \p heads heads, q, k and v read side by side from \p qkv ([batch,
/// tokens, 3 heads headDim]) and the result written as [batch, tokens, heads headDim]; \p lse
/// (optional) is [batch, heads, tokens] (QkvAttentionKernels.cpp).
template <typename T>
void qkvAttention(const T *qkv, int64_t batch, int64_t tokens, int64_t heads, int64_t headDim,
                  double scale, bool causal, T *out, T *lse = nullptr);

//===----------------------------------------------------------------------===//
// Losses (LossKernels.cpp)
//===----------------------------------------------------------------------===//

/// Cross-entropy of \p rows rows of \p classes logits against \p labels,
/// skipping rows labelled \p ignoreIndex; the mean over the rest (NaN if
/// none), or their sum. Throws KernelError for a label outside [0, classes)
/// that is not ignoreIndex.
template <typename T>
T crossEntropy(const T *logits, int64_t rows, int64_t classes, const int64_t *labels,
               int64_t ignoreIndex, bool sum);

/// Checks \p labels in row order, throwing KernelError (as crossEntropy
/// does) for the first that is neither in [0, classes) nor ignoreIndex;
/// returns the number of rows not labelled ignoreIndex.
int64_t countLabelledRows(const int64_t *labels, int64_t rows, int64_t classes,
                          int64_t ignoreIndex);

/// mean((pred - target)^2).
template <typename T> T mseLoss(const T *pred, const T *target, int64_t count);

//===----------------------------------------------------------------------===//
// Gradients (GradKernels.cpp, AttentionGradKernel.cpp)
//===----------------------------------------------------------------------===//

/// The activation-gradient opcodes (OpCodes.def, AMPC_UNARY_GRAD_OP), each
/// named as its opcode, and the gradients of the two forms of gelu.
enum class UnaryGradOp {
#define AMPC_UNARY_GRAD_OP(Name, ...) Name,
#include "runtime/plan/OpCodes.def"
  GeluErfGrad,
  GeluTanhGrad
};

/// dx[i] = dy[i] * f'(x[i]) for the forward formula of the unary kernel
/// (numerics::ops::Name::apply of the opcode).
template <typename T> void unaryGrad(UnaryGradOp op, const T *x, const T *dy, T *dx, int64_t count);

/// out = 0 except out[low + i] = in[i]: the gradient of slice. Requires
/// checkPad(inShape, low, outShape).
template <typename E>
void pad(const E *in, const Shape &inShape, const std::vector<int64_t> &low, E *out,
         const Shape &outShape);

/// The gradient of Max over the sorted, unique \p axes: within each reduced
/// group, dy of the group goes to its first element (lowest row-major index)
/// equal to the maximum (the first NaN if there is one); the rest get 0.
template <typename T>
void maxGrad(const T *x, const Shape &shape, const std::vector<int64_t> &axes, const T *dy, T *dx);

/// dtable[v, :] = sum of dy[i, :] over the positions i with ids[i] == v,
/// summed in double in increasing i; throws KernelError for an id outside
/// [0, rows).
template <typename T>
void embeddingGrad(const int64_t *ids, int64_t count, const T *dy, int64_t rows, int64_t width,
                   T *dtable);

/// LayerNorm's gradient over rows of \p width (row statistics recomputed as
/// the forward does): dx; dgamma and dbeta summed over rows in double.
template <typename T>
void layerNormGrad(const T *x, int64_t rows, int64_t width, const T *gamma, const T *dy,
                   double epsilon, T *dx, T *dgamma, T *dbeta);

/// RmsNorm's gradient: dx; dgamma summed over rows in double.
template <typename T>
void rmsNormGrad(const T *x, int64_t rows, int64_t width, const T *gamma, const T *dy,
                 double epsilon, T *dx, T *dgamma);

/// dx = y * (dy - sum_lastaxis(dy * y)) over rows of \p width.
template <typename T> void softmaxGrad(const T *y, const T *dy, int64_t rows, int64_t width, T *dx);

/// The gradient of attention (same layout as attention()): P is recomputed
/// exactly as the forward computes it, then dv = P^T dy, dP = dy v^T,
/// dS = P * (dP - rowsum(dP * P)), dq = scale dS k, dk = scale dS^T q.
template <typename T>
void attentionGrad(const T *q, const T *k, const T *v, const T *dy, int64_t batch, int64_t queries,
                   int64_t keys, int64_t headDim, int64_t valueDim, double scale, bool causal,
                   T *dq, T *dk, T *dv);

/// The gradient of qkvAttention() for \p dy ([batch, tokens, heads headDim]): dq, dk and dv
/// side by side in \p dqkv, qkv's layout (QkvAttentionKernels.cpp).
template <typename T>
void qkvAttentionGrad(const T *qkv, const T *dy, int64_t batch, int64_t tokens, int64_t heads,
                      int64_t headDim, double scale, bool causal, T *dqkv);

/// dlogits = dloss * (softmax(row) - onehot(label)) / count, zero rows for
/// ignored labels; count = non-ignored rows for the mean (all zeros if
/// none), 1 for the sum. Throws KernelError like crossEntropy.
template <typename T>
void crossEntropyGrad(const T *logits, int64_t rows, int64_t classes, const int64_t *labels,
                      int64_t ignoreIndex, bool sum, T dloss, T *dlogits);

//===----------------------------------------------------------------------===//
// Training step (OptimizerKernels.cpp)
//===----------------------------------------------------------------------===//

/// acc[i] += g[i].
template <typename T> void accumulate(T *acc, const T *g, int64_t count);

/// acc[i] += v with v = g[i] / scale computed in T (loss-scale unscaling);
/// returns whether any v is infinite or NaN.
template <typename T> bool accumulateUnscaled(T *acc, const T *g, T scale, int64_t count);

/// Adds the squares of x[0..count) to \p total in double, in order.
template <typename T> void addSquares(const T *x, int64_t count, double &total);

/// The learning rate of 0-based optimizer step \p step (lr_schedule).
struct LrSchedule {
  int64_t kind = 0; ///< 0 constant, 1 cosine
  double lr = 0, minLr = 0;
  int64_t warmupSteps = 0, decaySteps = 0;
};
double scheduledLearningRate(const LrSchedule &schedule, uint64_t step, uint64_t totalSteps);

/// The gradient scale torch's clip_grad_norm_ applies: min(1, clipNorm /
/// (gradNorm + 1e-6)) when clipNorm > 0 (NaN for a NaN norm), else 1.
double clipCoefficient(double clipNorm, double gradNorm);

struct AdamWConfig {
  double lr, beta1, beta2, eps, weightDecay, clip;
  uint64_t t; ///< 1-based step for the bias corrections
};

/// One decoupled-weight-decay Adam step (torch.optim.AdamW), in place; grad
/// is zeroed.
template <typename T>
void adamW(const AdamWConfig &config, T *param, T *grad, T *m, T *v, int64_t count);

struct SgdConfig {
  double lr, momentum, weightDecay, clip;
};

/// One torch.optim.SGD step (dampening 0, no Nesterov, L2 weight decay), in
/// place; grad is zeroed.
template <typename T>
void sgd(const SgdConfig &config, T *param, T *grad, T *buffer, int64_t count);

} // namespace ampc::cpu::kernels

#endif // AMPC_RUNTIME_CPU_KERNELS_H
