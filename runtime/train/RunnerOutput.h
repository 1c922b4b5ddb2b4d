//===- RunnerOutput.h - What a training run prints and writes ---*- C++ -*-===//
//
// Private to the training runner (Runner.cpp): the failure that ends a run, the metrics log,
// the progress display, the --summary file and the lines the training loop prints. The public
// formatting functions (formatDuration, progressLine, jsonRecord, printModelInfo, ...) are
// declared in Runner.h and defined in RunnerOutput.cpp beside these.
//
//===----------------------------------------------------------------------===//

#ifndef AMPC_RUNTIME_TRAIN_RUNNEROUTPUT_H
#define AMPC_RUNTIME_TRAIN_RUNNEROUTPUT_H

#include "runtime/plan/Plan.h"
#include "runtime/train/Backend.h"
#include "runtime/train/Data.h"
#include "runtime/train/Runner.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

namespace ampc::train::runner {

/// printf into a std::string.
template <typename... Args> std::string format(const char *pattern, Args... args) {
  char buffer[256];
  std::snprintf(buffer, sizeof(buffer), pattern, args...);
  return buffer;
}

/// A failure that ends the run with exit status 1.
struct TrainingFailure : std::runtime_error {
  using runtime_error::runtime_error;
};

/// The parameters' element count.
int64_t countParameters(const plan::Plan &plan);

/// Tokens (language models) or samples per optimizer step.
uint64_t unitsPerStep(const plan::Plan &plan, const Task &task);

/// The note on a skipped step: "step 12: gradients were not finite; the
/// update was skipped and the loss scale halved to 32768", naming the first
/// non-finite instruction when the plan checks for one.
std::string skippedStepLine(const plan::Plan &plan, uint64_t step, double before, double after,
                            const std::string &firstNonFinite);

/// "1.23 GB" (decimal units, as the reports).
std::string formatBytes(uint64_t bytes);

/// The metrics log: one flushed JSON object per line.
class MetricsLog {
public:
  /// Starts \p path afresh, or, resuming after optimizer step
  /// \p resumedStep (> 0), keeps its records up to that step and appends:
  /// the records of steps after the checkpoint, which the resumed run
  /// repeats, and a partly written last line are dropped.
  MetricsLog(const std::string &path, uint64_t resumedStep);
  ~MetricsLog() {
    if (file)
      std::fclose(file);
  }

  /// Appends one record line and flushes it; TrainingFailure when it cannot.
  void write(const std::string &line);

  /// Closes the file; TrainingFailure if the last bytes did not reach it.
  void close();

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

/// --summary: one JSON object for benchmarks and scripts.
void writeSummary(const std::string &path, const plan::Plan &plan, const Task &task,
                  const StepRecord &last, double firstLoss, const std::vector<double> &stepTimes,
                  uint64_t warmup, const BackendMemory &memory, const std::string &where);

} // namespace ampc::train::runner

#endif // AMPC_RUNTIME_TRAIN_RUNNEROUTPUT_H
