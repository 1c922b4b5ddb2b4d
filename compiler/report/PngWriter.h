//===- PngWriter.h - a minimal RGB canvas saved as PNG ----------*- C++ -*-===//
//
// Enough raster graphics for `ampc report memory --plot`: a canvas of RGB pixels with lines and
// filled rectangles, written as an 8-bit RGB PNG (stored, uncompressed deflate blocks; no zlib).
//
//===----------------------------------------------------------------------===//

#ifndef AMPC_COMPILER_REPORT_PNGWRITER_H
#define AMPC_COMPILER_REPORT_PNGWRITER_H

#include <cstdint>
#include <string>
#include <vector>

namespace ampc {

struct Rgb {
  uint8_t r = 0, g = 0, b = 0;
};

class Canvas {
public:
  Canvas(int width, int height, Rgb background = {255, 255, 255});
  int width() const { return w; }
  int height() const { return h; }
  void set(int x, int y, Rgb color);
  void fillRect(int x0, int y0, int x1, int y1, Rgb color);
  /// A line `thickness` pixels wide; `dash` > 0 draws dashes of that many pixels.
  void line(double x0, double y0, double x1, double y1, Rgb color, int thickness = 1, int dash = 0);
  /// Text in a 5x7 pixel font scaled by `scale` (digits, letters, ' ', '.', '%', '-', ':', '/').
  void text(int x, int y, const std::string &text, Rgb color, int scale = 1);
  /// Writes the PNG; false (with errno set by the failed write) when the file cannot be
  /// written completely.
  bool savePng(const std::string &path) const;
  /// The PNG file's bytes.
  std::vector<uint8_t> encodePng() const;

private:
  int w, h;
  std::vector<Rgb> pixels;
};

} // namespace ampc

#endif // AMPC_COMPILER_REPORT_PNGWRITER_H
