//===- RecordingState.cpp - The recording driver's state and checks -------===//
//
// Memory, the trace, streams, capture and graphs, modules; the checks of
// memsets, copies and kernel pointer arguments that execute() runs for every
// node. Launch limits are checked by cuLaunchKernel (RecordingDriver.cpp)
// and matmuls by checkMatmul (RecordingCublasLt.cpp).
//
//===----------------------------------------------------------------------===//

#include "RecordingState.h"
#include "KernelBinaryInfo.h"

#include <sys/mman.h>

#include <cstdlib>
#include <cstring>
#include <stdexcept>

namespace ampc::dryrun {

namespace {

/// Allocations start on this boundary and leave a gap of it after them.
constexpr uint64_t kAllocationGranule = 2ull << 20;
constexpr uint64_t kPageBytes = 4096;

uint64_t roundUp(uint64_t value, uint64_t granule) {
  return (value + granule - 1) / granule * granule;
}

/// The last rejection on this thread, for cuGetErrorString.
thread_local CUresult lastRejectedCode = CUDA_SUCCESS;
thread_local std::string lastRejection;

/// Zeroes \p bytes at \p host: whole pages are handed back to the kernel
/// (they read as zeros again and cost no memory), the edges are cleared.
void zero(uint8_t *host, uint64_t bytes) {
  const uint64_t begin = reinterpret_cast<uint64_t>(host);
  const uint64_t firstPage = roundUp(begin, kPageBytes);
  const uint64_t lastPage = (begin + bytes) / kPageBytes * kPageBytes;
  if (lastPage <= firstPage + kPageBytes) {
    std::memset(host, 0, bytes);
    return;
  }
  std::memset(host, 0, firstPage - begin);
  madvise(reinterpret_cast<void *>(firstPage), lastPage - firstPage, MADV_DONTNEED);
  std::memset(reinterpret_cast<void *>(lastPage), 0, begin + bytes - lastPage);
}

/// FNV-1a over \p bytes at \p data: enough to tell rewritten bytes apart.
uint64_t digestOf(const void *data, uint64_t bytes) {
  uint64_t hash = 0xcbf29ce484222325ull;
  const uint8_t *at = static_cast<const uint8_t *>(data);
  for (uint64_t i = 0; i < bytes; ++i)
    hash = (hash ^ at[i]) * 0x100000001b3ull;
  return hash;
}

bool overlaps(uint64_t a, uint64_t aBytes, uint64_t b, uint64_t bBytes) {
  return a < b + bBytes && b < a + aBytes;
}

} // namespace

uint32_t alignmentOf(uint64_t address) {
  uint32_t alignment = 256;
  while (alignment > 1 && address % alignment != 0)
    alignment /= 2;
  return alignment;
}

//===----------------------------------------------------------------------===//
// The recorder
//===----------------------------------------------------------------------===//

Recorder &Recorder::instance() {
  static Recorder recorder;
  return recorder;
}

Recorder::Recorder() : deviceInfo(ampcRecordingH100()) {}

Recorder::~Recorder() { closeTrace(); }

std::unique_lock<std::mutex> Recorder::beginCall() {
  std::unique_lock<std::mutex> lock(mutex);
  ++callIndex;
  return lock;
}

void Recorder::closeTrace() {
  if (file)
    std::fclose(file);
  file = nullptr;
  if (violations)
    std::fprintf(stderr, "ampc recording driver: %zu violation%s; the first: %s\n", violations,
                 violations == 1 ? "" : "s", firstViolation.c_str());
}

void Recorder::reset(const AmpcRecordingDevice &newDevice) {
  for (auto &[address, allocation] : allocations.all())
    if (allocation.live)
      munmap(allocation.host, allocation.bytes);
  for (auto &[address, buffer] : hostBuffers)
    if (buffer.live)
      munmap(buffer.host, buffer.bytes);
  allocations = AllocationTable();
  hostBuffers.clear();
  heldBytes = 0;
  workQueued = 0;
  pendingCopies.clear();
  deviceInfo = newDevice;
  text.clear();
  violations = 0;
  firstViolation.clear();
  capture = Capture();
  graphs.clear();
  executables.clear();
  streams.clear();
  streamsCreated = 0;
  modules.clear();
  functions.clear();
  algorithms.clear();
}

//===----------------------------------------------------------------------===//
// Memory
//===----------------------------------------------------------------------===//

CUresult Recorder::allocate(uint64_t bytes, CUdeviceptr *pointer) {
  if (bytes == 0 || !pointer)
    return CUDA_ERROR_INVALID_VALUE;
  if (heldBytes + bytes > deviceInfo.freeBytes)
    return CUDA_ERROR_OUT_OF_MEMORY;
  void *host = mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (host == MAP_FAILED)
    return CUDA_ERROR_OUT_OF_MEMORY;
  Allocation &allocation = allocations.add(nextAddress, bytes, callIndex);
  allocation.host = static_cast<uint8_t *>(host);
  nextAddress = roundUp(nextAddress + bytes, kAllocationGranule) + kAllocationGranule;
  heldBytes += bytes;
  *pointer = allocation.address;
  recordMemory(EventKind::Alloc, allocation.address, bytes);
  return CUDA_SUCCESS;
}

CUresult Recorder::free(CUdeviceptr pointer) {
  recordMemory(EventKind::Free, pointer, 0);
  if (pointer == 0)
    return CUDA_SUCCESS;
  Allocation *allocation = allocations.free(pointer, callIndex);
  if (!allocation) {
    const Allocation *holder = allocations.find(pointer);
    return reject(CUDA_ERROR_INVALID_VALUE, "free",
                  "cuMemFree of " + hexAddress(pointer) + ", which is " +
                      (!holder         ? std::string("in no allocation")
                       : !holder->live ? AllocationTable::describe(*holder) + ", freed at call " +
                                             std::to_string(holder->freedAt)
                                       : "inside " + AllocationTable::describe(*holder) +
                                             " but not its start"));
  }
  munmap(allocation->host, allocation->bytes);
  allocation->host = nullptr;
  heldBytes -= allocation->bytes;
  return CUDA_SUCCESS;
}

void *Recorder::allocateHost(uint64_t bytes) {
  void *host = mmap(nullptr, bytes ? bytes : 1, PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (host == MAP_FAILED)
    return nullptr;
  Allocation buffer;
  buffer.address = reinterpret_cast<uint64_t>(host);
  buffer.bytes = bytes;
  buffer.host = static_cast<uint8_t *>(host);
  buffer.allocatedAt = callIndex;
  hostBuffers[buffer.address] = buffer;
  recordMemory(EventKind::HostAlloc, buffer.address, bytes);
  return host;
}

bool Recorder::freeHost(void *pointer) {
  const uint64_t address = reinterpret_cast<uint64_t>(pointer);
  recordMemory(EventKind::HostFree, address, 0);
  auto found = hostBuffers.find(address);
  if (found == hostBuffers.end())
    return false;
  for (auto copy = pendingCopies.begin(); copy != pendingCopies.end();)
    if (overlaps(copy->source, copy->bytes, address, found->second.bytes)) {
      violation("pinned-reuse", "cuMemFreeHost of pinned memory that cuMemcpyHtoDAsync at call " +
                                    std::to_string(copy->call) + " copies " +
                                    std::to_string(copy->bytes) + " bytes from at " +
                                    hexAddress(copy->source) +
                                    " before the stream was seen to reach that copy");
      copy = pendingCopies.erase(copy);
    } else {
      ++copy;
    }
  munmap(found->second.host, found->second.bytes ? found->second.bytes : 1);
  hostBuffers.erase(found);
  return true;
}

uint8_t *Recorder::hostOf(uint64_t address) {
  const Allocation *allocation = allocations.find(address);
  return allocation && allocation->live ? allocation->host + (address - allocation->address)
                                        : nullptr;
}

bool Recorder::isPinned(uint64_t pointer, uint64_t bytes) const {
  auto after = hostBuffers.upper_bound(pointer);
  if (after == hostBuffers.begin())
    return false;
  const Allocation &buffer = std::prev(after)->second;
  return pointer - buffer.address <= buffer.bytes &&
         bytes <= buffer.address + buffer.bytes - pointer;
}

//===----------------------------------------------------------------------===//
// Trace and violations
//===----------------------------------------------------------------------===//

void Recorder::record(const Event &event) {
  Event stamped = event;
  stamped.call = callIndex;
  const std::string line = formatEvent(stamped);
  text += line;
  text += '\n';
  if (!fileChecked) {
    fileChecked = true;
    if (const char *path = std::getenv("AMPC_RECORDING_TRACE"))
      if (*path && !(file = std::fopen(path, "w")))
        std::fprintf(stderr, "ampc recording driver: cannot write %s\n", path);
  }
  if (file)
    std::fprintf(file, "%s\n", line.c_str());
}

void Recorder::recordMemory(EventKind kind, uint64_t address, uint64_t bytes) {
  Event event;
  event.kind = kind;
  event.address = address;
  event.bytes = bytes;
  record(event);
}

void Recorder::violation(Check check, const std::string &message) {
  Event event;
  event.kind = EventKind::Violation;
  event.what = check;
  event.text = message;
  if (violations++ == 0)
    firstViolation = std::string(check) + ": " + message;
  record(event);
  if (file)
    std::fflush(file);
}

CUresult Recorder::reject(CUresult code, Check check, const std::string &message) {
  violation(check, message);
  lastRejectedCode = code;
  lastRejection = message;
  return code;
}

std::string Recorder::rejectionFor(CUresult code) const {
  return code == lastRejectedCode ? lastRejection : std::string();
}

//===----------------------------------------------------------------------===//
// Streams, capture and graphs
//===----------------------------------------------------------------------===//

CUstream Recorder::createStream() {
  // The int a stream handle points to is its number in creation order.
  streams.push_back(std::make_unique<int>(++streamsCreated));
  return reinterpret_cast<CUstream>(streams.back().get());
}

bool Recorder::destroyStream(CUstream stream) {
  for (auto it = streams.begin(); it != streams.end(); ++it)
    if (reinterpret_cast<CUstream>(it->get()) == stream) {
      streams.erase(it);
      return true;
    }
  return false;
}

bool Recorder::knownStream(CUstream stream) const {
  if (!stream) // the legacy default stream
    return true;
  for (const auto &owned : streams)
    if (reinterpret_cast<CUstream>(owned.get()) == stream)
      return true;
  return false;
}

bool Recorder::capturing(CUstream stream) const {
  return capture.active && capture.stream == stream;
}

CUresult Recorder::beginCapture(CUstream stream, CUstreamCaptureMode mode) {
  if (!knownStream(stream) || !stream)
    return CUDA_ERROR_INVALID_HANDLE;
  if (capture.active)
    return reject(CUDA_ERROR_ILLEGAL_STATE, "capture",
                  "cuStreamBeginCapture while another capture is active");
  capture = Capture();
  capture.active = true;
  capture.stream = stream;
  capture.mode = mode;
  capture.thread = std::this_thread::get_id();
  capture.id = nextGraph++;
  Event event;
  event.kind = EventKind::CaptureBegin;
  event.graph = capture.id;
  record(event);
  return CUDA_SUCCESS;
}

CUresult Recorder::endCapture(CUstream stream, CUgraph *graph) {
  if (!capturing(stream))
    return reject(CUDA_ERROR_ILLEGAL_STATE, "capture",
                  "cuStreamEndCapture on a stream that is not capturing");
  Event event;
  event.kind = EventKind::CaptureEnd;
  event.graph = capture.id;
  event.what = capture.invalidated ? "invalidated" : "ok";
  record(event);
  const bool invalidated = capture.invalidated;
  if (!invalidated)
    graphs[capture.id] = std::move(capture.nodes);
  *graph = invalidated ? nullptr : reinterpret_cast<CUgraph>(capture.id);
  capture = Capture();
  return invalidated ? CUDA_ERROR_STREAM_CAPTURE_INVALIDATED : CUDA_SUCCESS;
}

bool Recorder::captureForbids(const std::string &call, CUstream stream) {
  if (!capture.active)
    return false;
  const bool ownStream = stream && stream == capture.stream;
  const bool fromCapturingThread = std::this_thread::get_id() == capture.thread;
  const bool forbidden =
      ownStream || (capture.mode == CU_STREAM_CAPTURE_MODE_GLOBAL) ||
      (capture.mode == CU_STREAM_CAPTURE_MODE_THREAD_LOCAL && fromCapturingThread);
  if (!forbidden)
    return false;
  capture.invalidated = true;
  reject(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, "capture",
         call + " while stream capture " + std::to_string(capture.id) + " is active, after " +
             std::to_string(capture.nodes.size()) +
             " captured operations (it cannot be captured; the capture is "
             "invalidated)");
  return true;
}

CUresult Recorder::submit(CUstream stream, Node node) {
  if (!knownStream(stream))
    return reject(CUDA_ERROR_INVALID_HANDLE, "stream",
                  std::string(eventKindName(node.kind)) + " on a stream that does not exist");
  node.stream = streamNumber(stream);
  if (capturing(stream)) {
    node.origin = Origin::Captured;
    node.graph = capture.id;
    // A copy from or to pageable host memory is staged synchronously by the
    // driver, which a capture cannot hold.
    if (node.kind == EventKind::Memcpy && node.what != "dtod") {
      const uint64_t host = node.what == "htod" ? node.source : node.address;
      if (!isPinned(host, node.bytes)) {
        record(node);
        captureForbids("cuMemcpy" +
                           std::string(node.what == "htod" ? "HtoDAsync from" : "DtoHAsync to") +
                           " pageable host memory",
                       stream);
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
      }
    }
    capture.nodes.push_back(node);
  } else {
    node.origin = Origin::Eager;
    node.graph = 0;
    ++workQueued;
  }
  record(node);
  const CUresult result = execute(node);
  if (node.origin == Origin::Eager)
    notePinnedCopy(stream, node);
  return result;
}

void Recorder::notePinnedCopy(CUstream stream, const Node &node) {
  if (node.kind != EventKind::Memcpy || node.what != "htod" || node.bytes == 0 ||
      !isPinned(node.source, node.bytes))
    return;
  // Queuing a copy from bytes an earlier copy still has to read means the
  // host has just rewritten them.
  for (auto copy = pendingCopies.begin(); copy != pendingCopies.end();)
    if (overlaps(copy->source, copy->bytes, node.source, node.bytes)) {
      checkPinnedSource(*copy, "and queued another copy from them");
      copy = pendingCopies.erase(copy);
    } else {
      ++copy;
    }
  PendingPinnedCopy copy;
  copy.stream = stream;
  copy.position = workQueued;
  copy.source = node.source;
  copy.destination = node.address;
  copy.bytes = node.bytes;
  // The bytes queued: what the eager small copy recorded, else the source now.
  copy.digest = digestOf(reinterpret_cast<const void *>(node.source), node.bytes);
  copy.call = callIndex;
  pendingCopies.push_back(copy);
}

void Recorder::checkPinnedSource(const PendingPinnedCopy &copy, const std::string &when) {
  if (digestOf(reinterpret_cast<const void *>(copy.source), copy.bytes) == copy.digest)
    return;
  violation("pinned-reuse",
            "the host rewrote the " + std::to_string(copy.bytes) + " pinned bytes at " +
                hexAddress(copy.source) + " that cuMemcpyHtoDAsync at call " +
                std::to_string(copy.call) + " copies to " + hexAddress(copy.destination) + " " +
                when +
                ", before the stream was seen to reach that copy (no synchronisation of the "
                "stream, or of an event recorded after the copy, in between): the GPU may copy "
                "the new bytes");
}

void Recorder::recordEvent(RecordedEvent &event, CUstream stream) {
  event.recorded = true;
  event.placed = !capturing(stream);
  event.stream = stream;
  event.position = workQueued;
}

void Recorder::streamReached(CUstream stream, uint64_t position, bool everyStream) {
  for (auto copy = pendingCopies.begin(); copy != pendingCopies.end();)
    if ((everyStream || copy->stream == stream) && copy->position <= position) {
      checkPinnedSource(*copy, "before synchronising");
      copy = pendingCopies.erase(copy);
    } else {
      ++copy;
    }
}

CUresult Recorder::instantiate(CUgraphExec *executable, CUgraph graph) {
  auto found = graphs.find(reinterpret_cast<uint64_t>(graph));
  if (found == graphs.end())
    return CUDA_ERROR_INVALID_HANDLE;
  const uint64_t id = nextGraph++;
  executables[id] = found->second;
  *executable = reinterpret_cast<CUgraphExec>(id);
  return CUDA_SUCCESS;
}

CUresult Recorder::launchGraph(CUgraphExec executable, CUstream stream) {
  const uint64_t id = reinterpret_cast<uint64_t>(executable);
  auto found = executables.find(id);
  if (found == executables.end())
    return reject(CUDA_ERROR_INVALID_HANDLE, "graph",
                  "cuGraphLaunch of a graph that was not instantiated or "
                  "was destroyed");
  if (!knownStream(stream))
    return CUDA_ERROR_INVALID_HANDLE;
  if (capturing(stream))
    return reject(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, "capture",
                  "cuGraphLaunch into a capturing stream");
  Event event;
  event.kind = EventKind::GraphLaunch;
  event.graph = id;
  event.bytes = found->second.size();
  record(event);
  CUresult result = CUDA_SUCCESS;
  for (const Node &captured : found->second) {
    Node node = captured;
    node.origin = Origin::Replayed;
    node.graph = id;
    ++workQueued;
    record(node);
    const CUresult nodeResult = execute(node);
    notePinnedCopy(stream, node);
    if (result == CUDA_SUCCESS)
      result = nodeResult;
  }
  return result;
}

bool Recorder::destroyGraph(CUgraph graph) {
  return graphs.erase(reinterpret_cast<uint64_t>(graph)) != 0;
}

bool Recorder::destroyExecutable(CUgraphExec executable) {
  return executables.erase(reinterpret_cast<uint64_t>(executable)) != 0;
}

CUresult Recorder::execute(Node &node) {
  Check check = "";
  const bool runs = node.origin != Origin::Captured;
  switch (node.kind) {
  case EventKind::Launch:
    // Kernels do not run; every argument whose value is a device address
    // must point into live memory.
    for (size_t i = 0; i < node.args.size(); ++i) {
      if (node.args[i] < kDeviceBase || node.args[i] >= kDeviceEnd)
        continue;
      const std::string problem = rangeProblem(node.args[i], 1, check);
      if (!problem.empty())
        violation(check,
                  "argument " + std::to_string(i) + " of kernel '" + node.name + "': " + problem);
    }
    return CUDA_SUCCESS;
  case EventKind::Matmul:
    return checkMatmul(*this, node);
  case EventKind::Memset: {
    const std::string problem = rangeProblem(node.address, node.bytes, check);
    if (!problem.empty())
      return reject(CUDA_ERROR_INVALID_VALUE, check, "cuMemsetD8Async of " + problem);
    if (runs && node.bytes) {
      uint8_t *host = hostOf(node.address);
      if (node.value == 0)
        zero(host, node.bytes);
      else
        std::memset(host, node.value, node.bytes);
    }
    return CUDA_SUCCESS;
  }
  case EventKind::Memcpy: {
    std::string problem;
    if (node.what != "htod")
      problem = rangeProblem(node.source, node.bytes, check);
    if (problem.empty() && node.what != "dtoh")
      problem = rangeProblem(node.address, node.bytes, check);
    if (!problem.empty())
      return reject(CUDA_ERROR_INVALID_VALUE, check, "cuMemcpy (" + node.what + ") of " + problem);
    if (!runs || node.bytes == 0)
      return CUDA_SUCCESS;
    void *destination =
        node.what == "dtoh" ? reinterpret_cast<void *>(node.address) : hostOf(node.address);
    // A small host-to-device copy run at once writes the bytes it recorded (RecordingTrace.h);
    // a replayed one reads its (pinned) source when the graph runs.
    const void *source = node.what == "htod" && node.origin == Origin::Eager && !node.args.empty()
                             ? static_cast<const void *>(node.args.data())
                         : node.what == "htod" ? reinterpret_cast<const void *>(node.source)
                                               : hostOf(node.source);
    std::memmove(destination, source, node.bytes);
    return CUDA_SUCCESS;
  }
  default:
    return CUDA_SUCCESS;
  }
}

//===----------------------------------------------------------------------===//
// Modules and kernels
//===----------------------------------------------------------------------===//

CUresult Recorder::loadModule(CUmodule *module, const void *image) {
  if (!module || !image)
    return CUDA_ERROR_INVALID_VALUE;
  std::vector<KernelInfo> kernels;
  try {
    kernels = isElf(image, 4) ? readCubinKernels(image, elfImageBytes(image))
                              : readPtxKernels(static_cast<const char *>(image));
  } catch (const std::exception &error) {
    return reject(CUDA_ERROR_INVALID_IMAGE, "module", error.what());
  }
  const uint64_t id = nextModule++;
  modules[id] = std::move(kernels);
  *module = reinterpret_cast<CUmodule>(id);
  return CUDA_SUCCESS;
}

CUresult Recorder::unloadModule(CUmodule module) {
  const uint64_t id = reinterpret_cast<uint64_t>(module);
  if (!modules.erase(id))
    return CUDA_ERROR_INVALID_HANDLE;
  for (auto it = functions.begin(); it != functions.end();)
    it = it->second->module == id ? functions.erase(it) : std::next(it);
  return CUDA_SUCCESS;
}

CUresult Recorder::getFunction(CUfunction *function, CUmodule module, const char *name) {
  auto found = modules.find(reinterpret_cast<uint64_t>(module));
  if (found == modules.end())
    return CUDA_ERROR_INVALID_HANDLE;
  for (const KernelInfo &kernel : found->second) {
    if (kernel.name != name)
      continue;
    auto entry = std::make_unique<Function>();
    entry->id = nextFunction++;
    entry->module = found->first;
    entry->info = kernel;
    entry->dynamicSharedLimit = deviceInfo.sharedPerBlock - static_cast<int>(kernel.staticShared);
    if (entry->dynamicSharedLimit < 0)
      entry->dynamicSharedLimit = 0;
    Event event;
    event.kind = EventKind::Kernel;
    event.function = entry->id;
    event.name = kernel.name;
    event.kernel = kernel;
    record(event);
    *function = reinterpret_cast<CUfunction>(entry->id);
    functions[entry->id] = std::move(entry);
    return CUDA_SUCCESS;
  }
  return CUDA_ERROR_NOT_FOUND;
}

Function *Recorder::function(CUfunction function) {
  auto found = functions.find(reinterpret_cast<uint64_t>(function));
  return found == functions.end() ? nullptr : found->second.get();
}

//===----------------------------------------------------------------------===//
// Planted defects
//===----------------------------------------------------------------------===//

void Recorder::plant(const AmpcRecordingPlant *plant) {
  planted = plant ? *plant : AmpcRecordingPlant();
  plantedKernel = plant && plant->kernel ? plant->kernel : "";
  plantCandidates = 0;
}

bool Recorder::takePlant(const char *name, bool capturing, AmpcRecordingPlant &plant) {
  const int kind = planted.kind;
  const bool forMatmul = kind == AMPC_PLANT_MATMUL_LD || kind == AMPC_PLANT_MATMUL_OFFSET ||
                         kind == AMPC_PLANT_MATMUL_NO_BIAS || kind == AMPC_PLANT_MATMUL_NO_AUX;
  const bool inCapture = kind == AMPC_PLANT_SYNC_IN_CAPTURE || kind == AMPC_PLANT_ALLOC_IN_CAPTURE;
  if (kind == AMPC_PLANT_NONE || kind == AMPC_PLANT_COPY_WORD ||
      kind == AMPC_PLANT_SKIP_EVENT_WAIT || kind == AMPC_PLANT_HOST_ALLOC_FAILS ||
      forMatmul != (name == nullptr) || (inCapture && !capturing) ||
      (name && std::string(name).find(plantedKernel) == std::string::npos))
    return false;
  return claimPlant(plant);
}

bool Recorder::takeCallPlant(int kind, AmpcRecordingPlant &plant) {
  return planted.kind == kind && claimPlant(plant);
}

bool Recorder::claimPlant(AmpcRecordingPlant &plant) {
  if (plantCandidates++ != planted.occurrence)
    return false;
  plant = planted;
  planted = AmpcRecordingPlant();
  return true;
}

bool Recorder::takeCopyPlant(uint64_t bytes, AmpcRecordingPlant &plant) {
  // Candidates: the copies that reach the planted word.
  if (planted.kind != AMPC_PLANT_COPY_WORD || bytes <= 8 * static_cast<uint64_t>(planted.argument))
    return false;
  return claimPlant(plant);
}

void Recorder::applyPlant(const AmpcRecordingPlant &plant, Node &node, CUstream stream) {
  const size_t argument = static_cast<size_t>(plant.argument);
  switch (plant.kind) {
  case AMPC_PLANT_COPY_WORD:
    if (argument < node.args.size())
      node.args[argument] += static_cast<uint64_t>(plant.amount);
    break;
  case AMPC_PLANT_ARGUMENT_OFFSET:
    if (argument < node.args.size())
      node.args[argument] += static_cast<uint64_t>(plant.amount);
    break;
  case AMPC_PLANT_WIDE_ARGUMENT:
    if (argument < node.wideArgs.size())
      node.wideArgs[argument] += static_cast<uint64_t>(plant.amount);
    break;
  case AMPC_PLANT_FREE_ARGUMENT:
    if (argument < node.args.size())
      if (const Allocation *holder = allocations.find(node.args[argument]))
        free(holder->address);
    break;
  case AMPC_PLANT_SYNC_IN_CAPTURE: {
    Event sync;
    sync.kind = EventKind::Sync;
    sync.what = "stream";
    record(sync);
    captureForbids("cuStreamSynchronize", stream);
    break;
  }
  case AMPC_PLANT_ALLOC_IN_CAPTURE:
    captureForbids("cuMemAlloc of 4096 bytes");
    break;
  case AMPC_PLANT_DYNAMIC_SHARED:
    node.sharedBytes += static_cast<uint32_t>(plant.amount);
    break;
  case AMPC_PLANT_GRID_Y:
    node.grid[1] = static_cast<uint32_t>(plant.amount);
    break;
  case AMPC_PLANT_MATMUL_LD:
    node.matmul.a.ld += plant.amount;
    break;
  case AMPC_PLANT_MATMUL_OFFSET:
    node.matmul.pointerD += static_cast<uint64_t>(plant.amount);
    break;
  case AMPC_PLANT_MATMUL_NO_BIAS:
    node.matmul.bias = 0;
    break;
  case AMPC_PLANT_MATMUL_NO_AUX:
    node.matmul.aux = 0;
    break;
  default:
    break;
  }
}

uint64_t Recorder::addAlgorithm(const MatmulAlgorithm &algorithm) {
  algorithms.push_back(algorithm);
  return algorithms.size();
}

const MatmulAlgorithm *Recorder::algorithm(uint64_t id) const {
  return id >= 1 && id <= algorithms.size() ? &algorithms[id - 1] : nullptr;
}

} // namespace ampc::dryrun

//===----------------------------------------------------------------------===//
// The library's own entry points (RecordingApi.h)
//===----------------------------------------------------------------------===//

extern "C" {

__attribute__((visibility("default"))) AmpcRecordingDevice ampcRecordingH100() {
  AmpcRecordingDevice device = {};
  device.name = "NVIDIA H100 80GB HBM3 (recording driver)";
  device.computeMajor = 9;
  device.computeMinor = 0;
  device.multiprocessors = 132;
  device.totalBytes = 85031714816ull;
  device.freeBytes = 84500000000ull;
  device.sharedPerBlock = 48 * 1024;
  device.sharedPerBlockOptin = 227 * 1024;
  device.registersPerBlock = 65536;
  device.maxThreadsPerBlock = 1024;
  device.maxBlock[0] = 1024;
  device.maxBlock[1] = 1024;
  device.maxBlock[2] = 64;
  device.maxGrid[0] = 2147483647;
  device.maxGrid[1] = 65535;
  device.maxGrid[2] = 65535;
  return device;
}

__attribute__((visibility("default"))) void ampcRecordingReset(const AmpcRecordingDevice *device) {
  ampc::dryrun::recorded([&](ampc::dryrun::Recorder &recorder) {
    recorder.reset(device ? *device : ampcRecordingH100());
    recorder.plant(nullptr);
  });
}

__attribute__((visibility("default"))) const char *ampcRecordingTrace() {
  return ampc::dryrun::Recorder::instance().traceText().c_str();
}

__attribute__((visibility("default"))) size_t ampcRecordingViolationCount() {
  return ampc::dryrun::Recorder::instance().violationCount();
}

__attribute__((visibility("default"))) void ampcRecordingPlant(const AmpcRecordingPlant *plant) {
  ampc::dryrun::recorded([&](ampc::dryrun::Recorder &recorder) { recorder.plant(plant); });
}

} // extern "C"
