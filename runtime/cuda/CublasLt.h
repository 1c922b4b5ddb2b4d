//===- CublasLt.h - Row-major matmuls with epilogues through cuBLASLt -----===//
//
// The CUDA backend runs every matmul of a plan through cuBLASLt, opened at
// run time like the driver (dlopen of libcublasLt.so.13, then
// libcublasLt.so, then the toolkit's lib64 directory this runtime was built
// against), so a training binary still starts on machines without it.
//
// Semantics are the plan's: row-major matrices,
//
//     D[m, n] = alpha * op(A)[m, k] . op(B)[k, n] + beta * C[m, n]
//
// where op(A) = A (stored [m, k]) or A^T (stored [k, m]) and likewise for B,
// optionally batched with element strides, inputs bf16/f16/f32, outputs
// bf16/f16/f32, always accumulating in fp32 (CUBLAS_COMPUTE_32F, f32
// alpha/beta), with an epilogue fused into the same kernel:
//
//   None           D as above
//   Bias           D += bias[n] on every row (bias has D's element type)
//   GeluBias       D = gelu_tanh(D + bias)
//   GeluAuxBias    as GeluBias, and aux = D + bias before the GELU (what the
//                  backward of GELU needs)
//   BiasGradientB  D as None, and bias[j] = sum_k op(B)[k, j] (length n): the
//                  bias gradient of y = x W + b when computing
//                  dW = x^T . dy with dy as B
//   BiasGradientA  D as None, and bias[i] = sum_k op(A)[i, k] (length m)
//   GeluGrad       D = D * gelu_tanh'(aux): the gradient of a tanh GELU whose
//                  input aux (D's shape, read) is what GeluAuxBias wrote;
//                  cuBLASLt's DGELU, which the backward of an MLP's second
//                  matmul uses so that its product is never stored
//
// cuBLASLt is column-major. A row-major matrix [r, c] with row stride ld is,
// byte for byte, the column-major matrix [c, r] with leading dimension ld:
// its transpose. So the row-major product D = op(A) op(B) is computed as the
// column-major product D^T = op(B)^T op(A)^T with the operands swapped:
// cuBLASLt's "A" is our B and its "B" is our A, each with the transpose flag
// it already has, m and n exchanged, and every leading dimension the row
// stride. Our bias over columns of D is cuBLASLt's bias over rows of D^T,
// and the bias gradients swap with the operands (ours of B is its BGRADA).
// toColumnMajor() is that mapping as a pure function, tested on the CPU.
//
// Algorithms come from cublasLtMatmulAlgoGetHeuristic once per distinct
// problem (shapes, types, transposes, strides, epilogue, batch and the
// alignment of every pointer) and are cached with their descriptors; all
// matmuls share one workspace of 32 MiB, allocated once, so a matmul never
// allocates and can be captured into a CUDA graph. The heuristic ranks its
// candidates by a model of the GPU, and its first is not always the
// fastest at a given shape and epilogue: prepare() with
// MatmulSelection::Timed runs each of the first kTimedCandidates on the
// device and keeps the fastest (what torch.compile's max-autotune does for
// its matmul templates), on a stream of its own after the device's has
// drained. That writes the problem's outputs, so the executor calls it
// while building, before any buffer holds a value (see
// runtime/cuda/ExecutorRun.cpp, chooseMatmulAlgorithms).
//
//===----------------------------------------------------------------------===//

#ifndef AMPC_RUNTIME_CUDA_CUBLASLT_H
#define AMPC_RUNTIME_CUDA_CUBLASLT_H

#include "runtime/cuda/Device.h"
#include "runtime/plan/Plan.h"

#include <cublasLt.h>

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace ampc::cuda {

//===----------------------------------------------------------------------===//
// The library
//===----------------------------------------------------------------------===//

// Every cuBLASLt entry point the backend uses.
#define AMPC_CUBLASLT_ENTRY_POINTS(X)                                                              \
  X(cublasLtGetVersion)                                                                            \
  X(cublasLtGetStatusName)                                                                         \
  X(cublasLtGetStatusString)                                                                       \
  X(cublasLtCreate)                                                                                \
  X(cublasLtDestroy)                                                                               \
  X(cublasLtMatmulDescCreate)                                                                      \
  X(cublasLtMatmulDescDestroy)                                                                     \
  X(cublasLtMatmulDescSetAttribute)                                                                \
  X(cublasLtMatrixLayoutCreate)                                                                    \
  X(cublasLtMatrixLayoutDestroy)                                                                   \
  X(cublasLtMatrixLayoutSetAttribute)                                                              \
  X(cublasLtMatmulPreferenceCreate)                                                                \
  X(cublasLtMatmulPreferenceDestroy)                                                               \
  X(cublasLtMatmulPreferenceSetAttribute)                                                          \
  X(cublasLtMatmulAlgoGetHeuristic)                                                                \
  X(cublasLtMatmul)

/// cuBLASLt's entry points, resolved from one loaded library.
struct CublasLtApi {
#define AMPC_CUBLASLT_MEMBER(name) decltype(&::name) name = nullptr;
  AMPC_CUBLASLT_ENTRY_POINTS(AMPC_CUBLASLT_MEMBER)
#undef AMPC_CUBLASLT_MEMBER

  std::string library;
  /// cublasLtGetVersion: major * 10000 + minor * 100 + patch.
  size_t version = 0;
  void *handle = nullptr;

  /// "CUBLAS_STATUS_NOT_SUPPORTED (the requested feature is not supported)".
  std::string describeStatus(cublasStatus_t status) const;
};

struct CublasLtLoadOptions {
  /// Tried in order; the default ends with the toolkit's own lib64 path.
  std::vector<std::string> libraryNames = defaultLibraryNames();
  /// libraryNames is the file $AMPC_CUBLASLT_LIBRARY names (the message when
  /// it cannot be opened then says to correct the variable).
  bool namesFromVariable = false;
  /// The library's major version must be this one (the headers').
  int requiredMajor = CUBLAS_VER_MAJOR;

  static std::vector<std::string> defaultLibraryNames();
};

/// Opens cuBLASLt and resolves every entry point. Throws
/// CudaError(NoCublasLt) when no library opens, it lacks an entry point, or
/// its major version differs. Loading needs no GPU.
const CublasLtApi &loadCublasLtApi(const CublasLtLoadOptions &options);

/// The process-wide table, loaded on first use with the default options.
const CublasLtApi &cublasLtApi();

//===----------------------------------------------------------------------===//
// The problem, and its column-major form
//===----------------------------------------------------------------------===//

/// What is fused after the product; see the file comment.
enum class MatmulEpilogue : uint8_t {
  None,
  Bias,
  GeluBias,
  GeluAuxBias,
  BiasGradientB,
  BiasGradientA,
  GeluGrad,
};

/// "none", "bias", "gelu_bias", "gelu_aux_bias", "bias_grad_b",
/// "bias_grad_a", "dgelu".
const char *epilogueName(MatmulEpilogue epilogue);

/// A matmul in the plan's row-major terms (see the file comment). Strides
/// and leading dimensions count elements.
struct MatmulDesc {
  int64_t m = 0, n = 0, k = 0;
  bool transposeA = false;                    ///< A is stored [k, m] and used as A^T
  bool transposeB = false;                    ///< B is stored [n, k] and used as B^T
  plan::DType inputType = plan::DType::BF16;  ///< of A and B
  plan::DType outputType = plan::DType::BF16; ///< of C, D, bias and aux
  /// Row strides; 0: packed (the stored matrix's column count).
  int64_t lda = 0, ldb = 0, ldd = 0;
  int64_t batchCount = 1;
  /// Distance between consecutive matrices of a batch; -1: packed (rows x
  /// row stride). 0 for A or B reuses one matrix for every batch.
  int64_t batchStrideA = -1, batchStrideB = -1, batchStrideD = -1;
  MatmulEpilogue epilogue = MatmulEpilogue::None;
  /// GeluAuxBias (written) and GeluGrad (read): aux is stored like D, [m, n] with this row stride
  /// (0: n; cuBLASLt needs a multiple of 8) and batch stride (-1: packed).
  int64_t auxLd = 0, auxBatchStride = -1;
};

/// The pointers and scalars of one call. C may be D (in-place
/// accumulation, beta = 1) or 0 when beta is 0.
struct MatmulOperands {
  CUdeviceptr a = 0, b = 0, c = 0, d = 0;
  float alpha = 1.0f, beta = 0.0f;
  /// Read by Bias/GeluBias/GeluAuxBias, written by the bias gradients.
  CUdeviceptr bias = 0;
  /// Written by GeluAuxBias, read by GeluGrad.
  CUdeviceptr aux = 0;
};

/// One column-major matrix as cuBLASLt's layout describes it.
struct ColumnMajorLayout {
  uint64_t rows = 0, cols = 0;
  int64_t ld = 0;
  int64_t batchStride = 0;
};

/// The cuBLASLt problem computing a MatmulDesc:
/// D'[m x n] = op(A')[m x k] . op(B')[k x n], column-major, where A' is our
/// B, B' our A and D' our D.
struct ColumnMajorGemm {
  int64_t m = 0, n = 0, k = 0;
  bool transA = false, transB = false; ///< CUBLAS_OP_T for A' / B'
  ColumnMajorLayout a, b, d;           ///< A' (our B), B' (our A), C' and D'
  int64_t batchCount = 1;
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  /// Elements of the bias (or bias gradient) vector; 0 without one.
  int64_t biasLength = 0;
  /// The aux matrix's leading dimension and batch stride (GeluAuxBias, GeluGrad).
  int64_t auxLd = 0, auxBatchStride = 0;
};

/// The column-major form of \p desc (which must be valid). Pure.
ColumnMajorGemm toColumnMajor(const MatmulDesc &desc);

/// Why cuBLASLt cannot run \p desc as asked ("" if it can): sizes,
/// unsupported type pairs, strides, epilogue constraints. Pure.
std::string matmulDescProblem(const MatmulDesc &desc);

/// "matmul m=1024 n=3072 k=768 bf16 x bf16 -> bf16, B transposed,
/// epilogue gelu_bias" (and the batch when there is one). Pure.
std::string describeMatmul(const MatmulDesc &desc);

/// The cudaDataType of a plan dtype (bf16 -> CUDA_R_16BF, ...).
cudaDataType_t cudaDataTypeOf(plan::DType dtype);

/// The largest power of two (at most 256) dividing \p address: what
/// cuBLASLt's heuristics are told about each pointer's alignment.
uint32_t pointerAlignment(CUdeviceptr address);

//===----------------------------------------------------------------------===//
// Matmul
//===----------------------------------------------------------------------===//

/// How Matmul::prepare picks a problem's algorithm.
enum class MatmulSelection : uint8_t {
  /// cuBLASLt's heuristic's first candidate, untimed.
  Heuristic,
  /// The fastest of the heuristic's first kTimedCandidates, each run on the
  /// device (one untimed run, then kTimedRuns between CUDA events).
  Timed,
};

/// "heuristic" or "timed".
const char *matmulSelectionName(MatmulSelection selection);

/// What timing found for one problem (the --profile report lists them).
struct MatmulChoice {
  std::string problem;     ///< describeMatmul
  int candidates = 0;      ///< algorithms the heuristic offered that ran
  int chosen = 0;          ///< the fastest's rank in the heuristic's order (0: its first)
  double heuristicMs = 0;  ///< the heuristic's first candidate, per run
  double chosenMs = 0;     ///< the chosen one, per run
};

/// The index of the smallest non-negative time in \p milliseconds (a
/// negative time marks a candidate that failed to run); the earliest of
/// equal times, so ties keep the heuristic's order; 0 when none ran. Pure.
size_t fastestCandidate(const std::vector<double> &milliseconds);

/// Runs matmuls on a device's stream. Not thread-safe: one per stream.
class Matmul {
public:
  /// The workspace every matmul may use.
  static constexpr size_t kWorkspaceBytes = 32u << 20;
  /// Heuristic candidates timed per problem, and timed runs of each.
  static constexpr int kTimedCandidates = 8;
  static constexpr int kTimedRuns = 5;

  /// Creates the cuBLASLt handle and allocates the workspace. Throws
  /// CudaError(NoCublasLt) when the library is missing, OutOfMemory when
  /// the workspace does not fit.
  explicit Matmul(Device &device, const CublasLtApi *api = nullptr);
  ~Matmul();
  Matmul(const Matmul &) = delete;
  Matmul &operator=(const Matmul &) = delete;

  /// Queues the matmul on the device's stream. Throws CudaError:
  /// InvalidArgument (an invalid desc or a missing pointer), Cublas (no
  /// algorithm, or cuBLASLt rejects the call; the message names the shape
  /// and the status).
  void run(const MatmulDesc &desc, const MatmulOperands &operands);

  /// Chooses and caches the algorithm of the problem \p desc with
  /// \p operands (run() then uses it for every call with the same
  /// problem). With MatmulSelection::Timed it runs the candidates on
  /// \p operands: they read a, b and c and overwrite d, aux and a bias
  /// gradient, so call it only when those hold nothing yet; on a stream
  /// under capture it takes the heuristic's first, as run() does for a
  /// problem it was not given. Throws as run().
  void prepare(const MatmulDesc &desc, const MatmulOperands &operands, MatmulSelection selection);

  /// Distinct problems seen so far (each with its cached algorithm).
  size_t cachedProblems() const { return problems.size(); }

  /// One entry per problem whose algorithm was chosen by timing, in the
  /// order they were prepared.
  const std::vector<MatmulChoice> &choices() const { return timedChoices; }

private:
  struct CachedProblem;
  /// Every field of a problem that can change the algorithm or the
  /// descriptors, including pointer alignments.
  using Key = std::array<int64_t, 22>;
  static Key keyOf(const MatmulDesc &desc, const MatmulOperands &operands);
  CachedProblem &problemFor(const MatmulDesc &desc, const MatmulOperands &operands,
                            MatmulSelection selection = MatmulSelection::Heuristic);
  /// Queues one cublasLtMatmul of \p problem with \p algorithm on \p stream.
  cublasStatus_t launch(const CachedProblem &problem, const cublasLtMatmulAlgo_t &algorithm,
                        const MatmulOperands &operands, CUstream stream);
  /// The stream candidates are timed on (created on first use), so their runs are told apart
  /// from the step's matmuls on the device's stream.
  CUstream timingStream();

  Device *device;
  const CublasLtApi *api;
  cublasLtHandle_t handle = nullptr;
  DeviceAllocation workspace;
  std::map<Key, std::unique_ptr<CachedProblem>> problems;
  std::vector<MatmulChoice> timedChoices;
  CUstream timing = nullptr;
};

} // namespace ampc::cuda

#endif // AMPC_RUNTIME_CUDA_CUBLASLT_H
