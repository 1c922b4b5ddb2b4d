//===- CudaGraph.cpp - Capture a step's launches once, replay them --------===//

#include "runtime/cuda/CudaGraph.h"

#include <cstdio>
#include <exception>
#include <utility>

namespace ampc::cuda {

//===----------------------------------------------------------------------===//
// CudaGraph
//===----------------------------------------------------------------------===//

CudaGraph::CudaGraph(Device &device, CUgraph graph, const std::string &name)
    : device(&device), graph(graph), graphName(name) {
  const DriverApi &api = device.api();
  const CUresult result = api.cuGraphInstantiate(&executable, graph, 0);
  if (result != CUDA_SUCCESS) {
    executable = nullptr;
    api.cuGraphDestroy(graph);
    this->graph = nullptr;
    checkDriver(api, result, "cuGraphInstantiateWithFlags",
                "instantiating the CUDA graph of " + name);
  }
}

CudaGraph &CudaGraph::operator=(CudaGraph &&other) noexcept {
  if (this != &other) {
    reset();
    device = other.device;
    graph = std::exchange(other.graph, nullptr);
    executable = std::exchange(other.executable, nullptr);
    graphName = std::move(other.graphName);
  }
  return *this;
}

void CudaGraph::launch() {
  const DriverApi &api = device->api();
  checkDriverLazy(api, api.cuGraphLaunch(executable, device->stream()), "cuGraphLaunch",
                  [&] { return "replaying the CUDA graph of " + graphName; });
}

void CudaGraph::reset() {
  if (executable)
    device->api().cuGraphExecDestroy(executable);
  if (graph)
    device->api().cuGraphDestroy(graph);
  executable = nullptr;
  graph = nullptr;
}

//===----------------------------------------------------------------------===//
// GraphCapture
//===----------------------------------------------------------------------===//

GraphCapture::GraphCapture(Device &device, std::string name, Warning warning, int warmUpRuns)
    : device(&device), graphName(std::move(name)), warning(std::move(warning)),
      warmUpRuns(warmUpRuns < 0 ? 0 : warmUpRuns),
      currentMode(this->warmUpRuns > 0 ? Mode::WarmingUp : Mode::Capturing) {
  if (!this->warning)
    this->warning = [](const std::string &line) { std::fprintf(stderr, "%s\n", line.c_str()); };
}

void GraphCapture::run(const std::function<void()> &record) {
  switch (currentMode) {
  case Mode::Eager:
    record();
    return;
  case Mode::WarmingUp:
    record();
    if (++runsDone >= warmUpRuns)
      currentMode = Mode::Capturing;
    return;
  case Mode::Capturing:
    if (!capture(record)) {
      record();
      return;
    }
    currentMode = Mode::Replaying;
    graph.launch();
    return;
  case Mode::Replaying:
    graph.launch();
    return;
  }
}

bool GraphCapture::capture(const std::function<void()> &record) {
  const DriverApi &api = device->api();
  const CUstream stream = device->stream();
  // Thread-local mode: only this thread's unsafe calls (allocations,
  // synchronous copies) invalidate the capture; other threads may go on.
  CUresult result = api.cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL);
  if (result != CUDA_SUCCESS) {
    fallBack("cuStreamBeginCapture returned " + api.errorName(result));
    return false;
  }
  std::string thrown;
  try {
    record();
  } catch (const std::exception &error) {
    thrown = error.what();
  }
  // End the capture whatever happened, so the stream is usable again.
  CUgraph captured = nullptr;
  result = api.cuStreamEndCapture(stream, &captured);
  if (!thrown.empty() || result != CUDA_SUCCESS || !captured) {
    if (captured)
      api.cuGraphDestroy(captured);
    fallBack(!thrown.empty()
                 ? thrown
                 : "cuStreamEndCapture returned " + api.errorName(result) +
                       (api.errorString(result).empty() ? "" : ": " + api.errorString(result)));
    return false;
  }
  try {
    graph = CudaGraph(*device, captured, graphName);
  } catch (const CudaError &error) {
    fallBack(error.what());
    return false;
  }
  return true;
}

void GraphCapture::fallBack(const std::string &why) {
  reason = why;
  currentMode = Mode::Eager;
  graph.reset();
  warning("warning: cannot capture " + graphName + " into a CUDA graph (" + why +
          "): running its work launch by launch");
}

void GraphCapture::reset() {
  graph.reset();
  reason.clear();
  runsDone = 0;
  currentMode = warmUpRuns > 0 ? Mode::WarmingUp : Mode::Capturing;
}

} // namespace ampc::cuda
