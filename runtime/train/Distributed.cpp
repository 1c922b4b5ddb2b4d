//===- Distributed.cpp - Data-parallel training across ranks --------------===//

#include "runtime/train/Distributed.h"
#include "runtime/plan/PlanAttrs.h"
#include "runtime/train/Sharding.h"

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>

namespace ampc::train {

OptimizerLayout optimizerLayout(const plan::Plan &plan) {
  OptimizerLayout layout;
  for (const plan::Instruction &instruction : plan.optimizerInstructions) {
    // adamw (param, grad, m, v, ...), sgd (param, grad, momentum, ...).
    const bool adamw = instruction.op == plan::OpCode::AdamW;
    if (!adamw && instruction.op != plan::OpCode::Sgd)
      continue;
    OptimizerLayout::Entry entry;
    entry.parameter = instruction.operands[0];
    entry.accumulator = instruction.operands[1];
    entry.moments.push_back(instruction.operands[2]);
    if (adamw)
      entry.moments.push_back(instruction.operands[3]);
    entry.offset = layout.elements;
    entry.elements = static_cast<size_t>(plan::numElements(plan.buffers[entry.parameter]));
    layout.elements += entry.elements;
    layout.entries.push_back(std::move(entry));
  }
  return layout;
}

std::vector<size_t> shardBounds(const OptimizerLayout &layout, int ranks) {
  std::vector<size_t> sizes;
  for (const OptimizerLayout::Entry &entry : layout.entries)
    sizes.push_back(entry.elements);
  return shardBoundsOf(sizes, ranks);
}

ShardedStateBytes shardedStateBytes(const plan::Plan &plan, int ranks) {
  ShardedStateBytes bytes;
  for (const plan::Buffer &buffer : plan.buffers)
    if (buffer.role == plan::BufferRole::Parameter ||
        buffer.role == plan::BufferRole::ParameterCopy)
      bytes.weights +=
          static_cast<uint64_t>(plan::numElements(buffer)) * plan::dtypeBytes(buffer.dtype);
  std::vector<size_t> sizes, moments;
  for (const OptimizerLayout::Entry &entry : optimizerLayout(plan).entries) {
    sizes.push_back(entry.elements);
    moments.push_back(entry.elements * 4 * entry.moments.size());
    bytes.accumulators += entry.elements * 4;
    bytes.moments += moments.back();
  }
  bytes.shardedMoments = largestShare(sizes, moments, ranks);
  return bytes;
}

//===----------------------------------------------------------------------===//
// DataParallel
//===----------------------------------------------------------------------===//

namespace {

/// "1.2 MB" (decimal units).
std::string bytesText(uint64_t bytes) {
  char text[32];
  if (bytes >= 1000000000)
    std::snprintf(text, sizeof(text), "%.2f GB", static_cast<double>(bytes) / 1e9);
  else if (bytes >= 1000000)
    std::snprintf(text, sizeof(text), "%.1f MB", static_cast<double>(bytes) / 1e6);
  else
    std::snprintf(text, sizeof(text), "%.1f kB", static_cast<double>(bytes) / 1e3);
  return text;
}

/// The divisors of \p value, as "1, 2 or 4".
std::string divisorsText(uint64_t value) {
  std::vector<uint64_t> divisors;
  for (uint64_t d = 1; d <= value && divisors.size() < 8; ++d)
    if (value % d == 0)
      divisors.push_back(d);
  std::string text;
  for (size_t i = 0; i < divisors.size(); ++i)
    text += (i == 0 ? "" : i + 1 == divisors.size() ? " or " : ", ") + std::to_string(divisors[i]);
  return text;
}

} // namespace

DataParallel::DataParallel(const plan::Plan &plan, std::unique_ptr<Communicator> communicator,
                           bool shardOptimizer)
    : plan(plan), communicator(std::move(communicator)), shard(shardOptimizer),
      layout(optimizerLayout(plan)) {
  const uint64_t ranks = static_cast<uint64_t>(size());
  const uint64_t accumulation = static_cast<uint64_t>(plan.accumulationSteps);
  if (accumulation % ranks != 0)
    sizeProblem =
        "the world size " + std::to_string(ranks) + " does not divide this plan's " +
        std::to_string(accumulation) + " accumulation step" + (accumulation == 1 ? "" : "s") +
        " (the global batch of an optimizer step is split across the ranks by micro-batches): "
        "run " +
        divisorsText(accumulation) + " ranks, or compile with --accum-steps a multiple of " +
        std::to_string(ranks);
  local = std::max<uint64_t>(1, accumulation / ranks);
  bounds = shardBounds(layout, size());
  for (const plan::Instruction &instruction : plan.instructions)
    if (instruction.op == plan::OpCode::UpdateRunningStats) {
      // Operands (mean, var[, count], x).
      RunningStats &stats = runningStats.emplace_back();
      stats.mean = instruction.operands[0];
      stats.var = instruction.operands[1];
      if (instruction.operands.size() == 4)
        stats.count = instruction.operands[2];
      stats.momentum = plan::get(instruction, plan::attr::momentum);
    }
  if (shard) {
    owned.assign(plan.buffers.size(), false);
    const size_t me = static_cast<size_t>(rank());
    for (const OptimizerLayout::Entry &entry : layout.entries)
      owned[entry.parameter] = entry.offset >= bounds[me] && entry.offset < bounds[me + 1];
  }
}

void DataParallel::checkWorldSize() const {
  if (!sizeProblem.empty())
    throw RunMismatchError(sizeProblem);
}

uint64_t DataParallel::globalMicroStep(uint64_t step, uint64_t i) const {
  return step * static_cast<uint64_t>(plan.accumulationSteps) +
         static_cast<uint64_t>(rank()) * local + i;
}

void DataParallel::checkSameRun(const std::map<std::string, std::string> &identity) {
  std::string text;
  for (const auto &[key, value] : identity)
    text += key + "=" + value + "\n";
  text += "shard_optimizer=" + std::string(shard ? "yes" : "no") + "\n";
  const std::vector<std::string> all = communicator->allGatherText(text, "the start-up check");
  for (size_t r = 1; r < all.size(); ++r) {
    if (all[r] == all[0])
      continue;
    // The first line that differs names the key.
    auto lines = [](const std::string &block) {
      std::vector<std::string> result;
      size_t begin = 0;
      for (size_t end; (end = block.find('\n', begin)) != std::string::npos; begin = end + 1)
        result.push_back(block.substr(begin, end - begin));
      return result;
    };
    const std::vector<std::string> ours = lines(all[0]), theirs = lines(all[r]);
    std::string key = "?", first = "?", other = "?";
    for (size_t i = 0; i < std::max(ours.size(), theirs.size()); ++i) {
      const std::string a = i < ours.size() ? ours[i] : "", b = i < theirs.size() ? theirs[i] : "";
      if (a == b)
        continue;
      const std::string &named = a.empty() ? b : a;
      key = named.substr(0, named.find('='));
      first = a.substr(a.find('=') + 1);
      other = b.substr(b.find('=') + 1);
      break;
    }
    if (key == "plan_hash")
      throw RunMismatchError("rank " + std::to_string(r) + " runs a plan with hash " + other +
                             ", rank 0 one with hash " + first +
                             ": every rank must run the same training executable");
    throw RunMismatchError("rank " + std::to_string(r) + " was started with " + key + " " + other +
                           ", rank 0 with " + first + ": every rank must get the same options");
  }
}

void DataParallel::checkRun(const RunnerOptions &options, TrainingBackend &backend,
                            const std::map<std::string, std::string> &identity) {
  for (const auto &aids : {options.injectOverflowOnRank, options.injectRankFailure,
                           options.injectRankHang, options.injectStop})
    for (const auto &[step, rank] : aids) {
      if (rank >= size())
        throw RunMismatchError("an --inject-* rank " + std::to_string(rank) +
                               " is not below the world size " + std::to_string(size()));
      if (step > options.steps)
        throw RunMismatchError("an --inject-* step " + std::to_string(step) +
                               " is beyond the last step (--steps " +
                               std::to_string(options.steps) + ")");
    }
  const std::string device = backend.device();
  if (device != "cpu" && shard)
    throw RunMismatchError("--shard-optimizer (ZeRO-1) runs on the CPU backend only: the GPU's "
                           "fused optimizer step updates every parameter; leave it out on GPUs");
  checkSameRun(identity);
  if (device == "cpu")
    return;
  deviceSync = dynamic_cast<DeviceGradientSync *>(&backend);
  if (!deviceSync)
    throw CommunicatorError("the " + device + " backend cannot exchange gradients between ranks");
  // Rank 0 draws the NCCL id; every rank takes it from the all-gather.
  const std::string id = rank() == 0 ? deviceSync->newExchangeId() : std::string();
  const std::vector<std::string> ids = communicator->allGatherText(id, "the NCCL id");
  deviceSync->joinExchange(ids[0], rank(), size(), local);
}

void DataParallel::injectFailures(const RunnerOptions &options, uint64_t step) {
  for (const auto &[at, rank] : options.injectRankFailure)
    if (at == step + 1 && rank == this->rank()) {
      std::fprintf(stderr, "%s: dying in step %llu as --inject-rank-failure asks\n",
                   communicator->label.c_str(), static_cast<unsigned long long>(at));
      std::fflush(stderr);
      std::raise(SIGKILL);
    }
  for (const auto &[at, rank] : options.injectRankHang)
    if (at == step + 1 && rank == this->rank()) {
      std::fprintf(stderr, "%s: hanging in step %llu as --inject-rank-hang asks\n",
                   communicator->label.c_str(), static_cast<unsigned long long>(at));
      std::fflush(stderr);
      std::raise(SIGSTOP);
    }
  for (const auto &[at, rank] : options.injectStop)
    if (at == step + 1 && rank == this->rank())
      std::raise(SIGTERM); // the runner's handler asks to stop after this step
}

void DataParallel::beginStep(TrainingBackend &backend) {
  for (RunningStats &stats : runningStats) {
    stats.startMean = backend.readBuffer(stats.mean);
    stats.startVar = backend.readBuffer(stats.var);
    if (stats.count != plan::kNoBuffer)
      stats.startCount = backend.readBuffer(stats.count);
  }
}

void DataParallel::combineRunningStats(TrainingBackend &backend, uint64_t step) {
  if (runningStats.empty() || size() == 1)
    return;
  // Every buffer's weighted difference, flat, summed over the ranks in one exchange.
  std::vector<float> flat;
  for (const RunningStats &stats : runningStats) {
    const double keep = 1 - stats.momentum;
    const double ownDecay = std::pow(keep, double(local));
    const double laterDecay = std::pow(keep, double(local) * double(size() - 1 - rank()));
    for (auto [buffer, start] : {std::pair{stats.mean, &stats.startMean},
                                 std::pair{stats.var, &stats.startVar}}) {
      const std::vector<double> now = backend.readBuffer(buffer);
      for (size_t i = 0; i < now.size(); ++i)
        flat.push_back(float(laterDecay * (now[i] - ownDecay * (*start)[i])));
    }
    if (stats.count != plan::kNoBuffer)
      flat.push_back(float(backend.readBuffer(stats.count)[0] - stats.startCount[0]));
  }
  communicator->allReduceSum(flat, "the running statistics of optimizer step " +
                                       std::to_string(step + 1));
  size_t at = 0;
  for (const RunningStats &stats : runningStats) {
    const double allDecay = std::pow(1 - stats.momentum, double(local) * double(size()));
    for (auto [buffer, start] : {std::pair{stats.mean, &stats.startMean},
                                 std::pair{stats.var, &stats.startVar}}) {
      std::vector<double> combined(start->size());
      for (size_t i = 0; i < combined.size(); ++i)
        combined[i] = allDecay * (*start)[i] + double(flat[at++]);
      backend.writeBuffer(buffer, combined);
    }
    if (stats.count != plan::kNoBuffer)
      backend.writeBuffer(stats.count, {stats.startCount[0] + double(flat[at++])});
  }
}

bool DataParallel::reduceGradients(TrainingBackend &backend, uint64_t step, bool stopRequested) {
  if (deviceSync) {
    // On GPUs the gradients and the overflow flag stay on the device
    // (NCCL); only the stop requests cross the host.
    bool stop = false;
    for (double value : communicator->allGatherDouble(
             stopRequested ? 1 : 0, "the stop flags of optimizer step " + std::to_string(step + 1)))
      stop = stop || value != 0;
    deviceSync->finishExchange();
    return stop;
  }
  // The flags first: [found non-finite, stop] per rank.
  const bool scaling = plan.lossScaling.mode != plan::LossScaleMode::None;
  double flags = stopRequested ? 2 : 0;
  if (scaling && backend.readBuffer(plan.lossScaling.foundNonFinite)[0] != 0)
    flags += 1;
  const std::string at = " of optimizer step " + std::to_string(step + 1);
  bool found = false, stop = false;
  for (double value : communicator->allGatherDouble(flags, "the overflow and stop flags" + at)) {
    found = found || std::fmod(value, 2) != 0;
    stop = stop || value >= 2;
  }
  if (scaling && found)
    backend.writeBuffer(plan.lossScaling.foundNonFinite, {1.0});

  std::vector<float> flat(layout.elements);
  for (const OptimizerLayout::Entry &entry : layout.entries) {
    const std::vector<double> values = backend.readBuffer(entry.accumulator);
    std::copy(values.begin(), values.end(), flat.begin() + entry.offset);
  }
  if (!shard) {
    communicator->allReduceSum(flat, "the gradients" + at);
    for (const OptimizerLayout::Entry &entry : layout.entries)
      backend.writeBuffer(entry.accumulator,
                          std::vector<double>(flat.begin() + entry.offset,
                                              flat.begin() + entry.offset + entry.elements));
    return stop;
  }
  communicator->reduceScatterSum(flat, bounds, "the gradients" + at);
  // This rank's shard holds the sums; the other accumulators are zeroed
  // (their owners zero theirs in the update).
  for (const OptimizerLayout::Entry &entry : layout.entries) {
    if (owned[entry.parameter])
      backend.writeBuffer(entry.accumulator,
                          std::vector<double>(flat.begin() + entry.offset,
                                              flat.begin() + entry.offset + entry.elements));
    else
      backend.writeBuffer(entry.accumulator, std::vector<double>(entry.elements, 0.0));
  }
  return stop;
}

void DataParallel::prepareOptimizerStep(cpu::RunOptions &options) {
  if (!shard)
    return;
  options.ownedParameters = &owned;
  options.combineSquares = [this](double squares) {
    double total = 0;
    for (double part : communicator->allGatherDouble(squares, "the gradient norm"))
      total += part;
    return total;
  };
}

double DataParallel::finishStep(TrainingBackend &backend, uint64_t step, double localLoss) {
  const std::string at = " of optimizer step " + std::to_string(step + 1);
  if (shard) {
    std::vector<float> flat(layout.elements, 0.0f);
    for (const OptimizerLayout::Entry &entry : layout.entries) {
      if (!owned[entry.parameter])
        continue;
      const std::vector<double> values = backend.readBuffer(entry.parameter);
      std::copy(values.begin(), values.end(), flat.begin() + entry.offset);
    }
    communicator->allGatherSegments(flat, bounds, "the updated weights" + at);
    for (const OptimizerLayout::Entry &entry : layout.entries)
      if (!owned[entry.parameter])
        backend.writeBuffer(entry.parameter,
                            std::vector<double>(flat.begin() + entry.offset,
                                                flat.begin() + entry.offset + entry.elements));
  }
  double total = 0;
  const std::vector<double> losses = communicator->allGatherDouble(localLoss, "the loss" + at);
  for (double loss : losses)
    total += loss;
  return total / static_cast<double>(losses.size());
}

void DataParallel::gatherOptimizerState(TrainingBackend &backend) {
  if (!shard)
    return;
  size_t slots = 0;
  for (const OptimizerLayout::Entry &entry : layout.entries)
    slots = std::max(slots, entry.moments.size());
  for (size_t slot = 0; slot < slots; ++slot) {
    std::vector<float> flat(layout.elements, 0.0f);
    for (const OptimizerLayout::Entry &entry : layout.entries) {
      if (!owned[entry.parameter] || slot >= entry.moments.size())
        continue;
      const std::vector<double> values = backend.readBuffer(entry.moments[slot]);
      std::copy(values.begin(), values.end(), flat.begin() + entry.offset);
    }
    communicator->allGatherSegments(flat, bounds, "the optimizer state for a checkpoint");
    for (const OptimizerLayout::Entry &entry : layout.entries)
      if (!owned[entry.parameter] && slot < entry.moments.size())
        backend.writeBuffer(entry.moments[slot],
                            std::vector<double>(flat.begin() + entry.offset,
                                                flat.begin() + entry.offset + entry.elements));
  }
}

std::string DataParallel::describe() const {
  std::string text = std::to_string(size()) + " rank" + (size() == 1 ? "" : "s") + " over " +
                     communicator->describe() + ", " + std::to_string(local) + " micro step" +
                     (local == 1 ? "" : "s") + " each";
  if (deviceSync)
    text += "; gradients over " + deviceSync->describeExchange();
  if (shard) {
    const ShardedStateBytes bytes = shardedStateBytes(plan, size());
    text += "; optimizer state sharded (ZeRO-1): " + bytesText(bytes.shardedMoments) +
            " per rank instead of " + bytesText(bytes.moments);
  }
  return text;
}

namespace {
ProcessLaunch thisProcess;
} // namespace

std::string checkSingleProcessOptions(const RunnerOptions &options) {
  if (!options.injectOverflowOnRank.empty() || !options.injectRankFailure.empty() ||
      !options.injectRankHang.empty() || !options.injectStop.empty())
    throw CommunicatorError("the STEP@RANK testing aids are for data parallel runs (mpirun, srun "
                            "or torchrun); this process was started alone");
  return options.shardOptimizer ? "--shard-optimizer has no effect on a single process: there "
                                  "are no other ranks to share the optimizer state with"
                                : "";
}

const ProcessLaunch &processLaunch() { return thisProcess; }

std::unique_ptr<DataParallel> startDataParallel(const plan::Plan &plan, bool shardOptimizer,
                                                double timeoutSeconds) {
  const LaunchInfo launch = detectLaunch([](const char *name) { return std::getenv(name); });
  thisProcess.dataParallel = launch.kind != LaunchInfo::Kind::Single;
  thisProcess.localRank = launch.localRank;
  switch (launch.kind) {
  case LaunchInfo::Kind::Single:
    return nullptr;
  case LaunchInfo::Kind::Environment: {
    // torchrun's agent holds MASTER_PORT for its own store: rank 0 listens
    // on the port after it then. AMPC_MASTER_PORT overrides both.
    int port = launch.masterPort;
    const char *agentStore = std::getenv("TORCHELASTIC_USE_AGENT_STORE");
    if (agentStore && std::string(agentStore) == "True")
      port += 1;
    if (const char *chosen = std::getenv("AMPC_MASTER_PORT"); chosen && *chosen)
      port = std::atoi(chosen);
    if (port <= 0 || port > 65535)
      throw CommunicatorError("the rendezvous port " + std::to_string(port) +
                              " is not a TCP port (MASTER_PORT, AMPC_MASTER_PORT)");
    return std::make_unique<DataParallel>(plan, makeTcpCommunicator(launch, port, timeoutSeconds),
                                          shardOptimizer);
  }
  case LaunchInfo::Kind::Mpi:
    break;
  }
  std::unique_ptr<Communicator> world = makeMpiCommunicator(timeoutSeconds);
  if (world->size() != launch.size)
    throw CommunicatorError("the launcher announced " + std::to_string(launch.size) + " ranks (" +
                            launch.source + ") but MPI started " + std::to_string(world->size()) +
                            ": is this Open MPI's mpirun?");
  return std::make_unique<DataParallel>(plan, std::move(world), shardOptimizer);
}

} // namespace ampc::train
