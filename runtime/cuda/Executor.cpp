//===- Executor.cpp - The CUDA backend: a plan's device program on one GPU ===//
//
// See Executor.h for what runs where and why. This file builds an Executor:
// the device memory a plan needs (deviceMemoryNeeds, the out-of-memory check
// and the allocation of the pool, arena and scratch), the table arguments'
// device arrays, module loading, and the preparation of each function's
// launches and graph segments; then the public Executor methods, which
// forward to the Impl. Running steps is in ExecutorRun.cpp; choosing and
// running the attention steps in ExecutorAttention.cpp; metrics, host data
// and the test hooks in ExecutorHostData.cpp.
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/Executor.h"
#include "runtime/cuda/ExecutorState.h"

#include <algorithm>
#include <cstring>

namespace ampc::cuda {

const char *planFunctionName(PlanFunction function) {
  return function == PlanFunction::MicroStep ? "micro_step" : "optimizer_step";
}

namespace {

bool isPersistent(plan::BufferRole role) { return role != plan::BufferRole::Temporary; }

/// Bytes of one table argument's device array.
uint64_t tableBytes(const plan::DeviceTable &table) {
  return table.entries.size() * (table.kind == plan::TableKind::Optimizer ? 88u : 24u);
}

template <typename F> void forEachLaunch(const plan::DeviceFunction &f, F fn) {
  for (const plan::DeviceGroup &group : f.groups)
    for (const plan::DeviceStep &step : group.steps)
      if (const auto *launch = std::get_if<plan::LaunchStep>(&step))
        fn(*launch);
}

void putU64(std::vector<uint8_t> &bytes, size_t offset, uint64_t value) {
  std::memcpy(bytes.data() + offset, &value, 8);
}

} // namespace

uint64_t bufferBytes(const plan::Buffer &buffer) {
  return static_cast<uint64_t>(plan::numElements(buffer)) * plan::dtypeBytes(buffer.dtype);
}

uint64_t metricsBytes(const plan::Plan &plan) {
  return 8 * (static_cast<uint64_t>(plan.accumulationSteps) + 5);
}

PoolLayout layoutPool(const plan::Plan &plan) {
  // The one order of the pool: persistent buffers by id, then each
  // function's table arrays in launch order, then the two error records,
  // then the metrics block, then the run scalars. deviceMemoryNeeds and the executor's allocation
  // both read this layout, so they cannot disagree.
  PoolLayout pool;
  BumpLayout layout;
  pool.buffers.assign(plan.buffers.size(), PoolLayout::kNotInPool);
  for (uint32_t id = 0; id < plan.buffers.size(); ++id)
    if (isPersistent(plan.buffers[id].role))
      pool.buffers[id] =
          layout.reserve(bufferBytes(plan.buffers[id]), "buffer '" + plan.buffers[id].name + "'");
  auto tables = [&](const plan::DeviceFunction &f, std::vector<uint64_t> &offsets) {
    forEachLaunch(f, [&](const plan::LaunchStep &launch) {
      for (const plan::DeviceArgument &argument : launch.args)
        if (argument.kind == plan::ArgKind::Table)
          offsets.push_back(layout.reserve(tableBytes(argument.table), "a table"));
    });
  };
  tables(plan.device.microStep, pool.microTables);
  tables(plan.device.optimizerStep, pool.optimizerTables);
  pool.errorRecords = layout.reserve(2 * sizeof(plan::DeviceErrorRecord), "error records");
  pool.metrics = layout.reserve(metricsBytes(plan), "metrics");
  pool.runScalars = layout.reserve(sizeof(plan::RunScalarBlock), "run scalars");
  pool.bytes = layout.used();
  return pool;
}

DeviceMemoryNeeds deviceMemoryNeeds(const plan::Plan &plan) {
  DeviceMemoryNeeds needs;
  needs.persistent = layoutPool(plan).bytes;
  needs.arena =
      alignUp(std::max(plan.device.microStep.arenaBytes, plan.device.optimizerStep.arenaBytes));
  needs.scratch =
      alignUp(std::max(plan.device.microStep.scratchBytes, plan.device.optimizerStep.scratchBytes));
  needs.workspace = Matmul::kWorkspaceBytes;
  return needs;
}

std::vector<uint8_t> encodeTable(const plan::Plan &plan, const plan::DeviceTable &table,
                                 const std::vector<uint64_t> &buffers) {
  std::vector<uint8_t> bytes(tableBytes(table), 0);
  auto pointer = [&](uint32_t id) -> uint64_t { return id == kNoBuffer ? 0 : buffers.at(id); };
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
    const float floats[6] = {entry.beta1,       entry.beta2,    entry.eps,
                             entry.weightDecay, entry.clipNorm, entry.momentum};
    std::memcpy(bytes.data() + at + 64, floats, sizeof(floats));
  }
  return bytes;
}

//===----------------------------------------------------------------------===//
// Construction, memory and modules
//===----------------------------------------------------------------------===//

Executor::Impl::Impl(const plan::Plan &source, Device &device, const ExecutorOptions &options)
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
  // Before anything is uploaded: timing the matmuls' algorithms writes their outputs.
  chooseMatmulAlgorithms();
  // The same for attention: cuDNN's or ours, each timed on the steps' buffers.
  chooseAttention();
  for (const plan::Constant &constant : plan.constants) {
    if (!plan::isSplat(plan, constant)) {
      device.copyToDevice(addresses.buffers[constant.buffer], constant.bytes.data(),
                          constant.bytes.size());
      continue;
    }
    // A splat: its element repeated, uploaded a chunk of up to 1 MiB at a time.
    const size_t total = plan::numElements(plan.buffers[constant.buffer]) * constant.bytes.size();
    std::vector<uint8_t> chunk;
    while (chunk.size() < std::min<size_t>(total, size_t(1) << 20))
      chunk.insert(chunk.end(), constant.bytes.begin(), constant.bytes.end());
    for (size_t at = 0; at < total; at += chunk.size())
      device.copyToDevice(addresses.buffers[constant.buffer] + at, chunk.data(),
                          std::min(chunk.size(), total - at));
  }
  device.memsetAsync(microRecord, 0, 2 * sizeof(plan::DeviceErrorRecord));
  device.memsetAsync(metrics, 0, metricsBytes(plan));
  resetState();
  device.synchronize("uploading the plan's constants and tables");
}

/// Throws OutOfMemory, before allocating anything, when the plan cannot
/// fit in the GPU's free memory.
void Executor::Impl::checkMemory() {
  const DeviceMemoryNeeds needs = deviceMemoryNeeds(plan);
  const MemoryInfo memory = device.memoryInfo();
  if (needs.total() <= memory.freeBytes)
    return;
  const DeviceInfo &info = device.info();
  throw CudaError(CudaErrorKind::OutOfMemory,
                  outOfMemoryMessage("@" + plan.modelName + " (persistent buffers " +
                                         formatBytes(needs.persistent) + ", arena " +
                                         formatBytes(needs.arena) + ", scratch " +
                                         formatBytes(needs.scratch) + ", matmul workspace " +
                                         formatBytes(needs.workspace) + ")",
                                     needs.total(), memory.freeBytes, memory.totalBytes,
                                     device.allocatedBytes(), info.index, info.name));
}

void Executor::Impl::allocate() {
  const DeviceMemoryNeeds needs = deviceMemoryNeeds(plan);
  poolLayout = layoutPool(plan);
  if (poolLayout.bytes)
    pool = device.allocate(poolLayout.bytes, "the persistent buffers");
  const CUdeviceptr base = pool.pointer();
  addresses.buffers.assign(plan.buffers.size(), 0);
  for (uint32_t id = 0; id < plan.buffers.size(); ++id)
    if (poolLayout.buffers[id] != PoolLayout::kNotInPool)
      addresses.buffers[id] = base + poolLayout.buffers[id];
  if (needs.arena)
    arena = std::make_unique<DeviceArena>(device, needs.arena, "the step arena");
  if (needs.scratch)
    scratch = device.allocate(needs.scratch, "the scratch region");
  addresses.scratch = scratch.pointer();
  for (const plan::DeviceFunction *f : {&plan.device.microStep, &plan.device.optimizerStep}) {
    for (const plan::ArenaPlacement &placement : f->placements)
      addresses.buffers[placement.buffer] =
          arena->at(placement.offset, bufferBytes(plan.buffers[placement.buffer]));
    for (const plan::BufferView &view : f->views)
      addresses.buffers[view.buffer] = addresses.buffers[view.source];
  }
  microRecord = base + poolLayout.errorRecords;
  optimizerRecord = microRecord + sizeof(plan::DeviceErrorRecord);
  metrics = base + poolLayout.metrics;
  runScalars = base + poolLayout.runScalars;
  addresses.runScalars = runScalars;
  pinnedMetrics = device.allocatePinned(
      metricsBytes(plan) + 2 * sizeof(plan::DeviceErrorRecord) + 64, "the metrics read-back");
  allocateStaging();
  matmul = std::make_unique<Matmul>(device);
}

void Executor::Impl::loadModules() {
  ModuleOptions moduleOptions;
  moduleOptions.forcePtx = options.forcePtx;
  for (const plan::DeviceModule &source : plan.device.modules) {
    KernelBinaries binaries;
    if (!source.cubinSm80.empty())
      binaries.cubins.push_back(
          {80, std::vector<char>(source.cubinSm80.begin(), source.cubinSm80.end())});
    if (!source.cubinSm90.empty())
      binaries.cubins.push_back(
          {90, std::vector<char>(source.cubinSm90.begin(), source.cubinSm90.end())});
    binaries.ptx = source.ptx;
    modules.push_back(std::make_unique<Module>(device, binaries, source.name, moduleOptions));
  }
}

/// Resolves every launch of \p f, uploads its tables and cuts it into
/// segments (one, unless data parallelism cuts the micro step).
void Executor::Impl::prepare(FunctionState &f) {
  AddressMap map = addresses;
  map.errorRecord = f.errorRecord;
  // Tables, in the order the launches name them, where the pool's layout
  // put them.
  const std::vector<uint64_t> &offsets =
      f.which == PlanFunction::MicroStep ? poolLayout.microTables : poolLayout.optimizerTables;
  forEachLaunch(*f.program, [&](const plan::LaunchStep &launch) {
    for (const plan::DeviceArgument &argument : launch.args)
      if (argument.kind == plan::ArgKind::Table) {
        const std::vector<uint8_t> bytes = encodeTable(plan, argument.table, addresses.buffers);
        const CUdeviceptr table = pool.pointer() + offsets.at(map.tables.size());
        if (!bytes.empty())
          device.copyToDevice(table, bytes.data(), bytes.size());
        map.tables.push_back(table);
      }
  });
  size_t nextTable = 0;
  const auto &groups = f.program->groups;
  f.launches.resize(groups.size());
  for (size_t g = 0; g < groups.size(); ++g) {
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
      for (ResolvedArgument &argument : prepared->arguments)
        prepared->pointers.push_back(&argument.value);
      for (const plan::DeviceArgument &argument : launch->args)
        f.readsRunScalars |= argument.kind == plan::ArgKind::RunScalars;
      f.launches[g].push_back(std::move(prepared));
    }
    // The groups share one captured segment, up to a cut (data parallel:
    // a gradient bucket is final after the group before, and the observer
    // queues its reduction between the segments).
    const std::vector<size_t> &cuts = options.microStepCutsAfter;
    const bool cut = f.which == PlanFunction::MicroStep && g > 0 &&
                     std::find(cuts.begin(), cuts.end(), g - 1) != cuts.end();
    if (cut || f.segments.empty()) {
      Segment segment;
      segment.first = g;
      f.segments.push_back(std::move(segment));
    }
    f.segments.back().last = g + 1;
  }
}

//===----------------------------------------------------------------------===//
// Executor
//===----------------------------------------------------------------------===//

Executor::Executor(const plan::Plan &plan, Device &device, const ExecutorOptions &options)
    : impl(std::make_unique<Impl>(plan, device, options)) {}
Executor::~Executor() = default;

void Executor::initializeParameters(uint64_t seed) { impl->initializeParameters(seed); }
void Executor::randomizeInputs(uint64_t seed) { impl->randomizeInputs(seed); }
void Executor::setInput(const std::string &name, const void *data, size_t bytes) {
  impl->setInput(name, data, bytes);
}
void Executor::resetState() { impl->resetState(); }
void Executor::runMicroStep(const cpu::RunOptions &options) { impl->runMicroStep(options); }
void Executor::runOptimizerStep(const cpu::RunOptions &options) { impl->runOptimizerStep(options); }
StepMetrics Executor::readMetrics() { return impl->readMetrics(); }
void Executor::runGroups(PlanFunction function, size_t first, size_t last,
                         const cpu::RunOptions &options) {
  impl->runGroups(function, first, last, options);
}
std::vector<double> Executor::bufferValues(uint32_t buffer) { return impl->bufferValues(buffer); }
void Executor::setBufferValues(uint32_t buffer, const std::vector<double> &values) {
  impl->setBufferValues(buffer, values);
}
uint64_t Executor::deviceAddress(uint32_t buffer) const {
  return buffer < impl->addresses.buffers.size() ? impl->addresses.buffers[buffer] : 0;
}
void Executor::setMicroStepObserver(std::function<void(size_t)> observer) {
  impl->microObserver = std::move(observer);
}
bool Executor::hasStorage(uint32_t buffer) const {
  return buffer < impl->addresses.buffers.size() && impl->addresses.buffers[buffer] != 0;
}
const plan::Plan &Executor::plan() const { return impl->plan; }
Device &Executor::device() const { return impl->device; }
std::vector<std::string> Executor::moduleChoices() const {
  std::vector<std::string> choices;
  for (const auto &module : impl->modules)
    choices.push_back(module->name() + ": " + module->loadedBinary().reason);
  return choices;
}
void Executor::setProfiling(bool on) { impl->profiling = on; }
std::vector<GroupTime> Executor::groupTimes() const {
  std::vector<GroupTime> times;
  for (const FunctionState *f : {&impl->micro, &impl->optimizer})
    for (size_t g = 0; g < f->groupMilliseconds.size(); ++g) {
      GroupTime time;
      time.function = f->which;
      time.group = g;
      time.milliseconds = f->groupMilliseconds[g];
      time.runs = f->profiledRuns;
      times.push_back(time);
    }
  return times;
}
DeviceMemoryUse Executor::memoryUse() const {
  DeviceMemoryUse use;
  use.planned = deviceMemoryNeeds(impl->plan).total();
  use.allocated = impl->device.allocatedBytes();
  const MemoryInfo info = impl->device.memoryInfo();
  use.deviceTotal = info.totalBytes;
  use.deviceUsed = info.totalBytes - info.freeBytes;
  return use;
}
std::vector<MatmulChoice> Executor::matmulChoices() const { return impl->matmul->choices(); }

std::vector<AttentionChoice> Executor::attentionChoices() const {
  return impl->attentionChoices;
}
size_t Executor::replayedSegments(PlanFunction function) const {
  return function == PlanFunction::MicroStep ? impl->micro.replayed : impl->optimizer.replayed;
}

} // namespace ampc::cuda
