//===- DeviceProgramBuilder.cpp - the plan's device program from the fused IR ----===//
//
// Walks each step function's fused groups in their scheduled order and turns each into a step
// group: generated kernels become launches (their arguments bound to plan buffers through the
// emitter's provenance), matmul groups become cuBLASLt matmuls, attention groups flash-attention
// calls. Then the arena: the temporaries the steps write, live from the group that writes them
// to the last group that reads them (directly or through a view), placed by MemoryPlanner.
// This file holds that walk, the arena placement, the reshapes that become views and the flash
// module source; translating one group into its steps is in DeviceProgramSteps.cpp, and the
// Builder they share is declared in DeviceProgramBuilderInternal.h.
//
//===--------------------------------------------------------------------------===//

#include "compiler/DeviceProgramBuilderInternal.h"
#include "passes/MemoryPlanner.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/SymbolTable.h"

#include <algorithm>
#include <map>
#include <set>
#include <sstream>

namespace ampc {
namespace deviceprogram {

DeviceProgramSources Builder::run() {
  for (uint32_t id = 0; id < plan.buffers.size(); ++id)
    if (plan.buffers[id].role != plan::BufferRole::Temporary)
      persistentByName.emplace(plan.buffers[id].name, id);
  kernels = generateKernels(model);
  for (const GeneratedKernel &kernel : kernels)
    kernelsOfGroup[{kernel.function, kernel.group}].push_back(&kernel);

  func::FuncOp entry = model.getEntryFunction();
  if (!entry)
    throw std::runtime_error("device program: the model has no entry function");
  buildFunction(entry, plan.instructions, result.program.microStep, false);
  if (!plan.optimizerInstructions.empty()) {
    auto step = llvm::dyn_cast_or_null<func::FuncOp>(
        SymbolTable::lookupSymbolIn(model, "optimizer_step"));
    if (!step)
      throw std::runtime_error("device program: the plan has an optimizer step, the model none");
    buildFunction(step, plan.optimizerInstructions, result.program.optimizerStep, true);
  }
  // The flash modules hold exactly the entry points the program launches.
  for (auto &[module, needs] : flashEntries) {
    std::vector<std::string> entries = needs.second;
    std::sort(entries.begin(), entries.end());
    result.moduleSources[module] =
        flashAttentionModuleSource(needs.first.first, needs.first.second, entries);
  }
  return std::move(result);
}

void Builder::buildFunction(func::FuncOp fn, const std::vector<plan::Instruction> &list,
                            plan::DeviceFunction &out, bool optimizer) {
  function = fn;
  opsByIndex.clear();
  inPlace.clear();
  std::map<int64_t, FusedGroup> groups;
  for (Operation &op : fn.getBody().front()) {
    opsByIndex.push_back(&op);
    auto id = op.getAttrOfType<IntegerAttr>("fusion_group");
    if (!id)
      throw std::runtime_error("device program: an op of " + fn.getName().str() +
                               " has no fusion_group (run graph-fuse first)");
    FusedGroup &group = groups[id.getInt()];
    group.id = id.getInt();
    if (auto kind = op.getAttrOfType<StringAttr>("fusion_kind"))
      group.kind = kind.getValue().str();
    group.ops.push_back(&op);
  }
  std::vector<int64_t> order;
  if (auto schedule = fn->getAttrOfType<DenseI64ArrayAttr>("fusion_schedule"))
    order.assign(schedule.asArrayRef().begin(), schedule.asArrayRef().end());
  else
    for (auto &entry : groups)
      order.push_back(entry.first);
  if (order.size() != groups.size())
    throw std::runtime_error("device program: the fusion_schedule of " + fn.getName().str() +
                             " does not list every group");

  // Step groups in the scheduled order; scratch is reused from one group to the next.
  std::map<const plan::DeviceGroup *, int64_t> fusedIdOf;
  std::vector<std::pair<int64_t, std::vector<Operation *>>> reshapesOfGroup;
  for (int64_t id : order) {
    auto it = groups.find(id);
    if (it == groups.end())
      throw std::runtime_error("device program: the fusion_schedule of " + fn.getName().str() +
                               " names an unknown group");
    const FusedGroup &group = it->second;
    plan::DeviceGroup deviceGroup;
    deviceGroup.kind = group.kind;
    std::vector<Operation *> reshapes;
    for (Operation *op : group.ops) {
      if (llvm::isa<ReshapeOp>(op)) {
        reshapes.push_back(op);
        continue;
      }
      auto covered = provenance.instructionsOf.find(op);
      if (covered != provenance.instructionsOf.end())
        deviceGroup.instructions.insert(deviceGroup.instructions.end(), covered->second.begin(),
                                        covered->second.end());
    }
    if (deviceGroup.instructions.empty()) {
      // Nothing to compute (parameter reads, views); reshapes become views below.
      for (Operation *op : reshapes)
        reshapesOfGroup.push_back({-1, {op}});
      continue;
    }
    GroupScratch scratch;
    groupIndex = static_cast<int64_t>(out.groups.size());
    buildGroup(group, deviceGroup, scratch);
    if (deviceGroup.steps.empty())
      throw std::runtime_error("device program: no device code for " +
                               describeGroup(fn, group.id, group.kind) + ", which computes " +
                               formatLocation(group.ops.front()->getLoc(), true));
    out.scratchBytes = std::max(out.scratchBytes, scratch.bytes);
    reshapesOfGroup.push_back({static_cast<int64_t>(out.groups.size()), reshapes});
    out.groups.push_back(std::move(deviceGroup));
  }

  placeArena(list, out, optimizer);

  // Reshapes: a view when their data is stored (placed or persistent); otherwise computed
  // inside the kernel of their group, which then covers them.
  std::set<uint32_t> stored;
  for (const plan::ArenaPlacement &placement : out.placements)
    stored.insert(placement.buffer);
  for (auto &[groupIndex, reshapes] : reshapesOfGroup)
    for (Operation *op : reshapes) {
      Value root = op->getResult(0);
      while (auto reshape = root.getDefiningOp<ReshapeOp>())
        root = reshape.getInput();
      const uint32_t source = bufferOf(root);
      const bool persistent = plan.buffers[source].role != plan::BufferRole::Temporary;
      if (persistent || stored.count(source)) {
        out.views.push_back({bufferOf(op->getResult(0)), source});
        continue;
      }
      if (groupIndex < 0)
        throw std::runtime_error("device program: the reshape at " +
                                 formatLocation(op->getLoc(), true) +
                                 " views a value no step stores");
      std::vector<uint32_t> &covered = out.groups[groupIndex].instructions;
      for (uint32_t index : provenance.instructionsOf.lookup(op))
        covered.push_back(index);
      std::sort(covered.begin(), covered.end());
    }
  for (plan::DeviceGroup &group : out.groups)
    std::sort(group.instructions.begin(), group.instructions.end());
}

/// Places every temporary a step writes: live from the first group that writes it to the last
/// that reads it (through views too); the function's results (loss, grad norm, learning rate) to
/// the end.
void Builder::placeArena(const std::vector<plan::Instruction> &list, plan::DeviceFunction &out,
                         bool optimizer) {
  // The storage each buffer reads: reshape results resolve to their source.
  std::vector<uint32_t> storage(plan.buffers.size());
  for (uint32_t id = 0; id < storage.size(); ++id)
    storage[id] = id;
  for (const plan::Instruction &instruction : list)
    if (instruction.op == plan::OpCode::Reshape)
      storage[instruction.results[0]] = storage[instruction.operands[0]];
  std::map<uint32_t, std::pair<int64_t, int64_t>> lifetime; // buffer -> (first, last)
  auto touch = [&](uint32_t id, plan::Access access, int64_t group) {
    if (id == plan::kNoBuffer)
      return;
    const uint32_t data = storage[id];
    if (plan.buffers[data].role != plan::BufferRole::Temporary)
      return;
    auto it = lifetime.find(data);
    if (access != plan::Access::Read && it == lifetime.end())
      it = lifetime.emplace(data, std::make_pair(group, group)).first;
    if (it != lifetime.end())
      it->second.second = std::max(it->second.second, group);
  };
  for (size_t g = 0; g < out.groups.size(); ++g) {
    const int64_t group = static_cast<int64_t>(g);
    for (const plan::DeviceStep &step : out.groups[g].steps) {
      if (const auto *launch = std::get_if<plan::LaunchStep>(&step)) {
        for (const plan::DeviceArgument &arg : launch->args)
          if (arg.kind == plan::ArgKind::Buffer)
            touch(arg.buffer, arg.access, group);
      } else if (const auto *matmul = std::get_if<plan::MatmulStep>(&step)) {
        for (uint32_t id : {matmul->a, matmul->b, matmul->c, matmul->bias})
          touch(id, plan::Access::Read, group);
        touch(matmul->d, plan::Access::Write, group);
        touch(matmul->aux, plan::Access::Write, group);
      } else if (const auto *attention = std::get_if<plan::AttentionStep>(&step)) {
        for (uint32_t id : {attention->q, attention->k, attention->v, attention->dOut})
          touch(id, plan::Access::Read, group);
        for (uint32_t id : {attention->out, attention->dq, attention->dk, attention->dv})
          touch(id, plan::Access::Write, group);
      } else {
        touch(std::get<plan::MemsetStep>(step).buffer, plan::Access::Write, group);
      }
    }
  }
  const int64_t end = static_cast<int64_t>(out.groups.size());
  std::vector<uint32_t> results =
      optimizer ? std::vector<uint32_t>{plan.gradNorm, plan.learningRate}
                : std::vector<uint32_t>{plan.loss};
  for (uint32_t id : results)
    if (auto it = lifetime.find(storage[id]); it != lifetime.end())
      it->second.second = end;

  // A kernel output written in place over an input read for the last time by the same group
  // takes over its bytes: one value of the arena for both.
  std::map<uint32_t, uint32_t> reuses;
  std::set<uint32_t> reused;
  for (const InPlace &candidate : inPlace) {
    const uint32_t output = candidate.output, input = storage[candidate.input];
    auto in = lifetime.find(input), written = lifetime.find(output);
    if (in == lifetime.end() || written == lifetime.end() || reused.count(input) ||
        reuses.count(input) || in->second.second != candidate.group ||
        written->second.first != candidate.group ||
        bufferBytes(plan.buffers[input]) != bufferBytes(plan.buffers[output]))
      continue;
    in->second.second = std::max(in->second.second, written->second.second);
    lifetime.erase(written);
    reuses[output] = input;
    reused.insert(input);
  }

  std::vector<graph::BufferLifetime> values;
  std::vector<uint32_t> ids;
  for (auto &[id, span] : lifetime) {
    graph::BufferLifetime value;
    value.bytes = static_cast<int64_t>(bufferBytes(plan.buffers[id]));
    value.first = span.first;
    value.last = span.second;
    values.push_back(value);
    ids.push_back(id);
  }
  graph::MemoryPlan placed = graph::planMemory(values, static_cast<int64_t>(kAlignment));
  std::map<uint32_t, uint64_t> offsetOf;
  for (size_t i = 0; i < ids.size(); ++i) {
    offsetOf[ids[i]] = static_cast<uint64_t>(placed.offsets[i]);
    out.placements.push_back({ids[i], offsetOf[ids[i]], plan::kNoBuffer});
  }
  for (auto [output, input] : reuses)
    out.placements.push_back({output, offsetOf.at(input), input});
  out.arenaBytes = alignUp(static_cast<uint64_t>(placed.arenaBytes));
}

} // namespace deviceprogram


std::string flashAttentionModuleSource(const std::string &dtype, int64_t headDim,
                                       const std::vector<std::string> &entries) {
  const std::string element = dtype == "bf16"  ? "ampc::flash::Bf16"
                              : dtype == "f16" ? "ampc::flash::F16"
                                               : "ampc::flash::F32";
  const std::string d = std::to_string(headDim);
  std::ostringstream source;
  source << "// ampc_flash_attention_" << dtype << "_d" << d
         << ": the flash-attention entry points a model needs\n"
         << "// (runtime/cuda/device/FlashAttention.cuh), " << dtype << " storage, head dim " << d
         << ".\n\n#include \"runtime/cuda/device/FlashAttention.cuh\"\n\n"
         << "using Element = " << element << ";\nusing Storage = Element::Storage;\n";
  const std::string bounds = "extern \"C\" __global__ void __launch_bounds__(ampc::flash::kThreads)\n";
  for (const std::string &entry : entries) {
    const bool causal = entry.size() > 7 && entry.compare(entry.size() - 7, 7, "_causal") == 0;
    const std::string flag = causal ? "true" : "false";
    source << "\n" << bounds << entry << "(";
    if (entry.find("_fwd_") != std::string::npos)
      source << "const Storage *q, const Storage *k, const Storage *v, Storage *o, float *lse,\n"
             << "    int queries, int keys, float scale) {\n"
             << "  ampc::flash::flashAttentionForward<Element, " << d << ", " << flag
             << ">(q, k, v, o, lse, queries, keys, scale);\n}\n";
    else if (entry.find("_bwd_delta_") != std::string::npos)
      source << "const Storage *o, const Storage *dO, float *delta, long long rows) {\n"
             << "  ampc::flash::flashAttentionBackwardDelta<Element, " << d
             << ">(o, dO, delta, rows);\n}\n";
    else if (entry.find("_bwd_dq_") != std::string::npos)
      source << "const Storage *q, const Storage *k, const Storage *v, const Storage *dO,\n"
             << "    const float *lse, const float *delta, Storage *dq, int queries, int keys,\n"
             << "    float scale) {\n"
             << "  ampc::flash::flashAttentionBackwardDq<Element, " << d << ", " << flag
             << ">(q, k, v, dO, lse, delta, dq, queries, keys, scale);\n}\n";
    else
      source << "const Storage *q, const Storage *k, const Storage *v, const Storage *dO,\n"
             << "    const float *lse, const float *delta, Storage *dk, Storage *dv, int queries,\n"
             << "    int keys, float scale) {\n"
             << "  ampc::flash::flashAttentionBackwardDkDv<Element, " << d << ", " << flag
             << ">(q, k, v, dO, lse, delta, dk, dv, queries, keys, scale);\n}\n";
  }
  return source.str();
}

DeviceProgramSources buildDeviceProgram(graph::ModelOp model, const plan::Plan &plan,
                                        const PlanProvenance &provenance) {
  return deviceprogram::Builder(model, plan, provenance).run();
}

} // namespace ampc