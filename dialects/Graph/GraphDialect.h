//===- GraphDialect.h - the graph dialect ---------------------*- C++ -*-===//
//
// Declares the graph dialect, its attributes and its operations. Include this header to use
// the dialect.
//
//===--------------------------------------------------------------------------===//

#ifndef AMPC_DIALECTS_GRAPH_GRAPHDIALECT_H
#define AMPC_DIALECTS_GRAPH_GRAPHDIALECT_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "llvm/ADT/StringRef.h"

#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include <vector>

#include "dialects/Graph/GraphDialect.h.inc"

namespace ampc::graph {
/// The op classes of GraphBase.td: marker traits the passes query (op->hasTrait<...>() or
/// opKindsWith below) instead of keeping their own lists of ops.
#define AMPC_GRAPH_OP_CLASS(Name)                                                                  \
  template <typename ConcreteType>                                                                 \
  class Name : public mlir::OpTrait::TraitBase<ConcreteType, Name> {};
AMPC_GRAPH_OP_CLASS(ReducedPrecision)
AMPC_GRAPH_OP_CLASS(Fp32Precision)
AMPC_GRAPH_OP_CLASS(FollowPrecision)
AMPC_GRAPH_OP_CLASS(StoresFp32)
AMPC_GRAPH_OP_CLASS(ElementwiseKernel)
AMPC_GRAPH_OP_CLASS(DataMovementKernel)
AMPC_GRAPH_OP_CLASS(ReductionKernel)
AMPC_GRAPH_OP_CLASS(MatmulKernel)
AMPC_GRAPH_OP_CLASS(AttentionKernel)
AMPC_GRAPH_OP_CLASS(AccumulateKernel)
AMPC_GRAPH_OP_CLASS(OptimizerKernel)
AMPC_GRAPH_OP_CLASS(ImageKernel)
#undef AMPC_GRAPH_OP_CLASS
} // namespace ampc::graph
#include "dialects/Graph/GraphEnums.h.inc"

#define GET_ATTRDEF_CLASSES
#include "dialects/Graph/GraphAttrs.h.inc"

#include "dialects/Graph/GraphInterfaces.h.inc"

#define GET_OP_CLASSES
#include "dialects/Graph/GraphOps.h.inc"

namespace ampc::graph {
/// The precision classes an op can declare.
enum class PrecisionClass { Reduced, Fp32, Follow, StoresFp32 };

/// The kinds ("matmul", "layernorm_grad": op names without the dialect prefix) of every graph op
/// that declares \p precisionClass, in the order the ops are declared. Computed from the ops'
/// traits at compile time: no context is needed.
std::vector<llvm::StringRef> opKindsWith(PrecisionClass precisionClass);

/// A real number as the dialect prints it: the shortest text that reads back exactly, always
/// with a '.' ("0.02", "1.0e-05").
std::string formatReal(double value);
} // namespace ampc::graph

#endif // AMPC_DIALECTS_GRAPH_GRAPHDIALECT_H
