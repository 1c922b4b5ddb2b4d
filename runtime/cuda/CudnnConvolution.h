//===- CudnnConvolution.h - 2-D convolutions through cuDNN's graph API ----===//
//
// The GPU's graph.conv2d, conv2d_grad_input and conv2d_grad_weight: cuDNN's convolution
// engines (implicit GEMM on tensor cores), built with the backend (graph) API of CudnnGraph.h,
// the library opened at run time as for attention. Semantics are the CPU backend's
// (runtime/cpu/ConvKernels.cpp, docs/plan-format.md):
//
//   y[n, o, i, j]  = sum over c in o's group, p, q of
//                    x[n, c, i sh - top + p dh, j sw - left + q dw] w[o, c, p, q]
//   dx             = the transposed convolution of dy with w        (backward data)
//   dw             = the correlation of x with dy, summed over n    (backward filter)
//
// with cross-correlation (no kernel flip), per-side padding (top/left before, bottom/right
// after: PyTorch's and ONNX's asymmetric pads), dilation and groups (w is [K, C / groups, R, S];
// depthwise when groups = C). Accumulation is f32 for every storage type.
//
// Operands are described to cuDNN in NCHW dimension order with their strides: contiguous NCHW,
// or channels-last (NHWC in memory, w as KRSC), the layout on which cuDNN's tensor-core kernels
// run without transposing. x, w, y, dx and dy have the problem's storage type; dw is f32 (the
// weight gradient's accumulator, as a matmul's: a graph of the convolution into an f32 virtual
// tensor and an identity that stores it, which cuDNN runs with a runtime-fused engine) where
// `weightGradF32` asks for it and an engine takes that graph, else the storage type (cuDNN's
// weight-gradient engines store their operands' type; the stem's 3 channels, grouped and NCHW
// convolutions get no fused engine): weightGradF32() says which was built.
//
// Each instance builds the graphs of one problem once; the calls bind pointers and enqueue, so
// they may be captured into a CUDA graph. Failures are CudaError(Cudnn) naming the call, the
// status and cuDNN's last message.
//
//===----------------------------------------------------------------------===//

#ifndef AMPC_RUNTIME_CUDA_CUDNNCONVOLUTION_H
#define AMPC_RUNTIME_CUDA_CUDNNCONVOLUTION_H

#include "runtime/plan/Plan.h"

#include <cuda.h>

#include <array>
#include <cstdint>
#include <memory>
#include <string>

namespace ampc::cuda {

/// One convolution: x [batch, inChannels, height, width] and w [outChannels, inChannels /
/// groups, kernel[0], kernel[1]] give y [batch, outChannels, outHeight(), outWidth()].
struct CudnnConvolutionProblem {
  int64_t batch = 0, inChannels = 0, height = 0, width = 0;
  int64_t outChannels = 0, groups = 1;
  std::array<int64_t, 2> kernel{1, 1}, stride{1, 1}, dilation{1, 1};
  /// Padding before (top, left) and after (bottom, right).
  std::array<int64_t, 2> padBegin{0, 0}, padEnd{0, 0};
  plan::DType type = plan::DType::BF16; ///< BF16, F16 or F32: x, w, y, dx, dy
  bool channelsLast = true;             ///< NHWC (and KRSC) in memory, else NCHW (KCRS)
  bool weightGradF32 = true;            ///< dw in f32 where cuDNN can, else in `type`

  int64_t outHeight() const { return outExtent(0, height); }
  int64_t outWidth() const { return outExtent(1, width); }

private:
  int64_t outExtent(int axis, int64_t in) const {
    const int64_t span = dilation[axis] * (kernel[axis] - 1) + 1;
    return (in + padBegin[axis] + padEnd[axis] - span) / stride[axis] + 1;
  }
};

/// Why \p problem is not a convolution cuDNN can be asked for (a non-positive extent, channels
/// that groups do not divide, an empty output), in one line, or "". Pure: no GPU, no cuDNN.
std::string cudnnConvolutionProblemError(const CudnnConvolutionProblem &problem);

/// The element strides of x's (or y's, dx's, dy's) [N, C, H, W] dimensions for \p problem's
/// layout, for a tensor of \p channels channels and \p height x \p width pixels.
std::array<int64_t, 4> convolutionStrides(const CudnnConvolutionProblem &problem, int64_t channels,
                                          int64_t height, int64_t width);

/// What cuDNN makes of a problem's three graphs for a GPU it is only told about (cuDNN's
/// device-less compilation, as probeCudnnAttention): "" where an engine's plan finalized,
/// else the last engine's failure and its status. Without a GPU, an engine that compiled for
/// the described one fails only where its kernels would be loaded into the driver.
struct CudnnConvolutionProbe {
  bool available = false;
  std::string unavailable;
  std::string forward, backwardData, backwardFilter;
  int forwardStatus = 0, backwardDataStatus = 0, backwardFilterStatus = 0;
  /// Whether the backward filter probed is the f32-dw graph (else dw in the storage type).
  bool weightGradF32 = false;
};

/// Probes \p problem on the GPU that \p deviceJson describes. Throws CudaError(InvalidArgument)
/// for a problem cudnnConvolutionProblemError rejects.
CudnnConvolutionProbe probeCudnnConvolution(const CudnnConvolutionProblem &problem,
                                            const std::string &deviceJson);

/// The forward, backward-data and backward-filter graphs of one convolution, finalized by cuDNN.
class CudnnConvolution {
public:
  /// Which graphs to build (a first layer needs no backward data).
  struct Passes {
    bool forward = true, backwardData = true, backwardFilter = true;
  };

  /// Opens cuDNN (once a process), creates a handle on \p stream and builds the graphs of
  /// \p passes, each with the first engine cuDNN's heuristics offer that finalizes. Throws
  /// CudaError(Cudnn) when any of it fails.
  CudnnConvolution(const CudnnConvolutionProblem &problem, CUstream stream, Passes passes);
  CudnnConvolution(const CudnnConvolutionProblem &problem, CUstream stream)
      : CudnnConvolution(problem, stream, Passes()) {}
  ~CudnnConvolution();
  CudnnConvolution(const CudnnConvolution &) = delete;
  CudnnConvolution &operator=(const CudnnConvolution &) = delete;

  /// One line: the library, its version and the engine of each graph.
  std::string description() const;
  /// Whether backwardFilter() writes dw in f32 (else in the storage type, for the caller to
  /// widen).
  bool weightGradF32() const;
  /// The most workspace any built graph needs.
  size_t workspaceBytes() const;

  /// y = conv(x, w), overwritten.
  void forward(CUdeviceptr x, CUdeviceptr w, CUdeviceptr y, CUdeviceptr workspace) const;
  /// dx = conv_transpose(dy, w), overwritten.
  void backwardData(CUdeviceptr dy, CUdeviceptr w, CUdeviceptr dx, CUdeviceptr workspace) const;
  /// dw = correlation of x and dy over the batch, overwritten.
  void backwardFilter(CUdeviceptr x, CUdeviceptr dy, CUdeviceptr dw, CUdeviceptr workspace) const;

  struct State;

private:
  std::unique_ptr<State> state;
};

} // namespace ampc::cuda

#endif // AMPC_RUNTIME_CUDA_CUDNNCONVOLUTION_H
