//===- CudaGraph.h - Capture a step's launches once, replay them ----------===//
//
// A training step is hundreds of small launches whose pointers never change
// (every buffer has a fixed place in the arena or the persistent pool), so
// the backend records them once into a CUDA graph and replays the graph:
// one launch per step instead of hundreds.
//
// GraphCapture wraps that with a safe fallback. Its run(record) calls
// `record`, which enqueues the step's work on the device's stream:
//
//   1st run   eagerly (a warm-up: modules load, cuBLASLt picks and caches its
//             algorithms, kernels opt in to their shared memory; none of
//             that may happen during a capture);
//   2nd run   under stream capture; the graph is instantiated and launched
//             (capturing executes nothing, so the launch does this step's
//             work);
//   later     the graph is replayed, `record` is not called.
//
// If capture cannot begin, `record` throws during capture, the capture is
// invalidated (an operation that cannot be captured, such as a copy from
// pageable host memory) or instantiation fails, GraphCapture says why once
// (through its warning callback, stderr by default) and from then on runs
// `record` eagerly, this time included. `record` must therefore be safe to
// call again after a failed attempt: it only enqueues work. Values that
// change from step to step must be read by the kernels from device memory,
// not passed as launch arguments, because the graph replays the arguments it
// captured: the learning rate is a buffer the schedule kernel writes, and the
// seed, the step and the total steps are the executor's run-scalar block,
// which it uploads on the stream before a run, outside the capture.
//
//===----------------------------------------------------------------------===//

#ifndef AMPC_RUNTIME_CUDA_CUDAGRAPH_H
#define AMPC_RUNTIME_CUDA_CUDAGRAPH_H

#include "runtime/cuda/Device.h"

#include <functional>
#include <string>

namespace ampc::cuda {

/// An instantiated CUDA graph, replayed on the device's stream. Move-only.
class CudaGraph {
public:
  CudaGraph() = default;
  /// Takes ownership of \p graph and instantiates it. Throws CudaError
  /// (the graph is destroyed) when instantiation fails.
  CudaGraph(Device &device, CUgraph graph, const std::string &name);
  ~CudaGraph() { reset(); }
  CudaGraph(CudaGraph &&other) noexcept { *this = std::move(other); }
  CudaGraph &operator=(CudaGraph &&other) noexcept;
  CudaGraph(const CudaGraph &) = delete;
  CudaGraph &operator=(const CudaGraph &) = delete;

  explicit operator bool() const { return executable != nullptr; }
  /// Queues one replay on the device's stream.
  void launch();
  void reset();

private:
  Device *device = nullptr;
  CUgraph graph = nullptr;
  CUgraphExec executable = nullptr;
  std::string graphName;
};

/// Captures what `record` enqueues into a graph and replays it, or runs it
/// eagerly when capture fails. See the file comment.
class GraphCapture {
public:
  enum class Mode {
    WarmingUp, ///< the next run is eager, before capturing
    Capturing, ///< the next run captures
    Replaying, ///< runs replay the graph
    Eager,     ///< capture failed: runs call `record`
  };
  using Warning = std::function<void(const std::string &)>;

  /// \p name is what the graph holds ("the micro step"), for the warning.
  /// \p warning receives the one-line reason when capture fails (default:
  /// printed to stderr). \p warmUpRuns eager runs precede the capture.
  GraphCapture(Device &device, std::string name, Warning warning = nullptr, int warmUpRuns = 1);

  /// Runs the step: see the file comment. Exceptions from an eager
  /// `record` propagate.
  void run(const std::function<void()> &record);

  Mode mode() const { return currentMode; }
  /// Why capture failed ("" if it did not).
  const std::string &fallbackReason() const { return reason; }
  /// Drops the graph; the next run captures again (after a warm-up).
  void reset();

private:
  /// Captures \p record and instantiates; false (with reason set) on
  /// failure, the stream no longer capturing.
  bool capture(const std::function<void()> &record);
  void fallBack(const std::string &why);

  Device *device;
  std::string graphName;
  Warning warning;
  int warmUpRuns;
  int runsDone = 0;
  Mode currentMode;
  CudaGraph graph;
  std::string reason;
};

} // namespace ampc::cuda

#endif // AMPC_RUNTIME_CUDA_CUDAGRAPH_H
