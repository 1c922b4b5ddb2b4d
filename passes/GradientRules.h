//===- GradientRules.h - vector-Jacobian products of the graph ops -*- C++ -*-===//
//
// One rule per forward op: given the gradients of its results, build the ops that compute the
// gradients of its operands. graph-build-training walks the forward ops in reverse and applies
// these rules; they are separate so each rule reads as the math it implements.
//
//===--------------------------------------------------------------------------===//

#ifndef AMPC_PASSES_GRADIENTRULES_H
#define AMPC_PASSES_GRADIENTRULES_H

#include "dialects/Graph/GraphDialect.h"

#include "mlir/IR/Builders.h"

namespace ampc::graph {

/// Builds gradient ops at the builder's insertion point.
class GradientBuilder {
public:
  explicit GradientBuilder(mlir::OpBuilder &builder) : b(builder) {}

  /// The gradients of `op`'s operands, given the gradients of its results (null where a
  /// result has none). An entry is null where an operand gets no gradient (integers, data that
  /// is not differentiated). Fails with a diagnostic on an op that has no rule.
  mlir::FailureOr<llvm::SmallVector<mlir::Value>>
  operandGradients(mlir::Operation *op, llvm::ArrayRef<mlir::Value> resultGrads);

  /// Sums `grad` over the dimensions that broadcasting added or stretched so that it has
  /// `shape`: the gradient of a broadcast operand.
  mlir::Value reduceToShape(mlir::Location loc, mlir::Value grad, llvm::ArrayRef<int64_t> shape);

  /// A scalar constant of the element type of `like`.
  mlir::Value scalar(mlir::Location loc, mlir::Type element, double value);

  /// The sum of two gradients of the same value.
  mlir::Value add(mlir::Location loc, mlir::Value a, mlir::Value b);

private:
  mlir::Value matmulGradLhs(mlir::Location loc, MatmulOp op, mlir::Value grad);
  mlir::Value matmulGradRhs(mlir::Location loc, MatmulOp op, mlir::Value grad);
  mlir::Value zerosLike(mlir::Location loc, mlir::Value value);

  mlir::OpBuilder &b;
};

} // namespace ampc::graph

#endif // AMPC_PASSES_GRADIENTRULES_H
