//===- ExecutorRun.cpp - cuda::Executor: running a function's device steps ===//
//
// Argument resolution (resolveArguments) and everything that queues work on
// the device's stream: uploading the per-run scalars (seed, step, total
// steps) into the run-scalar block the kernels read, running one step (a
// kernel launch, a cuBLASLt matmul, an attention pass through
// ExecutorAttention.cpp, a memset) with errors that name the step and the
// instructions it computes, and running a whole function segment by segment
// (one segment unless data parallelism cuts it), eagerly or through its
// captured CUDA graph, with the device-to-device metrics copies around the
// micro step and the optimizer step.
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/ExecutorState.h"

#include <algorithm>

namespace ampc::cuda {

std::vector<ResolvedArgument> resolveArguments(const plan::LaunchStep &launch,
                                               const AddressMap &addresses, size_t &nextTable) {
  std::vector<ResolvedArgument> resolved;
  resolved.reserve(launch.args.size());
  for (const plan::DeviceArgument &argument : launch.args) {
    ResolvedArgument value;
    switch (argument.kind) {
    case plan::ArgKind::Buffer:
      if (argument.buffer >= addresses.buffers.size() || addresses.buffers[argument.buffer] == 0)
        throw CudaError(CudaErrorKind::InvalidArgument,
                        "argument '" + argument.name + "' names buffer " +
                            std::to_string(argument.buffer) + ", which has no device memory");
      value.value = addresses.buffers[argument.buffer];
      break;
    case plan::ArgKind::Int64:
      value.value = static_cast<uint64_t>(argument.value);
      break;
    case plan::ArgKind::Seed:
    case plan::ArgKind::Step:
    case plan::ArgKind::TotalSteps:
      // A captured graph would replay the value of its first run.
      throw CudaError(CudaErrorKind::InvalidArgument,
                      "argument '" + argument.name + "' passes the " +
                          plan::argKindName(argument.kind) +
                          " by value, which a CUDA graph cannot replay: recompile the model");
    case plan::ArgKind::RunScalars:
      value.value = addresses.runScalars;
      break;
    case plan::ArgKind::Scratch:
      value.value = addresses.scratch + static_cast<uint64_t>(argument.value);
      break;
    case plan::ArgKind::Table:
      if (nextTable >= addresses.tables.size())
        throw CudaError(CudaErrorKind::InvalidArgument,
                        "argument '" + argument.name + "' is a table the executor did not build");
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

namespace {

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
  case plan::Epilogue::DGelu:
    return MatmulEpilogue::GeluGrad;
  }
  return MatmulEpilogue::None;
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

//===----------------------------------------------------------------------===//
// Running
//===----------------------------------------------------------------------===//

/// Queues the upload of \p run's seed, step and total steps into the
/// run-scalar block, unless the block already holds them. The bytes go
/// through a pinned staging slot (stageCopy), so the call does not wait for
/// the stream, and the copy is ordered on the stream between the previous
/// function's graph and this one's. Never called during a capture: a
/// replayed graph would restore the captured values.
void Executor::Impl::uploadRunScalars(const cpu::RunOptions &run) {
  plan::RunScalarBlock wanted;
  wanted.seed = run.seed;
  wanted.step = run.step;
  wanted.totalSteps = run.totalSteps;
  if (runScalarsHeld && wanted.seed == heldRunScalars.seed && wanted.step == heldRunScalars.step &&
      wanted.totalSteps == heldRunScalars.totalSteps)
    return;
  stageCopy(runScalarStaging, runScalars, &wanted, sizeof(wanted));
  heldRunScalars = wanted;
  runScalarsHeld = true;
}

/// Queues step \p s of group \p g; any CudaError names the step, the
/// group and the instructions it computes.
void Executor::Impl::runStep(FunctionState &f, size_t g, size_t s) {
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
      device.memsetAsync(address(memset->buffer), 0, bufferBytes(plan.buffers[memset->buffer]));
    }
  } catch (const CudaError &error) {
    throw CudaError(error.kind(), std::string(error.what()) + " [" + describeStep(f, g, s) + "]",
                    error.code());
  }
}

std::string Executor::Impl::describeStep(const FunctionState &f, size_t g, size_t s) const {
  const plan::DeviceGroup &group = f.program->groups[g];
  const plan::DeviceStep &step = group.steps[s];
  std::string what = plan::deviceStepName(step);
  if (const auto *launch = std::get_if<plan::LaunchStep>(&step))
    what += " of " + plan.device.kernels.at(launch->kernel).entry;
  return std::string(planFunctionName(f.which)) + " group " + std::to_string(g) + " (" +
         group.kind + "), step " + std::to_string(s) + " (" + what + "), computing " +
         describeInstructions(*f.instructions, group.instructions);
}

std::pair<MatmulDesc, MatmulOperands>
Executor::Impl::matmulCall(const plan::MatmulStep &step) const {
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
  return {desc, operands};
}

void Executor::Impl::runMatmul(const plan::MatmulStep &step) {
  const auto [desc, operands] = matmulCall(step);
  matmul->run(desc, operands);
}

void Executor::Impl::chooseMatmulAlgorithms() {
  for (const FunctionState *f : {&micro, &optimizer})
    for (size_t g = 0; g < f->program->groups.size(); ++g)
      for (size_t s = 0; s < f->program->groups[g].steps.size(); ++s) {
        const auto *mm = std::get_if<plan::MatmulStep>(&f->program->groups[g].steps[s]);
        if (!mm)
          continue;
        // (A dgelu epilogue only reads its aux.)
        const bool timed =
            options.matmulSelection == MatmulSelection::Timed && writableWhileBuilding(mm->d) &&
            (mm->epilogue == plan::Epilogue::DGelu || writableWhileBuilding(mm->aux)) &&
            (mm->epilogue != plan::Epilogue::BGradB || writableWhileBuilding(mm->bias));
        const auto [desc, operands] = matmulCall(*mm);
        try {
          matmul->prepare(desc, operands,
                          timed ? MatmulSelection::Timed : MatmulSelection::Heuristic);
        } catch (const CudaError &error) {
          throw CudaError(error.kind(),
                          std::string(error.what()) + " [" + describeStep(*f, g, s) + "]",
                          error.code());
        }
      }
}

Kernel &Executor::Impl::kernelAt(uint32_t index) {
  const plan::DeviceKernel &kernel = plan.device.kernels.at(index);
  return modules.at(kernel.module)->kernel(kernel.entry);
}

void Executor::Impl::runGroupRange(FunctionState &f, size_t first, size_t last) {
  for (size_t g = first; g < last; ++g)
    for (size_t s = 0; s < f.program->groups[g].steps.size(); ++s)
      runStep(f, g, s);
}

/// Runs every segment of \p f through its graph (eagerly without graphs),
/// after the upload of this run's scalars.
void Executor::Impl::runFunction(FunctionState &f, const cpu::RunOptions &run) {
  if (f.readsRunScalars)
    uploadRunScalars(run);
  f.replayed = 0;
  if (profiling) {
    runProfiled(f);
    if (f.which == PlanFunction::MicroStep && microObserver)
      microObserver(f.program->groups.size());
    return;
  }
  // Data parallel: after a segment ends the observer may queue work on
  // another stream that waits for it.
  const bool observe = f.which == PlanFunction::MicroStep && static_cast<bool>(microObserver);
  for (Segment &segment : f.segments) {
    if (!options.useGraphs) {
      runGroupRange(f, segment.first, segment.last);
      if (observe)
        microObserver(segment.last);
      continue;
    }
    if (!segment.graph)
      segment.graph = std::make_unique<GraphCapture>(
          device, std::string(planFunctionName(f.which)) + " groups " +
                      std::to_string(segment.first) + ".." + std::to_string(segment.last - 1));
    if (segment.graph->mode() == GraphCapture::Mode::Replaying)
      ++f.replayed;
    segment.graph->run([&] { runGroupRange(f, segment.first, segment.last); });
    if (observe)
      microObserver(segment.last);
  }
}

void Executor::Impl::runProfiled(FunctionState &f) {
  const size_t groups = f.program->groups.size();
  if (f.groupEvents.size() != groups + 1) {
    f.groupEvents.clear();
    for (size_t g = 0; g <= groups; ++g)
      f.groupEvents.push_back(std::make_unique<Event>(device));
    f.groupMilliseconds.assign(groups, 0.0);
  }
  for (size_t g = 0; g < groups; ++g) {
    f.groupEvents[g]->record();
    runGroupRange(f, g, g + 1);
  }
  f.groupEvents[groups]->record();
  f.groupEvents[groups]->synchronize();
  for (size_t g = 0; g < groups; ++g)
    f.groupMilliseconds[g] += Event::elapsedMilliseconds(*f.groupEvents[g], *f.groupEvents[g + 1]);
  ++f.profiledRuns;
}

void Executor::Impl::markStepStart() {
  if (stepOpen)
    return;
  if (!stepStart) {
    stepStart = std::make_unique<Event>(device);
    stepEnd = std::make_unique<Event>(device);
  }
  stepStart->record();
  stepOpen = true;
}

void Executor::Impl::runMicroStep(const cpu::RunOptions &run) {
  requireParameters();
  markStepStart();
  runFunction(micro, run);
  // The loss lives in the arena, which the next function overwrites:
  // keep a copy in this micro step's metrics slot.
  const uint64_t slot = run.step % static_cast<uint64_t>(plan.accumulationSteps);
  device.copyOnDeviceAsync(metrics + 8 * slot, address(plan.loss),
                           plan::dtypeBytes(plan.buffers[plan.loss].dtype));
  microStepsSinceOptimizer = std::min<uint64_t>(microStepsSinceOptimizer + 1,
                                                static_cast<uint64_t>(plan.accumulationSteps));
  lastMicroSlot = slot;
  if (run.injectNonFinite && plan.lossScaling.mode != plan::LossScaleMode::None) {
    static const float one = 1.0f;
    device.copyToDeviceAsync(address(plan.lossScaling.foundNonFinite), &one, 4);
  }
}

void Executor::Impl::runOptimizerStep(const cpu::RunOptions &run) {
  requireParameters();
  const uint64_t base = 8 * static_cast<uint64_t>(plan.accumulationSteps);
  const bool scaling = plan.lossScaling.mode != plan::LossScaleMode::None;
  if (scaling) {
    device.copyOnDeviceAsync(metrics + base + 16, address(plan.lossScaling.scale), 4);
    device.copyOnDeviceAsync(metrics + base + 24, address(plan.lossScaling.appliedSteps), 4);
    device.copyOnDeviceAsync(metrics + base + 32, address(plan.lossScaling.floorHits), 4);
  }
  runFunction(optimizer, run);
  device.copyOnDeviceAsync(metrics + base, address(plan.gradNorm),
                           plan::dtypeBytes(plan.buffers[plan.gradNorm].dtype));
  device.copyOnDeviceAsync(metrics + base + 8, address(plan.learningRate),
                           plan::dtypeBytes(plan.buffers[plan.learningRate].dtype));
  if (stepOpen) {
    stepEnd->record();
    stepOpen = false;
    stepTimed = true;
  }
  ++optimizerSteps;
  lossesForMean = microStepsSinceOptimizer;
  microStepsSinceOptimizer = 0;
}

} // namespace ampc::cuda
