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
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "dialects/Graph/GraphDialect.h.inc"
#include "dialects/Graph/GraphEnums.h.inc"

#define GET_ATTRDEF_CLASSES
#include "dialects/Graph/GraphAttrs.h.inc"

#define GET_OP_CLASSES
#include "dialects/Graph/GraphOps.h.inc"

namespace ampc::graph {
/// A real number as the dialect prints it: the shortest text that reads back exactly, always
/// with a '.' ("0.02", "1.0e-05").
std::string formatReal(double value);
} // namespace ampc::graph

#endif // AMPC_DIALECTS_GRAPH_GRAPHDIALECT_H
