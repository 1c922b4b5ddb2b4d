//===- Driver.cpp - The CUDA driver API, opened at run time ---------------===//

#include "runtime/cuda/Driver.h"
#include "runtime/support/DynamicLibrary.h"

#include <cstdlib>
#include <memory>
#include <mutex>

// Two steps, so that the argument is macro-expanded (cuMemAlloc ->
// cuMemAlloc_v2) before it is turned into a string.
#define AMPC_CUDA_STRINGIFY_EXPANDED(x) #x
#define AMPC_CUDA_STRINGIFY(x) AMPC_CUDA_STRINGIFY_EXPANDED(x)

namespace ampc::cuda {
namespace {

/// Names for the results a stub or broken driver cannot name itself.
const char *fallbackErrorName(CUresult result) {
  switch (result) {
  case CUDA_ERROR_STUB_LIBRARY:
    return "CUDA_ERROR_STUB_LIBRARY";
  case CUDA_ERROR_NO_DEVICE:
    return "CUDA_ERROR_NO_DEVICE";
  case CUDA_ERROR_OUT_OF_MEMORY:
    return "CUDA_ERROR_OUT_OF_MEMORY";
  case CUDA_ERROR_NOT_INITIALIZED:
    return "CUDA_ERROR_NOT_INITIALIZED";
  case CUDA_ERROR_SYSTEM_DRIVER_MISMATCH:
    return "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH";
  default:
    return nullptr;
  }
}

/// Where the driver is looked for: \p options' names, or the file
/// $AMPC_CUDA_DRIVER_LIBRARY names when they came from it.
LibrarySearch driverSearch(const DriverLoadOptions &options) {
  LibrarySearch search;
  search.what = "NVIDIA driver";
  search.names = options.libraryNames;
  search.variable = "AMPC_CUDA_DRIVER_LIBRARY";
  search.namedByVariable = options.namesFromVariable;
  search.advice = "use --device cpu";
  return search;
}

/// Opens the library into \p table and resolves its entry points; throws
/// CudaError (and closes the library again).
void loadInto(DriverApi &table, const DriverLoadOptions &options) {
  DriverApi *api = &table;
  const LibrarySearch search = driverSearch(options);
  DynamicLibrary library = DynamicLibrary::openFirst(search.names, search.scope);
  if (!library)
    throw CudaError(CudaErrorKind::NoDriver, search.notFoundMessage());
  api->library = library.name();

  // The version first: it decides whether a missing entry point means an
  // old driver or a broken one, and the toolkit's stub fails it.
  SymbolResolver resolveVersion(library);
  resolveVersion(api->cuDriverGetVersion, AMPC_CUDA_STRINGIFY(cuDriverGetVersion));
  if (!resolveVersion.missing().empty())
    throw CudaError(CudaErrorKind::NoDriver,
                    resolveVersion.missingMessage(
                        "a CUDA driver is needed, and this is not one; use --device cpu"));
  const CUresult versionResult = api->cuDriverGetVersion(&api->driverVersion);
  if (versionResult == CUDA_ERROR_STUB_LIBRARY)
    throw CudaError(CudaErrorKind::NoDriver, stubDriverMessage(api->library), versionResult);
  if (versionResult != CUDA_SUCCESS)
    throw CudaError(CudaErrorKind::NoDriver,
                    "no usable NVIDIA driver (cuDriverGetVersion in " + api->library +
                        " returned CUresult " + std::to_string(versionResult) +
                        "): use --device cpu",
                    versionResult);
  if (api->driverVersion < options.requiredVersion)
    throw CudaError(CudaErrorKind::DriverTooOld,
                    driverTooOldMessage(api->driverVersion, options.requiredVersion,
                                        "this program's kernels (compiled "
                                        "with CUDA " +
                                            formatCudaVersion(kToolkitVersion) + ")"));

  SymbolResolver resolve(library);
#define AMPC_CUDA_DRIVER_RESOLVE(name) resolve(api->name, AMPC_CUDA_STRINGIFY(name));
  AMPC_CUDA_DRIVER_ENTRY_POINTS(AMPC_CUDA_DRIVER_RESOLVE)
#undef AMPC_CUDA_DRIVER_RESOLVE
  if (!resolve.missing().empty()) {
    const std::string needed = "a newer NVIDIA driver is needed (this one supports CUDA " +
                               formatCudaVersion(api->driverVersion) +
                               "); update it or use --device cpu";
    throw CudaError(CudaErrorKind::DriverTooOld, resolve.missingMessage(needed));
  }
  api->handle = library.release();
}

} // namespace

std::string DriverApi::errorName(CUresult result) const {
  const char *name = nullptr;
  if (cuGetErrorName && cuGetErrorName(result, &name) == CUDA_SUCCESS && name)
    return name;
  if (const char *fallback = fallbackErrorName(result))
    return fallback;
  return "CUresult " + std::to_string(static_cast<int>(result));
}

std::string DriverApi::errorString(CUresult result) const {
  const char *text = nullptr;
  if (cuGetErrorString && cuGetErrorString(result, &text) == CUDA_SUCCESS && text)
    return text;
  return "";
}

std::vector<std::string> driverEntryPointSymbols() {
  return {
#define AMPC_CUDA_DRIVER_SYMBOL(name) AMPC_CUDA_STRINGIFY(name),
      AMPC_CUDA_DRIVER_ENTRY_POINTS(AMPC_CUDA_DRIVER_SYMBOL)
#undef AMPC_CUDA_DRIVER_SYMBOL
  };
}

const DriverApi &loadDriverApi(const DriverLoadOptions &options) {
  // Tables are kept for the life of the process: function pointers into
  // the library may be held anywhere.
  static std::mutex mutex;
  static std::vector<std::unique_ptr<DriverApi>> loaded;
  auto api = std::make_unique<DriverApi>();
  loadInto(*api, options);
  std::lock_guard<std::mutex> lock(mutex);
  loaded.push_back(std::move(api));
  return *loaded.back();
}

bool driverApiIsTheSystems() {
  const char *library = std::getenv("AMPC_CUDA_DRIVER_LIBRARY");
  return !library || !*library;
}

const DriverApi &driverApi() {
  static std::once_flag once;
  static const DriverApi *api = nullptr;
  static CudaErrorKind failureKind = CudaErrorKind::NoDriver;
  static std::string failure;
  static int failureCode = 0;
  std::call_once(once, [] {
    // $AMPC_CUDA_DRIVER_LIBRARY replaces the library names: the dry-run
    // tests run training executables over a recording stand-in for libcuda.
    DriverLoadOptions options;
    if (const char *library = std::getenv("AMPC_CUDA_DRIVER_LIBRARY"))
      if (*library) {
        options.libraryNames = {library};
        options.namesFromVariable = true;
      }
    try {
      api = &loadDriverApi(options);
    } catch (const CudaError &error) {
      failureKind = error.kind();
      failure = error.what();
      failureCode = error.code();
    }
  });
  if (!api)
    throw CudaError(failureKind, failure, failureCode);
  return *api;
}

void checkDriver(const DriverApi &api, CUresult result, const char *call,
                 const std::string &doing) {
  if (result == CUDA_SUCCESS)
    return;
  throw CudaError(CudaErrorKind::DriverCall,
                  driverCallMessage(call, api.errorName(result), api.errorString(result), doing),
                  result);
}

} // namespace ampc::cuda
