//===- RematPlanner.h - what to save and what to recompute under a budget -*-
// C++ -*-===//
//
// Rematerialization planning as plain data, for graph-plan-remat (no MLIR
// here).
//
// The problem. A training step is a schedule of ops in program order: ops [0,
// numForward) are the forward part, the rest the backward part. Op i defines
// one value of `bytes` bytes; its operands are indices of earlier ops
// (parameters and batch inputs are outside the graph: they are part of
// `persistentBytes`, which is added at every point). A forward value that some op
// reads and that is not `pinned` is a *candidate*; a plan decides, for every
// candidate, KEEP or RECOMPUTE (drop after the forward). Pinned values are always
// kept. The candidates a backward op reads are *needed*: kept or rebuilt. Keeping
// a value no backward op reads costs nothing unless a clone reads it: it is a
// checkpoint that recomputation can start from (a transformer layer's input).
//
// The emitted schedule. The forward ops run in order. Then the backward ops run
// in order; just before backward op b, every forward value b reads that is not
// available is materialized by a *clone* of its op, after the clones of its own
// unavailable forward operands (recursively, so a recomputed value drags in the
// forward-only values between it and the nearest kept or pinned ones). A value
// is available if it is pinned, kept, or already cloned: a clone, once made,
// serves every later reader; a dropped value is available to nobody. `cost` (FLOPs) is what
// one clone costs; the plan's
// extra cost is the sum over its clones. Random ops (dropout) may be cloned:
// their counter-based generator reproduces the forward values exactly.
//
// Memory. Every value instance (forward op, clone, backward op) is live from
// the step that defines it through the step of its last reader in the emitted
// schedule, inclusive (or just at its definition if nothing reads it). A view
// (`aliasOf`) owns no bytes: reading it reads the storage it shares; an op that
// may work in place (`inPlaceOf`) takes over its operand's storage when nothing
// reads that storage after it. A kept
// candidate's last reader is a backward op or clone; a recomputed candidate's
// original dies at its last forward reader. The peak of a plan is
// `persistentBytes` plus the largest sum of live bytes at one step;
// `simulateRemat` computes it exactly.
//
// The algorithm (`planRemat`).
//  1. Min cut. Each forward op v becomes v_in -> v_out; source -> v_in costs
//     v's recompute cost, v_in -> v_out costs lambda * bytes(v) (infinite for
//     values nothing reads, zero for pinned ones), u_out -> v_in is infinite for
//     each operand u, and v_out -> sink is infinite for every needed value. A
//     finite cut keeps the candidates whose v_in -> v_out edge is cut and drops
//     the others; a needed value whose v_in is on the sink side is recomputed.
//     Its capacity is exactly recompute cost + lambda * kept bytes (Boost.Graph
//     push_relabel_max_flow). lambda is swept over a geometric grid, once with
//     matmul recompute cost scaled up (so cheap elementwise ops are recomputed
//     first) and once at their true cost.
//  2. Saved bytes are not the peak: on a chain, recomputing everything from the
//  input saves no
//     bytes and makes the backward materialize the whole chain. So each
//     distinct cut is thinned Chen-style: walking forward, a kept value stays
//     kept only when the bytes accumulated since the last kept one exceed a
//     segment bound; the bound is swept geometrically. This gives the sqrt(n)
//     schedules on chains.
//  3. Repeated blocks. Ops with a `blockId` (one per transformer layer) and a
//     `positionInBlock` are grouped by position across the blocks of equal
//     length. Every frontier plan is projected onto uniform plans (one block's
//     decisions applied to every block); layer checkpointing plans are added
//     (keep what a block hands to other blocks, in every block or every k-th,
//     recompute the rest of the block, optionally keeping its matmuls).
//  4. Every candidate plan is simulated exactly. Then a few rounds of local
//     search flip one decision of each plan near the frontier (a position of
//     every block at once where blocks repeat, so a layer's plan is searched
//     once and applied to all layers); on small problems pairs of flips, from
//     the first three Pareto layers; under a cap on simulated steps that keeps
//     GPT-sized problems fast.
//  5. The Pareto frontier of (peak, cost) is kept: peaks ascending, cost
//     strictly descending (among plans of equal peak and cost, the one with
//     less matmul recompute). The plan for a budget is the frontier's cheapest
//     plan whose peak fits. The frontier does not depend on the budget, so a
//     smaller budget picks a prefix of it: planned peaks never grow and costs
//     never shrink as the budget shrinks (monotone by construction). Everything
//     iterates in index order: deterministic.
//  The objective is true FLOPs; matmuls are kept by preference only through the
//  discouraged sweep of step 1 and the thinning that leaves them kept, so a
//  matmul is recomputed only when no plan found without it meets the budget as
//  cheaply.
//===--------------------------------------------------------------------------===//

#ifndef AMPC_PASSES_REMATPLANNER_H
#define AMPC_PASSES_REMATPLANNER_H

#include <cstdint>
#include <string>
#include <vector>

namespace ampc::graph {

/// One op of the training step and the value it defines.
struct RematOp {
  std::string name;
  /// Size of the value it defines.
  int64_t bytes = 0;
  /// FLOPs to recompute it.
  double cost = 0;
  bool isMatmul = false;
  /// Dropout and the like: recomputable because the generator is counter-based.
  bool isRandom = false;
  /// Must be kept (not recomputable): its value lives to its last reader.
  bool pinned = false;
  /// Indices of earlier ops it reads.
  std::vector<int64_t> operands;
  /// A view (reshape): the index of the operand whose storage it shares, or -1. A view defines
  /// no bytes of its own; reading it keeps that operand's storage alive.
  int64_t aliasOf = -1;
  /// An op that may write its result over an operand (the index, or -1): it does when that
  /// operand's storage has no later reader and the sizes agree.
  int64_t inPlaceOf = -1;
  /// Repeated layers: which layer (-1: none) and which op of the layer.
  int64_t blockId = -1;
  int64_t positionInBlock = -1;
};

struct RematProblem {
  std::vector<RematOp> ops;
  /// ops [0, numForward) are the forward part, the rest the backward part.
  int64_t numForward = 0;
  /// Parameters, optimizer state, gradient accumulators, inputs: live
  /// everywhere.
  int64_t persistentBytes = 0;
};

/// One step of the emitted schedule.
struct RematStep {
  int64_t op = 0;
  bool isClone = false;
};

/// A value instance live at the peak.
struct PeakContributor {
  /// -1 for the persistent bytes.
  int64_t op = -1;
  bool isClone = false;
  int64_t bytes = 0;
  std::string name;
};

/// The exact simulation of one plan.
struct RematSimulation {
  int64_t peakBytes = 0;
  /// The step of the emitted schedule where the peak is reached (first such
  /// step).
  int64_t peakStep = 0;
  /// Sum of clone costs, and the part of it spent on matmuls.
  double extraCost = 0;
  double matmulCost = 0;
  std::vector<RematStep> schedule;
  /// Per step of `schedule`: the last step that reads the storage it owns (itself when
  /// nothing does; -1 when it shares another step's storage: a view or an in-place op), and
  /// the bytes live at that step (persistent bytes excluded).
  std::vector<int64_t> lastUse;
  std::vector<int64_t> liveBytes;
  /// Persistent bytes first, then the instances live at the peak, largest
  /// first.
  std::vector<PeakContributor> atPeak;
};

/// True for forward, non-pinned values read by a backward op: the ones a plan
/// decides.
std::vector<bool> rematCandidates(const RematProblem &problem);

/// Simulates the plan where `recompute[v]` marks the candidates to recompute
/// (other entries are ignored).
RematSimulation simulateRemat(const RematProblem &problem, const std::vector<bool> &recompute);

struct RematPlan {
  /// False when no plan the planner knows fits the budget; the fields below
  /// then describe the plan with the smallest peak.
  bool feasible = false;
  int64_t budgetBytes = 0;
  /// Per op: true for the candidates to recompute.
  std::vector<bool> recompute;
  RematSimulation simulation;
  /// The smallest peak among the planner's plans: the smallest budget it can
  /// meet.
  int64_t minimumBudgetBytes = 0;
  /// For infeasible budgets: a one-line cause naming what dominates the
  /// minimum.
  std::string diagnostic;
};

/// The planner's (peak, cost) trade-off curve: peaks ascending, costs strictly
/// descending.
struct RematFrontier {
  std::vector<std::vector<bool>> plans;
  std::vector<RematSimulation> simulations;
};

/// All the trade-offs the planner found; independent of any budget.
RematFrontier rematFrontier(const RematProblem &problem);

/// The cheapest frontier plan whose simulated peak is <= `budgetBytes`, or an
/// infeasible result carrying the smallest budget the planner can meet and what
/// dominates it.
RematPlan planRemat(const RematProblem &problem, int64_t budgetBytes);
RematPlan planRemat(const RematProblem &problem, const RematFrontier &frontier,
                    int64_t budgetBytes);

} // namespace ampc::graph

#endif // AMPC_PASSES_REMATPLANNER_H
