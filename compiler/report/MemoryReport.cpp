//===- MemoryReport.cpp - `ampc report memory` ----------------------------===//

#include "compiler/report/MemoryReport.h"
#include "compiler/lowering/PlanEmitter.h"
#include "compiler/support/Format.h"
#include "passes/ArenaValues.h"
#include "passes/OpCost.h"
#include "runtime/train/Sharding.h"

#include "llvm/Support/Format.h"

#include <algorithm>

using namespace mlir;
using namespace ampc::graph;

namespace ampc {

/// The arena graph-plan-memory placed for \p func (zeros when it has none).
static std::pair<int64_t, int64_t> arenaOf(func::FuncOp func) {
  auto arena = func ? func->getAttrOfType<ArenaAttr>(GraphDialect::kArenaAttrName) : ArenaAttr();
  return arena ? std::make_pair(arena.getBytes(), arena.getPeakLiveBytes())
               : std::make_pair(int64_t(0), int64_t(0));
}

/// The memory report's totals: persistent bytes by kind, the two steps' arenas, and the
/// peak. The micro step and the optimizer step never run at once, so the device holds the
/// persistent buffers plus the larger of the two arenas, not their sum.
MemoryTotals memoryTotals(ModelOp model) {
  MemoryTotals totals;
  totals.persistent = persistentBytes(model);
  std::tie(totals.microStepArena, totals.microStepPeakLive) = arenaOf(model.getEntryFunction());
  totals.optimizerStepArena =
      arenaOf(mlir::SymbolTable::lookupNearestSymbolFrom<func::FuncOp>(
                  model, StringAttr::get(model.getContext(), "optimizer_step")))
          .first;
  totals.peak =
      totals.persistent.total() + std::max(totals.microStepArena, totals.optimizerStepArena);
  return totals;
}

/// Prints `ampc report memory`: the totals, then the \p largest values live where the micro
/// step's live bytes peak, with the op and location that produce each.
void printMemoryReport(ModelOp model, llvm::raw_ostream &os, int largest) {
  MemoryTotals totals = memoryTotals(model);
  auto mode = model->getAttrOfType<StringAttr>(graph::GraphDialect::kPrecisionModeAttrName);
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
  // The peak of live values is what any placement needs at least; the arena exceeds it by the
  // fragmentation of graph-plan-memory's placement.
  row("  peak of live values (lower bound)", totals.microStepPeakLive);
  row("optimizer_step arena", totals.optimizerStepArena);
  row("peak (persistent + largest arena)", totals.peak);

  // The values live where the micro step's live bytes peak (a fused group, or an op).
  func::FuncOp entry = model.getEntryFunction();
  ArenaValues arena = collectArenaValues(entry);
  // Live bytes per position (a fused group once graph-fuse has run, else an op): a value is
  // live from the position that writes it through the last that reads it, inclusive.
  std::vector<int64_t> liveAt(arena.positions + 1, 0);
  for (const BufferLifetime &value : arena.lifetimes)
    for (int64_t i = value.first; i <= value.last; ++i)
      liveAt[i] += value.bytes;
  const int64_t peakIndex = std::max_element(liveAt.begin(), liveAt.end()) - liveAt.begin();
  // Views and in-place results share their source's bytes: counted once, under the value that
  // owns them.
  struct Live {
    int64_t bytes;
    Operation *op;
    Value value;
  };
  std::vector<Live> atPeak;
  for (auto [lifetime, owner] : llvm::zip(arena.lifetimes, arena.owners))
    if (lifetime.first <= peakIndex && peakIndex <= lifetime.last)
      atPeak.push_back({lifetime.bytes, owner.first, owner.first->getResult(owner.second)});
  std::stable_sort(atPeak.begin(), atPeak.end(),
                   [](const Live &a, const Live &b) { return a.bytes > b.bytes; });
  // The first op at the peak position names it in the heading.
  Operation *peakOp =
      peakIndex < static_cast<int64_t>(arena.firstOp.size()) ? arena.firstOp[peakIndex] : nullptr;
  os << "largest values live at the micro step's peak";
  if (peakOp) {
    os << " (at '" << peakOp->getName().stripDialect() << "', "
       << formatLocation(peakOp->getLoc(), /*brief=*/true) << ", "
       << (arena.fused ? "kernel group " : "op ") << peakIndex << " of " << arena.positions;
    if (auto fusion = peakOp->getAttrOfType<FusionAttr>(GraphDialect::kFusionAttrName))
      os << ", " << stringifyGroupKind(fusion.getKind());
    os << ")";
  }
  os << ":\n";
  // Largest first (stable, so equal sizes keep program order).
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

void printDataParallelMemory(ModelOp model, int worldSize, llvm::raw_ostream &os) {
  const MemoryTotals totals = memoryTotals(model);
  // Each trained parameter's elements and optimizer-state bytes (its states other than the
  // gradient accumulator), in declaration order: the optimizer step's order.
  llvm::StringMap<int64_t> stateBytes;
  for (auto state : model.getBodyBlock().getOps<StateOp>())
    stateBytes[state.getSymName()] = bytesOf(state.getType());
  std::vector<size_t> sizes, moments;
  int64_t sharded = totals.persistent.optimizerState;
  for (auto param : model.getBodyBlock().getOps<ParamOp>()) {
    const std::string prefix = (param.getSymName() + ".").str();
    if (!stateBytes.count(prefix + "grad"))
      continue; // not trained
    size_t bytes = 0;
    for (const auto &entry : stateBytes)
      if (entry.getKey().starts_with(prefix) && entry.getKey() != prefix + "grad" &&
          !entry.getKey().substr(prefix.size()).contains('.'))
        bytes += static_cast<size_t>(entry.getValue());
    sizes.push_back(static_cast<size_t>(bytesOf(param.getType()) / 4));
    moments.push_back(bytes);
    sharded -= static_cast<int64_t>(bytes);
  }
  // What is left (the loss scaler's fields) stays on every rank.
  sharded += static_cast<int64_t>(train::largestShare(sizes, moments, worldSize));
  const int64_t arena = std::max(totals.microStepArena, totals.optimizerStepArena);
  const int64_t whole = totals.persistent.total() + arena;
  const int64_t withZero = whole - totals.persistent.optimizerState + sharded;
  os << "data parallel, " << worldSize << " rank" << (worldSize == 1 ? "" : "s")
     << " (each rank, one micro-batch at a time)\n";
  os << llvm::format("  %-42s %12s %14s\n", static_cast<const char *>(""),
                     static_cast<const char *>("replicated"), static_cast<const char *>("ZeRO-1"));
  auto row = [&](const char *what, int64_t without, int64_t with) {
    os << llvm::format("  %-42s %12s %14s\n", what, formatBytes(without).c_str(),
                       formatBytes(with).c_str());
  };
  const int64_t weights = totals.persistent.parameters + totals.persistent.parameterCopies;
  row("weights and copies", weights, weights);
  row("gradient accumulators (f32)", totals.persistent.gradients, totals.persistent.gradients);
  row("optimizer state (f32)", totals.persistent.optimizerState, sharded);
  row("peak per rank", whole, withZero);
}

} // namespace ampc
