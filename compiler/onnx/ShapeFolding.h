//===- ShapeFolding.h - evaluate ONNX nodes on import-time constants -*- C++ -*-===//
//
// Exported models compute shapes, masks and position ids with Shape, Gather, Concat, Range,
// Equal, Where, ... on values that are all known at import time once the model's inputs have
// static shapes. These nodes are evaluated here, on host tensors, so the graph dialect sees only
// the tensor computation. The helpers that read an op's axes, starts or sizes (from attributes
// or, in newer opsets, from constant inputs) are shared with the op table.
//
//===--------------------------------------------------------------------------------===//

#ifndef AMPC_COMPILER_ONNX_SHAPEFOLDING_H
#define AMPC_COMPILER_ONNX_SHAPEFOLDING_H

#include "compiler/onnx/OnnxFile.h"

#include <optional>
#include <vector>

namespace ampc::onnximport {

/// The broadcast shape of \p a and \p b (NumPy rules); ImportError if they do not broadcast.
std::vector<int64_t> broadcastShapes(const std::vector<int64_t> &a, const std::vector<int64_t> &b);

/// \p axis in [-rank, rank) as [0, rank); ImportError otherwise.
int64_t normalizeAxis(int64_t axis, int64_t rank);
/// \p axes of a rank-\p rank tensor normalized (negative ones counted from the end), sorted and
/// without repeats: the axes a reduction's attribute or input names.
std::vector<int64_t> canonicalAxes(std::vector<int64_t> axes, int64_t rank);

/// The target shape of Reshape: 0 copies the input's dimension (unless allowzero), -1 is
/// inferred.
std::vector<int64_t> reshapeTarget(const std::vector<int64_t> &input,
                                   const std::vector<int64_t> &requested, bool allowZero);

/// Unsqueeze's result shape for \p axes (of the result's rank).
std::vector<int64_t> unsqueezeShape(const std::vector<int64_t> &input, std::vector<int64_t> axes);

/// Squeeze's result shape; no axes squeezes every dimension of size 1.
std::vector<int64_t> squeezeShape(const std::vector<int64_t> &input, std::vector<int64_t> axes);

/// One axis of a Slice with step 1: start and size after clamping.
struct SliceRange {
  int64_t start = 0, size = 0, step = 1;
};
/// The per-dimension ranges of Slice(input shape, starts, ends, axes, steps).
std::vector<SliceRange> sliceRanges(const std::vector<int64_t> &shape,
                                    const std::vector<int64_t> &starts,
                                    const std::vector<int64_t> &ends, std::vector<int64_t> axes,
                                    std::vector<int64_t> steps);

/// The sizes of Split's pieces: the `split` input or attribute, else num_outputs (or the node's
/// output count) equal pieces, the last one smaller when the axis does not divide.
std::vector<int64_t> splitSizes(int64_t extent, const std::vector<int64_t> &given, int64_t pieces);

/// Evaluates \p node on constant inputs (null for an absent optional input). Returns nothing when
/// the op is not one this file evaluates; throws ImportError for arguments the op rejects.
std::optional<std::vector<HostTensor>>
foldNode(const onnx::NodeProto &node, const std::vector<const HostTensor *> &inputs, int64_t opset);

} // namespace ampc::onnximport

#endif // AMPC_COMPILER_ONNX_SHAPEFOLDING_H
