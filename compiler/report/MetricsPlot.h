//===- MetricsPlot.h - `ampc plot`: training metrics logs drawn -*- C++ -*-===//
//
// Reads the JSONL metrics logs training executables write with --log (one JSON object per
// optimizer step, runtime/train/Runner.cpp: step, loss, grad_norm, lr, loss_scale when the run
// scales its loss, tokens_per_s or samples_per_s, and val_loss where a line has one) and draws
// them against the step: loss (val_loss dashed), learning rate, gradient norm, loss scale (log
// axis, only when some run has one) and throughput, one colour per run.
//
//===----------------------------------------------------------------------===//

#ifndef AMPC_COMPILER_REPORT_METRICSPLOT_H
#define AMPC_COMPILER_REPORT_METRICSPLOT_H

#include <map>
#include <string>
#include <utility>
#include <vector>

namespace ampc {

/// One metrics log: every numeric key of its lines as (step, value) points in file order.
/// Keys that are missing, null (a non-finite value), or not numbers are left out.
struct MetricsRun {
  /// The file name without directory and extension: the run's name in the legend.
  std::string name;
  std::map<std::string, std::vector<std::pair<double, double>>> series;

  /// The points of `key` (empty when no line has it).
  const std::vector<std::pair<double, double>> &points(const std::string &key) const;
  bool has(const std::string &key) const { return !points(key).empty(); }
};

/// Reads a metrics log. Blank lines and objects without a numeric "step" are skipped. Returns
/// false with `error` set ("cannot read 'm.jsonl': No such file or directory", "m.jsonl:3: not
/// valid JSON (at column 12)", "m.jsonl:2: not a JSON object", "m.jsonl: no line has a numeric
/// \"step\" and \"loss\"").
bool readMetricsLog(const std::string &path, MetricsRun &run, std::string &error);

/// Draws the runs into `path` (PNG, or SVG for .svg) of `width` x `height` pixels. Returns false
/// with `error` set when the file cannot be written.
bool plotMetrics(const std::vector<MetricsRun> &runs, const std::string &path, int width,
                 int height, std::string &error);

} // namespace ampc

#endif // AMPC_COMPILER_REPORT_METRICSPLOT_H
