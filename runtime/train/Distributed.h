//===- Distributed.h - Data-parallel training across ranks ----------------===//
//
// Several copies of one training executable, one per rank, train one model
// as a single run would (docs/distributed.md). The plan fixes the global
// batch: an optimizer step is the plan's K accumulation steps of B examples.
// N ranks split those K micro-batches: rank r runs the K / N micro steps
// r * K / N ... (r + 1) * K / N - 1 of every optimizer step, reading the
// windows a single rank would read for those global micro-step indices (the
// data and dropout are pure functions of (seed, micro step)), so each rank
// reads a disjoint shard. The plan's accumulate already divides each
// micro-batch's loss by K, so summing the ranks' gradient accumulators gives
// the mean over the K micro-batches: the update of one rank running all K.
// N must divide K.
//
// Before each optimizer step the ranks
//   - sum their gradient accumulators, in rank order (Communicator), so the
//     bits do not depend on timing;
//   - OR their loss-scaling "found non-finite" flags (an overflow on any rank
//     skips the step on every rank) and their stop requests (SIGINT/SIGTERM
//     on any rank stops every rank after the same step);
// and after it they average the loss of their micro steps.
//
// With --shard-optimizer (ZeRO stage 1) the parameters are split, whole, into
// N contiguous groups of about equal size in the optimizer step's order; rank
// r owns group r: the gradient sum is a reduce-scatter (rank r receives only
// group r's sums), rank r alone updates group r's master weights and AdamW
// moments, the clipping norm is the sum of the ranks' squared norms, and the
// updated weights are all-gathered. Checkpoints hold the whole state (the
// shards are gathered first), so a checkpoint of N ranks resumes on any M
// that divides K.
//
// Running statistics (batch norms' mean, variance and count) are updated in
// place by every micro step: r <- (1 - m) r + m s_k. A rank sees only its own
// micro-batches, so after the optimizer step's micro steps the ranks combine
// theirs into what one process would hold after all K updates in order:
// with L = K / N micro steps a rank, starting from r0,
//   r_K = (1 - m)^K r0 + sum over ranks q of (1 - m)^((N - 1 - q) L) (r_q - (1 - m)^L r0)
// where r_q is rank q's value after its own L updates (an all-reduce of the
// weighted differences, in rank order); the count adds the ranks' increments.
//
//===----------------------------------------------------------------------===//

#ifndef AMPC_RUNTIME_TRAIN_DISTRIBUTED_H
#define AMPC_RUNTIME_TRAIN_DISTRIBUTED_H

#include "runtime/cpu/Executor.h"
#include "runtime/plan/Plan.h"
#include "runtime/train/Backend.h"
#include "runtime/train/Communicator.h"
#include "runtime/train/Runner.h"

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace ampc::train {

/// The parameters an optimizer step updates, in its order, with the state
/// buffers each update reads: the flat layout the ranks exchange.
struct OptimizerLayout {
  struct Entry {
    uint32_t parameter = 0;   ///< the f32 master weights
    uint32_t accumulator = 0; ///< the gradient accumulator (State)
    /// AdamW m and v, or SGD's momentum buffer (State).
    std::vector<uint32_t> moments;
    size_t offset = 0, elements = 0; ///< place in the flat layout
  };
  std::vector<Entry> entries;
  size_t elements = 0; ///< the total
};

/// The adamw/sgd instructions of \p plan's optimizer step as a layout.
OptimizerLayout optimizerLayout(const plan::Plan &plan);

/// ZeRO-1's split of \p layout over \p ranks: ranks + 1 element offsets at
/// entry boundaries, rank r owning [bounds[r], bounds[r + 1]); each boundary
/// is the first entry start at or after r / ranks of the elements.
std::vector<size_t> shardBounds(const OptimizerLayout &layout, int ranks);

/// Per-rank bytes of a plan's training state with and without ZeRO-1, for
/// `ampc report memory --world-size N` and the runner's start line.
struct ShardedStateBytes {
  uint64_t weights = 0;      ///< master weights + reduced-precision copies
  uint64_t accumulators = 0; ///< gradient accumulators
  uint64_t moments = 0;      ///< optimizer state, whole (no sharding)
  /// The largest rank's share of the optimizer state with ZeRO-1.
  uint64_t shardedMoments = 0;
};
ShardedStateBytes shardedStateBytes(const plan::Plan &plan, int ranks);

/// A backend that sums the ranks' gradients on its device: the CUDA backend
/// over NCCL (runtime/cuda/GradientExchange.h), in buckets as the backward
/// pass of the last micro step finishes them.
class DeviceGradientSync {
public:
  virtual ~DeviceGradientSync() = default;
  /// Rank 0's side: a new NCCL unique id (its 128 bytes).
  virtual std::string newExchangeId() = 0;
  /// Joins the exchange of \p ranks ranks as \p rank (blocks until all
  /// have); from then on every \p localMicroSteps-th micro step (the last of
  /// an optimizer step) issues the buckets as they become final.
  virtual void joinExchange(const std::string &id, int rank, int ranks,
                            uint64_t localMicroSteps) = 0;
  /// Before the optimizer step: queues the rest of the exchange and the
  /// overflow flag's maximum; does not wait for the GPU.
  virtual void finishExchange() = 0;
  /// "NCCL 2.27.3, 3 gradient buckets".
  virtual std::string describeExchange() const = 0;
};

/// How startDataParallel found this process launched, for the backends: a
/// data parallel rank trains on the GPU of its local rank.
struct ProcessLaunch {
  bool dataParallel = false;
  int localRank = 0;
};
const ProcessLaunch &processLaunch();

/// A data-parallel run, from one rank's side.
class DataParallel {
public:
  DataParallel(const plan::Plan &plan, std::unique_ptr<Communicator> communicator,
               bool shardOptimizer);

  /// Throws RunMismatchError, with the fix, unless the world size divides
  /// the plan's accumulation steps.
  void checkWorldSize() const;

  int rank() const { return communicator->rank(); }
  int size() const { return communicator->size(); }
  bool sharded() const { return shard; }
  Communicator &world() { return *communicator; }

  /// The micro steps this rank runs per optimizer step (K / N).
  uint64_t localMicroSteps() const { return local; }
  /// The global index of this rank's micro step \p i of optimizer step
  /// \p step: the micro step a single rank would run with the same data.
  uint64_t globalMicroStep(uint64_t step, uint64_t i) const;

  /// Start-up: every rank must run the same plan with the same options that
  /// change the numbers (\p identity: key -> value, the plan hash among
  /// them). Throws CommunicatorError naming the first key that differs and
  /// the ranks.
  void checkSameRun(const std::map<std::string, std::string> &identity);
  /// The runner's start-up checks: the testing aids' ranks and steps, the
  /// backend (a GPU backend joins its NCCL exchange here), then
  /// checkSameRun.
  void checkRun(const RunnerOptions &options, TrainingBackend &backend,
                const std::map<std::string, std::string> &identity);
  /// --inject-rank-failure / --inject-rank-hang: this rank dies (SIGKILL) or
  /// stops (SIGSTOP) at the start of optimizer step \p step when asked.
  void injectFailures(const RunnerOptions &options, uint64_t step);

  /// Before the optimizer step: sums the gradient accumulators (reduce-
  /// scatter with ZeRO-1, zeroing the ones this rank does not own), ORs the
  /// loss-scaling found flag and the stop requests. Returns true when any
  /// rank asked to stop after this step.
  bool reduceGradients(TrainingBackend &backend, uint64_t step, bool stopRequested);

  /// At the start of optimizer step \p step's micro steps: remembers the
  /// running statistics they start from (nothing without any).
  void beginStep(TrainingBackend &backend);
  /// After the micro steps: every rank's running statistics become what one
  /// process would hold after all K micro steps in order (see above).
  void combineRunningStats(TrainingBackend &backend, uint64_t step);

  /// What the CPU backend's optimizer step needs with ZeRO-1: the owned
  /// parameters and the sum of the squared norms over the ranks. No change
  /// without sharding.
  void prepareOptimizerStep(cpu::RunOptions &options);

  /// After the optimizer step: with ZeRO-1, all-gathers the updated weights.
  /// Returns the loss of the optimizer step over every rank's micro steps
  /// (the mean of the ranks' means, added in rank order).
  double finishStep(TrainingBackend &backend, uint64_t step, double localLoss);

  /// ZeRO-1, before a checkpoint: gathers every rank's optimizer state so
  /// this rank's backend holds all of it (no-op without sharding).
  void gatherOptimizerState(TrainingBackend &backend);

  /// "2 ranks over MPI (Open MPI 4.1.4), 2 micro steps each; optimizer
  /// state sharded (ZeRO-1): 1.2 MB per rank instead of 2.4 MB".
  std::string describe() const;

private:
  const plan::Plan &plan;
  std::unique_ptr<Communicator> communicator;
  bool shard;
  uint64_t local = 1;
  OptimizerLayout layout;
  std::vector<size_t> bounds;
  std::vector<bool> owned; ///< by buffer id: parameters this rank updates
  std::string sizeProblem; ///< checkWorldSize's message, "" when none
  /// A GPU backend's own gradient exchange (NCCL), or null.
  DeviceGradientSync *deviceSync = nullptr;
  /// The micro step's update_running_stats: its buffers (count kNoBuffer when
  /// there is none) and momentum, and their values at the step's start.
  struct RunningStats {
    uint32_t mean = 0, var = 0, count = plan::kNoBuffer;
    double momentum = 0;
    std::vector<double> startMean, startVar, startCount;
  };
  std::vector<RunningStats> runningStats;
};

/// Starts the data-parallel side of a run from the environment the launcher
/// set (detectLaunch): null for a single process started without a
/// launcher; a DataParallel over MPI for mpirun/srun launches; over TCP
/// through rank 0 for torchrun-style launches (rank 0 listens on
/// MASTER_PORT, or MASTER_PORT + 1 under torchrun, whose agent holds
/// MASTER_PORT; AMPC_MASTER_PORT overrides). On GPUs the gradients then move
/// over NCCL (DeviceGradientSync), the host exchange carrying only flags,
/// the loss and NCCL's id. \p timeoutSeconds bounds every wait for other
/// ranks.
std::unique_ptr<DataParallel> startDataParallel(const plan::Plan &plan, bool shardOptimizer,
                                                double timeoutSeconds);

/// A single process (no launcher) given data parallel options: throws
/// CommunicatorError for the per-rank testing aids, which need ranks; returns
/// a warning for --shard-optimizer, which has nothing to shard ("" if none).
std::string checkSingleProcessOptions(const RunnerOptions &options);

} // namespace ampc::train

#endif // AMPC_RUNTIME_TRAIN_DISTRIBUTED_H
