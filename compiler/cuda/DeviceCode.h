//===- DeviceCode.h - compile the device program's kernels into the plan -*- C++ -*-===//
//
// The last stage of `ampc compile` (and `ampc plan --train`): build the plan's device program
// (DeviceProgramBuilder.h) and compile each of its modules with NVRTC for sm_80 and sm_90 (cubin)
// and compute_90 (PTX), distinct modules once, on a small pool of threads. Compiled binaries are
// kept in a cache directory keyed by the source, the target, the NVRTC version and the device
// headers, so recompiling a model (or another model with the same kernels) costs little:
// $AMPC_KERNEL_CACHE, or $XDG_CACHE_HOME/ampc/kernels, or ~/.cache/ampc/kernels;
// AMPC_KERNEL_CACHE=off disables it.
//
// An ampc built without the CUDA toolkit (-DAMPC_ENABLE_CUDA=OFF, or no toolkit found) writes
// plans with an empty device program.
//
//===--------------------------------------------------------------------------===//

#ifndef AMPC_COMPILER_CUDA_DEVICECODE_H
#define AMPC_COMPILER_CUDA_DEVICECODE_H

#include "compiler/cuda/DeviceProgramBuilder.h"

#include <string>

namespace ampc {

/// True when this ampc was built with NVRTC and can compile kernels.
bool deviceCompilerAvailable();

/// What compiling a program's modules did.
struct DeviceCompileStats {
  size_t modules = 0;
  /// Binaries (three per module) compiled now, and found in the cache.
  size_t compiled = 0, cached = 0;
  double seconds = 0;
};

/// Compiles every module of \p sources (sm_80 and sm_90 cubins, compute_90 PTX) into
/// sources.program.modules, on \p threads threads (0: one per core, at most 8). Throws
/// std::runtime_error naming the module and carrying NVRTC's log on a failed compilation, or
/// saying that this ampc has no NVRTC.
DeviceCompileStats compileDeviceModules(DeviceProgramSources &sources, unsigned threads = 0);

/// What attachDeviceProgram did, for the user.
struct DeviceCodeResult {
  /// One line: the kernels and their size, or why the plan has no GPU code.
  std::string summary;
  /// True when the plan has no GPU code although this ampc has NVRTC: the model uses something
  /// the device program cannot express yet, or (an internal error) a kernel failed to generate,
  /// compile or validate. A warning: the plan still trains on the CPU.
  bool unsupported = false;
};

/// Builds and compiles the device program of \p plan (emitted from the fused \p model with
/// \p provenance) and stores it in plan.device, validated. Leaves it empty when this ampc has no
/// NVRTC or the device program cannot be built (see DeviceCodeResult).
DeviceCodeResult attachDeviceProgram(graph::ModelOp model, plan::Plan &plan,
                                     const PlanProvenance &provenance);

} // namespace ampc

#endif // AMPC_COMPILER_CUDA_DEVICECODE_H
