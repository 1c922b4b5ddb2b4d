//===- CudaDeviceGpuTest.cpp - Device, memory and kernels on a real GPU ---===//
//
// On a GPU: what the Device reports, copies and memsets, the arena's
// offsets and the persistent pool's bump allocation, the out-of-memory and
// driver-too-old messages with real numbers, and kernels compiled by NVRTC
// loaded from a cubin and (forced) from PTX, with a launch that opts in to
// more than 48 KiB of dynamic shared memory, a malformed PTX whose JIT log
// reaches the error, and a rejected launch. Every test skips without a
// driver or a GPU.
//
//===----------------------------------------------------------------------===//

#include "CudaGpuTestUtils.h"

#include "runtime/cuda/Memory.h"
#include "runtime/cuda/Module.h"
#include "runtime/cuda/Nvrtc.h"

#include <gtest/gtest.h>

#include <cstring>
#include <numeric>
#include <string>
#include <vector>

namespace {

using namespace ampc::cuda;
using namespace ampc::cuda::testing;
using ampc::plan::DType;

bool contains(const std::string &text, const std::string &part) {
  return text.find(part) != std::string::npos;
}

TEST(CudaDeviceGpu, ReportsTheGpu) {
  AMPC_REQUIRE_GPU(device);
  const DeviceInfo &info = device.info();
  std::printf("%s\n", info.summary().c_str());
  EXPECT_FALSE(info.name.empty());
  EXPECT_GE(info.computeMajor, 3);
  EXPECT_GT(info.multiprocessors, 0);
  EXPECT_GT(info.totalMemory, 0u);
  EXPECT_GE(info.driverVersion, kRequiredDriverVersion);
  EXPECT_GE(info.sharedMemoryPerBlockOptin, info.sharedMemoryPerBlock);
  EXPECT_EQ(info.supportsBf16(), info.computeMajor >= 8);
  const MemoryInfo memory = device.memoryInfo();
  EXPECT_GT(memory.freeBytes, 0u);
  EXPECT_LE(memory.freeBytes, memory.totalBytes);
  if (info.supportsBf16())
    EXPECT_NO_THROW(device.requireBf16());
  else
    EXPECT_THROW(device.requireBf16(), CudaError);
}

TEST(CudaDeviceGpu, CopiesAndMemsets) {
  AMPC_REQUIRE_GPU(device);
  const size_t bytes = 1 << 20;
  std::vector<uint8_t> pattern(bytes);
  for (size_t i = 0; i < bytes; ++i)
    pattern[i] = static_cast<uint8_t>(i * 7 + 3);
  DeviceAllocation first = device.allocate(bytes, "a test buffer");
  DeviceAllocation second = device.allocate(bytes, "a test buffer");
  device.copyToDeviceAsync(first.pointer(), pattern.data(), bytes);
  device.copyOnDeviceAsync(second.pointer(), first.pointer(), bytes);
  device.memsetAsync(second.pointer() + 1000, 0xab, 24);
  std::vector<uint8_t> back(bytes);
  device.copyToHost(back.data(), second.pointer(), bytes);
  std::vector<uint8_t> expected = pattern;
  std::memset(expected.data() + 1000, 0xab, 24);
  EXPECT_EQ(back, expected);

  PinnedHostBuffer pinned = device.allocatePinned(bytes, "a test readback");
  device.copyToHostAsync(pinned.data(), first.pointer(), bytes);
  device.synchronize();
  EXPECT_EQ(std::memcmp(pinned.data(), pattern.data(), bytes), 0);

  // Zero bytes is an empty allocation, not an error.
  EXPECT_FALSE(device.allocate(0, "nothing"));
}

TEST(CudaDeviceGpu, ArenaHandsOutPlannedOffsets) {
  AMPC_REQUIRE_GPU(device);
  DeviceArena arena(device, 64 * 1024, "the test arena");
  EXPECT_EQ(arena.size(), 64u * 1024u);
  EXPECT_EQ(arena.base() % kBufferAlignment, 0u);
  device.memsetAsync(arena.base(), 0, arena.size());
  // Three buffers at planned offsets, each filled with its own byte.
  const uint64_t offsets[] = {0, 256, 40960};
  const uint64_t sizes[] = {200, 4096, 24576};
  for (int i = 0; i < 3; ++i) {
    const CUdeviceptr pointer = arena.at(offsets[i], sizes[i]);
    EXPECT_EQ(pointer, arena.base() + offsets[i]);
    device.memsetAsync(pointer, static_cast<uint8_t>(i + 1), sizes[i]);
  }
  std::vector<uint8_t> contents(arena.size());
  device.copyToHost(contents.data(), arena.base(), contents.size());
  for (int i = 0; i < 3; ++i)
    for (uint64_t j = 0; j < sizes[i]; ++j)
      ASSERT_EQ(contents[offsets[i] + j], i + 1) << "buffer " << i;
  EXPECT_EQ(contents[200], 0);   // between the first two buffers
  EXPECT_EQ(contents[40959], 0); // just before the third

  try {
    arena.at(100, 4);
    FAIL() << "an unaligned offset was accepted";
  } catch (const CudaError &error) {
    EXPECT_EQ(error.kind(), CudaErrorKind::InvalidArgument);
    EXPECT_STREQ(error.what(), "the test arena: a buffer of 4 bytes at offset "
                               "100 is not 256-byte aligned");
  }
  try {
    arena.at(65280, 512);
    FAIL() << "a buffer past the end was accepted";
  } catch (const CudaError &error) {
    EXPECT_STREQ(error.what(), "the test arena: a buffer of 512 bytes at "
                               "offset 65280 does not fit in the arena's "
                               "65536 bytes");
  }
}

TEST(CudaDeviceGpu, PersistentPoolBumpAllocates) {
  AMPC_REQUIRE_GPU(device);
  PersistentPool pool(device, 1024, "the persistent buffers");
  const CUdeviceptr weights = pool.allocate(10, "w");
  const CUdeviceptr moments = pool.allocate(300, "m");
  const CUdeviceptr scale = pool.allocate(4, "s");
  EXPECT_EQ(weights, pool.base());
  EXPECT_EQ(moments, pool.base() + 256);
  EXPECT_EQ(scale, pool.base() + 768);
  EXPECT_EQ(pool.used(), 772u);
  try {
    pool.allocate(256, "v");
    FAIL() << "a full pool accepted another buffer";
  } catch (const CudaError &error) {
    EXPECT_STREQ(error.what(), "no room for v in the persistent buffers: 256 "
                               "bytes at offset 1024 exceed the pool's 1024 "
                               "bytes");
  }
}

TEST(CudaDeviceGpu, OutOfMemorySaysHowMuchWasAskedAndIsFree) {
  AMPC_REQUIRE_GPU(device);
  const uint64_t absurd = 1ull << 50; // 1 PiB
  try {
    device.allocate(absurd, "an absurd test buffer");
    FAIL() << "a 1 PiB allocation succeeded";
  } catch (const CudaError &error) {
    const std::string message = error.what();
    std::printf("%s\n", message.c_str());
    EXPECT_EQ(error.kind(), CudaErrorKind::OutOfMemory);
    EXPECT_TRUE(contains(message, "out of GPU memory allocating an absurd "
                                  "test buffer: 1125.9 TB (1125899906842624 "
                                  "bytes) requested, "))
        << message;
    EXPECT_TRUE(contains(message, " free on GPU 0 (" + device.info().name + ")")) << message;
    EXPECT_TRUE(contains(message, ": compile with --memory-budget ")) << message;
  }
  // The device is still usable, and counts what it holds.
  const uint64_t held = device.allocatedBytes();
  {
    DeviceAllocation small = device.allocate(4096, "a small buffer");
    EXPECT_TRUE(small);
    EXPECT_EQ(device.allocatedBytes(), held + 4096);
  }
  EXPECT_EQ(device.allocatedBytes(), held);
}

TEST(CudaDeviceGpu, DriverOlderThanRequiredIsRefused) {
  AMPC_REQUIRE_GPU(device);
  DriverLoadOptions options;
  options.requiredVersion = 99000;
  try {
    loadDriverApi(options);
    FAIL() << "a driver for CUDA 99.0 was found";
  } catch (const CudaError &error) {
    EXPECT_EQ(error.kind(), CudaErrorKind::DriverTooOld);
    EXPECT_EQ(error.what(), driverTooOldMessage(device.api().driverVersion, 99000,
                                                "this program's kernels (compiled with CUDA " +
                                                    formatCudaVersion(kToolkitVersion) + ")"));
  }
}

TEST(CudaDeviceGpu, DeviceIndexOutOfRange) {
  AMPC_REQUIRE_GPU(device);
  DeviceOptions options;
  options.index = 4096;
  try {
    Device other(options);
    FAIL() << "device 4096 opened";
  } catch (const CudaError &error) {
    EXPECT_EQ(error.kind(), CudaErrorKind::NoDevice);
    EXPECT_TRUE(contains(error.what(), "CUDA device 4096 was requested, but "
                                       "only "))
        << error.what();
  }
}

//===----------------------------------------------------------------------===//
// Kernels
//===----------------------------------------------------------------------===//

const char *const kTestKernels = R"(
extern "C" __global__ void ampc_test_axpy(float *y, const float *x, float a,
                                          int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n)
    y[i] = a * x[i] + y[i];
}

// Copies n floats into dynamic shared memory, then thread 0 sums them.
extern "C" __global__ void ampc_test_shared_sum(const float *x, float *sum,
                                                int n) {
  extern __shared__ float tile[];
  for (int i = threadIdx.x; i < n; i += blockDim.x)
    tile[i] = x[i];
  __syncthreads();
  if (threadIdx.x == 0) {
    float total = 0.0f;
    for (int i = 0; i < n; ++i)
      total += tile[i];
    *sum = total;
  }
}
)";

/// The test kernels as the compiler ships kernels: sm_80 and sm_90 cubins
/// and PTX (compute_80 here, so forcing the PTX works on 8.x GPUs too).
const KernelBinaries &testBinaries() {
  static const KernelBinaries binaries = [] {
    KernelBinaries compiled;
    compiled.cubins.push_back({80, compileToCubin(kTestKernels, "test_kernels.cu", "sm_80")});
    compiled.cubins.push_back({90, compileToCubin(kTestKernels, "test_kernels.cu", "sm_90")});
    compiled.ptx = compileToPtx(kTestKernels, "test_kernels.cu", "compute_80");
    compiled.ptxArch = 80;
    return compiled;
  }();
  return binaries;
}

/// y = 2.5 x + y over 1000 elements with the module's axpy.
void checkAxpy(Device &device, Module &module) {
  const int n = 1000;
  std::vector<double> x(n), y(n);
  for (int i = 0; i < n; ++i) {
    x[i] = i;
    y[i] = 1000 - i;
  }
  DeviceAllocation xBuffer = upload(device, x, DType::F32, "x");
  DeviceAllocation yBuffer = upload(device, y, DType::F32, "y");
  CUdeviceptr yPointer = yBuffer.pointer(), xPointer = xBuffer.pointer();
  float a = 2.5f;
  int count = n;
  module.kernel("ampc_test_axpy")
      .launch(LaunchConfig::linear((n + 127) / 128, 128), {&yPointer, &xPointer, &a, &count});
  const std::vector<double> result = download(device, yPointer, n, DType::F32);
  for (int i = 0; i < n; ++i)
    ASSERT_EQ(result[i], 2.5 * i + (1000 - i)) << i;
}

TEST(CudaModuleGpu, LaunchesFromTheCubin) {
  AMPC_REQUIRE_GPU(device);
  Module module(device, testBinaries(), "the test kernels");
  const int major = device.info().computeMajor;
  if (major == 8 || major == 9) {
    EXPECT_EQ(module.loadedBinary().kind, BinaryChoice::Cubin);
    EXPECT_EQ(module.loadedBinary().arch / 10, major);
  } else {
    EXPECT_EQ(module.loadedBinary().kind, BinaryChoice::Ptx);
  }
  std::printf("loaded %s\n", module.loadedBinary().reason.c_str());
  checkAxpy(device, module);
}

TEST(CudaModuleGpu, LaunchesFromForcedPtx) {
  AMPC_REQUIRE_GPU(device);
  ModuleOptions options;
  options.forcePtx = true;
  Module module(device, testBinaries(), "the test kernels", options);
  EXPECT_EQ(module.loadedBinary().kind, BinaryChoice::Ptx);
  checkAxpy(device, module);
}

TEST(CudaModuleGpu, CachesKernelsAndNamesMissingOnes) {
  AMPC_REQUIRE_GPU(device);
  Module module(device, testBinaries(), "the test kernels");
  Kernel &axpy = module.kernel("ampc_test_axpy");
  EXPECT_EQ(&module.kernel("ampc_test_axpy"), &axpy);
  EXPECT_NE(axpy.function(), nullptr);
  try {
    module.kernel("ampc_test_nonexistent");
    FAIL() << "a missing kernel was found";
  } catch (const CudaError &error) {
    EXPECT_EQ(error.kind(), CudaErrorKind::KernelLoad);
    EXPECT_STREQ(error.what(), "the test kernels has no kernel named 'ampc_test_nonexistent'");
  }
}

TEST(CudaModuleGpu, OptsInToLargeDynamicSharedMemory) {
  AMPC_REQUIRE_GPU(device);
  Module module(device, testBinaries(), "the test kernels");
  const int n = 20000; // 80,000 bytes: beyond the default 48 KiB
  const unsigned shared = n * sizeof(float);
  if (static_cast<unsigned>(device.info().sharedMemoryPerBlockOptin) < shared)
    GTEST_SKIP() << "the GPU allows only " << device.info().sharedMemoryPerBlockOptin
                 << " bytes of shared memory per block";
  std::vector<double> x(n);
  for (int i = 0; i < n; ++i)
    x[i] = i % 7; // integer partial sums stay exact in f32
  DeviceAllocation xBuffer = upload(device, x, DType::F32, "x");
  DeviceAllocation sumBuffer = device.allocate(4, "sum");
  CUdeviceptr xPointer = xBuffer.pointer(), sumPointer = sumBuffer.pointer();
  int count = n;
  module.kernel("ampc_test_shared_sum")
      .launch(LaunchConfig::linear(1, 256, shared), {&xPointer, &sumPointer, &count});
  EXPECT_EQ(download(device, sumPointer, 1, DType::F32)[0],
            std::accumulate(x.begin(), x.end(), 0.0));

  // More than the GPU has is refused before launching.
  try {
    module.kernel("ampc_test_shared_sum")
        .launch(LaunchConfig::linear(1, 256, device.info().sharedMemoryPerBlockOptin + 1024),
                {&xPointer, &sumPointer, &count});
    FAIL() << "a launch beyond the GPU's shared memory was accepted";
  } catch (const CudaError &error) {
    EXPECT_EQ(error.kind(), CudaErrorKind::InvalidArgument);
    EXPECT_TRUE(contains(error.what(), "kernel 'ampc_test_shared_sum' of the "
                                       "test kernels asks for "))
        << error.what();
  }
}

TEST(CudaModuleGpu, RejectedLaunchNamesTheKernelAndConfiguration) {
  AMPC_REQUIRE_GPU(device);
  Module module(device, testBinaries(), "the test kernels");
  CUdeviceptr none = 0;
  float a = 0;
  int count = 0;
  LaunchConfig config = LaunchConfig::linear(1, 4096); // > 1024 threads
  try {
    module.kernel("ampc_test_axpy").launch(config, {&none, &none, &a, &count});
    FAIL() << "a block of 4096 threads was launched";
  } catch (const CudaError &error) {
    EXPECT_EQ(error.kind(), CudaErrorKind::DriverCall);
    EXPECT_TRUE(contains(error.what(), "cuLaunchKernel failed: "
                                       "CUDA_ERROR_INVALID_VALUE"))
        << error.what();
    EXPECT_TRUE(contains(error.what(), "while launching kernel "
                                       "'ampc_test_axpy' of the test kernels "
                                       "(grid 1x1x1, block 4096x1x1, 0 bytes "
                                       "of dynamic shared memory)"))
        << error.what();
  }
  device.synchronize(); // the stream is unaffected
}

TEST(CudaModuleGpu, BadPtxReportsTheJitLog) {
  AMPC_REQUIRE_GPU(device);
  KernelBinaries broken;
  broken.ptx = ".version 8.0\n.target sm_80\n.address_size 64\n\n"
               ".visible .entry ampc_broken()\n{\n  this is not ptx;\n}\n";
  broken.ptxArch = 80;
  try {
    Module module(device, broken, "the broken kernels");
    FAIL() << "malformed PTX loaded";
  } catch (const CudaError &error) {
    const std::string message = error.what();
    std::printf("%s\n", message.c_str());
    EXPECT_EQ(error.kind(), CudaErrorKind::KernelLoad);
    EXPECT_TRUE(contains(message, "cannot load the broken kernels (compute_80 "
                                  "PTX, JIT-compiled for compute capability"))
        << message;
    EXPECT_TRUE(contains(message, "cuModuleLoadDataEx returned "
                                  "CUDA_ERROR_INVALID_PTX"))
        << message;
    EXPECT_TRUE(contains(message, "; JIT error log:\n")) << message;
  }
}

TEST(CudaModuleGpu, EventsTimeWork) {
  AMPC_REQUIRE_GPU(device);
  Event start(device), end(device);
  DeviceAllocation buffer = device.allocate(64 << 20, "a timed buffer");
  start.record();
  device.memsetAsync(buffer.pointer(), 1, buffer.bytes());
  end.record();
  end.synchronize();
  const float milliseconds = Event::elapsedMilliseconds(start, end);
  EXPECT_GE(milliseconds, 0.0f);
  EXPECT_LT(milliseconds, 10000.0f);
}

} // namespace
