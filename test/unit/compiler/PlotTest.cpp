//===- PlotTest.cpp - plot axes and the metrics log reader ----------------===//
//
// The tick computation of compiler/report/Plot.h (nice steps of 1, 2 or 5 x 10^k, ranges widened
// to them, logarithmic axes, tick labels), figures saved as PNG and SVG, and the JSONL reader of
// `ampc plot` (compiler/report/MetricsPlot.h) with its errors.
//
//===----------------------------------------------------------------------===//

#include "compiler/report/Plot.h"
#include "compiler/report/MetricsPlot.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>

using namespace ampc;
using namespace ampc::plot;

namespace {

std::string tempPath(const std::string &name) {
  return ::testing::TempDir() + "/ampc-plot-test-" + name;
}

std::string writeFile(const std::string &name, const std::string &text) {
  std::string path = tempPath(name);
  std::ofstream(path) << text;
  return path;
}

std::string readBytes(const std::string &path) {
  std::ifstream file(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(file), {});
}

TEST(PlotTicks, NiceStepIsOneTwoOrFiveTimesAPowerOfTen) {
  EXPECT_DOUBLE_EQ(niceStep(10, 5), 2);
  EXPECT_DOUBLE_EQ(niceStep(10, 10), 1);
  EXPECT_DOUBLE_EQ(niceStep(100, 6), 20);
  EXPECT_DOUBLE_EQ(niceStep(7, 6), 2);
  EXPECT_DOUBLE_EQ(niceStep(0.003, 6), 0.0005);
  EXPECT_DOUBLE_EQ(niceStep(35000, 4), 10000);
  EXPECT_DOUBLE_EQ(niceStep(1, 6), 0.2);
  // Whole-number axes never step by less than 1; an empty span steps by 1.
  EXPECT_DOUBLE_EQ(niceStep(3, 10, /*integer=*/true), 1);
  EXPECT_DOUBLE_EQ(niceStep(0, 5), 1);
  for (double span : {0.37, 1.0, 4.2, 99.0, 123456.0, 1e-7})
    for (int maxTicks : {2, 4, 6, 9}) {
      double step = niceStep(span, maxTicks);
      double mantissa = step / std::pow(10.0, std::floor(std::log10(step) + 1e-9));
      EXPECT_TRUE(std::fabs(mantissa - 1) < 1e-9 || std::fabs(mantissa - 2) < 1e-9 ||
                  std::fabs(mantissa - 5) < 1e-9)
          << span << " " << maxTicks << " -> " << step;
      EXPECT_LE(span / step, maxTicks + 1e-9) << span << " " << maxTicks;
    }
}

TEST(PlotTicks, LinearRangeIsWidenedToTheStep) {
  Ticks ticks = linearTicks(2.31, 9.87, 6);
  EXPECT_DOUBLE_EQ(ticks.step, 2);
  EXPECT_DOUBLE_EQ(ticks.lo, 2);
  EXPECT_DOUBLE_EQ(ticks.hi, 10);
  EXPECT_EQ(ticks.values, (std::vector<double>{2, 4, 6, 8, 10}));

  // Steps: 1..20 on a whole-number axis.
  ticks = linearTicks(1, 20, 10, /*integer=*/true);
  EXPECT_DOUBLE_EQ(ticks.lo, 0);
  EXPECT_DOUBLE_EQ(ticks.hi, 20);
  EXPECT_DOUBLE_EQ(ticks.step, 2);

  // Across 0, with 0 exactly 0.
  ticks = linearTicks(-0.25, 0.3, 6);
  EXPECT_DOUBLE_EQ(ticks.step, 0.1);
  ASSERT_EQ(ticks.values.size(), 7u);
  EXPECT_EQ(ticks.values[3], 0.0);
  EXPECT_FALSE(std::signbit(ticks.values[3]));

  // One value (a constant learning rate) gets a range around it.
  ticks = linearTicks(0.001, 0.001, 5);
  EXPECT_LT(ticks.lo, 0.001);
  EXPECT_GT(ticks.hi, 0.001);
  EXPECT_GE(ticks.values.size(), 2u);
  ticks = linearTicks(0, 0, 5);
  EXPECT_LT(ticks.lo, 0);
  EXPECT_GT(ticks.hi, 0);
}

TEST(PlotTicks, LogAxes) {
  // Several decades: powers of 10 around the range.
  Ticks ticks = logTicks(3, 4000);
  EXPECT_DOUBLE_EQ(ticks.lo, 1);
  EXPECT_DOUBLE_EQ(ticks.hi, 10000);
  EXPECT_EQ(ticks.values, (std::vector<double>{1, 10, 100, 1000, 10000}));
  // Loss scales within one decade: powers of 2.
  ticks = logTicks(16384, 65536);
  EXPECT_EQ(ticks.values, (std::vector<double>{16384, 32768, 65536}));
  // A constant scale: the neighbouring powers of 2.
  ticks = logTicks(65536, 65536);
  EXPECT_EQ(ticks.values, (std::vector<double>{32768, 65536, 131072}));
  // Many decades are thinned to at most 9 ticks.
  ticks = logTicks(1e-10, 1e10);
  EXPECT_LE(ticks.values.size(), 9u);
  EXPECT_DOUBLE_EQ(ticks.values.front(), 1e-10);
}

TEST(PlotTicks, Labels) {
  EXPECT_EQ(formatTick(0, 0.5), "0");
  EXPECT_EQ(formatTick(1.5, 0.5), "1.5");
  EXPECT_EQ(formatTick(2, 0.5), "2.0");
  EXPECT_EQ(formatTick(1500, 500), "1500");
  EXPECT_EQ(formatTick(0.0015, 0.0005), "0.0015");
  EXPECT_EQ(formatTick(2e-5, 1e-5), "2e-05");
  EXPECT_EQ(formatTick(1.5e-5, 5e-6), "1.5e-05");
  EXPECT_EQ(formatTick(3e7, 1e7), "3e+07");
  EXPECT_EQ(formatTick(1e-17, 0.1), "0");
  EXPECT_EQ(formatLogTick(65536), "65536");
  EXPECT_EQ(formatLogTick(0.01), "0.01");
  EXPECT_EQ(formatLogTick(1e8), "1e+08");
}

TEST(PlotFigure, SavesPngAndSvg) {
  Figure figure;
  figure.width = 400;
  figure.height = 300;
  figure.title = "t";
  Panel panel;
  panel.title = "p";
  panel.yLabel = "y";
  panel.series.push_back({"a", {0, 1, 2}, {1, 3, 2}, paletteColor(0)});
  figure.panels.push_back(panel);
  figure.legend.push_back({"a", paletteColor(0)});

  std::string png = tempPath("figure.png");
  EXPECT_EQ(saveFigure(figure, png), "");
  std::string bytes = readBytes(png);
  ASSERT_GT(bytes.size(), 24u);
  EXPECT_EQ(bytes.substr(0, 8), "\x89PNG\r\n\x1a\n");
  auto be32 = [&](size_t at) {
    return (unsigned(uint8_t(bytes[at])) << 24) | (unsigned(uint8_t(bytes[at + 1])) << 16) |
           (unsigned(uint8_t(bytes[at + 2])) << 8) | unsigned(uint8_t(bytes[at + 3]));
  };
  EXPECT_EQ(be32(16), 400u);
  EXPECT_EQ(be32(20), 300u);

  std::string svg = tempPath("figure.svg");
  EXPECT_EQ(saveFigure(figure, svg), "");
  EXPECT_NE(readBytes(svg).find("<svg"), std::string::npos);

  EXPECT_EQ(saveFigure(figure, tempPath("no/such/dir/x.png")), "No such file or directory");
  EXPECT_EQ(saveFigure(figure, tempPath("no/such/dir/x.svg")), "No such file or directory");
}

TEST(MetricsLog, ReadsEveryNumericKey) {
  std::string path = writeFile(
      "run-a.jsonl",
      "{\"step\": 1, \"loss\": 2.5, \"grad_norm\": 3.9, \"lr\": 0.001, \"loss_scale\": 65536, "
      "\"skipped\": false, \"tokens\": 512, \"tokens_per_s\": 9000.5, \"device\": \"cpu\"}\n"
      "\n"
      "{\"step\": 2, \"loss\": null, \"lr\": 0.001, \"val_loss\": 2.7, \"future_key\": [1, 2]}\n"
      "{\"note\": \"a line without a step is skipped\"}\n"
      "{\"step\": 3, \"loss\": 2.25}");
  MetricsRun run;
  std::string error;
  ASSERT_TRUE(readMetricsLog(path, run, error)) << error;
  EXPECT_EQ(run.name, "ampc-plot-test-run-a");
  // A null loss (not finite in the run) is no point.
  EXPECT_EQ(run.points("loss"), (std::vector<std::pair<double, double>>{{1, 2.5}, {3, 2.25}}));
  EXPECT_EQ(run.points("lr").size(), 2u);
  EXPECT_EQ(run.points("val_loss"), (std::vector<std::pair<double, double>>{{2, 2.7}}));
  EXPECT_EQ(run.points("loss_scale"), (std::vector<std::pair<double, double>>{{1, 65536}}));
  EXPECT_TRUE(run.has("tokens_per_s"));
  EXPECT_FALSE(run.has("samples_per_s"));
  EXPECT_FALSE(run.has("skipped"));
  EXPECT_FALSE(run.has("device"));
  EXPECT_FALSE(run.has("future_key"));
}

TEST(MetricsLog, Errors) {
  MetricsRun run;
  std::string error;
  EXPECT_FALSE(readMetricsLog(tempPath("missing.jsonl"), run, error));
  EXPECT_EQ(error, "cannot read '" + tempPath("missing.jsonl") + "': No such file or directory");

  std::string bad =
      writeFile("bad.jsonl", "{\"step\": 1, \"loss\": 2}\n{\"step\": 2, \"loss\": }\n");
  EXPECT_FALSE(readMetricsLog(bad, run, error));
  EXPECT_EQ(error.rfind(bad + ":2: not valid JSON (at column ", 0), 0u) << error;

  std::string array = writeFile("array.jsonl", "[1, 2]\n");
  EXPECT_FALSE(readMetricsLog(array, run, error));
  EXPECT_EQ(error, array + ":1: not a JSON object");

  std::string noLoss = writeFile("no-loss.jsonl", "{\"step\": 1, \"lr\": 0.1}\n");
  EXPECT_FALSE(readMetricsLog(noLoss, run, error));
  EXPECT_EQ(error, noLoss + ": no line has a numeric \"step\" and \"loss\"");

  std::string textStep = writeFile("text-step.jsonl", "{\"step\": \"one\", \"loss\": 1}\n");
  EXPECT_FALSE(readMetricsLog(textStep, run, error));

  std::string empty = writeFile("empty.jsonl", "");
  EXPECT_FALSE(readMetricsLog(empty, run, error));
  EXPECT_EQ(error, empty + ": no line has a numeric \"step\" and \"loss\"");
}

TEST(MetricsLog, PlotsRunsWithAndWithoutOptionalMetrics) {
  std::string fp16 = writeFile(
      "fp16.jsonl", "{\"step\": 1, \"loss\": 3, \"lr\": 0.001, \"grad_norm\": 1, \"loss_scale\": "
                    "65536, \"tokens_per_s\": 100}\n{\"step\": 2, \"loss\": 2.5, \"lr\": 0.001, "
                    "\"grad_norm\": 0.8, \"loss_scale\": 32768, \"tokens_per_s\": 120, "
                    "\"val_loss\": 2.8}\n");
  std::string lossOnly = writeFile("loss-only.jsonl", "{\"step\": 5, \"loss\": 1}\n");
  std::vector<MetricsRun> runs(2);
  std::string error;
  ASSERT_TRUE(readMetricsLog(fp16, runs[0], error)) << error;
  ASSERT_TRUE(readMetricsLog(lossOnly, runs[1], error)) << error;
  std::string png = tempPath("metrics.png");
  ASSERT_TRUE(plotMetrics(runs, png, 640, 480, error)) << error;
  EXPECT_EQ(readBytes(png).substr(1, 3), "PNG");
  EXPECT_FALSE(plotMetrics(runs, tempPath("no/such/dir/m.png"), 640, 480, error));
  EXPECT_EQ(error, "No such file or directory");
}

} // namespace
