//===- DeviceProgramBuilder.cpp - the plan's device program from the fused IR ----===//
//
// Walks each step function's fused groups in their scheduled order and turns each into a step
// group: generated kernels become launches (their arguments bound to plan buffers through the
// emitter's provenance), matmul groups become cuBLASLt matmuls, attention groups flash-attention
// calls, an embedding gradient's zeroing a memset. Then the arena: the temporaries the steps
// write are put where graph-plan-memory placed their values (graph.arena_offsets), in the arena
// it sized (graph.arena); reshapes of stored values become views.
//
// The Builder and its helpers are in DeviceProgramBuilderImpl.h, the translation of one fused
// group into device steps in DeviceProgramSteps.cpp; this file walks the functions, places the
// arena and the views, and writes the flash-attention modules' source.
//
//===--------------------------------------------------------------------------===//

#include "compiler/cuda/DeviceProgramBuilderImpl.h"

//===----------------------------------------------------------------------===//
// Functions, the arena and views
//===----------------------------------------------------------------------===//

using namespace mlir;
using namespace ampc::graph;

namespace ampc {
namespace deviceprogram {

/// Kernels are generated for the whole model at once, then distributed to the groups by
/// (function, group id).
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
    auto step =
        llvm::dyn_cast_or_null<func::FuncOp>(SymbolTable::lookupSymbolIn(model, "optimizer_step"));
    if (!step)
      throw std::runtime_error("device program: the plan has an optimizer step, the model none");
    buildFunction(step, plan.optimizerInstructions, result.program.optimizerStep, true);
  }
  // The flash modules hold exactly the entry points the program launches.
  for (auto &[module, needs] : flashEntries) {
    std::vector<std::string> entries = needs.second;
    // Sorted: the source, and so the module's cache key, does not depend on the order of use.
    std::sort(entries.begin(), entries.end());
    result.moduleSources[module] =
        flashAttentionModuleSource(needs.first.first, needs.first.second, entries);
  }
  return std::move(result);
}

/// Every op must carry its graph.fusion group; the groups run in the function's
/// fusion_schedule (or by group id without one), each covering the plan instructions of its
/// ops so the runtime can tell which step computes which instruction.
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
    // Ops the device program has no kernel for yet: the plan trains on the CPU.
    for (Operation *op : group.ops)
      if (op->hasTrait<ImageKernel>())
        throw DeviceProgramUnsupported(op->getName().getStringRef().str() + " at " +
                                       formatLocation(op->getLoc(), true) +
                                       " has no GPU kernel yet (convolution, pooling and batch "
                                       "norm run on the CPU backend)");
    GroupScratch scratch;
    groupIndex = static_cast<int64_t>(out.groups.size());
    buildGroup(group, deviceGroup, scratch);
    if (deviceGroup.steps.empty())
      throw std::runtime_error("device program: no device code for " +
                               describeGroup(fn, group.id, group.kind) + ", which computes " +
                               formatLocation(group.ops.front()->getLoc(), true));
    // Groups run one after another, so the function's scratch is the largest group's, not the
    // sum.
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
  // The instruction list is in program order, so a chain of reshapes resolves to its root in
  // one pass.
  std::vector<uint32_t> storage(plan.buffers.size());
  for (uint32_t id = 0; id < storage.size(); ++id)
    storage[id] = id;
  for (const plan::Instruction &instruction : list)
    if (instruction.op == plan::OpCode::Reshape)
      storage[instruction.results[0]] = storage[instruction.operands[0]];

  // What the steps write, in the arena.
  std::set<uint32_t> written;
  for (const plan::DeviceGroup &group : out.groups)
    for (uint32_t id : plan::writtenBuffers(group))
      if (plan.buffers[storage[id]].role == plan::BufferRole::Temporary)
        written.insert(storage[id]);

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
        if (source != provenance.bufferOf.end() && offsetOf.count(storage[source->second]) &&
            offsetOf[storage[source->second]] == offset)
          reuses[storage[buffer->second]] = storage[source->second];
      }
    }
  }

  // Every written temporary must have an offset. When its bytes are its operand's (an in-place
  // result) and both are written here, the kernel must have declared that alias; otherwise the
  // placement would silently corrupt an input the kernel still reads.
  for (uint32_t id : written) {
    auto offset = offsetOf.find(id);
    if (offset == offsetOf.end())
      throw std::runtime_error("device program: a step of " + fn.getName().str() +
                               " writes temporary " + plan.buffers[id].name +
                               ", for which graph-plan-memory placed no value");
    auto source = reuses.find(id);
    const bool inPlace = source != reuses.end() && written.count(source->second);
    if (inPlace &&
        std::none_of(this->inPlace.begin(), this->inPlace.end(), [&](const InPlace &allowed) {
          return allowed.output == id && storage[allowed.input] == source->second;
        }))
      throw std::runtime_error("device program: graph-plan-memory placed " + plan.buffers[id].name +
                               " over " + plan.buffers[source->second].name +
                               ", which its kernel does not allow");
    out.placements.push_back(
        {id, static_cast<uint64_t>(offset->second), inPlace ? source->second : plan::kNoBuffer});
  }
  // The arena's size is graph-plan-memory's, rounded up to the device alignment.
  out.arenaBytes = alignUp(static_cast<uint64_t>(arena.getBytes()));
}

} // namespace deviceprogram

/// The grid follows the kernel's iteration space: grid-stride kernels (elements, rows) get at
/// most kMaxGridStrideBlocks blocks and loop over the rest, while column and multi-tensor
/// kernels have no stride loop and get exactly the blocks their work needs.
KernelShape kernelShape(const KernelLaunch &launch) {
  KernelShape shape;
  const int64_t threads = launch.blockSize;
  // Enough blocks for one unit of work per thread, capped (the kernel's stride loop covers more).
  auto blocksFor = [&](int64_t work) {
    return std::clamp<int64_t>((work + threads - 1) / threads, 1, deviceprogram::kMaxGridStrideBlocks);
  };
  switch (launch.space) {
  case KernelLaunch::Space::Elements:
    // A vectorised kernel's thread handles a pack of vectorWidth elements per iteration.
    shape.grid =
        blocksFor((launch.elements + launch.vectorWidth - 1) / std::max(1, launch.vectorWidth));
    break;
  case KernelLaunch::Space::Rows: {
    const int64_t perBlock = std::max(1, launch.rowsPerBlock);
    shape.grid = std::clamp<int64_t>((launch.rows + perBlock - 1) / perBlock, 1,
                                     deviceprogram::kMaxGridStrideBlocks);
    break;
  }
  case KernelLaunch::Space::Columns:
    // One block per 32 columns and row chunk, no grid-stride loop: every column needs its
    // blocks.
    // (32 packs of vectorWidth columns when packed).
    shape.grid = std::max<int64_t>(1, (launch.rowLength + 32 * launch.vectorWidth - 1) /
                                          (32 * std::max(1, launch.vectorWidth)));
    shape.gridY = static_cast<uint32_t>(std::max(1, launch.chunks));
    break;
  case KernelLaunch::Space::Single:
    shape.grid = 1;
    break;
  case KernelLaunch::Space::Tensors:
    // Block b works on chunk b of the table: exactly as many blocks as chunks.
    shape.grid = std::max<int64_t>(1, launch.elements);
    break;
  }
  // Column kernels run (32 columns, 8 row slices) blocks; every other kind a 1-D block.
  if (launch.space == KernelLaunch::Space::Columns) {
    shape.block[0] = static_cast<uint32_t>(launch.blockSize / launch.blockRows);
    shape.block[1] = static_cast<uint32_t>(launch.blockRows);
  } else {
    shape.block[0] = static_cast<uint32_t>(launch.blockSize);
  }
  return shape;
}

bool flashUsesTensorCores(const std::string &dtype) { return dtype == "bf16" || dtype == "f16"; }

/// The source of one flash-attention module: an `extern "C"` wrapper per entry point that
/// instantiates the FlashAttention.cuh template (FlashAttentionMma.cuh's tensor-core one for
/// the forward, dq and dk/dv of 16-bit storage) for the storage type, the head dim and (from
/// the `_causal` suffix) the causal mask. Every entry point takes the operands' layout
/// (`ampc::flash::Layout`, by value) last.
std::string flashAttentionModuleSource(const std::string &dtype, int64_t headDim,
                                       const std::vector<std::string> &entries) {
  const std::string element = dtype == "bf16"  ? "ampc::flash::Bf16"
                              : dtype == "f16" ? "ampc::flash::F16"
                                               : "ampc::flash::F32";
  const bool mma = flashUsesTensorCores(dtype);
  const std::string header = mma ? "FlashAttentionMma.cuh" : "FlashAttention.cuh";
  const std::string forward = mma ? "mmaAttentionForward" : "flashAttentionForward";
  const std::string dqKernel = mma ? "mmaAttentionBackwardDq" : "flashAttentionBackwardDq";
  const std::string dkdvKernel = mma ? "mmaAttentionBackwardDkDv" : "flashAttentionBackwardDkDv";
  const std::string d = std::to_string(headDim);
  std::ostringstream source;
  source << "// ampc_flash_attention_" << dtype << "_d" << d
         << ": the flash-attention entry points a model needs\n"
         << "// (runtime/cuda/device/" << header << "), " << dtype << " storage, head dim " << d
         << ".\n\n#include \"runtime/cuda/device/" << header << "\"\n\n"
         << "using Element = " << element << ";\nusing Storage = Element::Storage;\n";
  const std::string bounds =
      "extern \"C\" __global__ void __launch_bounds__(ampc::flash::kThreads)\n";
  for (const std::string &entry : entries) {
    const bool causal = entry.size() > 7 && entry.compare(entry.size() - 7, 7, "_causal") == 0;
    const std::string flag = causal ? "true" : "false";
    source << "\n" << bounds << entry << "(";
    // The entry's kind is read from its name: _fwd_, _bwd_delta_, _bwd_dq_, else _bwd_dkdv_.
    if (entry.find("_fwd_") != std::string::npos)
      source << "const Storage *q, const Storage *k, const Storage *v, Storage *o, float *lse,\n"
             << "    int queries, int keys, float scale, ampc::flash::Layout layout) {\n"
             << "  ampc::flash::" << forward << "<Element, " << d << ", " << flag
             << ">(q, k, v, o, lse, queries, keys, scale, layout);\n}\n";
    else if (entry.find("_bwd_delta_") != std::string::npos)
      source << "const Storage *o, const Storage *dO, float *delta, long long rows,\n"
             << "    int queries, ampc::flash::Layout layout) {\n"
             << "  ampc::flash::flashAttentionBackwardDelta<Element, " << d
             << ">(o, dO, delta, rows, queries, layout);\n}\n";
    else if (entry.find("_bwd_dq_") != std::string::npos)
      source << "const Storage *q, const Storage *k, const Storage *v, const Storage *dO,\n"
             << "    const float *lse, const float *delta, Storage *dq, int queries, int keys,\n"
             << "    float scale, ampc::flash::Layout layout) {\n"
             << "  ampc::flash::" << dqKernel << "<Element, " << d << ", " << flag
             << ">(q, k, v, dO, lse, delta, dq, queries, keys, scale, layout);\n}\n";
    else
      source << "const Storage *q, const Storage *k, const Storage *v, const Storage *dO,\n"
             << "    const float *lse, const float *delta, Storage *dk, Storage *dv, int queries,\n"
             << "    int keys, float scale, ampc::flash::Layout layout) {\n"
             << "  ampc::flash::" << dkdvKernel << "<Element, " << d << ", " << flag
             << ">(q, k, v, dO, lse, delta, dk, dv, queries, keys, scale, layout);\n}\n";
  }
  return source.str();
}

/// The device program of \p model's plan, with the sources of its modules (not yet compiled).
DeviceProgramSources buildDeviceProgram(graph::ModelOp model, const plan::Plan &plan,
                                        const PlanProvenance &provenance) {
  return deviceprogram::Builder(model, plan, provenance).run();
}

} // namespace ampc