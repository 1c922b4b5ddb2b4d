//===- Runner.cpp - The training loop of a standalone training executable -===//

#include "runtime/train/Runner.h"

#include "runtime/cpu/Executor.h"
#include "runtime/train/Backend.h"
#include "runtime/train/Checkpoint.h"
#include "runtime/train/Distributed.h"
#include "runtime/train/Evaluation.h"
#include "runtime/train/RunCheckpoint.h"

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

//===----------------------------------------------------------------------===//
// Formatting
//===----------------------------------------------------------------------===//

namespace {

/// printf into a std::string.
template <typename... Args> std::string format(const char *pattern, Args... args) {
  char buffer[256];
  std::snprintf(buffer, sizeof(buffer), pattern, args...);
  return buffer;
}

} // namespace

std::string formatDuration(double seconds) {
  if (!(seconds >= 0))
    seconds = 0;
  const uint64_t total = static_cast<uint64_t>(seconds);
  const uint64_t hours = total / 3600, minutes = total / 60 % 60, secs = total % 60;
  if (hours > 0)
    return format("%llu:%02llu:%02llu", static_cast<unsigned long long>(hours),
                  static_cast<unsigned long long>(minutes), static_cast<unsigned long long>(secs));
  return format("%llu:%02llu", static_cast<unsigned long long>(minutes),
                static_cast<unsigned long long>(secs));
}

std::string formatRate(double perSecond) {
  if (!std::isfinite(perSecond) || perSecond < 0)
    return "-";
  if (perSecond < 1e3)
    return format("%.1f", perSecond);
  if (perSecond < 1e6)
    return format("%.1fk", perSecond / 1e3);
  if (perSecond < 1e9)
    return format("%.2fM", perSecond / 1e6);
  return format("%.2fG", perSecond / 1e9);
}

std::string jsonNumber(double value) {
  if (!std::isfinite(value))
    return "null";
  return format("%.9g", value);
}

namespace {

double rateOf(const StepRecord &record) {
  return record.elapsed > 0 ? record.units / record.elapsed : 0.0;
}

} // namespace

std::string formatScale(double scale) {
  // Scales are usually powers of two: whole numbers print in full.
  if (scale >= 1 && scale < 1e9 && scale == std::floor(scale))
    return format("%.0f", scale);
  return format("%g", scale);
}

std::string progressLine(const StepRecord &record) {
  const double perStep = record.step ? record.elapsed / record.step : 0.0;
  const double eta = perStep * static_cast<double>(record.steps - record.step);
  // Three decimals for ordinary norms; exponent form for tiny or huge ones.
  const double norm = std::fabs(record.gradNorm);
  const std::string gradNorm =
      format(norm >= 1e-2 && norm < 1e4 ? "%.3f" : "%.2e", record.gradNorm);
  std::string scaling;
  if (record.lossScaling) {
    scaling = "scale " + formatScale(record.lossScale) + " | ";
    if (record.skippedSteps > 0)
      scaling += "skipped " + std::to_string(record.skippedSteps) + " | ";
  }
  const std::string validation = record.validated
                                     ? format("val %.4f%s | ", record.valLoss,
                                              record.bestValStep == record.step ? " (best)" : "")
                                     : std::string();
  return format("step %llu/%llu | loss %.4f | ", static_cast<unsigned long long>(record.step),
                static_cast<unsigned long long>(record.steps), record.loss) +
         validation + format("grad norm %s | lr %.2e | ", gradNorm.c_str(), record.learningRate) +
         scaling + (record.device.empty() ? "" : record.device + " | ") +
         formatRate(rateOf(record)) + (record.tokens ? " tok/s" : " samples/s") + " | " +
         formatDuration(record.elapsed) + " elapsed, ETA " + formatDuration(eta);
}

std::string jsonRecord(const StepRecord &record) {
  const char *unit = record.tokens ? "tokens" : "samples";
  return "{\"step\": " + std::to_string(record.step) + ", \"loss\": " + jsonNumber(record.loss) +
         ", \"grad_norm\": " + jsonNumber(record.gradNorm) +
         ", \"lr\": " + jsonNumber(record.learningRate) +
         (record.lossScaling ? ", \"loss_scale\": " + jsonNumber(record.lossScale) +
                                   ", \"skipped\": " + (record.skipped ? "true" : "false")
                             : std::string()) +
         ", \"" + unit + "\": " + std::to_string(record.units) + ", \"" + unit +
         "_per_s\": " + jsonNumber(rateOf(record)) +
         ", \"elapsed_s\": " + jsonNumber(record.elapsed) +
         ", \"step_ms\": " + jsonNumber(record.stepMilliseconds) +
         (record.device.empty() ? std::string() : ", \"device\": \"" + record.device + "\"") +
         (record.validated ? ", \"val_loss\": " + jsonNumber(record.valLoss) +
                                 ", \"best_val_loss\": " + jsonNumber(record.bestValLoss) +
                                 ", \"best_val_step\": " + std::to_string(record.bestValStep)
                           : std::string()) +
         "}";
}

double median(std::vector<double> values) {
  if (values.empty())
    return 0;
  std::sort(values.begin(), values.end());
  const size_t middle = values.size() / 2;
  return values.size() % 2 ? values[middle] : (values[middle - 1] + values[middle]) / 2;
}

//===----------------------------------------------------------------------===//
// --info
//===----------------------------------------------------------------------===//

namespace {

int64_t countParameters(const plan::Plan &plan) {
  int64_t total = 0;
  for (const plan::Parameter &parameter : plan.parameters)
    total += plan::numElements(plan.buffers[parameter.buffer]);
  return total;
}

/// One line about the task the runner would train \p task on.
std::string describeTask(const Task &task) {
  switch (task.kind) {
  case TaskKind::Language:
    return "language model: batches of " + withCommas(task.batch) + " x " +
           withCommas(task.sequence) + " tokens ('" + task.first.name + "', targets '" +
           task.labels.name + "'), vocabulary " + withCommas(task.classes);
  case TaskKind::Classification:
    return "classifier: batches of " + withCommas(task.batch) + " examples ('" + task.first.name +
           "', labels '" + task.labels.name + "'), " + withCommas(task.classes) + " classes";
  case TaskKind::Unlearnable:
    break;
  }
  return "random inputs (" + task.reason + ")";
}

/// Tokens (language models) or samples per optimizer step.
uint64_t unitsPerStep(const plan::Plan &plan, const Task &task) {
  const uint64_t accumulation = static_cast<uint64_t>(plan.accumulationSteps);
  if (task.kind == TaskKind::Language)
    return static_cast<uint64_t>(task.batch * task.sequence) * accumulation;
  if (task.kind == TaskKind::Classification)
    return static_cast<uint64_t>(task.batch) * accumulation;
  // Without a labels input the first input's leading dim is the batch.
  if (!plan.inputs.empty()) {
    const plan::Buffer &buffer = plan.buffers[plan.inputs.front().buffer];
    if (!buffer.shape.empty())
      return static_cast<uint64_t>(buffer.shape[0]) * accumulation;
  }
  return accumulation;
}

/// The loss-scaling settings in words; "" without loss scaling.
std::string describeLossScaling(const plan::Plan &plan) {
  const plan::LossScaling &scaling = plan.lossScaling;
  switch (scaling.mode) {
  case plan::LossScaleMode::None:
    break;
  case plan::LossScaleMode::Static:
    return "static, scale " + formatScale(scaling.initialScale);
  case plan::LossScaleMode::Dynamic:
    return "dynamic, initial scale " + formatScale(scaling.initialScale) + ", x" +
           format("%g", scaling.growthFactor) + " after " + std::to_string(scaling.growthInterval) +
           " finite steps, x" + format("%g", scaling.backoffFactor) +
           " and the step skipped on overflow" +
           (scaling.minScale > 0 ? ", floor " + formatScale(scaling.minScale)
                                 : std::string(", no floor"));
  }
  return "";
}

} // namespace

void printModelInfo(const plan::Plan &plan, std::FILE *out) {
  const Task task = analyzeTask(plan);
  std::fprintf(out, "model @%s\n", plan.modelName.c_str());
  std::fprintf(out, "parameters: %s in %zu tensor%s\n", withCommas(countParameters(plan)).c_str(),
               plan.parameters.size(), plan.parameters.size() == 1 ? "" : "s");
  std::fprintf(out, "inputs:\n");
  for (const plan::Input &input : plan.inputs) {
    const plan::Buffer &buffer = plan.buffers[input.buffer];
    std::fprintf(out, "  %s: %s %s, use %s", input.name.c_str(), plan::dtypeName(buffer.dtype),
                 plan::shapeToString(buffer.shape).c_str(), plan::inputUseName(input.use));
    if (input.bound)
      std::fprintf(out, ", ids in [0, %lld)", static_cast<long long>(input.bound));
    std::fprintf(out, "\n");
  }
  std::fprintf(out, "accumulation steps: %lld\n", static_cast<long long>(plan.accumulationSteps));
  if (plan.optimizerInstructions.empty())
    std::fprintf(out, "training: none (a forward-only plan)\n");
  else
    std::fprintf(out, "training: %s\n",
                 plan.trainingSummary.empty() ? "(no summary)" : plan.trainingSummary.c_str());
  const std::string scaling = describeLossScaling(plan);
  if (!scaling.empty())
    std::fprintf(out, "loss scaling: %s\n", scaling.c_str());
  if (!plan.parameterCopies.empty()) {
    std::set<std::string> dtypes;
    for (const plan::ParameterCopy &copy : plan.parameterCopies)
      dtypes.insert(plan::dtypeName(plan.buffers[copy.buffer].dtype));
    std::string names;
    for (const std::string &name : dtypes)
      names += (names.empty() ? "" : ", ") + name;
    std::fprintf(out,
                 "parameter copies: %zu (%s), refreshed once per optimizer "
                 "step\n",
                 plan.parameterCopies.size(), names.c_str());
  }
  if (plan.debugNonFinite)
    std::fprintf(out, "non-finite check: on (names the first instruction "
                      "that produces an inf or NaN)\n");
  std::fprintf(out, "task: %s\n", describeTask(task).c_str());
}

//===----------------------------------------------------------------------===//
// Training
//===----------------------------------------------------------------------===//

namespace {

/// The seed of the random inputs of micro step \p microStep: \p seed itself
/// for the first, so it sees the inputs `ampc eval --seed` would.
uint64_t inputSeed(uint64_t seed, uint64_t microStep) {
  return seed ^ (microStep * 0x9E3779B97F4A7C15ull);
}

/// The note on a skipped step: "step 12: gradients were not finite; the
/// update was skipped and the loss scale halved to 32768", naming the first
/// non-finite instruction when the plan checks for one.
std::string skippedStepLine(const plan::Plan &plan, uint64_t step, double before, double after,
                            const std::string &firstNonFinite) {
  std::string line =
      "step " + std::to_string(step) + ": gradients were not finite; the update was skipped";
  if (plan.lossScaling.mode == plan::LossScaleMode::Static)
    line += " (the loss scale stays " + formatScale(after) + ")";
  else if (after == before)
    line += " and the loss scale stays at its floor " + formatScale(after);
  else if (after == before * 0.5)
    line += " and the loss scale halved to " + formatScale(after);
  else
    line += " and the loss scale reduced to " + formatScale(after);
  if (!firstNonFinite.empty())
    line += "; the first non-finite value came from " + firstNonFinite;
  return line;
}

/// A failure that ends the run with exit status 1.
struct TrainingFailure : std::runtime_error {
  using runtime_error::runtime_error;
};

/// The metrics log: one flushed JSON object per line.
class MetricsLog {
public:
  /// Starts \p path afresh, or, resuming after optimizer step
  /// \p resumedStep (> 0), keeps its records up to that step and appends:
  /// the records of steps after the checkpoint, which the resumed run
  /// repeats, and a partly written last line are dropped.
  MetricsLog(const std::string &path, uint64_t resumedStep) : path(path) {
    if (path.empty())
      return;
    std::string kept;
    std::ifstream old(path, std::ios::binary);
    if (resumedStep > 0 && old) {
      std::string contents((std::istreambuf_iterator<char>(old)), std::istreambuf_iterator<char>());
      size_t begin = 0;
      const std::string prefix = "{\"step\": ";
      while (begin < contents.size()) {
        const size_t end = contents.find('\n', begin);
        if (end == std::string::npos || contents.compare(begin, prefix.size(), prefix) != 0)
          break;
        const uint64_t step = std::strtoull(contents.c_str() + begin + prefix.size(), nullptr, 10);
        if (step > resumedStep)
          break;
        kept.append(contents, begin, end + 1 - begin);
        begin = end + 1;
      }
    }
    // Rewritten through a temporary file, so a kill leaves the old log.
    const std::string temporary = path + ".tmp";
    file = std::fopen(kept.empty() ? path.c_str() : temporary.c_str(), "w");
    if (file && !kept.empty()) {
      if (std::fputs(kept.c_str(), file) < 0 || std::fclose(file) != 0 ||
          std::rename(temporary.c_str(), path.c_str()) != 0)
        throw TrainingFailure("cannot write metrics log " + path + ": " + std::strerror(errno));
      file = std::fopen(path.c_str(), "a");
    }
    if (!file)
      throw TrainingFailure("cannot open metrics log " + path + ": " + std::strerror(errno));
  }
  ~MetricsLog() {
    if (file)
      std::fclose(file);
  }

  void write(const std::string &line) {
    if (!file)
      return;
    errno = 0;
    if (std::fprintf(file, "%s\n", line.c_str()) < 0 || std::fflush(file) != 0)
      throw TrainingFailure("cannot write metrics log " + path + ": " +
                            std::strerror(errno ? errno : EIO));
  }

  /// Closes the file; TrainingFailure if the last bytes did not reach it.
  void close() {
    if (!file)
      return;
    std::FILE *closing = file;
    file = nullptr;
    if (std::fclose(closing) != 0)
      throw TrainingFailure("cannot write metrics log " + path + ": " + std::strerror(errno));
  }

private:
  std::string path;
  std::FILE *file = nullptr;
};

/// Shows progress: in place on a terminal, else every few steps.
class Progress {
public:
  Progress(const RunnerStreams &streams, uint64_t steps, bool quiet)
      : streams(streams), interval(std::max<uint64_t>(1, steps / 20)), quiet(quiet) {}

  void show(const StepRecord &record) {
    if (quiet)
      return;
    const std::string line = progressLine(record);
    if (streams.interactive) {
      // Pad over the rest of a longer previous line.
      std::fprintf(streams.out, "\r%s%*s", line.c_str(),
                   static_cast<int>(shown > line.size() ? shown - line.size() : 0), "");
      shown = line.size();
      open = true;
    } else if (record.step % interval == 0 || record.step == record.steps || record.validated) {
      std::fprintf(streams.out, "%s\n", line.c_str());
    }
    std::fflush(streams.out);
  }

  /// Prints \p line on its own line of the progress stream (ending an
  /// in-place progress line first), unless quiet.
  void note(const std::string &line) {
    if (quiet)
      return;
    finish();
    std::fprintf(streams.out, "%s\n", line.c_str());
    std::fflush(streams.out);
  }

  /// Ends an in-place line, before any other output.
  void finish() {
    if (open)
      std::fprintf(streams.out, "\n");
    open = false;
    shown = 0;
  }

private:
  const RunnerStreams &streams;
  uint64_t interval;
  bool quiet;
  size_t shown = 0;
  bool open = false;
};

/// "1.23 GB" (decimal units, as the reports).
std::string formatBytes(uint64_t bytes) {
  const double value = static_cast<double>(bytes);
  if (value >= 1e9)
    return format("%.2f GB", value / 1e9);
  if (value >= 1e6)
    return format("%.1f MB", value / 1e6);
  return format("%.1f kB", value / 1e3);
}

/// \p text as a JSON string literal.
std::string jsonString(const std::string &text) {
  std::string quoted = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\')
      quoted += std::string("\\") + c;
    else if (static_cast<unsigned char>(c) < 0x20)
      quoted += format("\\u%04x", static_cast<unsigned>(c));
    else
      quoted += c;
  }
  return quoted + "\"";
}

/// --summary: one JSON object for benchmarks and scripts.
void writeSummary(const std::string &path, const plan::Plan &plan, const Task &task,
                  const StepRecord &last, double firstLoss, const std::vector<double> &stepTimes,
                  uint64_t warmup, const BackendMemory &memory, const std::string &where) {
  double sum = 0;
  for (double time : stepTimes)
    sum += time;
  const uint64_t perStep = unitsPerStep(plan, task);
  const double medianMs = median(stepTimes);
  std::string json =
      "{\"model\": " + jsonString(plan.modelName) +
      ", \"parameters\": " + std::to_string(countParameters(plan)) +
      ", \"device\": " + jsonString(last.device.empty() ? "cpu" : last.device) +
      ", \"device_description\": " + jsonString(where) +
      ", \"steps\": " + std::to_string(last.step) + ", \"" + (last.tokens ? "tokens" : "samples") +
      "_per_step\": " + std::to_string(perStep) + ", \"first_loss\": " + jsonNumber(firstLoss) +
      ", \"last_loss\": " + jsonNumber(last.loss) + ", \"elapsed_s\": " + jsonNumber(last.elapsed) +
      ", \"warmup_steps\": " + std::to_string(warmup) +
      ", \"timed_steps\": " + std::to_string(stepTimes.size()) +
      ", \"step_ms_median\": " + (stepTimes.empty() ? "null" : jsonNumber(medianMs)) +
      ", \"step_ms_mean\": " + (stepTimes.empty() ? "null" : jsonNumber(sum / stepTimes.size())) +
      ", \"" + (last.tokens ? "tokens" : "samples") + "_per_s\": " +
      (stepTimes.empty() ? "null" : jsonNumber(static_cast<double>(perStep) / (medianMs / 1e3)));
  if (memory.measured)
    json += ", \"memory\": {\"planned_bytes\": " + std::to_string(memory.planned) +
            ", \"allocated_bytes\": " + std::to_string(memory.allocated) +
            ", \"device_used_bytes\": " + std::to_string(memory.deviceUsed) +
            ", \"device_total_bytes\": " + std::to_string(memory.deviceTotal) + "}";
  json += "}\n";
  std::FILE *file = std::fopen(path.c_str(), "w");
  if (!file || std::fputs(json.c_str(), file) < 0 || std::fclose(file) != 0)
    throw TrainingFailure("cannot write the summary " + path + ": " +
                          std::strerror(errno ? errno : EIO));
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

int train(const plan::Plan &plan, const RunnerOptions &options, const std::string &program,
          const RunnerStreams &streams, DataParallel *parallel) {
  // Data parallel: rank 0 alone logs, checkpoints and writes the summary.
  const bool mainRank = !parallel || parallel->rank() == 0;
  // From here on SIGINT and SIGTERM stop the run after an optimizer step.
  const StopSignals stopSignals;
  if (plan.optimizerInstructions.empty())
    throw TrainingFailure("this executable's plan has no optimizer step (it was compiled for "
                          "evaluation only); rebuild it with `ampc compile model.mlir -o NAME`");
  // Data first (a bad file is the likeliest mistake), then the executor
  // (which validates the plan), then the log, so a failure leaves no log.
  const Task task = analyzeTask(plan);
  DataOptions dataOptions;
  dataOptions.path = options.dataPath;
  dataOptions.format = options.dataFormat;
  dataOptions.seed = options.seed;
  std::unique_ptr<BatchSource> source;
  try {
    source = makeBatchSource(task, dataOptions);
  } catch (const DataError &error) {
    throw TrainingFailure(error.what());
  }
  std::optional<ValidationSet> validation;
  if (!options.valDataPath.empty()) {
    try {
      validation.emplace(task, options.valDataPath, options.dataFormat, options.seed,
                         options.evalBatches);
    } catch (const DataError &error) {
      throw TrainingFailure(error.what());
    }
  }
  ParameterValues initialWeights;
  if (!options.initFrom.empty()) {
    try {
      initialWeights = readWeights(plan, options.initFrom);
    } catch (const safetensors::Error &error) {
      throw TrainingFailure(std::string("--init-from: ") + error.what());
    }
  }
  std::unique_ptr<TrainingBackend> backend;
  const DeviceChoice choice =
      chooseDevice(options.device, !plan.device.empty(), options.cpuFallback, [&]() -> GpuProbe {
        GpuProbe probe;
        backend = tryMakeCudaBackend(plan, probe, options.matmulAlgorithms == "timed");
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
  const std::map<std::string, std::string> identity = runIdentity(plan, options, *backend);
  if (parallel)
    parallel->checkRun(options, *backend, identity);
  std::string resumeFile;
  Checkpoint resumed;
  uint64_t startStep = 0;
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
  MetricsLog log(mainRank ? options.logPath : std::string(), startStep);

  const bool tokens = task.kind == TaskKind::Language;
  const uint64_t steps = options.steps;
  const uint64_t accumulation = static_cast<uint64_t>(plan.accumulationSteps);
  const uint64_t perStep = unitsPerStep(plan, task);
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
  const bool scaling = plan.lossScaling.mode != plan::LossScaleMode::None;
  if (!options.injectOverflow.empty() && !scaling)
    std::fprintf(streams.err,
                 "%s: warning: --inject-overflow has no effect: this plan "
                 "has no loss scaling\n",
                 program.c_str());
  const std::set<uint64_t> injected(options.injectOverflow.begin(), options.injectOverflow.end());
  backend->initializeParameters(options.seed);
  if (!initialWeights.empty())
    writeParameters(plan, *backend, initialWeights);
  std::optional<WeightAverage> ema;
  if (options.emaDecay)
    ema.emplace(options.emaDecay, readParameters(plan, *backend));
  double bestValLoss = 0;
  uint64_t bestValStep = 0; // 0: no validation loss yet
  double evalSeconds = 0;   // spent validating, not counted as training time
  double firstLoss = 0, lastLoss = 0, elapsedBefore = 0;
  uint64_t skippedBefore = 0;
  bool floorWarned = false;
  uint64_t nonFiniteLosses = 0; // consecutive steps, with loss scaling
  if (!resumeFile.empty()) {
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
                 static_cast<unsigned long long>(startStep),
                 static_cast<unsigned long long>(steps));
    if (!initialWeights.empty())
      std::fprintf(streams.out, "(--init-from %s is not used: the checkpoint holds the weights)\n",
                   options.initFrom.c_str());
  } else if (!options.resume.empty()) {
    std::fprintf(streams.out, "no checkpoint in %s yet: starting at step 0\n",
                 options.checkpointDir.c_str());
  }
  std::fflush(streams.out);

  Progress progress(streams, steps, options.quiet);
  const auto start = std::chrono::steady_clock::now();
  StepRecord record;
  record.steps = steps;
  record.tokens = tokens;
  record.lossScaling = scaling;
  if (std::string(backend->device()) != "cpu")
    record.device = backend->device();
  // --profile: the last K steps (at least the first step stays unprofiled
  // when there are two or more).
  const uint64_t profiled =
      options.profileSteps == 0 ? 0 : std::min(options.profileSteps, steps > 1 ? steps - 1 : steps);
  const uint64_t firstProfiled = steps - profiled;
  std::vector<double> stepTimes; // unprofiled steps after warm-up
  const uint64_t warmup = std::min<uint64_t>(3, firstProfiled / 2);
  auto stepBegan = std::chrono::steady_clock::now();

  // Checkpoints: after optimizer step `done`, at a step boundary, so the
  // gradient accumulators they hold are zero.
  std::string lastCheckpoint;
  if (!options.checkpointDir.empty()) {
    const auto existing = listCheckpoints(options.checkpointDir);
    if (!existing.empty())
      lastCheckpoint = existing.front().second;
  }
  auto writeCheckpoint = [&](uint64_t done) {
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
      progress.finish();
      std::fprintf(streams.err, "%s: warning: %s; training goes on\n", program.c_str(),
                   why.c_str());
      std::fflush(streams.err);
      return false;
    }
    lastCheckpoint = options.checkpointDir + "/" + name;
    pruneCheckpoints(options.checkpointDir, options.keep, done);
    return true;
  };
  record.step = startStep;
  record.units = perStep * startStep;
  record.elapsed = elapsedBefore;
  record.skippedSteps = skippedBefore;
  if (startStep == steps) {
    std::fprintf(streams.out, "nothing to train: the checkpoint is at the last step (%llu)\n",
                 static_cast<unsigned long long>(steps));
    log.close();
    return 0;
  }
  // The first batch of the next optimizer step, prepared while the GPU runs
  // this one's optimizer step (see below), and the micro step it is for.
  std::vector<InputData> preparedBatch;
  uint64_t preparedFor = 0;
  bool prepared = false;
  try {
    for (uint64_t step = startStep; step < steps; ++step) {
      if (profiled && step == firstProfiled)
        backend->startProfiling();
      stepBegan = std::chrono::steady_clock::now();
      if (parallel)
        parallel->injectFailures(options, step);
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
        cpu::RunOptions run;
        run.seed = options.seed;
        run.step = microStep;
        run.training = true;
        run.keepTemporaries = false;
        run.totalSteps = steps;
        run.injectNonFinite = i == 0 && injected.count(step + 1) > 0 && mainRank;
        if (parallel && i == 0)
          for (const auto &[at, rank] : options.injectOverflowOnRank)
            run.injectNonFinite =
                run.injectNonFinite || (at == step + 1 && rank == parallel->rank());
        backend->runMicroStep(run);
      }
      cpu::RunOptions optimizer;
      optimizer.seed = options.seed;
      optimizer.step = step;
      optimizer.training = true;
      optimizer.keepTemporaries = false;
      optimizer.totalSteps = steps;
      // Data parallel: the ranks sum their gradients and agree on skipping
      // the step (overflow) and on stopping after it (a signal).
      bool stopAll = false;
      if (parallel) {
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
      const double loss = metrics.loss, gradNorm = metrics.gradNorm;
      const double previousScale = metrics.scaleBefore;

      record.step = step + 1;
      record.loss = loss;
      record.gradNorm = gradNorm;
      record.learningRate = metrics.learningRate;
      record.units = perStep * record.step;
      const auto now = std::chrono::steady_clock::now();
      record.elapsed =
          elapsedBefore + std::chrono::duration<double>(now - start).count() - evalSeconds;
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
      if (record.validated) {
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
        evalSeconds +=
            std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
      }
      log.write(jsonRecord(record));
      if (scaling && status.lastStepSkipped)
        progress.note(
            skippedStepLine(plan, step + 1, previousScale, status.scale, metrics.firstNonFinite));
      if (status.floorReachedNow && !floorWarned) {
        floorWarned = true;
        progress.finish();
        std::fprintf(streams.err,
                     "%s: warning: the loss scale reached its floor %s; "
                     "gradients keep overflowing \u2014 consider bf16 or a "
                     "lower learning rate\n",
                     program.c_str(), formatScale(status.scale).c_str());
        std::fflush(streams.err);
      }
      progress.show(record);
      if (!scaling) {
        if (!std::isfinite(loss) || !std::isfinite(gradNorm))
          throw TrainingFailure("training diverged at step " + std::to_string(step + 1) +
                                ": the loss is " + format("%g", loss) + " and the gradient norm " +
                                format("%g", gradNorm) +
                                "; try a lower learning rate or another seed");
      } else {
        // With loss scaling, overflowing gradients are expected and handled
        // (the step was skipped); a loss that is itself not finite is not.
        nonFiniteLosses = std::isfinite(loss) ? 0 : nonFiniteLosses + 1;
        if (nonFiniteLosses > kMaxNonFiniteLossSteps)
          throw TrainingFailure("training diverged at step " + std::to_string(step + 1) +
                                ": the loss has not been finite for " +
                                std::to_string(nonFiniteLosses) +
                                " consecutive steps, which loss scaling cannot fix (it only "
                                "handles overflowing gradients); try a lower learning rate or "
                                "another seed");
        if (!status.lastStepSkipped && !std::isfinite(gradNorm))
          throw TrainingFailure("training diverged at step " + std::to_string(step + 1) +
                                ": the gradient norm is " + format("%g", gradNorm) +
                                " but the step was applied; try a lower "
                                "learning rate or another seed");
      }
      const uint64_t done = step + 1;
      const int signal = !parallel ? static_cast<int>(stopSignal)
                         : stopAll ? (stopSignal ? static_cast<int>(stopSignal) : SIGTERM)
                                   : 0;
      bool written = false;
      if (!options.checkpointDir.empty() &&
          (signal || done == steps ||
           (options.checkpointEvery && done % options.checkpointEvery == 0)))
        written = writeCheckpoint(done);
      if (signal) {
        log.close();
        progress.finish();
        std::fflush(streams.out);
        std::fprintf(
            mainRank ? streams.err : streams.out, "%s: stopped by %s after step %llu/%llu; %s\n",
            program.c_str(), signal == SIGINT ? "SIGINT" : "SIGTERM",
            static_cast<unsigned long long>(done), static_cast<unsigned long long>(steps),
            written ? ("checkpoint " + lastCheckpoint + " written (continue with --resume latest)")
                          .c_str()
            : options.checkpointDir.empty() ? "no checkpoint (--checkpoint-dir DIR writes one)"
                                            : "no checkpoint written");
        std::fflush(streams.err);
        return 128 + signal;
      }
    }
    log.close();
  } catch (...) {
    progress.finish();
    throw;
  }
  progress.finish();
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
  return 0;
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
    return train(plan, options, name, rankStreams, parallel.get());
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
