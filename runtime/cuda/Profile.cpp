//===- Profile.cpp - Where a training step's GPU time goes ----------------===//
//
// The rows that fold groups of the same code at the same source location
// together, with their cost (runtime/plan/StepTime.h), and the text of the
// `--profile` report. Needs only the plan and the times, never the device.
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/Profile.h"
#include "runtime/cuda/Executor.h"
#include "runtime/plan/Plan.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <map>
#include <tuple>

namespace ampc::cuda {

namespace {

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

/// The group \p time measured, with how often its function runs per optimizer step (a micro
/// step's accumulationSteps times), or null for a time that names no group or never ran.
const plan::DeviceGroup *timedGroup(const plan::Plan &plan, const GroupTime &time,
                                    double &perStep) {
  const bool micro = time.function == PlanFunction::MicroStep;
  const plan::DeviceFunction &program = micro ? plan.device.microStep : plan.device.optimizerStep;
  if (time.group >= program.groups.size() || time.runs == 0)
    return nullptr;
  perStep = micro ? static_cast<double>(plan.accumulationSteps) : 1.0;
  return &program.groups[time.group];
}

} // namespace

std::vector<ProfileRow> profileRows(const plan::Plan &plan, const std::vector<GroupTime> &times) {
  using Key = std::tuple<int, std::string, std::string, uint64_t, double>;
  std::map<Key, ProfileRow> rows;
  for (const GroupTime &time : times) {
    double perStep = 1;
    const plan::DeviceGroup *timed = timedGroup(plan, time, perStep);
    if (!timed)
      continue;
    const plan::DeviceGroup &group = *timed;
    const bool micro = time.function == PlanFunction::MicroStep;
    const GroupCost cost = groupCost(plan, group);
    const std::string locations =
        plan::groupDescription(plan, group, micro ? plan.instructions : plan.optimizerInstructions);
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

std::string formatTimeModel(const plan::Plan &plan, const std::vector<GroupTime> &times,
                            const std::string &deviceName) {
  std::string lower;
  for (char c : deviceName)
    lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  const plan::GpuModel *gpu = nullptr;
  for (const char *name : {"h200", "h100"})
    if (lower.find(name) != std::string::npos)
      gpu = plan::findGpuModel(name);
  if (!gpu)
    return "";
  // Per kind: measured and predicted ms per optimizer step.
  std::map<std::string, std::pair<double, double>> kinds;
  double measured = 0, predicted = 0;
  for (const GroupTime &time : times) {
    double perStep = 1;
    const plan::DeviceGroup *timed = timedGroup(plan, time, perStep);
    if (!timed)
      continue;
    const plan::DeviceGroup &group = *timed;
    const double ms = time.milliseconds / static_cast<double>(time.runs) * perStep;
    const double model = plan::predictGroupTime(plan, group, *gpu).seconds * 1e3 * perStep;
    kinds[group.kind].first += ms;
    kinds[group.kind].second += model;
    measured += ms;
    predicted += model;
  }
  if (measured <= 0)
    return "";
  std::string text = "time model (" + gpu->name + ", ampc report time): " +
                     format("%.2f ms", predicted) + " predicted for " +
                     format("%.2f ms", measured) + " measured, " +
                     format("%.2fx", predicted / measured) + "; by kind:\n";
  std::vector<std::pair<std::string, std::pair<double, double>>> sorted(kinds.begin(), kinds.end());
  std::stable_sort(sorted.begin(), sorted.end(), [](const auto &a, const auto &b) {
    return a.second.first > b.second.first;
  });
  char line[256];
  for (const auto &[kind, pair] : sorted) {
    std::snprintf(line, sizeof(line), "  %-18s measured %9.3f ms, model %9.3f ms, %5.2fx\n",
                  kind.c_str(), pair.first, pair.second,
                  pair.first > 0 ? pair.second / pair.first : 0.0);
    text += line;
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
