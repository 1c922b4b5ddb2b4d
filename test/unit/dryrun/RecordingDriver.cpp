//===- RecordingDriver.cpp - A recording stand-in for libcuda -------------===//
//
// Every driver entry point the CUDA backend resolves (Driver.h), exported
// under cuda.h's versioned names, over the Recorder (RecordingState.h). It
// reports an H100 by default (ampcRecordingReset chooses another device).
//
// The checks, by the name a violation carries:
//   launch-config  grid or block outside the device's limits, or a block
//                  larger than the kernel's __launch_bounds__ (rejected with
//                  CUDA_ERROR_INVALID_VALUE, as a GPU does);
//   registers      registers per thread (from the cubin) x the block, in
//                  CUDA's allocation granularity, over the device's
//                  registers per block (CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES);
//   shared-memory  static (from the cubin) + dynamic shared memory over the
//                  device's opt-in limit, or dynamic shared memory above
//                  48 KiB without cuFuncSetAttribute opting in;
//   pointer, freed-memory
//                  a kernel argument holding a device address that lies in
//                  no allocation, or in a freed one (the launch succeeds: a
//                  GPU would fault or corrupt memory later);
//   extent         a memset or copy running past its allocation;
//   pinned-reuse   pinned host memory rewritten (or freed) while a
//                  host-to-device copy from it is pending: before the host
//                  synchronised the stream, or an event recorded after the
//                  copy (see RecordingState.h);
//   capture        a synchronisation, allocation, free or pageable copy
//                  while a stream capture forbids it (the call fails with
//                  CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED and the capture is
//                  invalidated, as on a GPU);
//   free, stream, graph, module, kernel-handle
//                  double frees, unknown handles, bad images.
//
//===----------------------------------------------------------------------===//

#include "RecordingState.h"

#include <algorithm>
#include <cstring>
#include <string>

using ampc::dryrun::EventKind;
using ampc::dryrun::Function;
using ampc::dryrun::Node;
using ampc::dryrun::recorded;
using ampc::dryrun::Recorder;

namespace {

#define AMPC_EXPORT extern "C" __attribute__((visibility("default")))

/// Context and events: the address of this stands in for both.
int primaryContext;

struct ErrorText {
  CUresult code;
  const char *name;
  const char *text;
};

const ErrorText kErrors[] = {
    {CUDA_SUCCESS, "CUDA_SUCCESS", "no error"},
    {CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {CUDA_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {CUDA_ERROR_INVALID_IMAGE, "CUDA_ERROR_INVALID_IMAGE", "device kernel image is invalid"},
    {CUDA_ERROR_INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
    {CUDA_ERROR_NOT_FOUND, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
    {CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES",
     "too many resources requested for launch"},
    {CUDA_ERROR_ILLEGAL_STATE, "CUDA_ERROR_ILLEGAL_STATE",
     "the operation cannot be performed in the present state"},
    {CUDA_ERROR_NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
    {CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED",
     "operation not permitted when stream is capturing"},
    {CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED",
     "operation failed due to a previous error during capture"},
};

const ErrorText *findError(CUresult code) {
  for (const ErrorText &error : kErrors)
    if (error.code == code)
      return &error;
  return nullptr;
}

std::string dims(const unsigned (&value)[3]) {
  return std::to_string(value[0]) + "x" + std::to_string(value[1]) + "x" + std::to_string(value[2]);
}

/// Why the device rejects launching \p f with this configuration ("" if it
/// does not), and the error and check it rejects it with.
std::string launchProblem(const AmpcRecordingDevice &device, const Function &f,
                          const unsigned (&grid)[3], const unsigned (&block)[3],
                          unsigned sharedBytes, CUresult &code, ampc::dryrun::Check &check) {
  const std::string kernel = "kernel '" + f.info.name + "'";
  code = CUDA_ERROR_INVALID_VALUE;
  check = "launch-config";
  for (int i = 0; i < 3; ++i) {
    if (grid[i] == 0 || grid[i] > static_cast<unsigned>(device.maxGrid[i]))
      return kernel + ": grid " + dims(grid) + " is outside the device's " +
             std::to_string(device.maxGrid[0]) + "x" + std::to_string(device.maxGrid[1]) + "x" +
             std::to_string(device.maxGrid[2]);
    if (block[i] == 0 || block[i] > static_cast<unsigned>(device.maxBlock[i]))
      return kernel + ": block " + dims(block) + " is outside the device's " +
             std::to_string(device.maxBlock[0]) + "x" + std::to_string(device.maxBlock[1]) + "x" +
             std::to_string(device.maxBlock[2]);
  }
  const uint64_t threads = uint64_t(block[0]) * block[1] * block[2];
  if (threads > static_cast<uint64_t>(device.maxThreadsPerBlock))
    return kernel + ": a block of " + std::to_string(threads) + " threads exceeds the device's " +
           std::to_string(device.maxThreadsPerBlock);
  if (f.info.maxThreads && threads > f.info.maxThreads)
    return kernel + ": a block of " + std::to_string(threads) +
           " threads exceeds the kernel's __launch_bounds__ of " +
           std::to_string(f.info.maxThreads) + " (" + f.info.binary + ")";
  if (f.info.registers >= 0) {
    // Registers are allocated per warp in units of 256.
    const uint64_t perWarp = (uint64_t(f.info.registers) * 32 + 255) / 256 * 256;
    const uint64_t needed = (threads + 31) / 32 * perWarp;
    if (needed > static_cast<uint64_t>(device.registersPerBlock)) {
      code = CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES;
      check = "registers";
      return kernel + ": " + std::to_string(f.info.registers) + " registers per thread (" +
             f.info.binary + ") x " + std::to_string(threads) + " threads need " +
             std::to_string(needed) + " registers, more than the device's " +
             std::to_string(device.registersPerBlock) + " per block";
    }
  }
  check = "shared-memory";
  const uint64_t shared = uint64_t(f.info.staticShared) + sharedBytes;
  if (shared > static_cast<uint64_t>(device.sharedPerBlockOptin))
    return kernel + ": " + std::to_string(f.info.staticShared) + " bytes of static (" +
           f.info.binary + ") and " + std::to_string(sharedBytes) +
           " of dynamic shared memory exceed the device's " +
           std::to_string(device.sharedPerBlockOptin) + " bytes per block";
  if (sharedBytes > static_cast<unsigned>(f.dynamicSharedLimit))
    return kernel + ": " + std::to_string(sharedBytes) +
           " bytes of dynamic shared memory, but the kernel allows " +
           std::to_string(f.dynamicSharedLimit) +
           " (cuFuncSetAttribute(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_"
           "BYTES) must raise it first)";
  return "";
}

} // namespace

//===----------------------------------------------------------------------===//
// Errors, driver and device
//===----------------------------------------------------------------------===//

AMPC_EXPORT CUresult CUDAAPI cuGetErrorName(CUresult error, const char **name) {
  const ErrorText *found = findError(error);
  if (!found)
    return CUDA_ERROR_INVALID_VALUE;
  *name = found->name;
  return CUDA_SUCCESS;
}

AMPC_EXPORT CUresult CUDAAPI cuGetErrorString(CUresult error, const char **text) {
  const ErrorText *found = findError(error);
  if (!found)
    return CUDA_ERROR_INVALID_VALUE;
  // The standard text, then (on the thread that was rejected) why.
  thread_local std::string described;
  const std::string why = Recorder::instance().rejectionFor(error);
  described = found->text;
  if (!why.empty())
    described += " (recording driver: " + why + ")";
  *text = described.c_str();
  return CUDA_SUCCESS;
}

AMPC_EXPORT CUresult CUDAAPI cuDriverGetVersion(int *version) {
  *version = CUDA_VERSION;
  return CUDA_SUCCESS;
}

AMPC_EXPORT CUresult CUDAAPI cuInit(unsigned int) { return CUDA_SUCCESS; }

AMPC_EXPORT CUresult CUDAAPI cuDeviceGetCount(int *count) {
  *count = 1;
  return CUDA_SUCCESS;
}

AMPC_EXPORT CUresult CUDAAPI cuDeviceGet(CUdevice *device, int ordinal) {
  if (ordinal != 0)
    return CUDA_ERROR_INVALID_DEVICE;
  *device = 0;
  return CUDA_SUCCESS;
}

AMPC_EXPORT CUresult CUDAAPI cuDeviceGetName(char *name, int length, CUdevice) {
  if (length <= 0)
    return CUDA_ERROR_INVALID_VALUE;
  std::strncpy(name, Recorder::instance().device().name, static_cast<size_t>(length) - 1);
  name[length - 1] = '\0';
  return CUDA_SUCCESS;
}

AMPC_EXPORT CUresult CUDAAPI cuDeviceGetAttribute(int *value, CUdevice_attribute attribute,
                                                  CUdevice) {
  const AmpcRecordingDevice &device = Recorder::instance().device();
  switch (attribute) {
  case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR:
    *value = device.computeMajor;
    return CUDA_SUCCESS;
  case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR:
    *value = device.computeMinor;
    return CUDA_SUCCESS;
  case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT:
    *value = device.multiprocessors;
    return CUDA_SUCCESS;
  case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK:
    *value = device.sharedPerBlock;
    return CUDA_SUCCESS;
  case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN:
    *value = device.sharedPerBlockOptin;
    return CUDA_SUCCESS;
  case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK:
    *value = device.registersPerBlock;
    return CUDA_SUCCESS;
  case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK:
    *value = device.maxThreadsPerBlock;
    return CUDA_SUCCESS;
  case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X:
  case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y:
  case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z:
    *value = device.maxBlock[attribute - CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X];
    return CUDA_SUCCESS;
  case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X:
  case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y:
  case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z:
    *value = device.maxGrid[attribute - CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X];
    return CUDA_SUCCESS;
  case CU_DEVICE_ATTRIBUTE_WARP_SIZE:
    *value = 32;
    return CUDA_SUCCESS;
  default:
    return CUDA_ERROR_INVALID_VALUE;
  }
}

AMPC_EXPORT CUresult CUDAAPI cuDeviceTotalMem(size_t *bytes, CUdevice) {
  *bytes = Recorder::instance().device().totalBytes;
  return CUDA_SUCCESS;
}

AMPC_EXPORT CUresult CUDAAPI cuDevicePrimaryCtxRetain(CUcontext *context, CUdevice) {
  *context = reinterpret_cast<CUcontext>(&primaryContext);
  return CUDA_SUCCESS;
}
AMPC_EXPORT CUresult CUDAAPI cuDevicePrimaryCtxRelease(CUdevice) { return CUDA_SUCCESS; }
AMPC_EXPORT CUresult CUDAAPI cuCtxSetCurrent(CUcontext) { return CUDA_SUCCESS; }

//===----------------------------------------------------------------------===//
// Synchronisation
//===----------------------------------------------------------------------===//

namespace {

/// Records a synchronisation; fails it when a capture forbids it. Once it
/// returns, the host has seen the stream reach what \p reached says.
template <typename Reached>
CUresult synchronize(const char *what, const char *call, CUstream stream, Reached reached) {
  return recorded([&](Recorder &recorder) {
    ampc::dryrun::Event event;
    event.kind = EventKind::Sync;
    event.what = what;
    recorder.record(event);
    if (stream && !recorder.knownStream(stream))
      return CUDA_ERROR_INVALID_HANDLE;
    if (recorder.captureForbids(call, stream))
      return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    reached(recorder);
    return CUDA_SUCCESS;
  });
}

} // namespace

AMPC_EXPORT CUresult CUDAAPI cuCtxSynchronize(void) {
  return synchronize("context", "cuCtxSynchronize", nullptr, [](Recorder &recorder) {
    recorder.streamReached(nullptr, recorder.queuedWork(), /*everyStream=*/true);
  });
}
AMPC_EXPORT CUresult CUDAAPI cuStreamSynchronize(CUstream stream) {
  return synchronize("stream", "cuStreamSynchronize", stream, [&](Recorder &recorder) {
    recorder.streamReached(stream, recorder.queuedWork());
  });
}
AMPC_EXPORT CUresult CUDAAPI cuEventSynchronize(CUevent handle) {
  auto *event = reinterpret_cast<ampc::dryrun::RecordedEvent *>(handle);
  {
    // A planted defect: the runtime did not wait here.
    Recorder &recorder = Recorder::instance();
    auto lock = recorder.beginCall();
    AmpcRecordingPlant plant;
    if (recorder.takeCallPlant(AMPC_PLANT_SKIP_EVENT_WAIT, plant))
      return CUDA_SUCCESS;
  }
  return synchronize("event", "cuEventSynchronize", nullptr, [&](Recorder &recorder) {
    if (event->placed)
      recorder.streamReached(event->stream, event->position);
  });
}

//===----------------------------------------------------------------------===//
// Memory
//===----------------------------------------------------------------------===//

AMPC_EXPORT CUresult CUDAAPI cuMemGetInfo(size_t *freeBytes, size_t *totalBytes) {
  return recorded([&](Recorder &recorder) {
    *totalBytes = recorder.device().totalBytes;
    *freeBytes = recorder.device().freeBytes - recorder.allocatedBytes();
    return CUDA_SUCCESS;
  });
}

AMPC_EXPORT CUresult CUDAAPI cuMemAlloc(CUdeviceptr *pointer, size_t bytes) {
  return recorded([&](Recorder &recorder) {
    if (recorder.captureForbids("cuMemAlloc of " + std::to_string(bytes) + " bytes"))
      return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    return recorder.allocate(bytes, pointer);
  });
}

AMPC_EXPORT CUresult CUDAAPI cuMemFree(CUdeviceptr pointer) {
  return recorded([&](Recorder &recorder) {
    if (recorder.captureForbids("cuMemFree of " + ampc::dryrun::hexAddress(pointer)))
      return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    return recorder.free(pointer);
  });
}

AMPC_EXPORT CUresult CUDAAPI cuMemAllocHost(void **pointer, size_t bytes) {
  return recorded([&](Recorder &recorder) {
    if (recorder.captureForbids("cuMemAllocHost of " + std::to_string(bytes) + " bytes"))
      return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    AmpcRecordingPlant plant;
    if (recorder.takeCallPlant(AMPC_PLANT_HOST_ALLOC_FAILS, plant))
      return CUDA_ERROR_OUT_OF_MEMORY;
    *pointer = recorder.allocateHost(bytes);
    return *pointer ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
  });
}

AMPC_EXPORT CUresult CUDAAPI cuMemFreeHost(void *pointer) {
  return recorded([&](Recorder &recorder) {
    if (recorder.captureForbids("cuMemFreeHost"))
      return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    return recorder.freeHost(pointer) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
  });
}

namespace {

/// Queues a memset (\p what "") or a copy (htod, dtoh, dtod).
CUresult submitMemoryNode(EventKind kind, const char *what, uint64_t address, uint64_t source,
                          size_t bytes, int value, CUstream stream) {
  return recorded([&](Recorder &recorder) {
    Node node;
    node.kind = kind;
    node.what = what;
    node.address = address;
    node.source = source;
    node.bytes = bytes;
    node.value = value;
    return recorder.submit(stream, node);
  });
}

CUresult copy(const char *what, uint64_t destination, uint64_t source, size_t bytes,
              CUstream stream) {
  return submitMemoryNode(EventKind::Memcpy, what, destination, source, bytes, 0, stream);
}

} // namespace

AMPC_EXPORT CUresult CUDAAPI cuMemsetD8Async(CUdeviceptr destination, unsigned char value,
                                             size_t bytes, CUstream stream) {
  return submitMemoryNode(EventKind::Memset, "", destination, 0, bytes, value, stream);
}

AMPC_EXPORT CUresult CUDAAPI cuMemcpyHtoDAsync(CUdeviceptr destination, const void *source,
                                               size_t bytes, CUstream stream) {
  if (bytes == 0 || bytes > ampc::dryrun::kRecordedCopyBytes || !source)
    return copy("htod", destination, reinterpret_cast<uint64_t>(source), bytes, stream);
  // A small copy carries its bytes in the trace (and writes them from there, so a planted
  // change is what the device gets).
  return recorded([&](Recorder &recorder) {
    Node node;
    node.kind = EventKind::Memcpy;
    node.what = "htod";
    node.address = destination;
    node.source = reinterpret_cast<uint64_t>(source);
    node.bytes = bytes;
    node.args.assign((bytes + 7) / 8, 0);
    std::memcpy(node.args.data(), source, bytes);
    AmpcRecordingPlant plant;
    if (recorder.takeCopyPlant(bytes, plant))
      recorder.applyPlant(plant, node, stream);
    return recorder.submit(stream, node);
  });
}
AMPC_EXPORT CUresult CUDAAPI cuMemcpyDtoHAsync(void *destination, CUdeviceptr source, size_t bytes,
                                               CUstream stream) {
  return copy("dtoh", reinterpret_cast<uint64_t>(destination), source, bytes, stream);
}
AMPC_EXPORT CUresult CUDAAPI cuMemcpyDtoDAsync(CUdeviceptr destination, CUdeviceptr source,
                                               size_t bytes, CUstream stream) {
  return copy("dtod", destination, source, bytes, stream);
}

//===----------------------------------------------------------------------===//
// Modules and kernels
//===----------------------------------------------------------------------===//

AMPC_EXPORT CUresult CUDAAPI cuModuleLoadDataEx(CUmodule *module, const void *image, unsigned int,
                                                CUjit_option *, void **) {
  return recorded([&](Recorder &recorder) { return recorder.loadModule(module, image); });
}

AMPC_EXPORT CUresult CUDAAPI cuModuleUnload(CUmodule module) {
  return recorded([&](Recorder &recorder) { return recorder.unloadModule(module); });
}

AMPC_EXPORT CUresult CUDAAPI cuModuleGetFunction(CUfunction *function, CUmodule module,
                                                 const char *name) {
  return recorded([&](Recorder &recorder) { return recorder.getFunction(function, module, name); });
}

AMPC_EXPORT CUresult CUDAAPI cuFuncGetAttribute(int *value, CUfunction_attribute attribute,
                                                CUfunction handle) {
  return recorded([&](Recorder &recorder) {
    const Function *f = recorder.function(handle);
    if (!f)
      return CUDA_ERROR_INVALID_HANDLE;
    switch (attribute) {
    case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES:
      *value = f->dynamicSharedLimit;
      return CUDA_SUCCESS;
    case CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES:
      *value = static_cast<int>(f->info.staticShared);
      return CUDA_SUCCESS;
    case CU_FUNC_ATTRIBUTE_NUM_REGS:
      *value = f->info.registers < 0 ? 0 : f->info.registers;
      return CUDA_SUCCESS;
    case CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK:
      *value = f->info.maxThreads ? static_cast<int>(f->info.maxThreads)
                                  : recorder.device().maxThreadsPerBlock;
      return CUDA_SUCCESS;
    case CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES:
    case CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES:
      *value = 0;
      return CUDA_SUCCESS;
    default:
      return CUDA_ERROR_INVALID_VALUE;
    }
  });
}

AMPC_EXPORT CUresult CUDAAPI cuFuncSetAttribute(CUfunction handle, CUfunction_attribute attribute,
                                                int value) {
  return recorded([&](Recorder &recorder) {
    Function *f = recorder.function(handle);
    if (!f)
      return CUDA_ERROR_INVALID_HANDLE;
    if (attribute != CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES)
      return CUDA_ERROR_INVALID_VALUE;
    const int limit =
        recorder.device().sharedPerBlockOptin - static_cast<int>(f->info.staticShared);
    if (value < 0 || value > limit)
      return recorder.reject(CUDA_ERROR_INVALID_VALUE, "shared-memory",
                             "kernel '" + f->info.name + "': cuFuncSetAttribute allows " +
                                 std::to_string(value) +
                                 " bytes of dynamic shared memory, but the device's opt-in limit "
                                 "leaves " +
                                 std::to_string(limit) + " beside its " +
                                 std::to_string(f->info.staticShared) + " static bytes");
    f->dynamicSharedLimit = value;
    return CUDA_SUCCESS;
  });
}

AMPC_EXPORT CUresult CUDAAPI cuLaunchKernel(CUfunction handle, unsigned int gridX,
                                            unsigned int gridY, unsigned int gridZ,
                                            unsigned int blockX, unsigned int blockY,
                                            unsigned int blockZ, unsigned int sharedBytes,
                                            CUstream stream, void **kernelParams, void **extra) {
  return recorded([&](Recorder &recorder) {
    const Function *f = recorder.function(handle);
    if (!f)
      return recorder.reject(CUDA_ERROR_INVALID_HANDLE, "kernel-handle",
                             "cuLaunchKernel of a function that is not a kernel "
                             "of a loaded module");
    if (extra || (!kernelParams && !f->info.params.empty()))
      return recorder.reject(CUDA_ERROR_INVALID_VALUE, "launch-config",
                             "kernel '" + f->info.name + "': parameters must come in kernelParams");
    Node node;
    node.kind = EventKind::Launch;
    node.function = f->id;
    node.name = f->info.name;
    const unsigned grid[3] = {gridX, gridY, gridZ};
    const unsigned block[3] = {blockX, blockY, blockZ};
    std::copy(grid, grid + 3, node.grid);
    std::copy(block, block + 3, node.block);
    node.sharedBytes = sharedBytes;
    // The driver copies each parameter with the size the binary gives it.
    for (const ampc::dryrun::KernelParam &param : f->info.params) {
      const void *source = kernelParams[node.args.size()];
      uint64_t value = 0;
      if (param.size <= 8) {
        std::memcpy(&value, source, param.size);
      } else {
        for (uint32_t at = 0; at < param.size; at += 8) {
          uint64_t word = 0;
          std::memcpy(&word, static_cast<const char *>(source) + at, std::min(8u, param.size - at));
          node.wideArgs.push_back(word);
        }
      }
      node.args.push_back(value);
    }
    AmpcRecordingPlant plant;
    if (recorder.takePlant(f->info.name.c_str(), recorder.capturing(stream), plant))
      recorder.applyPlant(plant, node, stream);
    CUresult code = CUDA_SUCCESS;
    ampc::dryrun::Check check = "";
    const std::string problem =
        launchProblem(recorder.device(), *f, node.grid, node.block, node.sharedBytes, code, check);
    if (!problem.empty()) {
      node.origin =
          recorder.capturing(stream) ? ampc::dryrun::Origin::Captured : ampc::dryrun::Origin::Eager;
      recorder.record(node);
      return recorder.reject(code, check, problem);
    }
    return recorder.submit(stream, node);
  });
}

//===----------------------------------------------------------------------===//
// Streams, events, capture and graphs
//===----------------------------------------------------------------------===//

AMPC_EXPORT CUresult CUDAAPI cuStreamCreate(CUstream *stream, unsigned int) {
  return recorded([&](Recorder &recorder) {
    *stream = recorder.createStream();
    return CUDA_SUCCESS;
  });
}

AMPC_EXPORT CUresult CUDAAPI cuStreamDestroy(CUstream stream) {
  return recorded([&](Recorder &recorder) {
    if (recorder.capturing(stream))
      return recorder.reject(CUDA_ERROR_ILLEGAL_STATE, "capture",
                             "cuStreamDestroy of a capturing stream");
    return recorder.destroyStream(stream) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
  });
}

AMPC_EXPORT CUresult CUDAAPI cuStreamIsCapturing(CUstream stream, CUstreamCaptureStatus *status) {
  return recorded([&](Recorder &recorder) {
    *status = recorder.capturing(stream) ? CU_STREAM_CAPTURE_STATUS_ACTIVE
                                         : CU_STREAM_CAPTURE_STATUS_NONE;
    return CUDA_SUCCESS;
  });
}

AMPC_EXPORT CUresult CUDAAPI cuEventCreate(CUevent *event, unsigned int) {
  *event = reinterpret_cast<CUevent>(new ampc::dryrun::RecordedEvent());
  return CUDA_SUCCESS;
}
AMPC_EXPORT CUresult CUDAAPI cuEventDestroy(CUevent event) {
  delete reinterpret_cast<ampc::dryrun::RecordedEvent *>(event);
  return CUDA_SUCCESS;
}
AMPC_EXPORT CUresult CUDAAPI cuEventRecord(CUevent event, CUstream stream) {
  // Recorded: from now on elapsed times may be asked of it, and
  // synchronising it shows the host the stream's work queued before it.
  return recorded([&](Recorder &recorder) {
    recorder.recordEvent(*reinterpret_cast<ampc::dryrun::RecordedEvent *>(event), stream);
    return CUDA_SUCCESS;
  });
}
AMPC_EXPORT CUresult CUDAAPI cuStreamWaitEvent(CUstream, CUevent, unsigned int) {
  // Ordering between streams is not modelled: the work of every stream is
  // checked as it is queued.
  return CUDA_SUCCESS;
}
AMPC_EXPORT CUresult CUDAAPI cuEventElapsedTime(float *milliseconds, CUevent start, CUevent end) {
  if (!reinterpret_cast<ampc::dryrun::RecordedEvent *>(start)->recorded ||
      !reinterpret_cast<ampc::dryrun::RecordedEvent *>(end)->recorded)
    return CUDA_ERROR_INVALID_HANDLE; // an event never recorded, as CUDA
  *milliseconds = 0;                  // kernels take no time here
  return CUDA_SUCCESS;
}

AMPC_EXPORT CUresult CUDAAPI cuStreamBeginCapture(CUstream stream, CUstreamCaptureMode mode) {
  return recorded([&](Recorder &recorder) { return recorder.beginCapture(stream, mode); });
}

AMPC_EXPORT CUresult CUDAAPI cuStreamEndCapture(CUstream stream, CUgraph *graph) {
  return recorded([&](Recorder &recorder) { return recorder.endCapture(stream, graph); });
}

AMPC_EXPORT CUresult CUDAAPI cuGraphInstantiate(CUgraphExec *executable, CUgraph graph,
                                                unsigned long long) {
  return recorded([&](Recorder &recorder) { return recorder.instantiate(executable, graph); });
}

AMPC_EXPORT CUresult CUDAAPI cuGraphLaunch(CUgraphExec executable, CUstream stream) {
  return recorded([&](Recorder &recorder) { return recorder.launchGraph(executable, stream); });
}

AMPC_EXPORT CUresult CUDAAPI cuGraphExecDestroy(CUgraphExec executable) {
  return recorded([&](Recorder &recorder) {
    return recorder.destroyExecutable(executable) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
  });
}

AMPC_EXPORT CUresult CUDAAPI cuGraphDestroy(CUgraph graph) {
  return recorded([&](Recorder &recorder) {
    return recorder.destroyGraph(graph) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
  });
}
