//===- GradientBuckets.cpp - When each bucket of gradients is final -------===//

#include "runtime/plan/GradientBuckets.h"
#include "runtime/plan/PlanAttrs.h"

#include <algorithm>
#include <cstdio>
#include <map>

namespace ampc::plan {

namespace {

/// The micro step's accumulate instructions, in the order they run.
std::vector<uint32_t> accumulates(const Plan &plan) {
  std::vector<uint32_t> found;
  for (uint32_t i = 0; i < plan.instructions.size(); ++i)
    if (plan.instructions[i].op == OpCode::Accumulate)
      found.push_back(i);
  return found;
}

/// For each micro-step instruction, the device group that computes it (the
/// instruction itself without a device program).
std::vector<size_t> positions(const Plan &plan) {
  std::vector<size_t> position(plan.instructions.size());
  for (size_t i = 0; i < position.size(); ++i)
    position[i] = i;
  const std::vector<DeviceGroup> &groups = plan.device.microStep.groups;
  for (size_t g = 0; g < groups.size(); ++g)
    for (uint32_t instruction : groups[g].instructions)
      if (instruction < position.size())
        position[instruction] = g;
  return position;
}

std::string bytesText(uint64_t bytes) {
  char text[32];
  if (bytes >= 1000000)
    std::snprintf(text, sizeof(text), "%.1f MB", static_cast<double>(bytes) / 1e6);
  else
    std::snprintf(text, sizeof(text), "%.1f kB", static_cast<double>(bytes) / 1e3);
  return text;
}

} // namespace

void assignGradientBuckets(Plan &plan, uint64_t bucketBytes) {
  // Accumulates run as each gradient becomes final; a device program may
  // run them in another order than the instruction list: take its order.
  std::vector<uint32_t> order = accumulates(plan);
  const std::vector<size_t> position = positions(plan);
  std::stable_sort(order.begin(), order.end(),
                   [&](uint32_t a, uint32_t b) { return position[a] < position[b]; });
  int64_t bucket = 0;
  uint64_t filled = 0;
  for (uint32_t index : order) {
    Instruction &instruction = plan.instructions[index];
    const uint64_t bytes =
        static_cast<uint64_t>(numElements(plan.buffers[instruction.operands[0]])) * 4;
    if (filled > 0 && filled + bytes > bucketBytes) {
      ++bucket;
      filled = 0;
    }
    set(instruction, attr::bucket, bucket);
    filled += bytes;
  }
}

std::vector<GradientBucket> gradientBuckets(const Plan &plan) {
  const std::vector<size_t> position = positions(plan);
  std::map<int64_t, GradientBucket> buckets;
  std::vector<uint32_t> order = accumulates(plan);
  std::stable_sort(order.begin(), order.end(),
                   [&](uint32_t a, uint32_t b) { return position[a] < position[b]; });
  for (uint32_t index : order) {
    const Instruction &instruction = plan.instructions[index];
    const int64_t id = has(instruction, attr::bucket) ? get(instruction, attr::bucket) : 0;
    GradientBucket &bucket = buckets[id];
    const uint32_t accumulator = instruction.operands[0];
    if (std::find(bucket.accumulators.begin(), bucket.accumulators.end(), accumulator) ==
        bucket.accumulators.end()) {
      bucket.accumulators.push_back(accumulator);
      bucket.bytes += static_cast<uint64_t>(numElements(plan.buffers[accumulator])) * 4;
    }
    bucket.readyAfter = std::max(bucket.readyAfter, position[index]);
  }
  std::vector<GradientBucket> result;
  for (auto &entry : buckets)
    result.push_back(std::move(entry.second));
  return result;
}

std::string describeGradientBuckets(const Plan &plan) {
  const bool device = !plan.device.microStep.groups.empty();
  const size_t positions = device ? plan.device.microStep.groups.size() : plan.instructions.size();
  std::string text;
  const std::vector<GradientBucket> buckets = gradientBuckets(plan);
  for (size_t b = 0; b < buckets.size(); ++b)
    text += "  bucket " + std::to_string(b) + ": " +
            std::to_string(buckets[b].accumulators.size()) + " accumulator" +
            (buckets[b].accumulators.size() == 1 ? "" : "s") + ", " + bytesText(buckets[b].bytes) +
            ", final after micro-step " + (device ? "group " : "instruction ") +
            std::to_string(buckets[b].readyAfter + 1) + " of " + std::to_string(positions) + "\n";
  return text;
}

} // namespace ampc::plan
