//===- DefectRun.h - In-process dry runs with a planted defect ------------===//
//
// The dry-run defect tests (DryRunDefectTest, DryRunCaptureTest) train the tiny GPT's plan in
// this process through cuda::Executor over the recording driver, with one defect planted in
// the driver, and look for the violation the checker must report. These are their shared
// pieces: the run, the plant, and the expectations every violation must meet.
//
//===----------------------------------------------------------------------===//

#ifndef AMPC_TEST_UNIT_DRYRUN_DEFECTRUN_H
#define AMPC_TEST_UNIT_DRYRUN_DEFECTRUN_H

#include "DryRunChecker.h"
#include "DryRunTestUtils.h"

#include <functional>
#include <string>
#include <vector>

namespace ampc::dryrun {

/// What one in-process dry run did.
struct InProcessRun {
  std::string error; ///< what the executor threw ("" if nothing)
  std::vector<Event> trace;
  DryRunReport report;
};

/// The tiny GPT's bf16 training plan (two micro steps per optimizer step), loaded once.
const plan::Plan &tinyPlan();

/// Trains \p plan as the training loop does (kOptimizerSteps steps of
/// kAccumulationSteps micro steps, metrics read after each) on \p device,
/// with \p planted in the driver.
InProcessRun dryRun(const plan::Plan &plan, const AmpcRecordingDevice &device,
                    const AmpcRecordingPlant *planted = nullptr);

/// The tiny GPT's plan on the recording H100 with \p planted.
InProcessRun dryRun(const AmpcRecordingPlant &planted);

/// The first violation of \p check (a test failure if there is none).
DryRunViolation firstOf(const InProcessRun &run, const std::string &check);

/// Expects \p text to name a micro_step group and an op of tiny.mlir.
void expectNamesGroupAndSource(const std::string &text);

/// Expects a violation of \p check naming the group and the source location;
/// returns it.
DryRunViolation expectViolation(const InProcessRun &run, const std::string &check);

/// The first launch step of the micro step whose kernel takes a buffer
/// argument, and the index of that argument.
struct LaunchSite {
  uint32_t group = 0, step = 0;
  const plan::LaunchStep *launch = nullptr;
  std::string kernel;
  size_t argument = 0;
};

/// The first such launch step (whose launch \p wanted accepts, when given).
LaunchSite firstLaunch(const plan::Plan &plan,
                       const std::function<bool(const plan::LaunchStep &)> &wanted = nullptr);

/// "micro_step group N ": how a violation names a group.
inline std::string groupName(uint32_t group) {
  return "micro_step group " + std::to_string(group) + " ";
}

/// A defect of \p kind (AMPC_PLANT_*) at \p kernel's argument \p argument, by \p amount.
AmpcRecordingPlant planted(int kind, const std::string &kernel = "", int argument = 0,
                           int64_t amount = 0);

} // namespace ampc::dryrun

#endif // AMPC_TEST_UNIT_DRYRUN_DEFECTRUN_H
