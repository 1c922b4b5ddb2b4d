//===- ConvKernels.cpp - 2-D convolution and pooling over NCHW images -----===//
//
// Convolutions unfold each image's windows into columns (im2col) and multiply by gemm, whose
// sums run in increasing k order: every output element is one dot product over (input channel,
// kernel row, kernel column), the same bits whatever the thread count. The data gradient
// multiplies by the transposed weight and folds the columns back (col2im) in a fixed order; the
// weight gradient sums image by image. Pooling walks each window in row-major order, as
// PyTorch's CPU kernels do. Work is split over images and groups, or channel planes, never
// within a sum.
//
//===----------------------------------------------------------------------===//

#include "runtime/cpu/Kernels.h"
#include "runtime/cpu/ThreadPool.h"
#include "runtime/plan/Plan.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <vector>

namespace ampc::cpu::kernels {

namespace {

/// The extents a convolution works with.
struct ConvDims {
  int64_t batch, channels, height, width;           // x
  int64_t outChannels, kernelH, kernelW;            // w
  int64_t outH, outW;                               // y
  int64_t groups, groupChannels, groupOutChannels;  // per group
  int64_t taps() const { return groupChannels * kernelH * kernelW; } // rows of the columns
  int64_t positions() const { return outH * outW; }                  // columns
};

ConvDims convDims(const Shape &x, const Shape &w, const Shape &y, int64_t groups) {
  return {x[0], x[1], x[2], x[3], w[0], w[2], w[3], y[2], y[3],
          groups, x[1] / groups, w[0] / groups};
}

/// cols [taps, positions] of image \p n, group \p g: the input element each tap meets, 0 in
/// the padding.
template <typename T>
void im2col(const T *x, const ConvDims &d, const plan::Window2d &window, int64_t n, int64_t g,
            T *cols) {
  for (int64_t c = 0; c < d.groupChannels; ++c) {
    const T *plane = x + ((n * d.channels) + g * d.groupChannels + c) * d.height * d.width;
    for (int64_t p = 0; p < d.kernelH; ++p)
      for (int64_t q = 0; q < d.kernelW; ++q) {
        T *row = cols + ((c * d.kernelH + p) * d.kernelW + q) * d.positions();
        for (int64_t i = 0; i < d.outH; ++i) {
          const int64_t h = window.start(0, i) + p * window.dilations[0];
          for (int64_t j = 0; j < d.outW; ++j) {
            const int64_t col = window.start(1, j) + q * window.dilations[1];
            const bool inside = h >= 0 && h < d.height && col >= 0 && col < d.width;
            row[i * d.outW + j] = inside ? plane[h * d.width + col] : T(0);
          }
        }
      }
  }
}

/// Adds the columns back onto image \p n, group \p g of dx (the adjoint of im2col), tap by tap.
template <typename T>
void col2im(const T *cols, const ConvDims &d, const plan::Window2d &window, int64_t n, int64_t g,
            T *dx) {
  for (int64_t c = 0; c < d.groupChannels; ++c) {
    T *plane = dx + ((n * d.channels) + g * d.groupChannels + c) * d.height * d.width;
    for (int64_t p = 0; p < d.kernelH; ++p)
      for (int64_t q = 0; q < d.kernelW; ++q) {
        const T *row = cols + ((c * d.kernelH + p) * d.kernelW + q) * d.positions();
        for (int64_t i = 0; i < d.outH; ++i) {
          const int64_t h = window.start(0, i) + p * window.dilations[0];
          if (h < 0 || h >= d.height)
            continue;
          for (int64_t j = 0; j < d.outW; ++j) {
            const int64_t col = window.start(1, j) + q * window.dilations[1];
            if (col >= 0 && col < d.width)
              plane[h * d.width + col] += row[i * d.outW + j];
          }
        }
      }
  }
}

/// Runs \p body(n, g) for every image and group: in parallel over the pairs when there are
/// enough of them, else one after another (gemm then splits each product).
void forEachImageGroup(int64_t batch, int64_t groups,
                       const std::function<void(int64_t, int64_t)> &body) {
  const int64_t count = batch * groups;
  if (count >= threadCount()) {
    parallelFor(count, 1, [&](int64_t begin, int64_t end) {
      for (int64_t k = begin; k < end; ++k)
        body(k / groups, k % groups);
    });
    return;
  }
  for (int64_t k = 0; k < count; ++k)
    body(k / groups, k % groups);
}

/// The divisor and clipped bounds of one average-pooling window.
struct AvgWindow {
  int64_t h0, h1, w0, w1; // input rows [h0, h1), columns [w0, w1)
  int64_t divisor;
};

AvgWindow avgWindow(const plan::Window2d &window, int64_t height, int64_t width, int64_t i,
                    int64_t j, bool countIncludePad) {
  int64_t h0 = window.start(0, i), w0 = window.start(1, j);
  int64_t h1 = std::min(h0 + window.kernel[0], height + window.padAfter(0));
  int64_t w1 = std::min(w0 + window.kernel[1], width + window.padAfter(1));
  const int64_t padded = (h1 - h0) * (w1 - w0);
  h0 = std::max<int64_t>(h0, 0);
  w0 = std::max<int64_t>(w0, 0);
  h1 = std::min(h1, height);
  w1 = std::min(w1, width);
  const int64_t inside = std::max<int64_t>(h1 - h0, 0) * std::max<int64_t>(w1 - w0, 0);
  return {h0, h1, w0, w1, countIncludePad ? padded : inside};
}

/// The flat index within its plane of the element max pooling takes for output (i, j), or -1
/// when the window holds no input element.
template <typename T>
int64_t maxIndex(const T *plane, int64_t height, int64_t width, const plan::Window2d &window,
                 int64_t i, int64_t j) {
  int64_t best = -1;
  T value = -std::numeric_limits<T>::infinity();
  for (int64_t p = 0; p < window.kernel[0]; ++p) {
    const int64_t h = window.start(0, i) + p * window.dilations[0];
    if (h < 0 || h >= height)
      continue;
    for (int64_t q = 0; q < window.kernel[1]; ++q) {
      const int64_t col = window.start(1, j) + q * window.dilations[1];
      if (col < 0 || col >= width)
        continue;
      // The first element is taken even when it is -inf (PyTorch's starting index); a NaN
      // always replaces, so the last NaN wins.
      const T v = plane[h * width + col];
      if (best < 0 || v > value || std::isnan(v)) {
        best = h * width + col;
        value = v;
      }
    }
  }
  return best;
}

} // namespace

template <typename T>
void conv2d(const T *x, const Shape &xShape, const T *w, const Shape &wShape,
            const plan::Window2d &window, int64_t groups, T *y, const Shape &yShape) {
  const ConvDims d = convDims(xShape, wShape, yShape, groups);
  forEachImageGroup(d.batch, d.groups, [&](int64_t n, int64_t g) {
    std::vector<T> cols(static_cast<size_t>(d.taps() * d.positions()));
    im2col(x, d, window, n, g, cols.data());
    const T *weights = w + g * d.groupOutChannels * d.taps();
    T *out = y + (n * d.outChannels + g * d.groupOutChannels) * d.positions();
    gemm<T>(d.groupOutChannels, d.positions(), d.taps(), {weights, d.taps(), 1},
            {cols.data(), d.positions(), 1}, out);
  });
}

template <typename T>
void conv2dGradInput(const T *dy, const Shape &dyShape, const T *w, const Shape &wShape,
                     const plan::Window2d &window, int64_t groups, T *dx, const Shape &dxShape) {
  const ConvDims d = convDims(dxShape, wShape, dyShape, groups);
  std::fill(dx, dx + plan::numElements(dxShape), T(0));
  forEachImageGroup(d.batch, d.groups, [&](int64_t n, int64_t g) {
    std::vector<T> cols(static_cast<size_t>(d.taps() * d.positions()));
    // cols [taps, positions] = w_g^T [taps, out channels] dy_ng [out channels, positions].
    const T *weights = w + g * d.groupOutChannels * d.taps();
    const T *grad = dy + (n * d.outChannels + g * d.groupOutChannels) * d.positions();
    gemm<T>(d.taps(), d.positions(), d.groupOutChannels, {weights, 1, d.taps()},
            {grad, d.positions(), 1}, cols.data());
    col2im(cols.data(), d, window, n, g, dx);
  });
}

template <typename T>
void conv2dGradWeight(const T *x, const Shape &xShape, const T *dy, const Shape &dyShape,
                      const plan::Window2d &window, int64_t groups, T *dw, const Shape &dwShape) {
  const ConvDims d = convDims(xShape, dwShape, dyShape, groups);
  std::fill(dw, dw + plan::numElements(dwShape), T(0));
  // Each group's gradient is a sum over the images in order; groups run in parallel.
  auto group = [&](int64_t g) {
    std::vector<T> cols(static_cast<size_t>(d.taps() * d.positions()));
    std::vector<T> product(static_cast<size_t>(d.groupOutChannels * d.taps()));
    T *out = dw + g * d.groupOutChannels * d.taps();
    for (int64_t n = 0; n < d.batch; ++n) {
      im2col(x, d, window, n, g, cols.data());
      // [out channels, taps] = dy_ng [out channels, positions] cols^T [positions, taps].
      const T *grad = dy + (n * d.outChannels + g * d.groupOutChannels) * d.positions();
      gemm<T>(d.groupOutChannels, d.taps(), d.positions(), {grad, d.positions(), 1},
              {cols.data(), 1, d.positions()}, product.data());
      for (size_t k = 0; k < product.size(); ++k)
        out[k] += product[k];
    }
  };
  if (d.groups >= threadCount())
    parallelFor(d.groups, 1, [&](int64_t begin, int64_t end) {
      for (int64_t g = begin; g < end; ++g)
        group(g);
    });
  else
    for (int64_t g = 0; g < d.groups; ++g)
      group(g);
}

/// Calls \p body(plane, i, j) for output position (i, j) of every [N, C] plane; planes run
/// in parallel, each one's positions in order.
template <typename Body>
void forEachPooled(const Shape &xShape, int64_t outH, int64_t outW, const Body &body) {
  parallelFor(xShape[0] * xShape[1], 1, [&](int64_t begin, int64_t end) {
    for (int64_t plane = begin; plane < end; ++plane)
      for (int64_t i = 0; i < outH; ++i)
        for (int64_t j = 0; j < outW; ++j)
          body(plane, i, j);
  });
}

template <typename T>
void maxPool2d(const T *x, const Shape &xShape, const plan::Window2d &window, T *y,
               const Shape &yShape) {
  const int64_t height = xShape[2], width = xShape[3], outH = yShape[2], outW = yShape[3];
  forEachPooled(xShape, outH, outW, [&](int64_t plane, int64_t i, int64_t j) {
    const T *in = x + plane * height * width;
    const int64_t at = maxIndex(in, height, width, window, i, j);
    y[(plane * outH + i) * outW + j] = at < 0 ? -std::numeric_limits<T>::infinity() : in[at];
  });
}

template <typename T>
void maxPool2dGrad(const T *x, const Shape &xShape, const T *dy, const Shape &dyShape,
                   const plan::Window2d &window, T *dx) {
  const int64_t height = xShape[2], width = xShape[3], outH = dyShape[2], outW = dyShape[3];
  std::fill(dx, dx + plan::numElements(xShape), T(0));
  forEachPooled(xShape, outH, outW, [&](int64_t plane, int64_t i, int64_t j) {
    const int64_t at = maxIndex(x + plane * height * width, height, width, window, i, j);
    if (at >= 0)
      dx[plane * height * width + at] += dy[(plane * outH + i) * outW + j];
  });
}

template <typename T>
void avgPool2d(const T *x, const Shape &xShape, const plan::Window2d &window,
               bool countIncludePad, T *y, const Shape &yShape) {
  const int64_t height = xShape[2], width = xShape[3], outH = yShape[2], outW = yShape[3];
  forEachPooled(xShape, outH, outW, [&](int64_t plane, int64_t i, int64_t j) {
    const T *in = x + plane * height * width;
    const AvgWindow a = avgWindow(window, height, width, i, j, countIncludePad);
    T sum = 0;
    for (int64_t h = a.h0; h < a.h1; ++h)
      for (int64_t c = a.w0; c < a.w1; ++c)
        sum += in[h * width + c];
    y[(plane * outH + i) * outW + j] = a.divisor > 0 ? sum / T(a.divisor) : T(0);
  });
}

template <typename T>
void avgPool2dGrad(const T *dy, const Shape &dyShape, const plan::Window2d &window,
                   bool countIncludePad, T *dx, const Shape &dxShape) {
  const int64_t height = dxShape[2], width = dxShape[3], outH = dyShape[2], outW = dyShape[3];
  std::fill(dx, dx + plan::numElements(dxShape), T(0));
  forEachPooled(dxShape, outH, outW, [&](int64_t plane, int64_t i, int64_t j) {
    const AvgWindow a = avgWindow(window, height, width, i, j, countIncludePad);
    if (a.divisor <= 0)
      return;
    const T share = dy[(plane * outH + i) * outW + j] / T(a.divisor);
    T *out = dx + plane * height * width;
    for (int64_t h = a.h0; h < a.h1; ++h)
      for (int64_t c = a.w0; c < a.w1; ++c)
        out[h * width + c] += share;
  });
}

#define AMPC_CONV_KERNELS(T)                                                                       \
  template void conv2d<T>(const T *, const Shape &, const T *, const Shape &,                      \
                          const plan::Window2d &, int64_t, T *, const Shape &);                    \
  template void conv2dGradInput<T>(const T *, const Shape &, const T *, const Shape &,             \
                                   const plan::Window2d &, int64_t, T *, const Shape &);           \
  template void conv2dGradWeight<T>(const T *, const Shape &, const T *, const Shape &,            \
                                    const plan::Window2d &, int64_t, T *, const Shape &);          \
  template void maxPool2d<T>(const T *, const Shape &, const plan::Window2d &, T *,                \
                             const Shape &);                                                       \
  template void maxPool2dGrad<T>(const T *, const Shape &, const T *, const Shape &,               \
                                 const plan::Window2d &, T *);                                     \
  template void avgPool2d<T>(const T *, const Shape &, const plan::Window2d &, bool, T *,          \
                             const Shape &);                                                       \
  template void avgPool2dGrad<T>(const T *, const Shape &, const plan::Window2d &, bool, T *,      \
                                 const Shape &);
AMPC_CONV_KERNELS(float)
AMPC_CONV_KERNELS(double)
#undef AMPC_CONV_KERNELS

} // namespace ampc::cpu::kernels
