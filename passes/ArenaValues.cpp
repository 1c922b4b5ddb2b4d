//===- ArenaValues.cpp - a step function's values as arena lifetimes -----===//
//
// The one reading of a step function as arena values (ArenaValues.h): positions from the fusion
// schedule or the op order, then every result's storage, lifetime and sharing.
//
//===----------------------------------------------------------------------===//

#include "passes/ArenaValues.h"
#include "passes/OpCost.h"

#include "llvm/ADT/DenseMap.h"

#include <optional>

using namespace mlir;

namespace ampc::graph {

bool namesPersistentData(Operation *op) {
  return llvm::isa<GetParamOp, GetInputOp, GetLossScaleOp, ConstantOp>(op);
}

Operation *viewSource(Operation *op) {
  auto reshape = llvm::dyn_cast<ReshapeOp>(op);
  if (!reshape)
    return nullptr;
  Operation *source = reshape.getInput().getDefiningOp();
  return source && !namesPersistentData(source) ? source : nullptr;
}

int inPlaceOperand(Operation *op) {
  auto grad = llvm::dyn_cast<CrossEntropyGradOp>(op);
  return grad && grad.getLogits().getType() == grad.getResult().getType() ? 0 : -1;
}

namespace {

/// Each op's position in the schedule and its group: the fused group's place in
/// graph.fusion_schedule, or the op's own index before fusion.
struct Schedule {
  llvm::DenseMap<Operation *, int64_t> positionOf;
  llvm::DenseMap<Operation *, int64_t> groupOf;
  int64_t positions = 0;
  bool fused = false;
};

Schedule scheduleOf(func::FuncOp func, std::vector<Operation *> &firstOp) {
  Schedule schedule;
  Block &body = func.getBody().front();
  auto order = func->getAttrOfType<DenseI64ArrayAttr>(GraphDialect::kFusionScheduleAttrName);
  if (!order) {
    for (Operation &op : body) {
      schedule.groupOf[&op] = schedule.positions;
      schedule.positionOf[&op] = schedule.positions++;
      firstOp.push_back(&op);
    }
    return schedule;
  }
  schedule.fused = true;
  llvm::DenseMap<int64_t, int64_t> placeOfGroup;
  for (auto [place, group] : llvm::enumerate(order.asArrayRef()))
    placeOfGroup[group] = static_cast<int64_t>(place);
  schedule.positions = static_cast<int64_t>(order.size());
  firstOp.assign(order.size(), nullptr);
  for (Operation &op : body) {
    auto fusion = op.getAttrOfType<FusionAttr>(GraphDialect::kFusionAttrName);
    // The dialect verifier guarantees every group is scheduled; an op outside every group (a
    // terminator added later) runs at the end.
    int64_t position = fusion && placeOfGroup.count(fusion.getGroup())
                           ? placeOfGroup[fusion.getGroup()]
                           : schedule.positions - 1;
    schedule.groupOf[&op] = fusion ? fusion.getGroup() : -1;
    schedule.positionOf[&op] = position;
    if (!firstOp[position])
      firstOp[position] = &op;
  }
  return schedule;
}

/// The storage a value reads: a view resolves to its source's.
Value storageOf(Value value) {
  while (Operation *op = value.getDefiningOp()) {
    if (!viewSource(op))
      break;
    value = op->getOperand(0);
  }
  return value;
}

} // namespace

ArenaValues collectArenaValues(func::FuncOp func) {
  ArenaValues values;
  Schedule schedule = scheduleOf(func, values.firstOp);
  values.positions = schedule.positions;
  values.fused = schedule.fused;
  const int64_t end = schedule.positions;

  // Per storage (a non-view result): the last position that reads it, and whether a reader is
  // outside its group. Readers of views count for their source.
  struct Use {
    int64_t last = -1;
    bool outside = false;
  };
  llvm::DenseMap<Value, Use> uses;
  Block &body = func.getBody().front();
  for (Operation &op : body) {
    if (viewSource(&op))
      continue; // A view reads nothing; its readers read its source.
    for (Value operand : op.getOperands()) {
      Value storage = storageOf(operand);
      Operation *def = storage.getDefiningOp();
      if (!def)
        continue;
      Use &use = uses[storage];
      bool atEnd = llvm::isa<LossOp, func::ReturnOp>(op);
      use.last = std::max(use.last, atEnd ? end : schedule.positionOf[&op]);
      use.outside |= atEnd || schedule.groupOf[&op] != schedule.groupOf[def];
    }
  }

  llvm::DenseMap<Value, size_t> lifetimeOf;
  for (Operation &op : body) {
    if (namesPersistentData(&op))
      continue;
    const int64_t position = schedule.positionOf[&op];
    if (viewSource(&op)) {
      auto source = lifetimeOf.find(storageOf(op.getResult(0)));
      if (source != lifetimeOf.end())
        values.sharing.emplace_back(&op, source->second);
      continue;
    }
    for (OpResult result : op.getResults()) {
      Use use = uses.lookup(result);
      // Before fusion every result is stored; after it, what leaves its kernel.
      if (schedule.fused && !use.outside)
        continue;
      const int64_t bytes = bytesOf(result.getType());
      const int64_t last = std::max(use.last, position);
      std::optional<size_t> shared;
      int inPlace = inPlaceOperand(&op);
      if (inPlace >= 0) {
        Value operand = storageOf(op.getOperand(inPlace));
        auto source = lifetimeOf.find(operand);
        // Only over logits nothing reads at a later position, and (fused) computed by another
        // kernel, which the gradient kernel then reads as its input.
        if (source != lifetimeOf.end() && values.lifetimes[source->second].last == position &&
            values.lifetimes[source->second].bytes == bytes &&
            (!schedule.fused || schedule.groupOf[operand.getDefiningOp()] != schedule.groupOf[&op]))
          shared = source->second;
      }
      if (shared) {
        values.lifetimes[*shared].last = std::max(values.lifetimes[*shared].last, last);
        values.sharing.emplace_back(&op, *shared);
        lifetimeOf[result] = *shared;
        continue;
      }
      lifetimeOf[result] = values.lifetimes.size();
      values.lifetimes.push_back({bytes, position, last});
      values.owners.emplace_back(&op, result.getResultNumber());
    }
  }
  return values;
}

} // namespace ampc::graph
