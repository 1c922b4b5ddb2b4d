//===- StepTime.cpp - What a device step group moves, computes and costs -===//

#include "runtime/plan/StepTime.h"

#include "runtime/plan/DeviceProgram.h"

#include <algorithm>
#include <iterator>
#include <set>
#include <variant>

namespace ampc::plan {

namespace {

double attentionFlops(const AttentionStep &step) {
  double flops =
      4.0 * static_cast<double>(step.batch) * step.heads * step.queries * step.keys * step.headDim;
  if (step.causal)
    flops /= 2;
  return step.pass == AttentionPass::Forward ? flops : 2.5 * flops;
}

/// "m.mlir:190:13 <- 243:11" and "m.mlir:190:13 (called from m.mlir:243:11)" ->
/// "m.mlir:190:13".
std::string withoutCallSite(const std::string &location) {
  return location.substr(0, std::min(location.find(" <- "), location.find(" (called from ")));
}

/// "[16384x2304x768 bf16->bf16 gelu_aux_bias] " for each matmul of \p group (m x n x k, the
/// input and output types, the epilogue, "+=" when it accumulates), so a slow matmul row says
/// which problem it is.
std::string matmulShapes(const Plan &plan, const DeviceGroup &group) {
  static const char *const epilogues[] = {"",       " bias", " gelu_bias", " gelu_aux_bias",
                                          " bgrad", " dgelu"};
  std::string text;
  for (const DeviceStep &step : group.steps)
    if (const auto *mm = std::get_if<MatmulStep>(&step)) {
      const auto epilogue = static_cast<size_t>(mm->epilogue);
      text += "[" + std::to_string(mm->m) + "x" + std::to_string(mm->n) + "x" +
              std::to_string(mm->k) + (mm->batch > 1 ? " batch " + std::to_string(mm->batch) : "") +
              " " + dtypeName(plan.buffers[mm->a].dtype) + "->" +
              dtypeName(plan.buffers[mm->d].dtype) + (mm->beta != 0 ? " +=" : "") +
              (epilogue < std::size(epilogues) ? epilogues[epilogue] : " ?") + "] ";
    }
  return text;
}

// Fitted to GPT-124M's profile on an H200 (bench/results/2026-11-26-h200/profile_gpt124m.txt,
// groups timed eagerly between CUDA events, 4 us of launch each): the kinds' totals over the
// rows the profile lists, bytes or FLOPs over time less the launches.
GpuModel h200Model() {
  GpuModel gpu;
  gpu.name = "h200";
  gpu.description = "NVIDIA H200: a device copy measured 4.11 TB/s (read + written), 989 TFLOP/s "
                    "dense bf16; kinds fitted to GPT-124M's profile of 2026-11-26";
  gpu.copyBandwidth = 4.11e12;
  gpu.tensorPeak = 989e12;
  gpu.launchSeconds = 4e-6;
  // Memory-bound kinds: elementwise 54.8%, the classifier 29.7%, the scalar step kernels 75.3%
  // of the copy; the optimizer 99% (its 1.044 ms moves 4.23 GB: the profile's 2.24 GB counted
  // each parameter's buffers once, not read and written); the 218 groups the profile does not
  // list (row kernels, column sums, copies, accumulations) reach 43% together (the
  // memory-bound total, 10.29 ms for 16.4 GB, less the listed rows).
  gpu.efficiency = {{"elementwise", 0.548}, {"cross_entropy", 0.297}, {"optimizer", 0.99},
                    {"none", 0.753}};
  gpu.defaultEfficiency = 0.43;
  gpu.matmulThroughput = {{"matmul", 757.6e12},
                          {"matmul_accumulate", 600.0e12},
                          {"matmul_epilogue", 513.9e12},
                          {"bias_grad", 494.5e12}};
  // Our tensor-core attention at GPT-124M's shapes (B 16, H 12, T 1024, D 64, causal).
  gpu.attentionForward = 128.7e12;
  gpu.attentionBackward = 96.0e12;
  return gpu;
}

// The H100 has the H200's tensor cores and less bandwidth (a device copy measured 3.0 TB/s,
// docs/performance.md). Its one kept profile (2026-11-25) predates the tensor-core attention
// and the packed kernels, so the kinds' efficiencies and throughputs are the H200's: the
// compute-bound figures carry over, the memory-bound ones scale with the copy.
GpuModel h100Model() {
  GpuModel gpu = h200Model();
  gpu.name = "h100";
  gpu.description = "NVIDIA H100 SXM: a device copy measured 3.0 TB/s (read + written), 989 "
                    "TFLOP/s dense bf16; kinds as the H200's";
  gpu.copyBandwidth = 3.0e12;
  return gpu;
}

} // namespace

GroupCost groupCost(const Plan &plan, const DeviceGroup &group) {
  GroupCost cost;
  std::set<uint32_t> reads, writes;
  for (uint32_t id : readBuffers(group))
    reads.insert(id);
  for (uint32_t id : writtenBuffers(group))
    writes.insert(id);
  // A matmul accumulating into D (C = D, beta 1) reads D too, which readBuffers leaves out.
  for (const DeviceStep &step : group.steps)
    if (const auto *matmul = std::get_if<MatmulStep>(&step); matmul && matmul->beta != 0)
      reads.insert(matmul->c);
  for (const std::set<uint32_t> *buffers : {&reads, &writes})
    for (uint32_t id : *buffers)
      if (id < plan.buffers.size())
        cost.bytes += static_cast<uint64_t>(numElements(plan.buffers[id])) *
                      dtypeBytes(plan.buffers[id].dtype);
  for (const DeviceStep &step : group.steps) {
    if (const auto *matmul = std::get_if<MatmulStep>(&step))
      cost.flops += 2.0 * static_cast<double>(matmul->m) * matmul->n * matmul->k * matmul->batch;
    else if (const auto *attention = std::get_if<AttentionStep>(&step))
      cost.flops += attentionFlops(*attention);
  }
  return cost;
}

std::string groupDescription(const Plan &plan, const DeviceGroup &group,
                             const std::vector<Instruction> &instructions) {
  std::vector<std::string> seen;
  for (uint32_t index : group.instructions) {
    if (index >= instructions.size() || instructions[index].location.empty())
      continue;
    const std::string location = withoutCallSite(instructions[index].location);
    if (std::find(seen.begin(), seen.end(), location) == seen.end())
      seen.push_back(location);
  }
  std::string text;
  for (size_t i = 0; i < seen.size() && i < 3; ++i)
    text += (i ? ", " : "") + seen[i];
  if (seen.size() > 3)
    text += " (+" + std::to_string(seen.size() - 3) + ")";
  return matmulShapes(plan, group) + (text.empty() ? "-" : text);
}

const GpuModel *findGpuModel(const std::string &name) {
  static const GpuModel models[] = {h200Model(), h100Model()};
  for (const GpuModel &model : models)
    if (model.name == name)
      return &model;
  return nullptr;
}

std::string gpuModelNames() { return "h200, h100"; }

PredictedTime predictGroupTime(const Plan &plan, const DeviceGroup &group, const GpuModel &gpu) {
  const GroupCost cost = groupCost(plan, group);
  PredictedTime time;
  const double memory = static_cast<double>(cost.bytes) / gpu.copyBandwidth;
  time.floorSeconds = std::max(memory, cost.flops / gpu.tensorPeak);
  // The compute of the group's matmuls and attention at the kind's throughput.
  double compute = 0;
  for (const DeviceStep &step : group.steps) {
    if (const auto *matmul = std::get_if<MatmulStep>(&step)) {
      auto found = gpu.matmulThroughput.find(group.kind);
      const double throughput =
          found != gpu.matmulThroughput.end() ? found->second : gpu.matmulThroughput.at("matmul");
      compute +=
          2.0 * static_cast<double>(matmul->m) * matmul->n * matmul->k * matmul->batch / throughput;
    } else if (const auto *attention = std::get_if<AttentionStep>(&step)) {
      compute += attentionFlops(*attention) / (attention->pass == AttentionPass::Forward
                                                   ? gpu.attentionForward
                                                   : gpu.attentionBackward);
    }
  }
  if (compute > 0) {
    time.seconds = std::max(gpu.launchSeconds + compute, memory);
    time.bound = gpu.launchSeconds + compute < memory ? "memory"
                 : compute >= gpu.launchSeconds     ? "compute"
                                                    : "launch";
    return time;
  }
  auto found = gpu.efficiency.find(group.kind);
  const double efficiency =
      found != gpu.efficiency.end() ? found->second : gpu.defaultEfficiency;
  const double moving = memory / efficiency;
  time.seconds = gpu.launchSeconds + moving;
  time.bound = moving >= gpu.launchSeconds ? "memory" : "launch";
  return time;
}

} // namespace ampc::plan
