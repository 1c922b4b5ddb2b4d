//===- RematReport.cpp - `ampc report memory --memory-budget` -------------===//

#include "compiler/report/RematReport.h"
#include "compiler/report/MemoryReport.h"
#include "compiler/report/PngWriter.h"
#include "compiler/support/Format.h"
#include "passes/RematAdapter.h"

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
/// budget (dashed red) and the forward/backward boundary, and saves it as a PNG. Returns false
/// when the file cannot be written.
bool writePlot(const std::string &path, const std::vector<int64_t> &before,
               const std::vector<int64_t> &after, int64_t budget, int64_t numForward) {
  // Canvas size and the margins around the plot area (the left one holds the GB labels).
  const int width = 1000, height = 520, left = 90, right = 20, top = 40, bottom = 60;
  Canvas canvas(width, height);
  int64_t most = std::max({budget, *std::max_element(before.begin(), before.end()),
                           *std::max_element(after.begin(), after.end())});
  // 5% headroom above the highest curve; x spreads the ops evenly across the plot width.
  double yScale = double(height - top - bottom) / double(most) / 1.05;
  double xScale = double(width - left - right) / double(std::max<size_t>(1, before.size() - 1));
  auto x = [&](size_t i) { return left + xScale * double(i); };
  auto y = [&](int64_t bytes) { return height - bottom - yScale * double(bytes); };
  Rgb axis{40, 40, 40}, grid{225, 225, 225}, gray{150, 150, 150}, blue{31, 119, 180},
      red{214, 39, 40};
  // Horizontal grid lines every "nice" number of GB.
  // Between 3 and 8 grid lines: the step starts at 0.5 GB and doubles or halves to fit.
  double gb = 1e9, stepGb = 0.5;
  while (double(most) / gb / stepGb > 8)
    stepGb *= 2;
  while (double(most) / gb / stepGb < 3 && stepGb > 0.001)
    stepGb /= 2;
  for (double level = 0; level * gb <= double(most) * 1.05; level += stepGb) {
    double row = y(int64_t(level * gb));
    canvas.line(left, row, width - right, row, grid);
    char label[32];
    std::snprintf(label, sizeof label, stepGb < 1 ? "%.2f GB" : "%.0f GB", level);
    canvas.text(8, int(row) - 3, label, axis);
  }
  // The forward/backward boundary.
  canvas.line(x(numForward), top, x(numForward), height - bottom, gray, 1, 4);
  canvas.text(int(x(numForward)) - 60, height - bottom + 10, "FORWARD", gray);
  canvas.text(int(x(numForward)) + 8, height - bottom + 10, "BACKWARD", gray);
  // The two curves, then the budget line and the axes on top of them.
  for (size_t i = 1; i < before.size(); ++i) {
    canvas.line(x(i - 1), y(before[i - 1]), x(i), y(before[i]), gray, 2);
    canvas.line(x(i - 1), y(after[i - 1]), x(i), y(after[i]), blue, 2);
  }
  canvas.line(left, y(budget), width - right, y(budget), red, 2, 8);
  canvas.line(left, top, left, height - bottom, axis);
  canvas.line(left, height - bottom, width - right, height - bottom, axis);
  // Title and legend (the built-in font has upper-case letters only).
  canvas.text(left, 12, "LIVE MEMORY OVER THE TRAINING STEP", axis, 2);
  canvas.line(width - 330, 18, width - 300, 18, gray, 2);
  canvas.text(width - 295, 15, "WITHOUT REMAT", axis);
  canvas.line(width - 200, 18, width - 170, 18, blue, 2);
  canvas.text(width - 165, 15, "WITH REMAT", axis);
  canvas.line(width - 330, 32, width - 300, 32, red, 2, 8);
  canvas.text(width - 295, 29, "BUDGET", axis);
  canvas.text(left, height - 22, "OPS OF THE MICRO STEP IN PROGRAM ORDER", axis);
  return canvas.savePng(path);
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
    if (!writePlot(plotPath, before, after, shownBudget, graph->problem.numForward)) {
      errors << "ampc: error: cannot write the plot '" << plotPath << "': " << std::strerror(errno)
             << "\n";
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
