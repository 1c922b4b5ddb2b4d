//===- TimeReport.cpp - `ampc report time` --------------------------------===//

#include "compiler/report/TimeReport.h"

#include "llvm/Support/Format.h"

#include <algorithm>
#include <map>
#include <string>
#include <tuple>
#include <vector>

namespace ampc {

namespace {

/// One row: the groups of one function and kind with the same cost and description.
struct Row {
  const char *function = "micro_step";
  std::string kind, where;
  size_t instances = 0;
  double seconds = 0, floorSeconds = 0; ///< per optimizer step, all instances
  double bytes = 0, flops = 0;          ///< per optimizer step, all instances
  const char *bound = "memory";
};

struct Total {
  size_t groups = 0;
  double seconds = 0, floorSeconds = 0, bytes = 0, flops = 0;
};

} // namespace

void printTimeReport(const plan::Plan &plan, const plan::GpuModel &gpu, llvm::raw_ostream &os,
                     size_t top) {
  using Key = std::tuple<int, std::string, std::string, uint64_t, double>;
  std::map<Key, Row> rows;
  std::map<std::string, Total> kinds;
  Total step;
  for (int function = 0; function < 2; ++function) {
    const plan::DeviceFunction &program =
        function == 0 ? plan.device.microStep : plan.device.optimizerStep;
    const std::vector<plan::Instruction> &instructions =
        function == 0 ? plan.instructions : plan.optimizerInstructions;
    const double perStep = function == 0 ? static_cast<double>(plan.accumulationSteps) : 1.0;
    for (const plan::DeviceGroup &group : program.groups) {
      const plan::GroupCost cost = plan::groupCost(plan, group);
      const plan::PredictedTime time = plan::predictGroupTime(plan, group, gpu);
      const std::string where = plan::groupDescription(plan, group, instructions);
      Row &row = rows[Key(function, group.kind, where, cost.bytes, cost.flops)];
      row.function = function == 0 ? "micro_step" : "optimizer_step";
      row.kind = group.kind;
      row.where = where;
      row.bound = time.bound;
      ++row.instances;
      row.seconds += time.seconds * perStep;
      row.floorSeconds += time.floorSeconds * perStep;
      row.bytes += static_cast<double>(cost.bytes) * perStep;
      row.flops += cost.flops * perStep;
      for (Total *total : {&kinds[group.kind], &step}) {
        total->groups += 1;
        total->seconds += time.seconds * perStep;
        total->floorSeconds += time.floorSeconds * perStep;
        total->bytes += static_cast<double>(cost.bytes) * perStep;
        total->flops += cost.flops * perStep;
      }
    }
  }
  std::vector<Row> sorted;
  for (auto &entry : rows)
    sorted.push_back(entry.second);
  std::stable_sort(sorted.begin(), sorted.end(),
                   [](const Row &a, const Row &b) { return a.seconds > b.seconds; });

  os << "time of @" << plan.modelName << " on " << gpu.name << ", predicted per optimizer step ("
     << plan.accumulationSteps << " micro step" << (plan.accumulationSteps == 1 ? "" : "s")
     << "); " << gpu.description << "\n";
  if (step.groups == 0) {
    os << "the plan has no device program (`ampc plan` says why): nothing to predict\n";
    return;
  }
  os << "  ms/step  share  kind             function          n       GB     GFLOP  bound    "
        "floor ms  where (call sites aside)\n";
  for (size_t i = 0; i < sorted.size() && i < top; ++i) {
    const Row &row = sorted[i];
    os << llvm::format("%9.3f %5.1f%%  %-16s %-15s %4zu %8.3f %9.1f  %-7s %9.3f  ",
                       row.seconds * 1e3, 100 * row.seconds / step.seconds, row.kind.c_str(),
                       row.function, row.instances, row.bytes / 1e9, row.flops / 1e9, row.bound,
                       row.floorSeconds * 1e3)
       << row.where << "\n";
  }
  if (sorted.size() > top)
    os << "  (" << sorted.size() - top << " more rows)\n";
  os << "by kind:\n";
  std::vector<std::pair<std::string, Total>> byKind(kinds.begin(), kinds.end());
  std::stable_sort(byKind.begin(), byKind.end(),
                   [](const auto &a, const auto &b) { return a.second.seconds > b.second.seconds; });
  for (const auto &[kind, total] : byKind)
    os << llvm::format("  %-18s %4zu groups %9.3f ms (%5.1f%%), floor %8.3f ms: %5.1fx; %7.2f GB, "
                       "%8.1f GFLOP\n",
                       kind.c_str(), total.groups, total.seconds * 1e3,
                       100 * total.seconds / step.seconds, total.floorSeconds * 1e3,
                       total.seconds / std::max(total.floorSeconds, 1e-12), total.bytes / 1e9,
                       total.flops / 1e9);
  os << llvm::format("step: %.3f ms predicted over %zu groups, floor %.3f ms (%.2fx the floor); "
                     "%.2f GB moved, %.1f GFLOP\n",
                     step.seconds * 1e3, step.groups, step.floorSeconds * 1e3,
                     step.seconds / std::max(step.floorSeconds, 1e-12), step.bytes / 1e9,
                     step.flops / 1e9);
}

} // namespace ampc
