//===- DefectRun.cpp - In-process dry runs with a planted defect ----------===//

#include "DefectRun.h"

#include "runtime/cuda/Executor.h"

#include <gtest/gtest.h>

namespace ampc::dryrun {

const plan::Plan &tinyPlan() {
  static const plan::Plan plan = plan::loadPlan(AMPC_DRYRUN_TINY_PLAN);
  return plan;
}

InProcessRun dryRun(const plan::Plan &plan, const AmpcRecordingDevice &device,
                    const AmpcRecordingPlant *planted) {
  const RecordingLibrary &library = recordingLibraryInProcess();
  library.reset(&device);
  library.plant(planted);
  InProcessRun run;
  try {
    cuda::DeviceOptions options;
    options.api = library.api;
    cuda::Device gpu(options);
    cuda::Executor executor(plan, gpu);
    executor.initializeParameters(0);
    for (uint64_t step = 0; step < kOptimizerSteps; ++step) {
      for (uint64_t i = 0; i < kAccumulationSteps; ++i) {
        const uint64_t micro = step * kAccumulationSteps + i;
        executor.randomizeInputs(micro);
        cpu::RunOptions options;
        options.step = micro;
        options.totalSteps = kOptimizerSteps;
        options.training = true;
        executor.runMicroStep(options);
      }
      cpu::RunOptions options;
      options.step = step;
      options.totalSteps = kOptimizerSteps;
      options.training = true;
      executor.runOptimizerStep(options);
      executor.readMetrics();
    }
  } catch (const std::exception &error) {
    run.error = error.what();
  }
  library.plant(nullptr);
  run.trace = library.events();
  run.report = checkDryRun(plan, run.trace, {kOptimizerSteps, 0});
  return run;
}

InProcessRun dryRun(const AmpcRecordingPlant &planted) {
  return dryRun(tinyPlan(), recordingLibraryInProcess().h100(), &planted);
}

DryRunViolation firstOf(const InProcessRun &run, const std::string &check) {
  const std::vector<DryRunViolation> found = run.report.of(check);
  if (found.empty()) {
    ADD_FAILURE() << "no '" << check << "' violation; the report:\n"
                  << run.report.summary() << "\nthe error: " << run.error;
    return {};
  }
  return found.front();
}

void expectNamesGroupAndSource(const std::string &text) {
  EXPECT_NE(text.find("micro_step group "), std::string::npos) << text;
  EXPECT_NE(text.find("tiny.mlir:"), std::string::npos) << text;
}

DryRunViolation expectViolation(const InProcessRun &run, const std::string &check) {
  const DryRunViolation violation = firstOf(run, check);
  expectNamesGroupAndSource(violation.where);
  return violation;
}

LaunchSite firstLaunch(const plan::Plan &plan,
                       const std::function<bool(const plan::LaunchStep &)> &wanted) {
  const plan::DeviceFunction &micro = plan.device.microStep;
  for (uint32_t g = 0; g < micro.groups.size(); ++g)
    for (uint32_t s = 0; s < micro.groups[g].steps.size(); ++s)
      if (const auto *launch = std::get_if<plan::LaunchStep>(&micro.groups[g].steps[s]))
        for (size_t a = 0; a < launch->args.size(); ++a)
          if (launch->args[a].kind == plan::ArgKind::Buffer && (!wanted || wanted(*launch)))
            return {g, s, launch, plan.device.kernels[launch->kernel].entry, a};
  ADD_FAILURE() << "no launch step found";
  return {};
}

AmpcRecordingPlant planted(int kind, const std::string &kernel, int argument,
                           int64_t amount) {
  static std::string name; // the plant keeps a pointer
  name = kernel;
  AmpcRecordingPlant plant = {};
  plant.kind = kind;
  plant.kernel = name.c_str();
  plant.argument = argument;
  plant.amount = amount;
  return plant;
}

} // namespace ampc::dryrun
