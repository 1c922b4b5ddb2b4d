//===- Device.cpp - One GPU: its context, its stream, memory and copies ---===//

#include "runtime/cuda/Device.h"

#include <algorithm>
#include <utility>

namespace ampc::cuda {

std::string DeviceInfo::computeCapability() const {
  return std::to_string(computeMajor) + "." + std::to_string(computeMinor);
}

std::string DeviceInfo::summary() const {
  return "GPU " + std::to_string(index) + " (" + name + ", compute capability " +
         computeCapability() + ", " + std::to_string(multiprocessors) + " SMs, " +
         formatBytes(totalMemory) + ", driver CUDA " + formatCudaVersion(driverVersion) + ")";
}

//===----------------------------------------------------------------------===//
// DeviceAllocation and PinnedHostBuffer
//===----------------------------------------------------------------------===//

DeviceAllocation &DeviceAllocation::operator=(DeviceAllocation &&other) noexcept {
  if (this != &other) {
    release();
    owner = other.owner;
    devicePointer = std::exchange(other.devicePointer, 0);
    byteCount = std::exchange(other.byteCount, 0);
  }
  return *this;
}

void DeviceAllocation::release() {
  // Errors are ignored: this runs in destructors, and a failed free (after
  // a fatal kernel fault) leaves nothing to recover.
  if (devicePointer && owner) {
    owner->driver->cuMemFree(devicePointer);
    owner->heldBytes -= byteCount;
  }
  devicePointer = 0;
  byteCount = 0;
}

PinnedHostBuffer &PinnedHostBuffer::operator=(PinnedHostBuffer &&other) noexcept {
  if (this != &other) {
    release();
    api = other.api;
    hostPointer = std::exchange(other.hostPointer, nullptr);
    byteCount = std::exchange(other.byteCount, 0);
  }
  return *this;
}

void PinnedHostBuffer::release() {
  if (hostPointer && api)
    api->cuMemFreeHost(hostPointer);
  hostPointer = nullptr;
  byteCount = 0;
}

//===----------------------------------------------------------------------===//
// Device
//===----------------------------------------------------------------------===//

Device::Device(const DeviceOptions &options) : driver(options.api ? options.api : &driverApi()) {
  systemDriver = !options.api && driverApiIsTheSystems();
  const DriverApi &api = *driver;
  deviceInfo.index = options.index;
  deviceInfo.driverVersion = api.driverVersion;

  const CUresult initResult = api.cuInit(0);
  if (initResult != CUDA_SUCCESS) {
    std::string cause = "cuInit returned " + api.errorName(initResult);
    const std::string description = api.errorString(initResult);
    if (!description.empty())
      cause += ": " + description;
    throw CudaError(CudaErrorKind::NoDevice, noDeviceMessage(cause), initResult);
  }
  int count = 0;
  checkDriver(api, api.cuDeviceGetCount(&count), "cuDeviceGetCount", "counting GPUs");
  if (count == 0)
    throw CudaError(CudaErrorKind::NoDevice, noDeviceMessage("the driver sees no GPU"));
  if (options.index < 0 || options.index >= count)
    throw CudaError(CudaErrorKind::NoDevice, deviceIndexMessage(options.index, count));
  checkDriver(api, api.cuDeviceGet(&handle, options.index), "cuDeviceGet",
              "opening GPU " + std::to_string(options.index));

  char name[256] = {};
  checkDriver(api, api.cuDeviceGetName(name, sizeof name - 1, handle), "cuDeviceGetName",
              "reading the GPU's name");
  deviceInfo.name = name;
  auto attribute = [&](CUdevice_attribute which, const char *what) {
    int value = 0;
    checkDriver(api, api.cuDeviceGetAttribute(&value, which, handle), "cuDeviceGetAttribute",
                std::string("reading ") + what);
    return value;
  };
  deviceInfo.computeMajor =
      attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, "the compute capability");
  deviceInfo.computeMinor =
      attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, "the compute capability");
  deviceInfo.multiprocessors = attribute(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, "the SM count");
  deviceInfo.sharedMemoryPerBlock =
      attribute(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK, "the shared memory per block");
  deviceInfo.sharedMemoryPerBlockOptin = attribute(
      CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, "the opt-in shared memory per block");
  size_t total = 0;
  checkDriver(api, api.cuDeviceTotalMem(&total, handle), "cuDeviceTotalMem",
              "reading the GPU's memory size");
  deviceInfo.totalMemory = total;

  if (options.requireBf16)
    requireBf16();

  checkDriver(api, api.cuDevicePrimaryCtxRetain(&primaryContext, handle),
              "cuDevicePrimaryCtxRetain", "creating the context of " + deviceInfo.summary());
  try {
    makeCurrent();
    // Non-blocking: no implicit ordering with the legacy default stream,
    // and stream capture into CUDA graphs is allowed on it.
    checkDriver(api, api.cuStreamCreate(&deviceStream, CU_STREAM_NON_BLOCKING), "cuStreamCreate",
                "creating the stream");
  } catch (...) {
    api.cuDevicePrimaryCtxRelease(handle);
    throw;
  }
}

Device::~Device() {
  if (deviceStream) {
    driver->cuStreamSynchronize(deviceStream);
    driver->cuStreamDestroy(deviceStream);
  }
  if (primaryContext)
    driver->cuDevicePrimaryCtxRelease(handle);
}

void Device::makeCurrent() const {
  checkDriver(*driver, driver->cuCtxSetCurrent(primaryContext), "cuCtxSetCurrent",
              "making the GPU's context current");
}

void Device::requireBf16() const {
  if (!deviceInfo.supportsBf16())
    throw CudaError(CudaErrorKind::Bf16Unsupported,
                    bf16UnsupportedMessage(deviceInfo.index, deviceInfo.name,
                                           deviceInfo.computeMajor, deviceInfo.computeMinor));
}

MemoryInfo Device::memoryInfo() const {
  size_t freeBytes = 0, totalBytes = 0;
  checkDriver(*driver, driver->cuMemGetInfo(&freeBytes, &totalBytes), "cuMemGetInfo",
              "reading free GPU memory");
  return {freeBytes, totalBytes};
}

DeviceAllocation Device::allocate(size_t bytes, const std::string &what) {
  // cuMemAlloc rejects 0 bytes; an empty arena is legitimate.
  if (bytes == 0)
    return DeviceAllocation();
  CUdeviceptr pointer = 0;
  const CUresult result = driver->cuMemAlloc(&pointer, bytes);
  if (result == CUDA_ERROR_OUT_OF_MEMORY) {
    MemoryInfo memory;
    try {
      memory = memoryInfo();
    } catch (const CudaError &) {
      memory.totalBytes = deviceInfo.totalMemory;
    }
    throw CudaError(CudaErrorKind::OutOfMemory,
                    outOfMemoryMessage(what, bytes, memory.freeBytes, memory.totalBytes, heldBytes,
                                       deviceInfo.index, deviceInfo.name),
                    result);
  }
  checkDriverLazy(*driver, result, "cuMemAlloc",
                  [&] { return "allocating " + formatBytes(bytes) + " for " + what; });
  heldBytes += bytes;
  return DeviceAllocation(this, pointer, bytes);
}

bool Device::capturing() const {
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  checkDriver(*driver, driver->cuStreamIsCapturing(deviceStream, &status), "cuStreamIsCapturing",
              "asking whether the stream is being captured");
  return status != CU_STREAM_CAPTURE_STATUS_NONE;
}

PinnedHostBuffer Device::allocatePinned(size_t bytes, const std::string &what) {
  PinnedHostBuffer buffer;
  checkDriverLazy(
      *driver, driver->cuMemAllocHost(&buffer.hostPointer, bytes), "cuMemAllocHost",
      [&] { return "allocating " + formatBytes(bytes) + " of pinned host memory for " + what; });
  buffer.api = driver;
  buffer.byteCount = bytes;
  return buffer;
}

void Device::copyToDeviceAsync(CUdeviceptr destination, const void *source, size_t bytes) {
  checkDriverLazy(*driver, driver->cuMemcpyHtoDAsync(destination, source, bytes, deviceStream),
                  "cuMemcpyHtoDAsync",
                  [&] { return "copying " + formatBytes(bytes) + " to the GPU"; });
}

void Device::copyToHostAsync(void *destination, CUdeviceptr source, size_t bytes) {
  checkDriverLazy(*driver, driver->cuMemcpyDtoHAsync(destination, source, bytes, deviceStream),
                  "cuMemcpyDtoHAsync",
                  [&] { return "copying " + formatBytes(bytes) + " from the GPU"; });
}

void Device::copyOnDeviceAsync(CUdeviceptr destination, CUdeviceptr source, size_t bytes) {
  checkDriverLazy(*driver, driver->cuMemcpyDtoDAsync(destination, source, bytes, deviceStream),
                  "cuMemcpyDtoDAsync",
                  [&] { return "copying " + formatBytes(bytes) + " on the GPU"; });
}

void Device::memsetAsync(CUdeviceptr destination, uint8_t value, size_t bytes) {
  checkDriverLazy(*driver, driver->cuMemsetD8Async(destination, value, bytes, deviceStream),
                  "cuMemsetD8Async",
                  [&] { return "setting " + formatBytes(bytes) + " of GPU memory"; });
}

void Device::copyToDevice(CUdeviceptr destination, const void *source, size_t bytes) {
  copyToDeviceAsync(destination, source, bytes);
  synchronize("copying " + formatBytes(bytes) + " to the GPU");
}

void Device::copyToHost(void *destination, CUdeviceptr source, size_t bytes) {
  copyToHostAsync(destination, source, bytes);
  synchronize("copying " + formatBytes(bytes) + " from the GPU");
}

void Device::synchronize(const std::string &doing) {
  checkDriver(*driver, driver->cuStreamSynchronize(deviceStream), "cuStreamSynchronize", doing);
  ++completedSyncs;
}

//===----------------------------------------------------------------------===//
// Event
//===----------------------------------------------------------------------===//

Event::Event(Device &device, unsigned flags) : device(&device) {
  checkDriver(device.api(), device.api().cuEventCreate(&event, flags), "cuEventCreate",
              "creating an event");
}

Event::~Event() {
  if (event)
    device->api().cuEventDestroy(event);
}

void Event::record() { record(device->stream()); }

void Event::record(CUstream stream) {
  checkDriver(device->api(), device->api().cuEventRecord(event, stream), "cuEventRecord",
              "recording a timing event");
}

void Event::synchronize(const char *doing) {
  checkDriver(device->api(), device->api().cuEventSynchronize(event), "cuEventSynchronize", doing);
}

double measureCopyBandwidth(Device &device) {
  // Up to 256 MiB each way, less when the GPU has less free (a copy of a few MiB already
  // streams at full bandwidth).
  const uint64_t freeBytes = device.memoryInfo().freeBytes;
  uint64_t bytes = 256ull << 20;
  while (bytes > (8ull << 20) && 2 * bytes + (64ull << 20) > freeBytes)
    bytes /= 2;
  DeviceAllocation source = device.allocate(bytes, "the bandwidth probe's source");
  DeviceAllocation target = device.allocate(bytes, "the bandwidth probe's target");
  device.memsetAsync(source.pointer(), 0, bytes);
  Event start(device), end(device);
  double best = 0;
  for (int run = 0; run < 6; ++run) {
    start.record();
    device.copyOnDeviceAsync(target.pointer(), source.pointer(), bytes);
    end.record();
    end.synchronize();
    const double seconds = Event::elapsedMilliseconds(start, end) / 1e3;
    if (run > 0 && seconds > 0) // the first copy warms up
      best = std::max(best, 2.0 * static_cast<double>(bytes) / seconds);
  }
  return best;
}

float Event::elapsedMilliseconds(const Event &start, const Event &end) {
  float milliseconds = 0;
  checkDriver(start.device->api(),
              start.device->api().cuEventElapsedTime(&milliseconds, start.event, end.event),
              "cuEventElapsedTime", "timing GPU work");
  return milliseconds;
}

} // namespace ampc::cuda
