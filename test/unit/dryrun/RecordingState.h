//===- RecordingState.h - The recording driver's state and checks ---------===//
//
// One Recorder per process holds what a GPU and its driver would: the device
// memory (each cuMemAlloc a private anonymous mapping with MAP_NORESERVE, so
// the 7 GB arena of GPT-124M costs only the pages something writes; memsets
// to zero give whole pages back), pinned host buffers, loaded kernels with
// what their cubins say, streams, stream capture, graphs and their replays.
// The driver entry points (RecordingDriver.cpp) and cuBLASLt's
// (RecordingCublasLt.cpp) share it.
//
// Device addresses are not host addresses: allocations are laid out upwards
// from kDeviceBase, each aligned to and followed by a 2 MiB gap, and never
// reused, so a pointer that runs past its allocation lands in no allocation
// and a freed one stays recognisable as freed. Stream work (launches,
// matmuls, memsets, copies) is a Node: executed at once, recorded into the
// graph while its stream is capturing, executed again at every replay.
// Kernels never run; copies and memsets do, so what the host reads back is
// what it wrote (zeros where only kernels would have written).
//
// Copies run when queued, which a GPU may do much later: so a host-to-device
// copy from pinned memory stays pending until the host has seen the stream
// reach it (a synchronisation of its stream or context, or of an event
// recorded on the stream after it), and its source must keep the bytes it
// had when queued until then (pinned-reuse: checked when the copy completes,
// when another copy from the same bytes is queued, and when they are freed).
//
// Every node is checked when it is queued, captured and replayed, the way a
// GPU would reject or silently corrupt it; see RecordingDriver.cpp and
// RecordingCublasLt.cpp for the checks. A violation is written to the trace
// right after the event it is about (same call index). Where a real driver
// rejects the call (launch limits, capture rules, invalid layouts), the call
// returns the driver's error too, and cuGetErrorString of that code on the
// same thread then ends with the violation's message.
//
//===----------------------------------------------------------------------===//

#ifndef AMPC_TEST_UNIT_DRYRUN_RECORDINGSTATE_H
#define AMPC_TEST_UNIT_DRYRUN_RECORDINGSTATE_H

#include "AllocationTable.h"
#include "RecordingApi.h"
#include "RecordingTrace.h"

#include <cuda.h>

#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace ampc::dryrun {

/// The first device address; values from here to kDeviceEnd passed as
/// kernel arguments are taken for device pointers.
inline constexpr uint64_t kDeviceBase = 0x500000000000ull;
inline constexpr uint64_t kDeviceEnd = kDeviceBase + (1ull << 44);

/// A loaded module's kernel.
struct Function {
  uint64_t id = 0;
  uint64_t module = 0;
  KernelInfo info;
  /// CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES.
  int dynamicSharedLimit = 0;
};

/// A cuBLASLt matmul's host-side choice that the call itself does not
/// carry: the alignments its algorithm was chosen for and its workspace.
struct MatmulAlgorithm {
  uint32_t alignA = 0, alignB = 0, alignC = 0, alignD = 0;
  uint64_t workspaceBytes = 0;
};

/// What one piece of stream work does, with which it is replayed.
using Node = Event;

/// A CUevent: whether it was recorded, and where on which stream.
struct RecordedEvent {
  bool recorded = false;
  /// Recorded outside a capture: the stream, and how much stream work had
  /// been queued (Recorder::queuedWork) when it was.
  bool placed = false;
  CUstream stream = nullptr;
  uint64_t position = 0;
};

/// A host-to-device copy from pinned memory that the stream has not been
/// seen to reach: the host must not rewrite its source until it has.
struct PendingPinnedCopy {
  CUstream stream = nullptr;
  uint64_t position = 0; ///< Recorder::queuedWork once it was queued
  uint64_t source = 0, destination = 0, bytes = 0;
  uint64_t digest = 0; ///< of the source bytes when queued
  uint64_t call = 0;
};

class Recorder {
public:
  static Recorder &instance();

  /// Locks the recorder and starts a new call (its index: call()).
  std::unique_lock<std::mutex> beginCall();
  uint64_t call() const { return callIndex; }

  void reset(const AmpcRecordingDevice &newDevice);
  const AmpcRecordingDevice &device() const { return deviceInfo; }

  // Memory.

  CUresult allocate(uint64_t bytes, CUdeviceptr *pointer);
  CUresult free(CUdeviceptr pointer);
  void *allocateHost(uint64_t bytes);
  bool freeHost(void *pointer);
  uint64_t allocatedBytes() const { return heldBytes; }
  /// See AllocationTable::rangeProblem.
  std::string rangeProblem(uint64_t address, uint64_t bytes, Check &check) const {
    return allocations.rangeProblem(address, bytes, check);
  }
  /// Host memory of a live device range (checked by rangeProblem first).
  uint8_t *hostOf(uint64_t address);
  /// True when [pointer, pointer + bytes) lies in one pinned host buffer.
  bool isPinned(uint64_t pointer, uint64_t bytes) const;

  // Trace and violations.

  void record(const Event &event);
  /// Records an alloc, free, host-alloc or host-free event.
  void recordMemory(EventKind kind, uint64_t address, uint64_t bytes);
  /// Records a violation of \p check about the last recorded event.
  void violation(Check check, const std::string &message);
  /// As violation(), and remembers \p code so that cuGetErrorString of it
  /// on this thread ends with the message; returns \p code.
  CUresult reject(CUresult code, Check check, const std::string &message);
  /// The message of the last rejection with \p code on this thread ("").
  std::string rejectionFor(CUresult code) const;
  const std::string &traceText() const { return text; }
  size_t violationCount() const { return violations; }

  // Streams, capture and graphs.

  CUstream createStream();
  bool destroyStream(CUstream stream);
  bool knownStream(CUstream stream) const;
  /// A stream's number in the order the program created its streams (1: the first; 0: the
  /// legacy default stream).
  uint32_t streamNumber(CUstream stream) const {
    return stream ? static_cast<uint32_t>(*reinterpret_cast<const int *>(stream)) : 0;
  }
  CUresult beginCapture(CUstream stream, CUstreamCaptureMode mode);
  CUresult endCapture(CUstream stream, CUgraph *graph);
  bool capturing(CUstream stream) const;
  /// For a call that synchronises, allocates or frees: when a capture
  /// forbids it (always for a sync of the capturing stream; for other calls
  /// unless the capture is relaxed, and in thread-local mode only from the
  /// capturing thread), records a violation, invalidates the capture and
  /// returns true.
  bool captureForbids(const std::string &call, CUstream stream = nullptr);
  /// Queues \p node on \p stream: captured, or checked and executed.
  /// Returns the error a GPU's driver would (CUDA_SUCCESS for work that
  /// would run and corrupt memory: that is only recorded).
  CUresult submit(CUstream stream, Node node);
  /// Records \p event at the current end of \p stream's work.
  void recordEvent(RecordedEvent &event, CUstream stream);
  /// The host has seen \p stream (null with \p everyStream: every stream)
  /// reach work item \p position: the pinned copies queued up to there are
  /// done, each checked for its source rewritten before (pinned-reuse).
  void streamReached(CUstream stream, uint64_t position, bool everyStream = false);
  /// Stream work queued so far, every stream and replayed node counted.
  uint64_t queuedWork() const { return workQueued; }
  CUresult instantiate(CUgraphExec *executable, CUgraph graph);
  CUresult launchGraph(CUgraphExec executable, CUstream stream);
  bool destroyGraph(CUgraph graph);
  bool destroyExecutable(CUgraphExec executable);

  // Modules and kernels.

  CUresult loadModule(CUmodule *module, const void *image);
  CUresult unloadModule(CUmodule module);
  CUresult getFunction(CUfunction *function, CUmodule module, const char *name);
  /// Null when \p function is not a kernel of a loaded module.
  Function *function(CUfunction function);

  // Planted defects (RecordingApi.h).
  void plant(const AmpcRecordingPlant *plant);
  /// The plant for this launch of kernel \p name (or this matmul, when
  /// \p name is null), if it is the one planted for; it is then used up.
  bool takePlant(const char *name, bool capturing, AmpcRecordingPlant &plant);
  /// The plant for this host-to-device copy of \p bytes (recorded with its
  /// bytes), if it is the one planted for; it is then used up.
  bool takeCopyPlant(uint64_t bytes, AmpcRecordingPlant &plant);
  /// The plant for this cuEventSynchronize or cuMemAllocHost (\p kind), if
  /// it is the one planted for.
  bool takeCallPlant(int kind, AmpcRecordingPlant &plant);
  /// Counts one candidate; the planted one (its occurrence) takes the plant, once.
  bool claimPlant(AmpcRecordingPlant &plant);
  /// Applies a launch's plant to \p node, queued on \p stream.
  void applyPlant(const AmpcRecordingPlant &plant, Node &node, CUstream stream);

  // cuBLASLt: the algorithms handed out by the heuristic.
  uint64_t addAlgorithm(const MatmulAlgorithm &algorithm);
  const MatmulAlgorithm *algorithm(uint64_t id) const;

private:
  Recorder();
  ~Recorder();
  /// Checks \p node for \p origin and performs its copies and memsets.
  CUresult execute(Node &node);
  /// Notes an executed host-to-device \p node from pinned memory on
  /// \p stream as pending, after checking the pending copies its source
  /// overlaps.
  void notePinnedCopy(CUstream stream, const Node &node);
  /// A pinned-reuse violation when \p copy's source no longer holds the
  /// bytes it held when queued; \p when says what the host did meanwhile.
  void checkPinnedSource(const PendingPinnedCopy &copy, const std::string &when);
  void closeTrace();

  std::mutex mutex;
  uint64_t callIndex = 0;
  AmpcRecordingDevice deviceInfo;

  AllocationTable allocations;
  /// Pinned host buffers by address (their ids are not used).
  std::map<uint64_t, Allocation> hostBuffers;
  uint64_t nextAddress = kDeviceBase;
  uint64_t heldBytes = 0;
  uint64_t workQueued = 0;
  std::vector<PendingPinnedCopy> pendingCopies;

  std::string text;
  std::FILE *file = nullptr;
  bool fileChecked = false;
  size_t violations = 0;
  std::string firstViolation;

  struct Capture {
    bool active = false;
    CUstream stream = nullptr;
    CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_GLOBAL;
    std::thread::id thread;
    bool invalidated = false;
    uint64_t id = 0;
    std::vector<Node> nodes;
  } capture;
  uint64_t nextGraph = 1;
  std::map<uint64_t, std::vector<Node>> graphs, executables;
  std::vector<std::unique_ptr<int>> streams;
  int streamsCreated = 0;

  std::map<uint64_t, std::vector<KernelInfo>> modules;
  uint64_t nextModule = 1;
  std::map<uint64_t, std::unique_ptr<Function>> functions;
  uint64_t nextFunction = 1;

  std::vector<MatmulAlgorithm> algorithms;

  AmpcRecordingPlant planted = {};
  std::string plantedKernel;
  int plantCandidates = 0;
};

/// Runs \p call on the recorder as one driver call, holding its lock.
template <typename Call> auto recorded(Call call) {
  Recorder &recorder = Recorder::instance();
  auto lock = recorder.beginCall();
  return call(recorder);
}

/// Helpers shared by the two entry-point files.
/// The largest power of two, at most 256, dividing \p address.
uint32_t alignmentOf(uint64_t address);
/// Checks one cuBLASLt matmul node (RecordingCublasLt.cpp).
CUresult checkMatmul(Recorder &recorder, const Node &node);

} // namespace ampc::dryrun

#endif // AMPC_TEST_UNIT_DRYRUN_RECORDINGSTATE_H
