//===- RecordingTrace.h - What the recording driver saw, as events --------===//
//
// The recording driver (RecordingDriver.cpp, RecordingCublasLt.cpp) stands in
// for libcuda and libcublasLt in tests: it keeps device memory on the host,
// records every call that allocates, frees, loads a kernel, launches, copies,
// sets, synchronises, captures or replays a CUDA graph or runs a cuBLASLt
// matmul, and checks each one the way a GPU would (see RecordingState.h).
// This header is the record: one Event per call, written one line per event
//
//   launch call=812 origin=replayed graph=3 function=17 name=ampc_... ...
//
// as `kind key=value key=value ...` (a violation's message last, as the rest
// of the line), so a trace is readable by eye and round-trips exactly. The
// library writes it to $AMPC_RECORDING_TRACE as it goes and keeps it in
// memory for tests in the same process (RecordingApi.h); DryRunChecker reads
// it back and checks it against the plan that ran.
//
// Every event carries `call`, the index of the driver or cuBLASLt call that
// produced it; a violation found by that call has the same index, so it can
// be traced to the launch, matmul or copy it is about.
//
//===----------------------------------------------------------------------===//

#ifndef AMPC_TEST_UNIT_DRYRUN_RECORDINGTRACE_H
#define AMPC_TEST_UNIT_DRYRUN_RECORDINGTRACE_H

#include <cstdint>
#include <istream>
#include <string>
#include <vector>

namespace ampc::dryrun {

/// When the work of an event happens.
enum class Origin : uint8_t {
  Eager,    ///< on the stream, when it was called
  Captured, ///< recorded into a CUDA graph under capture (not executed)
  Replayed, ///< executed by a replay of an instantiated graph
};

/// One kernel parameter as the cubin's .nv.info records it.
struct KernelParam {
  uint32_t offset = 0; ///< byte offset in the parameter buffer
  uint32_t size = 0;   ///< bytes
};

/// What the loaded binary says about one __global__ function.
struct KernelInfo {
  std::string name;
  /// "sm_90" for a cubin, "compute_90" for PTX.
  std::string binary;
  /// In parameter order (ordinal 0 first).
  std::vector<KernelParam> params;
  /// Registers per thread; -1 when the binary does not say (PTX).
  int registers = -1;
  /// Static shared memory in bytes (without the system's reserved bytes).
  uint32_t staticShared = 0;
  /// __launch_bounds__ (threads per block); 0 when the kernel has none.
  uint32_t maxThreads = 0;
};

/// A cuBLASLt matrix layout (column-major).
struct MatrixLayout {
  int type = 0; ///< cudaDataType
  uint64_t rows = 0, cols = 0;
  int64_t ld = 0;
  int32_t batch = 1;
  int64_t batchStride = 0; ///< elements
};

/// One cublasLtMatmul call in cuBLASLt's (column-major) terms:
/// D = epilogue(alpha op(A) op(B) + beta C).
struct MatmulCall {
  bool transA = false, transB = false;
  uint32_t epilogue = 0; ///< cublasLtEpilogue_t
  MatrixLayout a, b, c, d;
  uint64_t pointerA = 0, pointerB = 0, pointerC = 0, pointerD = 0;
  uint64_t bias = 0, aux = 0;
  int64_t auxLd = 0, auxBatchStride = 0;
  uint64_t workspace = 0, workspaceBytes = 0;
  /// The alignments (bytes) the algorithm was chosen for.
  uint32_t alignA = 0, alignB = 0, alignC = 0, alignD = 0;
  float alpha = 0, beta = 0;
};

enum class EventKind : uint8_t {
  Alloc,        ///< cuMemAlloc: address, bytes
  Free,         ///< cuMemFree: address
  HostAlloc,    ///< cuMemAllocHost (pinned): address, bytes
  HostFree,     ///< cuMemFreeHost: address
  Kernel,       ///< cuModuleGetFunction: function, kernel
  Launch,       ///< cuLaunchKernel: function, name, grid, block, shared, args
  Matmul,       ///< cublasLtMatmul: matmul
  Memset,       ///< cuMemsetD8Async: address, bytes, value
  Memcpy,       ///< cuMemcpy*Async: what (htod|dtoh|dtod), address, source, bytes, args
  Sync,         ///< what: stream | context | event
  CaptureBegin, ///< cuStreamBeginCapture: graph (the capture's id)
  CaptureEnd,   ///< cuStreamEndCapture: graph, what (ok | invalidated)
  GraphLaunch,  ///< cuGraphLaunch: graph (the executable's id), bytes (nodes)
  Violation,    ///< what (the check), text
};

/// One recorded call. Fields an event kind does not use stay at their
/// defaults and are not written.
struct Event {
  EventKind kind = EventKind::Sync;
  uint64_t call = 0;
  Origin origin = Origin::Eager;
  /// Captured: the capture's id; Replayed: the graph executable's id.
  uint64_t graph = 0;
  uint64_t address = 0, source = 0, bytes = 0;
  int value = 0;
  std::string what;
  /// A violation's message.
  std::string text;
  /// Kernel and Launch: the function handle's id and the kernel's name.
  uint64_t function = 0;
  std::string name;
  uint32_t grid[3] = {1, 1, 1}, block[3] = {1, 1, 1};
  uint32_t sharedBytes = 0;
  /// Launch: each parameter's value as read with the cubin's sizes
  /// (little-endian, zero-extended; parameters over 8 bytes read as 0).
  /// Memcpy: for a host-to-device copy of at most kRecordedCopyBytes, the
  /// bytes it writes as little-endian 8-byte words (the last zero-padded),
  /// so a checker can follow small values the host sets (the run scalars).
  std::vector<uint64_t> args;
  /// Launch: the bytes of every parameter over 8 bytes (a struct passed by
  /// value), in parameter order, as little-endian 8-byte words, each
  /// parameter zero-padded to whole words.
  std::vector<uint64_t> wideArgs;
  KernelInfo kernel;
  MatmulCall matmul;
  /// Matmul: the stream it was queued on, numbered in the order the program created its
  /// streams (1: the first; 0: the legacy default stream).
  uint32_t stream = 0;
};

/// The largest host-to-device copy whose bytes the trace records.
inline constexpr uint64_t kRecordedCopyBytes = 64;

/// Bytes of a cudaDataType element (0 for a type the dry run does not know).
uint32_t dataTypeBytes(int type);
/// Bytes a layout spans from its pointer: ((cols - 1) x ld + rows +
/// (batch - 1) x batch stride) elements.
uint64_t layoutBytes(const MatrixLayout &layout);

/// "launch", "matmul", ... (the first word of an event's line).
const char *eventKindName(EventKind kind);
/// "eager", "captured", "replayed".
const char *originName(Origin origin);

/// \p event as one line (no newline).
std::string formatEvent(const Event &event);
/// The event of one line; throws std::runtime_error naming the line when it
/// is malformed.
Event parseEvent(const std::string &line);
/// Every line of \p in (blank lines skipped).
std::vector<Event> parseTrace(std::istream &in);
std::vector<Event> parseTraceText(const std::string &text);

} // namespace ampc::dryrun

#endif // AMPC_TEST_UNIT_DRYRUN_RECORDINGTRACE_H
