//===- OpCost.h - what an op costs: FLOPs, bytes, persistent memory -*- C++ -*-===//
//
// The cost model shared by the passes that trade compute for memory (graph-plan-remat) and the
// reports (`ampc report precision|memory`): an op's floating-point operations, a value's bytes
// in memory, and the persistent buffers of a training step.
//
//===--------------------------------------------------------------------------===//

#ifndef AMPC_PASSES_OPCOST_H
#define AMPC_PASSES_OPCOST_H

#include "dialects/Graph/GraphDialect.h"

#include <cstdint>

namespace ampc::graph {

/// An estimate of an op's floating-point operations: 2 M N K for a matmul, 4 T S Dh per
/// attention head forward and 10 T S Dh for its gradient (the scores are recomputed), the
/// input's elements for reductions and losses, one per result element otherwise.
double estimateFlops(mlir::Operation *op);

/// Elements of a ranked tensor type (0 for anything else).
int64_t elementsOf(mlir::Type type);

/// Bytes per element of an int or float element type (at least 1).
int64_t bytesPerElement(mlir::Type element);

/// Bytes of a ranked tensor type in memory.
int64_t bytesOf(mlir::Type type);

/// The buffers a training step keeps for its whole run, by kind.
struct PersistentBytes {
  int64_t parameters = 0, parameterCopies = 0, gradients = 0, optimizerState = 0, inputs = 0,
          constants = 0;
  int64_t total() const {
    return parameters + parameterCopies + gradients + optimizerState + inputs + constants;
  }
};

/// The persistent buffers of `model`: its parameters, parameter copies, inputs, state
/// (gradient accumulators are the `<param>.grad` states, the rest is optimizer state), the loss
/// scaler's fields, and the constants of its entry function.
PersistentBytes persistentBytes(ModelOp model);

} // namespace ampc::graph

#endif // AMPC_PASSES_OPCOST_H
