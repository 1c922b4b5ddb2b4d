//===- DeviceProgram.h - How a plan runs on a GPU (plan format v4) --------===//
//
// The device program is the part of a plan the CUDA backend executes instead
// of interpreting the instructions one by one: the compiled kernels, where
// each intermediate value lives in a per-function arena, and an ordered list
// of device steps (kernel launches, cuBLASLt matmuls, flash-attention calls,
// memsets) for the micro step and for the optimizer step. Every step group
// names the plan instructions it computes, so a test can run a group on the
// device and compare the buffers it writes with the CPU backend's values.
//
// Nothing here needs CUDA: the compiler fills it (compiler/DeviceProgram*),
// runtime/plan reads, writes and validates it, and the CUDA runtime executes
// it. The binary encoding (section `DEVP`) and the exact meaning of every
// field are in docs/plan-format.md, "The device program". A plan compiled
// without the CUDA toolkit has an empty device program.
//
//===----------------------------------------------------------------------===//

#ifndef AMPC_RUNTIME_PLAN_DEVICEPROGRAM_H
#define AMPC_RUNTIME_PLAN_DEVICEPROGRAM_H

#include <cstdint>
#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace ampc::plan {

/// "No buffer" in an optional buffer field (a matmul without bias, an
/// optimizer table entry without a parameter copy).
inline constexpr uint32_t kNoBuffer = 0xffffffffu;
/// "No kernel" in an optional kernel field of an attention step.
inline constexpr uint32_t kNoKernel = 0xffffffffu;
/// Every arena and scratch offset is a multiple of this (and so is the base
/// address the runtime gives each region), so 16-byte vector accesses and
/// cuBLASLt's alignment requirements hold for every buffer.
inline constexpr uint64_t kDeviceAlignment = 256;

/// One NVRTC translation unit, compiled ahead of time. At least one of the
/// three binaries is present; the runtime loads the cubin of its GPU's
/// architecture (sm_80 or sm_90) and otherwise JIT-compiles the PTX.
struct DeviceModule {
  /// For diagnostics: the generated kernel's name, or
  /// "ampc_flash_attention_<dtype>_d<D>".
  std::string name;
  std::vector<uint8_t> cubinSm80; ///< ELF for sm_80 (A100), or empty
  std::vector<uint8_t> cubinSm90; ///< ELF for sm_90 (H100, H200), or empty
  std::string ptx;                ///< PTX for compute_90, or empty
};

/// A `__global__` entry point of a module.
struct DeviceKernel {
  uint32_t module = 0;
  /// The extern "C" symbol (cuModuleGetFunction's name).
  std::string entry;
};

/// How a step uses a buffer argument.
enum class Access : uint8_t { Read = 0, Write = 1, ReadWrite = 2 };

/// What a kernel argument is bound to. The numeric values are the on-disk
/// codes.
///
/// The seed, the step and the total steps change from run to run, and a
/// launch captured into a CUDA graph replays the argument values it was
/// captured with, so kernels read them from device memory (RunScalars). The
/// by-value kinds 2-4 keep their codes but the validator rejects them.
enum class ArgKind : uint8_t {
  Buffer = 0,      ///< a pointer to the first element of `buffer`
  Int64 = 1,       ///< the literal `value`, passed as a 64-bit integer
  Seed = 2,        ///< (rejected) the run's seed passed by value
  Step = 3,        ///< (rejected) the run's step passed by value
  TotalSteps = 4,  ///< (rejected) the run's total steps passed by value
  Scratch = 5,     ///< a pointer to `bytes` bytes at `value` in the scratch
  Table = 6,       ///< a pointer to the device array built from `table`
  ErrorRecord = 7, ///< a pointer to the runtime's 32-byte error record
  /// A pointer to the runtime's run scalars, three u64: the seed
  /// (RunOptions::seed), the step (RunOptions::step of this run of the
  /// function) and the total steps (RunOptions::totalSteps).
  RunScalars = 8,
};

/// The run scalars a RunScalars argument points to, in device memory.
struct RunScalarBlock {
  uint64_t seed = 0, step = 0, totalSteps = 0;
};
static_assert(sizeof(RunScalarBlock) == 24, "three u64, as generated kernels read them");

/// The struct a table argument's device array holds.
enum class TableKind : uint8_t {
  Optimizer = 0, ///< OptimizerTensor (88 bytes): AdamW / SGD over all parameters
  Norm = 1,      ///< NormTensor (24 bytes): the global gradient norm
};

/// One element of a table argument. Optimizer entries use every field (copy
/// is kNoBuffer without a parameter copy); norm entries use `grad` (the
/// tensor whose squares are summed), `elements` and `firstBlock`.
struct TableEntry {
  uint32_t param = kNoBuffer, grad = kNoBuffer, firstMoment = kNoBuffer, secondMoment = kNoBuffer,
           copy = kNoBuffer;
  int64_t elements = 0;
  /// Blocks [firstBlock, next entry's firstBlock) of the launch work on it.
  int64_t firstBlock = 0;
  float beta1 = 0, beta2 = 0, eps = 0, weightDecay = 0, clipNorm = 0, momentum = 0;
};

struct DeviceTable {
  TableKind kind = TableKind::Optimizer;
  std::vector<TableEntry> entries;
};

/// One argument of a kernel launch, in the kernel's parameter order.
struct DeviceArgument {
  ArgKind kind = ArgKind::Buffer;
  /// The kernel's parameter name ("in0", "n", "table"), for diagnostics.
  std::string name;
  /// Buffer: the buffer id.
  uint32_t buffer = 0;
  /// Buffer and Scratch: how the kernel uses the memory.
  Access access = Access::Read;
  /// Int64: the literal. Scratch: the byte offset in the function's scratch.
  int64_t value = 0;
  /// Scratch: the byte count.
  uint64_t bytes = 0;
  /// Table: the entries the runtime turns into a device array.
  DeviceTable table;
};

/// How the compiler laid out a launch's iteration (informational: the grid
/// and block below are what the runtime uses). The numeric values are the
/// on-disk codes, in the order of KernelLaunch::Space.
enum class LaunchSpace : uint8_t { Elements = 0, Rows = 1, Columns = 2, Single = 3, Tensors = 4 };

/// cuLaunchKernel(kernel, grid, block, 0 bytes of dynamic shared memory,
/// the function's stream, pointers to the arguments' values).
struct LaunchStep {
  uint32_t kernel = 0;
  uint32_t grid[3] = {1, 1, 1};
  uint32_t block[3] = {1, 1, 1};
  LaunchSpace space = LaunchSpace::Elements;
  int64_t elements = 0, rows = 0, rowLength = 0;
  uint32_t vectorWidth = 1;
  std::vector<DeviceArgument> args;
};

/// The epilogue a cuBLASLt matmul applies to alpha op(A) op(B) + beta C.
enum class Epilogue : uint8_t {
  None = 0,
  Bias = 1,         ///< + bias[j] on every row
  GeluTanhBias = 2, ///< gelu_tanh(. + bias[j])
  GeluAuxBias = 3,  ///< gelu_tanh(. + bias[j]); aux = the value before gelu
  BGradB = 4,       ///< also bias[j] = sum over k of op(B)[k, j]
  DGelu = 5,        ///< . * gelu_tanh'(aux): the gradient of a tanh gelu whose input is aux
};

/// A cuBLASLt matmul, described in row-major terms: for each batch b,
/// D[b] (m x n) = epilogue(alpha op(A[b]) op(B[b]) + beta C[b]), where
/// op(A[b]) is m x k (A[b] stored k x m when transA), op(B[b]) is k x n
/// (stored n x k when transB), every matrix contiguous and row-major, and
/// X[b] starts at element b * strideX (stride 0: one matrix for every
/// batch). Inputs and outputs have their buffers' dtypes; products are
/// accumulated in f32 (computeType 0), f32 inputs without TF32.
struct MatmulStep {
  uint32_t a = 0, b = 0, d = 0;
  /// beta C: kNoBuffer when beta is 0; C == D accumulates in place.
  uint32_t c = kNoBuffer;
  uint32_t bias = kNoBuffer; ///< Bias, GeluTanhBias, GeluAuxBias (read), BGradB (written)
  /// The shape of D: written by GeluAuxBias (the value before the gelu), read by DGelu (the
  /// gelu's input).
  uint32_t aux = kNoBuffer;
  bool transA = false, transB = false;
  int64_t m = 0, n = 0, k = 0;
  int64_t batch = 1;
  int64_t strideA = 0, strideB = 0, strideD = 0;
  uint8_t computeType = 0; ///< 0: f32 accumulation
  Epilogue epilogue = Epilogue::None;
  float alpha = 1, beta = 0;
};

/// Which half of attention a step computes.
enum class AttentionPass : uint8_t { Forward = 0, Backward = 1 };

/// Where one attention operand's elements lie in its buffer: element (b, h, t, d) of its
/// [batch, heads, rows, D] view is at byte `offset` + element size x (b batchStride +
/// h headStride + t rowStride + d). A contiguous [batch, heads, rows, D] tensor has offset 0 and
/// strides (heads rows D, rows D, D); q, k and v read in place from a packed [batch, rows,
/// 3 heads D] projection have offsets 0, heads D and 2 heads D elements and strides (rows 3 heads
/// D, D, 3 heads D).
struct AttentionLayout {
  uint64_t offset = 0;
  int64_t batchStride = 0, headStride = 0, rowStride = 0;

  static AttentionLayout contiguous(int64_t heads, int64_t rows, int64_t headDim) {
    return {0, heads * rows * headDim, rows * headDim, headDim};
  }
  bool operator==(const AttentionLayout &other) const {
    return offset == other.offset && batchStride == other.batchStride &&
           headStride == other.headStride && rowStride == other.rowStride;
  }
};

/// Flash attention (runtime/cuda/device/FlashAttention.cuh, FlashAttentionMma.cuh) over
/// batch x heads slices of q [T, D], k [S, D], v [S, D], all one dtype, each operand where its
/// layout says (dq, dk and dv share q's, k's and v's layouts, dO shares o's).
/// Forward: o = softmax(scale q k^T, causal) v and the f32 row log-sum-exp, into the lse
/// buffer (the plan's attention with two results) or scratch. Backward with a saved o and lse
/// (the plan's attention_grad with six operands): delta = rowsum(dO * o) into scratch, then dq
/// and dk/dv. Backward without them (four operands): the forward kernel first recomputes o and
/// lse into scratch.
struct AttentionStep {
  AttentionPass pass = AttentionPass::Forward;
  uint32_t q = 0, k = 0, v = 0;
  uint32_t out = kNoBuffer;  ///< forward: o (written); backward: the saved o (read) or none
  uint32_t dOut = kNoBuffer; ///< backward: dO (read)
  uint32_t dq = kNoBuffer, dk = kNoBuffer, dv = kNoBuffer; ///< backward: written
  /// f32 [batch*heads*T]: forward: written (or kNoBuffer: lse goes to scratch); backward: the
  /// saved lse (read, with `out`) or kNoBuffer.
  uint32_t lse = kNoBuffer;
  int64_t batch = 1, heads = 1, queries = 0, keys = 0, headDim = 0;
  bool causal = false;
  float scale = 1;
  /// Kernel indices: forward, delta, dq, dk/dv (kNoKernel for the three backward kernels in a
  /// forward step, and for the forward kernel in a backward step with a saved o and lse).
  uint32_t forwardKernel = kNoKernel, deltaKernel = kNoKernel, dqKernel = kNoKernel,
           dkdvKernel = kNoKernel;
  /// Scratch offsets (bytes): lse, f32 [batch*heads*T], where no lse buffer holds it; a
  /// backward without a saved o also the recomputed o (the dtype of q, [batch*heads*T*D]); every
  /// backward delta (f32 [batch*heads*T]). Unused offsets are 0.
  uint64_t lseOffset = 0, outOffset = 0, deltaOffset = 0;
  /// Rows per 128-thread block: of q for the dq kernel, of k for dk/dv (the grids are
  /// ceil(T / blockRows) and ceil(S / blockRows) by batch x heads). 32 for the fp32-FMA kernels
  /// (FlashAttention.cuh), 64 for the tensor-core ones (FlashAttentionMma.cuh).
  uint32_t blockRows = 32;
  /// Query rows per block of the forward kernel (also when a backward recomputes the forward):
  /// its grid is ceil(T / forwardBlockRows) by batch x heads. 32 for the fp32-FMA kernels; 128
  /// for the tensor-core ones at head dims up to 64 (two 16-row tiles a warp), 64 at 128.
  uint32_t forwardBlockRows = 32;
  /// Where q (and dq), k (and dk), v (and dv) and o (and dO) lie in their buffers; the f32 lse
  /// and delta are always contiguous [batch x heads x T].
  AttentionLayout qLayout, kLayout, vLayout, oLayout;

  /// Whether a backward step reads the forward's saved o and lse instead of recomputing them.
  bool readsSavedForward() const {
    return pass == AttentionPass::Backward && out != kNoBuffer && lse != kNoBuffer;
  }
};

/// Zero every byte of a buffer.
struct MemsetStep {
  uint32_t buffer = 0;
};

using DeviceStep = std::variant<LaunchStep, MatmulStep, AttentionStep, MemsetStep>;

/// The steps that together compute a set of plan instructions (one fused
/// group of graph-fuse): after the last of them the buffers they write hold
/// what the CPU backend computes for those instructions.
struct DeviceGroup {
  /// The group's fusion kind ("elementwise", "matmul_epilogue", ...).
  std::string kind;
  /// Indices into the function's instruction list, increasing.
  std::vector<uint32_t> instructions;
  std::vector<DeviceStep> steps;
};

/// A temporary that lives in the arena.
struct ArenaPlacement {
  uint32_t buffer = 0;
  uint64_t offset = 0;
  /// kNoBuffer, or a placed buffer whose bytes this one takes over in place:
  /// its last reader is the step that first writes this buffer, at the same
  /// offset and size, reading each element before writing it (the
  /// classifier's gradient over its logits).
  uint32_t reuses = kNoBuffer;
};

/// A temporary that shares the memory of another buffer (a reshape's
/// result): it has no storage of its own.
struct BufferView {
  uint32_t buffer = 0;
  /// A placed temporary or a persistent buffer, never another view.
  uint32_t source = 0;
};

/// One function of the plan (the micro step or the optimizer step).
struct DeviceFunction {
  /// Bytes of the arena holding the placed temporaries.
  uint64_t arenaBytes = 0;
  /// Bytes of the scratch region (kernel-private memory, attention
  /// statistics): contents are meaningful only within one group.
  uint64_t scratchBytes = 0;
  std::vector<ArenaPlacement> placements;
  std::vector<BufferView> views;
  /// In execution order.
  std::vector<DeviceGroup> groups;
};

/// Everything the CUDA backend needs beyond the instructions.
struct DeviceProgram {
  std::vector<DeviceModule> modules;
  std::vector<DeviceKernel> kernels;
  DeviceFunction microStep;
  DeviceFunction optimizerStep;

  /// True when the plan carries no GPU code (compiled without the CUDA
  /// toolkit, or a forward-only plan).
  bool empty() const {
    return modules.empty() && kernels.empty() && microStep.groups.empty() &&
           optimizerStep.groups.empty() && microStep.placements.empty() &&
           optimizerStep.placements.empty() && microStep.views.empty() &&
           optimizerStep.views.empty() && microStep.arenaBytes == 0 &&
           optimizerStep.arenaBytes == 0 && microStep.scratchBytes == 0 &&
           optimizerStep.scratchBytes == 0;
  }
};

/// The error record kernels write when they meet bad data (the CPU backend
/// throws there). 32 bytes, zeroed by the runtime before a function runs;
/// the first error wins (atomicCAS on code).
struct DeviceErrorRecord {
  uint32_t code;        ///< 0 none, 1 cross-entropy label, 2 embedding id
  uint32_t instruction; ///< index in the function's instruction list
  int64_t index;        ///< the row (label) or element (id) position
  int64_t value;        ///< the bad label or id
  int64_t bound;        ///< valid values are [0, bound)
};

/// Error record codes.
inline constexpr uint32_t kDeviceErrorLabel = 1;
inline constexpr uint32_t kDeviceErrorEmbeddingId = 2;

/// The buffers a table argument's kernel touches, with how: an optimizer
/// entry reads and writes its parameter, gradient accumulator (zeroed) and
/// moments and writes its copy; a norm entry reads its gradient. Fields that
/// are kNoBuffer are left out.
std::vector<std::pair<uint32_t, Access>> tableBufferUses(const DeviceTable &table);

/// The buffers a step group writes (write and read-write arguments, tables' written entries, a
/// matmul's D, aux and written bias, attention outputs, memsets), unique, in first-written order.
std::vector<uint32_t> writtenBuffers(const DeviceGroup &group);
/// The buffers a step group reads (read and read-write arguments, tables' read entries, matmul
/// and attention inputs), unique.
std::vector<uint32_t> readBuffers(const DeviceGroup &group);

/// The names used in diagnostics and docs.
const char *accessName(Access access);
const char *argKindName(ArgKind kind);
const char *epilogueName(Epilogue epilogue);
/// "launch", "matmul", "attention", "memset".
const char *deviceStepName(const DeviceStep &step);

struct Plan;

/// The number of leading micro-step groups of \p plan's device program that
/// compute the loss (the group writing plan.loss and those before it): the
/// forward pass a validation loss runs on the GPU. PlanError when no group
/// writes the loss or one of them writes a Parameter or State buffer.
size_t forwardGroupCount(const Plan &plan);

} // namespace ampc::plan

#endif // AMPC_RUNTIME_PLAN_DEVICEPROGRAM_H
