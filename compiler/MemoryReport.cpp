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
  totals.persistent = persistentBytes(model);
  func::FuncOp entry = model.getEntryFunction();
  totals.microStepArena = intAttr(entry, "arena_bytes");
  totals.microStepPeakLive = intAttr(entry, "peak_live_bytes");
  if (auto step = mlir::SymbolTable::lookupNearestSymbolFrom<func::FuncOp>(
          model, StringAttr::get(model.getContext(), "optimizer_step")))
    totals.optimizerStepArena = intAttr(step, "arena_bytes");
  totals.peak =
      totals.persistent.total() + std::max(totals.microStepArena, totals.optimizerStepArena);
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
  row("parameters (f32 master weights)", totals.persistent.parameters);
  row("parameter copies (reduced precision)", totals.persistent.parameterCopies);
  row("gradient accumulators (f32)", totals.persistent.gradients);
  row("optimizer state (f32)", totals.persistent.optimizerState);
  row("inputs (one micro-batch)", totals.persistent.inputs);
  row("constants", totals.persistent.constants);
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
  // Views and in-place results share their source's bytes (graph-plan-memory's offsets):
  // counted once, under the value that owns them.
  ArenaValues arena = collectArenaValues(entry);
  std::vector<Live> values;
  for (auto [lifetime, owner] : llvm::zip(arena.lifetimes, arena.owners))
    values.push_back({lifetime.first, lifetime.last, lifetime.bytes, owner.first,
                      owner.first->getResult(owner.second)});
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
