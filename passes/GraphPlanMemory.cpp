//===- GraphPlanMemory.cpp - one arena per function for intermediate values --===//
//
// Adapts the IR to MemoryPlanner: every result of an op in the function is a value of the
// arena, except what only names a persistent buffer (a parameter, its copy, an input, the loss
// scale) or plan constant data. A value lives from its defining op to its last reader; one the
// function returns or marks as the loss lives to the end. A view (a reshape of an arena value)
// takes its source's offset, and its readers extend its source's lifetime; so does the result of
// an op that works in place (cross_entropy_grad) over an operand nobody reads afterwards.
//
//===--------------------------------------------------------------------------===//

#include "passes/MemoryPlanner.h"
#include "passes/Passes.h"
#include "passes/RematAdapter.h"

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

    llvm::DenseMap<Operation *, llvm::SmallVector<int64_t>> offsets;
    for (auto [owner, offset] : llvm::zip(values.owners, plan.offsets)) {
      auto &list = offsets[owner.first];
      list.resize(owner.first->getNumResults(), -1);
      list[owner.second] = offset;
    }
    for (auto [op, owner] : values.sharing)
      offsets[op] = {plan.offsets[owner]};
    OpBuilder b(func.getContext());
    for (auto &[op, list] : offsets)
      op->setAttr("arena_offsets", b.getDenseI64ArrayAttr(list));
    func->setAttr("arena_bytes", b.getI64IntegerAttr(plan.arenaBytes));
    func->setAttr("peak_live_bytes", b.getI64IntegerAttr(plan.peakLiveBytes));
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
    if (auto step = mlir::SymbolTable::lookupNearestSymbolFrom<func::FuncOp>(
            model, StringAttr::get(model.getContext(), "optimizer_step")))
      planFunction(step);
  }
};

} // namespace
