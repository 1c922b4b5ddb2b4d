//===- CudaCodegen.h - CUDA C++ kernels for the fused groups ----*- C++ -*-===//
//
// The CUDA backend's code generation stage: after graph-fuse, every group of the training step
// (micro_step and optimizer_step) whose kind needs a kernel becomes one or more CUDA C++
// translation units, each with one `extern "C" __global__` kernel that the runtime compiles with
// NVRTC (cubin for sm_80/sm_90, PTX for newer GPUs). Matmul groups are cuBLASLt calls and get no
// kernel; attention groups get a call-site stub with no source (the flash-attention kernels are
// written by hand). See docs/codegen.md for the kernel kinds and how to read one.
//
// Kernels compute in f32 whatever they load (bf16/f16 are converted on load and rounded to
// nearest even on store and wherever a fused op's result would have been stored), with the
// math of the CPU reference backend (runtime/cpu). Sizes (element counts, rows, row lengths)
// are kernel arguments, so one kernel serves every layer and every model with the same op
// structure; broadcast strides of the rare broadcast operands are compiled in.
//
//===----------------------------------------------------------------------===//

#ifndef AMPC_COMPILER_CUDA_CUDACODEGEN_H
#define AMPC_COMPILER_CUDA_CUDACODEGEN_H

#include "dialects/Graph/GraphDialect.h"

#include <cstdint>
#include <string>
#include <vector>

namespace ampc {

/// One argument of a generated kernel, in signature order.
struct KernelParam {
  enum class Role {
    Input,   ///< a tensor the kernel reads
    Output,  ///< a tensor the kernel writes
    State,   ///< training state read and written in place (accumulator, moment, scaler field)
    Scalar,  ///< a host value passed by value (a size, an error site)
    Scratch, ///< kernel-private device memory of `shape` elements (row statistics, partials)
    Table,   ///< a device table of per-tensor entries (the optimizer and global norm kernels)
    /// The runtime's device error record (plan::DeviceErrorRecord): where a kernel reports bad
    /// data the CPU backend would stop on (a label or an embedding id out of range).
    ErrorRecord,
    /// The runtime's run scalars (plan::RunScalarBlock): the seed, the step and the total
    /// steps, read from device memory because a replayed CUDA graph keeps its arguments.
    RunScalars,
  };
  Role role = Role::Input;
  /// The C name in the kernel's signature.
  std::string name;
  /// "f32", "bf16", "f16", "i32", "i64" (tensors); "i64"/"u64" (scalars); the struct name
  /// (tables).
  std::string elementType;
  std::vector<int64_t> shape;
  /// What the argument is bound to: "@symbol" for parameters, inputs and state, "%N" for the
  /// result of the function's op number N (with "#k" for result k > 0), a size expression
  /// ("elements", "rows", "row_length", "table_entries", "table_blocks"), "instruction %N" (the
  /// plan index of op N's instruction, where a kernel reports an error), "scratch", "table",
  /// "error_record" or "run_scalars".
  std::string value;
  /// Outputs: the input argument this output may share memory with (the kernel reads every
  /// element of the input before it writes that element of the output, so the two need not be
  /// distinct); empty otherwise. Neither is declared __restrict__.
  std::string aliasOf;
};

/// How the runtime launches a kernel.
struct KernelLaunch {
  enum class Space {
    Elements, ///< a grid-stride loop over `elements` (divided by `vectorWidth` when vectorised)
    Rows,     ///< one block (or warp: rowsPerBlock) per row, grid-stride over `rows`
    Columns,  ///< ceil(rowLength / (32 vectorWidth)) blocks of (32 columns or packs of
              ///< vectorWidth columns, 8 row slices) summing over `rows`
    Single,   ///< one block (tiny scalar kernels and second reduction stages)
    Tensors,  ///< `elements` blocks over a table of tensors (multi-tensor kernels)
  };
  Space space = Space::Elements;
  /// Elements: the iteration space; Tensors: the number of blocks; the global norm's Single
  /// finishing kernel: the partial sums it adds (its `table_blocks`).
  int64_t elements = 0;
  int64_t rows = 0;
  int64_t rowLength = 0;
  /// Threads per block (the kernel's __launch_bounds__); Columns kernels take them as
  /// (blockSize / blockRows, blockRows) = (32, 8).
  int blockSize = 256;
  int blockRows = 1;
  /// Columns: the chunks of rows the grid's y dimension splits the sums into.
  int chunks = 1;
  /// Rows: the rows one block covers (one per warp when > 1; the grid is then
  /// ceil(rows / rowsPerBlock) blocks, capped, with a grid-stride loop over the rest).
  int rowsPerBlock = 1;
  /// Blocks per multiprocessor asked of ptxas (__launch_bounds__'s second argument; 0: none).
  int minBlocks = 0;
  /// Elements per 16-byte access in the vectorised loop (1: scalar loop only); Columns: the
  /// columns of a thread's pack.
  int vectorWidth = 1;
};

/// One entry of a multi-tensor table (optimizer, global norm): the runtime fills a device array
/// of the kernel's table struct (OptimizerTensor or NormTensor, declared in
/// runtime/cuda/device/Optimizer.cuh) from these, in order.
struct TensorTableEntry {
  std::string param, grad, firstMoment, secondMoment, copy; ///< symbols ("" when absent)
  std::string copyType;                                     ///< "bf16", "f16" or ""
  int64_t elements = 0;
  int64_t firstBlock = 0; ///< the entry's first block in the launch
  double lr = 0, beta1 = 0, beta2 = 0, eps = 0, weightDecay = 0, clipNorm = 0, momentum = 0;
};

/// One kernel launch of a fused group (a group may need several, in order), or a call-site stub
/// (kind "attention", empty source).
struct GeneratedKernel {
  /// The kernel's symbol: ampc_<kind>_<ops>_<hash of the code>, equal for equal code.
  std::string name;
  /// The group's fusion kind, or for ops outside fused groups the op ("grad_seed", ...).
  std::string kind;
  /// "micro_step" or "optimizer_step", and the group's fusion_group number.
  std::string function;
  int64_t group = -1;
  /// The whole translation unit: header comment, includes, the kernel.
  std::string source;
  /// The code after the header comment (what the name's hash covers): two kernels with equal
  /// code compile to the same binary.
  std::string code;
  /// "graph.layernorm at tiny.mlir:12:5", one per fused op in program order.
  std::vector<std::string> fusedOps;
  std::vector<KernelParam> params;
  KernelLaunch launch;
  /// Multi-tensor kernels: the table the runtime builds.
  std::vector<TensorTableEntry> table;
};

/// Kernels for every group of the fused micro_step (the entry function) and optimizer_step, in
/// program order. Throws std::runtime_error naming the op for a group it cannot generate.
std::vector<GeneratedKernel> generateKernels(graph::ModelOp model);

/// "-I" options that make a generated source compile: the repository root (for the runtime
/// headers it includes). The CUDA toolkit's include directories are added by the caller.
std::vector<std::string> generatedKernelIncludeOptions();

} // namespace ampc

#endif // AMPC_COMPILER_CUDA_CUDACODEGEN_H
