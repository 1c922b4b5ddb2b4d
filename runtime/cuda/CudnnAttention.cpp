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
#include "runtime/cuda/CudnnGraph.h"

#include "runtime/cuda/Driver.h"
#include "runtime/cuda/Errors.h"

#include <cmath>
#include <cstdlib>
#include <limits>
#include <optional>
#include <utility>
#include <vector>

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

// The graph layer (CudnnGraph.h): the library, descriptors, GraphBuilder, execute().
using namespace cudnn;

namespace {

/// The graphs' own tensors, addressed by the variant pack (virtual ones count up from
/// kFirstVirtualUid).
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
};

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
  const ProbeDevice gpu = openProbeDevice(deviceJson);
  if (!gpu.device) {
    probe.unavailable = gpu.unavailable;
    return probe;
  }
  probe.available = true;
  auto build = [&](auto buildGraph, std::string &failure, int &status) {
    gpu.probe(
        [&](const CudnnApi &api, BuiltGraph &graph, cudnnBackendDescriptor_t device) {
          buildGraph(api, nullptr, problem, graph, device);
        },
        failure, status);
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
