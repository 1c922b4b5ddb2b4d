//===- Device.h - One GPU: its context, its stream, memory and copies -----===//
//
// A Device is the CUDA backend's handle on one GPU. Opening it loads the
// driver (Driver.h), initialises it, picks the GPU by index, reads what the
// rest of the backend needs to know about it (name, compute capability, SM
// count, memory, shared-memory limits), makes the GPU's primary context
// current and creates one non-blocking stream. Everything a step does on the
// GPU is ordered on that stream: copies, memsets, kernel launches, cuBLASLt
// matmuls, cuDNN's attention and CUDA graph replays; only a data parallel
// run's NCCL transfers use a stream of their own (GradientExchange.h), which
// this one waits for.
//
// The primary context (rather than cuCtxCreate) is the one the CUDA runtime
// inside cuBLASLt uses too, so the library and our own kernels share one
// context and one address space.
//
// A Device must outlive everything allocated or loaded through it
// (DeviceAllocation, DeviceArena, Module, Matmul, CudaGraph). It is neither
// copied nor moved: those objects keep a pointer to it.
//
//===----------------------------------------------------------------------===//

#ifndef AMPC_RUNTIME_CUDA_DEVICE_H
#define AMPC_RUNTIME_CUDA_DEVICE_H

#include "runtime/cuda/Driver.h"

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

namespace ampc::cuda {

/// What the backend knows about a GPU.
struct DeviceInfo {
  int index = 0;
  std::string name;
  int computeMajor = 0;
  int computeMinor = 0;
  int multiprocessors = 0;
  uint64_t totalMemory = 0;
  /// cuDriverGetVersion of the driver that opened it (13000 = CUDA 13.0).
  int driverVersion = 0;
  /// Shared memory per block without opting in (48 KiB on every GPU we run).
  int sharedMemoryPerBlock = 0;
  /// The most dynamic + static shared memory a block may opt in to.
  int sharedMemoryPerBlockOptin = 0;

  /// bf16 tensor-core math and conversions: compute capability 8.0+.
  bool supportsBf16() const { return computeMajor >= 8; }
  /// "9.0".
  std::string computeCapability() const;
  /// "GPU 0 (NVIDIA H100 80GB HBM3, compute capability 9.0, 132 SMs,
  /// 85.0 GB, driver CUDA 13.0)".
  std::string summary() const;
};

/// How to open a device.
struct DeviceOptions {
  /// Which GPU, counted among the visible ones.
  int index = 0;
  /// Fail with CudaErrorKind::Bf16Unsupported on a GPU without bf16.
  bool requireBf16 = false;
  /// The driver table to use; null: driverApi(), the process-wide one.
  const DriverApi *api = nullptr;
};

/// Free and total device memory, from cuMemGetInfo.
struct MemoryInfo {
  uint64_t freeBytes = 0;
  uint64_t totalBytes = 0;
};

class Device;

/// One cuMemAlloc'ed block, freed when the object goes away. Move-only.
class DeviceAllocation {
public:
  DeviceAllocation() = default;
  ~DeviceAllocation() { release(); }
  DeviceAllocation(DeviceAllocation &&other) noexcept { *this = std::move(other); }
  DeviceAllocation &operator=(DeviceAllocation &&other) noexcept;
  DeviceAllocation(const DeviceAllocation &) = delete;
  DeviceAllocation &operator=(const DeviceAllocation &) = delete;

  CUdeviceptr pointer() const { return devicePointer; }
  size_t bytes() const { return byteCount; }
  explicit operator bool() const { return devicePointer != 0; }
  /// Frees the block now (a no-op when empty).
  void release();

private:
  friend class Device;
  DeviceAllocation(Device *owner, CUdeviceptr pointer, size_t bytes)
      : owner(owner), devicePointer(pointer), byteCount(bytes) {}
  Device *owner = nullptr;
  CUdeviceptr devicePointer = 0;
  size_t byteCount = 0;
};

/// Page-locked host memory (cuMemAllocHost): device-to-host copies into it
/// are truly asynchronous, so reading a few metrics per step does not stall
/// the stream. Move-only.
class PinnedHostBuffer {
public:
  PinnedHostBuffer() = default;
  ~PinnedHostBuffer() { release(); }
  PinnedHostBuffer(PinnedHostBuffer &&other) noexcept { *this = std::move(other); }
  PinnedHostBuffer &operator=(PinnedHostBuffer &&other) noexcept;
  PinnedHostBuffer(const PinnedHostBuffer &) = delete;
  PinnedHostBuffer &operator=(const PinnedHostBuffer &) = delete;

  void *data() const { return hostPointer; }
  size_t bytes() const { return byteCount; }
  void release();

private:
  friend class Device;
  const DriverApi *api = nullptr;
  void *hostPointer = nullptr;
  size_t byteCount = 0;
};

/// A GPU opened for the backend. See the file comment.
class Device {
public:
  /// Opens GPU options.index. Throws CudaError: NoDriver, DriverTooOld,
  /// NoDevice (cuInit fails, no GPU, or the index is out of range),
  /// Bf16Unsupported (with options.requireBf16), DriverCall otherwise.
  explicit Device(const DeviceOptions &options = DeviceOptions());
  ~Device();
  Device(const Device &) = delete;
  Device &operator=(const Device &) = delete;

  const DeviceInfo &info() const { return deviceInfo; }
  const DriverApi &api() const { return *driver; }
  /// Whether the device goes through the system's libcuda (driverApi(), opened by its usual
  /// names), as libraries that open the driver themselves (cuDNN) do; false over a driver
  /// table given in DeviceOptions or named by $AMPC_CUDA_DRIVER_LIBRARY (a test's stand-in),
  /// whose streams and memory those libraries cannot see.
  bool usesSystemDriver() const { return systemDriver; }
  CUdevice device() const { return handle; }
  CUcontext context() const { return primaryContext; }
  /// The stream every operation of the backend is ordered on.
  CUstream stream() const { return deviceStream; }

  /// Makes the device's context current on the calling thread (the
  /// constructor does so on the thread that opens it).
  void makeCurrent() const;

  /// Throws CudaError(Bf16Unsupported) unless the GPU supports bf16.
  void requireBf16() const;

  /// Free and total memory now.
  MemoryInfo memoryInfo() const;

  /// Bytes held by live DeviceAllocations of this device.
  uint64_t allocatedBytes() const { return heldBytes; }
  /// Whether the stream is being captured into a CUDA graph now (work
  /// queued then is recorded, not run, and may not be waited for).
  bool capturing() const;

  /// Allocates \p bytes (cuMemAlloc: at least 256-byte aligned; 0 bytes
  /// gives an empty allocation whose pointer is 0). \p what names the
  /// allocation in errors ("the micro_step arena"). Throws
  /// CudaError(OutOfMemory) with the sizes and a --memory-budget that fits
  /// (free memory plus what this device already holds) when it does not.
  DeviceAllocation allocate(size_t bytes, const std::string &what);

  /// \p bytes of page-locked host memory.
  PinnedHostBuffer allocatePinned(size_t bytes, const std::string &what);

  /// Host -> device on the stream. From pageable memory the call returns
  /// once \p source has been staged, so it may be reused at once; from
  /// pinned memory it must stay untouched until the stream reaches the copy.
  void copyToDeviceAsync(CUdeviceptr destination, const void *source, size_t bytes);
  /// Device -> host on the stream; \p destination is valid after
  /// synchronize(). Use pinned memory for a copy that does not block.
  void copyToHostAsync(void *destination, CUdeviceptr source, size_t bytes);
  /// Device -> device on the stream.
  void copyOnDeviceAsync(CUdeviceptr destination, CUdeviceptr source, size_t bytes);
  /// Sets \p bytes bytes to \p value on the stream.
  void memsetAsync(CUdeviceptr destination, uint8_t value, size_t bytes);

  /// Host -> device, complete on return.
  void copyToDevice(CUdeviceptr destination, const void *source, size_t bytes);
  /// Device -> host, complete on return (waits for all earlier work on the
  /// stream).
  void copyToHost(void *destination, CUdeviceptr source, size_t bytes);

  /// Waits for everything queued on the stream; a kernel's asynchronous
  /// fault surfaces here. \p doing says what the work was in the error.
  void synchronize(const std::string &doing = "waiting for the GPU");

  /// How many synchronize() calls have returned: work queued before the
  /// count last changed is known complete without asking the driver.
  uint64_t synchronizations() const { return completedSyncs; }

private:
  friend class DeviceAllocation;
  const DriverApi *driver = nullptr;
  bool systemDriver = false;
  uint64_t heldBytes = 0;
  uint64_t completedSyncs = 0;
  DeviceInfo deviceInfo;
  CUdevice handle = 0;
  CUcontext primaryContext = nullptr;
  CUstream deviceStream = nullptr;
};

/// The device's memory bandwidth as a device-to-device copy reaches it, in bytes per second
/// (read plus written): the best of 5 timed copies of up to 256 MiB, between two buffers
/// allocated for it and freed after. The floor a memory-bound kernel is compared with
/// (`--profile`); 0 when the copy could not be timed.
double measureCopyBandwidth(Device &device);

/// A CUDA event on the device's stream, for timing: record() two of them
/// around some work, synchronize() the second, elapsedMilliseconds(). With
/// \p flags CU_EVENT_DISABLE_TIMING it only marks a point of the stream to
/// wait for (cheaper to record).
class Event {
public:
  explicit Event(Device &device, unsigned flags = CU_EVENT_DEFAULT);
  ~Event();
  Event(const Event &) = delete;
  Event &operator=(const Event &) = delete;

  /// Records the event at the current end of the device's stream.
  void record();
  /// Records the event at the current end of \p stream (a stream of the device's context).
  void record(CUstream stream);
  /// Waits until the GPU reaches the recorded point; \p doing says why in
  /// the error.
  void synchronize(const char *doing = "waiting for a timing event");
  /// Milliseconds between two recorded and completed events.
  static float elapsedMilliseconds(const Event &start, const Event &end);

private:
  Device *device;
  CUevent event = nullptr;
};

} // namespace ampc::cuda

#endif // AMPC_RUNTIME_CUDA_DEVICE_H
