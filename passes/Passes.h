//===- Passes.h - graph dialect passes ------------------------*- C++ -*-===//
//
// Declarations and registration of every pass in Passes.td.
//
//===--------------------------------------------------------------------------===//

#ifndef AMPC_PASSES_PASSES_H
#define AMPC_PASSES_PASSES_H

#include "dialects/Graph/GraphDialect.h"

#include "mlir/Pass/Pass.h"

#include <memory>

namespace ampc::graph {

#define GEN_PASS_DECL
#include "passes/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "passes/Passes.h.inc"

} // namespace ampc::graph

#endif // AMPC_PASSES_PASSES_H
