//===- GraphOpHelpers.h - Shape helpers of the graph ops' verifiers -*- C++ -*-===//
//
// Private to dialects/Graph: the shape and type checks GraphOps.cpp, GraphAttentionOps.cpp and
// GraphTrainingOps.cpp share.
//
//===--------------------------------------------------------------------------===//

#ifndef AMPC_DIALECTS_GRAPH_GRAPHOPHELPERS_H
#define AMPC_DIALECTS_GRAPH_GRAPHOPHELPERS_H

#include "runtime/plan/Plan.h"
#include "runtime/plan/ShapeRules.h"

#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Value.h"
#include "mlir/IR/ValueRange.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringRef.h"

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

/// Reads the static shapes of `values` into `shapes`, or reports the first that has none.
/// Runs before the operand type constraints are checked, so it must reject anything unranked.
inline mlir::LogicalResult operandShapes(std::optional<mlir::Location> loc, llvm::StringRef op,
                                         mlir::ValueRange values,
                                         llvm::SmallVectorImpl<plan::Shape> &shapes) {
  for (mlir::Value value : values) {
    auto s = staticShape(value.getType());
    if (!s)
      return mlir::emitOptionalError(
          loc, "'", op, "' expects statically shaped ranked tensors, got ", value.getType());
    shapes.push_back(*s);
  }
  return mlir::success();
}

inline mlir::Type elementType(mlir::Value value) {
  return llvm::cast<mlir::ShapedType>(value.getType()).getElementType();
}

/// All `values` have one element type; otherwise a diagnostic suggesting a cast.
inline mlir::LogicalResult sameElementType(std::optional<mlir::Location> loc, llvm::StringRef op,
                                           mlir::ValueRange values) {
  for (mlir::Value value : values.drop_front())
    if (elementType(value) != elementType(values.front()))
      return mlir::emitOptionalError(loc, "'", op, "' operands have different element types ",
                                     elementType(values.front()), " and ", elementType(value),
                                     "; insert a graph.cast");
  return mlir::success();
}

inline mlir::RankedTensorType tensorOf(const plan::Shape &extents, mlir::Type element) {
  return mlir::RankedTensorType::get(extents, element);
}

/// `grad` must have exactly `expected` as its shape and the element type of `like`.
inline mlir::LogicalResult checkGradShape(std::optional<mlir::Location> loc, llvm::StringRef op,
                                          mlir::Value like, mlir::Value grad,
                                          const plan::Shape &expected) {
  auto shape = staticShape(grad.getType());
  if (!shape)
    return mlir::emitOptionalError(loc, "'", op, "' expects a statically shaped gradient, got ",
                                   grad.getType());
  if (mlir::failed(sameElementType(loc, op, {like, grad})))
    return mlir::failure();
  if (*shape != expected)
    return mlir::emitOptionalError(
        loc, "'", op, "' gradient has shape ", plan::shapeToString(*shape),
        " but the forward result has shape ", plan::shapeToString(expected));
  return mlir::success();
}

} // namespace ampc::graph

#endif // AMPC_DIALECTS_GRAPH_GRAPHOPHELPERS_H
