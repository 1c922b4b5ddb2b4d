//===- Driver.h - The CUDA driver API, opened at run time -----------------===//
//
// The CUDA backend calls the driver API through a table of function pointers
// resolved from libcuda.so.1 with dlopen/dlsym, never by linking libcuda: a
// linked binary would not even start on a machine without an NVIDIA driver,
// and the training executables must run there on their CPU backend.
//
// Each entry is declared with the API name from cuda.h (`cuMemAlloc`), which
// cuda.h's macros turn into the versioned ABI symbol of this toolkit
// (`cuMemAlloc_v2`, `cuStreamBeginCapture_v2`, `cuGraphInstantiateWithFlags`,
// `cuEventElapsedTime_v2`, ...). The member name, its type and the symbol
// looked up all go through the same macro, so they cannot disagree, and call
// sites read like ordinary driver code: `api.cuMemAlloc(&pointer, bytes)`.
//
// Loading checks, in order: the library opens (else "no NVIDIA driver found
// (tried libcuda.so.1, libcuda.so; ...)", runtime/support/DynamicLibrary.h),
// it is a real driver rather than the toolkit's stub, and its CUDA
// version is at least the one our kernels need (kRequiredDriverVersion:
// cubins compiled by CUDA 13 NVRTC load on any 13.x driver, not on 12.x).
//
//===----------------------------------------------------------------------===//

#ifndef AMPC_RUNTIME_CUDA_DRIVER_H
#define AMPC_RUNTIME_CUDA_DRIVER_H

#include "runtime/cuda/Errors.h"

#include <cuda.h>

#include <string>
#include <utility>
#include <vector>

namespace ampc::cuda {

/// The oldest driver (as cuDriverGetVersion reports it) that loads cubins
/// from the toolkit this runtime is built with: its major release, x.0.
inline constexpr int kRequiredDriverVersion = CUDA_VERSION / 1000 * 1000;

/// The CUDA version of the toolkit this runtime is built with (13000 for
/// 13.0): what NVRTC-compiled PTX of the same toolkit needs to be JIT-ed.
inline constexpr int kToolkitVersion = CUDA_VERSION;

// Every driver entry point the backend uses. X(name) receives the cuda.h API
// name; see the file comment for how it becomes the versioned symbol.
#define AMPC_CUDA_DRIVER_ENTRY_POINTS(X)                                                           \
  X(cuGetErrorName)                                                                                \
  X(cuGetErrorString)                                                                              \
  X(cuDriverGetVersion)                                                                            \
  X(cuInit)                                                                                        \
  X(cuDeviceGetCount)                                                                              \
  X(cuDeviceGet)                                                                                   \
  X(cuDeviceGetName)                                                                               \
  X(cuDeviceGetAttribute)                                                                          \
  X(cuDeviceTotalMem)                                                                              \
  X(cuDevicePrimaryCtxRetain)                                                                      \
  X(cuDevicePrimaryCtxRelease)                                                                     \
  X(cuCtxSetCurrent)                                                                               \
  X(cuCtxSynchronize)                                                                              \
  X(cuMemGetInfo)                                                                                  \
  X(cuMemAlloc)                                                                                    \
  X(cuMemFree)                                                                                     \
  X(cuMemAllocHost)                                                                                \
  X(cuMemFreeHost)                                                                                 \
  X(cuMemsetD8Async)                                                                               \
  X(cuMemcpyHtoDAsync)                                                                             \
  X(cuMemcpyDtoHAsync)                                                                             \
  X(cuMemcpyDtoDAsync)                                                                             \
  X(cuModuleLoadDataEx)                                                                            \
  X(cuModuleUnload)                                                                                \
  X(cuModuleGetFunction)                                                                           \
  X(cuFuncGetAttribute)                                                                            \
  X(cuFuncSetAttribute)                                                                            \
  X(cuLaunchKernel)                                                                                \
  X(cuStreamCreate)                                                                                \
  X(cuStreamDestroy)                                                                               \
  X(cuStreamSynchronize)                                                                           \
  X(cuStreamIsCapturing)                                                                           \
  X(cuEventCreate)                                                                                 \
  X(cuEventDestroy)                                                                                \
  X(cuEventRecord)                                                                                 \
  X(cuEventSynchronize)                                                                            \
  X(cuEventElapsedTime)                                                                            \
  X(cuStreamWaitEvent)                                                                             \
  X(cuStreamBeginCapture)                                                                          \
  X(cuStreamEndCapture)                                                                            \
  X(cuGraphInstantiate)                                                                            \
  X(cuGraphLaunch)                                                                                 \
  X(cuGraphExecDestroy)                                                                            \
  X(cuGraphDestroy)

/// The driver's entry points, resolved from one loaded library. Obtain the
/// process-wide table with driverApi(); loadDriverApi() is for tests.
struct DriverApi {
#define AMPC_CUDA_DRIVER_MEMBER(name) decltype(&::name) name = nullptr;
  AMPC_CUDA_DRIVER_ENTRY_POINTS(AMPC_CUDA_DRIVER_MEMBER)
#undef AMPC_CUDA_DRIVER_MEMBER

  /// The library that was opened (its name as passed to dlopen).
  std::string library;
  /// cuDriverGetVersion: the newest CUDA version the driver supports.
  int driverVersion = 0;
  /// The dlopen handle; the library stays loaded for the process lifetime.
  void *handle = nullptr;

  /// "CUDA_ERROR_OUT_OF_MEMORY" (or "CUresult 2" if the driver cannot say).
  std::string errorName(CUresult result) const;
  /// "out of memory" (or "" if the driver cannot say).
  std::string errorString(CUresult result) const;
};

/// Where and how to load the driver.
struct DriverLoadOptions {
  /// Tried in order with dlopen; the first that opens is used.
  std::vector<std::string> libraryNames = {"libcuda.so.1", "libcuda.so"};
  /// libraryNames is the file $AMPC_CUDA_DRIVER_LIBRARY names (the message
  /// when it cannot be opened then says to correct the variable).
  bool namesFromVariable = false;
  /// The driver must support at least this CUDA version.
  int requiredVersion = kRequiredDriverVersion;
};

/// Opens the driver and resolves every entry point. Throws CudaError:
/// NoDriver (no library opens, or it is the toolkit's stub), DriverTooOld
/// (its CUDA version is below options.requiredVersion, or it lacks one of
/// our entry points). The returned table is never unloaded.
const DriverApi &loadDriverApi(const DriverLoadOptions &options);

/// The symbols loadDriverApi resolves, as this toolkit's cuda.h names them
/// ("cuMemAlloc_v2", "cuGraphInstantiateWithFlags", ...).
std::vector<std::string> driverEntryPointSymbols();

/// The process-wide driver table, loaded on first use with the default
/// options; throws the same CudaError on every call if loading failed.
const DriverApi &driverApi();

/// Whether driverApi() opens the system's libcuda by its usual names, the library that other
/// CUDA libraries (cuDNN) open for themselves; false when $AMPC_CUDA_DRIVER_LIBRARY names
/// another (the dry run's recording stand-in).
bool driverApiIsTheSystems();

/// Throws CudaError(DriverCall) naming \p call, the error and \p doing when
/// \p result is not CUDA_SUCCESS; \p doing is "" or what the runtime was
/// doing ("allocating the micro_step arena").
void checkDriver(const DriverApi &api, CUresult result, const char *call, const std::string &doing);

/// As checkDriver, but \p describeDoing (returning std::string) is called
/// only on failure, so hot paths build no strings.
template <typename Describe>
inline void checkDriverLazy(const DriverApi &api, CUresult result, const char *call,
                            Describe &&describeDoing) {
  if (result != CUDA_SUCCESS)
    checkDriver(api, result, call, describeDoing());
}

} // namespace ampc::cuda

#endif // AMPC_RUNTIME_CUDA_DRIVER_H
