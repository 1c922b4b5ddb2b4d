//===- CublasLt.cpp - Row-major matmuls with epilogues through cuBLASLt ---===//

#include "runtime/cuda/CublasLt.h"
#include "runtime/support/DynamicLibrary.h"

#include <algorithm>
#include <cstdlib>
#include <mutex>

#ifndef AMPC_CUDA_LIBRARY_DIR
#define AMPC_CUDA_LIBRARY_DIR ""
#endif

#define AMPC_CUBLASLT_STRINGIFY_EXPANDED(x) #x
#define AMPC_CUBLASLT_STRINGIFY(x) AMPC_CUBLASLT_STRINGIFY_EXPANDED(x)

namespace ampc::cuda {

//===----------------------------------------------------------------------===//
// Loading
//===----------------------------------------------------------------------===//

namespace {

/// Opens the library into \p api and resolves it; throws CudaError(NoCublasLt)
/// (and closes the library again).
void loadInto(CublasLtApi &api, const CublasLtLoadOptions &options) {
  const std::string cublas =
      "the CUDA " + std::to_string(options.requiredMajor) + " cuBLAS library";
  LibrarySearch search;
  search.what = "cuBLASLt";
  search.names = options.libraryNames;
  search.variable = "AMPC_CUBLASLT_LIBRARY";
  search.namedByVariable = options.namesFromVariable;
  search.advice =
      "install " + cublas + " or add its directory to LD_LIBRARY_PATH, or use --device cpu";
  DynamicLibrary library = DynamicLibrary::openFirst(search.names, search.scope);
  if (!library)
    throw CudaError(CudaErrorKind::NoCublasLt, search.notFoundMessage());
  api.library = library.name();
  SymbolResolver resolve(library);
#define AMPC_CUBLASLT_RESOLVE(name) resolve(api.name, AMPC_CUBLASLT_STRINGIFY(name));
  AMPC_CUBLASLT_ENTRY_POINTS(AMPC_CUBLASLT_RESOLVE)
#undef AMPC_CUBLASLT_RESOLVE
  if (!resolve.missing().empty())
    throw CudaError(CudaErrorKind::NoCublasLt,
                    resolve.missingMessage(cublas + " is needed; install it, or use --device cpu"));
  api.version = api.cublasLtGetVersion();
  if (static_cast<int>(api.version / 10000) != options.requiredMajor)
    throw CudaError(CudaErrorKind::NoCublasLt,
                    api.library + " is cuBLASLt " + std::to_string(api.version / 10000) + "." +
                        std::to_string(api.version / 100 % 100) +
                        ", but this program needs cuBLASLt " +
                        std::to_string(options.requiredMajor) + ".x: install " + cublas +
                        ", or use --device cpu");
  api.handle = library.release();
}

} // namespace

std::vector<std::string> CublasLtLoadOptions::defaultLibraryNames() {
  const std::string soname = "libcublasLt.so." + std::to_string(CUBLAS_VER_MAJOR);
  std::vector<std::string> names = {soname, "libcublasLt.so"};
  // The toolkit this runtime was built against, for machines whose loader
  // path does not include it (the CUDA toolkit's lib64 is not in
  // ld.so.conf by default).
  const std::string toolkitDir = AMPC_CUDA_LIBRARY_DIR;
  if (!toolkitDir.empty())
    names.push_back(toolkitDir + "/" + soname);
  return names;
}

std::string CublasLtApi::describeStatus(cublasStatus_t status) const {
  const char *name = cublasLtGetStatusName ? cublasLtGetStatusName(status) : nullptr;
  const char *text = cublasLtGetStatusString ? cublasLtGetStatusString(status) : nullptr;
  std::string description =
      name ? name : "cublasStatus_t " + std::to_string(static_cast<int>(status));
  if (text && *text)
    description += std::string(" (") + text + ")";
  return description;
}

const CublasLtApi &loadCublasLtApi(const CublasLtLoadOptions &options) {
  static std::mutex mutex;
  static std::vector<std::unique_ptr<CublasLtApi>> loaded;
  auto api = std::make_unique<CublasLtApi>();
  loadInto(*api, options);
  std::lock_guard<std::mutex> lock(mutex);
  loaded.push_back(std::move(api));
  return *loaded.back();
}

const CublasLtApi &cublasLtApi() {
  static std::once_flag once;
  static const CublasLtApi *api = nullptr;
  static CudaErrorKind failureKind = CudaErrorKind::NoCublasLt;
  static std::string failure;
  std::call_once(once, [] {
    // $AMPC_CUBLASLT_LIBRARY replaces the library names (as
    // $AMPC_CUDA_DRIVER_LIBRARY does the driver's, for the dry-run tests).
    CublasLtLoadOptions options;
    if (const char *library = std::getenv("AMPC_CUBLASLT_LIBRARY"))
      if (*library) {
        options.libraryNames = {library};
        options.namesFromVariable = true;
      }
    try {
      api = &loadCublasLtApi(options);
    } catch (const CudaError &error) {
      failureKind = error.kind();
      failure = error.what();
    }
  });
  if (!api)
    throw CudaError(failureKind, failure);
  return *api;
}

//===----------------------------------------------------------------------===//
// The problem, and its column-major form
//===----------------------------------------------------------------------===//

namespace {

/// A row-major matrix's row stride: \p ld, or its column count when 0.
int64_t rowStride(int64_t ld, int64_t cols) { return ld == 0 ? cols : ld; }

/// A batch stride: \p stride, or rows x row stride when -1.
int64_t batchStride(int64_t stride, int64_t rows, int64_t ld) {
  return stride < 0 ? rows * ld : stride;
}

bool isFloatType(plan::DType type) {
  return type == plan::DType::F32 || type == plan::DType::BF16 || type == plan::DType::F16;
}

} // namespace

const char *epilogueName(MatmulEpilogue epilogue) {
  switch (epilogue) {
  case MatmulEpilogue::None:
    return "none";
  case MatmulEpilogue::Bias:
    return "bias";
  case MatmulEpilogue::GeluBias:
    return "gelu_bias";
  case MatmulEpilogue::GeluAuxBias:
    return "gelu_aux_bias";
  case MatmulEpilogue::BiasGradientB:
    return "bias_grad_b";
  case MatmulEpilogue::BiasGradientA:
    return "bias_grad_a";
  case MatmulEpilogue::GeluGrad:
    return "dgelu";
  }
  return "?";
}

ColumnMajorGemm toColumnMajor(const MatmulDesc &desc) {
  ColumnMajorGemm gemm;
  // D^T[n x m] = op(B)^T[n x k] . op(A)^T[k x m].
  gemm.m = desc.n;
  gemm.n = desc.m;
  gemm.k = desc.k;
  gemm.batchCount = desc.batchCount;

  // Our B, row-major [k, n] (or [n, k] when transposed) with row stride ldb,
  // is column-major [n, k] (or [k, n]) with leading dimension ldb. Untrans-
  // posed, that is already op(B)^T, so cuBLASLt's A needs no transpose.
  const int64_t bRows = desc.transposeB ? desc.n : desc.k;
  const int64_t bCols = desc.transposeB ? desc.k : desc.n;
  const int64_t ldb = rowStride(desc.ldb, bCols);
  gemm.transA = desc.transposeB;
  gemm.a = {static_cast<uint64_t>(bCols), static_cast<uint64_t>(bRows), ldb,
            batchStride(desc.batchStrideB, bRows, ldb)};

  // Our A, row-major [m, k] (or [k, m]), is column-major [k, m] (or [m, k]):
  // op(A)^T untransposed.
  const int64_t aRows = desc.transposeA ? desc.k : desc.m;
  const int64_t aCols = desc.transposeA ? desc.m : desc.k;
  const int64_t lda = rowStride(desc.lda, aCols);
  gemm.transB = desc.transposeA;
  gemm.b = {static_cast<uint64_t>(aCols), static_cast<uint64_t>(aRows), lda,
            batchStride(desc.batchStrideA, aRows, lda)};

  // Our D, row-major [m, n], is column-major [n, m]; C shares its layout.
  const int64_t ldd = rowStride(desc.ldd, desc.n);
  gemm.d = {static_cast<uint64_t>(desc.n), static_cast<uint64_t>(desc.m), ldd,
            batchStride(desc.batchStrideD, desc.m, ldd)};

  switch (desc.epilogue) {
  case MatmulEpilogue::None:
    gemm.epilogue = CUBLASLT_EPILOGUE_DEFAULT;
    break;
  case MatmulEpilogue::Bias:
    gemm.epilogue = CUBLASLT_EPILOGUE_BIAS;
    gemm.biasLength = desc.n; // rows of D^T
    break;
  case MatmulEpilogue::GeluBias:
    gemm.epilogue = CUBLASLT_EPILOGUE_GELU_BIAS;
    gemm.biasLength = desc.n;
    break;
  case MatmulEpilogue::GeluAuxBias:
    gemm.epilogue = CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    gemm.biasLength = desc.n;
    gemm.auxLd = rowStride(desc.auxLd, desc.n);
    gemm.auxBatchStride = batchStride(desc.auxBatchStride, desc.m, gemm.auxLd);
    break;
  case MatmulEpilogue::GeluGrad:
    gemm.epilogue = CUBLASLT_EPILOGUE_DGELU;
    gemm.auxLd = rowStride(desc.auxLd, desc.n);
    gemm.auxBatchStride = batchStride(desc.auxBatchStride, desc.m, gemm.auxLd);
    break;
  case MatmulEpilogue::BiasGradientB:
    // The sum over k of op(B) is the sum over k of cuBLASLt's A operand.
    gemm.epilogue = CUBLASLT_EPILOGUE_BGRADA;
    gemm.biasLength = desc.n;
    break;
  case MatmulEpilogue::BiasGradientA:
    gemm.epilogue = CUBLASLT_EPILOGUE_BGRADB;
    gemm.biasLength = desc.m;
    break;
  }
  return gemm;
}

std::string matmulDescProblem(const MatmulDesc &desc) {
  if (desc.m <= 0 || desc.n <= 0 || desc.k <= 0)
    return "m, n and k must be positive";
  if (desc.batchCount <= 0)
    return "the batch count must be positive";
  if (!isFloatType(desc.inputType) || !isFloatType(desc.outputType))
    return "cuBLASLt matmuls take f32, bf16 or f16 operands";
  // The pairs cuBLASLt offers with fp32 accumulation and fp32 scaling.
  const bool typesOk = desc.outputType == plan::DType::F32 || desc.outputType == desc.inputType;
  if (!typesOk || (desc.inputType == plan::DType::F32 && desc.outputType != plan::DType::F32))
    return std::string("cuBLASLt has no ") + plan::dtypeName(desc.inputType) + " x " +
           plan::dtypeName(desc.inputType) + " -> " + plan::dtypeName(desc.outputType) +
           " matmul with fp32 accumulation (outputs are f32 or the input "
           "type)";
  const int64_t aCols = desc.transposeA ? desc.m : desc.k;
  const int64_t bCols = desc.transposeB ? desc.k : desc.n;
  if (desc.lda != 0 && desc.lda < aCols)
    return "lda " + std::to_string(desc.lda) + " is less than A's " + std::to_string(aCols) +
           " columns";
  if (desc.ldb != 0 && desc.ldb < bCols)
    return "ldb " + std::to_string(desc.ldb) + " is less than B's " + std::to_string(bCols) +
           " columns";
  if (desc.ldd != 0 && desc.ldd < desc.n)
    return "ldd " + std::to_string(desc.ldd) + " is less than D's " + std::to_string(desc.n) +
           " columns";
  if (desc.batchStrideA < -1 || desc.batchStrideB < -1 || desc.batchStrideD < -1 ||
      desc.auxBatchStride < -1)
    return "batch strides are -1 (packed) or non-negative";
  const int64_t ldd = rowStride(desc.ldd, desc.n);
  if (desc.batchCount > 1 && desc.batchStrideD >= 0 && desc.batchStrideD < desc.m * ldd)
    return "D's batch stride " + std::to_string(desc.batchStrideD) +
           " makes the outputs of different batches overlap (each needs " +
           std::to_string(desc.m * ldd) + " elements)";
  if (desc.epilogue == MatmulEpilogue::GeluAuxBias || desc.epilogue == MatmulEpilogue::GeluGrad) {
    const int64_t auxLd = rowStride(desc.auxLd, desc.n);
    if (auxLd < desc.n || auxLd % 8 != 0)
      return "the GELU aux matrix's row stride " + std::to_string(auxLd) +
             " must be a multiple of 8 and at least n = " + std::to_string(desc.n) +
             " (pad it with auxLd)";
    if (desc.batchCount > 1 && desc.auxBatchStride >= 0 &&
        (desc.auxBatchStride % 8 != 0 || desc.auxBatchStride < desc.m * auxLd))
      return "the GELU aux matrix's batch stride must be a multiple of 8 "
             "that keeps batches apart";
  }
  if ((desc.epilogue == MatmulEpilogue::BiasGradientA ||
       desc.epilogue == MatmulEpilogue::BiasGradientB) &&
      desc.batchCount != 1)
    return "the bias-gradient epilogues take a single (unbatched) matmul";
  return "";
}

std::string describeMatmul(const MatmulDesc &desc) {
  std::string text = "matmul m=" + std::to_string(desc.m) + " n=" + std::to_string(desc.n) +
                     " k=" + std::to_string(desc.k);
  if (desc.batchCount != 1)
    text += " batch=" + std::to_string(desc.batchCount);
  text += std::string(" ") + plan::dtypeName(desc.inputType) + " x " +
          plan::dtypeName(desc.inputType) + " -> " + plan::dtypeName(desc.outputType);
  if (desc.transposeA && desc.transposeB)
    text += ", A and B transposed";
  else if (desc.transposeA)
    text += ", A transposed";
  else if (desc.transposeB)
    text += ", B transposed";
  if (desc.epilogue != MatmulEpilogue::None)
    text += std::string(", epilogue ") + epilogueName(desc.epilogue);
  return text;
}

cudaDataType_t cudaDataTypeOf(plan::DType dtype) {
  switch (dtype) {
  case plan::DType::BF16:
    return CUDA_R_16BF;
  case plan::DType::F16:
    return CUDA_R_16F;
  case plan::DType::I32:
    return CUDA_R_32I;
  case plan::DType::I64:
    return CUDA_R_64I;
  case plan::DType::F32:
    break;
  }
  return CUDA_R_32F;
}

uint32_t pointerAlignment(CUdeviceptr address) {
  uint32_t alignment = 256;
  while (alignment > 1 && address % alignment != 0)
    alignment /= 2;
  return alignment;
}

//===----------------------------------------------------------------------===//
// Matmul
//===----------------------------------------------------------------------===//

/// The descriptors and chosen algorithm of one distinct problem.
struct Matmul::CachedProblem {
  const CublasLtApi *api = nullptr;
  cublasLtMatmulDesc_t operation = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulAlgo_t algorithm = {};
  size_t workspaceBytes = 0;
  bool hasBias = false, hasAux = false;

  ~CachedProblem() {
    if (d)
      api->cublasLtMatrixLayoutDestroy(d);
    if (b)
      api->cublasLtMatrixLayoutDestroy(b);
    if (a)
      api->cublasLtMatrixLayoutDestroy(a);
    if (operation)
      api->cublasLtMatmulDescDestroy(operation);
  }
};

namespace {

/// Throws CudaError(Cublas) for a failed cuBLASLt call about \p desc.
void checkCublas(const CublasLtApi &api, cublasStatus_t status, const char *call,
                 const MatmulDesc &desc) {
  if (status != CUBLAS_STATUS_SUCCESS)
    throw CudaError(CudaErrorKind::Cublas,
                    "cuBLASLt " + describeMatmul(desc) + ": " + call + " failed with " +
                        api.describeStatus(status),
                    status);
}

} // namespace

Matmul::Matmul(Device &device, const CublasLtApi *api)
    : device(&device), api(api ? api : &cublasLtApi()) {
  device.makeCurrent();
  const cublasStatus_t status = this->api->cublasLtCreate(&handle);
  if (status != CUBLAS_STATUS_SUCCESS)
    throw CudaError(CudaErrorKind::Cublas,
                    "cublasLtCreate failed with " + this->api->describeStatus(status) + " on " +
                        device.info().summary(),
                    status);
  try {
    workspace = device.allocate(kWorkspaceBytes, "the cuBLASLt workspace");
  } catch (...) {
    this->api->cublasLtDestroy(handle);
    throw;
  }
}

Matmul::~Matmul() {
  problems.clear();
  if (timing)
    device->api().cuStreamDestroy(timing);
  if (handle)
    api->cublasLtDestroy(handle);
}

Matmul::Key Matmul::keyOf(const MatmulDesc &desc, const MatmulOperands &operands) {
  const CUdeviceptr c = operands.c ? operands.c : operands.d;
  return Key{desc.m,
             desc.n,
             desc.k,
             desc.transposeA,
             desc.transposeB,
             static_cast<int64_t>(desc.inputType),
             static_cast<int64_t>(desc.outputType),
             desc.lda,
             desc.ldb,
             desc.ldd,
             desc.batchCount,
             desc.batchStrideA,
             desc.batchStrideB,
             desc.batchStrideD,
             static_cast<int64_t>(desc.epilogue),
             desc.auxLd,
             desc.auxBatchStride,
             pointerAlignment(operands.a),
             pointerAlignment(operands.b),
             pointerAlignment(c),
             pointerAlignment(operands.d),
             pointerAlignment(operands.bias) * 1024 + pointerAlignment(operands.aux)};
}

const char *matmulSelectionName(MatmulSelection selection) {
  return selection == MatmulSelection::Timed ? "timed" : "heuristic";
}

size_t fastestCandidate(const std::vector<double> &milliseconds) {
  size_t best = 0;
  bool found = false;
  for (size_t i = 0; i < milliseconds.size(); ++i)
    if (milliseconds[i] >= 0 && (!found || milliseconds[i] < milliseconds[best])) {
      best = i;
      found = true;
    }
  return best;
}

Matmul::CachedProblem &Matmul::problemFor(const MatmulDesc &desc, const MatmulOperands &operands,
                                          MatmulSelection selection) {
  const Key key = keyOf(desc, operands);
  auto found = problems.find(key);
  if (found != problems.end())
    return *found->second;

  const std::string problem = matmulDescProblem(desc);
  if (!problem.empty())
    throw CudaError(CudaErrorKind::InvalidArgument,
                    "cannot run " + describeMatmul(desc) + ": " + problem);
  const ColumnMajorGemm gemm = toColumnMajor(desc);
  const CublasLtApi &lt = *api;
  auto entry = std::make_unique<CachedProblem>();
  entry->api = api;

  auto check = [&](cublasStatus_t status, const char *call) {
    checkCublas(lt, status, call, desc);
  };
  check(lt.cublasLtMatmulDescCreate(&entry->operation, CUBLAS_COMPUTE_32F, CUDA_R_32F),
        "cublasLtMatmulDescCreate");
  auto setAttribute = [&](cublasLtMatmulDescAttributes_t attribute, const auto &value) {
    check(lt.cublasLtMatmulDescSetAttribute(entry->operation, attribute, &value, sizeof value),
          "cublasLtMatmulDescSetAttribute");
  };
  const int32_t transA = gemm.transA ? CUBLAS_OP_T : CUBLAS_OP_N;
  const int32_t transB = gemm.transB ? CUBLAS_OP_T : CUBLAS_OP_N;
  setAttribute(CUBLASLT_MATMUL_DESC_TRANSA, transA);
  setAttribute(CUBLASLT_MATMUL_DESC_TRANSB, transB);
  const uint32_t epilogue = gemm.epilogue;
  setAttribute(CUBLASLT_MATMUL_DESC_EPILOGUE, epilogue);
  entry->hasBias = gemm.biasLength > 0;
  entry->hasAux =
      desc.epilogue == MatmulEpilogue::GeluAuxBias || desc.epilogue == MatmulEpilogue::GeluGrad;
  // The heuristic reads the bias and aux pointers for their alignment.
  if (entry->hasBias) {
    const void *bias = reinterpret_cast<const void *>(operands.bias);
    setAttribute(CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias);
  }
  if (entry->hasAux) {
    const void *aux = reinterpret_cast<const void *>(operands.aux);
    setAttribute(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, aux);
    setAttribute(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, gemm.auxLd);
    if (gemm.batchCount > 1)
      setAttribute(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE, gemm.auxBatchStride);
  }

  auto makeLayout = [&](cublasLtMatrixLayout_t &layout, const ColumnMajorLayout &shape,
                        plan::DType type) {
    check(lt.cublasLtMatrixLayoutCreate(&layout, cudaDataTypeOf(type), shape.rows, shape.cols,
                                        shape.ld),
          "cublasLtMatrixLayoutCreate");
    if (gemm.batchCount > 1) {
      const int32_t count = static_cast<int32_t>(gemm.batchCount);
      check(lt.cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count,
                                                sizeof count),
            "cublasLtMatrixLayoutSetAttribute");
      const int64_t stride = shape.batchStride;
      check(lt.cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                                &stride, sizeof stride),
            "cublasLtMatrixLayoutSetAttribute");
    }
  };
  makeLayout(entry->a, gemm.a, desc.inputType);
  makeLayout(entry->b, gemm.b, desc.inputType);
  makeLayout(entry->d, gemm.d, desc.outputType);

  // The preference: our workspace, and the real alignment of each pointer
  // (cuBLASLt's A is our B).
  cublasLtMatmulPreference_t preference = nullptr;
  check(lt.cublasLtMatmulPreferenceCreate(&preference), "cublasLtMatmulPreferenceCreate");
  struct PreferenceGuard {
    const CublasLtApi &lt;
    cublasLtMatmulPreference_t preference;
    ~PreferenceGuard() { lt.cublasLtMatmulPreferenceDestroy(preference); }
  } guard{lt, preference};
  auto setPreference = [&](cublasLtMatmulPreferenceAttributes_t attribute, const auto &value) {
    check(lt.cublasLtMatmulPreferenceSetAttribute(preference, attribute, &value, sizeof value),
          "cublasLtMatmulPreferenceSetAttribute");
  };
  const uint64_t workspaceBytes = workspace.bytes();
  setPreference(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, workspaceBytes);
  setPreference(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, pointerAlignment(operands.b));
  setPreference(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, pointerAlignment(operands.a));
  setPreference(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                pointerAlignment(operands.c ? operands.c : operands.d));
  setPreference(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, pointerAlignment(operands.d));

  // Timing only helps where nothing is being captured (a capture runs nothing to time).
  const bool timed = selection == MatmulSelection::Timed && !device->capturing();
  cublasLtMatmulHeuristicResult_t results[kTimedCandidates] = {};
  int returned = 0;
  const cublasStatus_t heuristicStatus = lt.cublasLtMatmulAlgoGetHeuristic(
      handle, entry->operation, entry->a, entry->b, entry->d, entry->d, preference,
      timed ? kTimedCandidates : 4, results, &returned);
  std::vector<const cublasLtMatmulHeuristicResult_t *> usable;
  for (int i = 0; heuristicStatus == CUBLAS_STATUS_SUCCESS && i < returned; ++i)
    if (results[i].state == CUBLAS_STATUS_SUCCESS && results[i].workspaceSize <= workspaceBytes)
      usable.push_back(&results[i]);
  if (usable.empty()) {
    std::string message =
        "cuBLASLt has no algorithm for " + describeMatmul(desc) + " on " + device->info().summary();
    if (heuristicStatus != CUBLAS_STATUS_SUCCESS)
      message += " (cublasLtMatmulAlgoGetHeuristic failed with " +
                 lt.describeStatus(heuristicStatus) + ")";
    if (desc.epilogue == MatmulEpilogue::BiasGradientA ||
        desc.epilogue == MatmulEpilogue::BiasGradientB)
      message += "; cuBLASLt fuses bias gradients only for some transposes: "
                 "compute this one with a separate reduction";
    throw CudaError(CudaErrorKind::Cublas, message,
                    heuristicStatus != CUBLAS_STATUS_SUCCESS ? heuristicStatus
                                                             : CUBLAS_STATUS_NOT_SUPPORTED);
  }
  entry->algorithm = usable.front()->algo;
  entry->workspaceBytes = usable.front()->workspaceSize;
  if (timed && usable.size() > 1) {
    // One untimed run of each candidate (a failure to launch drops it), then kTimedRuns
    // between two events; the fastest is kept.
    // Nothing else runs meanwhile: the device's stream is drained first.
    device->synchronize("waiting for the GPU before timing matmul algorithms");
    const CUstream stream = timingStream();
    std::vector<double> milliseconds(usable.size(), -1.0);
    Event start(*device), end(*device);
    for (size_t i = 0; i < usable.size(); ++i) {
      if (launch(*entry, usable[i]->algo, operands, stream) != CUBLAS_STATUS_SUCCESS)
        continue;
      start.record(stream);
      bool ran = true;
      for (int r = 0; r < kTimedRuns && ran; ++r)
        ran = launch(*entry, usable[i]->algo, operands, stream) == CUBLAS_STATUS_SUCCESS;
      end.record(stream);
      end.synchronize();
      if (ran)
        milliseconds[i] = Event::elapsedMilliseconds(start, end) / kTimedRuns;
    }
    const size_t best = fastestCandidate(milliseconds);
    if (milliseconds[best] >= 0) {
      entry->algorithm = usable[best]->algo;
      entry->workspaceBytes = usable[best]->workspaceSize;
      MatmulChoice choice;
      choice.problem = describeMatmul(desc);
      choice.candidates = static_cast<int>(
          std::count_if(milliseconds.begin(), milliseconds.end(), [](double t) { return t >= 0; }));
      choice.chosen = static_cast<int>(best);
      choice.heuristicMs = milliseconds.front();
      choice.chosenMs = milliseconds[best];
      timedChoices.push_back(choice);
    }
  }
  return *problems.emplace(key, std::move(entry)).first->second;
}

CUstream Matmul::timingStream() {
  if (!timing)
    checkDriver(device->api(), device->api().cuStreamCreate(&timing, CU_STREAM_DEFAULT),
                "cuStreamCreate", "creating the stream matmul algorithms are timed on");
  return timing;
}

cublasStatus_t Matmul::launch(const CachedProblem &problem, const cublasLtMatmulAlgo_t &algorithm,
                              const MatmulOperands &operands, CUstream stream) {
  const CUdeviceptr c = operands.c ? operands.c : operands.d;
  // cuBLASLt's A is our B and its B our A (see the file comment of CublasLt.h).
  return api->cublasLtMatmul(handle, problem.operation, &operands.alpha,
                             reinterpret_cast<const void *>(operands.b), problem.a,
                             reinterpret_cast<const void *>(operands.a), problem.b, &operands.beta,
                             reinterpret_cast<const void *>(c), problem.d,
                             reinterpret_cast<void *>(operands.d), problem.d, &algorithm,
                             reinterpret_cast<void *>(workspace.pointer()), workspace.bytes(),
                             stream);
}

namespace {

/// Throws CudaError(InvalidArgument) when \p operands lack a pointer \p desc needs.
void requireOperands(const MatmulDesc &desc, const MatmulOperands &operands) {
  const bool needsBias =
      desc.epilogue != MatmulEpilogue::None && desc.epilogue != MatmulEpilogue::GeluGrad;
  const bool needsAux =
      desc.epilogue == MatmulEpilogue::GeluAuxBias || desc.epilogue == MatmulEpilogue::GeluGrad;
  if (!operands.a || !operands.b || !operands.d || (operands.beta != 0.0f && !operands.c) ||
      (needsBias && !operands.bias) || (needsAux && !operands.aux))
    throw CudaError(CudaErrorKind::InvalidArgument,
                    "cannot run " + describeMatmul(desc) +
                        ": a, b and d must be set, c when beta != 0, bias "
                        "for a bias epilogue and aux for gelu_aux_bias and dgelu");
}

} // namespace

void Matmul::prepare(const MatmulDesc &desc, const MatmulOperands &operands,
                     MatmulSelection selection) {
  requireOperands(desc, operands);
  problemFor(desc, operands, selection);
}

void Matmul::run(const MatmulDesc &desc, const MatmulOperands &operands) {
  requireOperands(desc, operands);
  CachedProblem &problem = problemFor(desc, operands);
  const CublasLtApi &lt = *api;
  // Pointers change between calls with the same problem (other buffers of
  // the same shape): set this call's on the cached descriptor.
  if (problem.hasBias) {
    const void *bias = reinterpret_cast<const void *>(operands.bias);
    checkCublas(lt,
                lt.cublasLtMatmulDescSetAttribute(
                    problem.operation, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias),
                "cublasLtMatmulDescSetAttribute", desc);
  }
  if (problem.hasAux) {
    const void *aux = reinterpret_cast<const void *>(operands.aux);
    checkCublas(lt,
                lt.cublasLtMatmulDescSetAttribute(
                    problem.operation, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof aux),
                "cublasLtMatmulDescSetAttribute", desc);
  }
  checkCublas(lt, launch(problem, problem.algorithm, operands, device->stream()), "cublasLtMatmul",
              desc);
}

} // namespace ampc::cuda
