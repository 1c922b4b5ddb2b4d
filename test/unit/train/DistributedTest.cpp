//===- DistributedTest.cpp - Data parallel training without MPI -----------===//
//
// The launch detection, ZeRO-1's split, the deterministic reductions, and
// data parallel training itself: N ranks as N threads, each with its own CPU
// backend, exchanging through an in-process communicator, against one
// backend running every micro step. The same code runs over MPI in
// test/Integration/data-parallel*.test.
//
//===----------------------------------------------------------------------===//

#include "runtime/train/Distributed.h"
#include "runtime/plan/GradientBuckets.h"
#include "runtime/train/Communicator.h"
#include "runtime/train/Data.h"
#include "runtime/train/Sharding.h"
#include "test/unit/train/TrainTestUtils.h"

#include <gtest/gtest.h>

#include <cmath>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>

using namespace ampc;
using namespace ampc::train;

namespace {

//===----------------------------------------------------------------------===//
// An in-process world of N ranks (one thread each)
//===----------------------------------------------------------------------===//

/// What the ranks of one ThreadWorld share: a barrier and a slot per rank.
struct SharedBoard {
  explicit SharedBoard(int ranks) : ranks(ranks), slots(static_cast<size_t>(ranks)) {}
  void barrier() {
    std::unique_lock<std::mutex> lock(mutex);
    const uint64_t generation = this->generation;
    if (++arrived == ranks) {
      arrived = 0;
      ++this->generation;
      changed.notify_all();
      return;
    }
    changed.wait(lock, [&] { return this->generation != generation; });
  }
  int ranks;
  std::vector<std::string> slots;
  std::mutex mutex;
  std::condition_variable changed;
  int arrived = 0;
  uint64_t generation = 0;
};

class ThreadRank final : public Communicator {
public:
  ThreadRank(SharedBoard &board, int rank) : board(board), me(rank) {}
  int rank() const override { return me; }
  int size() const override { return board.ranks; }
  std::string describe() const override { return "threads"; }
  void allGather(const void *send, size_t bytes, void *receive, const std::string &) override {
    board.slots[me].assign(static_cast<const char *>(send), bytes);
    board.barrier();
    for (int r = 0; r < board.ranks; ++r)
      std::memcpy(static_cast<char *>(receive) + r * bytes, board.slots[r].data(), bytes);
    board.barrier();
  }
  void allToAll(const void *send, size_t bytes, void *receive, const std::string &) override {
    board.slots[me].assign(static_cast<const char *>(send), bytes * board.ranks);
    board.barrier();
    for (int r = 0; r < board.ranks; ++r)
      std::memcpy(static_cast<char *>(receive) + r * bytes, board.slots[r].data() + me * bytes,
                  bytes);
    board.barrier();
  }

private:
  SharedBoard &board;
  int me;
};

/// Runs \p body(rank, communicator) on \p ranks threads.
template <typename Body> void onRanks(int ranks, Body body) {
  SharedBoard board(ranks);
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r)
    threads.emplace_back([&board, &body, r] {
      auto world = std::make_unique<ThreadRank>(board, r);
      body(r, std::move(world));
    });
  for (std::thread &thread : threads)
    thread.join();
}

//===----------------------------------------------------------------------===//
// The launch
//===----------------------------------------------------------------------===//

LaunchInfo launchFrom(const std::map<std::string, std::string> &variables) {
  return detectLaunch([&](const char *name) -> const char * {
    auto found = variables.find(name);
    return found == variables.end() ? nullptr : found->second.c_str();
  });
}

TEST(DetectLaunch, AloneWithoutLauncherVariables) {
  const LaunchInfo launch = launchFrom({});
  EXPECT_EQ(launch.kind, LaunchInfo::Kind::Single);
  EXPECT_EQ(launch.size, 1);
}

TEST(DetectLaunch, OpenMpi) {
  const LaunchInfo launch = launchFrom({{"OMPI_COMM_WORLD_RANK", "3"},
                                        {"OMPI_COMM_WORLD_SIZE", "8"},
                                        {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}});
  EXPECT_EQ(launch.kind, LaunchInfo::Kind::Mpi);
  EXPECT_EQ(launch.rank, 3);
  EXPECT_EQ(launch.size, 8);
  EXPECT_EQ(launch.localRank, 1);
  // mpirun -np 1 still takes the MPI path.
  EXPECT_EQ(launchFrom({{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "1"}}).kind,
            LaunchInfo::Kind::Mpi);
}

TEST(DetectLaunch, TorchrunAndSlurm) {
  const LaunchInfo torchrun = launchFrom({{"RANK", "1"},
                                          {"WORLD_SIZE", "4"},
                                          {"LOCAL_RANK", "1"},
                                          {"MASTER_ADDR", "node7"},
                                          {"MASTER_PORT", "29600"}});
  EXPECT_EQ(torchrun.kind, LaunchInfo::Kind::Environment);
  EXPECT_EQ(torchrun.masterAddress, "node7");
  EXPECT_EQ(torchrun.masterPort, 29600);
  const LaunchInfo slurm =
      launchFrom({{"SLURM_PROCID", "5"}, {"SLURM_NTASKS", "16"}, {"SLURM_LOCALID", "1"}});
  EXPECT_EQ(slurm.kind, LaunchInfo::Kind::Mpi);
  EXPECT_EQ(slurm.rank, 5);
  EXPECT_EQ(slurm.localRank, 1);
  // A one-task Slurm job (srun in an sbatch script) is a plain run.
  EXPECT_EQ(launchFrom({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"}}).kind,
            LaunchInfo::Kind::Single);
}

TEST(DetectLaunch, MalformedVariablesAreErrors) {
  EXPECT_THROW(launchFrom({{"RANK", "x"}, {"WORLD_SIZE", "2"}}), CommunicatorError);
  EXPECT_THROW(launchFrom({{"RANK", "2"}, {"WORLD_SIZE", "2"}}), CommunicatorError);
  try {
    launchFrom({{"RANK", "0"}});
    FAIL();
  } catch (const CommunicatorError &error) {
    EXPECT_STREQ(error.what(), "the launcher set RANK but not WORLD_SIZE (the number of ranks)");
  }
}

//===----------------------------------------------------------------------===//
// ZeRO-1's split
//===----------------------------------------------------------------------===//

TEST(Sharding, SplitsWholeParametersNearEqualShares) {
  EXPECT_EQ(shardBoundsOf({10, 10, 10, 10}, 2), (std::vector<size_t>{0, 20, 40}));
  EXPECT_EQ(shardBoundsOf({10, 10, 10, 10}, 4), (std::vector<size_t>{0, 10, 20, 30, 40}));
  // A boundary is the first parameter start at or after r / N of the elements.
  EXPECT_EQ(shardBoundsOf({30, 5, 5}, 2), (std::vector<size_t>{0, 30, 40}));
  // One parameter larger than a share: the later ranks own nothing.
  EXPECT_EQ(shardBoundsOf({100, 1}, 4), (std::vector<size_t>{0, 100, 100, 100, 101}));
  EXPECT_EQ(shardBoundsOf({7}, 1), (std::vector<size_t>{0, 7}));
  EXPECT_EQ(largestShare({10, 10, 10, 10}, {80, 80, 80, 80}, 2), 160u);
  EXPECT_EQ(largestShare({100, 1}, {800, 8}, 4), 800u);
}

//===----------------------------------------------------------------------===//
// Reductions
//===----------------------------------------------------------------------===//

TEST(Communicator, AllReduceAddsInRankOrderOnEveryRank) {
  for (int ranks : {1, 2, 3, 4}) {
    std::vector<std::vector<float>> results(static_cast<size_t>(ranks));
    // Values whose float sum depends on the order of additions.
    auto contribution = [](int rank) {
      std::vector<float> values(11);
      for (size_t i = 0; i < values.size(); ++i)
        values[i] = rank % 2 ? 1e8f : 1.0f + static_cast<float>(i) * 0.1f + rank;
      return values;
    };
    onRanks(ranks, [&](int rank, std::unique_ptr<Communicator> world) {
      std::vector<float> values = contribution(rank);
      world->allReduceSum(values, "a test");
      results[static_cast<size_t>(rank)] = values;
    });
    std::vector<float> expected = contribution(0);
    for (int r = 1; r < ranks; ++r) {
      const std::vector<float> other = contribution(r);
      for (size_t i = 0; i < expected.size(); ++i)
        expected[i] += other[i];
    }
    for (const std::vector<float> &result : results)
      EXPECT_EQ(std::memcmp(result.data(), expected.data(), expected.size() * sizeof(float)), 0)
          << ranks << " ranks";
  }
}

TEST(Communicator, ReduceScatterAndAllGatherSegments) {
  const std::vector<size_t> bounds = {0, 1, 1, 6}; // rank 1 owns nothing
  std::vector<std::vector<float>> scattered(3), gathered(3);
  onRanks(3, [&](int rank, std::unique_ptr<Communicator> world) {
    std::vector<float> values(6, static_cast<float>(rank + 1));
    world->reduceScatterSum(values, bounds, "a test");
    scattered[static_cast<size_t>(rank)] = values;
    world->allGatherSegments(values, bounds, "a test");
    gathered[static_cast<size_t>(rank)] = values;
    EXPECT_EQ(world->allGatherText(std::string(static_cast<size_t>(rank), 'x'), "text"),
              (std::vector<std::string>{"", "x", "xx"}));
  });
  EXPECT_EQ(scattered[0], (std::vector<float>{6, 1, 1, 1, 1, 1}));
  EXPECT_EQ(scattered[1], (std::vector<float>(6, 2)));
  EXPECT_EQ(scattered[2], (std::vector<float>{3, 6, 6, 6, 6, 6}));
  for (const std::vector<float> &values : gathered)
    EXPECT_EQ(values, (std::vector<float>(6, 6)));
}

//===----------------------------------------------------------------------===//
// Training
//===----------------------------------------------------------------------===//

struct Curve {
  std::vector<double> losses, norms;
  std::vector<std::vector<double>> weights; ///< every parameter at the end
};

/// Trains \p plan for \p steps optimizer steps as the runner does, on one
/// backend (\p parallel null) or as one rank of \p parallel.
Curve trainRank(const plan::Plan &plan, uint64_t steps, DataParallel *parallel,
                const std::vector<uint64_t> &overflowSteps = {}) {
  std::unique_ptr<TrainingBackend> backend = makeCpuBackend(plan);
  DataOptions dataOptions;
  dataOptions.seed = 5;
  std::unique_ptr<BatchSource> source = makeBatchSource(analyzeTask(plan), dataOptions);
  backend->initializeParameters(5);
  const uint64_t accumulation = static_cast<uint64_t>(plan.accumulationSteps);
  Curve curve;
  for (uint64_t step = 0; step < steps; ++step) {
    const uint64_t local = parallel ? parallel->localMicroSteps() : accumulation;
    for (uint64_t i = 0; i < local; ++i) {
      const uint64_t micro =
          parallel ? parallel->globalMicroStep(step, i) : step * accumulation + i;
      for (const InputData &input : source->batch(micro))
        backend->setInput(input.name, input.bytes.data(), input.bytes.size());
      cpu::RunOptions run;
      run.seed = 5;
      run.step = micro;
      run.training = true;
      run.keepTemporaries = false;
      run.totalSteps = steps;
      // The overflow on the last rank's (or the last) micro step only.
      run.injectNonFinite =
          i + 1 == local && (!parallel || parallel->rank() + 1 == parallel->size()) &&
          std::find(overflowSteps.begin(), overflowSteps.end(), step + 1) != overflowSteps.end();
      backend->runMicroStep(run);
    }
    cpu::RunOptions optimizer;
    optimizer.seed = 5;
    optimizer.step = step;
    optimizer.training = true;
    optimizer.keepTemporaries = false;
    optimizer.totalSteps = steps;
    if (parallel) {
      EXPECT_FALSE(parallel->reduceGradients(*backend, step, false));
      parallel->prepareOptimizerStep(optimizer);
    }
    backend->runOptimizerStep(optimizer);
    BackendMetrics metrics = backend->readMetrics();
    if (parallel)
      metrics.loss = parallel->finishStep(*backend, step, metrics.loss);
    curve.losses.push_back(metrics.loss);
    curve.norms.push_back(metrics.lossScale.lastStepSkipped ? -1.0 : metrics.gradNorm);
  }
  if (parallel)
    parallel->gatherOptimizerState(*backend);
  for (uint32_t id = 0; id < plan.buffers.size(); ++id)
    if (plan.buffers[id].role == plan::BufferRole::Parameter ||
        plan.buffers[id].role == plan::BufferRole::State)
      curve.weights.push_back(backend->readBuffer(id));
  return curve;
}

/// The largest relative difference between \p a and \p b.
double worst(const std::vector<double> &a, const std::vector<double> &b) {
  double result = 0;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i] != b[i])
      result =
          std::max(result, std::fabs(a[i] - b[i]) / std::max(std::fabs(a[i]), std::fabs(b[i])));
  return result;
}

void expectSameTraining(const plan::Plan &plan, bool shard,
                        const std::vector<uint64_t> &overflowSteps = {}) {
  const uint64_t steps = 6;
  const Curve single = trainRank(plan, steps, nullptr, overflowSteps);
  for (int ranks : {1, 2, 4}) {
    std::vector<Curve> curves(static_cast<size_t>(ranks));
    onRanks(ranks, [&](int rank, std::unique_ptr<Communicator> world) {
      DataParallel parallel(plan, std::move(world), shard);
      curves[static_cast<size_t>(rank)] = trainRank(plan, steps, &parallel, overflowSteps);
    });
    for (const Curve &curve : curves) {
      // Every rank logs the same figures and ends with the same weights and state.
      EXPECT_EQ(curve.losses, curves[0].losses);
      EXPECT_EQ(curve.weights, curves[0].weights);
      EXPECT_LE(worst(single.losses, curve.losses), 1e-6) << ranks << " ranks";
      EXPECT_LE(worst(single.norms, curve.norms), 1e-6) << ranks << " ranks";
      for (size_t b = 0; b < single.weights.size(); ++b)
        EXPECT_LE(worst(single.weights[b], curve.weights[b]), 1e-5) << ranks << " ranks";
    }
  }
}

TEST(DataParallel, RanksMatchOneProcess) {
  expectSameTraining(test::bigramTrainingPlan(16, 2, 8, 4, 0.05), false);
}

TEST(DataParallel, ShardedOptimizerMatchesOneProcess) {
  expectSameTraining(test::bigramTrainingPlan(16, 2, 8, 4, 0.05), true);
}

TEST(DataParallel, OverflowOnOneRankSkipsTheStepEverywhere) {
  const plan::Plan plan = test::withLossScaling(test::bigramTrainingPlan(16, 2, 8, 4, 0.05),
                                                plan::LossScaleMode::Dynamic, 1024);
  expectSameTraining(plan, false, {2, 3});
  expectSameTraining(plan, true, {2});
}

TEST(DataParallel, WorldSizeMustDivideTheMicroBatches) {
  const plan::Plan plan = test::bigramTrainingPlan(16, 2, 8, 4, 0.05);
  onRanks(3, [&](int, std::unique_ptr<Communicator> world) {
    try {
      DataParallel parallel(plan, std::move(world), false);
      parallel.checkWorldSize();
      ADD_FAILURE() << "3 ranks accepted for 4 micro-batches";
    } catch (const RunMismatchError &error) {
      EXPECT_STREQ(error.what(),
                   "the world size 3 does not divide this plan's 4 accumulation steps (the "
                   "global batch of an optimizer step is split across the ranks by "
                   "micro-batches): run 1, 2 or 4 ranks, or compile with --accum-steps a "
                   "multiple of 3");
    }
  });
}

TEST(DataParallel, RanksMustRunTheSamePlan) {
  std::vector<std::string> errors(2);
  onRanks(2, [&](int rank, std::unique_ptr<Communicator> world) {
    const plan::Plan plan = test::bigramTrainingPlan(16, 2, 8, 2, 0.05);
    DataParallel parallel(plan, std::move(world), false);
    std::map<std::string, std::string> identity = {{"plan_hash", rank ? "bbbb" : "aaaa"},
                                                   {"seed", "0"}};
    try {
      parallel.checkSameRun(identity);
    } catch (const RunMismatchError &error) {
      errors[static_cast<size_t>(rank)] = error.what();
    }
  });
  for (const std::string &error : errors)
    EXPECT_EQ(error, "rank 1 runs a plan with hash bbbb, rank 0 one with hash aaaa: every rank "
                     "must run the same training executable");
}

} // namespace

namespace {

//===----------------------------------------------------------------------===//
// Gradient buckets (the plan's, without a device program)
//===----------------------------------------------------------------------===//

/// The micro-step instruction indices of \p plan's accumulates.
std::vector<size_t> accumulateIndices(const plan::Plan &plan) {
  std::vector<size_t> found;
  for (size_t i = 0; i < plan.instructions.size(); ++i)
    if (plan.instructions[i].op == plan::OpCode::Accumulate)
      found.push_back(i);
  return found;
}

TEST(GradientBuckets, WithoutTheAttributeEveryAccumulatorIsOneBucket) {
  const plan::Plan plan = test::classifierTrainingPlan(4, 8, 3, 0.1);
  const std::vector<plan::GradientBucket> buckets = plan::gradientBuckets(plan);
  ASSERT_EQ(buckets.size(), 1u);
  EXPECT_EQ(buckets[0].accumulators.size(), accumulateIndices(plan).size());
  EXPECT_EQ(buckets[0].readyAfter, accumulateIndices(plan).back());
}

TEST(GradientBuckets, CutInRunOrderAtTheSize) {
  // One bucket per accumulator when the size is below every accumulator, one
  // bucket when it holds them all. (These test plans train one parameter;
  // the tiny GPT's five buckets are checked by the dry run and
  // test/Driver/report-memory-world-size.test.)
  plan::Plan plan = test::withParameterCopy(test::bigramTrainingPlan(16, 2, 8, 2, 0.05), "table",
                                            plan::DType::BF16);
  plan::assignGradientBuckets(plan, 1);
  const std::vector<size_t> indices = accumulateIndices(plan);
  std::vector<plan::GradientBucket> buckets = plan::gradientBuckets(plan);
  ASSERT_EQ(buckets.size(), indices.size());
  for (size_t b = 0; b < buckets.size(); ++b) {
    EXPECT_EQ(buckets[b].readyAfter, indices[b]);
    EXPECT_EQ(buckets[b].accumulators,
              std::vector<uint32_t>{plan.instructions[indices[b]].operands[0]});
    EXPECT_EQ(std::get<int64_t>(plan.instructions[indices[b]].attrs.at("bucket")),
              static_cast<int64_t>(b));
  }
  plan::assignGradientBuckets(plan, 1ull << 30);
  buckets = plan::gradientBuckets(plan);
  ASSERT_EQ(buckets.size(), 1u);
  EXPECT_EQ(buckets[0].bytes, 16u * 16u * 4u);
  // The attribute passes validation (and a negative one does not).
  plan::validatePlan(plan);
  plan.instructions[indices[0]].attrs["bucket"] = int64_t(-1);
  EXPECT_THROW(plan::validatePlan(plan), plan::PlanError);
}

} // namespace
