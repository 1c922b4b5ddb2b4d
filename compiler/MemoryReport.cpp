//===- MemoryReport.cpp - `ampc report memory` ----------------------------===//

#include "compiler/MemoryReport.h"
#include "compiler/PlanEmitter.h"
#include "passes/OpCost.h"
#include "passes/RematAdapter.h"

#include "llvm/Support/Format.h"

#include <algorithm>

using namespace mlir;
using namespace ampc::graph;

namespace ampc {

std::string formatBytes(int64_t bytes) {
  double value = double(bytes);
  const char *unit = "B";
  for (const char *larger : {"kB", "MB", "GB", "TB"})
    if (value >= 1000) {
      value /= 1000;
      unit = larger;
    }
  std::string text;
  llvm::raw_string_ostream os(text);
  if (unit[0] == 'B')
    os << bytes << " B";
  else
    os << llvm::format("%.1f %s", value, unit);
  return text;
}

static int64_t intAttr(Operation *op, llvm::StringRef name) {
  auto attr = op->getAttrOfType<IntegerAttr>(name);
  return attr ? attr.getInt() : 0;
}

MemoryTotals memoryTotals(ModelOp model) {
  MemoryTotals totals;
  PersistentBytes persistent = persistentBytes(model);
  totals.parameters = persistent.parameters;
  totals.parameterCopies = persistent.parameterCopies;
  totals.gradients = persistent.gradients;
  totals.optimizerState = persistent.optimizerState;
  totals.inputs = persistent.inputs;
  totals.constants = persistent.constants;
  func::FuncOp entry = model.getEntryFunction();
  totals.microStepArena = intAttr(entry, "arena_bytes");
  totals.microStepPeakLive = intAttr(entry, "peak_live_bytes");
  if (auto step = mlir::SymbolTable::lookupNearestSymbolFrom<func::FuncOp>(
          model, StringAttr::get(model.getContext(), "optimizer_step")))
    totals.optimizerStepArena = intAttr(step, "arena_bytes");
  totals.peak = totals.parameters + totals.parameterCopies + totals.gradients +
                totals.optimizerState + totals.inputs + totals.constants +
                std::max(totals.microStepArena, totals.optimizerStepArena);
  return totals;
}

void printMemoryReport(ModelOp model, llvm::raw_ostream &os, int largest) {
  MemoryTotals totals = memoryTotals(model);
  auto mode = model->getAttrOfType<StringAttr>("precision_mode");
  os << "memory of @" << model.getSymName() << " ("
     << (mode ? mode.getValue() : llvm::StringRef("fp32")) << "):\n";
  auto row = [&](const char *what, int64_t bytes) {
    os << llvm::format("  %-42s %12s\n", what, formatBytes(bytes).c_str());
  };
  os << "persistent\n";
  row("parameters (f32 master weights)", totals.parameters);
  row("parameter copies (reduced precision)", totals.parameterCopies);
  row("gradient accumulators (f32)", totals.gradients);
  row("optimizer state (f32)", totals.optimizerState);
  row("inputs (one micro-batch)", totals.inputs);
  row("constants", totals.constants);
  os << "arenas (reused by every micro step / optimizer step)\n";
  row("micro_step arena", totals.microStepArena);
  row("  peak of live values (lower bound)", totals.microStepPeakLive);
  row("optimizer_step arena", totals.optimizerStepArena);
  row("peak (persistent + largest arena)", totals.peak);

  // The values live at the op where the micro step's live bytes peak.
  func::FuncOp entry = model.getEntryFunction();
  Block &body = entry.getBody().front();
  llvm::DenseMap<Operation *, int64_t> indexOf;
  int64_t count = 0;
  for (Operation &op : body)
    indexOf[&op] = count++;
  struct Live {
    int64_t first, last, bytes;
    Operation *op;
    Value value;
  };
  std::vector<Live> values;
  // A view (a reshape of an arena value) shares its source's bytes, and so does the result of
  // an op working in place over an operand that dies there: their readers extend the source's
  // life instead of adding a value (graph-plan-memory gives them the same offset).
  llvm::DenseMap<Value, size_t> owner;
  for (Operation &op : body) {
    if (!op.hasAttr("arena_offsets"))
      continue;
    for (OpResult result : op.getResults()) {
      size_t index = values.size();
      int inPlace = graph::inPlaceOperand(&op);
      if (graph::viewSource(&op) && owner.count(op.getOperand(0)))
        index = owner[op.getOperand(0)];
      else if (inPlace >= 0 && owner.count(op.getOperand(inPlace)) &&
               values[owner[op.getOperand(inPlace)]].last == indexOf[&op] &&
               values[owner[op.getOperand(inPlace)]].bytes == bytesOf(result.getType()))
        index = owner[op.getOperand(inPlace)]; // written over its operand
      else
        values.push_back({indexOf[&op], indexOf[&op], bytesOf(result.getType()), &op, result});
      owner[result] = index;
      for (Operation *user : result.getUsers())
        values[index].last = std::max(values[index].last,
                                      llvm::isa<LossOp, func::ReturnOp>(user) ? count
                                                                              : indexOf[user]);
    }
  }
  // The op index with the most live bytes.
  std::vector<int64_t> liveAt(count + 1, 0);
  for (const Live &value : values)
    for (int64_t i = value.first; i <= value.last; ++i)
      liveAt[i] += value.bytes;
  int64_t peakIndex =
      std::max_element(liveAt.begin(), liveAt.end()) - liveAt.begin();
  std::vector<Live> atPeak;
  for (const Live &value : values)
    if (value.first <= peakIndex && peakIndex <= value.last)
      atPeak.push_back(value);
  std::stable_sort(atPeak.begin(), atPeak.end(),
                   [](const Live &a, const Live &b) { return a.bytes > b.bytes; });
  Operation *peakOp = nullptr;
  for (Operation &op : body)
    if (indexOf[&op] == peakIndex)
      peakOp = &op;
  os << "largest values live at the micro step's peak";
  if (peakOp)
    os << " (at '" << peakOp->getName().stripDialect() << "', "
       << formatLocation(peakOp->getLoc(), /*brief=*/true) << ", op " << peakIndex << " of "
       << count << ")";
  os << ":\n";
  for (int i = 0; i < largest && i < static_cast<int>(atPeak.size()); ++i) {
    const Live &value = atPeak[i];
    std::string type;
    llvm::raw_string_ostream typeOs(type);
    typeOs << value.value.getType();
    os << llvm::format("  %10s  %-18s %-32s %s\n", formatBytes(value.bytes).c_str(),
                       value.op->getName().stripDialect().str().c_str(), type.c_str(),
                       formatLocation(value.op->getLoc(), /*brief=*/true).c_str());
  }
}

} // namespace ampc
