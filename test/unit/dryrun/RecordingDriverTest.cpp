//===- RecordingDriverTest.cpp - The recording driver, device layer -------===//
//
// The recording library's own checks, driven through the CUDA backend's
// device layer (Device, Module, Kernel, Matmul, GraphCapture) with no plan
// behind them: copies and memsets past an allocation or into a freed one, a
// double free, a graph replayed after its memory was freed, work that a
// stream capture cannot hold (a sync, an allocation, a pageable copy),
// pinned memory rewritten or freed before the stream was seen to reach a copy
// from it,
// dynamic shared memory without opting in, a pointer argument in no
// allocation, cuBLASLt matrices over their allocations, misaligned, or with
// a bias vector too short. Kernels come from the tiny GPT's plan; their
// parameter lists read from the sm_90 cubin must equal the sm_80 cubin's and
// the PTX's, three outputs of NVRTC read independently.
//
//===----------------------------------------------------------------------===//

#include "AllocationTable.h"
#include "DryRunTestUtils.h"
#include "KernelBinaryInfo.h"
#include "runtime/cuda/CublasLt.h"
#include "runtime/cuda/CudaGraph.h"
#include "runtime/cuda/Memory.h"
#include "runtime/cuda/Module.h"

#include <gtest/gtest.h>

#include <cstring>
#include <memory>

namespace ampc::dryrun {
namespace {

using cuda::CudaError;

const plan::Plan &tinyPlan() {
  static const plan::Plan plan = plan::loadPlan(AMPC_DRYRUN_TINY_PLAN);
  return plan;
}

/// A fresh recording driver (an H100) and a Device on it.
class RecordingDriver : public ::testing::Test {
protected:
  void SetUp() override {
    const RecordingLibrary &library = recordingLibraryInProcess();
    library.reset(nullptr);
    cuda::DeviceOptions options;
    options.api = library.api;
    device = std::make_unique<cuda::Device>(options);
  }

  const cuda::DriverApi &api() const { return device->api(); }

  /// The violations of \p check recorded so far.
  std::vector<Event> violations(const std::string &check) const {
    std::vector<Event> found;
    for (const Event &event : recordingLibraryInProcess().events())
      if (event.kind == EventKind::Violation && event.what == check)
        found.push_back(event);
    return found;
  }

  /// Expects exactly one violation of \p check, containing \p text.
  void expectViolation(const std::string &check, const std::string &text) {
    const std::vector<Event> found = violations(check);
    ASSERT_EQ(found.size(), 1u) << recordingLibraryInProcess().trace();
    EXPECT_NE(found[0].text.find(text), std::string::npos) << found[0].text;
  }

  /// The error \p action throws ("" if none).
  template <typename Action> static std::string errorOf(Action action) {
    try {
      action();
    } catch (const CudaError &error) {
      return error.what();
    }
    return "";
  }

  /// The first generated kernel of the tiny plan, loaded.
  cuda::Kernel &generatedKernel() {
    const plan::DeviceKernel &kernel = tinyPlan().device.kernels.front();
    const plan::DeviceModule &source = tinyPlan().device.modules[kernel.module];
    cuda::KernelBinaries binaries;
    binaries.cubins.push_back(
        {90, std::vector<char>(source.cubinSm90.begin(), source.cubinSm90.end())});
    module = std::make_unique<cuda::Module>(*device, binaries, source.name);
    return module->kernel(kernel.entry);
  }

  std::unique_ptr<cuda::Device> device;
  std::unique_ptr<cuda::Module> module;
};

//===----------------------------------------------------------------------===//
// What the binaries say
//===----------------------------------------------------------------------===//

TEST(KernelBinaryInfo, CubinsAndPtxAgreeOnEveryKernelsParameters) {
  for (const plan::DeviceModule &module : tinyPlan().device.modules) {
    const std::vector<KernelInfo> sm90 =
        readCubinKernels(module.cubinSm90.data(), module.cubinSm90.size());
    const std::vector<KernelInfo> sm80 =
        readCubinKernels(module.cubinSm80.data(), module.cubinSm80.size());
    const std::vector<KernelInfo> ptx = readPtxKernels(module.ptx);
    ASSERT_FALSE(sm90.empty()) << module.name;
    ASSERT_EQ(sm90.size(), ptx.size()) << module.name;
    ASSERT_EQ(sm90.size(), sm80.size()) << module.name;
    for (const KernelInfo &kernel : sm90) {
      EXPECT_EQ(kernel.binary, "sm_90");
      EXPECT_GT(kernel.registers, 0) << kernel.name;
      EXPECT_GT(kernel.maxThreads, 0u) << kernel.name; // __launch_bounds__
      for (const std::vector<KernelInfo> *other : {&sm80, &ptx}) {
        bool found = false;
        for (const KernelInfo &same : *other)
          if (same.name == kernel.name) {
            found = true;
            ASSERT_EQ(same.params.size(), kernel.params.size()) << kernel.name;
            for (size_t i = 0; i < kernel.params.size(); ++i) {
              EXPECT_EQ(same.params[i].size, kernel.params[i].size);
              EXPECT_EQ(same.params[i].offset, kernel.params[i].offset);
            }
            EXPECT_EQ(same.maxThreads, kernel.maxThreads) << kernel.name;
          }
        EXPECT_TRUE(found) << kernel.name << " in " << module.name;
      }
    }
  }
  // Flash attention's entry points: (q, k, v, o, lse, int, int, float, Layout), the 128-byte
  // layout struct by value at its 8-byte alignment.
  bool attention = false;
  for (const plan::DeviceModule &module : tinyPlan().device.modules)
    for (const KernelInfo &kernel :
         readCubinKernels(module.cubinSm90.data(), module.cubinSm90.size()))
      if (kernel.name.find("_fwd_") != std::string::npos) {
        attention = true;
        ASSERT_EQ(kernel.params.size(), 9u);
        EXPECT_EQ(kernel.params[5].size, 4u);
        EXPECT_EQ(kernel.params[7].offset, 48u);
        EXPECT_EQ(kernel.params[8].offset, 56u);
        EXPECT_EQ(kernel.params[8].size, 128u);
        EXPECT_GT(kernel.staticShared, 0u);
        EXPECT_EQ(kernel.maxThreads, 128u);
      }
  EXPECT_TRUE(attention);
}

//===----------------------------------------------------------------------===//
// Memory
//===----------------------------------------------------------------------===//

TEST_F(RecordingDriver, CopyPastTheEndOfAnAllocationIsRejected) {
  cuda::DeviceAllocation buffer = device->allocate(1000, "a buffer");
  const std::vector<char> host(200);
  const std::string error =
      errorOf([&] { device->copyToDevice(buffer.pointer() + 900, host.data(), host.size()); });
  EXPECT_NE(error.find("cuMemcpyHtoDAsync failed: CUDA_ERROR_INVALID_VALUE"), std::string::npos)
      << error;
  expectViolation("extent", "runs 100 bytes past the end of allocation #1");
}

TEST_F(RecordingDriver, MemsetOfFreedMemoryIsRejected) {
  cuda::DeviceAllocation buffer = device->allocate(4096, "a buffer");
  const CUdeviceptr freed = buffer.pointer();
  buffer.release();
  EXPECT_NE(
      errorOf([&] { device->memsetAsync(freed + 64, 0, 16); }).find("CUDA_ERROR_INVALID_VALUE"),
      std::string::npos);
  expectViolation("freed-memory", "lies in allocation #1");
}

TEST_F(RecordingDriver, DoubleFreeIsReported) {
  CUdeviceptr pointer = 0;
  ASSERT_EQ(api().cuMemAlloc(&pointer, 256), CUDA_SUCCESS);
  ASSERT_EQ(api().cuMemFree(pointer), CUDA_SUCCESS);
  EXPECT_EQ(api().cuMemFree(pointer), CUDA_ERROR_INVALID_VALUE);
  expectViolation("free", "freed at call");
}

TEST_F(RecordingDriver, GraphReplayedAfterItsMemoryWasFreed) {
  cuda::DeviceAllocation buffer = device->allocate(4096, "a buffer");
  const CUdeviceptr pointer = buffer.pointer();
  cuda::GraphCapture graph(*device, "a memset", nullptr, /*warmUpRuns=*/0);
  graph.run([&] { device->memsetAsync(pointer, 0, 4096); });
  ASSERT_EQ(graph.mode(), cuda::GraphCapture::Mode::Replaying);
  EXPECT_TRUE(violations("freed-memory").empty());
  buffer.release();
  EXPECT_NE(errorOf([&] { graph.run([] {}); }).find("cuGraphLaunch"), std::string::npos);
  expectViolation("freed-memory", "freed at call");
}

//===----------------------------------------------------------------------===//
// Stream capture
//===----------------------------------------------------------------------===//

/// Captures \p record (no warm-up) and returns the fallback warning.
std::string captureWarning(cuda::Device &device, const std::function<void()> &record) {
  std::string warning;
  cuda::GraphCapture graph(
      device, "the step", [&](const std::string &line) { warning = line; },
      /*warmUpRuns=*/0);
  graph.run(record);
  EXPECT_EQ(graph.mode(), cuda::GraphCapture::Mode::Eager);
  return warning;
}

TEST_F(RecordingDriver, SynchronizeWhileCapturing) {
  const std::string warning = captureWarning(*device, [&] { device->synchronize("a step"); });
  EXPECT_NE(warning.find("cuStreamSynchronize failed: "
                         "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED"),
            std::string::npos)
      << warning;
  expectViolation("capture", "cuStreamSynchronize while stream capture");
}

TEST_F(RecordingDriver, AllocateWhileCapturing) {
  const std::string warning =
      captureWarning(*device, [&] { cuda::DeviceAllocation a = device->allocate(64, "x"); });
  EXPECT_NE(warning.find("cuMemAlloc failed"), std::string::npos) << warning;
  expectViolation("capture", "cuMemAlloc of 64 bytes while stream capture");
}

TEST_F(RecordingDriver, PageableCopyWhileCapturing) {
  cuda::DeviceAllocation buffer = device->allocate(64, "a buffer");
  cuda::PinnedHostBuffer pinned = device->allocatePinned(64, "pinned");
  // From pinned memory the copy is captured; from pageable it cannot be.
  {
    cuda::GraphCapture graph(*device, "a pinned copy", nullptr, 0);
    graph.run([&] { device->copyToDeviceAsync(buffer.pointer(), pinned.data(), 64); });
    EXPECT_EQ(graph.mode(), cuda::GraphCapture::Mode::Replaying);
  }
  EXPECT_TRUE(violations("capture").empty());
  const float pageable = 1.0f;
  captureWarning(*device, [&] { device->copyToDeviceAsync(buffer.pointer(), &pageable, 4); });
  expectViolation("capture", "cuMemcpyHtoDAsync from pageable host memory");
}

TEST_F(RecordingDriver, PinnedSourceRewrittenBeforeTheStreamReachedItsCopy) {
  cuda::DeviceAllocation buffer = device->allocate(256, "a buffer");
  cuda::PinnedHostBuffer pinned = device->allocatePinned(256, "pinned");
  uint8_t *bytes = static_cast<uint8_t *>(pinned.data());
  auto copy = [&](uint8_t value) {
    std::memset(bytes, value, 256);
    device->copyToDeviceAsync(buffer.pointer(), bytes, 256);
  };
  // Waiting on an event recorded after the copy shows the stream is past it.
  copy(1);
  cuda::Event copied(*device, CU_EVENT_DISABLE_TIMING);
  copied.record();
  copied.synchronize();
  copy(2);
  // So does synchronising the stream.
  device->synchronize();
  copy(3);
  device->synchronize();
  EXPECT_TRUE(violations("pinned-reuse").empty()) << recordingLibraryInProcess().trace();
  // An event recorded before the copy does not: the rewrite is found when the stream is.
  cuda::Event before(*device, CU_EVENT_DISABLE_TIMING);
  before.record();
  copy(4);
  before.synchronize();
  std::memset(bytes, 5, 256);
  device->synchronize();
  expectViolation("pinned-reuse", "256 pinned bytes");
  EXPECT_NE(violations("pinned-reuse")[0].text.find("before synchronising, before the stream"),
            std::string::npos);
  // Nor does nothing: queuing the next copy from the rewritten bytes is found at once.
  copy(6);
  copy(7);
  EXPECT_EQ(violations("pinned-reuse").size(), 2u);
  device->synchronize();
}

TEST_F(RecordingDriver, PinnedMemoryFreedWhileItsCopyIsPending) {
  cuda::DeviceAllocation buffer = device->allocate(64, "a buffer");
  cuda::PinnedHostBuffer pinned = device->allocatePinned(64, "pinned");
  device->copyToDeviceAsync(buffer.pointer(), pinned.data(), 64);
  pinned.release();
  expectViolation("pinned-reuse", "cuMemFreeHost of pinned memory that cuMemcpyHtoDAsync");
  device->synchronize();
}

//===----------------------------------------------------------------------===//
// Kernel launches
//===----------------------------------------------------------------------===//

TEST_F(RecordingDriver, DynamicSharedMemoryNeedsOptingIn) {
  cuda::Kernel &kernel = generatedKernel();
  std::vector<uint64_t> values(32, 0); // more than any kernel takes
  std::vector<void *> arguments;
  for (uint64_t &value : values)
    arguments.push_back(&value);
  const CUfunction function = kernel.function();
  EXPECT_EQ(api().cuLaunchKernel(function, 1, 1, 1, 32, 1, 1, 64 * 1024, device->stream(),
                                 arguments.data(), nullptr),
            CUDA_ERROR_INVALID_VALUE);
  expectViolation("shared-memory", "must raise it first");
  // Opting in is allowed up to the device's limit, and makes it launch.
  EXPECT_EQ(api().cuFuncSetAttribute(function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                     300 * 1024),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(api().cuFuncSetAttribute(function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                     64 * 1024),
            CUDA_SUCCESS);
  EXPECT_EQ(api().cuLaunchKernel(function, 1, 1, 1, 32, 1, 1, 64 * 1024, device->stream(),
                                 arguments.data(), nullptr),
            CUDA_SUCCESS);
  EXPECT_EQ(violations("shared-memory").size(), 2u);
}

TEST_F(RecordingDriver, PointerArgumentInNoAllocation) {
  cuda::Kernel &kernel = generatedKernel();
  cuda::DeviceAllocation buffer = device->allocate(4096, "a buffer");
  // A pointer 1 MiB past the buffer: in the gap after it.
  std::vector<uint64_t> values(32, buffer.pointer() + (1u << 20));
  std::vector<void *> arguments;
  for (uint64_t &value : values)
    arguments.push_back(&value);
  kernel.launch(cuda::LaunchConfig::linear(1, 32), arguments);
  const std::vector<Event> found = violations("pointer");
  ASSERT_FALSE(found.empty());
  EXPECT_NE(found[0].text.find("argument 0 of kernel '" + kernel.name() + "': [" +
                               hexAddress(buffer.pointer() + (1u << 20))),
            std::string::npos)
      << found[0].text;
  EXPECT_NE(found[0].text.find("lies in no allocation"), std::string::npos);
}

TEST_F(RecordingDriver, StaleHandlesAndBadImagesAreRejected) {
  cuda::Kernel &kernel = generatedKernel();
  const CUfunction function = kernel.function();
  module.reset(); // unloads the module
  std::vector<uint64_t> values(32, 0);
  std::vector<void *> arguments;
  for (uint64_t &value : values)
    arguments.push_back(&value);
  EXPECT_EQ(api().cuLaunchKernel(function, 1, 1, 1, 32, 1, 1, 0, device->stream(), arguments.data(),
                                 nullptr),
            CUDA_ERROR_INVALID_HANDLE);
  expectViolation("kernel-handle", "not a kernel of a loaded module");

  CUstream stream = nullptr;
  ASSERT_EQ(api().cuStreamCreate(&stream, 0), CUDA_SUCCESS);
  ASSERT_EQ(api().cuStreamDestroy(stream), CUDA_SUCCESS);
  EXPECT_EQ(api().cuMemsetD8Async(0, 0, 0, stream), CUDA_ERROR_INVALID_HANDLE);
  expectViolation("stream", "memset on a stream that does not exist");

  EXPECT_EQ(api().cuGraphLaunch(reinterpret_cast<CUgraphExec>(12345), device->stream()),
            CUDA_ERROR_INVALID_HANDLE);
  expectViolation("graph", "not instantiated or was destroyed");

  const char notACubin[64] = "\x7f"
                             "ELF";
  CUmodule loaded = nullptr;
  EXPECT_EQ(api().cuModuleLoadDataEx(&loaded, notACubin, 0, nullptr, nullptr),
            CUDA_ERROR_INVALID_IMAGE);
  expectViolation("module", "cubin");
}

//===----------------------------------------------------------------------===//
// cuBLASLt
//===----------------------------------------------------------------------===//

/// A 64 x 64 x 64 matmul with its own allocations.
struct SmallMatmul {
  cuda::MatmulDesc desc;
  cuda::DeviceAllocation a, b, d, bias;
  cuda::MatmulOperands operands;

  SmallMatmul(cuda::Device &device, plan::DType dtype, uint64_t dBytes) {
    desc.m = desc.n = desc.k = 64;
    desc.inputType = desc.outputType = dtype;
    const uint64_t bytes = 64 * 64 * plan::dtypeBytes(dtype);
    a = device.allocate(bytes, "A");
    b = device.allocate(bytes, "B");
    d = device.allocate(dBytes ? dBytes : bytes, "D");
    operands.a = a.pointer();
    operands.b = b.pointer();
    operands.d = d.pointer();
  }
};

TEST_F(RecordingDriver, MatmulOutputOverItsAllocation) {
  cuda::Matmul matmul(*device);
  SmallMatmul problem(*device, plan::DType::BF16, 64 * 32 * 2);
  matmul.run(problem.desc, problem.operands);
  expectViolation("cublaslt-layout", "D (64x64, ld 64, 2-byte elements) spans 8192 bytes: [");
}

TEST_F(RecordingDriver, MatmulOperandBelowItsElementAlignment) {
  cuda::Matmul matmul(*device);
  SmallMatmul problem(*device, plan::DType::F32, 64 * 64 * 4 + 256);
  problem.operands.d += 2;
  matmul.run(problem.desc, problem.operands);
  expectViolation("cublaslt-alignment", "is 2-byte aligned, but its elements take 4 bytes");
}

TEST_F(RecordingDriver, MatmulBiasShorterThanTheEpilogueReads) {
  cuda::Matmul matmul(*device);
  SmallMatmul problem(*device, plan::DType::BF16, 0);
  problem.desc.epilogue = cuda::MatmulEpilogue::Bias;
  problem.bias = device->allocate(32, "a bias of 16 elements");
  problem.operands.bias = problem.bias.pointer();
  matmul.run(problem.desc, problem.operands);
  expectViolation("cublaslt-epilogue", "the bias vector (64 elements) spans 128 bytes");
}

TEST_F(RecordingDriver, MatmulWorkspaceSmallerThanItsAlgorithmNeeds) {
  // Through cuBLASLt's API: an algorithm chosen for up to 32 MiB of
  // workspace, then run with none.
  const cuda::CublasLtApi &lt = cuda::cublasLtApi();
  SmallMatmul problem(*device, plan::DType::F32, 0);
  cublasLtHandle_t handle = nullptr;
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t layout = nullptr;
  cublasLtMatmulPreference_t preference = nullptr;
  ASSERT_EQ(lt.cublasLtCreate(&handle), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(lt.cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F),
            CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(lt.cublasLtMatrixLayoutCreate(&layout, CUDA_R_32F, 64, 64, 64), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(lt.cublasLtMatmulPreferenceCreate(&preference), CUBLAS_STATUS_SUCCESS);
  const uint64_t offered = cuda::Matmul::kWorkspaceBytes;
  ASSERT_EQ(lt.cublasLtMatmulPreferenceSetAttribute(
                preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &offered, sizeof offered),
            CUBLAS_STATUS_SUCCESS);
  cublasLtMatmulHeuristicResult_t result = {};
  int returned = 0;
  ASSERT_EQ(lt.cublasLtMatmulAlgoGetHeuristic(handle, desc, layout, layout, layout, layout,
                                              preference, 1, &result, &returned),
            CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(returned, 1);
  ASSERT_GT(result.workspaceSize, 0u);
  const float alpha = 1, beta = 0;
  const auto pointer = [](CUdeviceptr address) { return reinterpret_cast<void *>(address); };
  EXPECT_EQ(lt.cublasLtMatmul(handle, desc, &alpha, pointer(problem.operands.a), layout,
                              pointer(problem.operands.b), layout, &beta,
                              pointer(problem.operands.d), layout, pointer(problem.operands.d),
                              layout, &result.algo, nullptr, 0, device->stream()),
            CUBLAS_STATUS_SUCCESS);
  expectViolation("cublaslt-workspace", "a workspace of 0 bytes, but its "
                                        "algorithm needs");
  lt.cublasLtMatmulPreferenceDestroy(preference);
  lt.cublasLtMatrixLayoutDestroy(layout);
  lt.cublasLtMatmulDescDestroy(desc);
  lt.cublasLtDestroy(handle);
}

} // namespace
} // namespace ampc::dryrun
