//===- CudaErrorsTest.cpp - The CUDA backend's user-facing messages -------===//
//
// The exact wording of every message a user meets when the GPU path cannot
// run: no driver, the toolkit stub, no GPU, a driver too old for the
// kernels, a GPU without bf16, out of memory, and failed driver calls. They
// are built by pure functions (runtime/cuda/Errors.h), so no GPU is needed.
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/Errors.h"

#include <gtest/gtest.h>

namespace {

using namespace ampc::cuda;

TEST(CudaErrors, FormatsCudaVersions) {
  EXPECT_EQ(formatCudaVersion(13000), "13.0");
  EXPECT_EQ(formatCudaVersion(12040), "12.4");
  EXPECT_EQ(formatCudaVersion(12080), "12.8");
  EXPECT_EQ(formatCudaVersion(13010), "13.1");
}

TEST(CudaErrors, FormatsBytesInDecimalUnits) {
  EXPECT_EQ(formatBytes(0), "0 B");
  EXPECT_EQ(formatBytes(512), "512 B");
  EXPECT_EQ(formatBytes(131072), "131.1 kB");
  EXPECT_EQ(formatBytes(999999), "1.0 MB");
  EXPECT_EQ(formatBytes(33554432), "33.6 MB");
  EXPECT_EQ(formatBytes(12104761856ull), "12.1 GB");
  EXPECT_EQ(formatBytes(85899345920ull), "85.9 GB");
}

TEST(CudaErrors, NamesTheFirstDriverBranchOfEachCudaRelease) {
  EXPECT_EQ(minimumDriverBranch(13000), "R580");
  EXPECT_EQ(minimumDriverBranch(13010), "R580");
  EXPECT_EQ(minimumDriverBranch(12040), "R525");
  EXPECT_EQ(minimumDriverBranch(99000), "");
}

TEST(CudaErrors, ToolkitStubIsNotADriver) {
  EXPECT_EQ(stubDriverMessage("libcuda.so"),
            "no NVIDIA driver found (libcuda.so is the CUDA toolkit's stub "
            "library, not a driver): use --device cpu");
}

TEST(CudaErrors, NoDevice) {
  EXPECT_EQ(noDeviceMessage("cuInit returned CUDA_ERROR_NO_DEVICE: no "
                            "CUDA-capable device is detected"),
            "no CUDA GPU found (cuInit returned CUDA_ERROR_NO_DEVICE: no "
            "CUDA-capable device is detected): use --device cpu");
  EXPECT_EQ(deviceIndexMessage(2, 1),
            "CUDA device 2 was requested, but only 1 GPU is visible (devices "
            "are numbered from 0; CUDA_VISIBLE_DEVICES limits which are "
            "visible)");
  EXPECT_EQ(deviceIndexMessage(8, 4),
            "CUDA device 8 was requested, but only 4 GPUs are visible "
            "(devices are numbered from 0; CUDA_VISIBLE_DEVICES limits which "
            "are visible)");
}

TEST(CudaErrors, DriverTooOldSaysWhatIsInstalledAndWhatIsNeeded) {
  EXPECT_EQ(driverTooOldMessage(12040, 13000,
                                "this program's kernels (compiled with CUDA "
                                "13.0)"),
            "the NVIDIA driver is too old: it supports CUDA 12.4, and CUDA "
            "13.0 or newer (driver R580 or later) is needed for this "
            "program's kernels (compiled with CUDA 13.0): update the NVIDIA "
            "driver or use --device cpu");
  // PTX from a newer minor release needs that release's driver.
  EXPECT_EQ(driverTooOldMessage(13000, 13010,
                                "the PTX of the micro_step kernels (from "
                                "CUDA 13.1 NVRTC)"),
            "the NVIDIA driver is too old: it supports CUDA 13.0, and CUDA "
            "13.1 or newer (driver R580 or later) is needed for the PTX of "
            "the micro_step kernels (from CUDA 13.1 NVRTC): update the "
            "NVIDIA driver or use --device cpu");
}

TEST(CudaErrors, Bf16NeedsAmpere) {
  EXPECT_EQ(bf16UnsupportedMessage(0, "Tesla V100-SXM2-16GB", 7, 0),
            "GPU 0 (Tesla V100-SXM2-16GB) has compute capability 7.0 and "
            "cannot run bf16 kernels (they need 8.0 or newer): compile the "
            "model with --precision fp16");
}

TEST(CudaErrors, SuggestedBudgetsLeaveHeadroomAndPrintExactly) {
  EXPECT_EQ(suggestedMemoryBudget(5200000000ull), 4600000000ull);
  EXPECT_EQ(suggestedMemoryBudget(79000000000ull), 71100000000ull);
  EXPECT_EQ(suggestedMemoryBudget(1234567890ull), 1100000000ull);
  EXPECT_EQ(suggestedMemoryBudget(800000000ull), 720000000ull);
  EXPECT_EQ(suggestedMemoryBudget(1000000ull), 0u);
  EXPECT_EQ(formatBudget(4600000000ull), "4.6GB");
  EXPECT_EQ(formatBudget(71100000000ull), "71.1GB");
  EXPECT_EQ(formatBudget(720000000ull), "720MB");
}

TEST(CudaErrors, OutOfMemorySaysRequestedFreeTotalAndABudget) {
  EXPECT_EQ(outOfMemoryMessage("the micro_step arena", 12104761856ull, 79000000000ull,
                               85000000000ull, 0, 0, "NVIDIA H100 80GB HBM3"),
            "out of GPU memory allocating the micro_step arena: 12.1 GB "
            "(12104761856 bytes) requested, 79.0 GB of 85.0 GB free on GPU 0 "
            "(NVIDIA H100 80GB HBM3): compile with --memory-budget 71.1GB or "
            "a smaller batch");
  // What the program already holds (parameters, optimizer state) counts
  // toward the budget; most of the GPU held elsewhere is worth saying.
  EXPECT_EQ(outOfMemoryMessage("the micro_step arena", 12104761856ull, 3200000000ull,
                               85000000000ull, 2000000000ull, 1, "NVIDIA A100"),
            "out of GPU memory allocating the micro_step arena: 12.1 GB "
            "(12104761856 bytes) requested, 3.2 GB of 85.0 GB free on GPU 1 "
            "(NVIDIA A100) with 2.0 GB already held by this program: compile "
            "with --memory-budget 4.6GB or a smaller batch, or end the other "
            "processes using the GPU (nvidia-smi)");
  EXPECT_EQ(outOfMemoryMessage("the cuBLASLt workspace", 33554432, 100000, 85000000000ull, 0, 0,
                               "NVIDIA H100"),
            "out of GPU memory allocating the cuBLASLt workspace: 33.6 MB "
            "(33554432 bytes) requested, 100.0 kB of 85.0 GB free on GPU 0 "
            "(NVIDIA H100): the GPU is full; end the processes that hold its "
            "memory (nvidia-smi lists them) or use --device cpu");
}

TEST(CudaErrors, DriverCallNamesTheCallTheErrorAndTheActivity) {
  EXPECT_EQ(driverCallMessage("cuLaunchKernel", "CUDA_ERROR_INVALID_VALUE", "invalid argument",
                              "launching kernel 'k' of m"),
            "cuLaunchKernel failed: CUDA_ERROR_INVALID_VALUE (invalid "
            "argument) while launching kernel 'k' of m");
  EXPECT_EQ(driverCallMessage("cuCtxSynchronize", "CUresult 999", "", ""),
            "cuCtxSynchronize failed: CUresult 999");
}

TEST(CudaErrors, CudaErrorCarriesKindAndCode) {
  const CudaError error(CudaErrorKind::OutOfMemory, "out of GPU memory", 2);
  EXPECT_EQ(error.kind(), CudaErrorKind::OutOfMemory);
  EXPECT_EQ(error.code(), 2);
  EXPECT_STREQ(error.what(), "out of GPU memory");
}

} // namespace
