//===- ShapeRules.h - shape rules of the graph ops ------------*- C++ -*-===//
//
// The shape rules of every graph op as plain C++ on vectors of extents, so that the dialect's
// verifiers and any other consumer share one definition. Each rule returns the result shape, or
// std::nullopt with `error` set to a sentence a user can act on.
//
//===--------------------------------------------------------------------------===//

#ifndef AMPC_DIALECTS_GRAPH_SHAPERULES_H
#define AMPC_DIALECTS_GRAPH_SHAPERULES_H

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace ampc::shape {

using Shape = std::vector<int64_t>;

/// "[4, 8]"; "[]" for a scalar.
std::string format(const Shape &shape);

/// NumPy broadcasting: shapes aligned at the last dimension, each pair equal or one of them 1.
std::optional<Shape> broadcast(const Shape &lhs, const Shape &rhs, std::string &error);

/// Whether `from` broadcasts to exactly `to`.
bool broadcastsTo(const Shape &from, const Shape &to, std::string &error);

/// Batched matmul: after optional transposes of the last two dims, [..., M, K] x [..., K, N].
std::optional<Shape> matmul(Shape lhs, Shape rhs, bool transposeLhs, bool transposeRhs,
                            std::string &error);

std::optional<Shape> transpose(const Shape &input, const std::vector<int64_t> &permutation,
                               std::string &error);

std::optional<Shape> slice(const Shape &input, const std::vector<int64_t> &starts,
                           const std::vector<int64_t> &sizes, std::string &error);

std::optional<std::vector<Shape>> split(const Shape &input, int64_t axis,
                                        const std::vector<int64_t> &sizes,
                                        std::string &error);

std::optional<Shape> concat(const std::vector<Shape> &inputs, int64_t axis, std::string &error);

std::optional<Shape> reduce(const Shape &input, const std::vector<int64_t> &axes, bool keepdims,
                            std::string &error);

/// table [V, D], indices [...] -> [..., D].
std::optional<Shape> embedding(const Shape &table, const Shape &indices, std::string &error);

/// A gain (or bias) of a normalisation over the last axis must be [D].
bool normParameter(const Shape &input, const Shape &parameter, const char *what,
                   std::string &error);

/// Causal masking needs [..., T, S] with S >= T.
bool causalScores(const Shape &scores, std::string &error);

/// q [..., T, Dh], k [..., S, Dh], v [..., S, Dv] -> [..., T, Dv].
std::optional<Shape> attention(const Shape &query, const Shape &key, const Shape &value,
                               bool causal, std::string &error);

/// logits [..., C], labels [...]: the leading shapes agree.
bool crossEntropy(const Shape &logits, const Shape &labels, std::string &error);

int64_t numElements(const Shape &shape);

} // namespace ampc::shape

#endif // AMPC_DIALECTS_GRAPH_SHAPERULES_H
