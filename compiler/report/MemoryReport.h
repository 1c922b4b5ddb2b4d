//===- MemoryReport.h - `ampc report memory` -------------------*- C++ -*-===//
//
// Reads what graph-plan-memory left on the training step (each function's arena and its
// offsets) and the persistent buffers of the model, and prints where a step's memory goes: the
// persistent buffers by kind, each function's arena, the peak, and the largest values live at
// the micro step's peak.
//
//===--------------------------------------------------------------------------===//

#ifndef AMPC_COMPILER_REPORT_MEMORYREPORT_H
#define AMPC_COMPILER_REPORT_MEMORYREPORT_H

#include "dialects/Graph/GraphDialect.h"
#include "passes/OpCost.h"

#include "llvm/Support/raw_ostream.h"

#include <cstdint>

namespace ampc {

/// The memory a training step needs, from a model that went through graph-plan-memory.
struct MemoryTotals {
  graph::PersistentBytes persistent;
  int64_t microStepArena = 0, microStepPeakLive = 0, optimizerStepArena = 0;
  /// Persistent buffers plus the larger arena: what one device must hold.
  int64_t peak = 0;
};

MemoryTotals memoryTotals(graph::ModelOp model);

/// Prints the report; `largest` values live at the micro step's peak are listed.
void printMemoryReport(graph::ModelOp model, llvm::raw_ostream &os, int largest = 10);

/// `ampc report memory --world-size N`: what each of N data-parallel ranks holds, without and
/// with the sharded optimizer (ZeRO-1, the runner's --shard-optimizer), which splits the
/// optimizer state by whole parameters as runtime/train/Sharding.h does.
void printDataParallelMemory(graph::ModelOp model, int worldSize, llvm::raw_ostream &os);

} // namespace ampc

#endif // AMPC_COMPILER_REPORT_MEMORYREPORT_H
