//===- CudnnGraph.h - cuDNN's backend graph API, opened at run time -------===//
//
// The layer under CudnnAttention: cuDNN 9's backend ("graph") API, the library opened with
// dlopen at run time (like cuBLASLt) and every call checked into a CudaError(Cudnn) that names
// the call, its status and cuDNN's own last message. Descriptor owns one backend descriptor;
// GraphBuilder adds tensors and operations (pointwise, matmul, reduction, reshape) to a graph,
// then finalizes it and keeps the first engine configuration cuDNN's heuristics offer that
// finalizes for the GPU (or a GPU only described to cuDNN); execute() binds a variant pack and
// enqueues the chosen plan. Only runtime/cuda includes it; without cuDNN's headers it declares
// nothing (AMPC_HAVE_CUDNN_HEADERS 0).
//
//===----------------------------------------------------------------------===//

#ifndef AMPC_RUNTIME_CUDA_CUDNNGRAPH_H
#define AMPC_RUNTIME_CUDA_CUDNNGRAPH_H

#include "runtime/cuda/Errors.h"

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

// Builds without cuDNN's headers still link: CudnnAttention then says why it cannot work.
#if __has_include(<cudnn_graph.h>)
#include <cudnn_graph.h>
#define AMPC_HAVE_CUDNN_HEADERS 1
#else
#define AMPC_HAVE_CUDNN_HEADERS 0
#endif

#if AMPC_HAVE_CUDNN_HEADERS

//===----------------------------------------------------------------------===//
// Loading
//===----------------------------------------------------------------------===//

// Every cuDNN entry point used here; all are in cudnn_graph.h since 9.0.
#define AMPC_CUDNN_ENTRY_POINTS(X)                                                                 \
  X(cudnnGetVersion)                                                                               \
  X(cudnnGetErrorString)                                                                           \
  X(cudnnCreate)                                                                                   \
  X(cudnnDestroy)                                                                                  \
  X(cudnnSetStream)                                                                                \
  X(cudnnBackendCreateDescriptor)                                                                  \
  X(cudnnBackendDestroyDescriptor)                                                                 \
  X(cudnnBackendSetAttribute)                                                                      \
  X(cudnnBackendGetAttribute)                                                                      \
  X(cudnnBackendFinalize)                                                                          \
  X(cudnnBackendExecute)

namespace ampc::cuda::cudnn {

/// cuDNN's entry points, resolved from one library that stays loaded for the process.
struct CudnnApi {
#define AMPC_CUDNN_MEMBER(name) decltype(&::name) name = nullptr;
  AMPC_CUDNN_ENTRY_POINTS(AMPC_CUDNN_MEMBER)
#undef AMPC_CUDNN_MEMBER
  /// Optional: cuDNN's own explanation of the last failure, when the library has it.
  decltype(&::cudnnGetLastErrorString) cudnnGetLastErrorString = nullptr;

  std::string library;
  size_t version = 0;

  /// "<call> failed: CUDNN_STATUS_NOT_SUPPORTED while <doing>: <cuDNN's last error>".
  std::string failure(cudnnStatus_t status, const char *call, const char *doing) const {
    const char *name = cudnnGetErrorString(status);
    std::string message = std::string(call) +
                          " failed: " + (name ? name : "cudnnStatus_t " + std::to_string(status)) +
                          " while " + doing;
    if (cudnnGetLastErrorString) {
      char text[1024] = {};
      cudnnGetLastErrorString(text, sizeof text);
      std::string last = text;
      // Keep what() one line: cuDNN's message may span several.
      for (char &c : last)
        if (c == '\n' || c == '\r')
          c = ' ';
      if (!last.empty())
        message += ": " + last;
    }
    return message;
  }

  void check(cudnnStatus_t status, const char *call, const char *doing) const {
    if (status != CUDNN_STATUS_SUCCESS)
      throw CudaError(CudaErrorKind::Cudnn, failure(status, call, doing), status);
  }
};

/// The process-wide table, loaded on first use; every later call repeats a failure.
const CudnnApi &cudnnApi();

//===----------------------------------------------------------------------===//
// Descriptors and graphs
//===----------------------------------------------------------------------===//

/// One backend descriptor, destroyed with this object.
class Descriptor {
public:
  Descriptor(const CudnnApi &cudnn, cudnnBackendDescriptorType_t type, const char *doing)
      : api(&cudnn) {
    cudnnBackendDescriptor_t created = nullptr;
    cudnn.check(cudnn.cudnnBackendCreateDescriptor(type, &created), "cudnnBackendCreateDescriptor",
                doing);
    descriptor = created;
  }
  ~Descriptor() {
    if (descriptor)
      api->cudnnBackendDestroyDescriptor(descriptor);
  }
  Descriptor(Descriptor &&other) noexcept
      : api(other.api), descriptor(std::exchange(other.descriptor, nullptr)) {}
  Descriptor &operator=(Descriptor &&) = delete;
  Descriptor(const Descriptor &) = delete;
  Descriptor &operator=(const Descriptor &) = delete;

  cudnnBackendDescriptor_t get() const { return descriptor; }

private:
  const CudnnApi *api;
  cudnnBackendDescriptor_t descriptor = nullptr;
};

/// cudnnBackendSetAttribute, naming the attribute when it fails.
void setAttribute(const CudnnApi &api, cudnnBackendDescriptor_t descriptor,
                  cudnnBackendAttributeName_t name, const char *nameText,
                  cudnnBackendAttributeType_t type, int64_t count, const void *values,
                  const char *doing);

// An attribute and its name, for the messages.
#define AMPC_CUDNN_ATTR(name) name, #name

/// A finalized graph: every descriptor it was made of, kept alive as long as its plan, and the
/// execution plan of the engine chosen.
struct BuiltGraph {
  std::vector<Descriptor> descriptors; ///< in creation order; destroyed in reverse
  cudnnBackendDescriptor_t plan = nullptr;
  int64_t workspaceBytes = 0;
  int64_t engineIndex = -1; ///< CUDNN_ATTR_ENGINE_GLOBAL_INDEX, for description()

  void clear() {
    while (!descriptors.empty())
      descriptors.pop_back();
    plan = nullptr;
  }
  ~BuiltGraph() { clear(); }
};

/// Dimensions and element strides of a 4-D tensor.
struct Shape {
  std::array<int64_t, 4> dims, strides;
};

/// A packed row-major shape.
inline Shape packed(int64_t d0, int64_t d1, int64_t d2, int64_t d3) {
  return {{d0, d1, d2, d3}, {d1 * d2 * d3, d2 * d3, d3, 1}};
}

/// Virtual tensors' unique ids count up from here; a graph's own tensors take smaller ones.
constexpr int64_t kFirstVirtualUid = 100;

/// Builds one operation graph into a BuiltGraph and picks its engine.
class GraphBuilder {
public:
  GraphBuilder(const CudnnApi &cudnn, BuiltGraph &into, const char *context)
      : api(cudnn), graph(into), doing(context) {}

  /// A tensor in memory (or, \p byValue, a host f32 scalar) the variant pack names by \p uid.
  cudnnBackendDescriptor_t tensor(int64_t uid, const Shape &shape, cudnnDataType_t type,
                                  bool byValue = false) {
    return makeTensor(uid, shape, type, /*isVirtual=*/false, byValue);
  }
  /// An f32 scalar passed by value from host memory.
  cudnnBackendDescriptor_t scalar(int64_t uid) {
    return tensor(uid, packed(1, 1, 1, 1), CUDNN_DATA_FLOAT, /*byValue=*/true);
  }
  /// An intermediate the engine never writes to memory.
  cudnnBackendDescriptor_t virtualTensor(const Shape &shape, cudnnDataType_t type) {
    return makeTensor(nextVirtualUid++, shape, type, /*isVirtual=*/true, /*byValue=*/false);
  }

  /// y = mode(x[, b[, t]]), computed in \p math; \p axis only for GEN_INDEX.
  void pointwise(cudnnPointwiseMode_t mode, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t b,
                 cudnnBackendDescriptor_t t, cudnnBackendDescriptor_t y,
                 cudnnDataType_t math = CUDNN_DATA_FLOAT, int64_t axis = -1) {
    cudnnBackendDescriptor_t desc = create(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
    set(desc, AMPC_CUDNN_ATTR(CUDNN_ATTR_POINTWISE_MODE), CUDNN_TYPE_POINTWISE_MODE, 1, &mode);
    set(desc, AMPC_CUDNN_ATTR(CUDNN_ATTR_POINTWISE_MATH_PREC), CUDNN_TYPE_DATA_TYPE, 1, &math);
    if (mode == CUDNN_POINTWISE_GEN_INDEX)
      set(desc, AMPC_CUDNN_ATTR(CUDNN_ATTR_POINTWISE_AXIS), CUDNN_TYPE_INT64, 1, &axis);
    finalize(desc, "the pointwise descriptor");
    cudnnBackendDescriptor_t op = create(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
    set(op, AMPC_CUDNN_ATTR(CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR),
        CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &desc);
    set(op, AMPC_CUDNN_ATTR(CUDNN_ATTR_OPERATION_POINTWISE_XDESC), CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
        &x);
    if (b)
      set(op, AMPC_CUDNN_ATTR(CUDNN_ATTR_OPERATION_POINTWISE_BDESC), CUDNN_TYPE_BACKEND_DESCRIPTOR,
          1, &b);
    if (t)
      set(op, AMPC_CUDNN_ATTR(CUDNN_ATTR_OPERATION_POINTWISE_TDESC), CUDNN_TYPE_BACKEND_DESCRIPTOR,
          1, &t);
    set(op, AMPC_CUDNN_ATTR(CUDNN_ATTR_OPERATION_POINTWISE_YDESC), CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
        &y);
    // The frontend always sets both blend factors (to 1).
    const float one = 1.0f;
    set(op, AMPC_CUDNN_ATTR(CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1), CUDNN_TYPE_FLOAT, 1, &one);
    set(op, AMPC_CUDNN_ATTR(CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2), CUDNN_TYPE_FLOAT, 1, &one);
    addOperation(op, "a pointwise operation");
  }
  void unary(cudnnPointwiseMode_t mode, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y) {
    pointwise(mode, x, nullptr, nullptr, y);
  }
  void binary(cudnnPointwiseMode_t mode, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t b,
              cudnnBackendDescriptor_t y) {
    pointwise(mode, x, b, nullptr, y);
  }

  /// c = a b over the last two dimensions, accumulated in f32.
  void matmul(cudnnBackendDescriptor_t a, cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t c) {
    cudnnBackendDescriptor_t desc = create(CUDNN_BACKEND_MATMUL_DESCRIPTOR);
    const cudnnDataType_t compute = CUDNN_DATA_FLOAT;
    set(desc, AMPC_CUDNN_ATTR(CUDNN_ATTR_MATMUL_COMP_TYPE), CUDNN_TYPE_DATA_TYPE, 1, &compute);
    finalize(desc, "the matmul descriptor");
    cudnnBackendDescriptor_t op = create(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
    set(op, AMPC_CUDNN_ATTR(CUDNN_ATTR_OPERATION_MATMUL_ADESC), CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
        &a);
    set(op, AMPC_CUDNN_ATTR(CUDNN_ATTR_OPERATION_MATMUL_BDESC), CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
        &b);
    set(op, AMPC_CUDNN_ATTR(CUDNN_ATTR_OPERATION_MATMUL_CDESC), CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
        &c);
    set(op, AMPC_CUDNN_ATTR(CUDNN_ATTR_OPERATION_MATMUL_DESC), CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
        &desc);
    addOperation(op, "a matmul operation");
  }

  /// y = reduce(x) over the dimensions where y has extent 1, in f32.
  void reduction(cudnnReduceTensorOp_t mode, cudnnBackendDescriptor_t x,
                 cudnnBackendDescriptor_t y) {
    cudnnBackendDescriptor_t desc = create(CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
    const cudnnDataType_t compute = CUDNN_DATA_FLOAT;
    set(desc, AMPC_CUDNN_ATTR(CUDNN_ATTR_REDUCTION_OPERATOR), CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1,
        &mode);
    set(desc, AMPC_CUDNN_ATTR(CUDNN_ATTR_REDUCTION_COMP_TYPE), CUDNN_TYPE_DATA_TYPE, 1, &compute);
    finalize(desc, "the reduction descriptor");
    cudnnBackendDescriptor_t op = create(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR);
    set(op, AMPC_CUDNN_ATTR(CUDNN_ATTR_OPERATION_REDUCTION_XDESC), CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
        &x);
    set(op, AMPC_CUDNN_ATTR(CUDNN_ATTR_OPERATION_REDUCTION_YDESC), CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
        &y);
    set(op, AMPC_CUDNN_ATTR(CUDNN_ATTR_OPERATION_REDUCTION_DESC), CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
        &desc);
    addOperation(op, "a reduction operation");
  }

  /// y = x seen with y's dimensions and strides (a transpose, in the graphs below).
  void reshape(cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y) {
    cudnnBackendDescriptor_t op = create(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR);
    set(op, AMPC_CUDNN_ATTR(CUDNN_ATTR_OPERATION_RESHAPE_XDESC), CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
        &x);
    set(op, AMPC_CUDNN_ATTR(CUDNN_ATTR_OPERATION_RESHAPE_YDESC), CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
        &y);
    addOperation(op, "a reshape operation");
  }

  /// The three operations of a 2-D cross-correlation, each with f32 accumulation and
  /// alpha 1, beta 0.
  enum class ConvolutionPass { Forward, BackwardData, BackwardFilter };
  /// Forward: y = conv(x, w); BackwardData: x is dx = conv^T(y = dy, w); BackwardFilter: w is
  /// dw from x and y = dy. \p stride, \p dilation and the paddings are (height, width).
  void convolution(ConvolutionPass pass, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t w,
                   cudnnBackendDescriptor_t y, const std::array<int64_t, 2> &stride,
                   const std::array<int64_t, 2> &dilation,
                   const std::array<int64_t, 2> &padBegin, const std::array<int64_t, 2> &padEnd) {
    cudnnBackendDescriptor_t desc = create(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
    const cudnnDataType_t compute = CUDNN_DATA_FLOAT;
    const cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
    const int64_t spatialDims = 2;
    set(desc, AMPC_CUDNN_ATTR(CUDNN_ATTR_CONVOLUTION_COMP_TYPE), CUDNN_TYPE_DATA_TYPE, 1,
        &compute);
    set(desc, AMPC_CUDNN_ATTR(CUDNN_ATTR_CONVOLUTION_CONV_MODE), CUDNN_TYPE_CONVOLUTION_MODE, 1,
        &mode);
    set(desc, AMPC_CUDNN_ATTR(CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS), CUDNN_TYPE_INT64, 1,
        &spatialDims);
    set(desc, AMPC_CUDNN_ATTR(CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES), CUDNN_TYPE_INT64, 2,
        stride.data());
    set(desc, AMPC_CUDNN_ATTR(CUDNN_ATTR_CONVOLUTION_DILATIONS), CUDNN_TYPE_INT64, 2,
        dilation.data());
    set(desc, AMPC_CUDNN_ATTR(CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS), CUDNN_TYPE_INT64, 2,
        padBegin.data());
    set(desc, AMPC_CUDNN_ATTR(CUDNN_ATTR_CONVOLUTION_POST_PADDINGS), CUDNN_TYPE_INT64, 2,
        padEnd.data());
    finalize(desc, "the convolution descriptor");
    // Each pass's descriptor and the attributes of its alpha, beta, convolution and the
    // tensors in the order x (or dx), w (or dw), y (or dy).
    struct PassAttributes {
      cudnnBackendDescriptorType_t type;
      const char *what;
      std::array<std::pair<cudnnBackendAttributeName_t, const char *>, 6> names;
    };
#define AMPC_CUDNN_CONV_ATTRS(PREFIX, X, W, Y)                                                     \
  {{{CUDNN_ATTR_OPERATION_CONVOLUTION_##PREFIX##_ALPHA,                                            \
     "CUDNN_ATTR_OPERATION_CONVOLUTION_" #PREFIX "_ALPHA"},                                        \
    {CUDNN_ATTR_OPERATION_CONVOLUTION_##PREFIX##_BETA,                                             \
     "CUDNN_ATTR_OPERATION_CONVOLUTION_" #PREFIX "_BETA"},                                         \
    {CUDNN_ATTR_OPERATION_CONVOLUTION_##PREFIX##_CONV_DESC,                                        \
     "CUDNN_ATTR_OPERATION_CONVOLUTION_" #PREFIX "_CONV_DESC"},                                    \
    {CUDNN_ATTR_OPERATION_CONVOLUTION_##PREFIX##_##X,                                              \
     "CUDNN_ATTR_OPERATION_CONVOLUTION_" #PREFIX "_" #X},                                          \
    {CUDNN_ATTR_OPERATION_CONVOLUTION_##PREFIX##_##W,                                              \
     "CUDNN_ATTR_OPERATION_CONVOLUTION_" #PREFIX "_" #W},                                          \
    {CUDNN_ATTR_OPERATION_CONVOLUTION_##PREFIX##_##Y,                                              \
     "CUDNN_ATTR_OPERATION_CONVOLUTION_" #PREFIX "_" #Y}}}
    static const PassAttributes passes[] = {
        {CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR,
         "a convolution forward operation", AMPC_CUDNN_CONV_ATTRS(FORWARD, X, W, Y)},
        {CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR,
         "a convolution backward-data operation", AMPC_CUDNN_CONV_ATTRS(BWD_DATA, DX, W, DY)},
        {CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR,
         "a convolution backward-filter operation", AMPC_CUDNN_CONV_ATTRS(BWD_FILTER, X, DW, DY)}};
#undef AMPC_CUDNN_CONV_ATTRS
    const PassAttributes &chosen = passes[static_cast<int>(pass)];
    const float alpha = 1.0f, beta = 0.0f;
    cudnnBackendDescriptor_t op = create(chosen.type);
    set(op, chosen.names[0].first, chosen.names[0].second, CUDNN_TYPE_FLOAT, 1, &alpha);
    set(op, chosen.names[1].first, chosen.names[1].second, CUDNN_TYPE_FLOAT, 1, &beta);
    const cudnnBackendDescriptor_t operands[] = {desc, x, w, y};
    for (int i = 0; i < 4; ++i)
      set(op, chosen.names[2 + i].first, chosen.names[2 + i].second,
          CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &operands[i]);
    addOperation(op, chosen.what);
  }

  /// Finalizes the graph, asks the heuristics (mode A, then FALLBACK) for engine configurations
  /// and keeps the first whose execution plan finalizes, for the GPU of \p handle, or (a null
  /// handle) the GPU that \p deviceProp describes: cuDNN's device-less compilation, which
  /// chooses and compiles the engine's kernels as for that GPU and fails only where they would
  /// be loaded.
  void finish(cudnnHandle_t handle, cudnnBackendDescriptor_t deviceProp = nullptr);

private:
  cudnnBackendDescriptor_t create(cudnnBackendDescriptorType_t type) {
    graph.descriptors.emplace_back(api, type, doing);
    return graph.descriptors.back().get();
  }
  void set(cudnnBackendDescriptor_t descriptor, cudnnBackendAttributeName_t name,
           const char *nameText, cudnnBackendAttributeType_t type, int64_t count,
           const void *values) {
    setAttribute(api, descriptor, name, nameText, type, count, values, doing);
  }
  void finalize(cudnnBackendDescriptor_t descriptor, const char *what) {
    const cudnnStatus_t status = api.cudnnBackendFinalize(descriptor);
    if (status != CUDNN_STATUS_SUCCESS)
      throw CudaError(
          CudaErrorKind::Cudnn,
          api.failure(status, ("cudnnBackendFinalize(" + std::string(what) + ")").c_str(), doing),
          status);
  }
  void addOperation(cudnnBackendDescriptor_t op, const char *what) {
    finalize(op, what);
    operations.push_back(op);
  }
  cudnnBackendDescriptor_t makeTensor(int64_t uid, const Shape &shape, cudnnDataType_t type,
                                      bool isVirtual, bool byValue) {
    cudnnBackendDescriptor_t desc = create(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    // Every operand is 16-byte aligned: the base pointers by the caller's contract, the
    // strides by cudnnAttentionProblemError.
    const int64_t alignment = 16;
    const bool yes = true;
    set(desc, AMPC_CUDNN_ATTR(CUDNN_ATTR_TENSOR_DATA_TYPE), CUDNN_TYPE_DATA_TYPE, 1, &type);
    set(desc, AMPC_CUDNN_ATTR(CUDNN_ATTR_TENSOR_DIMENSIONS), CUDNN_TYPE_INT64, 4,
        shape.dims.data());
    set(desc, AMPC_CUDNN_ATTR(CUDNN_ATTR_TENSOR_STRIDES), CUDNN_TYPE_INT64, 4,
        shape.strides.data());
    set(desc, AMPC_CUDNN_ATTR(CUDNN_ATTR_TENSOR_UNIQUE_ID), CUDNN_TYPE_INT64, 1, &uid);
    set(desc, AMPC_CUDNN_ATTR(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT), CUDNN_TYPE_INT64, 1, &alignment);
    if (isVirtual)
      set(desc, AMPC_CUDNN_ATTR(CUDNN_ATTR_TENSOR_IS_VIRTUAL), CUDNN_TYPE_BOOLEAN, 1, &yes);
    if (byValue)
      set(desc, AMPC_CUDNN_ATTR(CUDNN_ATTR_TENSOR_IS_BY_VALUE), CUDNN_TYPE_BOOLEAN, 1, &yes);
    finalize(desc, "a tensor descriptor");
    return desc;
  }

  const CudnnApi &api;
  BuiltGraph &graph;
  const char *doing;
  std::vector<cudnnBackendDescriptor_t> operations;
  int64_t nextVirtualUid = kFirstVirtualUid;
};

/// A GPU described to cuDNN by its JSON device description (deviceVer, multiProcessorCount,
/// ...), finalized, for device-less compilation (GraphBuilder::finish without a handle). Throws
/// CudaError(Cudnn) when this cuDNN has no device descriptions.
Descriptor describeDevice(const CudnnApi &api, const std::string &deviceJson);

/// cuDNN opened and a GPU described to it for a device-less probe, or why that cannot be done
/// here (no library, or a release without device descriptions).
struct ProbeDevice {
  const CudnnApi *api = nullptr;
  std::optional<Descriptor> device;
  std::string unavailable;

  /// Builds one graph with \p build(api, graph, deviceProp) and records in \p failure and
  /// \p status how it ended: "" when its plan finalized, else the error and its cudnnStatus_t.
  template <typename Build> void probe(Build build, std::string &failure, int &status) const {
    BuiltGraph graph;
    try {
      build(*api, graph, device->get());
    } catch (const CudaError &error) {
      failure = error.what();
      status = error.code();
    }
    graph.clear();
  }
};
ProbeDevice openProbeDevice(const std::string &deviceJson);

/// Binds \p count (uid, pointer) pairs and the workspace, and enqueues \p graph's plan.
void execute(const CudnnApi &api, cudnnHandle_t handle, const BuiltGraph &graph,
             const int64_t *uids, void *const *pointers, int64_t count, void *workspace,
             const char *doing);

} // namespace ampc::cuda::cudnn

#endif // AMPC_HAVE_CUDNN_HEADERS

#endif // AMPC_RUNTIME_CUDA_CUDNNGRAPH_H
