//===- CudnnAttention.cpp - Fused attention through cuDNN's graph API -----===//
//
// cuDNN has no "attention" call in its 9.0 graph API: its fused flash-attention engines are
// found by pattern-matching an operation graph of matmuls, pointwise ops, reductions and
// reshapes. The graphs below are the ones NVIDIA's frontend (NVIDIA/cudnn-frontend,
// include/cudnn_frontend/node/scaled_dot_product_flash_attention.h with softmax.h and
// diagonal_band_mask.h) lowers its SDPA forward and backward nodes to for 16-bit operands
// without bias, dropout, padding or grouped heads, op for op, with the same data types, the
// same virtual / non-virtual split and the same scalars passed by value. Engines match these
// exact chains, so "simplifying" a graph (say, folding the scale into the matmul) loses the
// engine. Shapes: B batch, H heads, T queries, S keys, D head dimension.
//
// Forward (one graph, o and lse out):
//   s = q k^T (matmul, f32); s *= scale; causal: s = row >= col ? s : -inf;
//   m = max_s s; e = exp(s - m); z = sum_s e; lse = m + log z; p = e / z (16-bit); o = p v.
// Backward (one graph, dq dk dv out):
//   sum = rowsum(dO * o) (f32, through memory); p = exp(scale * q k^T masked - lse);
//   dv = p^T dO; ds = p * (dO v^T - sum) * scale; dk = ds^T q; dq = ds k (f32 accumulator,
//   then converted).
//
// cuDNN's "stats" are exactly our lse: the frontend's composite softmax (softmax.h) builds
// stats = max + log(sum(exp(s - max))) with POINTWISE_LOG (natural log) over the scaled, masked
// scores, and its backward recomputes the probabilities as exp(s - stats).
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/CudnnAttention.h"

#include "runtime/cuda/Driver.h"
#include "runtime/cuda/DynamicLibrary.h"
#include "runtime/cuda/Errors.h"

#include <cmath>
#include <cstdlib>
#include <limits>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

// Builds without cuDNN's headers still link: the constructor then says why it cannot work.
#if __has_include(<cudnn_graph.h>)
#include <cudnn_graph.h>
#define AMPC_HAVE_CUDNN_HEADERS 1
#else
#define AMPC_HAVE_CUDNN_HEADERS 0
#endif

#ifndef AMPC_CUDA_LIBRARY_DIR
#define AMPC_CUDA_LIBRARY_DIR ""
#endif

namespace ampc::cuda {

//===----------------------------------------------------------------------===//
// The problem (pure, tested without a GPU)
//===----------------------------------------------------------------------===//

namespace {

/// cuDNN's engines read every operand with 16-byte vector loads (TMA on Hopper), so each
/// stride must be a whole number of 16 bytes: 8 elements of a 16-bit type.
constexpr int64_t kStrideMultiple = 8;

/// The largest head dimension both directions support on every GPU and 9.x release: the
/// frontend's checks allow 256 in the forward, but 128 in the backward on most GPUs and releases.
constexpr int64_t kMaxHeadDim = 128;

size_t alignUp(size_t bytes, size_t alignment) {
  return (bytes + alignment - 1) / alignment * alignment;
}

std::string stridesText(const AttentionStrides &strides) {
  return "{" + std::to_string(strides[0]) + ", " + std::to_string(strides[1]) + ", " +
         std::to_string(strides[2]) + "}";
}

/// Why \p name's (batch, head, row) strides do not fit cuDNN, or "".
std::string stridesProblem(const char *name, const AttentionStrides &strides, int64_t headDim) {
  for (int64_t stride : strides)
    if (stride <= 0 || stride % kStrideMultiple != 0)
      return std::string(name) + "'s strides " + stridesText(strides) +
             " must be positive multiples of 8 elements (16 bytes)";
  if (strides[2] < headDim)
    return std::string(name) + "'s row stride " + std::to_string(strides[2]) +
           " is smaller than the head dimension " + std::to_string(headDim);
  return "";
}

} // namespace

std::string cudnnAttentionProblemError(const CudnnAttentionProblem &p) {
  if (p.batch <= 0 || p.heads <= 0 || p.queries <= 0 || p.keys <= 0 || p.headDim <= 0)
    return "batch, heads, queries, keys and head dimension must be positive (got B=" +
           std::to_string(p.batch) + ", H=" + std::to_string(p.heads) +
           ", T=" + std::to_string(p.queries) + ", S=" + std::to_string(p.keys) +
           ", D=" + std::to_string(p.headDim) + ")";
  if (p.type != plan::DType::BF16 && p.type != plan::DType::F16)
    return std::string("cuDNN's fused attention takes bf16 or f16 operands, not ") +
           plan::dtypeName(p.type);
  if (p.headDim % 8 != 0 || p.headDim > kMaxHeadDim)
    return "the head dimension must be a multiple of 8 and at most " + std::to_string(kMaxHeadDim) +
           " (got " + std::to_string(p.headDim) + ")";
  // cuDNN's causal mask keeps col <= row (top-left); ours keeps col <= row + S - T
  // (bottom-right). They agree only when T == S.
  if (p.causal && p.queries != p.keys)
    return "causal attention needs as many queries as keys (got T=" + std::to_string(p.queries) +
           ", S=" + std::to_string(p.keys) + "): cuDNN's causal diagonal is top-left aligned";
  // The frontend refuses this shape for the backward.
  if (p.queries == 1 && p.keys == 1)
    return "one query and one key is not supported by cuDNN's attention backward";
  if (!std::isfinite(p.scale))
    return "the scale must be finite (got " + std::to_string(p.scale) + ")";
  const std::pair<const char *, const AttentionStrides *> operands[] = {
      {"q", &p.q},   {"k", &p.k},   {"v", &p.v},   {"o", &p.o},
      {"dO", &p.dO}, {"dq", &p.dq}, {"dk", &p.dk}, {"dv", &p.dv}};
  for (const auto &[name, strides] : operands) {
    std::string problem = stridesProblem(name, *strides, p.headDim);
    if (!problem.empty())
      return problem;
  }
  return "";
}

std::string formatCudnnVersion(size_t version) {
  // cuDNN 8 and older counted major * 1000 + minor * 100 + patch.
  if (version < 10000)
    return std::to_string(version / 1000) + "." + std::to_string(version / 100 % 10) + "." +
           std::to_string(version % 100);
  return std::to_string(version / 10000) + "." + std::to_string(version / 100 % 100) + "." +
         std::to_string(version % 100);
}

std::string cudnnAttentionVersionError(const CudnnAttentionProblem &p, size_t version,
                                       bool backward) {
  const std::string cudnn = "cuDNN " + formatCudnnVersion(version);
  if (version / 10000 != 9)
    return cudnn + " is not supported: the attention graphs are written for cuDNN 9.x";
  if (!backward)
    return "";
  // The frontend refuses both releases for the 16-bit backward ("known bugs").
  if (version == 91000 || version == 91001)
    return cudnn + "'s attention backward has known bugs; use cuDNN 9.10.2 or newer";
  // Up to 9.15.0 the backward could read out of bounds when replayed from a CUDA graph with S
  // not a multiple of 128 (frontend v1.16 release notes; the frontend adds a padding mask with
  // device-side sequence lengths instead, which would need a host-to-device copy here).
  if (p.keys % 128 != 0 && version <= 91500)
    return cudnn + "'s attention backward can access memory out of bounds in CUDA graphs when " +
           "the key count is not a multiple of 128 (got " + std::to_string(p.keys) +
           "); use cuDNN 9.15.1 or newer";
  return "";
}

CudnnBackwardWorkspace cudnnBackwardWorkspace(const CudnnAttentionProblem &p, size_t planBytes) {
  constexpr size_t kAlignment = 256;
  const size_t rows = static_cast<size_t>(p.batch * p.heads * p.queries);
  CudnnBackwardWorkspace layout;
  layout.dqAccumulatorOffset = alignUp(planBytes, kAlignment);
  layout.dqAccumulatorBytes = rows * static_cast<size_t>(p.headDim) * sizeof(float);
  layout.softmaxSumOffset =
      alignUp(layout.dqAccumulatorOffset + layout.dqAccumulatorBytes, kAlignment);
  layout.softmaxSumBytes = rows * sizeof(float);
  layout.totalBytes = layout.softmaxSumOffset + layout.softmaxSumBytes;
  return layout;
}

#if AMPC_HAVE_CUDNN_HEADERS

//===----------------------------------------------------------------------===//
// Loading
//===----------------------------------------------------------------------===//

#define AMPC_CUDNN_STRINGIFY_EXPANDED(x) #x
#define AMPC_CUDNN_STRINGIFY(x) AMPC_CUDNN_STRINGIFY_EXPANDED(x)

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

namespace {

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

std::vector<std::string> cudnnLibraryCandidates() {
  std::vector<std::string> names;
  if (const char *library = std::getenv("AMPC_CUDNN_LIBRARY"))
    if (*library)
      names.push_back(library);
  names.push_back("libcudnn.so.9");
  names.push_back("libcudnn.so");
  // The toolkit's lib64 (where a CUDA install may put cuDNN) is not on the loader's default
  // path; a PyTorch wheel's copy is reached through AMPC_CUDNN_LIBRARY or LD_LIBRARY_PATH.
  const std::string toolkitDir = AMPC_CUDA_LIBRARY_DIR;
  if (!toolkitDir.empty())
    names.push_back(toolkitDir + "/libcudnn.so.9");
  return names;
}

/// Opens cuDNN into \p api; throws CudaError(Cudnn) and leaves nothing open on failure.
void loadInto(CudnnApi &api) {
  DynamicLibrary library = DynamicLibrary::openFirst(cudnnLibraryCandidates());
  if (!library)
    throw CudaError(CudaErrorKind::Cudnn,
                    "cuDNN not found (libcudnn.so.9 could not be loaded): install cuDNN 9, add "
                    "its directory to LD_LIBRARY_PATH or set AMPC_CUDNN_LIBRARY to it");
  api.library = library.name();
  std::string missing;
#define AMPC_CUDNN_RESOLVE(name)                                                                   \
  if (!library.resolve(api.name, AMPC_CUDNN_STRINGIFY(name)))                                      \
    missing += (missing.empty() ? "" : ", ") + std::string(AMPC_CUDNN_STRINGIFY(name));
  AMPC_CUDNN_ENTRY_POINTS(AMPC_CUDNN_RESOLVE)
#undef AMPC_CUDNN_RESOLVE
  if (!missing.empty())
    throw CudaError(CudaErrorKind::Cudnn,
                    api.library + " is not a usable cuDNN 9 (it lacks " + missing + ")");
  library.resolve(api.cudnnGetLastErrorString, "cudnnGetLastErrorString");
  api.version = api.cudnnGetVersion();
  if (api.version / 10000 != 9)
    throw CudaError(CudaErrorKind::Cudnn, api.library + " is cuDNN " +
                                              formatCudnnVersion(api.version) +
                                              ", but the attention graphs need cuDNN 9.x");
  library.release();
}

/// The process-wide table, loaded on first use; every later call repeats a failure.
const CudnnApi &cudnnApi() {
  static std::once_flag once;
  static CudnnApi api;
  static bool loaded = false;
  static std::string failure;
  std::call_once(once, [] {
    try {
      loadInto(api);
      loaded = true;
    } catch (const CudaError &error) {
      failure = error.what();
    }
  });
  if (!loaded)
    throw CudaError(CudaErrorKind::Cudnn, failure);
  return api;
}

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
                  const char *doing) {
  const cudnnStatus_t status = api.cudnnBackendSetAttribute(descriptor, name, type, count, values);
  if (status != CUDNN_STATUS_SUCCESS)
    throw CudaError(CudaErrorKind::Cudnn,
                    api.failure(status,
                                ("cudnnBackendSetAttribute(" + std::string(nameText) + ")").c_str(),
                                doing),
                    status);
}

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
Shape packed(int64_t d0, int64_t d1, int64_t d2, int64_t d3) {
  return {{d0, d1, d2, d3}, {d1 * d2 * d3, d2 * d3, d3, 1}};
}

/// Non-virtual tensors, addressed by the variant pack; virtual ones count up from kVirtualUid.
enum Uid : int64_t {
  kQ = 1,
  kK = 2,
  kV = 3,
  kO = 4,
  kLse = 5, ///< cuDNN's "stats", f32 [B, H, T, 1]
  kDO = 6,
  kDQ = 7,
  kDK = 8,
  kDV = 9,
  kScale = 10,         ///< the attention scale, f32 by value
  kMaskValue = 11,     ///< what masked scores become, f32 by value
  kOne = 12,           ///< 1.0f by value: the softmax sum's (absent) dropout scale
  kSoftmaxSum = 13,    ///< f32 [B, H, T, 1] in backward()'s workspace
  kDqAccumulator = 14, ///< f32 [B, H, T, D] in backward()'s workspace
  kVirtualUid = 100,
};

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

  /// Finalizes the graph, asks the heuristics (mode A, then FALLBACK) for engine configurations
  /// and keeps the first whose execution plan finalizes, for the GPU of \p handle, or (a null handle) the GPU that \p deviceProp
  /// describes: cuDNN's device-less compilation, which chooses and compiles the engine's kernels
  /// as for that GPU and fails only where they would be loaded.
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
  int64_t nextVirtualUid = kVirtualUid;
};

void GraphBuilder::finish(cudnnHandle_t handle, cudnnBackendDescriptor_t deviceProp) {
  cudnnBackendDescriptor_t opGraph = create(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  set(opGraph, AMPC_CUDNN_ATTR(CUDNN_ATTR_OPERATIONGRAPH_OPS), CUDNN_TYPE_BACKEND_DESCRIPTOR,
      static_cast<int64_t>(operations.size()), operations.data());
  if (handle)
    set(opGraph, AMPC_CUDNN_ATTR(CUDNN_ATTR_OPERATIONGRAPH_HANDLE), CUDNN_TYPE_HANDLE, 1, &handle);
  finalize(opGraph, "the operation graph");

  // Why the last candidate failed, for the message when none succeeds.
  std::string lastFailure = "the heuristics offered no engine configuration";
  int lastStatus = 0;
  int64_t tried = 0;
  for (cudnnBackendHeurMode_t mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK}) {
    Descriptor heuristics(api, CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, doing);
    set(heuristics.get(), AMPC_CUDNN_ATTR(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH),
        CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &opGraph);
    set(heuristics.get(), AMPC_CUDNN_ATTR(CUDNN_ATTR_ENGINEHEUR_MODE), CUDNN_TYPE_HEUR_MODE, 1,
        &mode);
    if (deviceProp)
      set(heuristics.get(), AMPC_CUDNN_ATTR(CUDNN_ATTR_ENGINEHEUR_DEVICEPROP),
          CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &deviceProp);
    cudnnStatus_t status = api.cudnnBackendFinalize(heuristics.get());
    if (status != CUDNN_STATUS_SUCCESS) {
      lastFailure = api.failure(status, "cudnnBackendFinalize(engine heuristics)", doing);
      lastStatus = status;
      continue;
    }
    int64_t count = 0;
    api.check(api.cudnnBackendGetAttribute(heuristics.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                           CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, nullptr),
              "cudnnBackendGetAttribute(CUDNN_ATTR_ENGINEHEUR_RESULTS)", doing);
    // The heuristics fill descriptors we create.
    std::vector<Descriptor> configs;
    std::vector<cudnnBackendDescriptor_t> raw;
    for (int64_t i = 0; i < count; ++i) {
      configs.emplace_back(api, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, doing);
      raw.push_back(configs.back().get());
    }
    if (count > 0)
      api.check(api.cudnnBackendGetAttribute(heuristics.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                             CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &count,
                                             raw.data()),
                "cudnnBackendGetAttribute(CUDNN_ATTR_ENGINEHEUR_RESULTS)", doing);
    for (int64_t i = 0; i < count && i < static_cast<int64_t>(configs.size()); ++i) {
      ++tried;
      Descriptor plan(api, CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, doing);
      if (handle)
        set(plan.get(), AMPC_CUDNN_ATTR(CUDNN_ATTR_EXECUTION_PLAN_HANDLE), CUDNN_TYPE_HANDLE, 1,
            &handle);
      else
        set(plan.get(), AMPC_CUDNN_ATTR(CUDNN_ATTR_EXECUTION_PLAN_DEVICEPROP),
            CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &deviceProp);
      set(plan.get(), AMPC_CUDNN_ATTR(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG),
          CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &raw[i]);
      // Finalizing compiles the engine's kernels; an engine that cannot run this graph on
      // this GPU says so here, and the next candidate is tried.
      status = api.cudnnBackendFinalize(plan.get());
      if (status != CUDNN_STATUS_SUCCESS) {
        lastFailure = api.failure(status, "cudnnBackendFinalize(execution plan)", doing);
        lastStatus = status;
        continue;
      }
      int64_t returned = 0;
      api.check(api.cudnnBackendGetAttribute(plan.get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                             CUDNN_TYPE_INT64, 1, &returned, &graph.workspaceBytes),
                "cudnnBackendGetAttribute(CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE)", doing);
      // The engine's index only labels description(); a failure to read it is not an error.
      Descriptor engine(api, CUDNN_BACKEND_ENGINE_DESCRIPTOR, doing);
      cudnnBackendDescriptor_t engineRaw = engine.get();
      int64_t index = -1;
      if (api.cudnnBackendGetAttribute(raw[i], CUDNN_ATTR_ENGINECFG_ENGINE,
                                       CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &returned,
                                       &engineRaw) == CUDNN_STATUS_SUCCESS &&
          api.cudnnBackendGetAttribute(engineRaw, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64,
                                       1, &returned, &index) == CUDNN_STATUS_SUCCESS)
        graph.engineIndex = index;
      // The plan refers to its configuration and the configuration to the graph: keep them
      // all (the heuristics too) until the graph is cleared.
      graph.descriptors.push_back(std::move(heuristics));
      for (Descriptor &config : configs)
        graph.descriptors.push_back(std::move(config));
      graph.descriptors.push_back(std::move(engine));
      graph.descriptors.push_back(std::move(plan));
      graph.plan = graph.descriptors.back().get();
      return;
    }
  }
  throw CudaError(CudaErrorKind::Cudnn,
                  "no cuDNN engine runs this attention problem (" + std::to_string(tried) +
                      " engine configurations tried); last: " + lastFailure,
                  lastStatus);
}

cudnnDataType_t ioType(plan::DType type) {
  return type == plan::DType::BF16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_HALF;
}

/// A [B, H, rows, D] operand with the problem's (batch, head, row) strides.
Shape operand(const CudnnAttentionProblem &p, const AttentionStrides &s, int64_t rows) {
  return {{p.batch, p.heads, rows, p.headDim}, {s[0], s[1], s[2], 1}};
}

/// The same operand seen transposed, [B, H, D, rows]: k^T and v^T for the matmuls.
Shape transposed(const CudnnAttentionProblem &p, const AttentionStrides &s, int64_t rows) {
  return {{p.batch, p.heads, p.headDim, rows}, {s[0], s[1], 1, s[2]}};
}

/// scores = row >= col ? scores : mask value, the frontend's causal (right bound 0, top-left)
/// diagonal band: two GEN_INDEX (int32 out), CMP_GE (boolean), BINARY_SELECT (t ? x : b).
cudnnBackendDescriptor_t causalMask(GraphBuilder &g, cudnnBackendDescriptor_t scores,
                                    const Shape &shape) {
  cudnnBackendDescriptor_t row = g.virtualTensor(shape, CUDNN_DATA_INT32);
  g.pointwise(CUDNN_POINTWISE_GEN_INDEX, scores, nullptr, nullptr, row, CUDNN_DATA_FLOAT, 2);
  cudnnBackendDescriptor_t col = g.virtualTensor(shape, CUDNN_DATA_INT32);
  g.pointwise(CUDNN_POINTWISE_GEN_INDEX, scores, nullptr, nullptr, col, CUDNN_DATA_FLOAT, 3);
  cudnnBackendDescriptor_t keep = g.virtualTensor(shape, CUDNN_DATA_BOOLEAN);
  g.pointwise(CUDNN_POINTWISE_CMP_GE, row, col, nullptr, keep, CUDNN_DATA_BOOLEAN);
  cudnnBackendDescriptor_t masked = g.virtualTensor(shape, CUDNN_DATA_FLOAT);
  g.pointwise(CUDNN_POINTWISE_BINARY_SELECT, scores, g.scalar(kMaskValue), keep, masked);
  return masked;
}

/// The forward graph: o and lse from q, k, v.
void buildForward(const CudnnApi &api, cudnnHandle_t handle, const CudnnAttentionProblem &p,
                  BuiltGraph &graph, cudnnBackendDescriptor_t deviceProp = nullptr) {
  GraphBuilder g(api, graph, "building cuDNN's attention forward graph");
  const cudnnDataType_t io = ioType(p.type), f32 = CUDNN_DATA_FLOAT;
  const int64_t B = p.batch, H = p.heads, T = p.queries, S = p.keys;
  const Shape scores = packed(B, H, T, S), rowStats = packed(B, H, T, 1);

  cudnnBackendDescriptor_t q = g.tensor(kQ, operand(p, p.q, T), io);
  cudnnBackendDescriptor_t kT = g.tensor(kK, transposed(p, p.k, S), io);
  cudnnBackendDescriptor_t v = g.tensor(kV, operand(p, p.v, S), io);
  cudnnBackendDescriptor_t o = g.tensor(kO, operand(p, p.o, T), io);
  cudnnBackendDescriptor_t lse = g.tensor(kLse, rowStats, f32);

  // s = q k^T (matmul), f32.
  cudnnBackendDescriptor_t s = g.virtualTensor(scores, f32);
  g.matmul(q, kT, s);
  // s = s * scale (pointwise MUL, the scale by value).
  cudnnBackendDescriptor_t scaled = g.virtualTensor(scores, f32);
  g.binary(CUDNN_POINTWISE_MUL, s, g.scalar(kScale), scaled);
  cudnnBackendDescriptor_t masked = p.causal ? causalMask(g, scaled, scores) : scaled;

  // The frontend's composite softmax with stats, in its order.
  // m = max over keys (reduction MAX), [B, H, T, 1].
  cudnnBackendDescriptor_t rowMax = g.virtualTensor(rowStats, f32);
  g.reduction(CUDNN_REDUCE_TENSOR_MAX, masked, rowMax);
  // e = exp(s - m) (SUB, EXP).
  cudnnBackendDescriptor_t shifted = g.virtualTensor(scores, f32);
  g.binary(CUDNN_POINTWISE_SUB, masked, rowMax, shifted);
  cudnnBackendDescriptor_t exps = g.virtualTensor(scores, f32);
  g.unary(CUDNN_POINTWISE_EXP, shifted, exps);
  // z = sum over keys (reduction ADD).
  cudnnBackendDescriptor_t rowSum = g.virtualTensor(rowStats, f32);
  g.reduction(CUDNN_REDUCE_TENSOR_ADD, exps, rowSum);
  // lse = m + log z (LOG, ADD): cuDNN's stats, written.
  cudnnBackendDescriptor_t logSum = g.virtualTensor(rowStats, f32);
  g.unary(CUDNN_POINTWISE_LOG, rowSum, logSum);
  g.binary(CUDNN_POINTWISE_ADD, rowMax, logSum, lse);
  // p = e / z (DIV), in the 16-bit type: the engine takes the second matmul's A in the i/o type.
  cudnnBackendDescriptor_t probs = g.virtualTensor(scores, io);
  g.binary(CUDNN_POINTWISE_DIV, exps, rowSum, probs);
  // o = p v (matmul).
  g.matmul(probs, v, o);

  g.finish(handle, deviceProp);
}

/// The backward graph: dq, dk, dv from q, k, v, o, dO and lse, as the frontend's composite
/// SDPA backward node lowers it (dO * o softmax sum and the f32 dQ accumulator non-virtual).
void buildBackward(const CudnnApi &api, cudnnHandle_t handle, const CudnnAttentionProblem &p,
                   BuiltGraph &graph, cudnnBackendDescriptor_t deviceProp = nullptr) {
  GraphBuilder g(api, graph, "building cuDNN's attention backward graph");
  const cudnnDataType_t io = ioType(p.type), f32 = CUDNN_DATA_FLOAT;
  const int64_t B = p.batch, H = p.heads, T = p.queries, S = p.keys, D = p.headDim;
  const Shape scores = packed(B, H, T, S), rowStats = packed(B, H, T, 1);
  // The [B, H, S, T] view of a packed [B, H, T, S] score matrix.
  const Shape scoresT = {{B, H, S, T}, {H * T * S, T * S, 1, S}};

  cudnnBackendDescriptor_t q = g.tensor(kQ, operand(p, p.q, T), io);
  cudnnBackendDescriptor_t kT = g.tensor(kK, transposed(p, p.k, S), io);
  cudnnBackendDescriptor_t vT = g.tensor(kV, transposed(p, p.v, S), io);
  cudnnBackendDescriptor_t o = g.tensor(kO, operand(p, p.o, T), io);
  cudnnBackendDescriptor_t dO = g.tensor(kDO, operand(p, p.dO, T), io);
  cudnnBackendDescriptor_t lse = g.tensor(kLse, rowStats, f32);
  cudnnBackendDescriptor_t dq = g.tensor(kDQ, operand(p, p.dq, T), io);
  cudnnBackendDescriptor_t dk = g.tensor(kDK, operand(p, p.dk, S), io);
  cudnnBackendDescriptor_t dv = g.tensor(kDV, operand(p, p.dv, S), io);
  cudnnBackendDescriptor_t scale = g.scalar(kScale);

  // sum = rowsum(dO * o) * 1 (MUL, reduction ADD, MUL by the no-dropout scale 1): the softmax
  // sum, non-virtual f32 in our workspace as the frontend has it.
  cudnnBackendDescriptor_t dOo = g.virtualTensor(packed(B, H, T, D), f32);
  g.binary(CUDNN_POINTWISE_MUL, dO, o, dOo);
  cudnnBackendDescriptor_t dOoSum = g.virtualTensor(rowStats, f32);
  g.reduction(CUDNN_REDUCE_TENSOR_ADD, dOo, dOoSum);
  cudnnBackendDescriptor_t softmaxSum = g.tensor(kSoftmaxSum, rowStats, f32);
  g.binary(CUDNN_POINTWISE_MUL, dOoSum, g.scalar(kOne), softmaxSum);

  // s = q k^T (matmul, f32); s *= scale; the causal mask.
  cudnnBackendDescriptor_t s = g.virtualTensor(scores, f32);
  g.matmul(q, kT, s);
  cudnnBackendDescriptor_t scaled = g.virtualTensor(scores, f32);
  g.binary(CUDNN_POINTWISE_MUL, s, scale, scaled);
  cudnnBackendDescriptor_t masked = p.causal ? causalMask(g, scaled, scores) : scaled;
  // p = exp(s - lse) (SUB, EXP): the forward's probabilities, recomputed from its stats.
  cudnnBackendDescriptor_t shifted = g.virtualTensor(scores, f32);
  g.binary(CUDNN_POINTWISE_SUB, masked, lse, shifted);
  cudnnBackendDescriptor_t probs = g.virtualTensor(scores, f32);
  g.unary(CUDNN_POINTWISE_EXP, shifted, probs);

  // dv = p^T dO (reshape to [B, H, S, T] in the 16-bit type, matmul).
  cudnnBackendDescriptor_t probsT = g.virtualTensor(scoresT, io);
  g.reshape(probs, probsT);
  g.matmul(probsT, dO, dv);

  // dp = dO v^T (matmul, f32); ds = (dp - sum) * p * scale (SUB, MUL, MUL).
  cudnnBackendDescriptor_t dp = g.virtualTensor(scores, f32);
  g.matmul(dO, vT, dp);
  cudnnBackendDescriptor_t centered = g.virtualTensor(scores, f32);
  g.binary(CUDNN_POINTWISE_SUB, dp, softmaxSum, centered);
  cudnnBackendDescriptor_t dsUnscaled = g.virtualTensor(scores, f32);
  g.binary(CUDNN_POINTWISE_MUL, centered, probs, dsUnscaled);
  cudnnBackendDescriptor_t ds = g.virtualTensor(scores, f32);
  g.binary(CUDNN_POINTWISE_MUL, dsUnscaled, scale, ds);

  // dk = ds^T q (reshape to [B, H, S, T] in the 16-bit type, matmul).
  cudnnBackendDescriptor_t dsT = g.virtualTensor(scoresT, io);
  g.reshape(ds, dsT);
  g.matmul(dsT, q, dk);

  // dq = ds k: k^T reshaped back to [B, H, S, D] (f32 like the frontend's intermediates), the
  // matmul into the non-virtual f32 accumulator, then IDENTITY converts it into dq.
  cudnnBackendDescriptor_t k = g.virtualTensor({{B, H, S, D}, {p.k[0], p.k[1], p.k[2], 1}}, f32);
  g.reshape(kT, k);
  cudnnBackendDescriptor_t dqAccumulator = g.tensor(kDqAccumulator, packed(B, H, T, D), f32);
  g.matmul(ds, k, dqAccumulator);
  g.unary(CUDNN_POINTWISE_IDENTITY, dqAccumulator, dq);

  g.finish(handle, deviceProp);
}

void *pointer(CUdeviceptr address) { return reinterpret_cast<void *>(address); }

/// Binds \p count (uid, pointer) pairs and the workspace, and enqueues \p graph's plan.
void execute(const CudnnApi &api, cudnnHandle_t handle, const BuiltGraph &graph,
             const int64_t *uids, void *const *pointers, int64_t count, void *workspace,
             const char *doing) {
  // A variant pack is cheap host-side state: made per call, so forward() and backward() may
  // take new pointers every time (and be captured into a CUDA graph).
  Descriptor pack(api, CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, doing);
  setAttribute(api, pack.get(), AMPC_CUDNN_ATTR(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS),
               CUDNN_TYPE_INT64, count, uids, doing);
  setAttribute(api, pack.get(), AMPC_CUDNN_ATTR(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS),
               CUDNN_TYPE_VOID_PTR, count, pointers, doing);
  setAttribute(api, pack.get(), AMPC_CUDNN_ATTR(CUDNN_ATTR_VARIANT_PACK_WORKSPACE),
               CUDNN_TYPE_VOID_PTR, 1, &workspace, doing);
  api.check(api.cudnnBackendFinalize(pack.get()), "cudnnBackendFinalize(variant pack)", doing);
  api.check(api.cudnnBackendExecute(handle, graph.plan, pack.get()), "cudnnBackendExecute", doing);
}

} // namespace

//===----------------------------------------------------------------------===//
// CudnnAttention
//===----------------------------------------------------------------------===//

struct CudnnAttention::State {
  const CudnnApi *api = nullptr;
  CudnnAttentionProblem problem;
  cudnnHandle_t handle = nullptr;
  CUstream stream = nullptr;
  BuiltGraph forward, backward;
  CudnnBackwardWorkspace backwardLayout;
  /// Before 9.6.0 the engine expects its dQ accumulator zeroed (the frontend memsets it).
  bool zeroDqAccumulator = false;
  // The by-value scalars' host values, read by cudnnBackendExecute.
  float scale = 1.0f, maskValue = 0.0f, one = 1.0f;

  ~State() {
    // Plans before the handle they were made with.
    forward.clear();
    backward.clear();
    if (handle)
      api->cudnnDestroy(handle);
  }
};

CudnnAttention::CudnnAttention(const CudnnAttentionProblem &problem, CUstream stream,
                               Passes passes) {
  const std::string invalid = cudnnAttentionProblemError(problem);
  if (!invalid.empty())
    throw CudaError(CudaErrorKind::InvalidArgument, "cuDNN attention: " + invalid);
  const CudnnApi &api = cudnnApi();
  const std::string unsupported = cudnnAttentionVersionError(problem, api.version, passes.backward);
  if (!unsupported.empty())
    throw CudaError(CudaErrorKind::Cudnn, unsupported);

  state = std::make_unique<State>();
  State &s = *state;
  s.api = &api;
  s.problem = problem;
  s.stream = stream;
  s.scale = problem.scale;
  // What the frontend masks with: lowest() for releases before 9.10, -inf from 9.10 on.
  s.maskValue = api.version < 91000 ? std::numeric_limits<float>::lowest()
                                    : -std::numeric_limits<float>::infinity();
  s.zeroDqAccumulator = api.version < 90600;

  api.check(api.cudnnCreate(&s.handle), "cudnnCreate", "creating a cuDNN handle");
  // CUstream and cudaStream_t are the same CUstream_st pointer.
  api.check(api.cudnnSetStream(s.handle, stream), "cudnnSetStream", "creating a cuDNN handle");
  if (passes.forward)
    buildForward(api, s.handle, problem, s.forward);
  if (passes.backward) {
    buildBackward(api, s.handle, problem, s.backward);
    s.backwardLayout =
        cudnnBackwardWorkspace(problem, static_cast<size_t>(s.backward.workspaceBytes));
  }
}

CudnnAttention::~CudnnAttention() = default;

std::string CudnnAttention::description() const {
  const State &s = *state;
  std::string text = "cuDNN " + formatCudnnVersion(s.api->version) + " (" + s.api->library + ")";
  if (s.forward.plan)
    text += ", forward engine " + std::to_string(s.forward.engineIndex);
  if (s.backward.plan)
    text += ", backward engine " + std::to_string(s.backward.engineIndex);
  return text;
}

size_t CudnnAttention::forwardWorkspaceBytes() const {
  return static_cast<size_t>(state->forward.workspaceBytes);
}

size_t CudnnAttention::backwardWorkspaceBytes() const { return state->backwardLayout.totalBytes; }

void CudnnAttention::forward(CUdeviceptr q, CUdeviceptr k, CUdeviceptr v, CUdeviceptr o,
                             CUdeviceptr lse, CUdeviceptr workspace) const {
  const State &s = *state;
  const char *doing = "running cuDNN's attention forward";
  if (!s.forward.plan)
    throw CudaError(CudaErrorKind::InvalidArgument, "cuDNN attention: no forward graph built");
  if (s.forward.workspaceBytes > 0 && workspace == 0)
    throw CudaError(CudaErrorKind::InvalidArgument, "cuDNN attention forward: no workspace");
  // The mask value comes last: the variant pack must name exactly the graph's tensors.
  const int64_t uids[] = {kQ, kK, kV, kO, kLse, kScale, kMaskValue};
  void *const pointers[] = {pointer(q),
                            pointer(k),
                            pointer(v),
                            pointer(o),
                            pointer(lse),
                            const_cast<float *>(&s.scale),
                            const_cast<float *>(&s.maskValue)};
  execute(*s.api, s.handle, s.forward, uids, pointers, s.problem.causal ? 7 : 6, pointer(workspace),
          doing);
}

void CudnnAttention::backward(CUdeviceptr q, CUdeviceptr k, CUdeviceptr v, CUdeviceptr o,
                              CUdeviceptr dO, CUdeviceptr lse, CUdeviceptr dq, CUdeviceptr dk,
                              CUdeviceptr dv, CUdeviceptr workspace) const {
  const State &s = *state;
  const char *doing = "running cuDNN's attention backward";
  if (!s.backward.plan)
    throw CudaError(CudaErrorKind::InvalidArgument, "cuDNN attention: no backward graph built");
  if (workspace == 0)
    throw CudaError(CudaErrorKind::InvalidArgument, "cuDNN attention backward: no workspace");
  const CudnnBackwardWorkspace &layout = s.backwardLayout;
  const CUdeviceptr dqAccumulator = workspace + layout.dqAccumulatorOffset;
  if (s.zeroDqAccumulator) {
    // Enqueued on the handle's stream, before the graph that accumulates into it.
    const DriverApi &driver = driverApi();
    checkDriver(driver,
                driver.cuMemsetD8Async(dqAccumulator, 0, layout.dqAccumulatorBytes, s.stream),
                "cuMemsetD8Async", "zeroing cuDNN's dQ accumulator");
  }
  const int64_t uids[] = {
      kQ,     kK,   kV,        kO, kDO, kLse, kDQ, kDK, kDV, kSoftmaxSum, kDqAccumulator,
      kScale, kOne, kMaskValue};
  void *const pointers[] = {pointer(q),
                            pointer(k),
                            pointer(v),
                            pointer(o),
                            pointer(dO),
                            pointer(lse),
                            pointer(dq),
                            pointer(dk),
                            pointer(dv),
                            pointer(workspace + layout.softmaxSumOffset),
                            pointer(dqAccumulator),
                            const_cast<float *>(&s.scale),
                            const_cast<float *>(&s.one),
                            const_cast<float *>(&s.maskValue)};
  execute(*s.api, s.handle, s.backward, uids, pointers, s.problem.causal ? 14 : 13,
          pointer(workspace), doing);
}

CudnnEngineProbe probeCudnnAttention(const CudnnAttentionProblem &problem,
                                     const std::string &deviceJson) {
  const std::string invalid = cudnnAttentionProblemError(problem);
  if (!invalid.empty())
    throw CudaError(CudaErrorKind::InvalidArgument, "cuDNN attention: " + invalid);
  CudnnEngineProbe probe;
  const CudnnApi *api = nullptr;
  std::optional<Descriptor> device;
  try {
    api = &cudnnApi();
    // A release without device descriptions rejects the descriptor type or its attribute.
    const char *doing = "describing a GPU to cuDNN";
    device.emplace(*api, CUDNN_BACKEND_DEVICEPROP_DESCRIPTOR, doing);
    setAttribute(*api, device->get(), AMPC_CUDNN_ATTR(CUDNN_ATTR_DEVICEPROP_JSON_REPRESENTATION),
                 CUDNN_TYPE_CHAR, static_cast<int64_t>(deviceJson.size()), deviceJson.data(),
                 doing);
    api->check(api->cudnnBackendFinalize(device->get()), "cudnnBackendFinalize(device)", doing);
  } catch (const CudaError &error) {
    probe.unavailable = error.what();
    return probe;
  }
  probe.available = true;
  auto build = [&](auto buildGraph, std::string &failure, int &status) {
    BuiltGraph graph;
    try {
      buildGraph(*api, nullptr, problem, graph, device->get());
    } catch (const CudaError &error) {
      failure = error.what();
      status = error.code();
    }
    graph.clear();
  };
  build(buildForward, probe.forward, probe.forwardStatus);
  build(buildBackward, probe.backward, probe.backwardStatus);
  return probe;
}

#else // !AMPC_HAVE_CUDNN_HEADERS

struct CudnnAttention::State {};

CudnnAttention::CudnnAttention(const CudnnAttentionProblem &problem, CUstream, Passes) {
  const std::string invalid = cudnnAttentionProblemError(problem);
  if (!invalid.empty())
    throw CudaError(CudaErrorKind::InvalidArgument, "cuDNN attention: " + invalid);
  throw CudaError(CudaErrorKind::Cudnn, "this runtime was built without cuDNN's headers "
                                        "(cudnn_graph.h), so it cannot use cuDNN");
}

CudnnAttention::~CudnnAttention() = default;
std::string CudnnAttention::description() const { return ""; }
size_t CudnnAttention::forwardWorkspaceBytes() const { return 0; }
size_t CudnnAttention::backwardWorkspaceBytes() const { return 0; }
void CudnnAttention::forward(CUdeviceptr, CUdeviceptr, CUdeviceptr, CUdeviceptr, CUdeviceptr,
                             CUdeviceptr) const {}
void CudnnAttention::backward(CUdeviceptr, CUdeviceptr, CUdeviceptr, CUdeviceptr, CUdeviceptr,
                              CUdeviceptr, CUdeviceptr, CUdeviceptr, CUdeviceptr,
                              CUdeviceptr) const {}

CudnnEngineProbe probeCudnnAttention(const CudnnAttentionProblem &problem, const std::string &) {
  const std::string invalid = cudnnAttentionProblemError(problem);
  if (!invalid.empty())
    throw CudaError(CudaErrorKind::InvalidArgument, "cuDNN attention: " + invalid);
  CudnnEngineProbe probe;
  probe.unavailable = "this runtime was built without cuDNN's headers (cudnn_graph.h)";
  return probe;
}

#endif // AMPC_HAVE_CUDNN_HEADERS

} // namespace ampc::cuda
