//===- Runner.cpp - The training loop of a standalone training executable -===//

#include "runtime/train/Runner.h"
#include "runtime/train/NumpyFile.h"

#include "runtime/cpu/Executor.h"
#include "runtime/train/Backend.h"
#include "runtime/train/Checkpoint.h"
#include "runtime/train/Distributed.h"
#include "runtime/train/Evaluation.h"
#include "runtime/train/RunCheckpoint.h"
#include "runtime/train/RunnerOutput.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <tuple>

namespace ampc::train {

using namespace runner;

//===----------------------------------------------------------------------===//
// Training
//===----------------------------------------------------------------------===//

namespace {

/// The seed of the random inputs of micro step \p microStep: \p seed itself
/// for the first, so it sees the inputs `ampc eval --seed` would.
uint64_t inputSeed(uint64_t seed, uint64_t microStep) {
  return seed ^ (microStep * 0x9E3779B97F4A7C15ull);
}

/// What a run reads before anything else: the training batches (none for random inputs), the
/// validation set (--val-data) and the initial weights (--init-from).
struct RunInputs {
  std::unique_ptr<BatchSource> source;
  std::optional<ValidationSet> validation;
  ParameterValues initialWeights;
};

RunInputs readRunInputs(const plan::Plan &plan, const RunnerOptions &options, const Task &task) {
  RunInputs inputs;
  DataOptions dataOptions;
  dataOptions.path = options.dataPath;
  dataOptions.format = options.dataFormat;
  dataOptions.seed = options.seed;
  try {
    if (isNumpyPath(options.dataPath)) {
      if (options.dataFormat)
        throw DataError("--data-format is for token files; " + options.dataPath +
                        " holds NumPy arrays");
      inputs.source = makeArrayBatches(plan, options.dataPath, options.seed);
    } else {
      inputs.source = makeBatchSource(task, dataOptions);
    }
    if (!options.valDataPath.empty())
      inputs.validation.emplace(plan, task, options.valDataPath, options.dataFormat,
                                options.seed, options.evalBatches);
  } catch (const DataError &error) {
    throw TrainingFailure(error.what());
  }
  if (!options.initFrom.empty()) {
    try {
      inputs.initialWeights = readWeights(plan, options.initFrom);
    } catch (const safetensors::Error &error) {
      throw TrainingFailure(std::string("--init-from: ") + error.what());
    }
  }
  return inputs;
}

/// Stops a diverged run after optimizer step \p step with TrainingFailure. Without loss scaling
/// a loss or gradient norm that is not finite does; with it, overflowing gradients are expected
/// and handled (the step was skipped), but a loss that has not been finite for more than
/// kMaxNonFiniteLossSteps steps in a row (\p nonFiniteLosses counts them) does not come back,
/// nor does an applied step with a gradient norm that is not finite.
void checkDivergence(bool scaling, uint64_t step, double loss, double gradNorm, bool skipped,
                     uint64_t &nonFiniteLosses) {
  const std::string at = "training diverged at step " + std::to_string(step) + ": ";
  const std::string advice = "try a lower learning rate or another seed";
  if (!scaling) {
    if (!std::isfinite(loss) || !std::isfinite(gradNorm))
      throw TrainingFailure(at + "the loss is " + format("%g", loss) + " and the gradient norm " +
                            format("%g", gradNorm) + "; " + advice);
    return;
  }
  nonFiniteLosses = std::isfinite(loss) ? 0 : nonFiniteLosses + 1;
  if (nonFiniteLosses > kMaxNonFiniteLossSteps)
    throw TrainingFailure(at + "the loss has not been finite for " +
                          std::to_string(nonFiniteLosses) +
                          " consecutive steps, which loss scaling cannot fix (it only handles "
                          "overflowing gradients); " +
                          advice);
  if (!skipped && !std::isfinite(gradNorm))
    throw TrainingFailure(at + "the gradient norm is " + format("%g", gradNorm) +
                          " but the step was applied; " + advice);
}

//===----------------------------------------------------------------------===//
// Checkpoints and stop signals
//===----------------------------------------------------------------------===//

/// The signal (SIGINT or SIGTERM) that asked the run to stop; 0 if none.
volatile std::sig_atomic_t stopSignal = 0;

void onStopSignal(int signal) {
  if (stopSignal) {
    // A second signal: stop now, without the checkpoint.
    std::signal(signal, SIG_DFL);
    std::raise(signal);
    return;
  }
  stopSignal = signal;
}

/// While alive, SIGINT and SIGTERM ask the loop to stop after the current
/// optimizer step instead of killing the process.
class StopSignals {
public:
  StopSignals() {
    stopSignal = 0;
    struct sigaction action = {};
    action.sa_handler = onStopSignal;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESTART;
    sigaction(SIGINT, &action, &previousInt);
    sigaction(SIGTERM, &action, &previousTerm);
  }
  ~StopSignals() {
    sigaction(SIGINT, &previousInt, nullptr);
    sigaction(SIGTERM, &previousTerm, nullptr);
    stopSignal = 0;
  }
  StopSignals(const StopSignals &) = delete;
  StopSignals &operator=(const StopSignals &) = delete;

private:
  struct sigaction previousInt = {}, previousTerm = {};
};

/// One training run, from the options to the final report: what it reads, the backend it runs
/// on, and the state a checkpoint holds. run() is all a caller needs.
class TrainingRun {
public:
  TrainingRun(const plan::Plan &plan, const RunnerOptions &options, const std::string &program,
              const RunnerStreams &streams, DataParallel *parallel)
      : plan(plan), options(options), program(program), streams(streams), parallel(parallel),
        // Data parallel: rank 0 alone logs, checkpoints and writes the summary.
        mainRank(!parallel || parallel->rank() == 0), steps(options.steps),
        accumulation(static_cast<uint64_t>(plan.accumulationSteps)),
        injected(options.injectOverflow.begin(), options.injectOverflow.end()) {}

  /// Trains; returns the exit status (0, or 128 + the signal that stopped the run), or throws
  /// TrainingFailure.
  int run();

private:
  void open();
  void findCheckpointToResume();
  void announce() const;
  void initializeState();
  void restoreState();
  void prepareLoop();
  void runMicroSteps(uint64_t step);
  /// A training run of the backend at \p step (a micro step's global index, or the optimizer
  /// step's): the seed, the step and the run's length.
  cpu::RunOptions runOptions(uint64_t step) const {
    cpu::RunOptions run;
    run.seed = options.seed;
    run.step = step;
    run.training = true;
    run.keepTemporaries = false;
    run.totalSteps = steps;
    return run;
  }
  void recordStep(uint64_t step, const BackendMetrics &metrics);
  void validate(uint64_t step);
  bool writeCheckpoint(uint64_t done);
  int stopped(int signal, uint64_t done, bool written);
  void report();

  const plan::Plan &plan;
  const RunnerOptions &options;
  const std::string &program;
  const RunnerStreams &streams;
  DataParallel *const parallel;
  const bool mainRank;
  const uint64_t steps, accumulation;
  const std::set<uint64_t> injected;

  // What the run reads and where it runs (open()).
  Task task;
  uint64_t perStep = 0;
  bool scaling = false;
  std::unique_ptr<BatchSource> source;
  std::optional<ValidationSet> validation;
  ParameterValues initialWeights;
  std::unique_ptr<TrainingBackend> backend;
  DeviceChoice choice;
  std::map<std::string, std::string> identity;
  std::optional<MetricsLog> log;

  // The checkpoint resumed from, if any.
  std::string resumeFile;
  Checkpoint resumed;
  uint64_t startStep = 0;

  // The state a checkpoint holds besides the buffers.
  std::optional<WeightAverage> ema;
  double bestValLoss = 0;
  uint64_t bestValStep = 0; // 0: no validation loss yet
  double firstLoss = 0, lastLoss = 0, elapsedBefore = 0;
  uint64_t skippedBefore = 0;
  bool floorWarned = false;
  uint64_t nonFiniteLosses = 0; // consecutive steps, with loss scaling

  // The loop's bookkeeping.
  std::optional<Progress> progress;
  StepRecord record;
  std::chrono::steady_clock::time_point start, stepBegan;
  double evalSeconds = 0; // spent validating, not counted as training time
  uint64_t profiled = 0, firstProfiled = 0, warmup = 0;
  std::vector<double> stepTimes; // unprofiled steps after warm-up
  std::string lastCheckpoint;
  // The first batch of the next optimizer step, prepared while the GPU runs
  // this one's optimizer step (see below), and the micro step it is for.
  std::vector<InputData> preparedBatch;
  uint64_t preparedFor = 0;
  bool prepared = false;
};

int TrainingRun::run() {
  // From here on SIGINT and SIGTERM stop the run after an optimizer step.
  const StopSignals stopSignals;
  open();
  announce();
  initializeState();
  if (!resumeFile.empty())
    restoreState();
  else if (!options.resume.empty())
    std::fprintf(streams.out, "no checkpoint in %s yet: starting at step 0\n",
                 options.checkpointDir.c_str());
  std::fflush(streams.out);
  prepareLoop();
  if (startStep == steps) {
    std::fprintf(streams.out, "nothing to train: the checkpoint is at the last step (%llu)\n",
                 static_cast<unsigned long long>(steps));
    log->close();
    return 0;
  }
  try {
    for (uint64_t step = startStep; step < steps; ++step) {
      if (profiled && step == firstProfiled)
        backend->startProfiling();
      stepBegan = std::chrono::steady_clock::now();
      if (parallel) {
        parallel->injectFailures(options, step);
        parallel->beginStep(*backend);
      }
      runMicroSteps(step);
      cpu::RunOptions optimizer = runOptions(step);
      // Data parallel: the ranks sum their gradients and agree on skipping
      // the step (overflow) and on stopping after it (a signal).
      bool stopAll = false;
      if (parallel) {
        parallel->combineRunningStats(*backend, step);
        stopAll = parallel->reduceGradients(*backend, step, stopSignal != 0);
        parallel->prepareOptimizerStep(optimizer);
      }
      backend->runOptimizerStep(optimizer);
      // Rather than wait idle in readMetrics, make the next step's first
      // batch while the GPU runs this optimizer step. A batch is a function
      // of (seed, micro step) alone, so only when it is made changes.
      if (source && step + 1 < steps) {
        preparedFor = parallel ? parallel->globalMicroStep(step + 1, 0) : (step + 1) * accumulation;
        preparedBatch = source->batch(preparedFor);
        prepared = true;
      }
      // The step's one synchronisation on a GPU.
      BackendMetrics metrics = backend->readMetrics();
      if (parallel)
        metrics.loss = parallel->finishStep(*backend, step, metrics.loss);
      recordStep(step, metrics);
      const uint64_t done = step + 1;
      const int signal = !parallel ? static_cast<int>(stopSignal)
                         : stopAll ? (stopSignal ? static_cast<int>(stopSignal) : SIGTERM)
                                   : 0;
      bool written = false;
      if (!options.checkpointDir.empty() &&
          (signal || done == steps ||
           (options.checkpointEvery && done % options.checkpointEvery == 0)))
        written = writeCheckpoint(done);
      if (signal)
        return stopped(signal, done, written);
    }
    log->close();
  } catch (...) {
    progress->finish();
    throw;
  }
  progress->finish();
  report();
  return 0;
}

/// Reads the data, the validation set and the initial weights, opens the backend and finds the
/// checkpoint to resume from, then starts the metrics log: a bad file or flag fails before the
/// log is touched.
void TrainingRun::open() {
  if (plan.optimizerInstructions.empty())
    throw TrainingFailure("this executable's plan has no optimizer step (it was compiled for "
                          "evaluation only); rebuild it with `ampc compile model.mlir -o NAME`");
  // Data first (a bad file is the likeliest mistake), then the executor
  // (which validates the plan), then the log, so a failure leaves no log.
  task = analyzeTask(plan);
  perStep = unitsPerStep(plan, task);
  scaling = plan.lossScaling.mode != plan::LossScaleMode::None;
  RunInputs inputs = readRunInputs(plan, options, task);
  source = std::move(inputs.source);
  validation = std::move(inputs.validation);
  initialWeights = std::move(inputs.initialWeights);
  choice = chooseDevice(options.device, !plan.device.empty(), options.cpuFallback,
                        [&]() -> GpuProbe {
                          GpuProbe probe;
                          CudaChoices choices;
                          choices.timeMatmulAlgorithms = options.matmulAlgorithms == "timed";
                          choices.attention = options.attention;
                          backend = tryMakeCudaBackend(plan, probe, choices);
                          return probe;
                        });
  if (!choice.error.empty())
    throw TrainingFailure(choice.error);
  if (!choice.useCuda)
    backend = makeCpuBackend(plan);
  if (options.profileSteps && !backend->canProfile())
    throw TrainingFailure("--profile times the GPU's kernel groups; this run "
                          "is on the CPU (use --device cuda)");
  // The checkpoint to resume from, checked against this run before the log
  // is touched.
  identity = runIdentity(plan, options, *backend);
  if (parallel)
    parallel->checkRun(options, *backend, identity);
  findCheckpointToResume();
  log.emplace(mainRank ? options.logPath : std::string(), startStep);
}

/// --resume: the checkpoint to continue from (none yet is fine), checked against this run;
/// without it, a checkpoint directory must not hold another run's checkpoints.
void TrainingRun::findCheckpointToResume() {
  if (!options.resume.empty()) {
    try {
      std::tie(resumeFile, resumed) = findResumePoint(options, program, streams);
      if (!resumeFile.empty()) {
        checkIdentity(resumed, resumeFile, identity);
        startStep = std::stoull(resumed.value("step", resumeFile));
        if (startStep > options.steps)
          throw CheckpointError("cannot resume from " + resumeFile + ": it is at step " +
                                std::to_string(startStep) + ", beyond --steps " +
                                std::to_string(options.steps));
      }
    } catch (const CheckpointError &error) {
      throw TrainingFailure(error.what());
    } catch (const std::logic_error &) {
      throw TrainingFailure("cannot resume from " + resumeFile + ": malformed metadata");
    }
  }
  if (options.resume.empty() && !options.checkpointDir.empty()) {
    const auto existing = listCheckpoints(options.checkpointDir);
    if (!existing.empty())
      throw TrainingFailure(options.checkpointDir + " already holds checkpoints of a run (" +
                            fileNameOf(existing.front().second) +
                            "); continue it with --resume latest, or use another directory");
  }
}

/// The lines before the first step: the model, the data, the device and the options in force.
void TrainingRun::announce() const {
  std::string dataDescription = source ? source->describe() : std::string("random inputs");
  std::fprintf(streams.out, "training @%s (%s parameters) for %llu steps on %s; %s\n",
               plan.modelName.c_str(), withCommas(countParameters(plan)).c_str(),
               static_cast<unsigned long long>(steps), dataDescription.c_str(),
               options.logPath.empty() ? "no metrics log (--log FILE writes one)"
                                       : ("metrics -> " + options.logPath).c_str());
  // Where the steps run: a line for the GPU, or why auto chose the CPU.
  const std::string deviceLine = choice.note.empty() ? backend->description() : choice.note;
  if (!deviceLine.empty())
    std::fprintf(streams.out, "%s\n", deviceLine.c_str());
  if (choice.noteIsWarning)
    std::fprintf(streams.err, "%s: %s\n", program.c_str(), choice.note.c_str());
  if (!initialWeights.empty() && options.resume.empty())
    std::fprintf(streams.out, "initial weights from %s\n", options.initFrom.c_str());
  if (validation)
    std::fprintf(streams.out, "validation: %s, every %llu steps%s\n",
                 validation->describe().c_str(), static_cast<unsigned long long>(options.evalEvery),
                 options.evalEma ? ", with the moving average's weights" : "");
  if (parallel)
    std::fprintf(streams.out, "data parallel: %s\n", parallel->describe().c_str());
  if (!source && !plan.inputs.empty())
    std::fprintf(streams.err,
                 "%s: warning: this model's inputs are random each step, so "
                 "there is nothing to learn (%s)\n",
                 program.c_str(), task.reason.c_str());
  if (!options.injectOverflow.empty() && !scaling)
    std::fprintf(streams.err,
                 "%s: warning: --inject-overflow has no effect: this plan "
                 "has no loss scaling\n",
                 program.c_str());
}

/// The parameters from the seed (or --init-from), and the moving average starting from them.
void TrainingRun::initializeState() {
  backend->initializeParameters(options.seed);
  if (!initialWeights.empty())
    writeParameters(plan, *backend, initialWeights);
  if (options.emaDecay)
    ema.emplace(options.emaDecay, readParameters(plan, *backend));
}

/// The buffers and the run's state from the checkpoint resumed from.
void TrainingRun::restoreState() {
  try {
    restoreBuffers(plan, *backend, resumed, resumeFile);
    firstLoss = lastLoss = std::strtod(resumed.value("first_loss", resumeFile).c_str(), nullptr);
    elapsedBefore = std::strtod(resumed.value("elapsed_s", resumeFile).c_str(), nullptr);
    skippedBefore = std::stoull(resumed.value("skipped_steps", resumeFile));
    nonFiniteLosses = std::stoull(resumed.value("non_finite_losses", resumeFile));
    floorWarned = resumed.value("floor_warned", resumeFile) == "1";
    if (resumed.meta.count("best_val_step")) {
      bestValStep = std::stoull(resumed.meta.at("best_val_step"));
      bestValLoss = std::strtod(resumed.value("best_val_loss", resumeFile).c_str(), nullptr);
    }
    if (ema)
      ema->set(restoreAverage(plan, resumed, resumeFile));
  } catch (const CheckpointError &error) {
    throw TrainingFailure(error.what());
  } catch (const std::logic_error &) {
    throw TrainingFailure("cannot resume from " + resumeFile + ": malformed metadata");
  }
  std::fprintf(streams.out, "resuming from %s at step %llu/%llu\n", resumeFile.c_str(),
               static_cast<unsigned long long>(startStep), static_cast<unsigned long long>(steps));
  if (!initialWeights.empty())
    std::fprintf(streams.out, "(--init-from %s is not used: the checkpoint holds the weights)\n",
                 options.initFrom.c_str());
}

/// The progress line, the clock, the record every step updates and the steps --profile times.
void TrainingRun::prepareLoop() {
  progress.emplace(streams, steps, options.quiet);
  start = stepBegan = std::chrono::steady_clock::now();
  record.steps = steps;
  record.tokens = task.kind == TaskKind::Language;
  record.lossScaling = scaling;
  if (std::string(backend->device()) != "cpu")
    record.device = backend->device();
  // --profile: the last K steps (at least the first step stays unprofiled
  // when there are two or more).
  profiled =
      options.profileSteps == 0 ? 0 : std::min(options.profileSteps, steps > 1 ? steps - 1 : steps);
  firstProfiled = steps - profiled;
  warmup = std::min<uint64_t>(3, firstProfiled / 2);
  if (!options.checkpointDir.empty()) {
    const auto existing = listCheckpoints(options.checkpointDir);
    if (!existing.empty())
      lastCheckpoint = existing.front().second;
  }
  record.step = startStep;
  record.units = perStep * startStep;
  record.elapsed = elapsedBefore;
  record.skippedSteps = skippedBefore;
}

/// The micro steps of optimizer step \p step: each sets its batch (or random inputs) and runs
/// forward and backward into the gradient accumulators.
void TrainingRun::runMicroSteps(uint64_t step) {
  const uint64_t localMicroSteps = parallel ? parallel->localMicroSteps() : accumulation;
  for (uint64_t i = 0; i < localMicroSteps; ++i) {
    const uint64_t microStep =
        parallel ? parallel->globalMicroStep(step, i) : step * accumulation + i;
    if (source) {
      // Made on the host while the GPU runs the micro step queued last
      // (on a GPU setInput and runMicroStep only queue work).
      const std::vector<InputData> batch = prepared && preparedFor == microStep
                                               ? std::move(preparedBatch)
                                               : source->batch(microStep);
      prepared = false;
      for (const InputData &input : batch)
        backend->setInput(input.name, input.bytes.data(), input.bytes.size());
    } else if (!plan.inputs.empty()) {
      backend->randomizeInputs(inputSeed(options.seed, microStep));
    }
    cpu::RunOptions run = runOptions(microStep);
    run.injectNonFinite = i == 0 && injected.count(step + 1) > 0 && mainRank;
    if (parallel && i == 0)
      for (const auto &[at, rank] : options.injectOverflowOnRank)
        run.injectNonFinite = run.injectNonFinite || (at == step + 1 && rank == parallel->rank());
    backend->runMicroStep(run);
  }
}

/// Optimizer step \p step's metrics into the record, the moving average, the validation loss,
/// the log and the progress line; throws TrainingFailure when the run has diverged.
void TrainingRun::recordStep(uint64_t step, const BackendMetrics &metrics) {
  const double loss = metrics.loss, gradNorm = metrics.gradNorm;
  record.step = step + 1;
  record.loss = loss;
  record.gradNorm = gradNorm;
  record.learningRate = metrics.learningRate;
  record.units = perStep * record.step;
  const auto now = std::chrono::steady_clock::now();
  record.elapsed = elapsedBefore + std::chrono::duration<double>(now - start).count() - evalSeconds;
  record.stepMilliseconds =
      metrics.deviceMilliseconds >= 0
          ? metrics.deviceMilliseconds
          : std::chrono::duration<double, std::milli>(now - stepBegan).count();
  if (step >= warmup && step < firstProfiled)
    stepTimes.push_back(record.stepMilliseconds);
  if (step == 0)
    firstLoss = loss;
  lastLoss = loss;
  const cpu::LossScaleStatus &status = metrics.lossScale;
  record.lossScale = status.scale;
  record.skipped = status.lastStepSkipped;
  record.skippedSteps = skippedBefore + static_cast<uint64_t>(status.skippedSteps);
  if (ema)
    ema->update(readParameters(plan, *backend));
  record.validated = validation && ((step + 1) % options.evalEvery == 0 || step + 1 == steps);
  if (record.validated)
    validate(step);
  log->write(jsonRecord(record));
  if (scaling && status.lastStepSkipped)
    progress->note(
        skippedStepLine(plan, step + 1, metrics.scaleBefore, status.scale, metrics.firstNonFinite));
  if (status.floorReachedNow && !floorWarned) {
    floorWarned = true;
    progress->finish();
    std::fprintf(streams.err,
                 "%s: warning: the loss scale reached its floor %s; "
                 "gradients keep overflowing \u2014 consider bf16 or a "
                 "lower learning rate\n",
                 program.c_str(), formatScale(status.scale).c_str());
    std::fflush(streams.err);
  }
  progress->show(record);
  checkDivergence(scaling, step + 1, loss, gradNorm, status.lastStepSkipped, nonFiniteLosses);
}

/// The validation loss after optimizer step \p step (with the moving average's weights for
/// --eval-ema), and the best one so far; its time is not training time.
void TrainingRun::validate(uint64_t step) {
  const auto began = std::chrono::steady_clock::now();
  ParameterValues trained;
  if (options.evalEma) {
    trained = readParameters(plan, *backend);
    writeParameters(plan, *backend, ema->values());
  }
  record.valLoss = validation->loss(*backend, options.seed, steps);
  if (options.evalEma)
    writeParameters(plan, *backend, trained);
  if (bestValStep == 0 || record.valLoss < bestValLoss) {
    bestValLoss = record.valLoss;
    bestValStep = step + 1;
  }
  record.bestValLoss = bestValLoss;
  record.bestValStep = bestValStep;
  evalSeconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
}

/// A checkpoint after optimizer step \p done, at a step boundary, so the gradient accumulators
/// it holds are zero. False when it could not be written and --on-checkpoint-error continue
/// says to train on (else that throws TrainingFailure, naming the last good checkpoint).
bool TrainingRun::writeCheckpoint(uint64_t done) {
  Checkpoint checkpoint;
  checkpoint.meta = identity;
  checkpoint.meta["format"] = "ampc training checkpoint";
  checkpoint.meta["step"] = std::to_string(done);
  checkpoint.meta["micro_step"] = std::to_string(done * accumulation);
  checkpoint.meta["units"] = std::to_string(perStep * done);
  checkpoint.meta["gradient_accumulators"] = "zero (written at an optimizer-step boundary)";
  checkpoint.meta["first_loss"] = exactNumber(firstLoss);
  checkpoint.meta["elapsed_s"] = exactNumber(record.elapsed);
  checkpoint.meta["skipped_steps"] = std::to_string(record.skippedSteps);
  checkpoint.meta["non_finite_losses"] = std::to_string(nonFiniteLosses);
  checkpoint.meta["floor_warned"] = floorWarned ? "1" : "0";
  checkpoint.meta["options"] = optionsLine(options);
  checkpoint.meta["training"] = plan.trainingSummary;
  if (bestValStep) {
    checkpoint.meta["best_val_step"] = std::to_string(bestValStep);
    checkpoint.meta["best_val_loss"] = exactNumber(bestValLoss);
  }
  const std::string name = checkpointFileName(done);
  if (parallel) {
    // Every rank takes part in gathering a sharded optimizer state.
    parallel->gatherOptimizerState(*backend);
    checkpoint.meta["world_size"] = std::to_string(parallel->size());
    if (!mainRank)
      return true;
  }
  try {
    captureBuffers(plan, *backend, checkpoint);
    if (ema)
      captureAverage(plan, *ema, checkpoint);
    makeDirectories(options.checkpointDir);
    writeFileAtomically(options.checkpointDir, name, encodeCheckpoint(checkpoint));
  } catch (const CheckpointError &error) {
    const std::string why =
        std::string(error.what()) +
        (lastCheckpoint.empty() ? std::string("; there is no earlier checkpoint")
                                : "; the previous checkpoint " + lastCheckpoint + " is intact");
    if (!options.continueOnCheckpointError)
      throw TrainingFailure(why + " (--on-checkpoint-error continue trains on without it)");
    progress->finish();
    std::fprintf(streams.err, "%s: warning: %s; training goes on\n", program.c_str(), why.c_str());
    std::fflush(streams.err);
    return false;
  }
  lastCheckpoint = options.checkpointDir + "/" + name;
  pruneCheckpoints(options.checkpointDir, options.keep, done);
  return true;
}

/// Ends a run that \p signal stopped after optimizer step \p done (\p written: whether its
/// checkpoint was written); returns the exit status 128 + signal.
int TrainingRun::stopped(int signal, uint64_t done, bool written) {
  log->close();
  progress->finish();
  std::fflush(streams.out);
  std::fprintf(mainRank ? streams.err : streams.out, "%s: stopped by %s after step %llu/%llu; %s\n",
               program.c_str(), signal == SIGINT ? "SIGINT" : "SIGTERM",
               static_cast<unsigned long long>(done), static_cast<unsigned long long>(steps),
               written ? ("checkpoint " + lastCheckpoint + " written (continue with --resume latest)")
                             .c_str()
               : options.checkpointDir.empty() ? "no checkpoint (--checkpoint-dir DIR writes one)"
                                               : "no checkpoint written");
  std::fflush(streams.err);
  return 128 + signal;
}

/// After the last step: the losses, the last checkpoint, the validation loss, the exported
/// weights, the step time, the device memory, the profile and the summary file.
void TrainingRun::report() {
  std::fprintf(streams.out, "trained %llu steps in %.1fs: loss %.4f -> %.4f%s\n",
               static_cast<unsigned long long>(steps), record.elapsed, firstLoss, lastLoss,
               options.logPath.empty() ? "" : ("; metrics in " + options.logPath).c_str());
  if (!options.checkpointDir.empty() &&
      lastCheckpoint == options.checkpointDir + "/" + checkpointFileName(steps))
    std::fprintf(streams.out, "checkpoint: %s\n", lastCheckpoint.c_str());
  if (bestValStep)
    std::fprintf(streams.out, "validation: loss %.4f at the last step, best %.4f at step %llu\n",
                 record.valLoss, bestValLoss, static_cast<unsigned long long>(bestValStep));
  const std::pair<const std::string &, bool> exports[] = {{options.exportWeights, false},
                                                          {options.exportEma, true}};
  for (const auto &[path, average] : exports) {
    if (path.empty() || !mainRank)
      continue;
    try {
      safetensors::writeFile(
          path, weightsFile(plan, average ? ema->values() : readParameters(plan, *backend),
                            options.exportDtype));
    } catch (const safetensors::Error &error) {
      throw TrainingFailure(std::string(error.what()) +
                            (lastCheckpoint.empty()
                                 ? std::string()
                                 : "; the trained weights are in " + lastCheckpoint));
    }
    std::fprintf(streams.out, "%s: %s (%s)\n", average ? "moving average" : "weights", path.c_str(),
                 options.exportDtype.c_str());
  }
  const double stepMedian = stepTimes.empty() ? -1 : median(stepTimes);
  const BackendMemory memory = backend->memory();
  if (!stepTimes.empty())
    std::fprintf(streams.out,
                 "step time: median %.2f ms over %zu steps after %llu of "
                 "warm-up (%s)\n",
                 stepMedian, stepTimes.size(), static_cast<unsigned long long>(warmup),
                 record.device.empty() ? "host clock" : "CUDA events");
  if (memory.measured)
    std::fprintf(streams.out,
                 "device memory: %s allocated (planned %s); %s of %s in use "
                 "on the GPU\n",
                 formatBytes(memory.allocated).c_str(), formatBytes(memory.planned).c_str(),
                 formatBytes(memory.deviceUsed).c_str(), formatBytes(memory.deviceTotal).c_str());
  if (profiled)
    std::fprintf(streams.out, "%s",
                 backend->profileReport(options.profileTop, profiled, stepMedian).c_str());
  std::fflush(streams.out);
  if (!options.summaryPath.empty() && mainRank)
    writeSummary(options.summaryPath, plan, task, record, firstLoss, stepTimes, warmup, memory,
                 backend->description());
}

} // namespace

int runTraining(const plan::Plan &plan, const RunnerOptions &options, const std::string &program,
                const RunnerStreams &streams) {
  if (options.help) {
    std::fputs(runnerUsage(program).c_str(), streams.out);
    return 0;
  }
  if (options.info) {
    printModelInfo(plan, streams.out);
    return 0;
  }
  // Launched by mpirun/srun: the ranks of a data parallel run; ranks other
  // than 0 print only warnings and errors, named after their rank.
  std::unique_ptr<DataParallel> parallel;
  std::string name = program;
  RunnerStreams rankStreams = streams;
  std::unique_ptr<std::FILE, int (*)(std::FILE *)> discard(nullptr, std::fclose);
  try {
    parallel = startDataParallel(plan, options.shardOptimizer, options.distTimeout);
    if (parallel)
      parallel->checkWorldSize();
    if (!parallel)
      if (const std::string warning = checkSingleProcessOptions(options); !warning.empty())
        std::fprintf(streams.err, "%s: warning: %s\n", program.c_str(), warning.c_str());
    if (parallel && parallel->size() > 1)
      name = program + "[rank " + std::to_string(parallel->rank()) + "]";
    if (parallel)
      parallel->world().label = name;
    if (parallel)
      parallel->world().interrupted = [] {
        return std::string(stopSignal == SIGINT    ? "SIGINT"
                           : stopSignal == SIGTERM ? "SIGTERM"
                                                   : "");
      };
    if (parallel && parallel->rank() != 0) {
      discard.reset(std::fopen("/dev/null", "w"));
      rankStreams.out = discard ? discard.get() : streams.out;
      rankStreams.interactive = false;
    }
    return TrainingRun(plan, options, name, rankStreams, parallel.get()).run();
  } catch (const RunMismatchError &error) {
    // Every rank found it: rank 0 says it, and nobody needs aborting.
    const char *rank = std::getenv("OMPI_COMM_WORLD_RANK");
    if (parallel ? parallel->rank() == 0 : !rank || std::string(rank) == "0") {
      std::fflush(streams.out);
      std::fprintf(streams.err, "%s: error: %s\n", program.c_str(), error.what());
      std::fflush(streams.err);
    }
    // No rank leaves before rank 0 has said it (a launcher ends the job at
    // the first rank that fails).
    if (parallel)
      try {
        parallel->world().allGatherDouble(0, "the error report");
      } catch (const std::exception &) {
      }
    return 1;
  } catch (const std::exception &error) {
    std::fflush(streams.out);
    std::fprintf(streams.err, "%s: error: %s\n", name.c_str(), error.what());
    std::fflush(streams.err);
  }
  // Take the other ranks down rather than leave them waiting.
  if (parallel && parallel->size() > 1)
    parallel->world().abortAll(1);
  return 1;
}

} // namespace ampc::train
