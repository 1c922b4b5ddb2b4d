//===- Module.h - Kernels from cubin or PTX, looked up and launched -------===//
//
// The compiler ships every kernel group as a set of binaries made by NVRTC
// ahead of time (docs/codegen.md): cubins for real architectures (sm_80,
// sm_90) and PTX for a virtual one (compute_90). A Module loads the one that
// fits the GPU:
//
//  * a cubin for sm_XY runs on compute capability X.Z for Z >= Y (SASS is
//    compatible within a major version, never across), so the best cubin is
//    the one with the GPU's major version and the highest minor not above
//    the GPU's: sm_90 for every 9.x, sm_80 for 8.0/8.6/8.9;
//  * otherwise the driver JIT-compiles the PTX, which runs on any GPU at or
//    above its virtual architecture (compute_90 PTX covers 10.x and 12.x).
//
// JIT failures carry the driver's error log (CU_JIT_ERROR_LOG_BUFFER); a
// driver too old for the PTX's ISA version says which CUDA version it needs.
// Kernel handles are looked up once and cached by name; launching a kernel
// with more than 48 KiB of dynamic shared memory opts it in first
// (CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES).
//
//===----------------------------------------------------------------------===//

#ifndef AMPC_RUNTIME_CUDA_MODULE_H
#define AMPC_RUNTIME_CUDA_MODULE_H

#include "runtime/cuda/Device.h"

#include <initializer_list>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace ampc::cuda {

/// A cubin for one real architecture.
struct Cubin {
  int arch = 0; ///< 80 for sm_80, 90 for sm_90
  std::vector<char> image;
};

/// Everything NVRTC produced for one module.
struct KernelBinaries {
  std::vector<Cubin> cubins;
  /// PTX text (empty: none) and its virtual architecture (90: compute_90).
  std::string ptx;
  int ptxArch = 90;
  /// The CUDA version of the NVRTC that produced them (13000 for 13.0):
  /// the driver must support at least this to JIT the PTX.
  int toolkitVersion = kToolkitVersion;
};

/// Which binary a module is loaded from.
struct BinaryChoice {
  enum Kind { Cubin, Ptx, None } kind = None;
  /// For Cubin: the architecture (80, 90); for Ptx: the PTX's.
  int arch = 0;
  /// Index into KernelBinaries::cubins for Cubin.
  size_t cubinIndex = 0;
  /// Why: "sm_90 cubin for compute capability 9.0", "compute_90 PTX, JIT-
  /// compiled for compute capability 10.0 (no sm_100 cubin)", or for None
  /// the reason nothing fits.
  std::string reason;
};

/// Picks the binary for a GPU of compute capability \p major.\p minor (see
/// the file comment); \p forcePtx skips the cubins. Pure: no GPU needed.
BinaryChoice selectKernelBinary(const KernelBinaries &binaries, int major, int minor,
                                bool forcePtx = false);

/// Grid, block and dynamic shared memory of a launch.
struct LaunchConfig {
  unsigned grid[3] = {1, 1, 1};
  unsigned block[3] = {1, 1, 1};
  unsigned sharedBytes = 0;

  static LaunchConfig linear(unsigned gridX, unsigned blockX, unsigned sharedBytes = 0) {
    LaunchConfig config;
    config.grid[0] = gridX;
    config.block[0] = blockX;
    config.sharedBytes = sharedBytes;
    return config;
  }
};

class Module;

/// One __global__ function of a loaded module.
class Kernel {
public:
  const std::string &name() const { return kernelName; }
  CUfunction function() const { return handle; }

  /// Launches on the device's stream. \p arguments holds one pointer per
  /// kernel parameter, to a value of exactly the parameter's type
  /// (CUdeviceptr for a pointer parameter, int, float, ...): the driver
  /// copies the values at launch, so they may be temporaries. Throws
  /// CudaError when the launch is rejected (a fault inside the kernel
  /// surfaces later, at the next synchronisation).
  void launch(const LaunchConfig &config, std::initializer_list<void *> arguments);
  void launch(const LaunchConfig &config, const std::vector<void *> &arguments);

private:
  friend class Module;
  Kernel(Module &module, std::string name, CUfunction handle)
      : module(&module), kernelName(std::move(name)), handle(handle) {}
  void launch(const LaunchConfig &config, void *const *arguments);
  /// Opts in to \p sharedBytes of dynamic shared memory if needed.
  void reserveSharedMemory(unsigned sharedBytes);

  Module *module;
  std::string kernelName;
  CUfunction handle;
  /// The dynamic shared memory this function may use without opting in
  /// again (48 KiB until raised).
  unsigned sharedLimit = 48 * 1024;
};

/// Options for Module's constructor.
struct ModuleOptions {
  /// Load the PTX even when a cubin fits (to test the JIT path).
  bool forcePtx = false;
};

/// A loaded CUDA module. Non-copyable; the Device must outlive it.
class Module {
public:
  /// Loads the binary selectKernelBinary picks for \p device. \p name (the
  /// kernel group, "micro_step kernels") is used in errors. Throws
  /// CudaError(KernelLoad) with the JIT log or the reason no binary fits,
  /// CudaError(DriverTooOld) when the driver cannot JIT this PTX version.
  Module(Device &device, const KernelBinaries &binaries, std::string name,
         const ModuleOptions &options = ModuleOptions());
  ~Module();
  Module(const Module &) = delete;
  Module &operator=(const Module &) = delete;

  /// The function \p name (its extern "C" name), looked up once and
  /// cached. Throws CudaError(KernelLoad) if the module has no such kernel.
  Kernel &kernel(const std::string &name);

  /// What was loaded and why.
  const BinaryChoice &loadedBinary() const { return choice; }
  const std::string &name() const { return moduleName; }
  Device &device() const { return *owner; }

private:
  Device *owner;
  std::string moduleName;
  BinaryChoice choice;
  CUmodule handle = nullptr;
  std::map<std::string, std::unique_ptr<Kernel>> kernels;
};

} // namespace ampc::cuda

#endif // AMPC_RUNTIME_CUDA_MODULE_H
