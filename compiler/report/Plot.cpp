//===- Plot.cpp - line plots drawn with cairo -----------------------------===//
//
// Layout, top to bottom: the figure's title, the legend (wrapped into rows), then the panels,
// each a title line above a framed plot box, sharing the x range; the x tick labels and the x
// label are under the bottom panel only. The left margin fits the widest y tick label of any
// panel, so the boxes line up. Text uses cairo's toy font API (the system's sans-serif font).
//
//===----------------------------------------------------------------------===//

#include "compiler/report/Plot.h"

#include <cairo-svg.h>
#include <cairo.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>

namespace ampc::plot {

Color paletteColor(size_t index) {
  // Tableau's ten colours: distinct, and readable on white.
  static const Color palette[] = {
      {0.122, 0.467, 0.706}, {1.000, 0.498, 0.055}, {0.173, 0.627, 0.173}, {0.839, 0.153, 0.157},
      {0.580, 0.404, 0.741}, {0.549, 0.337, 0.294}, {0.890, 0.467, 0.761}, {0.498, 0.498, 0.498},
      {0.737, 0.741, 0.133}, {0.090, 0.745, 0.812}};
  return palette[index % 10];
}

//===----------------------------------------------------------------------===//
// Axes
//===----------------------------------------------------------------------===//

double niceStep(double span, int maxTicks, bool integer) {
  if (!std::isfinite(span) || span <= 0 || maxTicks < 1)
    return 1;
  double raw = span / maxTicks;
  double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  double step = 10 * magnitude;
  for (double mantissa : {1.0, 2.0, 5.0, 10.0}) {
    if (mantissa * magnitude >= raw * (1 - 1e-9)) {
      step = mantissa * magnitude;
      break;
    }
  }
  return integer ? std::max(step, 1.0) : step;
}

Ticks linearTicks(double lo, double hi, int maxTicks, bool integer) {
  if (!std::isfinite(lo) || !std::isfinite(hi)) {
    lo = 0;
    hi = 1;
  }
  if (hi < lo)
    std::swap(lo, hi);
  if (hi == lo) {
    double widen = lo == 0 ? 1 : std::fabs(lo) * 0.1;
    if (integer)
      widen = std::max(widen, 1.0);
    lo -= widen;
    hi += widen;
  }
  Ticks ticks;
  ticks.step = niceStep(hi - lo, maxTicks, integer);
  double first = std::floor(lo / ticks.step + 1e-9);
  double last = std::ceil(hi / ticks.step - 1e-9);
  ticks.lo = first * ticks.step;
  ticks.hi = last * ticks.step;
  for (double i = first; i <= last + 0.5; ++i) {
    double value = i * ticks.step;
    // Multiples of a step such as 0.1 are not exact: 0 stays 0, not -1e-17.
    ticks.values.push_back(std::fabs(value) < ticks.step * 1e-9 ? 0.0 : value);
  }
  return ticks;
}

Ticks logTicks(double lo, double hi) {
  if (!(hi > 0) || !std::isfinite(hi))
    hi = 1;
  if (!(lo > 0) || !std::isfinite(lo) || lo > hi)
    lo = hi;
  Ticks ticks;
  // At most 8 labelled ticks: every n-th power when there are more.
  auto fill = [&](double base, int first, int last) {
    int every = (last - first) / 8 + 1;
    ticks.lo = std::pow(base, first);
    ticks.hi = std::pow(base, last);
    for (int k = first; k <= last; k += every)
      ticks.values.push_back(std::pow(base, k));
  };
  int decadeLo = int(std::floor(std::log10(lo) + 1e-9));
  int decadeHi = int(std::ceil(std::log10(hi) - 1e-9));
  int decadesInside =
      int(std::floor(std::log10(hi) + 1e-9)) - int(std::ceil(std::log10(lo) - 1e-9));
  if (decadesInside >= 1) {
    fill(10, decadeLo, decadeHi);
    return ticks;
  }
  int powerLo = int(std::floor(std::log2(lo) + 1e-9));
  int powerHi = int(std::ceil(std::log2(hi) - 1e-9));
  if (powerLo == powerHi) {
    --powerLo;
    ++powerHi;
  }
  fill(2, powerLo, powerHi);
  return ticks;
}

std::string formatTick(double value, double step) {
  char text[64];
  if (std::fabs(value) < step * 1e-6 || value == 0)
    return "0";
  int stepExponent = int(std::floor(std::log10(step) + 1e-9));
  if (step >= 1e6 || step < 1e-4) {
    int valueExponent = int(std::floor(std::log10(std::fabs(value)) + 1e-9));
    std::snprintf(text, sizeof text, "%.*e", std::max(0, valueExponent - stepExponent), value);
    return text;
  }
  std::snprintf(text, sizeof text, "%.*f", std::max(0, -stepExponent), value);
  return text;
}

std::string formatLogTick(double value) {
  char text[64];
  if (value >= 1 && value < 1e7 && value == std::floor(value))
    std::snprintf(text, sizeof text, "%.0f", value);
  else if (value >= 1e-4 && value < 1)
    std::snprintf(text, sizeof text, "%g", value);
  else
    std::snprintf(text, sizeof text, "%.3g", value);
  return text;
}

//===----------------------------------------------------------------------===//
// Drawing
//===----------------------------------------------------------------------===//

namespace {

const Color kText{0.15, 0.15, 0.15}, kFrame{0.35, 0.35, 0.35}, kGrid{0.90, 0.90, 0.90},
    kMarker{0.55, 0.55, 0.55};

void setColor(cairo_t *cr, Color color) { cairo_set_source_rgb(cr, color.r, color.g, color.b); }

void setStyle(cairo_t *cr, LineStyle style, double width, double scale) {
  cairo_set_line_width(cr, width * scale);
  if (style == LineStyle::Dashed) {
    double dash[] = {6 * scale, 4 * scale};
    cairo_set_dash(cr, dash, 2, 0);
  } else {
    cairo_set_dash(cr, nullptr, 0, 0);
  }
}

void setFont(cairo_t *cr, double size, bool bold = false) {
  cairo_select_font_face(cr, "sans-serif", CAIRO_FONT_SLANT_NORMAL,
                         bold ? CAIRO_FONT_WEIGHT_BOLD : CAIRO_FONT_WEIGHT_NORMAL);
  cairo_set_font_size(cr, size);
}

double textWidth(cairo_t *cr, const std::string &text) {
  cairo_text_extents_t extents;
  cairo_text_extents(cr, text.c_str(), &extents);
  return extents.x_advance;
}

/// Text with its anchor at (x, y): `alignX` 0 left, 0.5 centred, 1 right; `alignY` the same
/// from the top to the bottom of the font's capital height.
void drawText(cairo_t *cr, const std::string &text, double x, double y, double alignX,
              double alignY) {
  cairo_font_extents_t font;
  cairo_font_extents(cr, &font);
  double capHeight = font.ascent * 0.72;
  cairo_move_to(cr, x - alignX * textWidth(cr, text), y + (1 - alignY) * capHeight);
  cairo_show_text(cr, text.c_str());
}

/// The y range and ticks of a panel from its points (positive ones only on a log axis).
Ticks panelTicks(const Panel &panel, int maxTicks) {
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  for (const Series &series : panel.series)
    for (size_t i = 0; i < series.y.size() && i < series.x.size(); ++i) {
      double y = series.y[i];
      if (!std::isfinite(y) || !std::isfinite(series.x[i]) || (panel.logY && y <= 0))
        continue;
      lo = std::min(lo, y);
      hi = std::max(hi, y);
    }
  if (panel.logY)
    return logTicks(lo, hi);
  if (!std::isfinite(lo)) {
    lo = 0;
    hi = 1;
  }
  if (panel.includeZero) {
    lo = std::min(lo, 0.0);
    hi = std::max(hi, 0.0);
  }
  return linearTicks(lo, hi, maxTicks);
}

std::string yTickLabel(const Panel &panel, const Ticks &ticks, double value) {
  return panel.logY ? formatLogTick(value) : formatTick(value, ticks.step);
}

void drawFigure(cairo_t *cr, const Figure &figure) {
  const double width = figure.width, height = figure.height;
  const double scale = std::clamp(std::min(width / 1200.0, height / 700.0), 0.7, 2.0);
  const double tickFont = 11 * scale, labelFont = 12.5 * scale, panelFont = 13 * scale,
               titleFont = 16 * scale;
  setColor(cr, {1, 1, 1});
  cairo_paint(cr);
  cairo_set_line_join(cr, CAIRO_LINE_JOIN_ROUND);

  // The x range over every panel's points and markers.
  double xLo = std::numeric_limits<double>::infinity(), xHi = -xLo;
  for (const Panel &panel : figure.panels) {
    for (const Series &series : panel.series)
      for (double x : series.x)
        if (std::isfinite(x)) {
          xLo = std::min(xLo, x);
          xHi = std::max(xHi, x);
        }
    for (const Marker &marker : panel.markers) {
      xLo = std::min(xLo, marker.x);
      xHi = std::max(xHi, marker.x);
    }
  }
  if (!std::isfinite(xLo)) {
    xLo = 0;
    xHi = 1;
  }
  const int xMaxTicks = std::max(2, int(width / (110 * scale)));
  Ticks xTicks = linearTicks(xLo, xHi, xMaxTicks, figure.integerX);

  // Vertical layout: the title, the legend rows, the panels, the x axis's labels.
  double top = 10 * scale;
  if (!figure.title.empty())
    top += titleFont + 12 * scale;
  const double right = 24 * scale, sampleLength = 28 * scale, entryGap = 22 * scale;
  const double legendRow = labelFont + 8 * scale;
  std::vector<std::vector<size_t>> legendRows;
  setFont(cr, labelFont);
  {
    double rowWidth = 0, available = width - 2 * right;
    for (size_t i = 0; i < figure.legend.size(); ++i) {
      double entry = sampleLength + 6 * scale + textWidth(cr, figure.legend[i].label) + entryGap;
      if (legendRows.empty() || rowWidth + entry > available) {
        legendRows.emplace_back();
        rowWidth = 0;
      }
      legendRows.back().push_back(i);
      rowWidth += entry;
    }
  }
  const double legendTop = top;
  top += legendRows.size() * legendRow + (legendRows.empty() ? 0 : 6 * scale);
  const double bottom = tickFont + labelFont + 22 * scale;
  const size_t numPanels = std::max<size_t>(1, figure.panels.size());
  const double panelTitle = panelFont + 10 * scale, panelGap = 14 * scale;
  const double panelHeight = (height - top - bottom) / double(numPanels);
  const double boxHeight = std::max(10.0, panelHeight - panelTitle - panelGap);
  const int yMaxTicks = std::max(2, int(boxHeight / (38 * scale)));

  // The left margin: the y label (rotated), then the widest tick label.
  std::vector<Ticks> yTicks;
  double widestTick = 0;
  setFont(cr, tickFont);
  for (const Panel &panel : figure.panels) {
    yTicks.push_back(panelTicks(panel, yMaxTicks));
    for (double value : yTicks.back().values)
      widestTick = std::max(widestTick, textWidth(cr, yTickLabel(panel, yTicks.back(), value)));
  }
  const double left = 12 * scale + labelFont + 10 * scale + widestTick + 8 * scale;
  const double boxWidth = std::max(10.0, width - left - right);
  auto xPixel = [&](double x) {
    return left + (x - xTicks.lo) / (xTicks.hi - xTicks.lo) * boxWidth;
  };

  // The title, centred, and the legend rows, each centred.
  if (!figure.title.empty()) {
    setColor(cr, kText);
    setFont(cr, titleFont, true);
    drawText(cr, figure.title, width / 2, 10 * scale, 0.5, 0);
  }
  setFont(cr, labelFont);
  for (size_t row = 0; row < legendRows.size(); ++row) {
    double rowWidth = 0;
    for (size_t i : legendRows[row])
      rowWidth += sampleLength + 6 * scale + textWidth(cr, figure.legend[i].label) + entryGap;
    double x = (width - rowWidth + entryGap) / 2, y = legendTop + row * legendRow + legendRow / 2;
    for (size_t i : legendRows[row]) {
      const LegendEntry &entry = figure.legend[i];
      setColor(cr, entry.color);
      setStyle(cr, entry.style, 2.2, scale);
      cairo_move_to(cr, x, y);
      cairo_line_to(cr, x + sampleLength, y);
      cairo_stroke(cr);
      setColor(cr, kText);
      drawText(cr, entry.label, x + sampleLength + 6 * scale, y, 0, 0.5);
      x += sampleLength + 6 * scale + textWidth(cr, entry.label) + entryGap;
    }
  }

  for (size_t p = 0; p < figure.panels.size(); ++p) {
    const Panel &panel = figure.panels[p];
    const Ticks &ticks = yTicks[p];
    const double boxTop = top + p * panelHeight + panelTitle, boxBottom = boxTop + boxHeight;
    const double pad = std::min(5 * scale, boxHeight / 10);
    auto yPixel = [&](double y) {
      double t = panel.logY ? (std::log(y) - std::log(ticks.lo)) /
                                  (std::log(ticks.hi) - std::log(ticks.lo))
                            : (y - ticks.lo) / (ticks.hi - ticks.lo);
      // A few pixels inside the frame, so a curve at the range's end is not hidden by it.
      return boxBottom - pad - t * (boxHeight - 2 * pad);
    };

    // Grid lines, then the tick labels.
    setColor(cr, kGrid);
    setStyle(cr, LineStyle::Solid, 1, 1);
    for (double value : ticks.values) {
      double y = std::round(yPixel(value)) + 0.5;
      cairo_move_to(cr, left, y);
      cairo_line_to(cr, left + boxWidth, y);
    }
    for (double value : xTicks.values) {
      double x = std::round(xPixel(value)) + 0.5;
      cairo_move_to(cr, x, boxTop);
      cairo_line_to(cr, x, boxBottom);
    }
    cairo_stroke(cr);
    setColor(cr, kText);
    setFont(cr, tickFont);
    for (double value : ticks.values)
      drawText(cr, yTickLabel(panel, ticks, value), left - 6 * scale, yPixel(value), 1, 0.5);
    if (p + 1 == figure.panels.size())
      for (double value : xTicks.values)
        drawText(cr, formatTick(value, xTicks.step), xPixel(value), boxBottom + 8 * scale, 0.5, 0);

    // The series and markers, clipped to the box.
    cairo_save(cr);
    cairo_rectangle(cr, left, boxTop, boxWidth, boxHeight);
    cairo_clip(cr);
    for (const Marker &marker : panel.markers) {
      double x = xPixel(marker.x);
      setColor(cr, kMarker);
      setStyle(cr, LineStyle::Dashed, 1.2, scale);
      cairo_move_to(cr, x, boxTop);
      cairo_line_to(cr, x, boxBottom);
      cairo_stroke(cr);
      setFont(cr, tickFont);
      drawText(cr, marker.leftLabel, x - 6 * scale, boxBottom - 8 * scale, 1, 1);
      drawText(cr, marker.rightLabel, x + 6 * scale, boxBottom - 8 * scale, 0, 1);
    }
    for (const Series &series : panel.series) {
      setColor(cr, series.color);
      setStyle(cr, series.style, series.width, scale);
      bool drawing = false;
      for (size_t i = 0; i < series.x.size() && i < series.y.size(); ++i) {
        double x = series.x[i], y = series.y[i];
        if (!std::isfinite(x) || !std::isfinite(y) || (panel.logY && y <= 0)) {
          drawing = false;
          continue;
        }
        if (drawing)
          cairo_line_to(cr, xPixel(x), yPixel(y));
        else
          cairo_move_to(cr, xPixel(x), yPixel(y));
        drawing = true;
      }
      // A series of one point is a dot.
      if (series.x.size() == 1 && std::isfinite(series.y[0])) {
        cairo_arc(cr, xPixel(series.x[0]), yPixel(series.y[0]), 2.5 * scale, 0, 2 * M_PI);
        cairo_fill(cr);
      }
      cairo_stroke(cr);
    }
    cairo_restore(cr);

    // The frame, the panel's title and its y label.
    setColor(cr, kFrame);
    setStyle(cr, LineStyle::Solid, 1, 1);
    cairo_rectangle(cr, std::round(left) + 0.5, std::round(boxTop) + 0.5, std::round(boxWidth),
                    std::round(boxHeight));
    cairo_stroke(cr);
    setColor(cr, kText);
    setFont(cr, panelFont, true);
    drawText(cr, panel.title, left, boxTop - 6 * scale, 0, 1);
    setFont(cr, labelFont);
    cairo_save(cr);
    cairo_translate(cr, 12 * scale, (boxTop + boxBottom) / 2);
    cairo_rotate(cr, -M_PI / 2);
    drawText(cr, panel.yLabel, 0, 0, 0.5, 0);
    cairo_restore(cr);
  }

  if (!figure.xLabel.empty()) {
    setColor(cr, kText);
    setFont(cr, labelFont);
    drawText(cr, figure.xLabel, left + boxWidth / 2, height - 8 * scale, 0.5, 1);
  }
}

/// Where cairo's PNG and SVG writers put their bytes: a file, and the first write error.
struct Output {
  std::FILE *file = nullptr;
  int error = 0;
};

cairo_status_t writeBytes(void *closure, const unsigned char *data, unsigned int length) {
  auto *output = static_cast<Output *>(closure);
  if (output->error)
    return CAIRO_STATUS_WRITE_ERROR;
  if (std::fwrite(data, 1, length, output->file) != length) {
    output->error = errno ? errno : EIO;
    return CAIRO_STATUS_WRITE_ERROR;
  }
  return CAIRO_STATUS_SUCCESS;
}

bool endsWith(const std::string &text, const std::string &suffix) {
  return text.size() >= suffix.size() &&
         std::equal(suffix.rbegin(), suffix.rend(), text.rbegin(),
                    [](char a, char b) { return std::tolower(a) == std::tolower(b); });
}

} // namespace

std::string saveFigure(const Figure &figure, const std::string &path) {
  Output output;
  errno = 0;
  output.file = std::fopen(path.c_str(), "wb");
  if (!output.file)
    return std::strerror(errno);
  cairo_status_t status;
  if (endsWith(path, ".svg")) {
    cairo_surface_t *surface =
        cairo_svg_surface_create_for_stream(writeBytes, &output, figure.width, figure.height);
#if CAIRO_VERSION >= CAIRO_VERSION_ENCODE(1, 16, 0)
    cairo_svg_surface_set_document_unit(surface, CAIRO_SVG_UNIT_PX);
#endif
    cairo_t *cr = cairo_create(surface);
    drawFigure(cr, figure);
    cairo_destroy(cr);
    cairo_surface_finish(surface);
    status = cairo_surface_status(surface);
    cairo_surface_destroy(surface);
  } else {
    cairo_surface_t *surface =
        cairo_image_surface_create(CAIRO_FORMAT_RGB24, figure.width, figure.height);
    cairo_t *cr = cairo_create(surface);
    drawFigure(cr, figure);
    cairo_destroy(cr);
    cairo_surface_flush(surface);
    status = cairo_surface_status(surface);
    if (status == CAIRO_STATUS_SUCCESS)
      status = cairo_surface_write_to_png_stream(surface, writeBytes, &output);
    cairo_surface_destroy(surface);
  }
  errno = 0;
  if (std::fclose(output.file) != 0 && !output.error)
    output.error = errno ? errno : EIO;
  if (!output.error && status == CAIRO_STATUS_SUCCESS)
    return "";
  std::remove(path.c_str());
  return output.error ? std::strerror(output.error) : cairo_status_to_string(status);
}

} // namespace ampc::plot
