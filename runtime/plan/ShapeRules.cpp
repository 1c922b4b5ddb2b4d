//===- ShapeRules.cpp - shape rules of the graph ops and plan instructions ===//

#include "runtime/plan/ShapeRules.h"
#include "runtime/plan/Plan.h"

#include <algorithm>

namespace ampc::plan {

namespace {
/// Sets `*error` when the caller asked for a message.
void report(std::string *error, const std::string &message) {
  if (error)
    *error = message;
}

std::string str(int64_t value) { return std::to_string(value); }
} // namespace

std::optional<Shape> broadcastShapes(const Shape &lhs, const Shape &rhs, std::string *error) {
  size_t rank = std::max(lhs.size(), rhs.size());
  Shape result(rank);
  for (size_t i = 0; i < rank; ++i) {
    // Walk from the last dimension; a missing leading dimension acts as 1.
    int64_t l = i < lhs.size() ? lhs[lhs.size() - 1 - i] : 1;
    int64_t r = i < rhs.size() ? rhs[rhs.size() - 1 - i] : 1;
    if (l != r && l != 1 && r != 1) {
      report(error, "shapes " + shapeToString(lhs) + " and " + shapeToString(rhs) +
                        " do not broadcast: the dimensions " + str(i + 1) + " from the end are " +
                        str(l) + " and " + str(r));
      return std::nullopt;
    }
    result[rank - 1 - i] = l == 1 ? r : l;
  }
  return result;
}

bool broadcastsTo(const Shape &from, const Shape &to, std::string *error) {
  if (from.size() > to.size()) {
    report(error, "cannot broadcast " + shapeToString(from) + " to the lower-rank shape " +
                      shapeToString(to));
    return false;
  }
  for (size_t i = 0; i < from.size(); ++i) {
    int64_t f = from[from.size() - 1 - i], t = to[to.size() - 1 - i];
    if (f != t && f != 1) {
      report(error, "cannot broadcast " + shapeToString(from) + " to " + shapeToString(to) +
                        ": dimension " + str(from.size() - 1 - i) + " is " + str(f) +
                        ", which is neither 1 nor " + str(t));
      return false;
    }
  }
  return true;
}

std::optional<MatMulDims> matMulDims(const Shape &a, const Shape &b, bool transposeA,
                                     bool transposeB, std::string *error) {
  if (a.size() < 2 || b.size() < 2) {
    report(error,
           "matmul operands need rank >= 2, got " + shapeToString(a) + " and " + shapeToString(b));
    return std::nullopt;
  }
  MatMulDims dims;
  dims.batchA.assign(a.begin(), a.end() - 2);
  dims.batchB.assign(b.begin(), b.end() - 2);
  int64_t rowsA = a[a.size() - 2], colsA = a.back();
  int64_t rowsB = b[b.size() - 2], colsB = b.back();
  dims.m = transposeA ? colsA : rowsA;
  dims.k = transposeA ? rowsA : colsA;
  int64_t kB = transposeB ? colsB : rowsB;
  dims.n = transposeB ? rowsB : colsB;
  if (kB != dims.k) {
    Shape lhs = dims.batchA, rhs = dims.batchB;
    lhs.insert(lhs.end(), {dims.m, dims.k});
    rhs.insert(rhs.end(), {kB, dims.n});
    report(error, "matmul contraction dimensions differ: lhs is " + shapeToString(lhs) +
                      " and rhs is " + shapeToString(rhs) + " (after transposes), so K is " +
                      str(dims.k) + " vs " + str(kB));
    return std::nullopt;
  }
  std::string batchError;
  auto batch = broadcastShapes(dims.batchA, dims.batchB, &batchError);
  if (!batch) {
    report(error, "matmul batch dimensions do not broadcast: " + batchError);
    return std::nullopt;
  }
  dims.batch = *batch;
  return dims;
}

std::optional<Shape> matMulShape(const Shape &a, const Shape &b, bool transposeA, bool transposeB,
                                 std::string &error) {
  auto dims = matMulDims(a, b, transposeA, transposeB, &error);
  if (!dims)
    return std::nullopt;
  Shape result = dims->batch;
  result.insert(result.end(), {dims->m, dims->n});
  return result;
}

std::optional<Shape> transposeShape(const Shape &input, const std::vector<int64_t> &permutation,
                                    std::string &error) {
  if (permutation.size() != input.size()) {
    error = "permutation " + shapeToString(permutation) + " has " + str(permutation.size()) +
            " entries for a rank-" + str(input.size()) + " tensor";
    return std::nullopt;
  }
  std::vector<bool> seen(input.size(), false);
  Shape result;
  for (int64_t p : permutation) {
    if (p < 0 || p >= static_cast<int64_t>(input.size()) || seen[p]) {
      error = "permutation " + shapeToString(permutation) + " is not a permutation of 0.." +
              str(input.size() - 1);
      return std::nullopt;
    }
    seen[p] = true;
    result.push_back(input[p]);
  }
  return result;
}

std::optional<Shape> sliceShape(const Shape &input, const std::vector<int64_t> &starts,
                                const std::vector<int64_t> &sizes, std::string &error) {
  if (starts.size() != input.size() || sizes.size() != input.size()) {
    error = "slice of a rank-" + str(input.size()) +
            " tensor needs one start and one size per dimension, got starts " +
            shapeToString(starts) + " and sizes " + shapeToString(sizes);
    return std::nullopt;
  }
  for (size_t i = 0; i < input.size(); ++i) {
    // Compared without forming starts + sizes, which may overflow.
    if (starts[i] < 0 || sizes[i] < 0 || starts[i] > input[i] || sizes[i] > input[i] - starts[i]) {
      error = "slice of " + str(sizes[i]) + " elements from " + str(starts[i]) +
              " along dimension " + str(i) + " is outside its extent " + str(input[i]);
      return std::nullopt;
    }
  }
  return Shape(sizes.begin(), sizes.end());
}

/// Checks 0 <= axis < rank with a message naming the op.
static bool checkAxis(int64_t axis, size_t rank, const char *op, std::string &error) {
  if (axis < 0 || axis >= static_cast<int64_t>(rank)) {
    error = std::string(op) + " axis " + str(axis) + " is out of range for a rank-" + str(rank) +
            " tensor";
    return false;
  }
  return true;
}

std::optional<std::vector<Shape>> splitShapes(const Shape &input, int64_t axis,
                                              const std::vector<int64_t> &sizes,
                                              std::string &error) {
  if (!checkAxis(axis, input.size(), "split", error))
    return std::nullopt;
  int64_t total = 0;
  std::vector<Shape> pieces;
  for (int64_t size : sizes) {
    if (size <= 0) {
      error = "split sizes must be positive, got " + shapeToString(sizes);
      return std::nullopt;
    }
    // Stop before the running total could overflow.
    if (size > input[axis] - total) {
      error = "split sizes " + shapeToString(sizes) + " add up to more than dimension " +
              str(axis) + ", which is " + str(input[axis]);
      return std::nullopt;
    }
    total += size;
    Shape piece = input;
    piece[axis] = size;
    pieces.push_back(piece);
  }
  if (total != input[axis]) {
    error = "split sizes " + shapeToString(sizes) + " add up to " + str(total) + " but dimension " +
            str(axis) + " is " + str(input[axis]);
    return std::nullopt;
  }
  return pieces;
}

std::optional<Shape> concatShape(const std::vector<Shape> &inputs, int64_t axis,
                                 std::string &error) {
  if (inputs.empty()) {
    error = "concat needs at least one operand";
    return std::nullopt;
  }
  const Shape &first = inputs.front();
  if (!checkAxis(axis, first.size(), "concat", error))
    return std::nullopt;
  Shape result = first;
  for (size_t i = 1; i < inputs.size(); ++i) {
    const Shape &other = inputs[i];
    bool compatible = other.size() == first.size();
    for (size_t d = 0; compatible && d < first.size(); ++d)
      compatible = d == static_cast<size_t>(axis) || other[d] == first[d];
    if (!compatible) {
      error = "concat operand " + str(i) + " has shape " + shapeToString(other) +
              ", which differs from " + shapeToString(first) + " outside axis " + str(axis);
      return std::nullopt;
    }
    result[axis] += other[axis];
  }
  return result;
}

std::optional<Shape> reduceShape(const Shape &input, const std::vector<int64_t> &axes,
                                 bool keepdims, std::string &error) {
  if (axes.empty()) {
    error = "reduction needs at least one axis";
    return std::nullopt;
  }
  for (size_t i = 0; i < axes.size(); ++i) {
    if (axes[i] < 0 || axes[i] >= static_cast<int64_t>(input.size()) ||
        (i && axes[i] <= axes[i - 1])) {
      error = "reduction axes " + shapeToString(axes) +
              " must be distinct, increasing dimensions of a rank-" + str(input.size()) + " tensor";
      return std::nullopt;
    }
  }
  return reducedShape(input, axes, keepdims);
}

std::optional<Shape> embeddingShape(const Shape &table, const Shape &indices, std::string &error) {
  if (table.size() != 2) {
    error = "embedding table must be [rows, width], got " + shapeToString(table);
    return std::nullopt;
  }
  Shape result = indices;
  result.push_back(table[1]);
  return result;
}

bool checkNormParameter(const Shape &input, const Shape &parameter, const char *what,
                        std::string &error) {
  if (input.empty()) {
    error = "normalisation needs an input of rank >= 1";
    return false;
  }
  if (parameter.size() != 1 || parameter[0] != input.back()) {
    error = std::string(what) + " must have the shape of the last axis, [" + str(input.back()) +
            "], got " + shapeToString(parameter);
    return false;
  }
  return true;
}

bool checkCausalScores(const Shape &scores, std::string &error) {
  if (scores.size() < 2) {
    error = "causal masking needs [..., T, S] scores, got " + shapeToString(scores);
    return false;
  }
  int64_t t = scores[scores.size() - 2], s = scores.back();
  if (s < t) {
    error = "causal masking needs S >= T in [..., T, S], got T = " + str(t) + " and S = " + str(s);
    return false;
  }
  return true;
}

std::optional<Shape> attentionShape(const Shape &query, const Shape &key, const Shape &value,
                                    bool causal, std::string &error) {
  if (query.size() < 2 || key.size() != query.size() || value.size() != query.size()) {
    error = "attention needs q, k, v of one rank >= 2, got " + shapeToString(query) + ", " +
            shapeToString(key) + ", " + shapeToString(value);
    return std::nullopt;
  }
  size_t r = query.size();
  if (!std::equal(query.begin(), query.end() - 2, key.begin()) ||
      !std::equal(query.begin(), query.end() - 2, value.begin())) {
    error = "attention q, k, v must share their leading dimensions, got " + shapeToString(query) +
            ", " + shapeToString(key) + ", " + shapeToString(value);
    return std::nullopt;
  }
  if (query[r - 1] != key[r - 1]) {
    error = "attention q and k must have the same head dimension, got " + str(query[r - 1]) +
            " and " + str(key[r - 1]);
    return std::nullopt;
  }
  if (key[r - 2] != value[r - 2]) {
    error = "attention k and v must have the same sequence length, got " + str(key[r - 2]) +
            " and " + str(value[r - 2]);
    return std::nullopt;
  }
  if (causal && !checkCausalScores({query[r - 2], key[r - 2]}, error))
    return std::nullopt;
  Shape result = query;
  result.back() = value.back();
  return result;
}

std::optional<Shape> qkvAttentionShape(const Shape &qkv, int64_t heads, std::string &error) {
  if (qkv.size() < 2) {
    error = "qkv_attention needs qkv [..., T, 3 x heads x head dim], got " + shapeToString(qkv);
    return std::nullopt;
  }
  if (heads < 1) {
    error = "qkv_attention needs at least one head, got " + str(heads);
    return std::nullopt;
  }
  if (qkv.back() < 1 || qkv.back() % (3 * heads) != 0) {
    error = "qkv_attention's last dimension " + str(qkv.back()) + " is not 3 x " + str(heads) +
            " heads x a head dim";
    return std::nullopt;
  }
  Shape result = qkv;
  result.back() = qkv.back() / 3;
  return result;
}

Shape qkvAttentionLseShape(const Shape &qkv, int64_t heads) {
  Shape rows(qkv.begin(), qkv.end() - 1);
  rows.insert(rows.end() - 1, heads);
  return rows;
}

bool checkCrossEntropy(const Shape &logits, const Shape &labels, std::string &error) {
  if (logits.empty() || labels.size() + 1 != logits.size() ||
      !std::equal(labels.begin(), labels.end(), logits.begin())) {
    error = "cross_entropy needs logits [..., C] and labels [...] with the same leading "
            "shape, got " +
            shapeToString(logits) + " and " + shapeToString(labels);
    return false;
  }
  return true;
}

bool checkPad(const Shape &input, const std::vector<int64_t> &low, const Shape &result,
              std::string &error) {
  if (result.size() != input.size() || low.size() != input.size()) {
    error = "pad of a rank-" + str(input.size()) +
            " tensor needs a result of that rank and one "
            "'low' entry per dimension, got result " +
            shapeToString(result) + " and low " + shapeToString(low);
    return false;
  }
  for (size_t i = 0; i < input.size(); ++i) {
    // Compared without forming low + input, which may overflow.
    if (low[i] < 0 || low[i] > result[i] || input[i] > result[i] - low[i]) {
      error = "pad places " + str(input[i]) + " elements at offset " + str(low[i]) +
              " along dimension " + str(i) + ", outside the result's extent " + str(result[i]);
      return false;
    }
  }
  return true;
}

bool checkEmbeddingGrad(const Shape &indices, const Shape &grad, const Shape &table,
                        std::string &error) {
  if (table.size() != 2) {
    error = "embedding gradient table must be [rows, width], got " + shapeToString(table);
    return false;
  }
  Shape expected = indices;
  expected.push_back(table[1]);
  if (grad != expected) {
    error = "embedding gradient for ids " + shapeToString(indices) + " and a table " +
            shapeToString(table) + " needs an incoming gradient " + shapeToString(expected) +
            ", got " + shapeToString(grad);
    return false;
  }
  return true;
}

std::optional<Window2d> makeWindow2d(const std::vector<int64_t> &kernel,
                                     const std::vector<int64_t> &strides,
                                     const std::vector<int64_t> &padding,
                                     const std::vector<int64_t> &dilations, bool ceilMode,
                                     std::string &error) {
  Window2d window;
  window.ceilMode = ceilMode;
  // An empty list keeps the default already in *out, except the kernel's, which has none.
  auto list = [&](const char *name, const std::vector<int64_t> &values, size_t count,
                  int64_t least, int64_t *out, bool required = false) {
    if (values.empty() && !required)
      return true;
    if (values.size() != count) {
      error = std::string(name) + " must have " + std::to_string(count) + " entries, got " +
              shapeToString(values);
      return false;
    }
    for (size_t i = 0; i < count; ++i) {
      if (values[i] < least) {
        error = std::string(name) + " must be >= " + std::to_string(least) + ", got " +
                shapeToString(values);
        return false;
      }
      out[i] = values[i];
    }
    return true;
  };
  if (!list("kernel size", kernel, 2, 1, window.kernel, /*required=*/true) ||
      !list("strides", strides, 2, 1, window.strides) ||
      !list("padding", padding, 4, 0, window.padding) ||
      !list("dilations", dilations, 2, 1, window.dilations))
    return std::nullopt;
  // Extents far beyond any tensor keep the output-size arithmetic below from overflowing.
  constexpr int64_t kLimit = int64_t(1) << 31;
  for (int axis = 0; axis < 2; ++axis)
    if (window.kernel[axis] > kLimit || window.strides[axis] > kLimit ||
        window.dilations[axis] > kLimit || window.padBefore(axis) > kLimit ||
        window.padAfter(axis) > kLimit) {
      error = "window extents must be below 2^31";
      return std::nullopt;
    }
  return window;
}

std::optional<int64_t> windowOutputSize(const Window2d &window, int axis, int64_t input,
                                        std::string &error) {
  const char *name = axis == 0 ? "height" : "width";
  const int64_t padded = input + window.padBefore(axis) + window.padAfter(axis);
  const int64_t span = window.dilations[axis] * (window.kernel[axis] - 1) + 1;
  if (input < 1 || padded < span) {
    error = "the window's " + std::string(name) + " (" + std::to_string(span) +
            " with dilation) exceeds the padded input's (" + std::to_string(padded) + ")";
    return std::nullopt;
  }
  const int64_t stride = window.strides[axis];
  int64_t out = (padded - span + (window.ceilMode ? stride - 1 : 0)) / stride + 1;
  // A last window that would start in the trailing padding is dropped.
  if (window.ceilMode && (out - 1) * stride >= input + window.padBefore(axis))
    --out;
  return out;
}

std::optional<Shape> conv2dShape(const Shape &input, const Shape &weight, Window2d window,
                                 int64_t groups, std::string &error) {
  if (input.size() != 4) {
    error = "convolution input must be [N, C, H, W], got " + shapeToString(input);
    return std::nullopt;
  }
  if (weight.size() != 4) {
    error = "convolution weight must be [O, C / groups, KH, KW], got " + shapeToString(weight);
    return std::nullopt;
  }
  if (groups < 1) {
    error = "groups must be >= 1, got " + std::to_string(groups);
    return std::nullopt;
  }
  if (input[1] % groups != 0 || weight[0] % groups != 0) {
    error = "groups (" + std::to_string(groups) + ") must divide the input channels (" +
            std::to_string(input[1]) + ") and the output channels (" + std::to_string(weight[0]) +
            ")";
    return std::nullopt;
  }
  if (weight[1] != input[1] / groups) {
    error = "convolution weight " + shapeToString(weight) + " must have " +
            std::to_string(input[1] / groups) + " input channels per group for an input " +
            shapeToString(input) + " in " + std::to_string(groups) + " group(s)";
    return std::nullopt;
  }
  if (weight[0] < 1 || weight[2] < 1 || weight[3] < 1) {
    error = "convolution weight " + shapeToString(weight) + " has an empty dimension";
    return std::nullopt;
  }
  window.kernel[0] = weight[2];
  window.kernel[1] = weight[3];
  std::optional<int64_t> height = windowOutputSize(window, 0, input[2], error);
  std::optional<int64_t> width = height ? windowOutputSize(window, 1, input[3], error) : height;
  if (!width)
    return std::nullopt;
  return Shape{input[0], weight[0], *height, *width};
}

std::optional<Shape> pool2dShape(const Shape &input, const Window2d &window, std::string &error) {
  if (input.size() != 4) {
    error = "pooling input must be [N, C, H, W], got " + shapeToString(input);
    return std::nullopt;
  }
  for (int axis = 0; axis < 2; ++axis) {
    const int64_t span = window.dilations[axis] * (window.kernel[axis] - 1) + 1;
    if (2 * window.padBefore(axis) > span || 2 * window.padAfter(axis) > span) {
      error = "padding " + shapeToString(std::vector<int64_t>(window.padding, window.padding + 4)) +
              " must be at most half the window (" + std::to_string(span) + " along " +
              (axis == 0 ? "height" : "width") + ")";
      return std::nullopt;
    }
  }
  std::optional<int64_t> height = windowOutputSize(window, 0, input[2], error);
  std::optional<int64_t> width = height ? windowOutputSize(window, 1, input[3], error) : height;
  if (!width)
    return std::nullopt;
  return Shape{input[0], input[1], *height, *width};
}

Shape rowMajorStrides(const Shape &shape) {
  Shape strides(shape.size());
  int64_t stride = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = stride;
    stride *= shape[i];
  }
  return strides;
}

Shape broadcastStrides(const Shape &from, const Shape &to) {
  const Shape own = rowMajorStrides(from);
  Shape strides(to.size(), 0);
  const size_t offset = to.size() - from.size();
  for (size_t i = 0; i < from.size(); ++i)
    strides[offset + i] = from[i] == 1 ? 0 : own[i];
  return strides;
}

Shape reducedShape(const Shape &shape, const std::vector<int64_t> &axes, bool keepDims) {
  Shape result;
  for (size_t i = 0; i < shape.size(); ++i) {
    bool reduced = std::binary_search(axes.begin(), axes.end(), static_cast<int64_t>(i));
    if (!reduced)
      result.push_back(shape[i]);
    else if (keepDims)
      result.push_back(1);
  }
  return result;
}

} // namespace ampc::plan
