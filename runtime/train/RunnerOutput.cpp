//===- RunnerOutput.cpp - What a training run prints and writes ----------===//

#include "runtime/train/RunnerOutput.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <set>

namespace ampc::train {

using runner::countParameters;
using runner::format;
using runner::unitsPerStep;

//===----------------------------------------------------------------------===//
// Formatting
//===----------------------------------------------------------------------===//


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

namespace runner {

int64_t countParameters(const plan::Plan &plan) {
  int64_t total = 0;
  for (const plan::Parameter &parameter : plan.parameters)
    total += plan::numElements(plan.buffers[parameter.buffer]);
  return total;
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
static std::string jsonString(const std::string &text) {
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

MetricsLog::MetricsLog(const std::string &path, uint64_t resumedStep) : path(path) {
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

void MetricsLog::write(const std::string &line) {
  if (!file)
    return;
  errno = 0;
  if (std::fprintf(file, "%s\n", line.c_str()) < 0 || std::fflush(file) != 0)
    throw TrainingFailure("cannot write metrics log " + path + ": " +
                          std::strerror(errno ? errno : EIO));
}

void MetricsLog::close() {
  if (!file)
    return;
  std::FILE *closing = file;
  file = nullptr;
  if (std::fclose(closing) != 0)
    throw TrainingFailure("cannot write metrics log " + path + ": " + std::strerror(errno));
}

} // namespace runner

} // namespace ampc::train
