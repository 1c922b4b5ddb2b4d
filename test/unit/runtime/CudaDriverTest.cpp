//===- CudaDriverTest.cpp - Loading the driver and cuBLASLt, no GPU needed ===//
//
// What the CUDA device layer does on a machine without a GPU (CI and the
// development machines): loading a driver library that does not exist, and
// the toolkit's stub libcuda.so, gives the "no NVIDIA driver" messages;
// every driver symbol we resolve exists, under its versioned name, in the
// toolkit this was built with (its stub exports the whole API); cuBLASLt
// loads from the toolkit without a GPU; a missing cuBLASLt is a one-line
// error. On a machine with a driver the tests that expect none skip.
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/CublasLt.h"
#include "runtime/cuda/Device.h"
#include "runtime/cuda/Driver.h"

#include <dlfcn.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <type_traits>
#include <unistd.h>

namespace {

using namespace ampc::cuda;

/// The toolkit's stub driver, which exports every entry point of the API
/// and answers CUDA_ERROR_STUB_LIBRARY to each.
std::string stubLibrary() { return std::string(AMPC_CUDA_LIBRARY_DIR) + "/stubs/libcuda.so"; }

TEST(CudaDriver, MissingLibraryIsNoDriver) {
  DriverLoadOptions options;
  options.libraryNames = {"libampc-no-such-driver.so.1"};
  try {
    loadDriverApi(options);
    FAIL() << "loading a nonexistent driver succeeded";
  } catch (const CudaError &error) {
    EXPECT_EQ(error.kind(), CudaErrorKind::NoDriver);
    EXPECT_STREQ(error.what(), "no NVIDIA driver found "
                               "(libampc-no-such-driver.so.1 could not be "
                               "loaded): use --device cpu");
  }
}

TEST(CudaDriver, TheFirstNameTriedIsTheOneReported) {
  DriverLoadOptions options;
  options.libraryNames = {"libampc-first.so.1", "libampc-second.so"};
  try {
    loadDriverApi(options);
    FAIL() << "loading a nonexistent driver succeeded";
  } catch (const CudaError &error) {
    EXPECT_STREQ(error.what(), "no NVIDIA driver found (libampc-first.so.1 "
                               "could not be loaded): use --device cpu");
  }
}

TEST(CudaDriver, ToolkitStubIsNoDriver) {
  if (access(stubLibrary().c_str(), R_OK) != 0)
    GTEST_SKIP() << "the toolkit has no " << stubLibrary();
  DriverLoadOptions options;
  options.libraryNames = {stubLibrary()};
  try {
    loadDriverApi(options);
    FAIL() << "the stub loaded as a driver";
  } catch (const CudaError &error) {
    EXPECT_EQ(error.kind(), CudaErrorKind::NoDriver);
    EXPECT_EQ(error.what(), stubDriverMessage(stubLibrary()));
  }
}

TEST(CudaDriver, EntryPointsUseTheToolkitsVersionedSymbols) {
  const std::vector<std::string> symbols = driverEntryPointSymbols();
  auto has = [&](const char *symbol) {
    return std::find(symbols.begin(), symbols.end(), symbol) != symbols.end();
  };
  // The names cuda.h maps its API names to in CUDA 13.
  EXPECT_TRUE(has("cuMemAlloc_v2"));
  EXPECT_TRUE(has("cuMemFree_v2"));
  EXPECT_TRUE(has("cuMemGetInfo_v2"));
  EXPECT_TRUE(has("cuDeviceTotalMem_v2"));
  EXPECT_TRUE(has("cuMemcpyHtoDAsync_v2"));
  EXPECT_TRUE(has("cuMemcpyDtoHAsync_v2"));
  EXPECT_TRUE(has("cuDevicePrimaryCtxRelease_v2"));
  EXPECT_TRUE(has("cuStreamDestroy_v2"));
  EXPECT_TRUE(has("cuEventDestroy_v2"));
  EXPECT_TRUE(has("cuStreamBeginCapture_v2"));
  EXPECT_TRUE(has("cuGraphInstantiateWithFlags"));
  EXPECT_TRUE(has("cuEventElapsedTime_v2"));
  EXPECT_TRUE(has("cuLaunchKernel"));
  EXPECT_FALSE(has("cuMemAlloc"));
  // The member types follow the same names.
  static_assert(std::is_same_v<decltype(DriverApi::cuMemAlloc), decltype(&::cuMemAlloc_v2)>);
}

TEST(CudaDriver, EveryEntryPointExistsInTheToolkitsDriverApi) {
  void *stub = dlopen(stubLibrary().c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!stub)
    GTEST_SKIP() << "the toolkit has no " << stubLibrary();
  for (const std::string &symbol : driverEntryPointSymbols())
    EXPECT_NE(dlsym(stub, symbol.c_str()), nullptr) << symbol;
  dlclose(stub);
}

TEST(CudaDriver, WithoutADriverOpeningADeviceSaysSo) {
  try {
    Device device;
    GTEST_SKIP() << "this machine has a GPU: " << device.info().summary();
  } catch (const CudaError &error) {
    // libcuda.so.1 absent: the message the user sees is exactly this one.
    if (error.kind() == CudaErrorKind::NoDriver &&
        std::string(error.what()).find("libcuda.so.1") != std::string::npos)
      EXPECT_STREQ(error.what(), "no NVIDIA driver found (libcuda.so.1 could "
                                 "not be loaded): use --device cpu");
    else
      EXPECT_TRUE(error.kind() == CudaErrorKind::NoDriver ||
                  error.kind() == CudaErrorKind::NoDevice)
          << error.what();
  }
}

TEST(CudaDriver, TheProcessWideDriverRepeatsItsFailure) {
  std::string first, second;
  try {
    driverApi();
    GTEST_SKIP() << "this machine has an NVIDIA driver";
  } catch (const CudaError &error) {
    first = error.what();
  }
  try {
    driverApi();
  } catch (const CudaError &error) {
    second = error.what();
  }
  EXPECT_EQ(first, second);
}

TEST(CudaCublasLt, MissingLibraryIsAOneLineError) {
  CublasLtLoadOptions options;
  options.libraryNames = {"libampc-no-such-cublasLt.so.13"};
  try {
    loadCublasLtApi(options);
    FAIL() << "loading a nonexistent cuBLASLt succeeded";
  } catch (const CudaError &error) {
    EXPECT_EQ(error.kind(), CudaErrorKind::NoCublasLt);
    EXPECT_STREQ(error.what(), "cuBLASLt not found (libampc-no-such-cublasLt.so.13 could "
                               "not be loaded): install the CUDA 13 cuBLAS library or add "
                               "its directory to LD_LIBRARY_PATH, or use --device cpu");
  }
}

TEST(CudaCublasLt, DefaultSearchEndsWithTheToolkitsLibraryDirectory) {
  const std::vector<std::string> names = CublasLtLoadOptions::defaultLibraryNames();
  ASSERT_EQ(names.size(), 3u);
  EXPECT_EQ(names[0], "libcublasLt.so.13");
  EXPECT_EQ(names[1], "libcublasLt.so");
  EXPECT_EQ(names[2], std::string(AMPC_CUDA_LIBRARY_DIR) + "/libcublasLt.so.13");
}

TEST(CudaCublasLt, LoadsFromTheToolkitWithoutAGpu) {
  const CublasLtApi &api = cublasLtApi();
  EXPECT_EQ(api.version / 10000, 13u) << api.library;
  EXPECT_EQ(api.describeStatus(CUBLAS_STATUS_NOT_SUPPORTED).rfind("CUBLAS_STATUS_NOT_SUPPORTED", 0),
            0u)
      << api.describeStatus(CUBLAS_STATUS_NOT_SUPPORTED);
}

TEST(CudaCublasLt, WrongMajorVersionIsRefused) {
  CublasLtLoadOptions options;
  options.requiredMajor = 12;
  try {
    loadCublasLtApi(options);
    FAIL() << "cuBLASLt 13 was accepted as 12";
  } catch (const CudaError &error) {
    EXPECT_EQ(error.kind(), CudaErrorKind::NoCublasLt);
    EXPECT_NE(std::string(error.what())
                  .find("but this program needs cuBLASLt "
                        "12.x"),
              std::string::npos)
        << error.what();
  }
}

} // namespace
