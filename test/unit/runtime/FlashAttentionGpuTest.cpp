//===- FlashAttentionGpuTest.cpp - Flash attention on a GPU vs the CPU ----===//
//
// Compiles runtime/cuda/device/FlashAttention.cuh (and the tensor-core kernels of
// FlashAttentionMma.cuh, for bf16 and f16, as a second module) to PTX (compute_80) with
// NVRTC, loads it through the driver API and runs the forward and backward
// kernels (head dim 64; bf16, f16 and f32 storage; B=2 x H=3 slices with
// T = S = 70 unmasked and T = 37, S = 70 causal, so tiles are partial and
// the causal offset S - T is non-zero), each operand contiguous or, as the
// compiler lays attention out, q, k, v read in place from a packed
// [B, T, 3 H D] projection, o and dO [B, T, H D], dq, dk, dv written into one
// packed gradient buffer. o, lse, dq, dk and dv are compared with the CPU
// reference computed in double on the same (rounded) inputs by
// ||gpu - ref|| / ||ref||. Outputs are poisoned with NaN bytes before each
// launch, so an unwritten element fails the comparison, and every byte
// outside the outputs' windows must stay as it was.
//
// The driver is opened at run time (dlopen of libcuda.so.1) rather than
// linked: the toolkit's stub libcuda.so names itself libcuda.so.1, which a
// machine without a driver does not have, so a linked binary would not even
// start there. Without a GPU (no libcuda.so.1, or cuInit / cuDeviceGet fail)
// every test skips.
//
//===----------------------------------------------------------------------===//

#include "AttentionReference.h"
#include "runtime/cuda/FlashAttentionLayout.h"
#include "runtime/cuda/Nvrtc.h"
#include "runtime/numerics/Float16.h"

#include <cuda.h>
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

namespace {

constexpr int kHeadDim = 64;
constexpr int kBatch = 2, kHeads = 3;
constexpr int kSlices = kBatch * kHeads;
constexpr int kThreads = 128;
constexpr int kRowsPerBlock = 32;            // FlashAttention.cuh's kernels
constexpr int kMmaRowsPerBlock = 64;         // FlashAttentionMma.cuh's tensor-core kernels
constexpr int kMmaForwardRowsPerBlock = 128; // their forward at head dim 64 (two tiles a warp)

/// The driver entry points the test uses, resolved from libcuda.so.1. The
/// names are the ABI symbols cuda.h maps its API names to (the _v2 ones).
struct Driver {
  decltype(&::cuGetErrorName) getErrorName = nullptr;
  decltype(&::cuInit) init = nullptr;
  decltype(&::cuDeviceGetCount) deviceGetCount = nullptr;
  decltype(&::cuDeviceGet) deviceGet = nullptr;
  decltype(&::cuDeviceGetAttribute) deviceGetAttribute = nullptr;
  decltype(&::cuDevicePrimaryCtxRetain) primaryCtxRetain = nullptr;
  decltype(&::cuDevicePrimaryCtxRelease) primaryCtxRelease = nullptr;
  decltype(&::cuCtxSetCurrent) ctxSetCurrent = nullptr;
  decltype(&::cuCtxSynchronize) ctxSynchronize = nullptr;
  decltype(&::cuModuleLoadData) moduleLoadData = nullptr;
  decltype(&::cuModuleUnload) moduleUnload = nullptr;
  decltype(&::cuModuleGetFunction) moduleGetFunction = nullptr;
  decltype(&::cuLaunchKernel) launchKernel = nullptr;
  decltype(&::cuMemAlloc) memAlloc = nullptr;
  decltype(&::cuMemFree) memFree = nullptr;
  decltype(&::cuMemcpyHtoD) memcpyHtoD = nullptr;
  decltype(&::cuMemcpyDtoH) memcpyDtoH = nullptr;
  decltype(&::cuMemsetD8) memsetD8 = nullptr;

  /// Opens libcuda.so.1 and resolves every entry; false if any is missing.
  bool load() {
    void *library = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!library)
      return false;
    bool complete = true;
    auto resolve = [&](auto &entry, const char *symbol) {
      entry = reinterpret_cast<std::remove_reference_t<decltype(entry)>>(dlsym(library, symbol));
      complete = complete && entry != nullptr;
    };
    resolve(getErrorName, "cuGetErrorName");
    resolve(init, "cuInit");
    resolve(deviceGetCount, "cuDeviceGetCount");
    resolve(deviceGet, "cuDeviceGet");
    resolve(deviceGetAttribute, "cuDeviceGetAttribute");
    resolve(primaryCtxRetain, "cuDevicePrimaryCtxRetain");
    resolve(primaryCtxRelease, "cuDevicePrimaryCtxRelease_v2");
    resolve(ctxSetCurrent, "cuCtxSetCurrent");
    resolve(ctxSynchronize, "cuCtxSynchronize");
    resolve(moduleLoadData, "cuModuleLoadData");
    resolve(moduleUnload, "cuModuleUnload");
    resolve(moduleGetFunction, "cuModuleGetFunction");
    resolve(launchKernel, "cuLaunchKernel");
    resolve(memAlloc, "cuMemAlloc_v2");
    resolve(memFree, "cuMemFree_v2");
    resolve(memcpyHtoD, "cuMemcpyHtoD_v2");
    resolve(memcpyDtoH, "cuMemcpyDtoH_v2");
    resolve(memsetD8, "cuMemsetD8_v2");
    return complete;
  }
};

Driver cu;

#define CU_ASSERT(call)                                                                            \
  do {                                                                                             \
    const CUresult result_ = (call);                                                               \
    if (result_ != CUDA_SUCCESS) {                                                                 \
      const char *name_ = nullptr;                                                                 \
      cu.getErrorName(result_, &name_);                                                            \
      FAIL() << #call << " failed: " << (name_ ? name_ : "unknown error");                         \
    }                                                                                              \
  } while (0)

using namespace ampc::test;

/// A device buffer freed on scope exit.
struct DeviceBuffer {
  CUdeviceptr pointer = 0;
  size_t bytes = 0;
  ~DeviceBuffer() {
    if (pointer)
      cu.memFree(pointer);
  }
};

struct Case {
  Storage storage;
  bool tensorCores;
  bool causal;
  int queries;
  int keys;
  /// q, k, v in a packed [B, T, 3 H D] projection, o and dO [B, T, H D], dq, dk, dv in one
  /// packed gradient buffer (T = S).
  bool packed = false;
};

std::string caseName(const ::testing::TestParamInfo<Case> &info) {
  return std::string(storageName(info.param.storage)) + (info.param.tensorCores ? "_mma" : "") +
         (info.param.causal ? "_causal_T" : "_T") + std::to_string(info.param.queries) + "_S" +
         std::to_string(info.param.keys) + (info.param.packed ? "_packed" : "");
}

class FlashAttentionGpu : public ::testing::TestWithParam<Case> {
protected:
  static void SetUpTestSuite() {
    // cuInit fails with CUDA_ERROR_STUB_LIBRARY on the toolkit's stub (if it
    // is installed as libcuda.so.1) and with CUDA_ERROR_NO_DEVICE without a
    // usable GPU.
    if (!cu.load()) {
      skipReason = "no CUDA driver (libcuda.so.1 not found)";
      return;
    }
    // Only a missing driver or GPU skips; any other failure of a driver
    // that is there fails the tests.
    int count = 0;
    const CUresult init = cu.init(0);
    if (init == CUDA_ERROR_STUB_LIBRARY || init == CUDA_ERROR_NO_DEVICE) {
      skipReason = "no CUDA GPU (cuInit: " + std::to_string(init) + ")";
      return;
    }
    if (init != CUDA_SUCCESS || cu.deviceGetCount(&count) != CUDA_SUCCESS) {
      setupError =
          "cuInit or cuDeviceGetCount failed (" + std::to_string(init) + ") with a driver present";
      return;
    }
    if (count == 0) {
      skipReason = "no CUDA GPU (the driver sees none)";
      return;
    }
    if (cu.deviceGet(&device, 0) != CUDA_SUCCESS) {
      setupError = "cuDeviceGet(0) failed with one or more GPUs present";
      return;
    }
    int major = 0;
    cu.deviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device);
    if (major < 8) {
      skipReason = "the flash attention kernels need sm_80 or newer";
      return;
    }
    if (cu.primaryCtxRetain(&context, device) != CUDA_SUCCESS) {
      setupError = "cuDevicePrimaryCtxRetain failed";
      return;
    }
    cu.ctxSetCurrent(context);
    std::vector<std::string> options = ampc::cuda::cudaIncludeOptions();
    // The kernel headers: $AMPC_KERNEL_INCLUDE, else the copy the build
    // puts in kernel-include/ beside this executable.
    options.push_back("-I" + kernelIncludeDirectory());
    // Two modules with the same entry-point names: the fp32-FMA kernels and (for bf16, f16)
    // the tensor-core ones.
    std::string ptx, mmaPtx;
    try {
      ptx = ampc::cuda::compileToPtx(
          "#include \"runtime/cuda/device/FlashAttention.cuh\"\n"
          "AMPC_FLASH_ATTENTION_ENTRY_POINTS(bf16, ampc::flash::Bf16, 64)\n"
          "AMPC_FLASH_ATTENTION_ENTRY_POINTS(f16, ampc::flash::F16, 64)\n"
          "AMPC_FLASH_ATTENTION_ENTRY_POINTS(f32, ampc::flash::F32, 64)\n",
          "flash_attention_gpu_test.cu", "compute_80", options);
      mmaPtx = ampc::cuda::compileToPtx(
          "#include \"runtime/cuda/device/FlashAttentionMma.cuh\"\n"
          "AMPC_FLASH_ATTENTION_MMA_ENTRY_POINTS(bf16, ampc::flash::Bf16, 64)\n"
          "AMPC_FLASH_ATTENTION_MMA_ENTRY_POINTS(f16, ampc::flash::F16, 64)\n",
          "flash_attention_mma_gpu_test.cu", "compute_80", options);
    } catch (const ampc::cuda::NvrtcError &error) {
      setupError = error.what();
      return;
    }
    if (cu.moduleLoadData(&module, ptx.c_str()) != CUDA_SUCCESS) {
      module = nullptr;
      setupError = "cuModuleLoadData rejected the PTX";
    }
    if (cu.moduleLoadData(&mmaModule, mmaPtx.c_str()) != CUDA_SUCCESS) {
      mmaModule = nullptr;
      setupError = "cuModuleLoadData rejected the tensor-core kernels' PTX";
    }
  }

  static void TearDownTestSuite() {
    if (module)
      cu.moduleUnload(module);
    if (mmaModule)
      cu.moduleUnload(mmaModule);
    mmaModule = nullptr;
    if (context)
      cu.primaryCtxRelease(device);
    module = nullptr;
    context = nullptr;
  }

  void SetUp() override {
    if (!skipReason.empty())
      GTEST_SKIP() << skipReason;
    ASSERT_TRUE(setupError.empty()) << setupError;
    ASSERT_NE(module, nullptr);
    ASSERT_NE(mmaModule, nullptr);
    ASSERT_EQ(cu.ctxSetCurrent(context), CUDA_SUCCESS);
  }

  static CUfunction function(const std::string &name, bool tensorCores) {
    CUfunction result = nullptr;
    if (cu.moduleGetFunction(&result, tensorCores ? mmaModule : module, name.c_str()) !=
        CUDA_SUCCESS)
      return nullptr;
    return result;
  }

  static inline CUdevice device = 0;
  static inline CUcontext context = nullptr;
  static inline CUmodule module = nullptr;
  static inline CUmodule mmaModule = nullptr;
  static inline std::string skipReason;
  static inline std::string setupError;
};

void upload(DeviceBuffer &buffer, const std::vector<char> &bytes) {
  buffer.bytes = bytes.size();
  ASSERT_EQ(cu.memAlloc(&buffer.pointer, bytes.size()), CUDA_SUCCESS);
  ASSERT_EQ(cu.memcpyHtoD(buffer.pointer, bytes.data(), bytes.size()), CUDA_SUCCESS);
}

/// Allocates \p bytes filled with 0xff (NaN in every storage type).
void allocatePoisoned(DeviceBuffer &buffer, size_t bytes) {
  buffer.bytes = bytes;
  ASSERT_EQ(cu.memAlloc(&buffer.pointer, bytes), CUDA_SUCCESS);
  ASSERT_EQ(cu.memsetD8(buffer.pointer, 0xff, bytes), CUDA_SUCCESS);
}

std::vector<char> download(const DeviceBuffer &buffer) {
  std::vector<char> bytes(buffer.bytes);
  EXPECT_EQ(cu.memcpyDtoH(bytes.data(), buffer.pointer, bytes.size()), CUDA_SUCCESS);
  return bytes;
}

std::vector<double> downloadFloats(const DeviceBuffer &buffer) {
  return decode(download(buffer), Storage::F32);
}

TEST_P(FlashAttentionGpu, ForwardAndBackwardMatchTheCpuReference) {
  const Case c = GetParam();
  const int T = c.queries, S = c.keys, D = kHeadDim;
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  const float scaleF = static_cast<float>(scale);
  const std::string suffix = std::string(storageName(c.storage)) + "_d64";
  const std::string causal = c.causal ? "_causal" : "";
  const bool mma = c.tensorCores;
  CUfunction forward = function("ampc_flash_attention_fwd_" + suffix + causal, mma);
  CUfunction delta = function("ampc_flash_attention_bwd_delta_" + suffix, mma);
  CUfunction dq = function("ampc_flash_attention_bwd_dq_" + suffix + causal, mma);
  CUfunction dkdv = function("ampc_flash_attention_bwd_dkdv_" + suffix + causal, mma);
  ASSERT_TRUE(forward && delta && dq && dkdv);

  // Fresh inputs per case (seeded by the case, so a failure reproduces).
  ASSERT_TRUE(!c.packed || T == S) << "a packed projection has as many keys as queries";
  const AttentionPlacement p = c.packed ? AttentionPlacement::packed(kBatch, kHeads, T, D)
                                        : AttentionPlacement::contiguous(kBatch, kHeads, T, S, D);
  std::mt19937 generator(1234u + 17u * static_cast<unsigned>(c.storage) + (c.causal ? 1u : 0u));
  const size_t qCount = static_cast<size_t>(kSlices) * T * D;
  const size_t kCount = static_cast<size_t>(kSlices) * S * D;
  const std::vector<double> q = randomInputs(qCount, c.storage, generator);
  const std::vector<double> k = randomInputs(kCount, c.storage, generator);
  const std::vector<double> v = randomInputs(kCount, c.storage, generator);
  const std::vector<double> dy = randomInputs(qCount, c.storage, generator);

  // q, k, v in one input buffer and dO in its own, where the placement puts them; o and the
  // gradient buffer (dq, dk, dv where q, k, v are) poisoned.
  std::vector<double> inputs(p.inputElements, 0.0), dOValues(p.outputElements, 0.0);
  p.place(inputs, q, p.q, T);
  p.place(inputs, k, p.k, S);
  p.place(inputs, v, p.v, S);
  p.place(dOValues, dy, p.o, T);
  const size_t bytes = elementBytes(c.storage);
  DeviceBuffer inputBuf, dyBuf, oBuf, lseBuf, deltaBuf, gradientBuf;
  upload(inputBuf, encode(inputs, c.storage));
  upload(dyBuf, encode(dOValues, c.storage));
  allocatePoisoned(oBuf, p.outputElements * bytes);
  allocatePoisoned(lseBuf, static_cast<size_t>(kSlices) * T * 4);
  allocatePoisoned(deltaBuf, static_cast<size_t>(kSlices) * T * 4);
  allocatePoisoned(gradientBuf, p.inputElements * bytes);
  if (HasFatalFailure())
    return;
  const std::vector<char> poisonedOutputs = download(oBuf),
                          poisonedGradients = download(gradientBuf);

  // Each pointer at its operand's first element; the strides go in the layout argument.
  auto at = [&](const DeviceBuffer &buffer, const Placement &placement) -> CUdeviceptr {
    return buffer.pointer + placement.offset * bytes;
  };
  auto strides = [](const Placement &placement) {
    return ampc::cuda::FlashOperandStrides{placement.batch, placement.head, placement.row};
  };
  CUdeviceptr qPtr = at(inputBuf, p.q), kPtr = at(inputBuf, p.k), vPtr = at(inputBuf, p.v),
              dyPtr = at(dyBuf, p.o), oPtr = at(oBuf, p.o), dqPtr = at(gradientBuf, p.q),
              dkPtr = at(gradientBuf, p.k), dvPtr = at(gradientBuf, p.v);
  ampc::cuda::FlashLayout layout;
  layout.heads = kHeads;
  layout.q = strides(p.q);
  layout.k = strides(p.k);
  layout.v = strides(p.v);
  layout.o = layout.dO = strides(p.o);

  int queries = T, keys = S;
  const int rowsPerBlock = mma ? kMmaRowsPerBlock : kRowsPerBlock;
  const unsigned queryBlocks = (T + rowsPerBlock - 1) / rowsPerBlock;
  const unsigned keyBlocks = (S + rowsPerBlock - 1) / rowsPerBlock;
  const int forwardRows = mma ? kMmaForwardRowsPerBlock : kRowsPerBlock;
  const unsigned forwardBlocks = (T + forwardRows - 1) / forwardRows;
  {
    void *args[] = {&qPtr,           &kPtr,    &vPtr, &oPtr,
                    &lseBuf.pointer, &queries, &keys, const_cast<float *>(&scaleF),
                    &layout};
    CU_ASSERT(cu.launchKernel(forward, forwardBlocks, kSlices, 1, kThreads, 1, 1, 0, nullptr, args,
                              nullptr));
  }
  {
    long long rows = static_cast<long long>(kSlices) * T;
    void *args[] = {&oPtr, &dyPtr, &deltaBuf.pointer, &rows, &queries, &layout};
    const unsigned blocks = static_cast<unsigned>((rows + 3) / 4);
    CU_ASSERT(cu.launchKernel(delta, blocks, 1, 1, kThreads, 1, 1, 0, nullptr, args, nullptr));
  }
  {
    void *args[] = {&qPtr,           &kPtr,
                    &vPtr,           &dyPtr,
                    &lseBuf.pointer, &deltaBuf.pointer,
                    &dqPtr,          &queries,
                    &keys,           const_cast<float *>(&scaleF),
                    &layout};
    CU_ASSERT(
        cu.launchKernel(dq, queryBlocks, kSlices, 1, kThreads, 1, 1, 0, nullptr, args, nullptr));
  }
  {
    void *args[] = {&qPtr,
                    &kPtr,
                    &vPtr,
                    &dyPtr,
                    &lseBuf.pointer,
                    &deltaBuf.pointer,
                    &dkPtr,
                    &dvPtr,
                    &queries,
                    &keys,
                    const_cast<float *>(&scaleF),
                    &layout};
    CU_ASSERT(
        cu.launchKernel(dkdv, keyBlocks, kSlices, 1, kThreads, 1, 1, 0, nullptr, args, nullptr));
  }
  CU_ASSERT(cu.ctxSynchronize());

  // The reference, in double on the same rounded inputs.
  const AttentionExpected expected =
      referenceAttention(q, k, v, dy, kSlices, T, S, D, scale, c.causal);

  // bf16 / f16 storage rounds every output (and o, which feeds delta) to 8
  // or 11 significant bits; f32 storage leaves only fp32 arithmetic.
  const double tolerance = c.storage == Storage::F32 ? 1e-4 : 2e-2;
  const std::vector<char> outputs = download(oBuf), gradientBytes = download(gradientBuf);
  const std::vector<double> o = decode(outputs, c.storage),
                            gradients = decode(gradientBytes, c.storage);
  EXPECT_LT(relativeError(p.gather(o, p.o, T), expected.o), tolerance) << "o";
  EXPECT_LT(relativeError(downloadFloats(lseBuf), expected.lse), 1e-5) << "lse";
  EXPECT_LT(relativeError(p.gather(gradients, p.q, T), expected.dq), tolerance) << "dq";
  EXPECT_LT(relativeError(p.gather(gradients, p.k, S), expected.dk), tolerance) << "dk";
  EXPECT_LT(relativeError(p.gather(gradients, p.v, S), expected.dv), tolerance) << "dv";
  EXPECT_EQ(
      changedOutside(outputs, poisonedOutputs, p.covered(p.outputElements, {{p.o, T}}), c.storage),
      0u)
      << "o's buffer outside o";
  EXPECT_EQ(changedOutside(gradientBytes, poisonedGradients,
                           p.covered(p.inputElements, {{p.q, T}, {p.k, S}, {p.v, S}}), c.storage),
            0u)
      << "the gradient buffer outside dq, dk and dv";
}

INSTANTIATE_TEST_SUITE_P(Cases, FlashAttentionGpu,
                         ::testing::Values(Case{Storage::Bf16, false, false, 70, 70},
                                           Case{Storage::Bf16, false, true, 37, 70},
                                           Case{Storage::F16, false, false, 70, 70},
                                           Case{Storage::F16, false, true, 37, 70},
                                           Case{Storage::F32, false, false, 70, 70},
                                           Case{Storage::F32, false, true, 37, 70},
                                           Case{Storage::Bf16, true, false, 70, 70},
                                           Case{Storage::Bf16, true, true, 37, 70},
                                           Case{Storage::Bf16, true, true, 200, 200},
                                           Case{Storage::F16, true, false, 70, 70},
                                           Case{Storage::F16, true, true, 37, 70},
                                           // As the compiler lays attention out: packed.
                                           Case{Storage::Bf16, true, true, 100, 100, true},
                                           Case{Storage::F16, true, false, 80, 80, true},
                                           Case{Storage::F32, false, true, 100, 100, true},
                                           Case{Storage::Bf16, false, false, 80, 80, true}),
                         caseName);

} // namespace
