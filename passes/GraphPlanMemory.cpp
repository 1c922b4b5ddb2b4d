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

/// Bytes of a tensor value in memory.
int64_t bytesOf(Value value) {
  auto type = llvm::cast<RankedTensorType>(value.getType());
  int64_t bits = type.getElementType().getIntOrFloatBitWidth();
  return type.getNumElements() * std::max<int64_t>(1, bits / 8);
}

/// Results that name a persistent buffer or constant data rather than computing a new value.
bool isArenaValue(Operation *op) {
  return !llvm::isa<GetParamOp, GetInputOp, GetLossScaleOp, ConstantOp>(op);
}

struct GraphPlanMemoryPass : ampc::graph::impl::GraphPlanMemoryBase<GraphPlanMemoryPass> {
  using Base::Base;

  void planFunction(func::FuncOp func) {
    Block &body = func.getBody().front();
    llvm::DenseMap<Operation *, int64_t> indexOf;
    int64_t count = 0;
    for (Operation &op : body)
      indexOf[&op] = count++;

    std::vector<BufferLifetime> lifetimes;
    std::vector<std::pair<Operation *, unsigned>> owners;
    // A view shares its source's storage: the lifetime of the value that owns the bytes.
    llvm::DenseMap<Value, size_t> lifetimeOf;
    std::vector<std::pair<Operation *, size_t>> views;
    for (Operation &op : body) {
      if (!isArenaValue(&op))
        continue;
      for (OpResult result : op.getResults()) {
        size_t owner = lifetimes.size();
        int inPlace = inPlaceOperand(&op);
        std::optional<size_t> reused;
        if (inPlace >= 0 && lifetimeOf.count(op.getOperand(inPlace))) {
          size_t source = lifetimeOf.lookup(op.getOperand(inPlace));
          if (lifetimes[source].last == indexOf[&op] &&
              lifetimes[source].bytes == bytesOf(result))
            reused = source;
        }
        if (viewSource(&op) || reused) {
          owner = reused ? *reused : lifetimeOf.lookup(op.getOperand(0));
          views.emplace_back(&op, owner);
        } else {
          BufferLifetime lifetime;
          lifetime.bytes = bytesOf(result);
          lifetime.first = lifetime.last = indexOf[&op];
          lifetimes.push_back(lifetime);
          owners.emplace_back(&op, result.getResultNumber());
        }
        lifetimeOf[result] = owner;
        for (Operation *user : result.getUsers()) {
          // The loss and the returned values are read after the function's last op.
          int64_t last = llvm::isa<LossOp, func::ReturnOp>(user) ? count : indexOf[user];
          lifetimes[owner].last = std::max(lifetimes[owner].last, last);
        }
      }
    }
    MemoryPlan plan = planMemory(lifetimes, alignment);

    llvm::DenseMap<Operation *, llvm::SmallVector<int64_t>> offsets;
    for (auto [owner, offset] : llvm::zip(owners, plan.offsets)) {
      auto &list = offsets[owner.first];
      list.resize(owner.first->getNumResults(), -1);
      list[owner.second] = offset;
    }
    for (auto [view, owner] : views)
      offsets[view] = {plan.offsets[owner]};
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
