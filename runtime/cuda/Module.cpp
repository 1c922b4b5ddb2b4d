//===- Module.cpp - Kernels from cubin or PTX, looked up and launched -----===//

#include "runtime/cuda/Module.h"

#include <cstdint>
#include <cstring>

namespace ampc::cuda {
namespace {

std::string smName(int arch) { return "sm_" + std::to_string(arch); }
std::string computeName(int arch) { return "compute_" + std::to_string(arch); }

/// "cubins for sm_80, sm_90 and compute_90 PTX" (what a module offers).
std::string describeBinaries(const KernelBinaries &binaries) {
  std::string text;
  if (!binaries.cubins.empty()) {
    text = "cubins for";
    for (size_t i = 0; i < binaries.cubins.size(); ++i)
      text += (i == 0 ? " " : ", ") + smName(binaries.cubins[i].arch);
  }
  if (!binaries.ptx.empty())
    text += (text.empty() ? "" : " and ") + computeName(binaries.ptxArch) + " PTX";
  return text.empty() ? "no binaries" : text;
}

/// The driver's JIT log, trimmed of trailing NULs and newlines.
std::string trimLog(const std::vector<char> &buffer) {
  std::string log(buffer.data(), strnlen(buffer.data(), buffer.size()));
  while (!log.empty() && (log.back() == '\n' || log.back() == '\r'))
    log.pop_back();
  return log;
}

} // namespace

BinaryChoice selectKernelBinary(const KernelBinaries &binaries, int major, int minor,
                                bool forcePtx) {
  const int capability = major * 10 + minor;
  const std::string gpu =
      "compute capability " + std::to_string(major) + "." + std::to_string(minor);
  BinaryChoice choice;
  if (!forcePtx) {
    for (size_t i = 0; i < binaries.cubins.size(); ++i) {
      const int arch = binaries.cubins[i].arch;
      // Same major version, minor not above the GPU's; prefer the newest.
      if (arch / 10 != major || arch % 10 > minor)
        continue;
      if (choice.kind == BinaryChoice::Cubin && arch <= choice.arch)
        continue;
      choice.kind = BinaryChoice::Cubin;
      choice.arch = arch;
      choice.cubinIndex = i;
    }
    if (choice.kind == BinaryChoice::Cubin) {
      choice.reason = smName(choice.arch) + " cubin for " + gpu;
      return choice;
    }
  }
  if (!binaries.ptx.empty() && capability >= binaries.ptxArch) {
    choice.kind = BinaryChoice::Ptx;
    choice.arch = binaries.ptxArch;
    choice.reason = computeName(binaries.ptxArch) + " PTX, JIT-compiled for " + gpu +
                    (forcePtx ? " (PTX forced)" : " (no " + smName(capability) + " cubin)");
    return choice;
  }
  choice.reason = "no kernel binary runs on " + gpu + ": the module has " +
                  describeBinaries(binaries) +
                  " (a cubin runs only within its own major version, PTX on "
                  "its architecture and newer)";
  if (forcePtx && binaries.ptx.empty())
    choice.reason = "PTX was forced but the module has " + describeBinaries(binaries);
  return choice;
}

//===----------------------------------------------------------------------===//
// Module
//===----------------------------------------------------------------------===//

Module::Module(Device &device, const KernelBinaries &binaries, std::string name,
               const ModuleOptions &options)
    : owner(&device), moduleName(std::move(name)) {
  const DeviceInfo &info = device.info();
  choice = selectKernelBinary(binaries, info.computeMajor, info.computeMinor, options.forcePtx);
  if (choice.kind == BinaryChoice::None)
    throw CudaError(CudaErrorKind::KernelLoad,
                    "cannot load " + moduleName + " on " + info.summary() + ": " + choice.reason);

  const DriverApi &api = device.api();
  // The driver writes the JIT's error log here (for cubins it stays empty).
  std::vector<char> errorLog(64 * 1024, '\0');
  CUjit_option jitOptions[] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
  void *jitValues[] = {errorLog.data(),
                       reinterpret_cast<void *>(static_cast<uintptr_t>(errorLog.size() - 1))};
  const void *image =
      choice.kind == BinaryChoice::Cubin
          ? static_cast<const void *>(binaries.cubins[choice.cubinIndex].image.data())
          : static_cast<const void *>(binaries.ptx.c_str());
  device.makeCurrent();
  const CUresult result = api.cuModuleLoadDataEx(&handle, image, 2, jitOptions, jitValues);
  if (result == CUDA_SUCCESS)
    return;
  handle = nullptr;
  if (result == CUDA_ERROR_UNSUPPORTED_PTX_VERSION && binaries.toolkitVersion > api.driverVersion)
    throw CudaError(CudaErrorKind::DriverTooOld,
                    driverTooOldMessage(api.driverVersion, binaries.toolkitVersion,
                                        "the PTX of " + moduleName + " (from CUDA " +
                                            formatCudaVersion(binaries.toolkitVersion) + " NVRTC)"),
                    result);
  std::string message = "cannot load " + moduleName + " (" + choice.reason +
                        "): cuModuleLoadDataEx returned " + api.errorName(result);
  const std::string description = api.errorString(result);
  if (!description.empty())
    message += " (" + description + ")";
  const std::string log = trimLog(errorLog);
  if (!log.empty())
    message += "; JIT error log:\n" + log;
  throw CudaError(CudaErrorKind::KernelLoad, message, result);
}

Module::~Module() {
  if (handle)
    owner->api().cuModuleUnload(handle);
}

Kernel &Module::kernel(const std::string &name) {
  auto found = kernels.find(name);
  if (found != kernels.end())
    return *found->second;
  const DriverApi &api = owner->api();
  CUfunction function = nullptr;
  const CUresult result = api.cuModuleGetFunction(&function, handle, name.c_str());
  if (result == CUDA_ERROR_NOT_FOUND)
    throw CudaError(CudaErrorKind::KernelLoad, moduleName + " has no kernel named '" + name + "'",
                    result);
  checkDriverLazy(api, result, "cuModuleGetFunction",
                  [&] { return "looking up kernel '" + name + "' in " + moduleName; });
  std::unique_ptr<Kernel> kernel(new Kernel(*this, name, function));
  int limit = 0;
  checkDriverLazy(
      api,
      api.cuFuncGetAttribute(&limit, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, function),
      "cuFuncGetAttribute",
      [&] { return "reading the shared memory limit of kernel '" + name + "'"; });
  kernel->sharedLimit = static_cast<unsigned>(limit);
  return *kernels.emplace(name, std::move(kernel)).first->second;
}

//===----------------------------------------------------------------------===//
// Kernel
//===----------------------------------------------------------------------===//

void Kernel::reserveSharedMemory(unsigned sharedBytes) {
  Device &device = module->device();
  const DriverApi &api = device.api();
  int staticBytes = 0;
  checkDriverLazy(
      api, api.cuFuncGetAttribute(&staticBytes, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, handle),
      "cuFuncGetAttribute",
      [&] { return "reading the static shared memory of kernel '" + kernelName + "'"; });
  const DeviceInfo &info = device.info();
  const uint64_t limit = static_cast<uint64_t>(info.sharedMemoryPerBlockOptin);
  if (static_cast<uint64_t>(staticBytes) + sharedBytes > limit)
    throw CudaError(CudaErrorKind::InvalidArgument,
                    "kernel '" + kernelName + "' of " + module->name() + " asks for " +
                        std::to_string(sharedBytes) + " bytes of dynamic shared memory, but " +
                        info.summary() + " allows at most " + std::to_string(limit) +
                        " bytes per block, and the kernel has " + std::to_string(staticBytes) +
                        " bytes of static "
                        "shared memory");
  checkDriverLazy(api,
                  api.cuFuncSetAttribute(handle, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                         static_cast<int>(sharedBytes)),
                  "cuFuncSetAttribute", [&] {
                    return "allowing kernel '" + kernelName + "' " + std::to_string(sharedBytes) +
                           " bytes of dynamic shared memory";
                  });
  sharedLimit = sharedBytes;
}

void Kernel::launch(const LaunchConfig &config, void *const *arguments) {
  if (config.sharedBytes > sharedLimit)
    reserveSharedMemory(config.sharedBytes);
  Device &device = module->device();
  const DriverApi &api = device.api();
  // cuLaunchKernel only reads the argument array; its signature is not const.
  const CUresult result =
      api.cuLaunchKernel(handle, config.grid[0], config.grid[1], config.grid[2], config.block[0],
                         config.block[1], config.block[2], config.sharedBytes, device.stream(),
                         const_cast<void **>(arguments), nullptr);
  checkDriverLazy(api, result, "cuLaunchKernel", [&] {
    return "launching kernel '" + kernelName + "' of " + module->name() + " (grid " +
           std::to_string(config.grid[0]) + "x" + std::to_string(config.grid[1]) + "x" +
           std::to_string(config.grid[2]) + ", block " + std::to_string(config.block[0]) + "x" +
           std::to_string(config.block[1]) + "x" + std::to_string(config.block[2]) + ", " +
           std::to_string(config.sharedBytes) +
           " bytes of dynamic shared "
           "memory)";
  });
}

void Kernel::launch(const LaunchConfig &config, std::initializer_list<void *> arguments) {
  launch(config, arguments.begin());
}

void Kernel::launch(const LaunchConfig &config, const std::vector<void *> &arguments) {
  launch(config, arguments.data());
}

} // namespace ampc::cuda
