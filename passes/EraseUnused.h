//===- EraseUnused.h - drop what a rewrite left unread ---------*- C++ -*-===//
//
// The clean-up the rewriting passes (graph-raise-fused-ops, graph-pack-qkv-attention) share
// after replacing a pattern: the ops it swallowed are still there, unread.
//
//===----------------------------------------------------------------------===//

#ifndef AMPC_PASSES_ERASEUNUSED_H
#define AMPC_PASSES_ERASEUNUSED_H

#include "mlir/IR/Block.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

namespace ampc::graph {

/// Erases the ops of \p body that have results, none of them read, and no side effects, latest
/// first, until none is left (an op becomes unread once its last reader goes).
inline void eraseUnusedOps(mlir::Block &body) {
  bool erased = true;
  while (erased) {
    erased = false;
    for (mlir::Operation &op : llvm::make_early_inc_range(llvm::reverse(body)))
      if (op.getNumResults() && op.use_empty() && mlir::isMemoryEffectFree(&op)) {
        op.erase();
        erased = true;
      }
  }
}

} // namespace ampc::graph

#endif // AMPC_PASSES_ERASEUNUSED_H
