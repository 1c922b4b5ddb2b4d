//===- RecordingCublasLt.cpp - A recording stand-in for libcublasLt -------===//
//
// The cuBLASLt entry points the CUDA backend resolves (CublasLt.h), over the
// same Recorder as the driver (both live in one library, so a matmul sees the
// driver's allocations and its stream's capture). Descriptors, layouts and
// preferences are kept as given; the heuristic returns one algorithm per
// call, remembering the pointer alignments and the workspace it was chosen
// for, as a real algorithm is only valid for those. A matmul is stream work
// like a launch: captured, replayed, checked each time.
//
// The checks, by the name a violation carries:
//   cublaslt-layout     the layouts do not describe D = op(A) op(B) (shapes,
//                       leading dimensions below the rows, batch counts,
//                       types: rejected with CUBLAS_STATUS_INVALID_VALUE), or
//                       a matrix, rows x cols x ld x element size over its
//                       batch, runs past its allocation;
//   cublaslt-alignment  a pointer less aligned than its element, or than
//                       the alignment its algorithm was chosen for;
//   cublaslt-epilogue   a bias or aux pointer missing for the epilogue, a
//                       bias vector (the rows of D; the columns for BGRADB)
//                       or aux matrix (ld a multiple of 8, at least D's
//                       rows) outside its allocation;
//   cublaslt-workspace  a workspace smaller than the algorithm needs or
//                       outside its allocation;
//   pointer, freed-memory  an operand in no allocation, or a freed one.
//
//===----------------------------------------------------------------------===//

#include "RecordingState.h"

#include <cublasLt.h>

#include <algorithm>
#include <cstring>
#include <string>

using ampc::dryrun::EventKind;
using ampc::dryrun::MatmulAlgorithm;
using ampc::dryrun::MatmulCall;
using ampc::dryrun::MatrixLayout;
using ampc::dryrun::Node;
using ampc::dryrun::recorded;
using ampc::dryrun::Recorder;

#define AMPC_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

/// Marks an algorithm the recording heuristic handed out.
constexpr uint64_t kAlgorithmMagic = 0x616d70632d6c74ull;
/// What an algorithm asks of the workspace (at most what was offered).
constexpr uint64_t kAlgorithmWorkspace = 4ull << 20;
/// Candidates a heuristic call offers (at most what it is asked for).
constexpr int kOfferedAlgorithms = 3;

struct MatmulDescriptor {
  bool transA = false, transB = false;
  uint32_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  uint64_t bias = 0, aux = 0;
  int64_t auxLd = 0, auxBatchStride = 0;
};

struct Preference {
  uint64_t maxWorkspace = 0;
  uint32_t alignA = 256, alignB = 256, alignC = 256, alignD = 256;
};

/// The message of the last rejected call on this thread.
thread_local cublasStatus_t lastRejectedStatus = CUBLAS_STATUS_SUCCESS;
thread_local std::string lastRejection;

cublasStatus_t rejectStatus(Recorder &recorder, cublasStatus_t status, const std::string &message) {
  recorder.violation("cublaslt-layout", message);
  lastRejectedStatus = status;
  lastRejection = message;
  return status;
}

/// cuBLASLt's opaque handles point at our own objects.
template <typename Handle, typename Object>
cublasStatus_t createObject(Handle *handle, const Object &object) {
  *handle = reinterpret_cast<Handle>(new Object(object));
  return CUBLAS_STATUS_SUCCESS;
}
template <typename Object, typename Handle> cublasStatus_t destroyObject(Handle handle) {
  delete reinterpret_cast<Object *>(handle);
  return CUBLAS_STATUS_SUCCESS;
}

/// Copies an attribute value of exactly \p bytes into \p field.
template <typename Field> cublasStatus_t setField(Field &field, const void *buffer, size_t bytes) {
  if (!buffer || bytes != sizeof(Field))
    return CUBLAS_STATUS_INVALID_VALUE;
  std::memcpy(&field, buffer, sizeof(Field));
  return CUBLAS_STATUS_SUCCESS;
}

std::string describeLayout(const char *name, const MatrixLayout &layout) {
  std::string text = std::string(name) + " (" + std::to_string(layout.rows) + "x" +
                     std::to_string(layout.cols) + ", ld " + std::to_string(layout.ld) + ", " +
                     std::to_string(ampc::dryrun::dataTypeBytes(layout.type)) + "-byte elements";
  if (layout.batch > 1)
    text += ", batch " + std::to_string(layout.batch) + " of stride " +
            std::to_string(layout.batchStride);
  return text + ")";
}

std::string describeMatmul(const MatmulCall &m) {
  return "cuBLASLt matmul D[" + std::to_string(m.d.rows) + " x " + std::to_string(m.d.cols) +
         "] = op(A) op(B)" + (m.transA ? ", A transposed" : "") +
         (m.transB ? ", B transposed" : "") +
         (m.d.batch > 1 ? ", batch " + std::to_string(m.d.batch) : "") + ", epilogue " +
         std::to_string(m.epilogue);
}

/// Why cuBLASLt rejects these layouts ("" if it does not).
std::string structureProblem(const MatmulCall &m) {
  const uint64_t opARows = m.transA ? m.a.cols : m.a.rows;
  const uint64_t opACols = m.transA ? m.a.rows : m.a.cols;
  const uint64_t opBRows = m.transB ? m.b.cols : m.b.rows;
  const uint64_t opBCols = m.transB ? m.b.rows : m.b.cols;
  if (opARows != m.d.rows || opBCols != m.d.cols || opACols != opBRows)
    return "op(A) is " + std::to_string(opARows) + "x" + std::to_string(opACols) + " and op(B) " +
           std::to_string(opBRows) + "x" + std::to_string(opBCols) +
           ", which do not multiply to D's " + std::to_string(m.d.rows) + "x" +
           std::to_string(m.d.cols);
  if (m.c.rows != m.d.rows || m.c.cols != m.d.cols)
    return "C's layout is not D's shape";
  const std::pair<const char *, const MatrixLayout *> layouts[] = {
      {"A", &m.a}, {"B", &m.b}, {"C", &m.c}, {"D", &m.d}};
  for (const auto &[name, layout] : layouts) {
    if (ampc::dryrun::dataTypeBytes(layout->type) == 0)
      return std::string(name) + " has an unknown data type";
    if (layout->ld < static_cast<int64_t>(layout->rows))
      return describeLayout(name, *layout) + ": ld is below the rows";
    if (layout->batch != m.d.batch)
      return std::string(name) + "'s batch count differs from D's";
  }
  if (m.a.type != m.b.type || m.c.type != m.d.type)
    return "A and B (and C and D) must share a data type";
  return "";
}

} // namespace

namespace ampc::dryrun {

CUresult checkMatmul(Recorder &recorder, const Node &node) {
  const MatmulCall &m = node.matmul;
  const std::string what = describeMatmul(m);
  auto inAllocation = [&](const std::string &operand, uint64_t pointer, uint64_t bytes,
                          Check overflow) {
    Check check = "";
    const std::string problem = recorder.rangeProblem(pointer, bytes, check);
    if (!problem.empty())
      recorder.violation(std::string(check) == "extent" ? overflow : check,
                         what + ": " + operand + " spans " + std::to_string(bytes) +
                             " bytes: " + problem);
  };
  auto aligned = [&](const std::string &operand, uint64_t pointer, uint32_t element,
                     uint32_t chosen, Check check) {
    const uint32_t alignment = alignmentOf(pointer);
    if (alignment < element || alignment < chosen)
      recorder.violation(check, what + ": " + operand + " at " + hexAddress(pointer) + " is " +
                                    std::to_string(alignment) + "-byte aligned, but " +
                                    (alignment < element
                                         ? "its elements take " + std::to_string(element) + " bytes"
                                         : "its algorithm was chosen for " +
                                               std::to_string(chosen) + "-byte alignment"));
  };

  struct Operand {
    const char *name;
    const MatrixLayout *layout;
    uint64_t pointer;
    uint32_t chosen;
  };
  const Operand operands[] = {{"A", &m.a, m.pointerA, m.alignA},
                              {"B", &m.b, m.pointerB, m.alignB},
                              {"C", &m.c, m.pointerC, m.alignC},
                              {"D", &m.d, m.pointerD, m.alignD}};
  for (const Operand &operand : operands) {
    // cuBLASLt reads C only when beta is not zero.
    if (operand.layout == &m.c && m.beta == 0.0f)
      continue;
    const std::string name = describeLayout(operand.name, *operand.layout);
    inAllocation(name, operand.pointer, layoutBytes(*operand.layout), "cublaslt-layout");
    aligned(name, operand.pointer, dataTypeBytes(operand.layout->type), operand.chosen,
            "cublaslt-alignment");
  }

  const uint32_t element = dataTypeBytes(m.d.type);
  const bool bias = (m.epilogue & CUBLASLT_EPILOGUE_BIAS) ||
                    m.epilogue == CUBLASLT_EPILOGUE_BGRADA ||
                    m.epilogue == CUBLASLT_EPILOGUE_BGRADB;
  if (bias) {
    const uint64_t length = m.epilogue == CUBLASLT_EPILOGUE_BGRADB ? m.d.cols : m.d.rows;
    const std::string name = "the bias vector (" + std::to_string(length) + " elements)";
    if (!m.bias)
      recorder.violation("cublaslt-epilogue", what + ": the epilogue needs a bias pointer");
    else {
      inAllocation(name, m.bias, length * element, "cublaslt-epilogue");
      aligned(name, m.bias, element, 0, "cublaslt-epilogue");
    }
  }
  if ((m.epilogue & 128) && m.epilogue != CUBLASLT_EPILOGUE_BGRADA &&
      m.epilogue != CUBLASLT_EPILOGUE_BGRADB) {
    MatrixLayout aux = m.d;
    aux.ld = m.auxLd;
    aux.batchStride = m.auxBatchStride;
    const std::string name = describeLayout("the aux matrix", aux);
    if (!m.aux)
      recorder.violation("cublaslt-epilogue", what + ": the epilogue needs an aux pointer");
    else if (m.auxLd < static_cast<int64_t>(m.d.rows) || m.auxLd % 8 != 0)
      recorder.violation("cublaslt-epilogue", what + ": " + name +
                                                  " needs an ld that is a multiple of 8 and at "
                                                  "least D's rows");
    else {
      inAllocation(name, m.aux, layoutBytes(aux), "cublaslt-epilogue");
      aligned(name, m.aux, element, 0, "cublaslt-epilogue");
    }
  }

  const MatmulAlgorithm *algorithm = nullptr;
  // The algorithm's id is in the call's algo (see cublasLtMatmul below).
  algorithm = recorder.algorithm(static_cast<uint64_t>(node.value));
  if (algorithm && m.workspaceBytes < algorithm->workspaceBytes)
    recorder.violation("cublaslt-workspace", what + ": a workspace of " +
                                                 std::to_string(m.workspaceBytes) +
                                                 " bytes, but its algorithm needs " +
                                                 std::to_string(algorithm->workspaceBytes));
  if (m.workspaceBytes)
    inAllocation("the workspace", m.workspace, m.workspaceBytes, "cublaslt-workspace");
  return CUDA_SUCCESS;
}

} // namespace ampc::dryrun

//===----------------------------------------------------------------------===//
// Entry points
//===----------------------------------------------------------------------===//

AMPC_EXPORT size_t CUBLASWINAPI cublasLtGetVersion(void) { return CUBLAS_VERSION; }

AMPC_EXPORT const char *CUBLASWINAPI cublasLtGetStatusName(cublasStatus_t status) {
  switch (status) {
  case CUBLAS_STATUS_SUCCESS:
    return "CUBLAS_STATUS_SUCCESS";
  case CUBLAS_STATUS_INVALID_VALUE:
    return "CUBLAS_STATUS_INVALID_VALUE";
  case CUBLAS_STATUS_NOT_SUPPORTED:
    return "CUBLAS_STATUS_NOT_SUPPORTED";
  case CUBLAS_STATUS_EXECUTION_FAILED:
    return "CUBLAS_STATUS_EXECUTION_FAILED";
  default:
    return "CUBLAS_STATUS_UNKNOWN";
  }
}

AMPC_EXPORT const char *CUBLASWINAPI cublasLtGetStatusString(cublasStatus_t status) {
  thread_local std::string text;
  text = status == CUBLAS_STATUS_SUCCESS ? "success"
         : status == CUBLAS_STATUS_INVALID_VALUE
             ? "an unsupported value or parameter was passed to the function"
             : "the operation failed";
  if (status == lastRejectedStatus && !lastRejection.empty())
    text += " (recording cuBLASLt: " + lastRejection + ")";
  return text.c_str();
}

AMPC_EXPORT cublasStatus_t CUBLASWINAPI cublasLtCreate(cublasLtHandle_t *handle) {
  static int context;
  *handle = reinterpret_cast<cublasLtHandle_t>(&context);
  return CUBLAS_STATUS_SUCCESS;
}

AMPC_EXPORT cublasStatus_t CUBLASWINAPI cublasLtDestroy(cublasLtHandle_t) {
  return CUBLAS_STATUS_SUCCESS;
}

AMPC_EXPORT cublasStatus_t CUBLASWINAPI cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *desc,
                                                                 cublasComputeType_t,
                                                                 cudaDataType_t) {
  return createObject(desc, MatmulDescriptor());
}

AMPC_EXPORT cublasStatus_t CUBLASWINAPI cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) {
  return destroyObject<MatmulDescriptor>(desc);
}

AMPC_EXPORT cublasStatus_t CUBLASWINAPI cublasLtMatmulDescSetAttribute(
    cublasLtMatmulDesc_t handle, cublasLtMatmulDescAttributes_t attribute, const void *buffer,
    size_t bytes) {
  MatmulDescriptor &desc = *reinterpret_cast<MatmulDescriptor *>(handle);
  int32_t operation = 0;
  cublasStatus_t status = CUBLAS_STATUS_SUCCESS;
  switch (attribute) {
  case CUBLASLT_MATMUL_DESC_TRANSA:
  case CUBLASLT_MATMUL_DESC_TRANSB:
    status = setField(operation, buffer, bytes);
    (attribute == CUBLASLT_MATMUL_DESC_TRANSA ? desc.transA : desc.transB) =
        operation == CUBLAS_OP_T;
    return status;
  case CUBLASLT_MATMUL_DESC_EPILOGUE:
    return setField(desc.epilogue, buffer, bytes);
  case CUBLASLT_MATMUL_DESC_BIAS_POINTER:
    return setField(desc.bias, buffer, bytes);
  case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER:
    return setField(desc.aux, buffer, bytes);
  case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD:
    return setField(desc.auxLd, buffer, bytes);
  case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE:
    return setField(desc.auxBatchStride, buffer, bytes);
  default:
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
}

AMPC_EXPORT cublasStatus_t CUBLASWINAPI cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *layout,
                                                                   cudaDataType type, uint64_t rows,
                                                                   uint64_t cols, int64_t ld) {
  MatrixLayout created;
  created.type = type;
  created.rows = rows;
  created.cols = cols;
  created.ld = ld;
  return createObject(layout, created);
}

AMPC_EXPORT cublasStatus_t CUBLASWINAPI cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) {
  return destroyObject<MatrixLayout>(layout);
}

AMPC_EXPORT cublasStatus_t CUBLASWINAPI cublasLtMatrixLayoutSetAttribute(
    cublasLtMatrixLayout_t handle, cublasLtMatrixLayoutAttribute_t attribute, const void *buffer,
    size_t bytes) {
  MatrixLayout &layout = *reinterpret_cast<MatrixLayout *>(handle);
  switch (attribute) {
  case CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT:
    return setField(layout.batch, buffer, bytes);
  case CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET:
    return setField(layout.batchStride, buffer, bytes);
  default:
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
}

AMPC_EXPORT cublasStatus_t CUBLASWINAPI
cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *preference) {
  return createObject(preference, Preference());
}

AMPC_EXPORT cublasStatus_t CUBLASWINAPI
cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t preference) {
  return destroyObject<Preference>(preference);
}

AMPC_EXPORT cublasStatus_t CUBLASWINAPI cublasLtMatmulPreferenceSetAttribute(
    cublasLtMatmulPreference_t handle, cublasLtMatmulPreferenceAttributes_t attribute,
    const void *buffer, size_t bytes) {
  Preference &preference = *reinterpret_cast<Preference *>(handle);
  switch (attribute) {
  case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES:
    return setField(preference.maxWorkspace, buffer, bytes);
  case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES:
    return setField(preference.alignA, buffer, bytes);
  case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES:
    return setField(preference.alignB, buffer, bytes);
  case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES:
    return setField(preference.alignC, buffer, bytes);
  case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES:
    return setField(preference.alignD, buffer, bytes);
  default:
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
}

namespace {

/// The call's matmul in the trace's terms (pointers and algorithm apart).
MatmulCall describeCall(const MatmulDescriptor &desc, const MatrixLayout &a, const MatrixLayout &b,
                        const MatrixLayout &c, const MatrixLayout &d) {
  MatmulCall call;
  call.transA = desc.transA;
  call.transB = desc.transB;
  call.epilogue = desc.epilogue;
  call.a = a;
  call.b = b;
  call.c = c;
  call.d = d;
  call.bias = desc.bias;
  call.aux = desc.aux;
  call.auxLd = desc.auxLd;
  call.auxBatchStride = desc.auxBatchStride;
  return call;
}

} // namespace

AMPC_EXPORT cublasStatus_t CUBLASWINAPI cublasLtMatmulAlgoGetHeuristic(
    cublasLtHandle_t, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
    cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d, cublasLtMatmulPreference_t preference,
    int requested, cublasLtMatmulHeuristicResult_t results[], int *returned) {
  return recorded([&](Recorder &recorder) {
    *returned = 0;
    const MatmulCall call = describeCall(
        *reinterpret_cast<const MatmulDescriptor *>(desc),
        *reinterpret_cast<const MatrixLayout *>(a), *reinterpret_cast<const MatrixLayout *>(b),
        *reinterpret_cast<const MatrixLayout *>(c), *reinterpret_cast<const MatrixLayout *>(d));
    const std::string problem = structureProblem(call);
    if (!problem.empty())
      return rejectStatus(recorder, CUBLAS_STATUS_INVALID_VALUE,
                          describeMatmul(call) + ": " + problem);
    if (requested < 1)
      return CUBLAS_STATUS_INVALID_VALUE;
    const Preference &chosen = *reinterpret_cast<const Preference *>(preference);
    MatmulAlgorithm algorithm;
    algorithm.alignA = chosen.alignA;
    algorithm.alignB = chosen.alignB;
    algorithm.alignC = chosen.alignC;
    algorithm.alignD = chosen.alignD;
    algorithm.workspaceBytes = std::min(chosen.maxWorkspace, kAlgorithmWorkspace);
    // Several candidates, as cuBLASLt offers, so that choosing among them by timing runs here
    // too; the recording driver's events measure no time, so the first stays the choice.
    const int offered = std::min(requested, kOfferedAlgorithms);
    for (int i = 0; i < offered; ++i) {
      results[i] = cublasLtMatmulHeuristicResult_t();
      results[i].algo.data[0] = kAlgorithmMagic;
      results[i].algo.data[1] = recorder.addAlgorithm(algorithm);
      results[i].workspaceSize = algorithm.workspaceBytes;
      results[i].state = CUBLAS_STATUS_SUCCESS;
      results[i].wavesCount = 1.0f;
    }
    *returned = offered;
    return CUBLAS_STATUS_SUCCESS;
  });
}

AMPC_EXPORT cublasStatus_t CUBLASWINAPI cublasLtMatmul(
    cublasLtHandle_t, cublasLtMatmulDesc_t desc, const void *alpha, const void *A,
    cublasLtMatrixLayout_t a, const void *B, cublasLtMatrixLayout_t b, const void *beta,
    const void *C, cublasLtMatrixLayout_t c, void *D, cublasLtMatrixLayout_t d,
    const cublasLtMatmulAlgo_t *algo, void *workspace, size_t workspaceBytes, cudaStream_t stream) {
  return recorded([&](Recorder &recorder) {
    Node node;
    node.kind = EventKind::Matmul;
    node.matmul = describeCall(
        *reinterpret_cast<const MatmulDescriptor *>(desc),
        *reinterpret_cast<const MatrixLayout *>(a), *reinterpret_cast<const MatrixLayout *>(b),
        *reinterpret_cast<const MatrixLayout *>(c), *reinterpret_cast<const MatrixLayout *>(d));
    MatmulCall &call = node.matmul;
    call.pointerA = reinterpret_cast<uint64_t>(A);
    call.pointerB = reinterpret_cast<uint64_t>(B);
    call.pointerC = reinterpret_cast<uint64_t>(C);
    call.pointerD = reinterpret_cast<uint64_t>(D);
    call.workspace = reinterpret_cast<uint64_t>(workspace);
    call.workspaceBytes = workspaceBytes;
    std::memcpy(&call.alpha, alpha, sizeof(float));
    std::memcpy(&call.beta, beta, sizeof(float));
    const MatmulAlgorithm *algorithm =
        algo && algo->data[0] == kAlgorithmMagic ? recorder.algorithm(algo->data[1]) : nullptr;
    if (algorithm) {
      call.alignA = algorithm->alignA;
      call.alignB = algorithm->alignB;
      call.alignC = algorithm->alignC;
      call.alignD = algorithm->alignD;
      node.value = static_cast<int>(algo->data[1]);
    }
    // Plants go into the steps' matmuls, on the first stream the program created, not into
    // the runs that time cuBLASLt's candidates on another.
    AmpcRecordingPlant plant;
    const CUstream on = reinterpret_cast<CUstream>(stream);
    if (recorder.streamNumber(on) <= 1 && recorder.takePlant(nullptr, recorder.capturing(on), plant))
      recorder.applyPlant(plant, node, on);
    std::string problem = structureProblem(call);
    if (problem.empty() && !algorithm)
      problem = "the algorithm did not come from cublasLtMatmulAlgoGetHeuristic";
    if (!problem.empty()) {
      recorder.record(node);
      return rejectStatus(recorder, CUBLAS_STATUS_INVALID_VALUE,
                          describeMatmul(call) + ": " + problem);
    }
    const CUresult result = recorder.submit(reinterpret_cast<CUstream>(stream), node);
    return result == CUDA_SUCCESS ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_EXECUTION_FAILED;
  });
}
