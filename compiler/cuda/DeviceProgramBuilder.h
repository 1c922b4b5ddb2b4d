//===- DeviceProgramBuilder.h - the plan's device program from the fused IR -*- C++ -*-===//
//
// After graph-fuse, graph-plan-memory and plan emission, this stage writes the plan's device
// program (runtime/plan/DeviceProgram.h): for the micro step and the optimizer step, one step
// group per fused group in the order graph-fuse scheduled them (graph.fusion_schedule), each
// covering the plan instructions of its ops: the group's generated kernels (CudaCodegen), a
// cuBLASLt matmul for matmul groups (with its bias / gelu epilogue; bias gradients as a matmul and
// the column-sum kernel), flash attention for attention groups, a memset for the zeroing kernel of
// an embedding gradient. Every kernel argument is bound to a plan buffer, a literal size, the
// run's seed or step, a scratch slice or a table of buffers.
//
// The arenas are graph-plan-memory's, not placed again here: every temporary a step writes goes
// to the offset graph-plan-memory gave its value (graph.arena_offsets), in an arena of the size it
// chose (graph.arena), so `ampc report memory` prints what the GPU allocates. Values a kernel
// computes and consumes inside itself are never stored, and a reshape is a view of its source.
// A step that writes a value graph-plan-memory did not place, or a result placed over an input its
// kernel does not allow it to overwrite, is an internal error.
//
// The kernels are compiled separately (DeviceCode.h): this stage gives each module its source.
//
//===--------------------------------------------------------------------------===//

#ifndef AMPC_COMPILER_CUDA_DEVICEPROGRAMBUILDER_H
#define AMPC_COMPILER_CUDA_DEVICEPROGRAMBUILDER_H

#include "compiler/cuda/CudaCodegen.h"
#include "compiler/lowering/PlanEmitter.h"
#include "dialects/Graph/GraphDialect.h"
#include "runtime/plan/Plan.h"

#include <stdexcept>
#include <string>
#include <vector>

namespace ampc {

/// A model the device program cannot express yet (an attention head dim the flash kernels do not
/// have, a matmul broadcast cuBLASLt's strided batches cannot describe). The plan still runs on
/// the CPU; what() says why it has no GPU code.
class DeviceProgramUnsupported : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

/// The device program without binaries, and the CUDA C++ source of each of its modules (same
/// order as program.modules).
struct DeviceProgramSources {
  plan::DeviceProgram program;
  std::vector<std::string> moduleSources;
};

/// Builds the device program of `plan`, emitted from `model` with `provenance`. The model must be
/// fused (graph-fuse). Throws DeviceProgramUnsupported for a model it cannot express, and
/// std::runtime_error for an internal inconsistency.
DeviceProgramSources buildDeviceProgram(graph::ModelOp model, const plan::Plan &plan,
                                        const PlanProvenance &provenance);

/// The grid (x) and block of a generated kernel's launch, from its iteration space.
struct KernelShape {
  int64_t grid = 1;
  uint32_t gridY = 1; ///< a columns kernel's row chunks
  uint32_t block[2] = {1, 1};
};
KernelShape kernelShape(const KernelLaunch &launch);

/// Whether attention over \p dtype ("bf16", "f16", "f32") runs on the tensor-core kernels of
/// runtime/cuda/device/FlashAttentionMma.cuh (64 rows a block) rather than the fp32-FMA ones.
bool flashUsesTensorCores(const std::string &dtype);

/// The CUDA C++ translation unit holding the flash-attention entry points \p entries (names as
/// in runtime/cuda/device/FlashAttention.cuh) of one element type ("bf16", "f16", "f32") and head
/// dim.
std::string flashAttentionModuleSource(const std::string &dtype, int64_t headDim,
                                       const std::vector<std::string> &entries);

} // namespace ampc

#endif // AMPC_COMPILER_CUDA_DEVICEPROGRAMBUILDER_H
