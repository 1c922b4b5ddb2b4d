//===- CudnnConvolution.cpp - 2-D convolutions through cuDNN's graph API --===//

#include "runtime/cuda/CudnnConvolution.h"

#include "runtime/cuda/CudnnAttention.h"
#include "runtime/cuda/CudnnGraph.h"
#include "runtime/cuda/Errors.h"

#include <algorithm>

namespace ampc::cuda {

std::string cudnnConvolutionProblemError(const CudnnConvolutionProblem &p) {
  if (p.batch <= 0 || p.inChannels <= 0 || p.height <= 0 || p.width <= 0 ||
      p.outChannels <= 0)
    return "every extent must be positive (x [" + std::to_string(p.batch) + ", " +
           std::to_string(p.inChannels) + ", " + std::to_string(p.height) + ", " +
           std::to_string(p.width) + "], " + std::to_string(p.outChannels) + " output channels)";
  if (p.groups <= 0 || p.inChannels % p.groups != 0 || p.outChannels % p.groups != 0)
    return std::to_string(p.groups) + " groups do not divide " + std::to_string(p.inChannels) +
           " input and " + std::to_string(p.outChannels) + " output channels";
  for (int axis = 0; axis < 2; ++axis)
    if (p.kernel[axis] <= 0 || p.stride[axis] <= 0 || p.dilation[axis] <= 0 ||
        p.padBegin[axis] < 0 || p.padEnd[axis] < 0)
      return "kernel, stride and dilation must be positive and padding non-negative";
  if (p.outHeight() <= 0 || p.outWidth() <= 0)
    return "the kernel does not fit the padded input (output " + std::to_string(p.outHeight()) +
           " x " + std::to_string(p.outWidth()) + ")";
  if (p.type != plan::DType::BF16 && p.type != plan::DType::F16 && p.type != plan::DType::F32)
    return std::string("storage type ") + plan::dtypeName(p.type) + " is not bf16, f16 or f32";
  return "";
}

std::array<int64_t, 4> convolutionStrides(const CudnnConvolutionProblem &problem, int64_t channels,
                                          int64_t height, int64_t width) {
  if (problem.channelsLast)
    return {height * width * channels, 1, width * channels, channels};
  return {channels * height * width, height * width, width, 1};
}

#if AMPC_HAVE_CUDNN_HEADERS

using namespace cudnn;

namespace {

// The operands' unique ids in the graphs and variant packs.
constexpr int64_t kX = 1, kW = 2, kY = 3;

cudnnDataType_t storageType(plan::DType type) {
  switch (type) {
  case plan::DType::BF16:
    return CUDNN_DATA_BFLOAT16;
  case plan::DType::F16:
    return CUDNN_DATA_HALF;
  default:
    return CUDNN_DATA_FLOAT;
  }
}

using Pass = GraphBuilder::ConvolutionPass;

/// The graph of one pass: x (or dx), w (or dw) and y (or dy) in memory, one operation.
/// \p weightGradF32: the backward filter's dw in f32, else in the storage type.
void buildPass(const CudnnApi &api, cudnnHandle_t handle, const CudnnConvolutionProblem &p,
               Pass pass, BuiltGraph &graph, cudnnBackendDescriptor_t deviceProp = nullptr,
               bool weightGradF32 = false) {
  const char *doing = pass == Pass::Forward        ? "building cuDNN's convolution forward graph"
                      : pass == Pass::BackwardData ? "building cuDNN's convolution backward-data graph"
                                                   : "building cuDNN's convolution backward-filter "
                                                     "graph";
  GraphBuilder g(api, graph, doing);
  const cudnnDataType_t io = storageType(p.type);
  const int64_t perGroup = p.inChannels / p.groups;
  const Shape x{{p.batch, p.inChannels, p.height, p.width},
                convolutionStrides(p, p.inChannels, p.height, p.width)};
  // w as a tensor of K images of perGroup channels (KRSC channels-last).
  const Shape w{{p.outChannels, perGroup, p.kernel[0], p.kernel[1]},
                convolutionStrides(p, perGroup, p.kernel[0], p.kernel[1])};
  const Shape y{{p.batch, p.outChannels, p.outHeight(), p.outWidth()},
                convolutionStrides(p, p.outChannels, p.outHeight(), p.outWidth())};
  cudnnBackendDescriptor_t xt = g.tensor(kX, x, io), yt = g.tensor(kY, y, io);
  if (pass == Pass::BackwardFilter && weightGradF32) {
    // cuDNN's weight-gradient engines store the operands' type; an f32 dw comes from a graph
    // whose convolution writes an f32 virtual tensor that an identity stores (a runtime-fused
    // engine: the accumulator leaves in f32, never rounded to the 16-bit type).
    cudnnBackendDescriptor_t dw = g.virtualTensor(w, CUDNN_DATA_FLOAT);
    g.convolution(pass, xt, dw, yt, p.stride, p.dilation, p.padBegin, p.padEnd);
    g.unary(CUDNN_POINTWISE_IDENTITY, dw, g.tensor(kW, w, CUDNN_DATA_FLOAT));
  } else {
    g.convolution(pass, xt, g.tensor(kW, w, io), yt, p.stride, p.dilation, p.padBegin, p.padEnd);
  }
  g.finish(handle, deviceProp);
}

/// The backward-filter graph: dw in f32 when the problem asks for it and an engine takes that
/// graph, else in the storage type; \p f32 says which graph was built (or, when this throws,
/// tried last).
void buildBackwardFilter(const CudnnApi &api, cudnnHandle_t handle,
                         const CudnnConvolutionProblem &p, BuiltGraph &graph, bool &f32,
                         cudnnBackendDescriptor_t deviceProp = nullptr) {
  f32 = p.type == plan::DType::F32;
  if (p.weightGradF32 && !f32) {
    f32 = true;
    try {
      buildPass(api, handle, p, Pass::BackwardFilter, graph, deviceProp, true);
      return;
    } catch (const CudaError &error) {
      // Device-less, an engine that compiled stops at loading its kernels: that is a yes.
      if (!handle && error.code() == CUDNN_STATUS_EXECUTION_FAILED_CUDA_DRIVER)
        throw;
      graph.clear();
      f32 = false;
    }
  }
  buildPass(api, handle, p, Pass::BackwardFilter, graph, deviceProp, f32);
}

void *pointer(CUdeviceptr address) { return reinterpret_cast<void *>(address); }

void checkProblem(const CudnnConvolutionProblem &problem) {
  const std::string invalid = cudnnConvolutionProblemError(problem);
  if (!invalid.empty())
    throw CudaError(CudaErrorKind::InvalidArgument, "cuDNN convolution: " + invalid);
}

} // namespace

struct CudnnConvolution::State {
  const CudnnApi *api = nullptr;
  cudnnHandle_t handle = nullptr;
  BuiltGraph forward, backwardData, backwardFilter;
  bool weightGradF32 = false;

  ~State() {
    // Plans before the handle they were made with.
    forward.clear();
    backwardData.clear();
    backwardFilter.clear();
    if (handle)
      api->cudnnDestroy(handle);
  }

  void run(const BuiltGraph &graph, const char *what, CUdeviceptr x, CUdeviceptr w,
           CUdeviceptr y, CUdeviceptr workspace) const {
    const std::string doing = std::string("running cuDNN's convolution ") + what;
    if (!graph.plan)
      throw CudaError(CudaErrorKind::InvalidArgument,
                      std::string("cuDNN convolution: no ") + what + " graph built");
    if (graph.workspaceBytes > 0 && workspace == 0)
      throw CudaError(CudaErrorKind::InvalidArgument,
                      std::string("cuDNN convolution ") + what + ": no workspace");
    const int64_t uids[] = {kX, kW, kY};
    void *const pointers[] = {pointer(x), pointer(w), pointer(y)};
    execute(*api, handle, graph, uids, pointers, 3, pointer(workspace), doing.c_str());
  }
};

CudnnConvolution::CudnnConvolution(const CudnnConvolutionProblem &problem, CUstream stream,
                                   Passes passes) {
  checkProblem(problem);
  const CudnnApi &api = cudnnApi();
  state = std::make_unique<State>();
  State &s = *state;
  s.api = &api;
  api.check(api.cudnnCreate(&s.handle), "cudnnCreate", "creating a cuDNN handle");
  // CUstream and cudaStream_t are the same CUstream_st pointer.
  api.check(api.cudnnSetStream(s.handle, stream), "cudnnSetStream", "creating a cuDNN handle");
  if (passes.forward)
    buildPass(api, s.handle, problem, Pass::Forward, s.forward);
  if (passes.backwardData)
    buildPass(api, s.handle, problem, Pass::BackwardData, s.backwardData);
  if (passes.backwardFilter)
    buildBackwardFilter(api, s.handle, problem, s.backwardFilter, s.weightGradF32);
}

CudnnConvolution::~CudnnConvolution() = default;

std::string CudnnConvolution::description() const {
  const State &s = *state;
  std::string text = "cuDNN " + formatCudnnVersion(s.api->version) + " (" + s.api->library + ")";
  const std::pair<const BuiltGraph *, const char *> graphs[] = {
      {&s.forward, "forward"}, {&s.backwardData, "data"}, {&s.backwardFilter, "filter"}};
  for (const auto &[graph, name] : graphs)
    if (graph->plan)
      text += std::string(", ") + name + " engine " + std::to_string(graph->engineIndex);
  return text;
}

bool CudnnConvolution::weightGradF32() const { return state->weightGradF32; }

size_t CudnnConvolution::workspaceBytes() const {
  const State &s = *state;
  return static_cast<size_t>(std::max({s.forward.workspaceBytes, s.backwardData.workspaceBytes,
                                       s.backwardFilter.workspaceBytes, int64_t(0)}));
}

void CudnnConvolution::forward(CUdeviceptr x, CUdeviceptr w, CUdeviceptr y,
                               CUdeviceptr workspace) const {
  state->run(state->forward, "forward", x, w, y, workspace);
}

void CudnnConvolution::backwardData(CUdeviceptr dy, CUdeviceptr w, CUdeviceptr dx,
                                    CUdeviceptr workspace) const {
  state->run(state->backwardData, "backward-data", dx, w, dy, workspace);
}

void CudnnConvolution::backwardFilter(CUdeviceptr x, CUdeviceptr dy, CUdeviceptr dw,
                                      CUdeviceptr workspace) const {
  state->run(state->backwardFilter, "backward-filter", x, dw, dy, workspace);
}

CudnnConvolutionProbe probeCudnnConvolution(const CudnnConvolutionProblem &problem,
                                            const std::string &deviceJson) {
  checkProblem(problem);
  CudnnConvolutionProbe probe;
  const ProbeDevice gpu = openProbeDevice(deviceJson);
  if (!gpu.device) {
    probe.unavailable = gpu.unavailable;
    return probe;
  }
  probe.available = true;
  for (Pass pass : {Pass::Forward, Pass::BackwardData})
    gpu.probe(
        [&](const CudnnApi &api, BuiltGraph &graph, cudnnBackendDescriptor_t device) {
          buildPass(api, nullptr, problem, pass, graph, device);
        },
        pass == Pass::Forward ? probe.forward : probe.backwardData,
        pass == Pass::Forward ? probe.forwardStatus : probe.backwardDataStatus);
  // As the constructor builds it: dw in f32 where an engine takes that graph.
  gpu.probe(
      [&](const CudnnApi &api, BuiltGraph &graph, cudnnBackendDescriptor_t device) {
        buildBackwardFilter(api, nullptr, problem, graph, probe.weightGradF32, device);
      },
      probe.backwardFilter, probe.backwardFilterStatus);
  return probe;
}

#else // !AMPC_HAVE_CUDNN_HEADERS

struct CudnnConvolution::State {};

CudnnConvolution::CudnnConvolution(const CudnnConvolutionProblem &problem, CUstream, Passes) {
  const std::string invalid = cudnnConvolutionProblemError(problem);
  if (!invalid.empty())
    throw CudaError(CudaErrorKind::InvalidArgument, "cuDNN convolution: " + invalid);
  throw CudaError(CudaErrorKind::Cudnn, "this runtime was built without cuDNN's headers "
                                        "(cudnn_graph.h), so it cannot use cuDNN");
}

CudnnConvolution::~CudnnConvolution() = default;
std::string CudnnConvolution::description() const { return ""; }
bool CudnnConvolution::weightGradF32() const { return false; }
size_t CudnnConvolution::workspaceBytes() const { return 0; }
void CudnnConvolution::forward(CUdeviceptr, CUdeviceptr, CUdeviceptr, CUdeviceptr) const {}
void CudnnConvolution::backwardData(CUdeviceptr, CUdeviceptr, CUdeviceptr, CUdeviceptr) const {}
void CudnnConvolution::backwardFilter(CUdeviceptr, CUdeviceptr, CUdeviceptr, CUdeviceptr) const {}

CudnnConvolutionProbe probeCudnnConvolution(const CudnnConvolutionProblem &problem,
                                            const std::string &) {
  const std::string invalid = cudnnConvolutionProblemError(problem);
  if (!invalid.empty())
    throw CudaError(CudaErrorKind::InvalidArgument, "cuDNN convolution: " + invalid);
  CudnnConvolutionProbe probe;
  probe.unavailable = "this runtime was built without cuDNN's headers (cudnn_graph.h)";
  return probe;
}

#endif // AMPC_HAVE_CUDNN_HEADERS

} // namespace ampc::cuda
