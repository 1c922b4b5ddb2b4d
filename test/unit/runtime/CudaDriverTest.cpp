//===- CudaDriverTest.cpp - Loading the driver and cuBLASLt, no GPU needed ===//
//
// What the CUDA device layer does on a machine without a GPU (CI and the
// development machines): loading a driver library that does not exist, and
// the toolkit's stub libcuda.so, gives the "no NVIDIA driver" messages;
// every driver symbol we resolve exists, under its versioned name, in the
// toolkit this was built with (its stub exports the whole API); cuBLASLt
// loads from the toolkit without a GPU; a missing cuBLASLt or NCCL, and a
// library that lacks their entry points (libm stands in for one), give the
// one-line messages every library opened at run time gives. On a machine
// with a driver the tests that expect none skip.
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/CublasLt.h"
#include "runtime/cuda/Device.h"
#include "runtime/cuda/Driver.h"
#include "runtime/cuda/Nccl.h"

#include <dlfcn.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
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
    EXPECT_STREQ(error.what(), "no NVIDIA driver found (tried libampc-no-such-driver.so.1; set "
                               "AMPC_CUDA_DRIVER_LIBRARY to the file to use): use --device cpu");
  }
}

TEST(CudaDriver, EveryNameTriedIsReported) {
  DriverLoadOptions options;
  options.libraryNames = {"libampc-first.so.1", "", "libampc-second.so"};
  try {
    loadDriverApi(options);
    FAIL() << "loading a nonexistent driver succeeded";
  } catch (const CudaError &error) {
    EXPECT_STREQ(error.what(), "no NVIDIA driver found (tried libampc-first.so.1, "
                               "libampc-second.so; set AMPC_CUDA_DRIVER_LIBRARY to the file to "
                               "use): use --device cpu");
  }
}

TEST(CudaDriver, AFileFromTheVariableIsToBeCorrected) {
  DriverLoadOptions options;
  options.libraryNames = {"/nonexistent/libcuda.so.1"};
  options.namesFromVariable = true;
  try {
    loadDriverApi(options);
    FAIL() << "loading a nonexistent driver succeeded";
  } catch (const CudaError &error) {
    EXPECT_EQ(error.kind(), CudaErrorKind::NoDriver);
    EXPECT_STREQ(error.what(), "no NVIDIA driver found (tried /nonexistent/libcuda.so.1, named by "
                               "AMPC_CUDA_DRIVER_LIBRARY): correct AMPC_CUDA_DRIVER_LIBRARY or "
                               "unset it");
  }
}

TEST(CudaDriver, ALibraryWithoutTheDriverApiIsNoDriver) {
  DriverLoadOptions options;
  options.libraryNames = {"libm.so.6"};
  try {
    loadDriverApi(options);
    FAIL() << "libm loaded as a driver";
  } catch (const CudaError &error) {
    EXPECT_EQ(error.kind(), CudaErrorKind::NoDriver);
    EXPECT_STREQ(error.what(), "libm.so.6 has no cuDriverGetVersion: a CUDA driver is needed, and "
                               "this is not one; use --device cpu");
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
      EXPECT_STREQ(error.what(), "no NVIDIA driver found (tried libcuda.so.1, libcuda.so; set "
                                 "AMPC_CUDA_DRIVER_LIBRARY to the file to use): use --device cpu");
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
    EXPECT_STREQ(error.what(), "no cuBLASLt found (tried libampc-no-such-cublasLt.so.13; set "
                               "AMPC_CUBLASLT_LIBRARY to the file to use): install the CUDA 13 "
                               "cuBLAS library or add its directory to LD_LIBRARY_PATH, or use "
                               "--device cpu");
  }
}

TEST(CudaCublasLt, ALibraryWithoutCublasLtNamesTheMissingEntryPoints) {
  CublasLtLoadOptions options;
  options.libraryNames = {"libm.so.6"};
  try {
    loadCublasLtApi(options);
    FAIL() << "libm loaded as cuBLASLt";
  } catch (const CudaError &error) {
    EXPECT_EQ(error.kind(), CudaErrorKind::NoCublasLt);
    const std::string what = error.what();
    EXPECT_EQ(what.rfind("libm.so.6 has no cublasLt", 0), 0u) << what;
    EXPECT_NE(what.find(", cublasLtMatmulAlgoGetHeuristic, cublasLtMatmul: "), std::string::npos)
        << what;
    const std::string needed = ": the CUDA 13 cuBLAS library is needed; install it, or use "
                               "--device cpu";
    ASSERT_GE(what.size(), needed.size());
    EXPECT_EQ(what.substr(what.size() - needed.size()), needed);
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

//===----------------------------------------------------------------------===//
// NCCL
//===----------------------------------------------------------------------===//

/// NCCL's search with \p names, as if $AMPC_NCCL_LIBRARY were not set.
ampc::LibrarySearch ncclSearchFor(std::vector<std::string> names) {
  ampc::LibrarySearch search = ncclLibrarySearch();
  search.names = std::move(names);
  search.namedByVariable = false;
  return search;
}

TEST(CudaNccl, TheSearchIsTheUsualNamesOrTheVariablesFile) {
  const char *saved = std::getenv("AMPC_NCCL_LIBRARY");
  const std::string before = saved ? saved : "";
  ::unsetenv("AMPC_NCCL_LIBRARY");
  const ampc::LibrarySearch usual = ncclLibrarySearch();
  EXPECT_EQ(usual.names, (std::vector<std::string>{"libnccl.so.2", "libnccl.so"}));
  EXPECT_FALSE(usual.namedByVariable);
  ::setenv("AMPC_NCCL_LIBRARY", "/opt/nccl/libnccl.so.2", 1);
  const ampc::LibrarySearch chosen = ncclLibrarySearch();
  EXPECT_EQ(chosen.names, std::vector<std::string>{"/opt/nccl/libnccl.so.2"});
  EXPECT_TRUE(chosen.namedByVariable);
  if (saved)
    ::setenv("AMPC_NCCL_LIBRARY", before.c_str(), 1);
  else
    ::unsetenv("AMPC_NCCL_LIBRARY");
}

TEST(CudaNccl, MissingLibraryNamesTheCandidates) {
  try {
    loadNcclApi(ncclSearchFor({"libampc-no-such-nccl.so.2", "libampc-no-such-nccl.so"}));
    FAIL() << "loading a nonexistent NCCL succeeded";
  } catch (const NcclError &error) {
    EXPECT_STREQ(error.what(), "no NCCL found (tried libampc-no-such-nccl.so.2, "
                               "libampc-no-such-nccl.so; set AMPC_NCCL_LIBRARY to the file to "
                               "use): data parallel training on GPUs needs it; install NCCL (it "
                               "ships with the CUDA toolkit and with PyTorch) and put its "
                               "directory on LD_LIBRARY_PATH");
  }
}

TEST(CudaNccl, ALibraryWithoutNcclNamesEveryMissingEntryPoint) {
  try {
    loadNcclApi(ncclSearchFor({"libm.so.6"}));
    FAIL() << "libm loaded as NCCL";
  } catch (const NcclError &error) {
    EXPECT_STREQ(error.what(), "libm.so.6 has no ncclGetVersion, ncclGetUniqueId, "
                               "ncclCommInitRank, ncclCommDestroy, ncclCommAbort, "
                               "ncclCommGetAsyncError, ncclGetErrorString, ncclAllReduce, "
                               "ncclGroupStart, ncclGroupEnd: NCCL 2.12 or newer is needed");
  }
}

TEST(CudaNccl, LoadsTheInstalledNccl) {
  const ampc::LibrarySearch search = ncclSearchFor({"libnccl.so.2", "libnccl.so"});
  if (!ampc::DynamicLibrary::openFirst(search.names))
    GTEST_SKIP() << "no NCCL on the loader's path";
  const NcclApi api = loadNcclApi(search);
  EXPECT_EQ(api.library, "libnccl.so.2");
  EXPECT_GE(api.version, 21200) << "NCCL 2.12 or newer";
#define AMPC_NCCL_EXPECT_RESOLVED(name, result, parameters) EXPECT_NE(api.name, nullptr) << #name;
  AMPC_NCCL_ENTRY_POINTS(AMPC_NCCL_EXPECT_RESOLVED)
#undef AMPC_NCCL_EXPECT_RESOLVED
}

} // namespace
