//===- Plot.h - line plots drawn with cairo ---------------------*- C++ -*-===//
//
// The plotting behind `ampc plot` and `ampc report memory --plot`: a figure of panels stacked
// over one shared x axis, each with its series (solid or dashed lines), linear or logarithmic y
// axis, ticks at "nice" round numbers (1, 2 or 5 x 10^k), a title and a y-axis label, and a
// legend above the panels. Figures are drawn with cairo and saved as PNG or, for a path ending
// in .svg, SVG. Nothing here knows about MLIR or about what the numbers mean.
//
//===----------------------------------------------------------------------===//

#ifndef AMPC_COMPILER_REPORT_PLOT_H
#define AMPC_COMPILER_REPORT_PLOT_H

#include <optional>
#include <string>
#include <vector>

namespace ampc::plot {

/// A colour, each channel in [0, 1].
struct Color {
  double r = 0, g = 0, b = 0;
};

/// The i-th colour of a ten-colour palette for runs or curves (cycling).
Color paletteColor(size_t index);

enum class LineStyle { Solid, Dashed };

/// One curve: points joined in order (a non-finite x or y breaks the line).
struct Series {
  std::string label;
  std::vector<double> x, y;
  Color color;
  LineStyle style = LineStyle::Solid;
  double width = 1.8;
};

/// A dashed vertical line across a panel at `x`, with labels either side of it at the bottom.
struct Marker {
  double x = 0;
  std::string leftLabel, rightLabel;
};

struct Panel {
  std::string title;
  std::string yLabel;
  bool logY = false;
  /// Make the y range reach 0 (linear axes).
  bool includeZero = false;
  std::vector<Series> series;
  std::vector<Marker> markers;
};

struct LegendEntry {
  std::string label;
  Color color;
  LineStyle style = LineStyle::Solid;
};

struct Figure {
  int width = 1200, height = 900;
  std::string title;
  std::string xLabel;
  /// Ticks of the x axis only at whole numbers (steps, op indices).
  bool integerX = false;
  std::vector<Panel> panels;
  std::vector<LegendEntry> legend;
};

/// Draws `figure` and writes it to `path`: SVG when the path ends in .svg, PNG otherwise.
/// Returns an empty string on success, else why the file could not be written
/// ("No such file or directory").
std::string saveFigure(const Figure &figure, const std::string &path);

//===----------------------------------------------------------------------===//
// Axes
//===----------------------------------------------------------------------===//

/// The "nice" step, 1, 2 or 5 x 10^k, that cuts `span` into at most `maxTicks` intervals and as
/// close to it as possible (at least 1 when `integer`). 1 for an empty or non-finite span.
double niceStep(double span, int maxTicks, bool integer = false);

/// An axis range and its tick values.
struct Ticks {
  double lo = 0, hi = 1;
  std::vector<double> values;
  /// The step between linear ticks (0 for a logarithmic axis).
  double step = 0;
};

/// A linear axis over [lo, hi]: the range widened to multiples of the nice step, and the
/// multiples in it. An empty range (lo == hi) is widened around the value first.
Ticks linearTicks(double lo, double hi, int maxTicks = 6, bool integer = false);

/// A logarithmic axis over [lo, hi] (both > 0): powers of 10 when the range holds at least two,
/// else powers of 2 (loss scales), else the range widened to the neighbouring powers of 2.
Ticks logTicks(double lo, double hi);

/// A tick value written with as many decimals as the step needs ("0.25", "1500", "2e-05").
std::string formatTick(double value, double step);

/// A tick of a logarithmic axis: "1000", "65536", "1e+08".
std::string formatLogTick(double value);

} // namespace ampc::plot

#endif // AMPC_COMPILER_REPORT_PLOT_H
