//===- CudaModuleSelectTest.cpp - Which kernel binary runs on which GPU ---===//
//
// selectKernelBinary() is how a Module picks among the cubins and the PTX
// the compiler ships: a cubin only within its major version and at or below
// the GPU's minor version, else the PTX at or above its architecture, else
// nothing (with the reason). Pure, so checked here for the GPUs we expect:
// A100 (8.0), A10/RTX 30 (8.6), L4/RTX 40 (8.9), H100 (9.0), B200 (10.0),
// RTX 50 (12.0), and older ones that cannot run the kernels.
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/Module.h"

#include <gtest/gtest.h>

namespace {

using namespace ampc::cuda;

/// What the compiler ships: sm_80 and sm_90 cubins, compute_90 PTX.
KernelBinaries shipped() {
  KernelBinaries binaries;
  binaries.cubins.push_back({80, {'8', '0'}});
  binaries.cubins.push_back({90, {'9', '0'}});
  binaries.ptx = ".version 9.0\n";
  binaries.ptxArch = 90;
  return binaries;
}

TEST(CudaModuleSelect, CubinOfTheSameMajorVersion) {
  const KernelBinaries binaries = shipped();
  for (int minor : {0, 6, 7, 9}) {
    const BinaryChoice choice = selectKernelBinary(binaries, 8, minor);
    EXPECT_EQ(choice.kind, BinaryChoice::Cubin) << "8." << minor;
    EXPECT_EQ(choice.arch, 80);
    EXPECT_EQ(choice.cubinIndex, 0u);
  }
  const BinaryChoice hopper = selectKernelBinary(binaries, 9, 0);
  EXPECT_EQ(hopper.kind, BinaryChoice::Cubin);
  EXPECT_EQ(hopper.arch, 90);
  EXPECT_EQ(hopper.cubinIndex, 1u);
  EXPECT_EQ(hopper.reason, "sm_90 cubin for compute capability 9.0");
}

TEST(CudaModuleSelect, NewestCubinNotAboveTheGpusMinorVersion) {
  KernelBinaries binaries;
  binaries.cubins.push_back({86, {'x'}});
  binaries.cubins.push_back({80, {'x'}});
  binaries.cubins.push_back({89, {'x'}});
  EXPECT_EQ(selectKernelBinary(binaries, 8, 0).arch, 80);
  EXPECT_EQ(selectKernelBinary(binaries, 8, 7).arch, 86);
  EXPECT_EQ(selectKernelBinary(binaries, 8, 9).arch, 89);
  EXPECT_EQ(selectKernelBinary(binaries, 8, 9).cubinIndex, 2u);
}

TEST(CudaModuleSelect, NewerGpusJitThePtx) {
  const KernelBinaries binaries = shipped();
  const BinaryChoice blackwell = selectKernelBinary(binaries, 10, 0);
  EXPECT_EQ(blackwell.kind, BinaryChoice::Ptx);
  EXPECT_EQ(blackwell.arch, 90);
  EXPECT_EQ(blackwell.reason, "compute_90 PTX, JIT-compiled for compute "
                              "capability 10.0 (no sm_100 cubin)");
  EXPECT_EQ(selectKernelBinary(binaries, 12, 0).kind, BinaryChoice::Ptx);
}

TEST(CudaModuleSelect, ForcedPtx) {
  const BinaryChoice choice = selectKernelBinary(shipped(), 9, 0, true);
  EXPECT_EQ(choice.kind, BinaryChoice::Ptx);
  EXPECT_EQ(choice.reason, "compute_90 PTX, JIT-compiled for compute "
                           "capability 9.0 (PTX forced)");
  // compute_90 PTX cannot run on 8.x, even when forced.
  EXPECT_EQ(selectKernelBinary(shipped(), 8, 0, true).kind, BinaryChoice::None);
  KernelBinaries cubinsOnly = shipped();
  cubinsOnly.ptx.clear();
  const BinaryChoice none = selectKernelBinary(cubinsOnly, 9, 0, true);
  EXPECT_EQ(none.kind, BinaryChoice::None);
  EXPECT_EQ(none.reason, "PTX was forced but the module has cubins for sm_80, sm_90");
}

TEST(CudaModuleSelect, OlderGpusHaveNoBinary) {
  const BinaryChoice turing = selectKernelBinary(shipped(), 7, 5);
  EXPECT_EQ(turing.kind, BinaryChoice::None);
  EXPECT_EQ(turing.reason, "no kernel binary runs on compute capability 7.5: the module has "
                           "cubins for sm_80, sm_90 and compute_90 PTX (a cubin runs only "
                           "within its own major version, PTX on its architecture and "
                           "newer)");
  // An sm_90 cubin does not run on a 10.x GPU, and without PTX nothing does.
  KernelBinaries cubinsOnly = shipped();
  cubinsOnly.ptx.clear();
  EXPECT_EQ(selectKernelBinary(cubinsOnly, 10, 0).kind, BinaryChoice::None);
}

} // namespace
