//===- ShapeRules.h - shape rules of the graph ops and plan instructions -===//
//
// The shape arithmetic of every op, written once and shared by the graph dialect's verifiers
// (which turn the messages into located diagnostics) and by the runtime (validatePlan, and the
// kernels' loop layout). Plain C++ on vectors of extents: no MLIR. Checking rules return the
// result shape, or nullopt / false with `error` set to a sentence a user can act on.
//
//===----------------------------------------------------------------------===//

#ifndef AMPC_RUNTIME_PLAN_SHAPERULES_H
#define AMPC_RUNTIME_PLAN_SHAPERULES_H

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace ampc::plan {

using Shape = std::vector<int64_t>;

//===----------------------------------------------------------------------===//
// Checking rules
//===----------------------------------------------------------------------===//

/// NumPy broadcasting: shapes aligned at the last dimension, each pair equal or one of them 1.
std::optional<Shape> broadcastShapes(const Shape &lhs, const Shape &rhs,
                                     std::string *error = nullptr);

/// Whether `from` broadcasts to exactly `to`.
bool broadcastsTo(const Shape &from, const Shape &to, std::string *error = nullptr);

/// The operand dims of a matmul after the optional transposes of the last two dims: a is
/// [batchA..., m, k], b is [batchB..., k, n].
struct MatMulDims {
  Shape batchA, batchB, batch; ///< batch = broadcast(batchA, batchB)
  int64_t m = 0, k = 0, n = 0;
};

/// The matmul dims of `a` and `b`, or nullopt when a rank is below 2, the contraction dims
/// differ, or the batch dims do not broadcast.
std::optional<MatMulDims> matMulDims(const Shape &a, const Shape &b, bool transposeA,
                                     bool transposeB, std::string *error = nullptr);

/// The matmul result [...batch, M, N].
std::optional<Shape> matMulShape(const Shape &a, const Shape &b, bool transposeA, bool transposeB,
                                 std::string &error);

std::optional<Shape> transposeShape(const Shape &input, const std::vector<int64_t> &permutation,
                                    std::string &error);

std::optional<Shape> sliceShape(const Shape &input, const std::vector<int64_t> &starts,
                                const std::vector<int64_t> &sizes, std::string &error);

std::optional<std::vector<Shape>> splitShapes(const Shape &input, int64_t axis,
                                              const std::vector<int64_t> &sizes,
                                              std::string &error);

std::optional<Shape> concatShape(const std::vector<Shape> &inputs, int64_t axis,
                                 std::string &error);

/// Checks that `axes` are distinct increasing dims of `input`, then reduces over them.
std::optional<Shape> reduceShape(const Shape &input, const std::vector<int64_t> &axes,
                                 bool keepdims, std::string &error);

/// table [V, D], indices [...] -> [..., D].
std::optional<Shape> embeddingShape(const Shape &table, const Shape &indices, std::string &error);

/// A gain (or bias) of a normalisation over the last axis must be [D].
bool checkNormParameter(const Shape &input, const Shape &parameter, const char *what,
                        std::string &error);

/// Causal masking needs [..., T, S] with S >= T.
bool checkCausalScores(const Shape &scores, std::string &error);

/// q [..., T, Dh], k [..., S, Dh], v [..., S, Dv] -> [..., T, Dv].
std::optional<Shape> attentionShape(const Shape &query, const Shape &key, const Shape &value,
                                    bool causal, std::string &error);

/// qkv [..., T, 3 H Dh] (q, k, v side by side, each H heads of Dh) -> [..., T, H Dh].
std::optional<Shape> qkvAttentionShape(const Shape &qkv, int64_t heads, std::string &error);

/// The row log-sum-exp of a qkv_attention over \p qkv: [..., H, T].
Shape qkvAttentionLseShape(const Shape &qkv, int64_t heads);

/// logits [..., C], labels [...]: the leading shapes agree.
bool checkCrossEntropy(const Shape &logits, const Shape &labels, std::string &error);

/// pad: `result` has the rank of `input`, `low` has one entry per dim, and per dim
/// 0 <= low and low + input <= result (the input lands inside the result).
bool checkPad(const Shape &input, const std::vector<int64_t> &low, const Shape &result,
              std::string &error);

/// embedding_grad: ids [...], grad [..., D] (the ids' shape plus D), table [V, D].
bool checkEmbeddingGrad(const Shape &indices, const Shape &grad, const Shape &table,
                        std::string &error);

//===----------------------------------------------------------------------===//
// Windows of 2-D convolution and pooling (NCHW)
//===----------------------------------------------------------------------===//

/// A window sliding over the two spatial axes of an NCHW tensor: the kernel's extent, strides,
/// padding (top, left, bottom, right: ONNX's `pads` order) and dilations, each indexed by axis
/// (0 = H, 1 = W). With ceilMode the output extent rounds up as PyTorch's does, except that a
/// window starting in the bottom or right padding is dropped.
struct Window2d {
  int64_t kernel[2] = {1, 1};
  int64_t strides[2] = {1, 1};
  int64_t padding[4] = {0, 0, 0, 0};
  int64_t dilations[2] = {1, 1};
  bool ceilMode = false;

  /// The input row (axis 0) or column (axis 1) of output position \p o's first tap; negative
  /// inside the padding.
  int64_t start(int axis, int64_t o) const { return o * strides[axis] - padding[axis]; }
  /// Padding before (axis 0: top, 1: left) and after (bottom, right) the input.
  int64_t padBefore(int axis) const { return padding[axis]; }
  int64_t padAfter(int axis) const { return padding[axis + 2]; }
};

/// A window from attribute lists: \p kernel, \p strides and \p dilations of 2 entries >= 1
/// (strides and dilations may be empty: all 1), \p padding of 4 entries >= 0 (or empty: none).
/// A convolution passes its weight's spatial extents as the kernel.
std::optional<Window2d> makeWindow2d(const std::vector<int64_t> &kernel,
                                     const std::vector<int64_t> &strides,
                                     const std::vector<int64_t> &padding,
                                     const std::vector<int64_t> &dilations, bool ceilMode,
                                     std::string &error);

/// The output extent along \p axis (0 = H, 1 = W) of an input extent \p input, or nullopt when
/// the dilated kernel is larger than the padded input.
std::optional<int64_t> windowOutputSize(const Window2d &window, int axis, int64_t input,
                                        std::string &error);

/// 2-D convolution: x [N, C, H, W], weight [O, C / groups, KH, KW] -> [N, O, OH, OW]. The
/// window's kernel extent is the weight's; groups must divide C and O.
std::optional<Shape> conv2dShape(const Shape &input, const Shape &weight, Window2d window,
                                 int64_t groups, std::string &error);

/// 2-D pooling: x [N, C, H, W] -> [N, C, OH, OW]. Each padding is at most half its kernel's
/// dilated extent (PyTorch's rule); with dilation a window may still hold no input element
/// (max pooling gives it -inf, average pooling 0).
std::optional<Shape> pool2dShape(const Shape &input, const Window2d &window, std::string &error);

//===----------------------------------------------------------------------===//
// Layout helpers (no checks: for shapes already validated)
//===----------------------------------------------------------------------===//

/// Row-major strides of a tensor of `shape`, in elements.
Shape rowMajorStrides(const Shape &shape);

/// Strides for reading a tensor of shape `from` as if it had the broadcast shape `to`:
/// row-major strides, 0 on broadcast (size-1 or missing) dims. Requires broadcastsTo(from, to).
Shape broadcastStrides(const Shape &from, const Shape &to);

/// The shape of `shape` reduced over the sorted, unique `axes`; reduced dims are kept as 1
/// when `keepDims`.
Shape reducedShape(const Shape &shape, const std::vector<int64_t> &axes, bool keepDims);

} // namespace ampc::plan

#endif // AMPC_RUNTIME_PLAN_SHAPERULES_H
