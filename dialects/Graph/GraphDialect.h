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

#endif // AMPC_DIALECTS_GRAPH_GRAPHDIALECT_H
