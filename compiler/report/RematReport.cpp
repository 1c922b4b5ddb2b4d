//===- RematReport.cpp - `ampc report memory --memory-budget` -------------===//

#include "compiler/report/RematReport.h"
#include "compiler/report/MemoryReport.h"
#include "compiler/report/Plot.h"
#include "compiler/support/Format.h"
#include "passes/RematAdapter.h"
#include "runtime/plan/StepTime.h"

#include "llvm/Support/Format.h"

#include <map>
#include <optional>

using namespace mlir;
using namespace ampc::graph;

namespace ampc {

namespace {

/// \p part as a percentage of \p whole with two decimals ("0.00%" when whole is 0).
std::string percentOf(double part, double whole) {
  std::string text;
  llvm::raw_string_ostream(text) << llvm::format("%.2f%%", whole > 0 ? 100.0 * part / whole : 0.0);
  return text;
}

/// An op's time on \p gpu by the time model's rates (runtime/plan/StepTime.h): a matmul's or
/// attention's FLOPs at their throughput, any other op's operand and result bytes at the
/// memory-bound groups' share of the copy bandwidth. What a recomputed value costs is its
/// bytes far more often than its FLOPs (a layer norm, a GELU).
double modelledSeconds(Operation *op, const plan::GpuModel &gpu) {
  if (llvm::isa<MatmulOp>(op))
    return estimateFlops(op) / gpu.matmulThroughput.at("matmul");
  if (llvm::isa<AttentionOp, QkvAttentionOp>(op))
    return estimateFlops(op) / gpu.attentionForward;
  double bytes = 0;
  for (Value operand : op->getOperands())
    bytes += double(bytesOf(operand.getType()));
  for (Value result : op->getResults())
    bytes += double(bytesOf(result.getType()));
  return bytes / (gpu.defaultEfficiency * gpu.copyBandwidth);
}

/// "gelu at line 213 (12x)" for the clones of a plan, grouped by op and source line.
std::vector<std::pair<std::string, int>> recomputedGroups(const RematGraph &graph,
                                                          const RematSimulation &simulation) {
  std::map<std::string, int> counts;
  std::vector<std::string> order;
  for (const RematStep &step : simulation.schedule) {
    if (!step.isClone)
      continue;
    std::string name = graph.problem.ops[step.op].name;
    // Layers differ only in their call site ("<- 243"): group them.
    name = name.substr(0, name.find(" <- "));
    if (counts[name]++ == 0)
      order.push_back(name);
  }
  std::vector<std::pair<std::string, int>> groups;
  for (const std::string &name : order)
    groups.emplace_back(name, counts[name]);
  return groups;
}

/// Per op of the step as written: the most bytes live (persistent included) from that op up to
/// the next one, clones before it included.
std::vector<int64_t> liveByOp(const RematGraph &graph, const RematSimulation &simulation) {
  // `pending` carries the maximum over the clones scheduled since the last original op, so a
  // recomputation's transient peak is charged to the op it precedes.
  std::vector<int64_t> live(graph.problem.ops.size(), 0);
  int64_t pending = 0;
  for (size_t s = 0; s < simulation.schedule.size(); ++s) {
    pending = std::max(pending, simulation.liveBytes[s]);
    if (!simulation.schedule[s].isClone) {
      live[simulation.schedule[s].op] = pending + graph.problem.persistentBytes;
      pending = 0;
    }
  }
  return live;
}

/// Draws live memory per op of the micro step without and with the plan (gray and blue), the
/// budget (dashed red) and the forward/backward boundary, and saves it (PNG, or SVG for .svg).
/// Returns an empty string, or why the file could not be written.
std::string writePlot(const std::string &path, const std::vector<int64_t> &before,
                      const std::vector<int64_t> &after, int64_t budget, int64_t numForward) {
  using namespace plot;
  int64_t most = std::max({budget, *std::max_element(before.begin(), before.end()),
                           *std::max_element(after.begin(), after.end())});
  // The y axis in the largest decimal unit the peak reaches, as formatBytes writes sizes.
  double unit = 1;
  const char *unitName = "bytes";
  for (auto [size, name] : {std::pair<double, const char *>{1e3, "kB"}, {1e6, "MB"}, {1e9, "GB"}})
    if (double(most) >= size) {
      unit = size;
      unitName = name;
    }
  Figure figure;
  figure.width = 1000;
  figure.height = 520;
  figure.title = "live memory over the training step";
  figure.xLabel = "ops of the micro step in program order";
  figure.integerX = true;
  Panel panel;
  panel.title = "live bytes per op, persistent buffers included";
  panel.yLabel = std::string("live memory (") + unitName + ")";
  // The y axis spans the curves, not 0: the difference remat makes is the point.
  Series without{"without remat", {}, {}, {0.6, 0.6, 0.6}},
      with{"with remat", {}, {}, paletteColor(0)};
  for (size_t i = 0; i < before.size(); ++i) {
    without.x.push_back(double(i));
    without.y.push_back(double(before[i]) / unit);
    with.x.push_back(double(i));
    with.y.push_back(double(after[i]) / unit);
  }
  Series limit{"budget",
               {0, double(before.size() - 1)},
               {double(budget) / unit, double(budget) / unit},
               paletteColor(3),
               LineStyle::Dashed};
  panel.series = {without, with, limit};
  panel.markers.push_back({double(numForward), "forward", "backward"});
  for (const Series &series : panel.series)
    figure.legend.push_back({series.label, series.color, series.style});
  figure.panels.push_back(std::move(panel));
  return saveFigure(figure, path);
}

} // namespace

/// Prints the rematerialization table of `ampc report memory --memory-budget`: for each
/// budget the plan graph-plan-remat would choose (peak, arena, clones, extra FLOPs), then the
/// details of the last feasible one and optionally its plot. Returns false on a bad budget
/// or an unwritable plot, after printing the error.
bool printRematReport(ModelOp model, const std::vector<std::string> &budgets,
                      const std::string &plotPath, llvm::raw_ostream &os,
                      llvm::raw_ostream &errors) {
  std::vector<ByteSize> sizes;
  for (const std::string &text : budgets) {
    std::optional<ByteSize> size = parseByteSize(text);
    if (!size) {
      errors << "ampc: error: cannot read the memory budget '" << text << "' " << kBudgetSyntax
             << "\n";
      return false;
    }
    sizes.push_back(*size);
  }
  // One analysis serves every budget: the frontier holds the cheapest plan for each peak, and
  // a budget only picks from it. 256 is the arena alignment the device program uses, and the
  // peaks include the cuBLASLt matmul workspace.
  FailureOr<RematAnalysis> analysis = analyzeRemat(model, 256, kMatmulWorkspaceBytes);
  if (failed(analysis))
    return false;
  const RematGraph *graph = &analysis->graph;
  const RematSimulation &noRemat = analysis->noRemat;
  const int64_t noRematPeak = analysis->noRematPeak;

  os << "\nrematerialization (graph-plan-remat; persistent buffers and a "
     << formatBytes(graph->workspaceBytes) << " matmul workspace included):\n";
  os << llvm::format("  peak without remat %s; %zu plans on the frontier, planned in %.2f s\n",
                     formatBytes(noRematPeak).c_str(), analysis->frontier.plans.size(),
                     analysis->planningSeconds);
  os << "  budget                 peak       arena      recomputed  extra FLOPs  "
        "recomputed values\n";
  // The last budget that can be met gets the details below.
  std::optional<RematDecision> shown;
  for (const ByteSize &size : sizes) {
    RematDecision decision = decideRemat(*analysis, size);
    std::string label = formatBytes(decision.budgetBytes) + " (" +
                        percentOf(double(decision.budgetBytes), double(noRematPeak)) + ")";
    if (!decision.plan) {
      os << llvm::format("  %-22s ", label.c_str()) << "cannot be met: " << decision.infeasible
         << "\n";
      continue;
    }
    std::string groups;
    // The table names the first four recomputed op kinds; the details below list them all.
    auto grouped = recomputedGroups(*graph, *decision.plan);
    for (size_t i = 0; i < grouped.size() && i < 4; ++i)
      groups += (i ? ", " : "") + grouped[i].first +
                (grouped[i].second > 1 ? " (" + std::to_string(grouped[i].second) + "x)" : "");
    if (grouped.size() > 4)
      groups += ", ...";
    os << llvm::format("  %-22s %-10s %-10s %-11lld %-12s %s\n", label.c_str(),
                       formatBytes(decision.peakBytes).c_str(),
                       formatBytes(decision.arenaBytes).c_str(), (long long)decision.clones,
                       percentOf(decision.extraFlops, graph->stepFlops).c_str(),
                       groups.empty() ? "-" : groups.c_str());
    shown = std::move(decision);
  }
  if (!shown)
    return true;

  const RematSimulation &plan = *shown->plan;
  const int64_t shownBudget = shown->budgetBytes;
  os << "\nplan for the budget " << formatBytes(shownBudget) << ": peak "
     << formatBytes(noRematPeak) << " -> " << formatBytes(shown->peakBytes) << ", +"
     << percentOf(shown->extraFlops, graph->stepFlops) << " FLOPs ("
     << llvm::format("%.3g", shown->extraFlops) << " of " << llvm::format("%.3g", graph->stepFlops)
     << " per micro step, " << percentOf(plan.matmulCost, graph->stepFlops) << " in matmuls)\n";
  // The clones' and the step's time by the time model, on the GPU it was fitted to.
  const plan::GpuModel &gpu = *plan::findGpuModel("h200");
  double extraSeconds = 0, stepSeconds = 0;
  for (const RematStep &step : plan.schedule)
    if (step.isClone)
      extraSeconds += modelledSeconds(graph->ops[step.op], gpu);
  for (Operation *op : graph->ops)
    if (!op->hasTrait<OpTrait::IsTerminator>())
      stepSeconds += modelledSeconds(op, gpu);
  os << "predicted extra time on an H200 (ampc report time's rates): +"
     << llvm::format("%.3f", extraSeconds * 1e3) << " ms per micro step, +"
     << percentOf(extraSeconds, stepSeconds) << " of its "
     << llvm::format("%.3f", stepSeconds * 1e3) << " ms op by op\n";
  auto grouped = recomputedGroups(*graph, plan);
  os << "recomputed values (" << grouped.size() << " distinct ops):\n";
  for (auto [name, count] : grouped)
    os << "  " << name << (count > 1 ? " (" + std::to_string(count) + "x)" : "") << "\n";

  // Memory over time: the step in about 24 slices of the ops as written.
  std::vector<int64_t> before = liveByOp(*graph, noRemat), after = liveByOp(*graph, plan);
  // Slice k covers ops [k n / slices, (k + 1) n / slices): the sizes differ by at most one op,
  // and a slice straddling the forward/backward boundary is labelled fwd/bwd.
  size_t numOps = before.size(), slices = std::min<size_t>(24, numOps);
  os << "memory over time (most bytes live in each slice of the step, persistent included):\n";
  os << "  ops           phase     no remat     with remat   first op\n";
  for (size_t slice = 0; slice < slices; ++slice) {
    size_t first = slice * numOps / slices, last = (slice + 1) * numOps / slices;
    int64_t most = 0, mostAfter = 0;
    for (size_t i = first; i < last; ++i) {
      most = std::max(most, before[i]);
      mostAfter = std::max(mostAfter, after[i]);
    }
    std::string range = std::to_string(first) + "-" + std::to_string(last - 1);
    const char *phase = int64_t(last) <= graph->problem.numForward    ? "forward"
                        : int64_t(first) >= graph->problem.numForward ? "backward"
                                                                      : "fwd/bwd";
    os << llvm::format("  %-13s %-9s %-12s %-12s %s\n", range.c_str(), phase,
                       formatBytes(most).c_str(), formatBytes(mostAfter).c_str(),
                       graph->problem.ops[first].name.c_str());
  }
  if (!plotPath.empty()) {
    std::string error = writePlot(plotPath, before, after, shownBudget, graph->problem.numForward);
    if (!error.empty()) {
      errors << "ampc: error: cannot write the plot '" << plotPath << "': " << error << "\n";
      return false;
    }
    os << "wrote the plot " << plotPath << "\n";
  }
  return true;
}

/// The one-line summary `ampc compile` prints after graph-plan-remat ran with a budget, read
/// from the graph.remat attribute it left on the micro step; nothing without one.
void printRematSummary(ModelOp model) {
  func::FuncOp entry = model.getEntryFunction();
  auto result = entry->getAttrOfType<RematAttr>(GraphDialect::kRematAttrName);
  if (!result)
    return;
  int64_t clones = 0;
  entry.walk(
      [&](Operation *op) { clones += op->hasAttr(graph::GraphDialect::kRecomputedAttrName); });
  llvm::outs() << "memory: planned peak " << formatBytes(result.getPeakBytes())
               << " within the budget " << formatBytes(result.getBudgetBytes())
               << " (without remat " << formatBytes(result.getNoRematPeakBytes()) << "); " << clones
               << " values recomputed, +"
               << percentOf(double(result.getExtraFlops()), double(result.getStepFlops()))
               << " FLOPs per micro step\n";
  llvm::outs().flush();
}

} // namespace ampc
