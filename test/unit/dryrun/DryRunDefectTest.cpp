//===- DryRunDefectTest.cpp - Each dry-run check on a planted defect ------===//
//
// The tiny GPT's training plan (bf16, two micro steps per optimizer step) runs
// in this process through cuda::Executor over the recording driver, as the
// training loop runs it, and the trace is checked against the plan. Unaltered
// it has no violation. Then one defect at a time is planted where a defective
// runtime or plan would put it:
//
//  * in the plan: an argument the kernel's cubin does not have, a block over
//    the kernel's __launch_bounds__;
//  * in the device: too few registers or too little shared memory per block
//    for the kernels;
//  * in one call the runtime makes (AmpcRecordingPlant): an upload of the
//    run scalars with another step, a pointer argument
//    moved out of its allocation, so its buffer runs past the end, or just
//    elsewhere, an attention kernel's layout with a wrong row stride, an
//    allocation freed before a launch uses it, a grid over the
//    limits or other than the plan's, dynamic shared memory without opting
//    in, a sync or an allocation while a graph is captured, a cuBLASLt
//    layout over its buffer, a misaligned or missing matmul pointer, an
//    input staging slot rewritten without waiting for its earlier copy;
//  * in the trace: a launch that never happened, a weight-gradient matmul
//    that overwrote its accumulator (beta 0) or read C from elsewhere.
//
// Each test checks that its check fires and that the message names the
// function, the group and the op's source location in tiny.mlir; where the
// GPU would reject the call, that the executor's own error says so too.
//
//===----------------------------------------------------------------------===//

#include "AllocationTable.h"
#include "DefectRun.h"
#include "runtime/cuda/CublasLt.h"
#include "runtime/cuda/Executor.h"
#include "runtime/cuda/Memory.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <map>
#include <memory>

namespace ampc::dryrun {
namespace {


//===----------------------------------------------------------------------===//
// The unaltered run
//===----------------------------------------------------------------------===//

TEST(DryRunDefect, TheUnalteredPlanHasNoViolation) {
  const InProcessRun run = dryRun(tinyPlan(), recordingLibraryInProcess().h100());
  EXPECT_EQ(run.error, "");
  EXPECT_TRUE(run.report.violations.empty()) << run.report.summary();
  EXPECT_EQ(run.report.functionRuns, uint64_t(kOptimizerSteps) * (kAccumulationSteps + 1));
  EXPECT_GT(run.report.replayedSteps, 0u) << run.report.summary();
  // Every distinct matmul had the recording heuristic's 3 candidates timed while the executor
  // was built: one untimed run and kTimedRuns timed ones each.
  EXPECT_GT(run.report.timedMatmuls, 0u) << run.report.summary();
  EXPECT_EQ(run.report.timedMatmuls % (3 * (1 + cuda::Matmul::kTimedRuns)), 0u)
      << run.report.summary();
}

TEST(DryRunDefect, OverTheStandInDriverAttentionKeepsOurKernels) {
  // cuDNN opens the system's libcuda, not the recording one: every attention pass keeps the
  // backend's kernels and says why (the run above checks their launches against the plan).
  const RecordingLibrary &library = recordingLibraryInProcess();
  const AmpcRecordingDevice h100 = library.h100();
  library.reset(&h100);
  cuda::DeviceOptions options;
  options.api = library.api;
  cuda::Device gpu(options);
  EXPECT_FALSE(gpu.usesSystemDriver());
  const std::vector<cuda::AttentionChoice> choices =
      cuda::Executor(tinyPlan(), gpu).attentionChoices();
  ASSERT_EQ(choices.size(), 2u) << cuda::formatAttentionChoices(choices);
  EXPECT_EQ(choices[0].problem.rfind("forward [B ", 0), 0u) << choices[0].problem;
  EXPECT_EQ(choices[1].problem.rfind("backward [B ", 0), 0u) << choices[1].problem;
  for (const cuda::AttentionChoice &choice : choices) {
    EXPECT_FALSE(choice.cudnn);
    EXPECT_NE(choice.why.find("stand-in for libcuda"), std::string::npos) << choice.why;
  }
  // --attention ampc: no choice is made at all.
  cuda::ExecutorOptions ours;
  ours.attentionSelection = cuda::AttentionSelection::Own;
  EXPECT_TRUE(cuda::Executor(tinyPlan(), gpu, ours).attentionChoices().empty());
}

//===----------------------------------------------------------------------===//
// Timing cuBLASLt's candidates
//===----------------------------------------------------------------------===//

/// The unaltered run's trace with its first timed matmul changed by \p change (which may move
/// it), checked again.
InProcessRun withTimedMatmulChanged(
    const std::function<void(std::vector<Event> &trace, size_t timed)> &change) {
  InProcessRun run = dryRun(tinyPlan(), recordingLibraryInProcess().h100());
  size_t timed = run.trace.size();
  for (size_t i = 0; i < run.trace.size() && timed == run.trace.size(); ++i)
    if (run.trace[i].kind == EventKind::Matmul && run.trace[i].stream > 1)
      timed = i;
  if (timed == run.trace.size()) {
    ADD_FAILURE() << "no matmul was timed";
    return run;
  }
  change(run.trace, timed);
  run.report = checkDryRun(tinyPlan(), run.trace, {kOptimizerSteps, 0});
  return run;
}

TEST(DryRunDefect, MatmulTimedAfterTheStepsBegan) {
  // A runtime that timed a candidate in the middle of training would overwrite a live value.
  const InProcessRun run = withTimedMatmulChanged([](std::vector<Event> &trace, size_t timed) {
    const Event copy = trace[timed];
    trace.insert(trace.end() - 1, copy);
  });
  const DryRunViolation violation = firstOf(run, "matmul-timing");
  EXPECT_NE(violation.message.find("ran after the steps began"), std::string::npos)
      << violation.text();
  EXPECT_EQ(run.report.of("matmul-timing").size(), 1u) << run.report.summary();
}

TEST(DryRunDefect, MatmulTimingCapturedIntoAGraph) {
  const InProcessRun run = withTimedMatmulChanged([](std::vector<Event> &trace, size_t timed) {
    trace[timed].origin = Origin::Captured;
  });
  const DryRunViolation violation = firstOf(run, "matmul-timing");
  EXPECT_NE(violation.message.find("captured into a graph"), std::string::npos)
      << violation.text();
}

TEST(DryRunDefect, MatmulTimedOutsideItsAllocation) {
  const InProcessRun run = withTimedMatmulChanged([](std::vector<Event> &trace, size_t timed) {
    trace[timed].matmul.pointerD += 1ull << 40;
  });
  const DryRunViolation violation = firstOf(run, "pointer");
  EXPECT_NE(violation.message.find("a matmul timed on stream"), std::string::npos)
      << violation.text();
}

//===----------------------------------------------------------------------===//
// Memory: pointers, extents, freed allocations
//===----------------------------------------------------------------------===//

/// The site's buffer argument in the unaltered run: its address, and the
/// allocation holding it.
struct Bound {
  uint64_t address = 0;
  Allocation allocation;
};

Bound boundAddress(const LaunchSite &site) {
  const InProcessRun run = dryRun(tinyPlan(), recordingLibraryInProcess().h100());
  AllocationTable allocations;
  for (const Event &event : run.trace) {
    if (event.kind == EventKind::Alloc)
      allocations.add(event.address, event.bytes, event.call);
    if (event.kind == EventKind::Launch && event.name == site.kernel) {
      Bound bound;
      bound.address = event.args.at(site.argument);
      bound.allocation = *allocations.find(bound.address);
      return bound;
    }
  }
  ADD_FAILURE() << "kernel " << site.kernel << " never launched";
  return {};
}

/// Runs with the first buffer argument of the first launch moved to
/// \p where(its address, its allocation, its bytes); returns the violation
/// of \p check, which must name the launch's group.
DryRunViolation argumentMoved(const std::string &check,
                              const std::function<uint64_t(const Allocation &, uint64_t)> &where) {
  const LaunchSite site = firstLaunch(tinyPlan());
  const Bound bound = boundAddress(site);
  const plan::Buffer &buffer = tinyPlan().buffers[site.launch->args[site.argument].buffer];
  const uint64_t bytes = plan::numElements(buffer) * plan::dtypeBytes(buffer.dtype);
  const uint64_t moved = where(bound.allocation, bytes);
  const InProcessRun run =
      dryRun(planted(AMPC_PLANT_ARGUMENT_OFFSET, site.kernel, static_cast<int>(site.argument),
                     static_cast<int64_t>(moved - bound.address)));
  const DryRunViolation violation = expectViolation(run, check);
  EXPECT_NE(violation.where.find(groupName(site.group)), std::string::npos) << violation.text();
  if (check == "extent") // the driver alone cannot know the extent
    EXPECT_TRUE(run.report.of("pointer").empty()) << run.report.summary();
  return violation;
}

TEST(DryRunDefect, PointerArgumentOutOfItsAllocation) {
  // Past the end of its allocation, into the gap after it.
  const DryRunViolation violation =
      argumentMoved("pointer", [](const Allocation &allocation, uint64_t) {
        return allocation.address + allocation.bytes + 4096;
      });
  EXPECT_NE(violation.message.find("lies in no allocation"), std::string::npos) << violation.text();
}

TEST(DryRunDefect, BufferExtentPastItsAllocation) {
  // The pointer stays inside the allocation; the buffer's last bytes do not.
  const DryRunViolation violation =
      argumentMoved("extent", [](const Allocation &allocation, uint64_t bytes) {
        return allocation.address + allocation.bytes - bytes / 2;
      });
  EXPECT_NE(violation.message.find("bytes past the end of allocation"), std::string::npos)
      << violation.text();
}

TEST(DryRunDefect, AttentionLayoutOtherThanThePlans) {
  // The flash forward's layout argument (ampc::flash::Layout: word 0 the head count, then the
  // batch, head and row strides of q, k, v, o, dO) with q's row stride 8 elements longer.
  const InProcessRun run =
      dryRun(planted(AMPC_PLANT_WIDE_ARGUMENT, "ampc_flash_attention_fwd_", 3, 8));
  EXPECT_EQ(run.error, "");
  const DryRunViolation violation = expectViolation(run, "binding");
  EXPECT_NE(violation.message.find("argument 8 'layout' of kernel 'ampc_flash_attention_fwd_"),
            std::string::npos)
      << violation.text();
  EXPECT_NE(violation.message.find("but the plan binds heads"), std::string::npos)
      << violation.text();
}

TEST(DryRunDefect, FreedAllocationUsedByALaunch) {
  const LaunchSite site = firstLaunch(tinyPlan());
  const InProcessRun run =
      dryRun(planted(AMPC_PLANT_FREE_ARGUMENT, site.kernel, static_cast<int>(site.argument)));
  const DryRunViolation violation = expectViolation(run, "freed-memory");
  EXPECT_NE(violation.where.find(groupName(site.group)), std::string::npos) << violation.text();
  EXPECT_NE(violation.message.find("freed at call"), std::string::npos) << violation.text();
}

//===----------------------------------------------------------------------===//
// Launch limits: grid, block, registers, shared memory
//===----------------------------------------------------------------------===//

/// Expects the executor's error to be \p check's rejection, naming the
/// group and the source location, and the trace to have the violation.
void expectRejected(const InProcessRun &run, const std::string &check, const std::string &cause) {
  EXPECT_NE(run.error.find(cause), std::string::npos) << run.error;
  expectNamesGroupAndSource(run.error);
  expectViolation(run, check);
}

TEST(DryRunDefect, GridOverTheDeviceLimit) {
  const LaunchSite site = firstLaunch(tinyPlan());
  const InProcessRun run = dryRun(planted(AMPC_PLANT_GRID_Y, site.kernel, 0, 70000));
  expectRejected(run, "launch-config", "is outside the device's");
  EXPECT_NE(run.error.find(groupName(site.group)), std::string::npos) << run.error;
}

TEST(DryRunDefect, BlockOverTheKernelsLaunchBounds) {
  // The plan launches a kernel with twice the block its code was compiled
  // for (its __launch_bounds__, read from the cubin).
  plan::Plan plan = tinyPlan();
  const LaunchSite site = firstLaunch(plan, [](const plan::LaunchStep &l) {
    return l.block[0] <= 512 && l.block[1] == 1 && l.block[2] == 1;
  });
  auto &launch =
      std::get<plan::LaunchStep>(plan.device.microStep.groups[site.group].steps[site.step]);
  launch.block[0] *= 2;
  const InProcessRun run = dryRun(plan, recordingLibraryInProcess().h100());
  expectRejected(run, "launch-config", "__launch_bounds__");
  EXPECT_NE(run.error.find(groupName(site.group)), std::string::npos) << run.error;
}

TEST(DryRunDefect, RegistersOverTheDeviceLimit) {
  AmpcRecordingDevice small = recordingLibraryInProcess().h100();
  small.registersPerBlock = 1024;
  const InProcessRun run = dryRun(tinyPlan(), small);
  expectRejected(run, "registers", "registers per thread");
}

TEST(DryRunDefect, StaticSharedMemoryOverTheDeviceLimit) {
  AmpcRecordingDevice small = recordingLibraryInProcess().h100();
  small.sharedPerBlockOptin = 1024;
  const InProcessRun run = dryRun(tinyPlan(), small);
  expectRejected(run, "shared-memory", "bytes of static");
}

TEST(DryRunDefect, DynamicSharedMemoryWithoutOptingIn) {
  const LaunchSite site = firstLaunch(tinyPlan());
  const InProcessRun run = dryRun(planted(AMPC_PLANT_DYNAMIC_SHARED, site.kernel, 0, 64 * 1024));
  expectRejected(run, "shared-memory", "bytes of dynamic shared memory");
  EXPECT_NE(run.error.find(groupName(site.group)), std::string::npos) << run.error;
}

TEST(DryRunDefect, LaunchShapeOtherThanThePlans) {
  // A grid the device accepts, but not the one the plan computed.
  const LaunchSite site = firstLaunch(tinyPlan());
  const InProcessRun run = dryRun(planted(AMPC_PLANT_GRID_Y, site.kernel, 0, 2));
  EXPECT_EQ(run.error, "");
  const DryRunViolation violation = expectViolation(run, "launch-shape");
  EXPECT_NE(violation.message.find("grid 32x2x1"), std::string::npos) << violation.text();
}

TEST(DryRunDefect, BufferBoundAtTwoAddresses) {
  // One launch reads its input 256 bytes further on than every other use.
  const LaunchSite site = firstLaunch(tinyPlan());
  const InProcessRun run = dryRun(
      planted(AMPC_PLANT_ARGUMENT_OFFSET, site.kernel, static_cast<int>(site.argument), 256));
  const DryRunViolation violation = expectViolation(run, "binding");
  EXPECT_NE(violation.message.find(") is at 0x"), std::string::npos) << violation.text();
}

TEST(DryRunDefect, AStepThatNeverRan) {
  // The trace of a run that skipped one launch of its first micro step.
  InProcessRun run = dryRun(tinyPlan(), recordingLibraryInProcess().h100());
  const LaunchSite site = firstLaunch(tinyPlan());
  for (auto it = run.trace.begin(); it != run.trace.end(); ++it)
    if (it->kind == EventKind::Launch && it->name == site.kernel) {
      run.trace.erase(it);
      break;
    }
  run.report = checkDryRun(tinyPlan(), run.trace, {kOptimizerSteps, 0});
  const DryRunViolation violation = expectViolation(run, "sequence");
  EXPECT_NE(violation.where.find(groupName(site.group)), std::string::npos) << violation.text();
}

//===----------------------------------------------------------------------===//
// The run scalars
//===----------------------------------------------------------------------===//

/// The optimizer step's first launch that reads the run scalars, and the index of that argument.
LaunchSite firstRunScalarsLaunch(const plan::Plan &plan) {
  const plan::DeviceFunction &optimizer = plan.device.optimizerStep;
  for (uint32_t g = 0; g < optimizer.groups.size(); ++g)
    for (uint32_t s = 0; s < optimizer.groups[g].steps.size(); ++s)
      if (const auto *launch = std::get_if<plan::LaunchStep>(&optimizer.groups[g].steps[s]))
        for (size_t a = 0; a < launch->args.size(); ++a)
          if (launch->args[a].kind == plan::ArgKind::RunScalars)
            return {g, s, launch, plan.device.kernels[launch->kernel].entry, a};
  ADD_FAILURE() << "no optimizer launch reads the run scalars";
  return {};
}

TEST(DryRunDefect, RunScalarsHoldingAnotherStep) {
  // The upload that the first optimizer step reads (the last copy into the run-scalar block
  // before the first launch of its kernel, counted among the copies that reach the step's word)
  // writes step 5 instead of 0: the learning-rate schedule would read another step.
  const LaunchSite site = firstRunScalarsLaunch(tinyPlan());
  const InProcessRun clean = dryRun(tinyPlan(), recordingLibraryInProcess().h100());
  uint64_t block = 0;
  for (const Event &event : clean.trace)
    if (event.kind == EventKind::Launch && event.name == site.kernel) {
      block = event.args.at(site.argument);
      break;
    }
  ASSERT_NE(block, 0u);
  int candidates = 0, occurrence = -1;
  for (const Event &event : clean.trace) {
    if (event.kind == EventKind::Launch && event.name == site.kernel)
      break;
    if (event.kind == EventKind::Memcpy && event.what == "htod" && event.args.size() > 1) {
      if (event.address == block)
        occurrence = candidates;
      ++candidates;
    }
  }
  ASSERT_GE(occurrence, 0) << "no upload of the run scalars before " << site.kernel;
  AmpcRecordingPlant plant = planted(AMPC_PLANT_COPY_WORD, "", 1, 5);
  plant.occurrence = occurrence;
  const InProcessRun run = dryRun(plant);
  EXPECT_EQ(run.error, "");
  const DryRunViolation violation = firstOf(run, "binding");
  EXPECT_NE(violation.message.find("'" + site.launch->args[site.argument].name + "' of kernel '" +
                                   site.kernel +
                                   "' points to run scalars holding step 5 in a "
                                   "run where it is 0"),
            std::string::npos)
      << violation.text();
  EXPECT_NE(violation.where.find("optimizer_step group " + std::to_string(site.group) + " "),
            std::string::npos)
      << violation.text();
  EXPECT_NE(violation.where.find("tiny.mlir:"), std::string::npos) << violation.text();
  EXPECT_NE(violation.firstRun.find("optimizer_step run 1 of "), std::string::npos)
      << violation.text();
}

//===----------------------------------------------------------------------===//
// cuBLASLt
//===----------------------------------------------------------------------===//

TEST(DryRunDefect, MatmulLayoutOverItsBuffer) {
  // cuBLASLt's A (the plan's B) gets a leading dimension larger by 64
  // elements: its last column now reaches past the plan's buffer.
  const InProcessRun run = dryRun(planted(AMPC_PLANT_MATMUL_LD, "", 0, 64));
  const DryRunViolation violation = expectViolation(run, "cublaslt-layout");
  EXPECT_NE(violation.message.find("more than the buffer"), std::string::npos) << violation.text();
  EXPECT_NE(violation.where.find("(matmul)"), std::string::npos) << violation.text();
}

TEST(DryRunDefect, MatmulPointerMisaligned) {
  const InProcessRun run = dryRun(planted(AMPC_PLANT_MATMUL_OFFSET, "", 0, 2));
  const DryRunViolation violation = expectViolation(run, "cublaslt-alignment");
  EXPECT_NE(violation.message.find("is 2-byte aligned, but its algorithm was "
                                   "chosen for 256-byte alignment"),
            std::string::npos)
      << violation.text();
}

/// Which of the tiny GPT's micro-step matmuls (counting from 0 in program order) is the first
/// that \p wanted picks, or -1.
int firstMatmul(const std::function<bool(const plan::MatmulStep &)> &wanted) {
  int matmuls = 0;
  for (const plan::DeviceGroup &group : tinyPlan().device.microStep.groups)
    for (const plan::DeviceStep &step : group.steps)
      if (const auto *matmul = std::get_if<plan::MatmulStep>(&step)) {
        if (wanted(*matmul))
          return matmuls;
        ++matmuls;
      }
  return -1;
}

TEST(DryRunDefect, MatmulEpilogueWithoutItsBias) {
  // The first matmul of the micro step that has an epilogue.
  const int occurrence = firstMatmul(
      [](const plan::MatmulStep &matmul) { return matmul.epilogue != plan::Epilogue::None; });
  ASSERT_GE(occurrence, 0);
  AmpcRecordingPlant plant = planted(AMPC_PLANT_MATMUL_NO_BIAS);
  plant.occurrence = occurrence;
  const DryRunViolation violation = expectViolation(dryRun(plant), "cublaslt-epilogue");
  EXPECT_NE(violation.message.find("needs a bias pointer"), std::string::npos) << violation.text();
}

TEST(DryRunDefect, GeluGradientMatmulWithoutItsAux) {
  // The first matmul of the micro step that multiplies by the gelu's derivative (DGELU), which
  // reads the forward's pre-activation through the aux pointer.
  const int occurrence = firstMatmul(
      [](const plan::MatmulStep &matmul) { return matmul.epilogue == plan::Epilogue::DGelu; });
  ASSERT_GE(occurrence, 0);
  AmpcRecordingPlant plant = planted(AMPC_PLANT_MATMUL_NO_AUX);
  plant.occurrence = occurrence;
  const DryRunViolation violation = expectViolation(dryRun(plant), "cublaslt-epilogue");
  EXPECT_NE(violation.message.find("needs an aux pointer"), std::string::npos) << violation.text();
  EXPECT_NE(violation.message.find("epilogue 192"), std::string::npos) << violation.text();
}

/// The trace of a clean run with \p change applied to the first matmul that
/// adds into its accumulator (beta 1), checked again.
InProcessRun withAccumulatingMatmulChanged(const std::function<void(MatmulCall &)> &change) {
  InProcessRun run = dryRun(tinyPlan(), recordingLibraryInProcess().h100());
  EXPECT_GT(run.report.accumulatingMatmuls, 0u) << run.report.summary();
  bool changed = false;
  for (Event &event : run.trace)
    if (event.kind == EventKind::Matmul && event.stream <= 1 && event.matmul.beta == 1.0f &&
        event.matmul.pointerC == event.matmul.pointerD && !changed) {
      change(event.matmul);
      changed = true;
    }
  EXPECT_TRUE(changed) << "no matmul ran with beta 1";
  run.report = checkDryRun(tinyPlan(), run.trace, {kOptimizerSteps, 0});
  return run;
}

TEST(DryRunDefect, AccumulatingMatmulThatOverwrites) {
  // A runtime that dropped beta: the micro step's weight gradient would
  // replace the accumulated one instead of adding to it.
  const InProcessRun run =
      withAccumulatingMatmulChanged([](MatmulCall &call) { call.beta = 0.0f; });
  const DryRunViolation violation = expectViolation(run, "matmul-scale");
  EXPECT_NE(violation.message.find("beta 0.000000, the plan has 1.000000 and 1.000000"),
            std::string::npos)
      << violation.text();
}

TEST(DryRunDefect, AccumulatingMatmulReadsCElsewhere) {
  const InProcessRun run =
      withAccumulatingMatmulChanged([](MatmulCall &call) { call.pointerC += 256; });
  const DryRunViolation violation = expectViolation(run, "matmul-scale");
  EXPECT_NE(violation.message.find("cuBLASLt's C is not D"), std::string::npos) << violation.text();
}

TEST(DryRunDefect, ResidualMatmulReadsTheWrongC) {
  // The attention projection adds the residual stream as C (beta 1, C another buffer than D):
  // a runtime that passed another address would add the wrong values.
  InProcessRun run = dryRun(tinyPlan(), recordingLibraryInProcess().h100());
  bool changed = false;
  for (Event &event : run.trace)
    if (event.kind == EventKind::Matmul && event.stream <= 1 && event.matmul.beta == 1.0f &&
        event.matmul.pointerC != event.matmul.pointerD && !changed) {
      event.matmul.pointerC += 256;
      changed = true;
    }
  ASSERT_TRUE(changed) << "no matmul added a residual C";
  run.report = checkDryRun(tinyPlan(), run.trace, {kOptimizerSteps, 0});
  const DryRunViolation violation = expectViolation(run, "binding");
  EXPECT_NE(violation.message.find("matmul operand C"), std::string::npos) << violation.text();
}

//===----------------------------------------------------------------------===//
// Kernel signatures
//===----------------------------------------------------------------------===//

TEST(DryRunDefect, PlanBindsAnArgumentTheCubinDoesNotHave) {
  plan::Plan plan = tinyPlan();
  const LaunchSite site = firstLaunch(plan);
  auto &launch =
      std::get<plan::LaunchStep>(plan.device.microStep.groups[site.group].steps[site.step]);
  plan::DeviceArgument extra;
  extra.kind = plan::ArgKind::Int64;
  extra.name = "extra";
  launch.args.push_back(extra);
  const InProcessRun run = dryRun(plan, recordingLibraryInProcess().h100());
  const DryRunViolation violation = expectViolation(run, "signature");
  EXPECT_NE(violation.where.find(groupName(site.group)), std::string::npos) << violation.text();
  EXPECT_NE(violation.message.find("arguments"), std::string::npos) << violation.text();
  EXPECT_NE(violation.message.find(", extra)"), std::string::npos) << violation.text();
}

} // namespace
} // namespace ampc::dryrun
