//===- DeviceProgramBuilder.cpp - the plan's device program from the fused IR ----===//
//
// Walks each step function's fused groups in their scheduled order and turns each into a step
// group: generated kernels become launches (their arguments bound to plan buffers through the
// emitter's provenance), matmul groups become cuBLASLt matmuls, attention groups flash-attention
// calls. Then the arena: the temporaries the steps write, live from the group that writes them
// to the last group that reads them (directly or through a view), placed where
// graph-plan-memory put them.
// This file holds that walk, the arena placement, the reshapes that become views and the flash
// module source; translating one group into its steps is in DeviceProgramSteps.cpp, and the
// Builder they share is declared in DeviceProgramBuilderInternal.h.
//
//===--------------------------------------------------------------------------===//

#include "compiler/DeviceProgramBuilderInternal.h"
#include "passes/ArenaValues.h"

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
    auto fusion = op.getAttrOfType<FusionAttr>(GraphDialect::kFusionAttrName);
    if (!fusion)
      throw std::runtime_error("device program: an op of " + fn.getName().str() +
                               " has no graph.fusion (run graph-fuse first)");
    FusedGroup &group = groups[fusion.getGroup()];
    group.id = fusion.getGroup();
    group.kind = stringifyGroupKind(fusion.getKind()).str();
    group.ops.push_back(&op);
  }
  std::vector<int64_t> order;
  if (auto schedule = fn->getAttrOfType<DenseI64ArrayAttr>(GraphDialect::kFusionScheduleAttrName))
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

  placeArena(fn, list, out);

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

/// Places every temporary a step writes where graph-plan-memory put its value: the arena and
/// the offsets are the IR's (graph.arena, graph.arena_offsets), never placed again here. Views
/// resolve to their source's storage; a result graph-plan-memory gave its operand's bytes
/// (cross_entropy_grad over its logits) reuses them, which the kernel must allow.
void Builder::placeArena(func::FuncOp fn, const std::vector<plan::Instruction> &list,
                         plan::DeviceFunction &out) {
  auto arena = fn->getAttrOfType<ArenaAttr>(GraphDialect::kArenaAttrName);
  if (!arena)
    throw std::runtime_error("device program: " + fn.getName().str() +
                             " has no graph.arena (run graph-plan-memory after graph-fuse)");
  if (arena.getAlignment() % static_cast<int64_t>(kAlignment) != 0)
    throw std::runtime_error("device program: the arena of " + fn.getName().str() + " is " +
                             std::to_string(arena.getAlignment()) +
                             "-byte aligned; the device needs " + std::to_string(kAlignment));
  // The storage each buffer reads: reshape results resolve to their source.
  std::vector<uint32_t> storage(plan.buffers.size());
  for (uint32_t id = 0; id < storage.size(); ++id)
    storage[id] = id;
  for (const plan::Instruction &instruction : list)
    if (instruction.op == plan::OpCode::Reshape)
      storage[instruction.results[0]] = storage[instruction.operands[0]];

  // What the steps write, in the arena.
  std::set<uint32_t> written;
  auto write = [&](uint32_t id) {
    if (id != plan::kNoBuffer && plan.buffers[storage[id]].role == plan::BufferRole::Temporary)
      written.insert(storage[id]);
  };
  for (const plan::DeviceGroup &group : out.groups)
    for (const plan::DeviceStep &step : group.steps) {
      if (const auto *launch = std::get_if<plan::LaunchStep>(&step)) {
        for (const plan::DeviceArgument &arg : launch->args)
          if (arg.kind == plan::ArgKind::Buffer && arg.access != plan::Access::Read)
            write(arg.buffer);
      } else if (const auto *matmul = std::get_if<plan::MatmulStep>(&step)) {
        write(matmul->d);
        write(matmul->aux);
      } else if (const auto *attention = std::get_if<plan::AttentionStep>(&step)) {
        for (uint32_t id : {attention->out, attention->dq, attention->dk, attention->dv})
          write(id);
      } else {
        write(std::get<plan::MemsetStep>(step).buffer);
      }
    }

  // graph-plan-memory's offsets, by plan buffer; a result sharing an operand's bytes in place.
  std::map<uint32_t, int64_t> offsetOf;
  std::map<uint32_t, uint32_t> reuses;
  for (Operation &op : fn.getBody().front()) {
    auto offsets = op.getAttrOfType<DenseI64ArrayAttr>(GraphDialect::kArenaOffsetsAttrName);
    if (!offsets || viewSource(&op))
      continue;
    for (auto [offset, result] : llvm::zip(offsets.asArrayRef(), op.getResults())) {
      auto buffer = provenance.bufferOf.find(result);
      if (offset < 0 || buffer == provenance.bufferOf.end())
        continue;
      offsetOf.emplace(storage[buffer->second], offset);
      if (int operand = inPlaceOperand(&op); operand >= 0) {
        auto source = provenance.bufferOf.find(op.getOperand(operand));
        if (source != provenance.bufferOf.end() &&
            offsetOf.count(storage[source->second]) &&
            offsetOf[storage[source->second]] == offset)
          reuses[storage[buffer->second]] = storage[source->second];
      }
    }
  }

  for (uint32_t id : written) {
    auto offset = offsetOf.find(id);
    if (offset == offsetOf.end())
      throw std::runtime_error("device program: a step of " + fn.getName().str() +
                               " writes temporary " + plan.buffers[id].name +
                               ", for which graph-plan-memory placed no value");
    auto source = reuses.find(id);
    const bool inPlace = source != reuses.end() && written.count(source->second);
    if (inPlace && std::none_of(this->inPlace.begin(), this->inPlace.end(),
                                [&](const InPlace &allowed) {
                                  return allowed.output == id &&
                                         storage[allowed.input] == source->second;
                                }))
      throw std::runtime_error("device program: graph-plan-memory placed " +
                               plan.buffers[id].name + " over " +
                               plan.buffers[source->second].name +
                               ", which its kernel does not allow");
    out.placements.push_back({id, static_cast<uint64_t>(offset->second),
                              inPlace ? source->second : plan::kNoBuffer});
  }
  out.arenaBytes = alignUp(static_cast<uint64_t>(arena.getBytes()));
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