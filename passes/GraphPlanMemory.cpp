//===- GraphPlanMemory.cpp - one arena per function for intermediate values --===//
//
// The only placement of a training step's intermediate values: the device program allocates
// exactly the arena this pass sizes and puts each value at the offset it gives, and
// `ampc report memory` prints it. The values and their lifetimes are collectArenaValues'
// (ArenaValues.h): after graph-fuse, the values that leave their kernel, live over the fused
// groups in their scheduled order; before it, every result over the op order. MemoryPlanner
// (plain C++) gives the offsets. A view or an in-place result takes the offset of the value
// whose bytes it uses; a result never stored gets -1.
//
//===--------------------------------------------------------------------------===//

#include "passes/ArenaValues.h"
#include "passes/MemoryPlanner.h"
#include "passes/Passes.h"

#include "mlir/IR/Builders.h"

namespace ampc::graph {
#define GEN_PASS_DEF_GRAPHPLANMEMORY
#include "passes/Passes.h.inc"
} // namespace ampc::graph

using namespace mlir;
using namespace ampc::graph;

namespace {

struct GraphPlanMemoryPass : ampc::graph::impl::GraphPlanMemoryBase<GraphPlanMemoryPass> {
  using Base::Base;

  void planFunction(func::FuncOp func) {
    ArenaValues values = collectArenaValues(func);
    MemoryPlan plan = planMemory(values.lifetimes, alignment);
    // Every op that computes a value gets one offset per result (-1: never stored).
    llvm::DenseMap<Operation *, llvm::SmallVector<int64_t>> offsets;
    for (Operation &op : func.getBody().front()) {
      op.removeAttr(GraphDialect::kArenaOffsetsAttrName);
      if (op.getNumResults() > 0 && !namesPersistentData(&op))
        offsets[&op].assign(op.getNumResults(), -1);
    }
    for (auto [owner, offset] : llvm::zip(values.owners, plan.offsets))
      offsets[owner.first][owner.second] = offset;
    for (auto [op, owner] : values.sharing)
      offsets[op] = {plan.offsets[owner]};
    OpBuilder b(func.getContext());
    for (auto &[op, list] : offsets)
      op->setAttr(GraphDialect::kArenaOffsetsAttrName, b.getDenseI64ArrayAttr(list));
    func->setAttr(GraphDialect::kArenaAttrName,
                  ArenaAttr::get(func.getContext(), alignUp(plan.arenaBytes, alignment),
                                 plan.peakLiveBytes, alignment));
  }

  /// After graph-plan-remat, whether the arenas placed here keep the step within its budget:
  /// remat plans on the step in program order, the device runs the fused step placed here.
  void checkBudget(func::FuncOp entry, func::FuncOp step) {
    auto remat = entry->getAttrOfType<RematAttr>(GraphDialect::kRematAttrName);
    if (!remat)
      return;
    int64_t arena = entry->getAttrOfType<ArenaAttr>(GraphDialect::kArenaAttrName).getBytes();
    if (step)
      arena =
          std::max(arena, step->getAttrOfType<ArenaAttr>(GraphDialect::kArenaAttrName).getBytes());
    const int64_t placed = remat.getPersistentBytes() + arena;
    if (placed > remat.getBudgetBytes())
      entry.emitWarning("the placed arenas make the training step need ")
          << placed << " bytes (" << remat.getPersistentBytes() << " outside the arenas + " << arena
          << " arena), over the memory budget of " << remat.getBudgetBytes() << " bytes by "
          << placed - remat.getBudgetBytes() << "; give a smaller budget to recompute more";
  }

  void runOnOperation() override {
    ModelOp model = getOperation();
    if (alignment <= 0 || (alignment & (alignment - 1)) != 0) {
      model.emitError("graph-plan-memory: alignment must be a power of two, got ")
          << alignment.getValue();
      return signalPassFailure();
    }
    func::FuncOp entry = model.getEntryFunction();
    if (!entry) {
      model.emitError("has no entry function holding a graph.loss");
      return signalPassFailure();
    }
    if (!entry.getBody().front().getOps<func::CallOp>().empty()) {
      entry.emitError("calls other functions; run --graph-inline-calls before "
                      "--graph-plan-memory");
      return signalPassFailure();
    }
    planFunction(entry);
    auto step = mlir::SymbolTable::lookupNearestSymbolFrom<func::FuncOp>(
        model, StringAttr::get(model.getContext(), "optimizer_step"));
    if (step)
      planFunction(step);
    checkBudget(entry, step);
  }
};

} // namespace
