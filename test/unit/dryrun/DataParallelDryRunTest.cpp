//===- DataParallelDryRunTest.cpp - The GPU data parallel path, dry run ---===//
//
// One rank of a data parallel run on GPUs, without a GPU or NCCL: the CUDA
// executor over the recording driver, and a recording stand-in for NCCL's
// entry points (an NcclApi table) that logs each call with what the
// recording driver had seen by then. Checked: every gradient accumulator is
// summed exactly once per optimizer step, bucket by bucket in the plan's
// order, on the exchange stream, with its device address and element count;
// the buckets are issued while the last micro step is being queued (not
// after it), as each becomes final; the earlier micro steps issue nothing;
// and the driver trace has no violation (pointers, extents, graphs), with
// the micro step cut into more CUDA graph segments at the buckets.
//
//===----------------------------------------------------------------------===//

#include "DryRunChecker.h"
#include "DryRunTestUtils.h"
#include "runtime/cuda/Executor.h"
#include "runtime/cuda/GradientExchange.h"
#include "runtime/cuda/Nccl.h"
#include "runtime/plan/GradientBuckets.h"

#include <gtest/gtest.h>

#include <cstring>
#include <map>

// The runtime declares the part of NCCL's ABI it uses (runtime/cuda/Nccl.h)
// instead of including nccl.h: where the header is there, check them against
// each other.
#if __has_include(<nccl.h>)
#include <nccl.h>
static_assert(sizeof(ncclUniqueId) == ampc::cuda::nccl::kUniqueIdBytes);
static_assert(static_cast<int>(ncclSuccess) == ampc::cuda::nccl::Success);
static_assert(static_cast<int>(ncclInvalidUsage) == ampc::cuda::nccl::InvalidUsage);
static_assert(static_cast<int>(ncclInProgress) == ampc::cuda::nccl::InProgress);
static_assert(static_cast<int>(ncclFloat32) == ampc::cuda::nccl::Float32);
static_assert(static_cast<int>(ncclSum) == ampc::cuda::nccl::Sum);
static_assert(static_cast<int>(ncclMax) == ampc::cuda::nccl::Max);
static_assert(sizeof(ncclResult_t) == sizeof(ampc::cuda::nccl::Result));
static_assert(sizeof(ncclDataType_t) == sizeof(ampc::cuda::nccl::DataType));
static_assert(sizeof(ncclRedOp_t) == sizeof(ampc::cuda::nccl::ReduceOp));
#endif

namespace ampc::dryrun {
namespace {

/// One call the recording NCCL saw.
struct NcclCall {
  std::string name;
  uint64_t buffer = 0;
  size_t count = 0;
  int op = -1;
  CUstream stream = nullptr;
  /// Launches, matmuls and graph launches the recording driver had seen.
  size_t deviceWorkBefore = 0;
};

std::vector<NcclCall> &calls() {
  static std::vector<NcclCall> recorded;
  return recorded;
}

size_t deviceWork() {
  size_t count = 0;
  for (const Event &event : recordingLibraryInProcess().events())
    count += event.kind == EventKind::Launch || event.kind == EventKind::Matmul ||
             event.kind == EventKind::GraphLaunch;
  return count;
}

void log(const char *name, const void *buffer = nullptr, size_t count = 0, int op = -1,
         CUstream stream = nullptr) {
  NcclCall call;
  call.name = name;
  call.buffer = reinterpret_cast<uint64_t>(buffer);
  call.count = count;
  call.op = op;
  call.stream = stream;
  call.deviceWorkBefore = deviceWork();
  calls().push_back(call);
}

/// NCCL's entry points, recording: a world of 2 ranks whose other rank is
/// never heard from (nothing here waits).
cuda::NcclApi recordingNccl() {
  cuda::NcclApi api;
  api.library = "recording NCCL";
  api.version = 22703;
  api.ncclGetVersion = [](int *version) {
    *version = 22703;
    return cuda::nccl::Success;
  };
  api.ncclGetUniqueId = [](cuda::nccl::UniqueId *id) {
    std::memset(id->internal, 7, sizeof(id->internal));
    return cuda::nccl::Success;
  };
  api.ncclCommInitRank = [](cuda::nccl::CommHandle *comm, int, cuda::nccl::UniqueId, int) {
    static int token;
    *comm = reinterpret_cast<cuda::nccl::CommHandle>(&token);
    log("ncclCommInitRank");
    return cuda::nccl::Success;
  };
  api.ncclCommDestroy = [](cuda::nccl::CommHandle) { return cuda::nccl::Success; };
  api.ncclCommAbort = [](cuda::nccl::CommHandle) { return cuda::nccl::Success; };
  api.ncclCommGetAsyncError = [](cuda::nccl::CommHandle, cuda::nccl::Result *state) {
    *state = cuda::nccl::Success;
    return cuda::nccl::Success;
  };
  api.ncclGetErrorString = [](cuda::nccl::Result) { return "recorded"; };
  api.ncclAllReduce = [](const void *send, void *receive, size_t count, cuda::nccl::DataType type,
                         cuda::nccl::ReduceOp op, cuda::nccl::CommHandle, CUstream stream) {
    EXPECT_EQ(send, receive); // in place
    EXPECT_EQ(type, cuda::nccl::Float32);
    log("ncclAllReduce", receive, count, op, stream);
    return cuda::nccl::Success;
  };
  api.ncclGroupStart = [] {
    log("ncclGroupStart");
    return cuda::nccl::Success;
  };
  api.ncclGroupEnd = [] {
    log("ncclGroupEnd");
    return cuda::nccl::Success;
  };
  return api;
}

/// The tiny GPT's dry-run plan (bf16, 2 micro steps) with buckets of at
/// most \p bytes.
plan::Plan tinyPlanWithBuckets(uint64_t bytes) {
  plan::Plan plan = plan::loadPlan(AMPC_DRYRUN_TINY_PLAN);
  plan::assignGradientBuckets(plan, bytes);
  return plan;
}

void checkDataParallelRun(bool useGraphs) {
  const plan::Plan plan = tinyPlanWithBuckets(128 << 10);
  const std::vector<plan::GradientBucket> buckets = plan::gradientBuckets(plan);
  ASSERT_GE(buckets.size(), 3u);
  const RecordingLibrary &library = recordingLibraryInProcess();
  library.reset(nullptr);
  calls().clear();
  const cuda::NcclApi nccl = recordingNccl();

  cuda::DeviceOptions deviceOptions;
  deviceOptions.api = library.api;
  cuda::Device gpu(deviceOptions);
  cuda::ExecutorOptions options;
  options.useGraphs = useGraphs;
  options.microStepCutsAfter = cuda::GradientExchange::cutsFor(plan);
  cuda::Executor executor(plan, gpu, options);
  cuda::NcclWorld world(nccl, cuda::NcclWorld::newId(nccl), 0, 2);
  cuda::GradientExchange exchange(executor, world);
  ASSERT_NE(exchange.exchangeStream(), gpu.stream());
  executor.initializeParameters(0);

  for (uint64_t step = 0; step < kOptimizerSteps; ++step) {
    size_t workAtLastMicroStep = 0, workAfterIt = 0;
    for (uint64_t i = 0; i < kAccumulationSteps; ++i) {
      const uint64_t micro = step * kAccumulationSteps + i;
      executor.randomizeInputs(micro);
      cpu::RunOptions run;
      run.step = micro;
      run.totalSteps = kOptimizerSteps;
      run.training = true;
      const size_t before = calls().size();
      if (i + 1 == kAccumulationSteps) {
        exchange.armForLastMicroStep();
        workAtLastMicroStep = deviceWork();
      }
      executor.runMicroStep(run);
      if (i + 1 < kAccumulationSteps)
        EXPECT_EQ(calls().size(), before) << "an earlier micro step exchanged gradients";
    }
    workAfterIt = deviceWork();
    // Every bucket was final (and issued) by the end of the last micro step.
    EXPECT_EQ(exchange.issuedEarly(), buckets.size());
    exchange.finish();
    cpu::RunOptions run;
    run.step = step;
    run.totalSteps = kOptimizerSteps;
    run.training = true;
    executor.runOptimizerStep(run);
    executor.readMetrics();

    // This step's calls: one group per bucket, in bucket order.
    std::vector<NcclCall> reduces;
    size_t groups = 0;
    for (const NcclCall &call : calls()) {
      if (call.deviceWorkBefore < workAtLastMicroStep)
        continue; // an earlier step's
      if (call.name == "ncclGroupStart")
        ++groups;
      if (call.name == "ncclAllReduce")
        reduces.push_back(call);
    }
    EXPECT_EQ(groups, buckets.size());
    size_t at = 0;
    for (size_t b = 0; b < buckets.size(); ++b) {
      for (uint32_t accumulator : buckets[b].accumulators) {
        ASSERT_LT(at, reduces.size());
        const NcclCall &call = reduces[at++];
        EXPECT_EQ(call.buffer, executor.deviceAddress(accumulator)) << "bucket " << b;
        EXPECT_EQ(call.count, static_cast<size_t>(plan::numElements(plan.buffers[accumulator])));
        EXPECT_EQ(call.op, cuda::nccl::Sum);
        EXPECT_EQ(call.stream, exchange.exchangeStream());
        // Issued while the last micro step was being queued: the first
        // bucket before its last device work, none before it began.
        EXPECT_GT(call.deviceWorkBefore, workAtLastMicroStep);
        if (b == 0)
          EXPECT_LT(call.deviceWorkBefore, workAfterIt) << "bucket 0 waited for the whole step";
      }
    }
    EXPECT_EQ(at, reduces.size()) << "an accumulator was summed twice";
  }
  // The driver saw nothing wrong, segment cuts and all.
  const DryRunReport report = checkDryRun(plan, library.events(), {kOptimizerSteps, 0});
  EXPECT_TRUE(report.violations.empty()) << report.summary();
}

TEST(DataParallelDryRun, BucketsAreSummedAsTheyBecomeFinalWithGraphs) {
  checkDataParallelRun(true);
}

TEST(DataParallelDryRun, BucketsAreSummedAsTheyBecomeFinalEagerly) { checkDataParallelRun(false); }

TEST(DataParallelDryRun, TheCutsEndSegmentsWhereBucketsAreFinal) {
  const plan::Plan plan = tinyPlanWithBuckets(128 << 10);
  const std::vector<size_t> cuts = cuda::GradientExchange::cutsFor(plan);
  const std::vector<plan::GradientBucket> buckets = plan::gradientBuckets(plan);
  ASSERT_EQ(cuts.size(), buckets.size());
  for (size_t b = 0; b < buckets.size(); ++b) {
    EXPECT_EQ(cuts[b], buckets[b].readyAfter);
    if (b > 0)
      EXPECT_GT(buckets[b].readyAfter, buckets[b - 1].readyAfter);
    // The group it is final after computes one of the bucket's accumulates.
    const plan::DeviceGroup &group = plan.device.microStep.groups[buckets[b].readyAfter];
    bool accumulates = false;
    for (uint32_t instruction : group.instructions)
      accumulates =
          accumulates ||
          (plan.instructions[instruction].op == plan::OpCode::Accumulate &&
           std::find(buckets[b].accumulators.begin(), buckets[b].accumulators.end(),
                     plan.instructions[instruction].operands[0]) != buckets[b].accumulators.end());
    EXPECT_TRUE(accumulates) << "bucket " << b;
  }
}

TEST(DataParallelDryRun, NcclMissingIsAClearError) {
  // libnccl named by AMPC_NCCL_LIBRARY and not there: the message says what to do. (The table is
  // loaded once per process; only this test loads it, and ctest runs each test alone.)
  ::setenv("AMPC_NCCL_LIBRARY", "/nonexistent/libnccl.so.2", 1);
  try {
    cuda::ncclApi();
    ADD_FAILURE() << "a missing AMPC_NCCL_LIBRARY was accepted";
  } catch (const cuda::NcclError &error) {
    EXPECT_STREQ(error.what(), "no NCCL found (tried /nonexistent/libnccl.so.2, named by "
                               "AMPC_NCCL_LIBRARY): correct AMPC_NCCL_LIBRARY or unset it");
  }
}

} // namespace
} // namespace ampc::dryrun
