//===- Executor.cpp - The CUDA backend: a plan's device program on one GPU ===//
//
// See Executor.h for what runs where and why. The parts, in order: pure
// helpers (sizes, argument resolution, tables), the Impl (memory, modules,
// uploads), running steps and segments, metrics, and the test hooks.
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/Executor.h"

#include "runtime/cuda/CublasLt.h"
#include "runtime/cuda/CudaGraph.h"
#include "runtime/cuda/Memory.h"
#include "runtime/cuda/Module.h"
#include "runtime/numerics/Float16.h"
#include "runtime/numerics/Philox.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <set>

namespace ampc::cuda {

using plan::kNoBuffer;

const char *planFunctionName(PlanFunction function) {
  return function == PlanFunction::MicroStep ? "micro_step" : "optimizer_step";
}

namespace {

bool isPersistent(plan::BufferRole role) {
  return role != plan::BufferRole::Temporary;
}

uint64_t bufferBytes(const plan::Buffer &buffer) {
  return static_cast<uint64_t>(plan::numElements(buffer)) *
         plan::dtypeBytes(buffer.dtype);
}

/// Bytes of one table argument's device array.
uint64_t tableBytes(const plan::DeviceTable &table) {
  return table.entries.size() *
         (table.kind == plan::TableKind::Optimizer ? 88u : 24u);
}

template <typename F> void forEachLaunch(const plan::DeviceFunction &f, F fn) {
  for (const plan::DeviceGroup &group : f.groups)
    for (const plan::DeviceStep &step : group.steps)
      if (const auto *launch = std::get_if<plan::LaunchStep>(&step))
        fn(*launch);
}

/// Bytes of the metrics block: one 8-byte slot per micro step of an
/// optimizer step (the loss), then grad norm, learning rate, and the scale,
/// applied steps and floor hits before the optimizer step (8 bytes each).
uint64_t metricsBytes(const plan::Plan &plan) {
  return 8 * (static_cast<uint64_t>(plan.accumulationSteps) + 5);
}

void putU64(std::vector<uint8_t> &bytes, size_t offset, uint64_t value) {
  std::memcpy(bytes.data() + offset, &value, 8);
}

} // namespace

DeviceMemoryNeeds deviceMemoryNeeds(const plan::Plan &plan) {
  BumpLayout layout;
  for (const plan::Buffer &buffer : plan.buffers)
    if (isPersistent(buffer.role))
      layout.reserve(bufferBytes(buffer), buffer.name);
  for (const plan::DeviceFunction *f :
       {&plan.device.microStep, &plan.device.optimizerStep})
    forEachLaunch(*f, [&](const plan::LaunchStep &launch) {
      for (const plan::DeviceArgument &argument : launch.args)
        if (argument.kind == plan::ArgKind::Table)
          layout.reserve(tableBytes(argument.table), "a table");
    });
  layout.reserve(2 * sizeof(plan::DeviceErrorRecord), "error records");
  layout.reserve(metricsBytes(plan), "metrics");
  DeviceMemoryNeeds needs;
  needs.persistent = layout.used();
  needs.arena = alignUp(std::max(plan.device.microStep.arenaBytes,
                                 plan.device.optimizerStep.arenaBytes));
  needs.scratch = alignUp(std::max(plan.device.microStep.scratchBytes,
                                   plan.device.optimizerStep.scratchBytes));
  needs.workspace = Matmul::kWorkspaceBytes;
  return needs;
}

std::vector<ResolvedArgument> resolveArguments(const plan::LaunchStep &launch,
                                               const AddressMap &addresses,
                                               size_t &nextTable) {
  std::vector<ResolvedArgument> resolved;
  resolved.reserve(launch.args.size());
  for (const plan::DeviceArgument &argument : launch.args) {
    ResolvedArgument value;
    switch (argument.kind) {
    case plan::ArgKind::Buffer:
      if (argument.buffer >= addresses.buffers.size() ||
          addresses.buffers[argument.buffer] == 0)
        throw CudaError(CudaErrorKind::InvalidArgument,
                        "argument '" + argument.name + "' names buffer " +
                            std::to_string(argument.buffer) +
                            ", which has no device memory");
      value.value = addresses.buffers[argument.buffer];
      break;
    case plan::ArgKind::Int64:
      value.value = static_cast<uint64_t>(argument.value);
      break;
    case plan::ArgKind::Seed:
    case plan::ArgKind::Step:
    case plan::ArgKind::TotalSteps:
      value.dynamic = argument.kind;
      break;
    case plan::ArgKind::Scratch:
      value.value = addresses.scratch + static_cast<uint64_t>(argument.value);
      break;
    case plan::ArgKind::Table:
      if (nextTable >= addresses.tables.size())
        throw CudaError(CudaErrorKind::InvalidArgument,
                        "argument '" + argument.name +
                            "' is a table the executor did not build");
      value.value = addresses.tables[nextTable++];
      break;
    case plan::ArgKind::ErrorRecord:
      value.value = addresses.errorRecord;
      break;
    }
    resolved.push_back(value);
  }
  return resolved;
}

std::vector<uint8_t> encodeTable(const plan::Plan &plan,
                                 const plan::DeviceTable &table,
                                 const std::vector<uint64_t> &buffers) {
  std::vector<uint8_t> bytes(tableBytes(table), 0);
  auto pointer = [&](uint32_t id) -> uint64_t {
    return id == kNoBuffer ? 0 : buffers.at(id);
  };
  for (size_t i = 0; i < table.entries.size(); ++i) {
    const plan::TableEntry &entry = table.entries[i];
    if (table.kind == plan::TableKind::Norm) {
      const size_t at = 24 * i;
      putU64(bytes, at, pointer(entry.grad));
      putU64(bytes, at + 8, static_cast<uint64_t>(entry.elements));
      putU64(bytes, at + 16, static_cast<uint64_t>(entry.firstBlock));
      continue;
    }
    const size_t at = 88 * i;
    putU64(bytes, at, pointer(entry.param));
    putU64(bytes, at + 8, pointer(entry.grad));
    putU64(bytes, at + 16, pointer(entry.firstMoment));
    putU64(bytes, at + 24, pointer(entry.secondMoment));
    putU64(bytes, at + 32, pointer(entry.copy));
    int32_t copyType = 0;
    if (entry.copy != kNoBuffer)
      copyType = plan.buffers[entry.copy].dtype == plan::DType::BF16 ? 1 : 2;
    std::memcpy(bytes.data() + at + 40, &copyType, 4);
    putU64(bytes, at + 48, static_cast<uint64_t>(entry.elements));
    putU64(bytes, at + 56, static_cast<uint64_t>(entry.firstBlock));
    const float floats[6] = {entry.beta1,       entry.beta2,
                             entry.eps,         entry.weightDecay,
                             entry.clipNorm,    entry.momentum};
    std::memcpy(bytes.data() + at + 64, floats, sizeof(floats));
  }
  return bytes;
}

namespace {

void addUnique(std::vector<uint32_t> &ids, uint32_t id) {
  if (id != kNoBuffer && std::find(ids.begin(), ids.end(), id) == ids.end())
    ids.push_back(id);
}

} // namespace

std::vector<uint32_t> writtenBuffers(const plan::DeviceGroup &group) {
  std::vector<uint32_t> ids;
  for (const plan::DeviceStep &step : group.steps) {
    if (const auto *launch = std::get_if<plan::LaunchStep>(&step)) {
      for (const plan::DeviceArgument &argument : launch->args)
        if (argument.kind == plan::ArgKind::Buffer &&
            argument.access != plan::Access::Read)
          addUnique(ids, argument.buffer);
    } else if (const auto *matmul = std::get_if<plan::MatmulStep>(&step)) {
      addUnique(ids, matmul->d);
      addUnique(ids, matmul->aux);
      if (matmul->epilogue == plan::Epilogue::BGradB)
        addUnique(ids, matmul->bias);
    } else if (const auto *attention = std::get_if<plan::AttentionStep>(&step)) {
      addUnique(ids, attention->out);
      addUnique(ids, attention->dq);
      addUnique(ids, attention->dk);
      addUnique(ids, attention->dv);
    } else if (const auto *memset = std::get_if<plan::MemsetStep>(&step)) {
      addUnique(ids, memset->buffer);
    }
  }
  return ids;
}

std::vector<uint32_t> readBuffers(const plan::DeviceGroup &group) {
  std::vector<uint32_t> ids;
  for (const plan::DeviceStep &step : group.steps) {
    if (const auto *launch = std::get_if<plan::LaunchStep>(&step)) {
      for (const plan::DeviceArgument &argument : launch->args)
        if (argument.kind == plan::ArgKind::Buffer &&
            argument.access != plan::Access::Write)
          addUnique(ids, argument.buffer);
    } else if (const auto *matmul = std::get_if<plan::MatmulStep>(&step)) {
      addUnique(ids, matmul->a);
      addUnique(ids, matmul->b);
      if (matmul->c != matmul->d)
        addUnique(ids, matmul->c);
      if (matmul->epilogue != plan::Epilogue::BGradB)
        addUnique(ids, matmul->bias);
    } else if (const auto *attention = std::get_if<plan::AttentionStep>(&step)) {
      addUnique(ids, attention->q);
      addUnique(ids, attention->k);
      addUnique(ids, attention->v);
      addUnique(ids, attention->dOut);
    }
  }
  return ids;
}

//===----------------------------------------------------------------------===//
// Impl
//===----------------------------------------------------------------------===//

namespace {

/// A launch step with its kernel and argument values resolved once.
struct PreparedLaunch {
  Kernel *kernel = nullptr;
  LaunchConfig config;
  std::vector<ResolvedArgument> arguments;
  /// Pointers to each argument's value (cuLaunchKernel's kernelParams).
  std::vector<void *> pointers;
  bool dynamic = false;
};

/// A run of groups captured as one graph, or one group run eagerly because
/// a launch in it takes the step.
struct Segment {
  size_t first = 0, last = 0; ///< groups [first, last)
  bool dynamic = false;
  std::unique_ptr<GraphCapture> graph;
};

struct FunctionState {
  PlanFunction which = PlanFunction::MicroStep;
  const plan::DeviceFunction *program = nullptr;
  const std::vector<plan::Instruction> *instructions = nullptr;
  /// Per group, per step: the prepared launch (null for other steps).
  std::vector<std::vector<std::unique_ptr<PreparedLaunch>>> launches;
  std::vector<Segment> segments;
  CUdeviceptr errorRecord = 0;
  size_t replayed = 0;
};

MatmulEpilogue toMatmulEpilogue(plan::Epilogue epilogue) {
  switch (epilogue) {
  case plan::Epilogue::None:
    return MatmulEpilogue::None;
  case plan::Epilogue::Bias:
    return MatmulEpilogue::Bias;
  case plan::Epilogue::GeluTanhBias:
    return MatmulEpilogue::GeluBias;
  case plan::Epilogue::GeluAuxBias:
    return MatmulEpilogue::GeluAuxBias;
  case plan::Epilogue::BGradB:
    return MatmulEpilogue::BiasGradientB;
  }
  return MatmulEpilogue::None;
}

/// Decodes \p count elements of \p dtype.
std::vector<double> decodeValues(const std::vector<uint8_t> &bytes,
                                 plan::DType dtype, size_t count) {
  std::vector<double> values(count);
  for (size_t i = 0; i < count; ++i) {
    switch (dtype) {
    case plan::DType::F32: {
      float value;
      std::memcpy(&value, bytes.data() + 4 * i, 4);
      values[i] = value;
      break;
    }
    case plan::DType::BF16:
    case plan::DType::F16: {
      uint16_t bits;
      std::memcpy(&bits, bytes.data() + 2 * i, 2);
      values[i] = dtype == plan::DType::BF16 ? numerics::bf16BitsToFloat(bits)
                                             : numerics::f16BitsToFloat(bits);
      break;
    }
    case plan::DType::I32: {
      int32_t value;
      std::memcpy(&value, bytes.data() + 4 * i, 4);
      values[i] = value;
      break;
    }
    case plan::DType::I64: {
      int64_t value;
      std::memcpy(&value, bytes.data() + 8 * i, 8);
      values[i] = static_cast<double>(value);
      break;
    }
    }
  }
  return values;
}

/// \p values as \p dtype bytes (floats rounded to nearest even, integers
/// truncated toward zero: callers pass whole numbers).
std::vector<uint8_t> encodeValues(const std::vector<double> &values,
                                  plan::DType dtype) {
  std::vector<uint8_t> bytes(values.size() * plan::dtypeBytes(dtype));
  for (size_t i = 0; i < values.size(); ++i) {
    switch (dtype) {
    case plan::DType::F32: {
      const float value = static_cast<float>(values[i]);
      std::memcpy(bytes.data() + 4 * i, &value, 4);
      break;
    }
    case plan::DType::BF16:
    case plan::DType::F16: {
      const float value = static_cast<float>(values[i]);
      const uint16_t bits = dtype == plan::DType::BF16
                                ? numerics::floatToBF16Bits(value)
                                : numerics::floatToF16Bits(value);
      std::memcpy(bytes.data() + 2 * i, &bits, 2);
      break;
    }
    case plan::DType::I32: {
      const int32_t value = static_cast<int32_t>(values[i]);
      std::memcpy(bytes.data() + 4 * i, &value, 4);
      break;
    }
    case plan::DType::I64: {
      const int64_t value = static_cast<int64_t>(values[i]);
      std::memcpy(bytes.data() + 8 * i, &value, 8);
      break;
    }
    }
  }
  return bytes;
}

/// "instructions 3 (matmul at m.mlir:4:7), 4 (add at ...)".
std::string describeInstructions(const std::vector<plan::Instruction> &list,
                                 const std::vector<uint32_t> &indices) {
  std::string text;
  for (uint32_t index : indices) {
    if (!text.empty())
      text += ", ";
    text += index < list.size() ? plan::describeInstruction(list[index], index)
                                : "instruction " + std::to_string(index);
  }
  return text.empty() ? "no instruction" : text;
}

} // namespace

class Executor::Impl {
public:
  Impl(const plan::Plan &source, Device &device, const ExecutorOptions &options)
      : plan(source), device(device), options(options) {
    plan::validatePlan(plan);
    if (plan.device.empty() || plan.optimizerInstructions.empty())
      throw CudaError(CudaErrorKind::InvalidArgument, kNoDeviceProgramMessage);
    for (const plan::Buffer &buffer : plan.buffers)
      if (buffer.dtype == plan::DType::BF16) {
        device.requireBf16();
        break;
      }
    checkMemory();
    allocate();
    loadModules();
    micro.which = PlanFunction::MicroStep;
    micro.program = &plan.device.microStep;
    micro.instructions = &plan.instructions;
    micro.errorRecord = microRecord;
    optimizer.which = PlanFunction::OptimizerStep;
    optimizer.program = &plan.device.optimizerStep;
    optimizer.instructions = &plan.optimizerInstructions;
    optimizer.errorRecord = optimizerRecord;
    prepare(micro);
    prepare(optimizer);
    for (const plan::Constant &constant : plan.constants)
      device.copyToDevice(addresses.buffers[constant.buffer],
                          constant.bytes.data(), constant.bytes.size());
    device.memsetAsync(microRecord, 0, 2 * sizeof(plan::DeviceErrorRecord));
    device.memsetAsync(metrics, 0, metricsBytes(plan));
    resetState();
    device.synchronize("uploading the plan's constants and tables");
  }

  /// Throws OutOfMemory, before allocating anything, when the plan cannot
  /// fit in the GPU's free memory.
  void checkMemory() {
    const DeviceMemoryNeeds needs = deviceMemoryNeeds(plan);
    const MemoryInfo memory = device.memoryInfo();
    if (needs.total() <= memory.freeBytes)
      return;
    const DeviceInfo &info = device.info();
    throw CudaError(
        CudaErrorKind::OutOfMemory,
        outOfMemoryMessage(
            "@" + plan.modelName + " (persistent buffers " +
                formatBytes(needs.persistent) + ", arena " +
                formatBytes(needs.arena) + ", scratch " +
                formatBytes(needs.scratch) + ", matmul workspace " +
                formatBytes(needs.workspace) + ")",
            needs.total(), memory.freeBytes, memory.totalBytes,
            device.allocatedBytes(), info.index, info.name));
  }

  void allocate() {
    const DeviceMemoryNeeds needs = deviceMemoryNeeds(plan);
    pool = std::make_unique<PersistentPool>(device, needs.persistent,
                                            "the persistent buffers");
    addresses.buffers.assign(plan.buffers.size(), 0);
    for (uint32_t id = 0; id < plan.buffers.size(); ++id)
      if (isPersistent(plan.buffers[id].role))
        addresses.buffers[id] =
            pool->allocate(bufferBytes(plan.buffers[id]),
                           "buffer '" + plan.buffers[id].name + "'");
    if (needs.arena)
      arena = std::make_unique<DeviceArena>(device, needs.arena,
                                            "the step arena");
    if (needs.scratch)
      scratch = device.allocate(needs.scratch, "the scratch region");
    addresses.scratch = scratch.pointer();
    for (const plan::DeviceFunction *f :
         {&plan.device.microStep, &plan.device.optimizerStep}) {
      for (const plan::ArenaPlacement &placement : f->placements)
        addresses.buffers[placement.buffer] = arena->at(
            placement.offset, bufferBytes(plan.buffers[placement.buffer]));
      for (const plan::BufferView &view : f->views)
        addresses.buffers[view.buffer] = addresses.buffers[view.source];
    }
    microRecord = pool->allocate(2 * sizeof(plan::DeviceErrorRecord),
                                 "the error records");
    optimizerRecord = microRecord + sizeof(plan::DeviceErrorRecord);
    metrics = pool->allocate(metricsBytes(plan), "the metrics block");
    pinnedMetrics = device.allocatePinned(
        metricsBytes(plan) + 2 * sizeof(plan::DeviceErrorRecord) + 64,
        "the metrics read-back");
    matmul = std::make_unique<Matmul>(device);
  }

  void loadModules() {
    ModuleOptions moduleOptions;
    moduleOptions.forcePtx = options.forcePtx;
    for (const plan::DeviceModule &source : plan.device.modules) {
      KernelBinaries binaries;
      if (!source.cubinSm80.empty())
        binaries.cubins.push_back(
            {80, std::vector<char>(source.cubinSm80.begin(),
                                   source.cubinSm80.end())});
      if (!source.cubinSm90.empty())
        binaries.cubins.push_back(
            {90, std::vector<char>(source.cubinSm90.begin(),
                                   source.cubinSm90.end())});
      binaries.ptx = source.ptx;
      modules.push_back(std::make_unique<Module>(device, binaries, source.name,
                                                 moduleOptions));
    }
  }

  /// Resolves every launch of \p f, uploads its tables and cuts it into
  /// segments.
  void prepare(FunctionState &f) {
    AddressMap map = addresses;
    map.errorRecord = f.errorRecord;
    // Tables, in the order the launches name them.
    forEachLaunch(*f.program, [&](const plan::LaunchStep &launch) {
      for (const plan::DeviceArgument &argument : launch.args)
        if (argument.kind == plan::ArgKind::Table) {
          const std::vector<uint8_t> bytes =
              encodeTable(plan, argument.table, addresses.buffers);
          const CUdeviceptr table =
              pool->allocate(bytes.size(), "table '" + argument.name + "'");
          device.copyToDevice(table, bytes.data(), bytes.size());
          map.tables.push_back(table);
        }
    });
    size_t nextTable = 0;
    const auto &groups = f.program->groups;
    f.launches.resize(groups.size());
    for (size_t g = 0; g < groups.size(); ++g) {
      bool dynamicGroup = false;
      for (const plan::DeviceStep &step : groups[g].steps) {
        const auto *launch = std::get_if<plan::LaunchStep>(&step);
        if (!launch) {
          f.launches[g].push_back(nullptr);
          continue;
        }
        auto prepared = std::make_unique<PreparedLaunch>();
        const plan::DeviceKernel &kernel = plan.device.kernels.at(launch->kernel);
        prepared->kernel = &modules.at(kernel.module)->kernel(kernel.entry);
        for (int i = 0; i < 3; ++i) {
          prepared->config.grid[i] = launch->grid[i];
          prepared->config.block[i] = launch->block[i];
        }
        prepared->arguments = resolveArguments(*launch, map, nextTable);
        for (ResolvedArgument &argument : prepared->arguments) {
          prepared->pointers.push_back(&argument.value);
          if (argument.dynamic == plan::ArgKind::Step)
            prepared->dynamic = dynamicGroup = true;
        }
        f.launches[g].push_back(std::move(prepared));
      }
      // A group that takes the step is a segment of its own, run eagerly;
      // consecutive other groups share one captured segment.
      if (dynamicGroup || f.segments.empty() || f.segments.back().dynamic) {
        Segment segment;
        segment.first = g;
        segment.dynamic = dynamicGroup;
        f.segments.push_back(std::move(segment));
      }
      f.segments.back().last = g + 1;
    }
  }

  //===--------------------------------------------------------------------===//
  // Running
  //===--------------------------------------------------------------------===//

  /// Sets the per-run scalars of every launch of \p f.
  void bindScalars(FunctionState &f, const cpu::RunOptions &run) {
    for (auto &group : f.launches)
      for (auto &prepared : group)
        if (prepared) {
          for (ResolvedArgument &argument : prepared->arguments) {
            if (argument.dynamic == plan::ArgKind::Seed)
              argument.value = run.seed;
            else if (argument.dynamic == plan::ArgKind::Step)
              argument.value = run.step;
            else if (argument.dynamic == plan::ArgKind::TotalSteps)
              argument.value = run.totalSteps;
          }
        }
  }

  /// Queues step \p s of group \p g; any CudaError names the step, the
  /// group and the instructions it computes.
  void runStep(FunctionState &f, size_t g, size_t s) {
    const plan::DeviceGroup &group = f.program->groups[g];
    const plan::DeviceStep &step = group.steps[s];
    try {
      if (PreparedLaunch *prepared = f.launches[g][s].get()) {
        prepared->kernel->launch(prepared->config, prepared->pointers);
      } else if (const auto *mm = std::get_if<plan::MatmulStep>(&step)) {
        runMatmul(*mm);
      } else if (const auto *attention = std::get_if<plan::AttentionStep>(&step)) {
        runAttention(*attention);
      } else if (const auto *memset = std::get_if<plan::MemsetStep>(&step)) {
        device.memsetAsync(address(memset->buffer), 0,
                           bufferBytes(plan.buffers[memset->buffer]));
      }
    } catch (const CudaError &error) {
      throw CudaError(error.kind(),
                      std::string(error.what()) + " [" + describeStep(f, g, s) +
                          "]",
                      error.code());
    }
  }

  std::string describeStep(const FunctionState &f, size_t g, size_t s) const {
    const plan::DeviceGroup &group = f.program->groups[g];
    const plan::DeviceStep &step = group.steps[s];
    std::string what = plan::deviceStepName(step);
    if (const auto *launch = std::get_if<plan::LaunchStep>(&step))
      what += " of " + plan.device.kernels.at(launch->kernel).entry;
    return std::string(planFunctionName(f.which)) + " group " +
           std::to_string(g) + " (" + group.kind + "), step " +
           std::to_string(s) + " (" + what + "), computing " +
           describeInstructions(*f.instructions, group.instructions);
  }

  CUdeviceptr address(uint32_t buffer) const {
    return buffer == kNoBuffer ? 0 : addresses.buffers.at(buffer);
  }

  void runMatmul(const plan::MatmulStep &step) {
    MatmulDesc desc;
    desc.m = step.m;
    desc.n = step.n;
    desc.k = step.k;
    desc.transposeA = step.transA;
    desc.transposeB = step.transB;
    desc.inputType = plan.buffers[step.a].dtype;
    desc.outputType = plan.buffers[step.d].dtype;
    desc.batchCount = step.batch;
    if (step.batch > 1) {
      desc.batchStrideA = step.strideA;
      desc.batchStrideB = step.strideB;
      desc.batchStrideD = step.strideD;
    }
    desc.epilogue = toMatmulEpilogue(step.epilogue);
    MatmulOperands operands;
    operands.a = address(step.a);
    operands.b = address(step.b);
    operands.d = address(step.d);
    operands.c = step.c == kNoBuffer ? 0 : address(step.c);
    operands.alpha = step.alpha;
    operands.beta = step.beta;
    operands.bias = address(step.bias);
    operands.aux = address(step.aux);
    matmul->run(desc, operands);
  }

  Kernel &kernelAt(uint32_t index) {
    const plan::DeviceKernel &kernel = plan.device.kernels.at(index);
    return modules.at(kernel.module)->kernel(kernel.entry);
  }

  void runAttention(const plan::AttentionStep &step) {
    int queries = static_cast<int>(step.queries);
    int keys = static_cast<int>(step.keys);
    float scale = step.scale;
    const unsigned slices = static_cast<unsigned>(step.batch * step.heads);
    const unsigned queryTiles = static_cast<unsigned>((step.queries + 31) / 32);
    CUdeviceptr q = address(step.q), k = address(step.k), v = address(step.v);
    CUdeviceptr lse = scratch.pointer() + step.lseOffset;
    LaunchConfig tiles;
    tiles.block[0] = 128;
    tiles.grid[0] = queryTiles;
    tiles.grid[1] = slices;
    if (step.pass == plan::AttentionPass::Forward) {
      CUdeviceptr o = address(step.out);
      kernelAt(step.forwardKernel)
          .launch(tiles, {&q, &k, &v, &o, &lse, &queries, &keys, &scale});
      return;
    }
    CUdeviceptr o = scratch.pointer() + step.outOffset;
    CUdeviceptr delta = scratch.pointer() + step.deltaOffset;
    CUdeviceptr dO = address(step.dOut), dq = address(step.dq),
                dk = address(step.dk), dv = address(step.dv);
    kernelAt(step.forwardKernel)
        .launch(tiles, {&q, &k, &v, &o, &lse, &queries, &keys, &scale});
    long long rows = static_cast<long long>(slices) * step.queries;
    kernelAt(step.deltaKernel)
        .launch(LaunchConfig::linear(static_cast<unsigned>((rows + 3) / 4), 128),
                {&o, &dO, &delta, &rows});
    kernelAt(step.dqKernel)
        .launch(tiles, {&q, &k, &v, &dO, &lse, &delta, &dq, &queries, &keys,
                        &scale});
    LaunchConfig keyTiles = tiles;
    keyTiles.grid[0] = static_cast<unsigned>((step.keys + 31) / 32);
    kernelAt(step.dkdvKernel)
        .launch(keyTiles, {&q, &k, &v, &dO, &lse, &delta, &dk, &dv, &queries,
                           &keys, &scale});
  }

  void runGroupRange(FunctionState &f, size_t first, size_t last) {
    for (size_t g = first; g < last; ++g)
      for (size_t s = 0; s < f.program->groups[g].steps.size(); ++s)
        runStep(f, g, s);
  }

  /// Runs every segment of \p f: dynamic ones eagerly, the others through
  /// their graph.
  void runFunction(FunctionState &f, const cpu::RunOptions &run) {
    if (capturedSeed != run.seed || capturedTotalSteps != run.totalSteps) {
      // The graphs hold the old seed and total steps in their arguments.
      for (FunctionState *each : {&micro, &optimizer})
        for (Segment &segment : each->segments)
          segment.graph.reset();
      capturedSeed = run.seed;
      capturedTotalSteps = run.totalSteps;
    }
    bindScalars(f, run);
    f.replayed = 0;
    for (Segment &segment : f.segments) {
      if (segment.dynamic || !options.useGraphs) {
        runGroupRange(f, segment.first, segment.last);
        continue;
      }
      if (!segment.graph)
        segment.graph = std::make_unique<GraphCapture>(
            device,
            std::string(planFunctionName(f.which)) + " groups " +
                std::to_string(segment.first) + ".." +
                std::to_string(segment.last - 1));
      if (segment.graph->mode() == GraphCapture::Mode::Replaying)
        ++f.replayed;
      segment.graph->run(
          [&] { runGroupRange(f, segment.first, segment.last); });
    }
  }

  void runMicroStep(const cpu::RunOptions &run) {
    requireParameters();
    runFunction(micro, run);
    // The loss lives in the arena, which the next function overwrites:
    // keep a copy in this micro step's metrics slot.
    const uint64_t slot =
        run.step % static_cast<uint64_t>(plan.accumulationSteps);
    device.copyOnDeviceAsync(metrics + 8 * slot, address(plan.loss),
                             plan::dtypeBytes(plan.buffers[plan.loss].dtype));
    microStepsSinceOptimizer =
        std::min<uint64_t>(microStepsSinceOptimizer + 1,
                           static_cast<uint64_t>(plan.accumulationSteps));
    lastMicroSlot = slot;
    if (run.injectNonFinite &&
        plan.lossScaling.mode != plan::LossScaleMode::None) {
      static const float one = 1.0f;
      device.copyToDeviceAsync(address(plan.lossScaling.foundNonFinite), &one,
                               4);
    }
  }

  void runOptimizerStep(const cpu::RunOptions &run) {
    requireParameters();
    const uint64_t base = 8 * static_cast<uint64_t>(plan.accumulationSteps);
    const bool scaling = plan.lossScaling.mode != plan::LossScaleMode::None;
    if (scaling) {
      device.copyOnDeviceAsync(metrics + base + 16,
                               address(plan.lossScaling.scale), 4);
      device.copyOnDeviceAsync(metrics + base + 24,
                               address(plan.lossScaling.appliedSteps), 4);
      device.copyOnDeviceAsync(metrics + base + 32,
                               address(plan.lossScaling.floorHits), 4);
    }
    runFunction(optimizer, run);
    device.copyOnDeviceAsync(metrics + base, address(plan.gradNorm),
                             plan::dtypeBytes(plan.buffers[plan.gradNorm].dtype));
    device.copyOnDeviceAsync(
        metrics + base + 8, address(plan.learningRate),
        plan::dtypeBytes(plan.buffers[plan.learningRate].dtype));
    ++optimizerSteps;
    lossesForMean = microStepsSinceOptimizer;
    microStepsSinceOptimizer = 0;
  }

  /// One scalar of \p dtype at \p bytes.
  static double scalarAt(const uint8_t *bytes, plan::DType dtype) {
    std::vector<uint8_t> copy(bytes, bytes + plan::dtypeBytes(dtype));
    return decodeValues(copy, dtype, 1)[0];
  }

  StepMetrics readMetrics() {
    const size_t recordBytes = 2 * sizeof(plan::DeviceErrorRecord);
    const uint64_t metricBytes = metricsBytes(plan);
    uint8_t *host = static_cast<uint8_t *>(pinnedMetrics.data());
    device.copyToHostAsync(host, metrics, metricBytes);
    device.copyToHostAsync(host + metricBytes, microRecord, recordBytes);
    const bool scaling = plan.lossScaling.mode != plan::LossScaleMode::None;
    uint8_t *state = host + metricBytes + recordBytes;
    if (scaling) {
      device.copyToHostAsync(state, address(plan.lossScaling.scale), 4);
      device.copyToHostAsync(state + 4, address(plan.lossScaling.appliedSteps),
                             4);
      device.copyToHostAsync(state + 8, address(plan.lossScaling.floorHits), 4);
    }
    device.synchronize("running the training step on the GPU");
    // Errors the kernels recorded, micro step first.
    for (int which = 0; which < 2; ++which) {
      plan::DeviceErrorRecord record;
      std::memcpy(&record, host + metricBytes + which * sizeof(record),
                  sizeof(record));
      if (record.code != 0) {
        device.memsetAsync(microRecord, 0, recordBytes);
        throw cpu::ExecutionError(
            plan::describeDeviceError(plan, which == 1, record));
      }
    }
    StepMetrics result;
    const plan::DType lossType = plan.buffers[plan.loss].dtype;
    const uint64_t losses = lossesForMean ? lossesForMean : 1;
    double sum = 0;
    if (lossesForMean) {
      for (uint64_t i = 0; i < losses; ++i)
        sum += scalarAt(host + 8 * i, lossType);
    } else {
      sum = scalarAt(host + 8 * lastMicroSlot, lossType);
    }
    result.loss = sum / static_cast<double>(losses);
    const uint64_t base = 8 * static_cast<uint64_t>(plan.accumulationSteps);
    result.gradNorm =
        scalarAt(host + base, plan.buffers[plan.gradNorm].dtype);
    result.learningRate =
        scalarAt(host + base + 8, plan.buffers[plan.learningRate].dtype);
    if (scaling) {
      float scaleBefore, appliedBefore, floorBefore, scale, applied, floor;
      std::memcpy(&scaleBefore, host + base + 16, 4);
      std::memcpy(&appliedBefore, host + base + 24, 4);
      std::memcpy(&floorBefore, host + base + 32, 4);
      std::memcpy(&scale, state, 4);
      std::memcpy(&applied, state + 4, 4);
      std::memcpy(&floor, state + 8, 4);
      result.scaleBefore = scaleBefore;
      result.lossScale.enabled = true;
      result.lossScale.scale = scale;
      result.lossScale.lastStepSkipped =
          optimizerSteps > 0 && applied == appliedBefore;
      result.lossScale.floorReachedNow = floorBefore == 0 && floor > 0;
      result.lossScale.skippedSteps =
          static_cast<int64_t>(optimizerSteps) - static_cast<int64_t>(applied);
    }
    return result;
  }

  //===--------------------------------------------------------------------===//
  // Host data
  //===--------------------------------------------------------------------===//

  void requireParameters() const {
    if (!parametersSet)
      throw cpu::ExecutionError("the parameters are not initialised: call "
                                "initializeParameters first");
  }

  void upload(uint32_t buffer, const std::vector<double> &values) {
    const std::vector<uint8_t> bytes =
        encodeValues(values, plan.buffers[buffer].dtype);
    device.copyToDevice(address(buffer), bytes.data(), bytes.size());
  }

  void initializeParameters(uint64_t seed) {
    // The CPU backend's initializer, run on the host, is the definition.
    cpu::Executor host(plan, cpu::Precision::F32);
    host.initializeParameters(seed);
    for (const plan::Parameter &parameter : plan.parameters)
      upload(parameter.buffer, host.bufferValues(parameter.buffer));
    for (const plan::ParameterCopy &copy : plan.parameterCopies)
      upload(copy.buffer, host.bufferValues(copy.buffer));
    parametersSet = true;
  }

  void randomizeInputs(uint64_t seed) {
    for (const plan::Input &input : plan.inputs)
      if (plan::isIntegerDType(plan.buffers[input.buffer].dtype) &&
          input.bound == 0)
        throw cpu::ExecutionError(
            "input '" + input.name +
            "' is an integer input without a bound, so it cannot be "
            "randomized: supply its data with setInput");
    // The CPU backend's formulas (docs/plan-format.md, "Random numbers").
    for (const plan::Input &input : plan.inputs) {
      const plan::Buffer &buffer = plan.buffers[input.buffer];
      const int64_t count = plan::numElements(buffer);
      const uint32_t stream =
          numerics::fnv1a32(input.name.data(), input.name.size()) ^ 0x9e3779b9u;
      std::vector<double> values(static_cast<size_t>(count));
      for (int64_t e = 0; e < count; ++e) {
        if (plan::isIntegerDType(buffer.dtype)) {
          const numerics::PhiloxBlock out =
              numerics::philoxForElement(seed, 0, stream, e);
          const uint64_t bits =
              (static_cast<uint64_t>(out.word[1]) << 32) | out.word[0];
          values[e] = static_cast<double>(
              bits % static_cast<uint64_t>(input.bound));
        } else {
          // As the CPU backend: f32 inputs hold the float nearest the
          // sample, bf16/f16 inputs round the double once.
          const double z = numerics::standardNormal(seed, 0, stream, e);
          values[e] = buffer.dtype == plan::DType::F32
                          ? static_cast<double>(static_cast<float>(z))
                      : buffer.dtype == plan::DType::BF16
                          ? numerics::roundToBF16(z)
                          : numerics::roundToF16(z);
        }
      }
      upload(input.buffer, values);
    }
  }

  void setInput(const std::string &name, const void *data, size_t bytes) {
    const plan::Input *found = nullptr;
    for (const plan::Input &input : plan.inputs)
      if (input.name == name)
        found = &input;
    if (!found)
      throw cpu::ExecutionError("setInput: the plan has no input named '" +
                                name + "'");
    const plan::Buffer &buffer = plan.buffers[found->buffer];
    const size_t expected = bufferBytes(buffer);
    if (bytes != expected)
      throw cpu::ExecutionError(
          "setInput: input '" + name + "' (" + plan::dtypeName(buffer.dtype) +
          " " + plan::shapeToString(buffer.shape) + ") needs " +
          std::to_string(expected) + " bytes, got " + std::to_string(bytes));
    if (found->bound > 0 && plan::isIntegerDType(buffer.dtype)) {
      const std::vector<uint8_t> raw(static_cast<const uint8_t *>(data),
                                     static_cast<const uint8_t *>(data) + bytes);
      const std::vector<double> values =
          decodeValues(raw, buffer.dtype, static_cast<size_t>(plan::numElements(buffer)));
      for (size_t i = 0; i < values.size(); ++i)
        if (values[i] < 0 || values[i] >= static_cast<double>(found->bound))
          throw cpu::ExecutionError(
              "setInput: input '" + name + "' has value " +
              std::to_string(static_cast<int64_t>(values[i])) + " at index " +
              std::to_string(i) + ", outside its range [0, " +
              std::to_string(found->bound) + ")");
    }
    // Pageable memory: the call returns once the bytes are staged.
    device.copyToDeviceAsync(address(found->buffer), data, bytes);
  }

  void resetState() {
    for (uint32_t id = 0; id < plan.buffers.size(); ++id)
      if (plan.buffers[id].role == plan::BufferRole::State)
        device.memsetAsync(address(id), 0, bufferBytes(plan.buffers[id]));
    if (plan.lossScaling.mode != plan::LossScaleMode::None)
      device.copyToDeviceAsync(address(plan.lossScaling.scale),
                               &plan.lossScaling.initialScale, 4);
    optimizerSteps = 0;
  }

  void runGroups(PlanFunction which, size_t first, size_t last,
                 const cpu::RunOptions &run) {
    FunctionState &f = which == PlanFunction::MicroStep ? micro : optimizer;
    if (first > last || last > f.program->groups.size())
      throw CudaError(CudaErrorKind::InvalidArgument,
                      "runGroups: groups [" + std::to_string(first) + ", " +
                          std::to_string(last) + ") are outside the " +
                          std::to_string(f.program->groups.size()) +
                          " groups of " + planFunctionName(which));
    bindScalars(f, run);
    runGroupRange(f, first, last);
  }

  std::vector<double> bufferValues(uint32_t buffer) {
    if (buffer >= plan.buffers.size() || !addresses.buffers[buffer])
      throw CudaError(CudaErrorKind::InvalidArgument,
                      "buffer " + std::to_string(buffer) +
                          " has no device memory (a value fused into a kernel)");
    const plan::Buffer &b = plan.buffers[buffer];
    std::vector<uint8_t> bytes(bufferBytes(b));
    device.copyToHost(bytes.data(), address(buffer), bytes.size());
    return decodeValues(bytes, b.dtype,
                        static_cast<size_t>(plan::numElements(b)));
  }

  void setBufferValues(uint32_t buffer, const std::vector<double> &values) {
    if (buffer >= plan.buffers.size() || !addresses.buffers[buffer] ||
        values.size() != static_cast<size_t>(plan::numElements(plan.buffers[buffer])))
      throw CudaError(CudaErrorKind::InvalidArgument,
                      "setBufferValues: buffer " + std::to_string(buffer) +
                          " has no device memory or another element count");
    upload(buffer, values);
  }

  const plan::Plan plan;
  Device &device;
  ExecutorOptions options;
  AddressMap addresses;
  std::unique_ptr<PersistentPool> pool;
  std::unique_ptr<DeviceArena> arena;
  DeviceAllocation scratch;
  CUdeviceptr microRecord = 0, optimizerRecord = 0, metrics = 0;
  PinnedHostBuffer pinnedMetrics;
  std::unique_ptr<Matmul> matmul;
  std::vector<std::unique_ptr<Module>> modules;
  FunctionState micro, optimizer;
  bool parametersSet = false;
  uint64_t capturedSeed = ~0ull, capturedTotalSteps = ~0ull;
  uint64_t optimizerSteps = 0;
  uint64_t microStepsSinceOptimizer = 0, lossesForMean = 0, lastMicroSlot = 0;
};

Executor::Executor(const plan::Plan &plan, Device &device,
                   const ExecutorOptions &options)
    : impl(std::make_unique<Impl>(plan, device, options)) {}
Executor::~Executor() = default;

void Executor::initializeParameters(uint64_t seed) {
  impl->initializeParameters(seed);
}
void Executor::randomizeInputs(uint64_t seed) { impl->randomizeInputs(seed); }
void Executor::setInput(const std::string &name, const void *data,
                        size_t bytes) {
  impl->setInput(name, data, bytes);
}
void Executor::resetState() { impl->resetState(); }
void Executor::runMicroStep(const cpu::RunOptions &options) {
  impl->runMicroStep(options);
}
void Executor::runOptimizerStep(const cpu::RunOptions &options) {
  impl->runOptimizerStep(options);
}
StepMetrics Executor::readMetrics() { return impl->readMetrics(); }
void Executor::runGroups(PlanFunction function, size_t first, size_t last,
                         const cpu::RunOptions &options) {
  impl->runGroups(function, first, last, options);
}
std::vector<double> Executor::bufferValues(uint32_t buffer) {
  return impl->bufferValues(buffer);
}
void Executor::setBufferValues(uint32_t buffer,
                               const std::vector<double> &values) {
  impl->setBufferValues(buffer, values);
}
bool Executor::hasStorage(uint32_t buffer) const {
  return buffer < impl->addresses.buffers.size() &&
         impl->addresses.buffers[buffer] != 0;
}
const plan::Plan &Executor::plan() const { return impl->plan; }
Device &Executor::device() const { return impl->device; }
std::vector<std::string> Executor::moduleChoices() const {
  std::vector<std::string> choices;
  for (const auto &module : impl->modules)
    choices.push_back(module->name() + ": " + module->loadedBinary().reason);
  return choices;
}
size_t Executor::replayedSegments(PlanFunction function) const {
  return function == PlanFunction::MicroStep ? impl->micro.replayed
                                             : impl->optimizer.replayed;
}

} // namespace ampc::cuda
