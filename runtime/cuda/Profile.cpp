//===- Profile.cpp - Where a training step's GPU time goes ----------------===//
//
// The cost of a step group (bytes of the distinct buffers it reads plus those
// it writes, flops of its matmuls and attention), the rows that fold groups
// of the same code at the same source location together, and the text of the
// `--profile` report. Needs only the plan and the times, never the device.
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/Profile.h"
#include "runtime/cuda/Executor.h"
#include "runtime/plan/Plan.h"

#include <algorithm>
#include <cstdio>
#include <iterator>
#include <map>
#include <set>
#include <tuple>

namespace ampc::cuda {

namespace {

double attentionFlops(const plan::AttentionStep &step) {
  double flops =
      4.0 * static_cast<double>(step.batch) * step.heads * step.queries * step.keys * step.headDim;
  if (step.causal)
    flops /= 2;
  return step.pass == plan::AttentionPass::Forward ? flops : 2.5 * flops;
}

/// "m.mlir:190:13 <- 243:11" and "m.mlir:190:13 (called from m.mlir:243:11)" ->
/// "m.mlir:190:13".
std::string withoutCallSite(const std::string &location) {
  return location.substr(0, std::min(location.find(" <- "), location.find(" (called from ")));
}

std::string groupLocations(const plan::DeviceGroup &group,
                           const std::vector<plan::Instruction> &list) {
  std::vector<std::string> seen;
  for (uint32_t index : group.instructions) {
    if (index >= list.size() || list[index].location.empty())
      continue;
    const std::string location = withoutCallSite(list[index].location);
    if (std::find(seen.begin(), seen.end(), location) == seen.end())
      seen.push_back(location);
  }
  std::string text;
  for (size_t i = 0; i < seen.size() && i < 3; ++i)
    text += (i ? ", " : "") + seen[i];
  if (seen.size() > 3)
    text += " (+" + std::to_string(seen.size() - 3) + ")";
  return text.empty() ? "-" : text;
}

/// "[16384x2304x768 bf16->bf16 gelu_aux_bias] " for each matmul of \p group (m x n x k, the
/// input and output types, the epilogue, "+=" when it accumulates), so a slow matmul row says
/// which problem it is.
std::string matmulShapes(const plan::Plan &plan, const plan::DeviceGroup &group) {
  static const char *const epilogues[] = {"",       " bias", " gelu_bias", " gelu_aux_bias",
                                          " bgrad", " dgelu"};
  std::string text;
  for (const plan::DeviceStep &step : group.steps)
    if (const auto *mm = std::get_if<plan::MatmulStep>(&step)) {
      const auto epilogue = static_cast<size_t>(mm->epilogue);
      text += "[" + std::to_string(mm->m) + "x" + std::to_string(mm->n) + "x" +
              std::to_string(mm->k) + (mm->batch > 1 ? " batch " + std::to_string(mm->batch) : "") +
              " " + plan::dtypeName(plan.buffers[mm->a].dtype) + "->" +
              plan::dtypeName(plan.buffers[mm->d].dtype) + (mm->beta != 0 ? " +=" : "") +
              (epilogue < std::size(epilogues) ? epilogues[epilogue] : " ?") + "] ";
    }
  return text;
}

bool hasStep(const plan::DeviceGroup &group, size_t index) {
  for (const plan::DeviceStep &step : group.steps)
    if (step.index() == index)
      return true;
  return false;
}

std::string format(const char *pattern, double value) {
  char text[64];
  std::snprintf(text, sizeof(text), pattern, value);
  return text;
}

} // namespace

GroupCost groupCost(const plan::Plan &plan, const plan::DeviceGroup &group) {
  GroupCost cost;
  std::set<uint32_t> reads, writes;
  for (uint32_t id : readBuffers(group))
    reads.insert(id);
  for (uint32_t id : writtenBuffers(group))
    writes.insert(id);
  // A matmul accumulating into D (C = D, beta 1) reads D too, which readBuffers leaves out.
  for (const plan::DeviceStep &step : group.steps)
    if (const auto *matmul = std::get_if<plan::MatmulStep>(&step); matmul && matmul->beta != 0)
      reads.insert(matmul->c);
  for (const std::set<uint32_t> *buffers : {&reads, &writes})
    for (uint32_t id : *buffers)
      if (id < plan.buffers.size())
        cost.bytes += static_cast<uint64_t>(plan::numElements(plan.buffers[id])) *
                      plan::dtypeBytes(plan.buffers[id].dtype);
  for (const plan::DeviceStep &step : group.steps) {
    if (const auto *matmul = std::get_if<plan::MatmulStep>(&step))
      cost.flops += 2.0 * static_cast<double>(matmul->m) * matmul->n * matmul->k * matmul->batch;
    else if (const auto *attention = std::get_if<plan::AttentionStep>(&step))
      cost.flops += attentionFlops(*attention);
  }
  return cost;
}

std::vector<ProfileRow> profileRows(const plan::Plan &plan, const std::vector<GroupTime> &times) {
  using Key = std::tuple<int, std::string, std::string, uint64_t, double>;
  std::map<Key, ProfileRow> rows;
  for (const GroupTime &time : times) {
    const bool micro = time.function == PlanFunction::MicroStep;
    const plan::DeviceFunction &program = micro ? plan.device.microStep : plan.device.optimizerStep;
    if (time.group >= program.groups.size() || time.runs == 0)
      continue;
    const plan::DeviceGroup &group = program.groups[time.group];
    const GroupCost cost = groupCost(plan, group);
    const std::string locations =
        matmulShapes(plan, group) +
        groupLocations(group, micro ? plan.instructions : plan.optimizerInstructions);
    const double perStep = micro ? static_cast<double>(plan.accumulationSteps) : 1.0;
    ProfileRow &row = rows[Key(micro ? 0 : 1, group.kind, locations, cost.bytes, cost.flops)];
    if (row.instances == 0) {
      row.function = time.function;
      row.kind = group.kind;
      row.locations = locations;
      row.firstGroup = time.group;
    }
    ++row.instances;
    row.milliseconds += time.milliseconds / static_cast<double>(time.runs) * perStep;
    row.bytes += static_cast<uint64_t>(static_cast<double>(cost.bytes) * perStep);
    row.flops += cost.flops * perStep;
  }
  std::vector<ProfileRow> sorted;
  for (auto &entry : rows)
    sorted.push_back(entry.second);
  std::stable_sort(sorted.begin(), sorted.end(), [](const ProfileRow &a, const ProfileRow &b) {
    return a.milliseconds > b.milliseconds;
  });
  return sorted;
}

std::string formatProfile(const plan::Plan &plan, const std::vector<ProfileRow> &rows, size_t top,
                          uint64_t profiledSteps, double stepMilliseconds, double copyBandwidth) {
  double total = 0;
  for (const ProfileRow &row : rows)
    total += row.milliseconds;
  std::string text =
      "profile of @" + plan.modelName + " over " + std::to_string(profiledSteps) +
      " optimizer steps (groups run eagerly between CUDA events): " + format("%.2f", total) +
      " ms of group time per step";
  if (stepMilliseconds >= 0)
    text += format(" (a step measured without profiling: %.2f ms)", stepMilliseconds);
  text += "\n";
  const bool floor = copyBandwidth > 0;
  if (floor)
    text += "bandwidth floor: a device-to-device copy on this GPU moves " +
            format("%.2f", copyBandwidth / 1e12) +
            " TB/s (read + written); \"%floor\" is a memory-bound group's share of it\n";
  // Variant indices: 1 = MatmulStep, 2 = AttentionStep; anything else is bound by memory.
  auto boundBy = [&](const ProfileRow &row) {
    const plan::DeviceFunction &program =
        row.function == PlanFunction::MicroStep ? plan.device.microStep : plan.device.optimizerStep;
    const plan::DeviceGroup &group = program.groups[row.firstGroup];
    return hasStep(group, 2) ? 1 : hasStep(group, 1) ? 0 : 2;
  };
  char line[512];
  std::snprintf(line, sizeof(line), "%9s %6s  %-16s %-14s %4s %8s %6s %s%9s %7s  %s\n", "ms/step",
                "share", "kind", "function", "n", "GB", "TB/s", floor ? "%floor " : "", "GFLOP",
                "TFLOP/s", "where (call sites aside)");
  text += line;
  for (size_t i = 0; i < rows.size() && i < top; ++i) {
    const ProfileRow &row = rows[i];
    const double seconds = row.milliseconds / 1e3;
    const std::string tflops = row.flops > 0 && seconds > 0
                                   ? format("%7.1f", row.flops / seconds / 1e12)
                                   : std::string(7 - 1, ' ') + "-";
    std::string share;
    if (floor)
      share = boundBy(row) == 2 && seconds > 0
                  ? format("%5.0f%% ", 100 * row.bytes / seconds / copyBandwidth)
                  : std::string("     - ");
    std::snprintf(line, sizeof(line), "%9.3f %5.1f%%  %-16s %-14s %4zu %8.3f %6.2f %s%9.1f %s  %s\n",
                  row.milliseconds, total > 0 ? 100 * row.milliseconds / total : 0.0,
                  row.kind.c_str(), planFunctionName(row.function), row.instances, row.bytes / 1e9,
                  seconds > 0 ? row.bytes / seconds / 1e12 : 0.0, share.c_str(), row.flops / 1e9,
                  tflops.c_str(), row.locations.c_str());
    text += line;
  }
  // Totals by what bounds a group: matmuls, attention, the rest (memory).
  const char *names[] = {"matmuls", "attention", "memory-bound groups"};
  double ms[3] = {0, 0, 0}, flops[3] = {0, 0, 0}, bytes[3] = {0, 0, 0};
  size_t groups[3] = {0, 0, 0};
  for (const ProfileRow &row : rows) {
    const int which = boundBy(row);
    ms[which] += row.milliseconds;
    flops[which] += row.flops;
    bytes[which] += static_cast<double>(row.bytes);
    groups[which] += row.instances;
  }
  for (int i = 0; i < 3; ++i) {
    if (groups[i] == 0)
      continue;
    const double seconds = ms[i] / 1e3;
    std::snprintf(line, sizeof(line), "%-20s %4zu groups %9.3f ms (%5.1f%%)", names[i], groups[i],
                  ms[i], total > 0 ? 100 * ms[i] / total : 0.0);
    text += line;
    if (i < 2 && seconds > 0)
      text += format(", %.1f TFLOP/s", flops[i] / seconds / 1e12);
    else if (seconds > 0)
      text += format(", %.2f GB", bytes[i] / 1e9) +
              format(" at %.2f TB/s", bytes[i] / seconds / 1e12) +
              (floor ? format(" (%.0f%% of the floor)", 100 * bytes[i] / seconds / copyBandwidth)
                     : std::string());
    text += "\n";
  }
  return text;
}

std::string formatMatmulChoices(const std::vector<MatmulChoice> &choices) {
  if (choices.empty())
    return "";
  std::vector<MatmulChoice> sorted = choices;
  std::stable_sort(sorted.begin(), sorted.end(), [](const MatmulChoice &a, const MatmulChoice &b) {
    return a.heuristicMs > b.heuristicMs;
  });
  std::string text = "matmul algorithms chosen by timing cuBLASLt's candidates (per run, each "
                     "distinct problem once):\n";
  char line[512];
  std::snprintf(line, sizeof(line), "%10s %10s %7s %6s  %s\n", "first ms", "chosen ms", "gain",
                "rank", "problem");
  text += line;
  double first = 0, chosen = 0;
  for (const MatmulChoice &choice : sorted) {
    first += choice.heuristicMs;
    chosen += choice.chosenMs;
    const double gain = choice.heuristicMs > 0 ? 1 - choice.chosenMs / choice.heuristicMs : 0;
    std::snprintf(line, sizeof(line), "%10.4f %10.4f %6.1f%% %3d/%-2d  %s\n", choice.heuristicMs,
                  choice.chosenMs, 100 * gain, choice.chosen + 1, choice.candidates,
                  choice.problem.c_str());
    text += line;
  }
  std::snprintf(line, sizeof(line), "%10.4f %10.4f %6.1f%%  total of %zu problems\n", first,
                chosen, first > 0 ? 100 * (1 - chosen / first) : 0.0, sorted.size());
  text += line;
  return text;
}

} // namespace ampc::cuda
