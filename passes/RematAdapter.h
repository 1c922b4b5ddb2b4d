//===- RematAdapter.h - the training step as a remat problem, and back -*- C++ -*-===//
//
// What graph-plan-remat and `ampc report memory` share: the micro step of a training model,
// read as a RematProblem (passes/RematPlanner.h) in its emitted op order, and the rewrite that
// applies a chosen plan to the IR.
//
// Reading. Every op of micro_step up to the first graph.grad_seed is forward, the rest
// (including the terminator) backward. An op's value is the sum of its results' bytes, each
// rounded up to the arena alignment; ops that only name a persistent buffer or constant data
// (get_param, get_input, get_loss_scale, constant) define no arena bytes and are pinned, as are
// ops with side effects other than dropout (whose counter-based generator reproduces its mask),
// and the values the loss op or the terminator read (they live to the end). Costs are
// estimateFlops; matmul and attention count as matmuls. A reshape of an arena value is a view:
// it shares its source's storage (no bytes of its own, no cost); cross_entropy_grad writes over
// its logits when they have no later reader (inPlaceOperand). Forward ops inlined from one call
// share a block id (the call site), numbered by their position in the call.
//
// Persistent bytes: parameters, their copies, gradient accumulators, optimizer and loss-scaler
// state, inputs, constants, and a fixed workspace (cuBLASLt's). The optimizer step's own live
// values are a floor under any plan's peak.
//
// Applying. The forward is left as it is. Just before each backward op, the clones the plan's
// schedule puts there are inserted (operands remapped to earlier clones) and carry the unit
// attribute `recomputed`; the backward op then reads the clones instead of the originals.
//
//===--------------------------------------------------------------------------===//

#ifndef AMPC_PASSES_REMATADAPTER_H
#define AMPC_PASSES_REMATADAPTER_H

#include "dialects/Graph/GraphDialect.h"
#include "passes/ArenaValues.h"
#include "passes/MemoryPlanner.h"
#include "passes/OpCost.h"
#include "passes/RematPlanner.h"

#include <optional>
#include <string>
#include <vector>

namespace ampc::graph {

/// The micro step of a training model as a RematProblem.
struct RematGraph {
  RematProblem problem;
  /// Per problem op: the IR op (the last one is micro_step's terminator).
  std::vector<mlir::Operation *> ops;
  PersistentBytes persistent;
  int64_t workspaceBytes = 0;
  /// Live bytes of the optimizer step at its busiest op.
  int64_t optimizerStepBytes = 0;
  /// FLOPs of one micro step as written (forward and backward).
  double stepFlops = 0;
  int64_t alignment = 256;

  /// The whole step's peak for a simulation of the micro step: its peak, or the persistent
  /// bytes plus the optimizer step's live bytes when larger.
  int64_t stepPeak(const RematSimulation &simulation) const;
  /// The arena a best-fit placement of the simulation's schedule needs.
  int64_t arenaBytes(const RematSimulation &simulation) const;
  /// What the plan needs in all: the step peak, or the persistent bytes plus the arena when
  /// larger. Budgets given as a share are shares of this for the plan without remat.
  int64_t planBytes(const RematSimulation &simulation) const;
};

/// Reads `model`'s micro step. Emits an error and fails when the model has no training step.
mlir::FailureOr<RematGraph> buildRematGraph(ModelOp model, int64_t alignment,
                                            int64_t workspaceBytes);

/// The index of the cheapest frontier plan whose step peak and best-fit arena (plus the
/// persistent bytes) both fit `budgetBytes`; std::nullopt when none does.
std::optional<size_t> chooseRematPlan(const RematGraph &graph, const RematFrontier &frontier,
                                      int64_t budgetBytes);

/// Why `budgetBytes` cannot be met: below the persistent buffers and the optimizer step, or
/// below the smallest peak the planner found (naming what dominates it).
std::string infeasibleBudgetMessage(const RematGraph &graph, const RematFrontier &frontier,
                                    int64_t budgetBytes);

/// Rewrites micro_step to the schedule of `simulation` (a simulation of `graph.problem` with its
/// schedule). Returns the number of clones inserted.
int64_t applyRemat(const RematGraph &graph, const RematSimulation &simulation);

/// A memory budget as written by users: bytes ("123"), binary or decimal units ("6GiB",
/// "512MiB", "64KiB", "1.5GB", "800MB", "4kB"), or a percentage of the plan without remat
/// ("75%"). Returns std::nullopt for anything else.
struct ByteSize {
  double value = 0;
  bool percent = false;
  /// The bytes, given the no-remat peak for percentages.
  int64_t resolve(int64_t noRematPeak) const;
};
std::optional<ByteSize> parseByteSize(llvm::StringRef text);

/// How a budget is written, for the message when one cannot be read.
inline constexpr const char *kBudgetSyntax = "(write bytes, 6GiB, 512MiB, 1.5GB or 75%)";

//===----------------------------------------------------------------------===//
// The one entry point of rematerialization: graph-plan-remat and `ampc report memory` both
// analyse the step with analyzeRemat() and decide each budget with decideRemat().
//===----------------------------------------------------------------------===//

/// A training step analysed for rematerialization: its problem, the frontier of plans
/// (cheapest for each peak) and the plan without remat.
struct RematAnalysis {
  RematGraph graph;
  RematFrontier frontier;
  RematSimulation noRemat;
  /// What the step needs without remat (graph.planBytes(noRemat)); a budget given as a share
  /// is a share of this.
  int64_t noRematPeak = 0;
  /// Seconds spent building the frontier.
  double planningSeconds = 0;
};

/// Reads and plans `model`'s micro step. Emits an error and fails when the model has no
/// training step.
mlir::FailureOr<RematAnalysis> analyzeRemat(ModelOp model, int64_t alignment,
                                            int64_t workspaceBytes);

/// The plan for one budget.
struct RematDecision {
  int64_t budgetBytes = 0;
  /// The chosen plan (a simulation of the analysis's frontier); null when none fits.
  const RematSimulation *plan = nullptr;
  /// When no plan fits: why, naming the smallest budget that can be met.
  std::string infeasible;
  /// When a plan fits: what graph-plan-remat records on the micro step.
  int64_t peakBytes = 0, arenaBytes = 0, liveBytes = 0, clones = 0;
  double extraFlops = 0;
};
RematDecision decideRemat(const RematAnalysis &analysis, const ByteSize &budget);

/// The typed result of a decision (a plan was chosen) as the #graph.remat attribute.
RematAttr rematResult(const RematAnalysis &analysis, const RematDecision &decision,
                      mlir::MLIRContext *context);

} // namespace ampc::graph

#endif // AMPC_PASSES_REMATADAPTER_H
