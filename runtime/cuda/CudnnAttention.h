//===- CudnnAttention.h - Fused attention through cuDNN's graph API -------===//
//
// cuDNN 9 ships fused scaled-dot-product attention (FlashAttention-style forward and backward,
// tuned per GPU generation): on an H200 PyTorch's cuDNN backend runs GPT-124M's attention at
// 0.109 ms forward and 0.343 ms backward a layer, where our own tensor-core kernels take 0.199
// and 0.667 (bench/results/2026-11-26-h200/attention.txt). This is that attention, built with
// cuDNN's backend (graph) API, opened at run time like cuBLASLt so that nothing needs cuDNN to
// start: dlopen of $AMPC_CUDNN_LIBRARY when set, then libcudnn.so.9 and libcudnn.so from the
// loader's path, then the toolkit's library directory this runtime was built against.
//
// Semantics are the CUDA backend's attention step (docs/attention.md), for 16-bit storage:
//
//   s      = scale q k^T            [B, H, T, S], keys past the causal diagonal masked
//                                   (causal: query t sees keys 0 .. t + S - T)
//   lse    = logsumexp over keys    f32 [B, H, T] contiguous (natural log)
//   o      = softmax(s) v           [B, H, T, D]
//   dq, dk, dv from dO, reading the forward's o and lse (no forward re-run)
//
// Every 16-bit operand is addressed by element strides of (batch, head, row) with unit stride
// along the head dimension, so the packed layouts a compiled GPT gives its attention steps
// (q, k, v as windows of one [B, T, 3 H D] buffer; o and dO token-major) need no copies.
//
// Each instance builds and finalizes the forward and the backward graph of one problem once;
// forward() and backward() only bind pointers and enqueue, so they may be captured into a CUDA
// graph. A failure anywhere (no library, an engine that does not support the problem, a cuDNN
// call's error) is a CudaError of kind Cudnn whose message names the call, its status and
// cuDNN's own last error message: callers fall back to the backend's own kernels.
//
//===----------------------------------------------------------------------===//

#ifndef AMPC_RUNTIME_CUDA_CUDNNATTENTION_H
#define AMPC_RUNTIME_CUDA_CUDNNATTENTION_H

#include "runtime/plan/Plan.h"

#include <cuda.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace ampc::cuda {

/// Element strides of a [batch, head, row, column] operand along batch, head and row; the
/// column (head dimension) stride is 1.
using AttentionStrides = std::array<int64_t, 3>;

/// One attention problem: shapes, masking, scale, storage type and the operands' layouts.
struct CudnnAttentionProblem {
  int64_t batch = 0, heads = 0, queries = 0, keys = 0, headDim = 0;
  bool causal = false;
  float scale = 1.0f;
  plan::DType type = plan::DType::BF16; ///< BF16 or F16: q, k, v, o, dO, dq, dk, dv
  AttentionStrides q{}, k{}, v{}, o{}, dO{}, dq{}, dk{}, dv{};
  // lse is always f32 [batch, heads, queries], contiguous.

  /// The contiguous [B, H, rows, D] strides.
  static AttentionStrides contiguous(int64_t heads, int64_t rows, int64_t headDim) {
    return {heads * rows * headDim, rows * headDim, headDim};
  }
};

/// Why cuDNN's fused attention cannot run \p problem, in one line, or "" when it can. Pure (no
/// GPU, no cuDNN): the constructor throws CudaError(InvalidArgument) with this message before it
/// opens anything.
std::string cudnnAttentionProblemError(const CudnnAttentionProblem &problem);

/// Why cuDNN \p version (as cudnnGetVersion() returns it: 91900 for 9.19.0) must not run
/// \p problem (not a 9.x library, or, with \p backward, a release whose backward has a known
/// bug on this shape), or "". The constructor throws CudaError(Cudnn) with this message.
std::string cudnnAttentionVersionError(const CudnnAttentionProblem &problem, size_t version,
                                       bool backward = true);

/// A cudnnGetVersion() number as "major.minor.patch": 91900 -> "9.19.0" (8907 -> "8.9.7").
std::string formatCudnnVersion(size_t version);

/// How backward() divides its workspace: cuDNN's own workspace (the execution plan's) at offset 0,
/// then the two f32 buffers the backward graph reads and writes through memory, each 256-byte
/// aligned: the dQ accumulator [B, H, T, D] and the softmax sum rowsum(dO * o) [B, H, T].
struct CudnnBackwardWorkspace {
  size_t dqAccumulatorOffset = 0, dqAccumulatorBytes = 0;
  size_t softmaxSumOffset = 0, softmaxSumBytes = 0;
  size_t totalBytes = 0;
};

/// The backward's workspace layout for \p problem when cuDNN's plan needs \p planBytes.
CudnnBackwardWorkspace cudnnBackwardWorkspace(const CudnnAttentionProblem &problem,
                                              size_t planBytes);

/// What cuDNN makes of a problem's two graphs for a GPU it is only told about: cuDNN's
/// device-less compilation (a device description, CUDNN_ATTR_DEVICEPROP_JSON_REPRESENTATION,
/// in place of a handle). Both graphs are built, the heuristics asked for engines, and each
/// engine's plan finalized, which compiles its kernels for that GPU; without a GPU it fails
/// only where the kernels would be loaded into the driver. A graph the fused engines do not
/// recognise fails earlier, with no engine or CUDNN_STATUS_NOT_SUPPORTED_GRAPH_PATTERN. So the
/// graphs can be checked on a machine without a GPU, against the cuDNN release there.
struct CudnnEngineProbe {
  /// cuDNN loaded and took the device description; else why not (and nothing was built).
  bool available = false;
  std::string unavailable;
  /// Each graph: "" when an engine's plan finalized (there is a GPU after all), else the
  /// failure of the last engine tried, and its cudnnStatus_t.
  std::string forward, backward;
  int forwardStatus = 0, backwardStatus = 0;
};

/// Probes \p problem on the GPU that \p deviceJson describes (cuDNN's JSON device description:
/// deviceVer, multiProcessorCount, maxSharedMemoryPerBlockOptin, ...). Throws
/// CudaError(InvalidArgument) for a problem cudnnAttentionProblemError rejects.
CudnnEngineProbe probeCudnnAttention(const CudnnAttentionProblem &problem,
                                     const std::string &deviceJson);

/// The forward and backward of one attention problem, built and finalized by cuDNN.
class CudnnAttention {
public:
  /// Which graphs to build.
  struct Passes {
    bool forward = true, backward = true;
  };

  /// Opens cuDNN (once a process), creates a handle on \p stream (the current context must be
  /// the device's primary context), builds the graphs of \p passes and picks an engine for each
  /// by cuDNN's heuristics (the first that finalizes). Throws CudaError(Cudnn) when any of it
  /// fails.
  CudnnAttention(const CudnnAttentionProblem &problem, CUstream stream, Passes passes);
  CudnnAttention(const CudnnAttentionProblem &problem, CUstream stream)
      : CudnnAttention(problem, stream, Passes()) {}
  ~CudnnAttention();
  CudnnAttention(const CudnnAttention &) = delete;
  CudnnAttention &operator=(const CudnnAttention &) = delete;

  /// One line: the library opened, its version and the engines chosen.
  std::string description() const;
  size_t forwardWorkspaceBytes() const;
  size_t backwardWorkspaceBytes() const;

  /// Enqueues the forward on the stream: o and lse from q, k, v. \p workspace holds
  /// forwardWorkspaceBytes() (may be 0 when that is 0). CudaError(InvalidArgument) when the
  /// forward was not built (likewise the backward).
  void forward(CUdeviceptr q, CUdeviceptr k, CUdeviceptr v, CUdeviceptr o, CUdeviceptr lse,
               CUdeviceptr workspace) const;
  /// Enqueues the backward: dq, dk, dv (overwritten) from q, k, v, the forward's o and lse,
  /// and dO. \p workspace holds backwardWorkspaceBytes().
  void backward(CUdeviceptr q, CUdeviceptr k, CUdeviceptr v, CUdeviceptr o, CUdeviceptr dO,
                CUdeviceptr lse, CUdeviceptr dq, CUdeviceptr dk, CUdeviceptr dv,
                CUdeviceptr workspace) const;

  struct State;

private:
  std::unique_ptr<State> state;
};

} // namespace ampc::cuda

#endif // AMPC_RUNTIME_CUDA_CUDNNATTENTION_H
