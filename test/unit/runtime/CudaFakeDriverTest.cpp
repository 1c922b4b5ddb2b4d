//===- CudaFakeDriverTest.cpp - Device error paths against a scripted driver
//===//
//
// Loads CudaFakeDriver (a libcuda stand-in whose answers the test scripts)
// through the driver loader's test hook and checks, on any machine, the
// messages a user gets from the real code paths of loadDriverApi and Device:
// a driver too old for our kernels, cuInit failing for want of a GPU, a
// driver that sees no GPU, a device index out of range, a GPU without bf16,
// and an allocation that runs out of memory after others succeeded.
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/Device.h"
#include "runtime/cuda/Driver.h"
#include "runtime/cuda/Memory.h"

#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

extern "C" {
/// Mirrors the struct in CudaFakeDriver.cpp.
struct AmpcFakeDriverConfig {
  int driverVersion;
  CUresult initResult;
  int deviceCount;
  int computeMajor;
  int computeMinor;
  const char *name;
  uint64_t totalBytes;
  uint64_t freeBytes;
  uint64_t allocationLimit;
};
}

namespace {

using namespace ampc::cuda;

/// The fake driver, kept open by the test so its configuration survives the
/// loader closing it after a failed load.
class CudaFakeDriver : public ::testing::Test {
protected:
  void SetUp() override {
    handle = dlopen(AMPC_FAKE_DRIVER_PATH, RTLD_NOW | RTLD_LOCAL);
    ASSERT_NE(handle, nullptr) << dlerror();
    configure = reinterpret_cast<void (*)(const AmpcFakeDriverConfig *)>(
        dlsym(handle, "ampcFakeDriverConfigure"));
    ASSERT_NE(configure, nullptr);
    configure(&config);
  }
  void TearDown() override {
    if (handle)
      dlclose(handle);
  }

  /// Applies \p change to the default script and loads the driver.
  template <typename Change> const DriverApi &load(Change change) {
    change(config);
    configure(&config);
    DriverLoadOptions options;
    options.libraryNames = {AMPC_FAKE_DRIVER_PATH};
    return loadDriverApi(options);
  }

  /// The error \p action throws, as "kind: message".
  template <typename Action> static CudaError errorOf(Action action) {
    try {
      action();
    } catch (const CudaError &error) {
      return error;
    }
    return CudaError(CudaErrorKind::DriverCall, "(no error was thrown)");
  }

  AmpcFakeDriverConfig config = {13000,          CUDA_SUCCESS,   1,         9, 0, "Fake H100",
                                 85000000000ull, 80000000000ull, UINT64_MAX};
  void *handle = nullptr;
  void (*configure)(const AmpcFakeDriverConfig *) = nullptr;
};

TEST_F(CudaFakeDriver, OpensAGoodDevice) {
  const DriverApi &api = load([](AmpcFakeDriverConfig &) {});
  DeviceOptions options;
  options.api = &api;
  options.requireBf16 = true;
  Device device(options);
  EXPECT_EQ(device.info().summary(), "GPU 0 (Fake H100, compute capability 9.0, 132 SMs, 85.0 GB, "
                                     "driver CUDA 13.0)");
  EXPECT_EQ(device.info().sharedMemoryPerBlockOptin, 227 * 1024);
  EXPECT_NE(device.stream(), nullptr);
}

TEST_F(CudaFakeDriver, DriverTooOldForTheKernels) {
  const CudaError error =
      errorOf([&] { load([](AmpcFakeDriverConfig &c) { c.driverVersion = 12040; }); });
  EXPECT_EQ(error.kind(), CudaErrorKind::DriverTooOld);
  EXPECT_STREQ(error.what(), "the NVIDIA driver is too old: it supports CUDA 12.4, and CUDA "
                             "13.0 or newer (driver R580 or later) is needed for this "
                             "program's kernels (compiled with CUDA 13.0): update the "
                             "NVIDIA driver or use --device cpu");
}

TEST_F(CudaFakeDriver, NoGpuWhenCuInitSaysSo) {
  const DriverApi &api = load([](AmpcFakeDriverConfig &c) { c.initResult = CUDA_ERROR_NO_DEVICE; });
  DeviceOptions options;
  options.api = &api;
  const CudaError error = errorOf([&] { Device device(options); });
  EXPECT_EQ(error.kind(), CudaErrorKind::NoDevice);
  EXPECT_STREQ(error.what(), "no CUDA GPU found (cuInit returned "
                             "CUDA_ERROR_NO_DEVICE: no CUDA-capable device is "
                             "detected): use --device cpu");
}

TEST_F(CudaFakeDriver, NoGpuWhenTheDriverCountsNone) {
  const DriverApi &api = load([](AmpcFakeDriverConfig &c) { c.deviceCount = 0; });
  DeviceOptions options;
  options.api = &api;
  const CudaError error = errorOf([&] { Device device(options); });
  EXPECT_EQ(error.kind(), CudaErrorKind::NoDevice);
  EXPECT_STREQ(error.what(), "no CUDA GPU found (the driver sees no GPU): use --device cpu");
}

TEST_F(CudaFakeDriver, DeviceIndexOutOfRange) {
  const DriverApi &api = load([](AmpcFakeDriverConfig &c) { c.deviceCount = 2; });
  DeviceOptions options;
  options.api = &api;
  options.index = 2;
  const CudaError error = errorOf([&] { Device device(options); });
  EXPECT_EQ(error.kind(), CudaErrorKind::NoDevice);
  EXPECT_STREQ(error.what(), "CUDA device 2 was requested, but only 2 GPUs "
                             "are visible (devices are numbered from 0; "
                             "CUDA_VISIBLE_DEVICES limits which are visible)");
}

TEST_F(CudaFakeDriver, Bf16NeedsComputeCapability8) {
  const DriverApi &api = load([](AmpcFakeDriverConfig &c) {
    c.computeMajor = 7;
    c.computeMinor = 5;
    c.name = "Tesla T4";
  });
  DeviceOptions options;
  options.api = &api;
  Device device(options); // fine without bf16
  EXPECT_FALSE(device.info().supportsBf16());
  const CudaError error = errorOf([&] { device.requireBf16(); });
  EXPECT_EQ(error.kind(), CudaErrorKind::Bf16Unsupported);
  EXPECT_STREQ(error.what(), "GPU 0 (Tesla T4) has compute capability 7.5 and cannot run "
                             "bf16 kernels (they need 8.0 or newer): compile the model with "
                             "--precision fp16");
  options.requireBf16 = true;
  EXPECT_EQ(errorOf([&] { Device other(options); }).kind(), CudaErrorKind::Bf16Unsupported);
}

TEST_F(CudaFakeDriver, OutOfMemoryCountsWhatIsAlreadyHeld) {
  const DriverApi &api = load([](AmpcFakeDriverConfig &c) {
    c.freeBytes = 3200000000ull;
    c.allocationLimit = 10000000000ull;
    c.name = "Fake A100";
  });
  DeviceOptions options;
  options.api = &api;
  Device device(options);
  // The persistent buffers fit; the arena does not.
  PersistentPool pool(device, 2000000000ull, "the persistent buffers");
  EXPECT_EQ(device.allocatedBytes(), 2000000000ull);
  const CudaError error =
      errorOf([&] { DeviceArena arena(device, 12104761856ull, "the micro_step arena"); });
  EXPECT_EQ(error.kind(), CudaErrorKind::OutOfMemory);
  EXPECT_STREQ(error.what(), "out of GPU memory allocating the micro_step arena: 12.1 GB "
                             "(12104761856 bytes) requested, 3.2 GB of 85.0 GB free on GPU "
                             "0 (Fake A100) with 2.0 GB already held by this program: "
                             "compile with --memory-budget 4.6GB or a smaller batch, or end "
                             "the other processes using the GPU (nvidia-smi)");
  EXPECT_EQ(device.allocatedBytes(), 2000000000ull);
}

} // namespace
