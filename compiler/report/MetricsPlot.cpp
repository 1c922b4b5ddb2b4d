//===- MetricsPlot.cpp - `ampc plot`: training metrics logs drawn ---------===//
//
// The logs are parsed line by line with nlohmann::json; the figure is Plot.h's, one panel per
// metric that some run has, each run in its palette colour in every panel.
//
//===----------------------------------------------------------------------===//

#include "compiler/report/MetricsPlot.h"
#include "compiler/report/Plot.h"

#include <nlohmann/json.hpp>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <set>

namespace ampc {

const std::vector<std::pair<double, double>> &MetricsRun::points(const std::string &key) const {
  static const std::vector<std::pair<double, double>> none;
  auto found = series.find(key);
  return found == series.end() ? none : found->second;
}

namespace {

/// "runs/fp16.jsonl" -> "fp16".
std::string stemOf(const std::string &path) {
  std::string name = path.substr(path.find_last_of('/') + 1);
  size_t dot = name.find_last_of('.');
  return dot == std::string::npos || dot == 0 ? name : name.substr(0, dot);
}

/// The whole file, or false with errno set.
bool readFile(const std::string &path, std::string &text) {
  errno = 0;
  std::FILE *file = std::fopen(path.c_str(), "rb");
  if (!file)
    return false;
  char buffer[1 << 16];
  size_t count;
  while ((count = std::fread(buffer, 1, sizeof buffer, file)) > 0)
    text.append(buffer, count);
  bool failed = std::ferror(file);
  int savedErrno = errno;
  std::fclose(file);
  errno = savedErrno ? savedErrno : EIO;
  return !failed;
}

} // namespace

bool readMetricsLog(const std::string &path, MetricsRun &run, std::string &error) {
  std::string text;
  if (!readFile(path, text)) {
    error = "cannot read '" + path + "': " + std::strerror(errno);
    return false;
  }
  run = MetricsRun();
  run.name = stemOf(path);
  size_t lineNumber = 0, start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos)
      end = text.size();
    std::string line = text.substr(start, end - start);
    start = end + 1;
    ++lineNumber;
    if (line.find_first_not_of(" \t\r") == std::string::npos)
      continue;
    nlohmann::json object;
    try {
      object = nlohmann::json::parse(line);
    } catch (const nlohmann::json::parse_error &parseError) {
      error = path + ":" + std::to_string(lineNumber) + ": not valid JSON (at column " +
              std::to_string(parseError.byte) + ")";
      return false;
    }
    if (!object.is_object()) {
      error = path + ":" + std::to_string(lineNumber) + ": not a JSON object";
      return false;
    }
    auto step = object.find("step");
    if (step == object.end() || !step->is_number())
      continue;
    double x = step->get<double>();
    for (auto field = object.begin(); field != object.end(); ++field)
      if (field.key() != "step" && field->is_number() && !field->is_boolean())
        run.series[field.key()].emplace_back(x, field->get<double>());
  }
  if (!run.has("loss")) {
    error = path + ": no line has a numeric \"step\" and \"loss\"";
    return false;
  }
  return true;
}

bool plotMetrics(const std::vector<MetricsRun> &runs, const std::string &path, int width,
                 int height, std::string &error) {
  using namespace plot;
  Figure figure;
  figure.width = width;
  figure.height = height;
  figure.title = "training metrics";
  figure.xLabel = "step";
  figure.integerX = true;

  // Runs with the same file name in different directories are told apart by a number.
  std::vector<std::string> names;
  std::set<std::string> taken;
  for (const MetricsRun &run : runs) {
    std::string name = run.name;
    for (int n = 2; taken.count(name); ++n)
      name = run.name + " (" + std::to_string(n) + ")";
    taken.insert(name);
    names.push_back(name);
  }

  auto anyRunHas = [&](const std::string &key) {
    for (const MetricsRun &run : runs)
      if (run.has(key))
        return true;
    return false;
  };
  /// The series of `key` of every run that has it, in the run's colour.
  auto addSeries = [&](Panel &panel, const std::string &key, LineStyle style,
                       const std::string &suffix) {
    for (size_t r = 0; r < runs.size(); ++r) {
      Series series;
      series.label = names[r] + suffix;
      series.color = paletteColor(r);
      series.style = style;
      for (const auto &[x, y] : runs[r].points(key)) {
        series.x.push_back(x);
        series.y.push_back(y);
      }
      if (!series.x.empty())
        panel.series.push_back(std::move(series));
    }
  };

  bool validation = anyRunHas("val_loss");
  Panel loss;
  loss.title = validation ? "loss (validation dashed)" : "loss";
  loss.yLabel = "loss";
  addSeries(loss, "loss", LineStyle::Solid, "");
  addSeries(loss, "val_loss", LineStyle::Dashed, " val");
  figure.panels.push_back(std::move(loss));

  struct Metric {
    const char *key, *title, *yLabel;
    bool logY;
  };
  for (const Metric &metric : {Metric{"lr", "learning rate", "lr", false},
                               Metric{"grad_norm", "gradient norm", "grad norm", false},
                               Metric{"loss_scale", "loss scale", "scale (log)", true}}) {
    if (!anyRunHas(metric.key))
      continue;
    Panel panel;
    panel.title = metric.title;
    panel.yLabel = metric.yLabel;
    panel.logY = metric.logY;
    addSeries(panel, metric.key, LineStyle::Solid, "");
    figure.panels.push_back(std::move(panel));
  }

  // Throughput: language models count tokens, the others samples.
  bool tokens = anyRunHas("tokens_per_s"), samples = anyRunHas("samples_per_s");
  if (tokens || samples) {
    Panel throughput;
    throughput.title = "throughput";
    throughput.yLabel = tokens && samples ? "tokens/s, samples/s"
                        : tokens          ? "tokens/s"
                                          : "samples/s";
    throughput.includeZero = true;
    addSeries(throughput, "tokens_per_s", LineStyle::Solid, "");
    addSeries(throughput, "samples_per_s", LineStyle::Solid, "");
    figure.panels.push_back(std::move(throughput));
  }

  for (size_t r = 0; r < runs.size(); ++r)
    figure.legend.push_back({names[r], paletteColor(r), LineStyle::Solid});
  if (validation) {
    figure.legend.push_back({"training loss", {0.4, 0.4, 0.4}, LineStyle::Solid});
    figure.legend.push_back({"validation loss", {0.4, 0.4, 0.4}, LineStyle::Dashed});
  }

  error = saveFigure(figure, path);
  return error.empty();
}

} // namespace ampc
