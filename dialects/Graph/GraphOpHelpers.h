//===- GraphOpHelpers.h - Shape helpers of the graph ops' verifiers -*- C++ -*-===//
//
// Private to dialects/Graph: small helpers GraphOps.cpp and GraphTrainingOps.cpp share.
//
//===--------------------------------------------------------------------------===//

#ifndef AMPC_DIALECTS_GRAPH_GRAPHOPHELPERS_H
#define AMPC_DIALECTS_GRAPH_GRAPHOPHELPERS_H

#include "runtime/plan/ShapeRules.h"

#include "mlir/IR/BuiltinTypes.h"

#include <cstdint>
#include <optional>
#include <vector>

namespace ampc::graph {

/// The extents of a statically shaped ranked tensor type, or nullopt.
inline std::optional<plan::Shape> staticShape(mlir::Type type) {
  auto tensor = llvm::dyn_cast<mlir::RankedTensorType>(type);
  if (!tensor || !tensor.hasStaticShape())
    return std::nullopt;
  return plan::Shape(tensor.getShape().begin(), tensor.getShape().end());
}

inline std::vector<int64_t> toVector(llvm::ArrayRef<int64_t> values) {
  return std::vector<int64_t>(values.begin(), values.end());
}

} // namespace ampc::graph

#endif // AMPC_DIALECTS_GRAPH_GRAPHOPHELPERS_H
