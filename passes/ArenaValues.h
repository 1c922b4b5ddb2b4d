//===- ArenaValues.h - a step function's values as arena lifetimes -*- C++ -*-===//
//
// What graph-plan-memory places, and what the remat planner and `ampc report memory` count: the
// values of a step function that take arena bytes, each with a lifetime over the function's
// schedule. No value is sized or placed anywhere else.
//
// The schedule is the function's fused groups in the order graph-fuse scheduled them
// (graph.fusion_schedule), or, before fusion, its ops in program order (each op its own group).
// A value takes arena bytes when it is stored: before fusion every result is; after fusion a
// result is stored when an op of another group (or the loss op or the terminator) reads it,
// directly or through views, since values a kernel computes and consumes inside itself never
// reach memory. A stored value lives from its group's position to the last position that reads
// it; one the function returns or marks as the loss lives to the end.
//
// Ops that only name a persistent buffer or constant data (get_param, get_input,
// get_loss_scale, constant) take no arena bytes. A view (a reshape of an arena value) shares its
// source's bytes, and its readers extend the source's lifetime. cross_entropy_grad may write its
// gradient over its logits (inPlaceOperand) when nothing reads the logits at a later position.
//
//===--------------------------------------------------------------------------===//

#ifndef AMPC_PASSES_ARENAVALUES_H
#define AMPC_PASSES_ARENAVALUES_H

#include "dialects/Graph/GraphDialect.h"
#include "passes/MemoryPlanner.h"

#include <utility>
#include <vector>

namespace ampc::graph {

/// Results that name a persistent buffer or constant data rather than computing a new value.
bool namesPersistentData(mlir::Operation *op);

/// For a view (a reshape of an arena value: row-major data is unchanged) the op whose result's
/// storage it shares; null otherwise.
mlir::Operation *viewSource(mlir::Operation *op);

/// The operand whose storage `op`'s result may take over when nothing reads that operand
/// afterwards (an op whose kernel reads each row completely before writing it): 0 for
/// cross_entropy_grad, whose logits and gradient have one type; -1 for every other op.
int inPlaceOperand(mlir::Operation *op);

/// The values of a function that take arena bytes, with their lifetimes over its schedule.
struct ArenaValues {
  std::vector<BufferLifetime> lifetimes;
  /// Per lifetime: the op and result number that own its bytes.
  std::vector<std::pair<mlir::Operation *, unsigned>> owners;
  /// Single-result ops sharing another value's bytes (views, in-place results), with the index
  /// of that lifetime.
  std::vector<std::pair<mlir::Operation *, size_t>> sharing;
  /// Positions of the schedule (fused groups or ops); a value read at the end lives to
  /// `positions`.
  int64_t positions = 0;
  /// Per position, its first op in program order (for reports).
  std::vector<mlir::Operation *> firstOp;
  /// Whether positions are fused groups (graph.fusion_schedule) rather than ops.
  bool fused = false;
};

/// Collects the arena values of `func` (fused or not, see the file comment).
ArenaValues collectArenaValues(mlir::func::FuncOp func);

} // namespace ampc::graph

#endif // AMPC_PASSES_ARENAVALUES_H
