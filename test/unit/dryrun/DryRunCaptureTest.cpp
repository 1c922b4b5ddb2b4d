//===- DryRunCaptureTest.cpp - CUDA graphs, pinned uploads, stream capture -===//
//
// The dry run of the tiny GPT's training (DefectRun.h) as the executor captures it: each
// function one CUDA graph replayed after its warm-up, inputs uploaded through pinned staging
// slots with one synchronisation per optimizer step, and the checks that fire on a staging
// slot rewritten too early and on a call that breaks a stream capture.
//
//===----------------------------------------------------------------------===//

#include "AllocationTable.h"
#include "DefectRun.h"
#include "runtime/cuda/Executor.h"
#include "runtime/cuda/Memory.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>

namespace ampc::dryrun {
namespace {

//===----------------------------------------------------------------------===//
// CUDA graphs
//===----------------------------------------------------------------------===//

TEST(DryRunGraphs, EachFunctionIsOneGraphWithNoEagerLaunchAfterItsWarmUp) {
  // No launch takes a per-run value, so each function is captured whole: one capture each, one
  // replay per run after the warm-up (the capture's run launches its graph), and every kernel of
  // the optimizer step runs eagerly only in the warm-up.
  const InProcessRun run = dryRun(tinyPlan(), recordingLibraryInProcess().h100());
  ASSERT_EQ(run.error, "");
  EXPECT_TRUE(run.report.violations.empty()) << run.report.summary();
  const uint64_t microRuns = uint64_t(kOptimizerSteps) * kAccumulationSteps;
  EXPECT_EQ(run.report.graphsCaptured, 2u) << run.report.summary();
  EXPECT_EQ(run.report.graphReplays, (microRuns - 1) + (kOptimizerSteps - 1))
      << run.report.summary();
  std::map<std::string, uint64_t> inPlan, eager;
  for (const plan::DeviceGroup &group : tinyPlan().device.optimizerStep.groups)
    for (const plan::DeviceStep &step : group.steps)
      if (const auto *launch = std::get_if<plan::LaunchStep>(&step))
        ++inPlan[tinyPlan().device.kernels[launch->kernel].entry];
  ASSERT_FALSE(inPlan.empty());
  for (const Event &event : run.trace)
    if (event.kind == EventKind::Launch && event.origin == Origin::Eager &&
        inPlan.count(event.name))
      ++eager[event.name];
  EXPECT_EQ(eager, inPlan) << "optimizer kernels launched eagerly more often than in the warm-up";
}

//===----------------------------------------------------------------------===//
// Uploads through pinned staging slots
//===----------------------------------------------------------------------===//

TEST(DryRunUploads, InputsGoThroughPinnedSlotsWithOneSyncPerOptimizerStep) {
  // The training loop's host side: each micro step's inputs are copied into a pinned slot and
  // queued, and with a slot per micro step nothing waits until the metrics read.
  const InProcessRun run = dryRun(tinyPlan(), recordingLibraryInProcess().h100());
  ASSERT_EQ(run.error, "");
  EXPECT_TRUE(run.report.violations.empty()) << run.report.summary();
  const LoopTraffic traffic = loopTraffic(run.trace);
  EXPECT_EQ(traffic.pageableUploads, 0u);
  EXPECT_EQ(traffic.eventSyncs, 0u);
  EXPECT_EQ(traffic.streamSyncs, uint64_t(kOptimizerSteps) + 1); // + the device closing
  uint64_t inputUploads = 0;
  for (const plan::Input &input : tinyPlan().inputs) {
    const uint64_t bytes = plan::numElements(tinyPlan().buffers[input.buffer]) *
                           plan::dtypeBytes(tinyPlan().buffers[input.buffer].dtype);
    ASSERT_NE(bytes, sizeof(plan::RunScalarBlock));
    inputUploads += traffic.pinnedUploadsOfBytes.count(bytes) ? 1 : 0;
  }
  EXPECT_EQ(inputUploads, tinyPlan().inputs.size());
  uint64_t staged = 0;
  for (const auto &[bytes, uploads] : traffic.pinnedUploadsOfBytes)
    if (bytes != sizeof(plan::RunScalarBlock))
      staged += uploads;
  EXPECT_EQ(staged, uint64_t(kOptimizerSteps) * kAccumulationSteps * tinyPlan().inputs.size());
}

/// Sets the tiny plan's first input three times in a row, each batch other tokens, with
/// \p planted in the driver; the trace before the executor goes.
std::vector<Event> setInputThreeTimes(const AmpcRecordingPlant *planted, std::string &error) {
  const RecordingLibrary &library = recordingLibraryInProcess();
  library.reset(nullptr);
  library.plant(planted);
  std::vector<Event> trace;
  try {
    cuda::DeviceOptions options;
    options.api = library.api;
    cuda::Device gpu(options);
    // No matmul timing: its event waits would mix with the slots' in the counts below.
    cuda::ExecutorOptions executorOptions;
    executorOptions.matmulSelection = cuda::MatmulSelection::Heuristic;
    cuda::Executor executor(tinyPlan(), gpu, executorOptions);
    const plan::Input &input = tinyPlan().inputs.front();
    const plan::Buffer &buffer = tinyPlan().buffers[input.buffer];
    const int64_t count = plan::numElements(buffer);
    for (int64_t batch = 0; batch < 3; ++batch) {
      std::vector<uint8_t> bytes(count * plan::dtypeBytes(buffer.dtype));
      for (int64_t e = 0; e < count; ++e) {
        const int64_t token = (batch * 7 + e) % std::max<int64_t>(input.bound, 1);
        if (buffer.dtype == plan::DType::I64)
          std::memcpy(bytes.data() + 8 * e, &token, 8);
        else
          reinterpret_cast<int32_t *>(bytes.data())[e] = static_cast<int32_t>(token);
      }
      executor.setInput(input.name, bytes.data(), bytes.size());
    }
    trace = library.events();
  } catch (const std::exception &thrown) {
    error = thrown.what();
  }
  library.plant(nullptr);
  return trace;
}

TEST(DryRunDefect, StagingSlotRewrittenBeforeTheStreamReachedItsCopy) {
  const plan::Buffer &buffer = tinyPlan().buffers[tinyPlan().inputs.front().buffer];
  ASSERT_TRUE(buffer.dtype == plan::DType::I32 || buffer.dtype == plan::DType::I64);
  ASSERT_EQ(tinyPlan().accumulationSteps, 2);
  auto countOf = [](const std::vector<Event> &trace, EventKind kind, const std::string &what) {
    uint64_t found = 0;
    for (const Event &event : trace)
      found += event.kind == kind && event.what == what;
    return found;
  };
  // Two slots: the third batch goes into the first slot, whose copy nothing has shown the
  // stream to have reached, so the executor waits on that slot's event first.
  std::string error;
  const std::vector<Event> clean = setInputThreeTimes(nullptr, error);
  ASSERT_EQ(error, "");
  EXPECT_EQ(countOf(clean, EventKind::Sync, "event"), 1u);
  EXPECT_EQ(countOf(clean, EventKind::Violation, "pinned-reuse"), 0u);
  EXPECT_EQ(loopTraffic(clean).pageableUploads, 0u);
  // A runtime that does not wait rewrites bytes the first copy may still be reading.
  AmpcRecordingPlant plant = planted(AMPC_PLANT_SKIP_EVENT_WAIT);
  const std::vector<Event> broken = setInputThreeTimes(&plant, error);
  ASSERT_EQ(error, "");
  EXPECT_EQ(countOf(broken, EventKind::Sync, "event"), 0u);
  std::vector<Event> found;
  for (const Event &event : broken)
    if (event.kind == EventKind::Violation)
      found.push_back(event);
  ASSERT_EQ(found.size(), 1u) << recordingLibraryInProcess().trace();
  EXPECT_EQ(found[0].what, "pinned-reuse");
  const std::string bytes =
      std::to_string(plan::numElements(buffer) * plan::dtypeBytes(buffer.dtype));
  EXPECT_NE(found[0].text.find("the host rewrote the " + bytes + " pinned bytes"),
            std::string::npos)
      << found[0].text;
  EXPECT_NE(found[0].text.find("and queued another copy from them, before the stream was seen "
                               "to reach that copy"),
            std::string::npos)
      << found[0].text;
}

TEST(DryRunUploads, WithoutPinnedMemoryInputsAreCopiedFromPageableMemory) {
  // The metrics read-back's pinned buffer is the first cuMemAllocHost, the first input's
  // staging slots the second: that one fails.
  const RecordingLibrary &library = recordingLibraryInProcess();
  library.reset(nullptr);
  AmpcRecordingPlant plant = planted(AMPC_PLANT_HOST_ALLOC_FAILS);
  plant.occurrence = 1;
  library.plant(&plant);
  cuda::DeviceOptions options;
  options.api = library.api;
  cuda::Device gpu(options);
  ::testing::internal::CaptureStderr();
  std::unique_ptr<cuda::Executor> executor;
  try {
    executor = std::make_unique<cuda::Executor>(tinyPlan(), gpu);
  } catch (const std::exception &error) {
    ADD_FAILURE() << error.what();
  }
  const std::string warning = ::testing::internal::GetCapturedStderr();
  library.plant(nullptr);
  ASSERT_TRUE(executor);
  const plan::Input &input = tinyPlan().inputs.front();
  EXPECT_EQ(warning,
            "warning: cuMemAllocHost failed: CUDA_ERROR_OUT_OF_MEMORY (out of memory) "
            "while allocating " +
                cuda::formatBytes(
                    2 * cuda::alignUp(plan::numElements(tinyPlan().buffers[input.buffer]) *
                                      plan::dtypeBytes(tinyPlan().buffers[input.buffer].dtype))) +
                " of pinned host memory for the staging slots of input '" + input.name +
                "'; host-to-device copies go from pageable memory instead, which may "
                "hold the host until the GPU is idle every micro step\n");
  // The other inputs are staged; this one is uploaded from the caller's bytes.
  const plan::Buffer &buffer = tinyPlan().buffers[input.buffer];
  std::vector<uint8_t> bytes(plan::numElements(buffer) * plan::dtypeBytes(buffer.dtype), 0);
  executor->setInput(input.name, bytes.data(), bytes.size());
  bool fromCaller = false;
  for (const Event &event : library.events())
    fromCaller |= event.kind == EventKind::Memcpy && event.what == "htod" &&
                  event.source == reinterpret_cast<uint64_t>(bytes.data());
  EXPECT_TRUE(fromCaller) << library.trace();
  gpu.synchronize();
}

//===----------------------------------------------------------------------===//
// Stream capture
//===----------------------------------------------------------------------===//

void expectCaptureBroken(const InProcessRun &run, const std::string &call) {
  const DryRunViolation violation = expectViolation(run, "capture");
  EXPECT_NE(violation.message.find(call + " while stream capture"), std::string::npos)
      << violation.text();
  // The first launch the capture records is the segment's first step.
  EXPECT_NE(violation.where.find("while capturing CUDA graph "), std::string::npos)
      << violation.text();
  EXPECT_NE(violation.where.find(", at its start, before micro_step group 0 "), std::string::npos)
      << violation.text();
  // The executor fell back to launching the segment eagerly; the checker
  // says the capture was lost.
  bool invalidated = false;
  for (const DryRunViolation &each : run.report.of("capture"))
    invalidated |= each.message.find("was invalidated") != std::string::npos;
  EXPECT_TRUE(invalidated) << run.report.summary();
}

TEST(DryRunDefect, SynchronizeDuringCapture) {
  expectCaptureBroken(dryRun(planted(AMPC_PLANT_SYNC_IN_CAPTURE)), "cuStreamSynchronize");
}

TEST(DryRunDefect, AllocateDuringCapture) {
  expectCaptureBroken(dryRun(planted(AMPC_PLANT_ALLOC_IN_CAPTURE)), "cuMemAlloc of 4096 bytes");
}

} // namespace
} // namespace ampc::dryrun
