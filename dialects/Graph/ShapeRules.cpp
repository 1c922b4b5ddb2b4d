//===- ShapeRules.cpp - shape rules of the graph ops ----------------------===//

#include "dialects/Graph/ShapeRules.h"

#include <algorithm>
#include <sstream>

namespace ampc::shape {

std::string format(const Shape &shape) {
  std::ostringstream os;
  os << '[';
  for (size_t i = 0; i < shape.size(); ++i)
    os << (i ? ", " : "") << shape[i];
  os << ']';
  return os.str();
}

int64_t numElements(const Shape &shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

std::optional<Shape> broadcast(const Shape &lhs, const Shape &rhs, std::string &error) {
  size_t rank = std::max(lhs.size(), rhs.size());
  Shape result(rank);
  for (size_t i = 0; i < rank; ++i) {
    // Walk from the last dimension; a missing leading dimension acts as 1.
    int64_t l = i < lhs.size() ? lhs[lhs.size() - 1 - i] : 1;
    int64_t r = i < rhs.size() ? rhs[rhs.size() - 1 - i] : 1;
    if (l != r && l != 1 && r != 1) {
      error = "shapes " + format(lhs) + " and " + format(rhs) +
              " do not broadcast: the dimensions " + std::to_string(i + 1) +
              " from the end are " + std::to_string(l) + " and " + std::to_string(r);
      return std::nullopt;
    }
    result[rank - 1 - i] = l == 1 ? r : l;
  }
  return result;
}

bool broadcastsTo(const Shape &from, const Shape &to, std::string &error) {
  if (from.size() > to.size()) {
    error = "cannot broadcast " + format(from) + " to the lower-rank shape " + format(to);
    return false;
  }
  for (size_t i = 0; i < from.size(); ++i) {
    int64_t f = from[from.size() - 1 - i], t = to[to.size() - 1 - i];
    if (f != t && f != 1) {
      error = "cannot broadcast " + format(from) + " to " + format(to) + ": dimension " +
              std::to_string(from.size() - 1 - i) + " is " + std::to_string(f) +
              ", which is neither 1 nor " + std::to_string(t);
      return false;
    }
  }
  return true;
}

std::optional<Shape> matmul(Shape lhs, Shape rhs, bool transposeLhs, bool transposeRhs,
                            std::string &error) {
  if (lhs.size() < 2 || rhs.size() < 2) {
    error = "matmul operands need rank >= 2, got " + format(lhs) + " and " + format(rhs);
    return std::nullopt;
  }
  if (transposeLhs)
    std::swap(lhs[lhs.size() - 1], lhs[lhs.size() - 2]);
  if (transposeRhs)
    std::swap(rhs[rhs.size() - 1], rhs[rhs.size() - 2]);
  int64_t m = lhs[lhs.size() - 2], k = lhs.back();
  int64_t k2 = rhs[rhs.size() - 2], n = rhs.back();
  if (k != k2) {
    error = "matmul contraction dimensions differ: lhs is " + format(lhs) + " and rhs is " +
            format(rhs) + " (after transposes), so K is " + std::to_string(k) + " vs " +
            std::to_string(k2);
    return std::nullopt;
  }
  Shape lhsBatch(lhs.begin(), lhs.end() - 2), rhsBatch(rhs.begin(), rhs.end() - 2);
  std::string batchError;
  auto batch = broadcast(lhsBatch, rhsBatch, batchError);
  if (!batch) {
    error = "matmul batch dimensions do not broadcast: " + batchError;
    return std::nullopt;
  }
  batch->push_back(m);
  batch->push_back(n);
  return batch;
}

std::optional<Shape> transpose(const Shape &input, const std::vector<int64_t> &permutation,
                               std::string &error) {
  if (permutation.size() != input.size()) {
    error = "permutation " + format(permutation) + " has " +
            std::to_string(permutation.size()) + " entries for a rank-" +
            std::to_string(input.size()) + " tensor";
    return std::nullopt;
  }
  std::vector<bool> seen(input.size(), false);
  Shape result;
  for (int64_t p : permutation) {
    if (p < 0 || p >= static_cast<int64_t>(input.size()) || seen[p]) {
      error = "permutation " + format(permutation) + " is not a permutation of 0.." +
              std::to_string(input.size() - 1);
      return std::nullopt;
    }
    seen[p] = true;
    result.push_back(input[p]);
  }
  return result;
}

std::optional<Shape> slice(const Shape &input, const std::vector<int64_t> &starts,
                           const std::vector<int64_t> &sizes, std::string &error) {
  if (starts.size() != input.size() || sizes.size() != input.size()) {
    error = "slice of a rank-" + std::to_string(input.size()) +
            " tensor needs one start and one size per dimension, got starts " +
            format(starts) + " and sizes " + format(sizes);
    return std::nullopt;
  }
  for (size_t i = 0; i < input.size(); ++i) {
    // Compared without forming starts + sizes, which may overflow.
    if (starts[i] < 0 || sizes[i] < 0 || starts[i] > input[i] ||
        sizes[i] > input[i] - starts[i]) {
      error = "slice of " + std::to_string(sizes[i]) + " elements from " +
              std::to_string(starts[i]) + " along dimension " + std::to_string(i) +
              " is outside its extent " + std::to_string(input[i]);
      return std::nullopt;
    }
  }
  return Shape(sizes.begin(), sizes.end());
}

/// Checks 0 <= axis < rank with a message naming the op.
static bool checkAxis(int64_t axis, size_t rank, const char *op, std::string &error) {
  if (axis < 0 || axis >= static_cast<int64_t>(rank)) {
    error = std::string(op) + " axis " + std::to_string(axis) + " is out of range for a rank-" +
            std::to_string(rank) + " tensor";
    return false;
  }
  return true;
}

std::optional<std::vector<Shape>> split(const Shape &input, int64_t axis,
                                        const std::vector<int64_t> &sizes,
                                        std::string &error) {
  if (!checkAxis(axis, input.size(), "split", error))
    return std::nullopt;
  int64_t total = 0;
  std::vector<Shape> pieces;
  for (int64_t size : sizes) {
    if (size <= 0) {
      error = "split sizes must be positive, got " + format(sizes);
      return std::nullopt;
    }
    // Stop before the running total could overflow.
    if (size > input[axis] - total) {
      error = "split sizes " + format(sizes) + " add up to more than dimension " +
              std::to_string(axis) + ", which is " + std::to_string(input[axis]);
      return std::nullopt;
    }
    total += size;
    Shape piece = input;
    piece[axis] = size;
    pieces.push_back(piece);
  }
  if (total != input[axis]) {
    error = "split sizes " + format(sizes) + " add up to " + std::to_string(total) +
            " but dimension " + std::to_string(axis) + " is " + std::to_string(input[axis]);
    return std::nullopt;
  }
  return pieces;
}

std::optional<Shape> concat(const std::vector<Shape> &inputs, int64_t axis, std::string &error) {
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
      error = "concat operand " + std::to_string(i) + " has shape " + format(other) +
              ", which differs from " + format(first) + " outside axis " +
              std::to_string(axis);
      return std::nullopt;
    }
    result[axis] += other[axis];
  }
  return result;
}

std::optional<Shape> reduce(const Shape &input, const std::vector<int64_t> &axes, bool keepdims,
                            std::string &error) {
  if (axes.empty()) {
    error = "reduction needs at least one axis";
    return std::nullopt;
  }
  for (size_t i = 0; i < axes.size(); ++i) {
    if (axes[i] < 0 || axes[i] >= static_cast<int64_t>(input.size()) ||
        (i && axes[i] <= axes[i - 1])) {
      error = "reduction axes " + format(axes) +
              " must be distinct, increasing dimensions of a rank-" +
              std::to_string(input.size()) + " tensor";
      return std::nullopt;
    }
  }
  Shape result;
  for (size_t d = 0; d < input.size(); ++d) {
    bool reduced = std::find(axes.begin(), axes.end(), static_cast<int64_t>(d)) != axes.end();
    if (!reduced)
      result.push_back(input[d]);
    else if (keepdims)
      result.push_back(1);
  }
  return result;
}

std::optional<Shape> embedding(const Shape &table, const Shape &indices, std::string &error) {
  if (table.size() != 2) {
    error = "embedding table must be [rows, width], got " + format(table);
    return std::nullopt;
  }
  Shape result = indices;
  result.push_back(table[1]);
  return result;
}

bool normParameter(const Shape &input, const Shape &parameter, const char *what,
                   std::string &error) {
  if (input.empty()) {
    error = "normalisation needs an input of rank >= 1";
    return false;
  }
  if (parameter.size() != 1 || parameter[0] != input.back()) {
    error = std::string(what) + " must have the shape of the last axis, [" +
            std::to_string(input.back()) + "], got " + format(parameter);
    return false;
  }
  return true;
}

bool causalScores(const Shape &scores, std::string &error) {
  if (scores.size() < 2) {
    error = "causal masking needs [..., T, S] scores, got " + format(scores);
    return false;
  }
  int64_t t = scores[scores.size() - 2], s = scores.back();
  if (s < t) {
    error = "causal masking needs S >= T in [..., T, S], got T = " + std::to_string(t) +
            " and S = " + std::to_string(s);
    return false;
  }
  return true;
}

std::optional<Shape> attention(const Shape &query, const Shape &key, const Shape &value,
                               bool causal, std::string &error) {
  if (query.size() < 2 || key.size() != query.size() || value.size() != query.size()) {
    error = "attention needs q, k, v of one rank >= 2, got " + format(query) + ", " +
            format(key) + ", " + format(value);
    return std::nullopt;
  }
  size_t r = query.size();
  if (!std::equal(query.begin(), query.end() - 2, key.begin()) ||
      !std::equal(query.begin(), query.end() - 2, value.begin())) {
    error = "attention q, k, v must share their leading dimensions, got " + format(query) +
            ", " + format(key) + ", " + format(value);
    return std::nullopt;
  }
  if (query[r - 1] != key[r - 1]) {
    error = "attention q and k must have the same head dimension, got " +
            std::to_string(query[r - 1]) + " and " + std::to_string(key[r - 1]);
    return std::nullopt;
  }
  if (key[r - 2] != value[r - 2]) {
    error = "attention k and v must have the same sequence length, got " +
            std::to_string(key[r - 2]) + " and " + std::to_string(value[r - 2]);
    return std::nullopt;
  }
  if (causal && !causalScores({query[r - 2], key[r - 2]}, error))
    return std::nullopt;
  Shape result = query;
  result.back() = value.back();
  return result;
}

bool crossEntropy(const Shape &logits, const Shape &labels, std::string &error) {
  if (logits.empty() || labels.size() + 1 != logits.size() ||
      !std::equal(labels.begin(), labels.end(), logits.begin())) {
    error = "cross_entropy needs logits [..., C] and labels [...] with the same leading "
            "shape, got " +
            format(logits) + " and " + format(labels);
    return false;
  }
  return true;
}

} // namespace ampc::shape
