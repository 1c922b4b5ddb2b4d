//===- CudaFakeDriver.cpp - A scripted stand-in for libcuda, for tests ----===//
//
// A shared library exporting every driver entry point the CUDA device layer
// resolves (under the same versioned names, by including cuda.h), whose
// answers the test sets through ampcFakeDriverConfigure: the driver's CUDA
// version, what cuInit returns, how many GPUs there are, their compute
// capability, name and memory, and whether cuMemAlloc runs out of memory.
// Loaded through DriverLoadOptions::libraryNames, it lets CudaFakeDriverTest
// drive the Device's error paths (driver too old, no GPU, no bf16, out of
// memory) on machines without a GPU. It runs no kernels: entry points the
// tests do not script return CUDA_ERROR_NOT_SUPPORTED.
//
//===----------------------------------------------------------------------===//

#include <cuda.h>

#include <cstdint>
#include <cstring>

extern "C" {

/// What the fake driver answers; set with ampcFakeDriverConfigure.
struct AmpcFakeDriverConfig {
  int driverVersion;
  CUresult initResult;
  int deviceCount;
  int computeMajor;
  int computeMinor;
  const char *name;
  uint64_t totalBytes;
  uint64_t freeBytes;
  /// cuMemAlloc fails with CUDA_ERROR_OUT_OF_MEMORY above this size.
  uint64_t allocationLimit;
};

namespace {

AmpcFakeDriverConfig config = {13000,          CUDA_SUCCESS,   1,         9, 0, "Fake GPU",
                               85000000000ull, 80000000000ull, UINT64_MAX};
/// Fake device addresses, handed out upwards from here.
CUdeviceptr nextAddress = 0x100000000ull;
int fakeObject; // the address of this stands in for contexts and streams

} // namespace

__attribute__((visibility("default"))) void
ampcFakeDriverConfigure(const AmpcFakeDriverConfig *newConfig) {
  config = *newConfig;
}

#define AMPC_FAKE_UNSUPPORTED return CUDA_ERROR_NOT_SUPPORTED

CUresult CUDAAPI cuGetErrorName(CUresult error, const char **name) {
  switch (error) {
  case CUDA_ERROR_NO_DEVICE:
    *name = "CUDA_ERROR_NO_DEVICE";
    return CUDA_SUCCESS;
  case CUDA_ERROR_OUT_OF_MEMORY:
    *name = "CUDA_ERROR_OUT_OF_MEMORY";
    return CUDA_SUCCESS;
  case CUDA_ERROR_SYSTEM_DRIVER_MISMATCH:
    *name = "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH";
    return CUDA_SUCCESS;
  default:
    return CUDA_ERROR_INVALID_VALUE;
  }
}

CUresult CUDAAPI cuGetErrorString(CUresult error, const char **text) {
  switch (error) {
  case CUDA_ERROR_NO_DEVICE:
    *text = "no CUDA-capable device is detected";
    return CUDA_SUCCESS;
  case CUDA_ERROR_OUT_OF_MEMORY:
    *text = "out of memory";
    return CUDA_SUCCESS;
  case CUDA_ERROR_SYSTEM_DRIVER_MISMATCH:
    *text = "system has unsupported display driver / cuda driver combination";
    return CUDA_SUCCESS;
  default:
    return CUDA_ERROR_INVALID_VALUE;
  }
}

CUresult CUDAAPI cuDriverGetVersion(int *version) {
  *version = config.driverVersion;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuInit(unsigned int) { return config.initResult; }

CUresult CUDAAPI cuDeviceGetCount(int *count) {
  *count = config.deviceCount;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGet(CUdevice *device, int ordinal) {
  *device = ordinal;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetName(char *name, int length, CUdevice) {
  std::strncpy(name, config.name, static_cast<size_t>(length));
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetAttribute(int *value, CUdevice_attribute attribute, CUdevice) {
  switch (attribute) {
  case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR:
    *value = config.computeMajor;
    return CUDA_SUCCESS;
  case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR:
    *value = config.computeMinor;
    return CUDA_SUCCESS;
  case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT:
    *value = 132;
    return CUDA_SUCCESS;
  case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK:
    *value = 48 * 1024;
    return CUDA_SUCCESS;
  case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN:
    *value = 227 * 1024;
    return CUDA_SUCCESS;
  default:
    AMPC_FAKE_UNSUPPORTED;
  }
}

CUresult CUDAAPI cuDeviceTotalMem(size_t *bytes, CUdevice) {
  *bytes = config.totalBytes;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDevicePrimaryCtxRetain(CUcontext *context, CUdevice) {
  *context = reinterpret_cast<CUcontext>(&fakeObject);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuDevicePrimaryCtxRelease(CUdevice) { return CUDA_SUCCESS; }
CUresult CUDAAPI cuCtxSetCurrent(CUcontext) { return CUDA_SUCCESS; }
CUresult CUDAAPI cuCtxSynchronize(void) { return CUDA_SUCCESS; }

CUresult CUDAAPI cuMemGetInfo(size_t *freeBytes, size_t *totalBytes) {
  *freeBytes = config.freeBytes;
  *totalBytes = config.totalBytes;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemAlloc(CUdeviceptr *pointer, size_t bytes) {
  if (bytes > config.allocationLimit)
    return CUDA_ERROR_OUT_OF_MEMORY;
  *pointer = nextAddress;
  nextAddress += (bytes + 0xfffff) & ~static_cast<CUdeviceptr>(0xfffff);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuMemFree(CUdeviceptr) { return CUDA_SUCCESS; }
CUresult CUDAAPI cuMemAllocHost(void **, size_t) { AMPC_FAKE_UNSUPPORTED; }
CUresult CUDAAPI cuMemFreeHost(void *) { AMPC_FAKE_UNSUPPORTED; }
CUresult CUDAAPI cuMemsetD8Async(CUdeviceptr, unsigned char, size_t, CUstream) {
  AMPC_FAKE_UNSUPPORTED;
}
CUresult CUDAAPI cuMemcpyHtoDAsync(CUdeviceptr, const void *, size_t, CUstream) {
  AMPC_FAKE_UNSUPPORTED;
}
CUresult CUDAAPI cuMemcpyDtoHAsync(void *, CUdeviceptr, size_t, CUstream) { AMPC_FAKE_UNSUPPORTED; }
CUresult CUDAAPI cuMemcpyDtoDAsync(CUdeviceptr, CUdeviceptr, size_t, CUstream) {
  AMPC_FAKE_UNSUPPORTED;
}

CUresult CUDAAPI cuModuleLoadDataEx(CUmodule *, const void *, unsigned int, CUjit_option *,
                                    void **) {
  AMPC_FAKE_UNSUPPORTED;
}
CUresult CUDAAPI cuModuleUnload(CUmodule) { AMPC_FAKE_UNSUPPORTED; }
CUresult CUDAAPI cuModuleGetFunction(CUfunction *, CUmodule, const char *) {
  AMPC_FAKE_UNSUPPORTED;
}
CUresult CUDAAPI cuFuncGetAttribute(int *, CUfunction_attribute, CUfunction) {
  AMPC_FAKE_UNSUPPORTED;
}
CUresult CUDAAPI cuFuncSetAttribute(CUfunction, CUfunction_attribute, int) {
  AMPC_FAKE_UNSUPPORTED;
}
CUresult CUDAAPI cuLaunchKernel(CUfunction, unsigned int, unsigned int, unsigned int, unsigned int,
                                unsigned int, unsigned int, unsigned int, CUstream, void **,
                                void **) {
  AMPC_FAKE_UNSUPPORTED;
}

CUresult CUDAAPI cuStreamCreate(CUstream *stream, unsigned int) {
  *stream = reinterpret_cast<CUstream>(&fakeObject);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuStreamDestroy(CUstream) { return CUDA_SUCCESS; }
CUresult CUDAAPI cuStreamSynchronize(CUstream) { return CUDA_SUCCESS; }
CUresult CUDAAPI cuStreamIsCapturing(CUstream, CUstreamCaptureStatus *) { AMPC_FAKE_UNSUPPORTED; }

CUresult CUDAAPI cuEventCreate(CUevent *, unsigned int) { AMPC_FAKE_UNSUPPORTED; }
CUresult CUDAAPI cuEventDestroy(CUevent) { AMPC_FAKE_UNSUPPORTED; }
CUresult CUDAAPI cuEventRecord(CUevent, CUstream) { AMPC_FAKE_UNSUPPORTED; }
CUresult CUDAAPI cuEventSynchronize(CUevent) { AMPC_FAKE_UNSUPPORTED; }
CUresult CUDAAPI cuEventElapsedTime(float *, CUevent, CUevent) { AMPC_FAKE_UNSUPPORTED; }
CUresult CUDAAPI cuStreamWaitEvent(CUstream, CUevent, unsigned int) { AMPC_FAKE_UNSUPPORTED; }

CUresult CUDAAPI cuStreamBeginCapture(CUstream, CUstreamCaptureMode) { AMPC_FAKE_UNSUPPORTED; }
CUresult CUDAAPI cuStreamEndCapture(CUstream, CUgraph *) { AMPC_FAKE_UNSUPPORTED; }
CUresult CUDAAPI cuGraphInstantiate(CUgraphExec *, CUgraph, unsigned long long) {
  AMPC_FAKE_UNSUPPORTED;
}
CUresult CUDAAPI cuGraphLaunch(CUgraphExec, CUstream) { AMPC_FAKE_UNSUPPORTED; }
CUresult CUDAAPI cuGraphExecDestroy(CUgraphExec) { AMPC_FAKE_UNSUPPORTED; }
CUresult CUDAAPI cuGraphDestroy(CUgraph) { AMPC_FAKE_UNSUPPORTED; }

} // extern "C"
