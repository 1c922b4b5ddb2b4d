//===- DeviceProgramBuilder.cpp - the plan's device program from the fused IR ----===//
//
// Walks each step function's fused groups in their scheduled order and turns each into a step
// group: generated kernels become launches (their arguments bound to plan buffers through the
// emitter's provenance), matmul groups become cuBLASLt matmuls, attention groups flash-attention
// calls, an embedding gradient's zeroing a memset. Then the arena: the temporaries the steps
// write are put where graph-plan-memory placed their values (graph.arena_offsets), in the arena
// it sized (graph.arena); reshapes of stored values become views.
//
// The file is in three parts: the Builder and its helpers; translating one fused group into
// device steps (launches with their bound arguments, matmuls, attention, memsets); and the walk
// over the functions, the arena and the views, with the flash-attention module source.
//
//===--------------------------------------------------------------------------===//

#include "compiler/cuda/DeviceProgramBuilder.h"
#include "compiler/cuda/CudaCodegen.h"
#include "compiler/support/Format.h"
#include "passes/ArenaValues.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/SymbolTable.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace ampc {
namespace deviceprogram {

using namespace mlir;
using namespace ampc::graph;

/// Alignment of every arena and scratch slice (256 bytes): enough for the kernels' 16-byte
/// packs and for cuBLASLt's preferred operand alignment.
constexpr uint64_t kAlignment = plan::kDeviceAlignment;
/// Grid-stride kernels need no more blocks than this (x dimension).
constexpr int64_t kMaxGridStrideBlocks = 65535;

/// \p bytes rounded up to the next multiple of kAlignment.
inline uint64_t alignUp(uint64_t bytes) {
  return (bytes + kAlignment - 1) / kAlignment * kAlignment;
}

/// The size of a plan buffer's dense row-major storage.
inline uint64_t bufferBytes(const plan::Buffer &buffer) {
  return static_cast<uint64_t>(plan::numElements(buffer)) * plan::dtypeBytes(buffer.dtype);
}

/// The static shape of a ranked tensor value.
inline std::vector<int64_t> shapeOf(Value value) {
  auto type = llvm::cast<RankedTensorType>(value.getType());
  return std::vector<int64_t>(type.getShape().begin(), type.getShape().end());
}

/// The product of dims[begin, end): the element count of a run of dimensions (1 if empty).
inline int64_t product(const std::vector<int64_t> &dims, size_t begin, size_t end) {
  int64_t result = 1;
  for (size_t i = begin; i < end; ++i)
    result *= dims[i];
  return result;
}

/// "bf16", "f16", "f32" for the flash kernels' element types.
inline std::string floatName(Type type) {
  if (type.isBF16())
    return "bf16";
  if (type.isF16())
    return "f16";
  if (type.isF32())
    return "f32";
  return "";
}

/// "micro_step group 18 (matmul_epilogue)", for messages.
inline std::string describeGroup(func::FuncOp function, int64_t id, const std::string &kind) {
  return function.getName().str() + " group " + std::to_string(id) + " (" + kind + ")";
}

/// One fused group of a function, its ops in program order.
struct FusedGroup {
  int64_t id = 0;
  std::string kind;
  std::vector<Operation *> ops;
};

/// Scratch memory of one step group: each name (a kernel's "rowStats", an attention's lse) gets
/// one aligned slice, shared by the group's steps that use the name.
struct GroupScratch {
  std::map<std::string, uint64_t> offsets;
  uint64_t bytes = 0;

  uint64_t slice(const std::string &name, uint64_t size) {
    auto [it, inserted] = offsets.try_emplace(name, bytes);
    if (inserted)
      bytes += alignUp(std::max<uint64_t>(size, 1));
    return it->second;
  }
};

/// Builds the device program of one model: for each step function, the step groups in the
/// fusion schedule's order, each with its launches, matmuls, attention calls and memsets and
/// their arguments bound to plan buffers; then the arena placements and the views. Kernels and
/// modules are interned so that equal code is compiled and stored once.
class Builder {
public:
  Builder(ModelOp model, const plan::Plan &plan, const PlanProvenance &provenance)
      : model(model), plan(plan), provenance(provenance) {}

  /// Builds the micro step, then the optimizer step, then the flash modules' sources.
  DeviceProgramSources run();

private:
  /// Builds one step function (the micro step or the optimizer step) into \p out.
  void buildFunction(func::FuncOp function, const std::vector<plan::Instruction> &list,
                     plan::DeviceFunction &out, bool optimizer);
  /// Appends the device steps of one fused group.
  void buildGroup(const FusedGroup &group, plan::DeviceGroup &out, GroupScratch &scratch);
  /// A generated kernel's launch: grid, block and every argument bound.
  plan::LaunchStep launchStep(const GeneratedKernel &kernel, GroupScratch &scratch);
  /// The cuBLASLt call of a matmul group, with its bias / gelu epilogue.
  plan::MatmulStep matmulStep(const FusedGroup &group);
  /// The flash-attention kernels and scratch of an attention or attention_grad op.
  plan::AttentionStep attentionStep(Operation *op, GroupScratch &scratch);
  /// The arena placements of the temporaries the function's steps write.
  void placeArena(func::FuncOp function, const std::vector<plan::Instruction> &list,
                  plan::DeviceFunction &out);

  /// The plan buffer the emitter gave an SSA value of the function being built.
  uint32_t bufferOf(Value value) const {
    auto it = provenance.bufferOf.find(value);
    if (it == provenance.bufferOf.end())
      throw std::runtime_error("device program: a value of " + function.getName().str() +
                               " has no plan buffer");
    return it->second;
  }
  /// The plan buffer a kernel argument's binding names ("@symbol", "%N", "%N#k").
  uint32_t bindingBuffer(const std::string &binding, const GeneratedKernel &kernel) const;
  /// The plan index of the first instruction of op number N ("instruction %N").
  int64_t bindingInstruction(const std::string &binding, const GeneratedKernel &kernel) const;
  /// Op N of the function being built, for a binding "%N" or "%N#k".
  Operation *opNumber(const std::string &text, const GeneratedKernel &kernel) const;
  /// The persistent buffer (parameter, input, state, copy) of a model symbol.
  uint32_t symbolBuffer(const std::string &name, const std::string &context) const {
    auto it = persistentByName.find(name);
    if (it == persistentByName.end())
      throw std::runtime_error("device program: " + context + " names @" + name +
                               ", which is no buffer of the plan");
    return it->second;
  }
  /// The program's kernel index for a generated kernel, adding its module the first time.
  uint32_t internGenerated(const GeneratedKernel &kernel);
  /// The kernel index of a flash-attention entry point, in its (dtype, head dim) module.
  uint32_t internFlash(const std::string &dtype, int64_t headDim, const std::string &entry);

  ModelOp model;
  const plan::Plan &plan;
  const PlanProvenance &provenance;
  DeviceProgramSources result;
  /// Every buffer that is not a temporary, by its symbol name.
  std::map<std::string, uint32_t> persistentByName;
  /// Generated kernels by their full source.
  std::map<std::string, uint32_t> kernelBySource;
  /// Flash-attention kernels by (module, entry point).
  std::map<std::pair<uint32_t, std::string>, uint32_t> flashKernelByEntry;
  /// Flash modules by (dtype, head dim), and the entries each needs.
  std::map<std::pair<std::string, int64_t>, uint32_t> flashModules;
  std::map<uint32_t, std::pair<std::pair<std::string, int64_t>, std::vector<std::string>>>
      flashEntries;
  /// The generated kernels of each (function name, group id), in launch order; they point
  /// into `kernels`, which is filled once and never resized after.
  std::map<std::pair<std::string, int64_t>, std::vector<const GeneratedKernel *>> kernelsOfGroup;
  std::vector<GeneratedKernel> kernels;

  // The function being built.
  mutable func::FuncOp function;
  /// The function's ops in order: op N is what a kernel binding "%N" names.
  std::vector<Operation *> opsByIndex;
  /// The index its next step group gets.
  int64_t groupIndex = 0;
  /// Kernel outputs that may overwrite an input in place: (group, output, input).
  struct InPlace {
    int64_t group;
    uint32_t output, input;
  };
  std::vector<InPlace> inPlace;
};

} // namespace deviceprogram
} // namespace ampc

//===----------------------------------------------------------------------===//
// One fused group into device steps
//===----------------------------------------------------------------------===//

namespace ampc {
namespace deviceprogram {

uint32_t Builder::internGenerated(const GeneratedKernel &kernel) {
  // One module per distinct source: equal code is compiled once, and two kernels whose short
  // names happen to agree stay apart (each name is local to its module).
  auto [it, inserted] =
      kernelBySource.try_emplace(kernel.code, static_cast<uint32_t>(result.program.kernels.size()));
  if (inserted) {
    const uint32_t module = static_cast<uint32_t>(result.program.modules.size());
    plan::DeviceModule entry;
    entry.name = kernel.name;
    result.program.modules.push_back(std::move(entry));
    // The code without the header comment: equal code, one compilation.
    result.moduleSources.push_back(kernel.code);
    result.program.kernels.push_back({module, kernel.name});
  }
  return it->second;
}

/// All entry points of one (dtype, head dim) pair share a module, whose source is written by
/// `run` once the set of entries the program launches is known.
uint32_t Builder::internFlash(const std::string &dtype, int64_t headDim, const std::string &entry) {
  auto [moduleIt, newModule] = flashModules.try_emplace(
      {dtype, headDim}, static_cast<uint32_t>(result.program.modules.size()));
  if (newModule) {
    plan::DeviceModule module;
    module.name = "ampc_flash_attention_" + dtype + "_d" + std::to_string(headDim);
    result.program.modules.push_back(std::move(module));
    result.moduleSources.emplace_back(); // written once every entry is known
    flashEntries[moduleIt->second].first = {dtype, headDim};
  }
  auto [it, inserted] = flashKernelByEntry.try_emplace(
      {moduleIt->second, entry}, static_cast<uint32_t>(result.program.kernels.size()));
  if (inserted) {
    result.program.kernels.push_back({moduleIt->second, entry});
    flashEntries[moduleIt->second].second.push_back(entry);
  }
  return it->second;
}

/// Rejects anything but '%' followed by a number in range (and an optional "#k").
Operation *Builder::opNumber(const std::string &text, const GeneratedKernel &kernel) const {
  size_t end = text.find('#');
  std::string digits = text.substr(1, end == std::string::npos ? std::string::npos : end - 1);
  char *rest = nullptr;
  unsigned long long number = std::strtoull(digits.c_str(), &rest, 10);
  if (text.empty() || text[0] != '%' || digits.empty() || *rest != '\0' ||
      number >= opsByIndex.size())
    throw std::runtime_error("device program: kernel " + kernel.name +
                             " has an argument bound "
                             "to '" +
                             text + "', which names no op of " + function.getName().str());
  return opsByIndex[number];
}

/// "@name" is a persistent symbol; "%N#k" is result k of op N (k = 0 when absent).
uint32_t Builder::bindingBuffer(const std::string &binding, const GeneratedKernel &kernel) const {
  if (!binding.empty() && binding[0] == '@')
    return symbolBuffer(binding.substr(1), "kernel " + kernel.name);
  Operation *op = opNumber(binding, kernel);
  unsigned result = 0;
  if (size_t hash = binding.find('#'); hash != std::string::npos)
    result = static_cast<unsigned>(std::stoul(binding.substr(hash + 1)));
  if (result >= op->getNumResults())
    throw std::runtime_error("device program: kernel " + kernel.name + " binds '" + binding +
                             "', a result its op does not have");
  return bufferOf(op->getResult(result));
}

/// An error site is the op's first plan instruction, which the runtime's error message names
/// as the CPU backend would.
int64_t Builder::bindingInstruction(const std::string &binding,
                                    const GeneratedKernel &kernel) const {
  Operation *op = opNumber(binding.substr(binding.find('%')), kernel);
  auto it = provenance.instructionsOf.find(op);
  if (it == provenance.instructionsOf.end() || it->second.empty())
    throw std::runtime_error("device program: kernel " + kernel.name +
                             " reports errors for an "
                             "op that has no plan instruction");
  return it->second.front();
}

plan::LaunchStep Builder::launchStep(const GeneratedKernel &kernel, GroupScratch &scratch) {
  plan::LaunchStep step;
  step.kernel = internGenerated(kernel);
  const KernelLaunch &launch = kernel.launch;
  step.space = static_cast<plan::LaunchSpace>(static_cast<uint8_t>(launch.space));
  step.elements = launch.elements;
  step.rows = launch.rows;
  step.rowLength = launch.rowLength;
  step.vectorWidth = static_cast<uint32_t>(launch.vectorWidth);
  const KernelShape shape = kernelShape(launch);
  if (shape.grid > 0x7fffffff)
    throw DeviceProgramUnsupported("kernel " + kernel.name + " needs " +
                                   std::to_string(shape.grid) + " blocks, more than a CUDA grid has");
  step.grid[0] = static_cast<uint32_t>(shape.grid);
  step.grid[1] = shape.gridY;
  step.block[0] = shape.block[0];
  step.block[1] = shape.block[1];

  for (const KernelParam &param : kernel.params) {
    // An output the kernel allows to overwrite an input (cross-entropy's dlogits over its logits)
    // is recorded, so placeArena can accept graph-plan-memory putting both in the same bytes.
    if (!param.aliasOf.empty())
      for (const KernelParam &input : kernel.params)
        if (input.name == param.aliasOf)
          inPlace.push_back(
              {groupIndex, bindingBuffer(param.value, kernel), bindingBuffer(input.value, kernel)});
    plan::DeviceArgument arg;
    arg.name = param.name;
    switch (param.role) {
    case KernelParam::Role::Input:
    case KernelParam::Role::Output:
    case KernelParam::Role::State:
      arg.kind = plan::ArgKind::Buffer;
      arg.buffer = bindingBuffer(param.value, kernel);
      arg.access = param.role == KernelParam::Role::Input    ? plan::Access::Read
                   : param.role == KernelParam::Role::Output ? plan::Access::Write
                                                             : plan::Access::ReadWrite;
      break;
    // Scalars are bound by meaning: sizes are the literal figures of the launch; "instruction %N"
    // is an error site. The seed, step and run length are not scalars: kernels read them from
    // the runtime's run-scalar block.
    case KernelParam::Role::Scalar:
      arg.kind = plan::ArgKind::Int64;
      if (param.value == "elements" || param.value == "table_blocks")
        arg.value = launch.elements;
      else if (param.value == "rows")
        arg.value = launch.rows;
      else if (param.value == "row_length")
        arg.value = launch.rowLength;
      else if (param.value == "table_entries")
        arg.value = static_cast<int64_t>(kernel.table.size());
      else if (param.value.rfind("instruction %", 0) == 0)
        arg.value = bindingInstruction(param.value, kernel);
      else
        throw std::runtime_error("device program: kernel " + kernel.name + " has a scalar '" +
                                 param.name + "' bound to '" + param.value +
                                 "', which the device program cannot supply");
      break;
    case KernelParam::Role::RunScalars:
      arg.kind = plan::ArgKind::RunScalars;
      break;
    // A scratch slice (rowStats, the norm partials, the cross-entropy count) is named per group:
    // kernels of the group using the same name share the bytes, which is how one kernel hands
    // its results to the next.
    case KernelParam::Role::Scratch: {
      const uint64_t elementBytes = param.elementType == "f64" ? 8 : 4;
      int64_t elements = 1;
      for (int64_t dim : param.shape)
        elements *= dim;
      arg.kind = plan::ArgKind::Scratch;
      arg.bytes = static_cast<uint64_t>(elements) * elementBytes;
      arg.value = static_cast<int64_t>(scratch.slice(param.name, arg.bytes));
      arg.access = plan::Access::ReadWrite;
      break;
    }
    // The table is recorded as plan buffers and hyper-parameters; the runtime resolves the
    // buffers to device pointers and packs the OptimizerTensor / NormTensor array itself.
    case KernelParam::Role::Table: {
      arg.kind = plan::ArgKind::Table;
      const bool norm = param.elementType == "NormTensor";
      arg.table.kind = norm ? plan::TableKind::Norm : plan::TableKind::Optimizer;
      const std::string context = "the table of kernel " + kernel.name;
      for (const TensorTableEntry &entry : kernel.table) {
        plan::TableEntry out;
        out.grad = symbolBuffer(entry.grad, context);
        if (!norm) {
          out.param = symbolBuffer(entry.param, context);
          out.firstMoment = symbolBuffer(entry.firstMoment, context);
          if (!entry.secondMoment.empty())
            out.secondMoment = symbolBuffer(entry.secondMoment, context);
          if (!entry.copy.empty())
            out.copy = symbolBuffer(entry.copy, context);
        }
        out.elements = entry.elements;
        out.firstBlock = entry.firstBlock;
        out.beta1 = static_cast<float>(entry.beta1);
        out.beta2 = static_cast<float>(entry.beta2);
        out.eps = static_cast<float>(entry.eps);
        out.weightDecay = static_cast<float>(entry.weightDecay);
        out.clipNorm = static_cast<float>(entry.clipNorm);
        out.momentum = static_cast<float>(entry.momentum);
        arg.table.entries.push_back(out);
      }
      break;
    }
    case KernelParam::Role::ErrorRecord:
      arg.kind = plan::ArgKind::ErrorRecord;
      break;
    }
    step.args.push_back(std::move(arg));
  }
  return step;
}

/// Maps a graph matmul onto one cuBLASLt call: D = op(A) op(B) with row-major [M, K] x [K, N]
/// per batch, either with the batch dims folded into M or as a strided batch. A
/// matmul_epilogue group adds the bias (and a tanh gelu) in cuBLASLt's epilogue; a bias_grad
/// group's matmul is plain, its bias sum a generated kernel. A matmul_accumulate group, and a
/// bias_grad group holding its product's accumulate_grad, add the product into the gradient
/// accumulator: C = D = the accumulator, beta = 1.
plan::MatmulStep Builder::matmulStep(const FusedGroup &group) {
  MatmulOp matmul;
  AddOp add;
  GeluOp gelu;
  for (Operation *op : group.ops) {
    if (auto found = llvm::dyn_cast<MatmulOp>(op)) {
      if (matmul)
        throw std::runtime_error("device program: two matmuls in " +
                                 describeGroup(function, group.id, group.kind));
      matmul = found;
    }
  }
  if (!matmul)
    throw std::runtime_error("device program: no matmul in " +
                             describeGroup(function, group.id, group.kind));
  const std::string where = "the matmul at " + formatLocation(matmul.getLoc(), true);
  plan::MatmulStep step;
  step.a = bufferOf(matmul.getLhs());
  step.b = bufferOf(matmul.getRhs());
  step.transA = matmul.getTransposeLhs();
  step.transB = matmul.getTransposeRhs();
  const std::vector<int64_t> lhs = shapeOf(matmul.getLhs()), rhs = shapeOf(matmul.getRhs());
  const size_t lhsBatchRank = lhs.size() - 2, rhsBatchRank = rhs.size() - 2;
  // M, K, N from the last two dims of each side, after the transposes.
  const int64_t m = step.transA ? lhs[lhs.size() - 1] : lhs[lhs.size() - 2];
  const int64_t k = step.transA ? lhs[lhs.size() - 2] : lhs[lhs.size() - 1];
  const int64_t n = step.transB ? rhs[rhs.size() - 2] : rhs[rhs.size() - 1];
  const int64_t lhsBatch = product(lhs, 0, lhsBatchRank);
  const int64_t rhsBatch = product(rhs, 0, rhsBatchRank);
  const std::vector<int64_t> out = shapeOf(matmul.getResult());
  const int64_t outBatch = product(out, 0, out.size() - 2);
  step.n = n;
  step.k = k;
  if (rhsBatch == 1 && !step.transA) {
    // [..., M, K] x [K, N]: the lhs's batch dims are more rows of one product.
    step.m = lhsBatch * m;
  } else {
    step.m = m;
    step.batch = outBatch;
    // Strided batch: each side steps by its matrix size per batch, or by 0 when it has no batch
    // dims and is broadcast over the other's.
    step.strideD = m * n;
    auto stride = [&](int64_t batch, const char *side) -> int64_t {
      if (batch == 1)
        return 0;
      if (batch == outBatch)
        return side[0] == 'A' ? m * k : k * n;
      throw DeviceProgramUnsupported(where + " broadcasts batch dimensions that a strided "
                                             "cuBLASLt batch cannot describe");
    };
    step.strideA = stride(lhsBatch, "A");
    step.strideB = stride(rhsBatch, "B");
    // Equal batch counts can still be different shapes ([2, 3] against [3, 2]).
    if (lhsBatch > 1 && rhsBatch > 1 &&
        !std::equal(lhs.begin(), lhs.begin() + lhsBatchRank, rhs.begin(),
                    rhs.begin() + rhsBatchRank))
      throw DeviceProgramUnsupported(where + " broadcasts batch dimensions that a strided "
                                             "cuBLASLt batch cannot describe");
    if (step.batch == 1)
      step.strideA = step.strideB = step.strideD = 0;
  }
  step.d = bufferOf(matmul.getResult());
  // A weight gradient's matmul (matmul_accumulate, or a bias_grad group) may add its product
  // into the accumulator itself: D = A B + 1 * D on the f32 state, the product never stored.
  for (Operation *op : group.ops) {
    auto accumulate = llvm::dyn_cast<AccumulateGradOp>(op);
    if (!accumulate)
      continue;
    if (accumulate.getGrad() != matmul.getResult() || accumulate.getUnscale() ||
        !getElementTypeOrSelf(matmul.getType()).isF32())
      throw std::runtime_error("device program: the accumulate_grad in " +
                               describeGroup(function, group.id, group.kind) +
                               " does not add the matmul's f32 product unchanged");
    step.d = step.c = symbolBuffer(accumulate.getAccumulator().str(), where);
    step.beta = 1.0f;
  }
  if (group.kind != "matmul_epilogue")
    return step;

  // The epilogue: the bias add reading the product, then maybe a tanh gelu of the sum.
  for (Operation *op : group.ops) {
    if (auto found = llvm::dyn_cast<AddOp>(op))
      add = found;
    if (auto found = llvm::dyn_cast<GeluOp>(op))
      gelu = found;
  }
  if (!add)
    throw std::runtime_error("device program: no bias add in " +
                             describeGroup(function, group.id, group.kind));
  // cuBLASLt's bias epilogue adds a vector of length N to every row.
  Value bias = add.getLhs() == matmul.getResult() ? add.getRhs() : add.getLhs();
  if (shapeOf(bias) != std::vector<int64_t>{n})
    throw std::runtime_error("device program: the bias of " + where + " is not [" +
                             std::to_string(n) + "]");
  step.bias = bufferOf(bias);
  if (!gelu) {
    step.epilogue = plan::Epilogue::Bias;
    step.d = bufferOf(add.getResult());
    return step;
  }
  // cuBLASLt's GELU epilogue is the tanh approximation; the erf form cannot be fused there.
  if (gelu.getApproximation() != GeluApproximation::tanh)
    throw std::runtime_error("device program: an erf gelu in " +
                             describeGroup(function, group.id, group.kind));
  step.d = bufferOf(gelu.getResult());
  // The sum before the gelu is written out as well when anything outside the group reads it.
  bool sumReadOutside = false;
  for (Operation *user : add.getResult().getUsers())
    sumReadOutside |= std::find(group.ops.begin(), group.ops.end(), user) == group.ops.end();
  if (sumReadOutside) {
    step.epilogue = plan::Epilogue::GeluAuxBias;
    step.aux = bufferOf(add.getResult());
  } else {
    step.epilogue = plan::Epilogue::GeluTanhBias;
  }
  return step;
}

/// The flash kernels run on batch x heads independent [T, D] x [S, D] problems, D one of the
/// head dims they are instantiated for. attention's q, k, v are [..., heads, T or S, D], each
/// slice contiguous; qkv_attention reads them in place from its packed [..., T, 3 heads D]
/// operand (three windows of one buffer, rows 3 heads D apart) and writes o as [..., T, heads D],
/// its gradient dq, dk and dv into the three windows of one packed buffer.
plan::AttentionStep Builder::attentionStep(Operation *op, GroupScratch &scratch) {
  plan::AttentionStep step;
  const bool backward = llvm::isa<AttentionGradOp, QkvAttentionGradOp>(op);
  const bool packed = llvm::isa<QkvAttentionOp, QkvAttentionGradOp>(op);
  step.pass = backward ? plan::AttentionPass::Backward : plan::AttentionPass::Forward;
  // What the four ops share, through their own accessors: the attributes, the f32 row
  // log-sum-exp (the forward's result or the gradient's saved operand) and the saved o.
  Value lse, savedOutput;
  int64_t heads = 0; // the packed ops'
  auto common = [&](auto typed) {
    step.causal = typed.getCausal();
    step.scale = static_cast<float>(typed.getEffectiveScale());
  };
  if (auto forward = llvm::dyn_cast<AttentionOp>(op)) {
    common(forward);
    lse = forward.getLse();
  } else if (auto forward = llvm::dyn_cast<QkvAttentionOp>(op)) {
    common(forward);
    lse = forward.getLse();
    heads = static_cast<int64_t>(forward.getHeads());
  } else if (auto grad = llvm::dyn_cast<AttentionGradOp>(op)) {
    common(grad);
    lse = grad.getSavedLse();
    savedOutput = grad.getSavedOutput();
  } else {
    auto packedGrad = llvm::cast<QkvAttentionGradOp>(op);
    common(packedGrad);
    lse = packedGrad.getSavedLse();
    savedOutput = packedGrad.getSavedOutput();
    heads = static_cast<int64_t>(packedGrad.getHeads());
  }
  const std::string where = "the attention at " + formatLocation(op->getLoc(), true);
  Value first = op->getOperand(0);
  const std::vector<int64_t> firstShape = shapeOf(first);
  int64_t headDim;
  if (packed) {
    const size_t lead = firstShape.size() - 1;
    headDim = firstShape.back() / (3 * heads);
    step.heads = heads;
    step.queries = step.keys = firstShape[lead - 1];
    step.batch = product(firstShape, 0, lead - 1);
  } else {
    const std::vector<int64_t> kShape = shapeOf(op->getOperand(1)),
                               vShape = shapeOf(op->getOperand(2));
    headDim = firstShape.back();
    if (vShape.back() != headDim)
      throw DeviceProgramUnsupported(where + " has value head dim " +
                                     std::to_string(vShape.back()) + " != query head dim " +
                                     std::to_string(headDim) +
                                     "; the flash kernels need them equal");
    const size_t lead = firstShape.size() - 2;
    step.queries = firstShape[lead];
    step.keys = kShape[lead];
    step.heads = lead >= 1 ? firstShape[lead - 1] : 1;
    step.batch = lead >= 1 ? product(firstShape, 0, lead - 1) : 1;
  }
  if (headDim != 16 && headDim != 32 && headDim != 64 && headDim != 128)
    throw DeviceProgramUnsupported(where + " has head dim " + std::to_string(headDim) +
                                   "; the flash kernels have 16, 32, 64 and 128");
  step.headDim = headDim;
  const std::string dtype = floatName(getElementTypeOrSelf(first.getType()));
  // Every tensor but the f32 row log-sum-exp has q's element type.
  std::vector<Value> all(op->getOperands().begin(), op->getOperands().end());
  all.insert(all.end(), op->getResults().begin(), op->getResults().end());
  llvm::erase(all, lse);
  for (Value value : all)
    if (floatName(getElementTypeOrSelf(value.getType())) != dtype || dtype.empty())
      throw DeviceProgramUnsupported(where + " mixes element types; the flash kernels read and "
                                             "write one");
  if (packed) {
    // Rows of 3 heads D (q, k, v side by side) and heads D (o); head h at h D in each.
    const int64_t width = step.heads * headDim, elementBytes = dtype == "f32" ? 4 : 2;
    step.q = step.k = step.v = bufferOf(first);
    step.qLayout = {0, step.queries * 3 * width, headDim, 3 * width};
    step.kLayout = step.vLayout = step.qLayout;
    step.kLayout.offset = static_cast<uint64_t>(width * elementBytes);
    step.vLayout.offset = static_cast<uint64_t>(2 * width * elementBytes);
    step.oLayout = {0, step.queries * width, headDim, width};
  } else {
    step.q = bufferOf(first);
    step.k = bufferOf(op->getOperand(1));
    step.v = bufferOf(op->getOperand(2));
    step.qLayout = step.oLayout =
        plan::AttentionLayout::contiguous(step.heads, step.queries, headDim);
    step.kLayout = step.vLayout = plan::AttentionLayout::contiguous(step.heads, step.keys, headDim);
  }
  if (!backward) {
    step.out = bufferOf(op->getResult(0));
    // An lse nothing reads (its gradient reads a recomputed forward's) has no place in the
    // arena: the kernel writes it into scratch.
    if (lse && !lse.use_empty())
      step.lse = bufferOf(lse);
  } else {
    // attention_grad (q, k, v, dy) -> dq, dk, dv; qkv_attention_grad (qkv, dy) -> the packed
    // gradient, whose three windows dq, dk and dv are.
    step.dOut = bufferOf(op->getOperand(packed ? 1 : 3));
    step.dq = bufferOf(op->getResult(0));
    step.dk = bufferOf(op->getResult(packed ? 0 : 1));
    step.dv = bufferOf(op->getResult(packed ? 0 : 2));
    if (lse) {
      step.out = bufferOf(savedOutput);
      step.lse = bufferOf(lse);
    }
  }
  // bf16 and f16 run on the tensor cores (FlashAttentionMma.cuh, 64 rows a block); f32 keeps
  // the fp32-FMA kernels (32 rows a block).
  step.blockRows = flashUsesTensorCores(dtype) ? 64 : 32;
  const std::string suffix = dtype + "_d" + std::to_string(headDim);
  const std::string causality = step.causal ? "_causal" : "";
  const uint64_t rows = static_cast<uint64_t>(step.batch * step.heads * step.queries);
  // lse: the f32 log-sum-exp of every query row. The forward writes it into its lse result, or
  // into scratch when the plan keeps none. A backward with the forward's saved o and lse runs
  // delta = rowsum(dO * O) per row (into scratch), then dq and dk/dv; without them it first
  // runs the forward kernel again to recompute o and lse into scratch.
  if (!step.readsSavedForward())
    step.forwardKernel =
        internFlash(dtype, headDim, "ampc_flash_attention_fwd_" + suffix + causality);
  if (step.lse == plan::kNoBuffer)
    step.lseOffset = scratch.slice("lse", rows * 4);
  if (backward) {
    step.deltaKernel = internFlash(dtype, headDim, "ampc_flash_attention_bwd_delta_" + suffix);
    step.dqKernel =
        internFlash(dtype, headDim, "ampc_flash_attention_bwd_dq_" + suffix + causality);
    step.dkdvKernel =
        internFlash(dtype, headDim, "ampc_flash_attention_bwd_dkdv_" + suffix + causality);
    if (!step.readsSavedForward()) {
      const uint64_t elementBytes = dtype == "f32" ? 4 : 2;
      step.outOffset = scratch.slice("out", rows * headDim * elementBytes);
    }
    step.deltaOffset = scratch.slice("delta", rows * 4);
  }
  return step;
}

/// A matmul kind starts with its cuBLASLt step (a bias_grad group then also launches its
/// column-sum kernel); an attention group is only flash calls; every other kind is its
/// generated kernels, in order.
void Builder::buildGroup(const FusedGroup &group, plan::DeviceGroup &out, GroupScratch &scratch) {
  const std::string kind = group.kind;
  auto generated = [&]() -> const std::vector<const GeneratedKernel *> & {
    static const std::vector<const GeneratedKernel *> none;
    auto it = kernelsOfGroup.find({function.getName().str(), group.id});
    return it == kernelsOfGroup.end() ? none : it->second;
  };
  if (kind == "matmul" || kind == "matmul_epilogue" || kind == "bias_grad" ||
      kind == "matmul_accumulate")
    out.steps.push_back(matmulStep(group));
  if (kind == "attention") {
    for (Operation *op : group.ops)
      if (llvm::isa<AttentionOp, AttentionGradOp, QkvAttentionOp, QkvAttentionGradOp>(op))
        out.steps.push_back(attentionStep(op, scratch));
    return;
  }
  for (const GeneratedKernel *kernel : generated()) {
    if (kernel->source.empty())
      continue; // a call-site stub
    // Zeroing a buffer is a memset, not a kernel.
    if (kernel->name.find("_embedding_grad_zero_") != std::string::npos) {
      const KernelParam *target = nullptr;
      for (const KernelParam &param : kernel->params)
        if (param.role == KernelParam::Role::Output)
          target = &param;
      if (!target)
        throw std::runtime_error("device program: " + kernel->name + " has no output");
      out.steps.push_back(plan::MemsetStep{bindingBuffer(target->value, *kernel)});
      continue;
    }
    out.steps.push_back(launchStep(*kernel, scratch));
    // A kernel that adds into a buffer a memset of the group zeroed (the scatter of an
    // embedding gradient) reads it too.
    for (plan::DeviceArgument &arg : std::get<plan::LaunchStep>(out.steps.back()).args)
      if (arg.kind == plan::ArgKind::Buffer && arg.access == plan::Access::Write)
        for (const plan::DeviceStep &earlier : out.steps)
          if (const auto *memset = std::get_if<plan::MemsetStep>(&earlier);
              memset && memset->buffer == arg.buffer)
            arg.access = plan::Access::ReadWrite;
  }
}

} // namespace deviceprogram
} // namespace ampc

//===----------------------------------------------------------------------===//
// Functions, the arena and views
//===----------------------------------------------------------------------===//

namespace ampc {
namespace deviceprogram {

/// Kernels are generated for the whole model at once, then distributed to the groups by
/// (function, group id).
DeviceProgramSources Builder::run() {
  for (uint32_t id = 0; id < plan.buffers.size(); ++id)
    if (plan.buffers[id].role != plan::BufferRole::Temporary)
      persistentByName.emplace(plan.buffers[id].name, id);
  kernels = generateKernels(model);
  for (const GeneratedKernel &kernel : kernels)
    kernelsOfGroup[{kernel.function, kernel.group}].push_back(&kernel);

  func::FuncOp entry = model.getEntryFunction();
  if (!entry)
    throw std::runtime_error("device program: the model has no entry function");
  buildFunction(entry, plan.instructions, result.program.microStep, false);
  if (!plan.optimizerInstructions.empty()) {
    auto step =
        llvm::dyn_cast_or_null<func::FuncOp>(SymbolTable::lookupSymbolIn(model, "optimizer_step"));
    if (!step)
      throw std::runtime_error("device program: the plan has an optimizer step, the model none");
    buildFunction(step, plan.optimizerInstructions, result.program.optimizerStep, true);
  }
  // The flash modules hold exactly the entry points the program launches.
  for (auto &[module, needs] : flashEntries) {
    std::vector<std::string> entries = needs.second;
    // Sorted: the source, and so the module's cache key, does not depend on the order of use.
    std::sort(entries.begin(), entries.end());
    result.moduleSources[module] =
        flashAttentionModuleSource(needs.first.first, needs.first.second, entries);
  }
  return std::move(result);
}

/// Every op must carry its graph.fusion group; the groups run in the function's
/// fusion_schedule (or by group id without one), each covering the plan instructions of its
/// ops so the runtime can tell which step computes which instruction.
void Builder::buildFunction(func::FuncOp fn, const std::vector<plan::Instruction> &list,
                            plan::DeviceFunction &out, bool optimizer) {
  function = fn;
  opsByIndex.clear();
  inPlace.clear();
  std::map<int64_t, FusedGroup> groups;
  for (Operation &op : fn.getBody().front()) {
    opsByIndex.push_back(&op);
    auto fusion = op.getAttrOfType<FusionAttr>(GraphDialect::kFusionAttrName);
    if (!fusion)
      throw std::runtime_error("device program: an op of " + fn.getName().str() +
                               " has no graph.fusion (run graph-fuse first)");
    FusedGroup &group = groups[fusion.getGroup()];
    group.id = fusion.getGroup();
    group.kind = stringifyGroupKind(fusion.getKind()).str();
    group.ops.push_back(&op);
  }
  std::vector<int64_t> order;
  if (auto schedule = fn->getAttrOfType<DenseI64ArrayAttr>(GraphDialect::kFusionScheduleAttrName))
    order.assign(schedule.asArrayRef().begin(), schedule.asArrayRef().end());
  else
    for (auto &entry : groups)
      order.push_back(entry.first);
  if (order.size() != groups.size())
    throw std::runtime_error("device program: the fusion_schedule of " + fn.getName().str() +
                             " does not list every group");

  // Step groups in the scheduled order; scratch is reused from one group to the next.
  std::map<const plan::DeviceGroup *, int64_t> fusedIdOf;
  std::vector<std::pair<int64_t, std::vector<Operation *>>> reshapesOfGroup;
  for (int64_t id : order) {
    auto it = groups.find(id);
    if (it == groups.end())
      throw std::runtime_error("device program: the fusion_schedule of " + fn.getName().str() +
                               " names an unknown group");
    const FusedGroup &group = it->second;
    plan::DeviceGroup deviceGroup;
    deviceGroup.kind = group.kind;
    std::vector<Operation *> reshapes;
    for (Operation *op : group.ops) {
      if (llvm::isa<ReshapeOp>(op)) {
        reshapes.push_back(op);
        continue;
      }
      auto covered = provenance.instructionsOf.find(op);
      if (covered != provenance.instructionsOf.end())
        deviceGroup.instructions.insert(deviceGroup.instructions.end(), covered->second.begin(),
                                        covered->second.end());
    }
    if (deviceGroup.instructions.empty()) {
      // Nothing to compute (parameter reads, views); reshapes become views below.
      for (Operation *op : reshapes)
        reshapesOfGroup.push_back({-1, {op}});
      continue;
    }
    GroupScratch scratch;
    groupIndex = static_cast<int64_t>(out.groups.size());
    buildGroup(group, deviceGroup, scratch);
    if (deviceGroup.steps.empty())
      throw std::runtime_error("device program: no device code for " +
                               describeGroup(fn, group.id, group.kind) + ", which computes " +
                               formatLocation(group.ops.front()->getLoc(), true));
    // Groups run one after another, so the function's scratch is the largest group's, not the
    // sum.
    out.scratchBytes = std::max(out.scratchBytes, scratch.bytes);
    reshapesOfGroup.push_back({static_cast<int64_t>(out.groups.size()), reshapes});
    out.groups.push_back(std::move(deviceGroup));
  }

  placeArena(fn, list, out);

  // Reshapes: a view when their data is stored (placed or persistent); otherwise computed
  // inside the kernel of their group, which then covers them.
  std::set<uint32_t> stored;
  for (const plan::ArenaPlacement &placement : out.placements)
    stored.insert(placement.buffer);
  for (auto &[groupIndex, reshapes] : reshapesOfGroup)
    for (Operation *op : reshapes) {
      Value root = op->getResult(0);
      while (auto reshape = root.getDefiningOp<ReshapeOp>())
        root = reshape.getInput();
      const uint32_t source = bufferOf(root);
      const bool persistent = plan.buffers[source].role != plan::BufferRole::Temporary;
      if (persistent || stored.count(source)) {
        out.views.push_back({bufferOf(op->getResult(0)), source});
        continue;
      }
      if (groupIndex < 0)
        throw std::runtime_error("device program: the reshape at " +
                                 formatLocation(op->getLoc(), true) +
                                 " views a value no step stores");
      std::vector<uint32_t> &covered = out.groups[groupIndex].instructions;
      for (uint32_t index : provenance.instructionsOf.lookup(op))
        covered.push_back(index);
      std::sort(covered.begin(), covered.end());
    }
  for (plan::DeviceGroup &group : out.groups)
    std::sort(group.instructions.begin(), group.instructions.end());
}

/// Places every temporary a step writes where graph-plan-memory put its value: the arena and
/// the offsets are the IR's (graph.arena, graph.arena_offsets), never placed again here. Views
/// resolve to their source's storage; a result graph-plan-memory gave its operand's bytes
/// (cross_entropy_grad over its logits) reuses them, which the kernel must allow.
void Builder::placeArena(func::FuncOp fn, const std::vector<plan::Instruction> &list,
                         plan::DeviceFunction &out) {
  auto arena = fn->getAttrOfType<ArenaAttr>(GraphDialect::kArenaAttrName);
  if (!arena)
    throw std::runtime_error("device program: " + fn.getName().str() +
                             " has no graph.arena (run graph-plan-memory after graph-fuse)");
  if (arena.getAlignment() % static_cast<int64_t>(kAlignment) != 0)
    throw std::runtime_error("device program: the arena of " + fn.getName().str() + " is " +
                             std::to_string(arena.getAlignment()) +
                             "-byte aligned; the device needs " + std::to_string(kAlignment));
  // The storage each buffer reads: reshape results resolve to their source.
  // The instruction list is in program order, so a chain of reshapes resolves to its root in
  // one pass.
  std::vector<uint32_t> storage(plan.buffers.size());
  for (uint32_t id = 0; id < storage.size(); ++id)
    storage[id] = id;
  for (const plan::Instruction &instruction : list)
    if (instruction.op == plan::OpCode::Reshape)
      storage[instruction.results[0]] = storage[instruction.operands[0]];

  // What the steps write, in the arena.
  std::set<uint32_t> written;
  for (const plan::DeviceGroup &group : out.groups)
    for (uint32_t id : plan::writtenBuffers(group))
      if (plan.buffers[storage[id]].role == plan::BufferRole::Temporary)
        written.insert(storage[id]);

  // graph-plan-memory's offsets, by plan buffer; a result sharing an operand's bytes in place.
  std::map<uint32_t, int64_t> offsetOf;
  std::map<uint32_t, uint32_t> reuses;
  for (Operation &op : fn.getBody().front()) {
    auto offsets = op.getAttrOfType<DenseI64ArrayAttr>(GraphDialect::kArenaOffsetsAttrName);
    if (!offsets || viewSource(&op))
      continue;
    for (auto [offset, result] : llvm::zip(offsets.asArrayRef(), op.getResults())) {
      auto buffer = provenance.bufferOf.find(result);
      if (offset < 0 || buffer == provenance.bufferOf.end())
        continue;
      offsetOf.emplace(storage[buffer->second], offset);
      if (int operand = inPlaceOperand(&op); operand >= 0) {
        auto source = provenance.bufferOf.find(op.getOperand(operand));
        if (source != provenance.bufferOf.end() && offsetOf.count(storage[source->second]) &&
            offsetOf[storage[source->second]] == offset)
          reuses[storage[buffer->second]] = storage[source->second];
      }
    }
  }

  // Every written temporary must have an offset. When its bytes are its operand's (an in-place
  // result) and both are written here, the kernel must have declared that alias; otherwise the
  // placement would silently corrupt an input the kernel still reads.
  for (uint32_t id : written) {
    auto offset = offsetOf.find(id);
    if (offset == offsetOf.end())
      throw std::runtime_error("device program: a step of " + fn.getName().str() +
                               " writes temporary " + plan.buffers[id].name +
                               ", for which graph-plan-memory placed no value");
    auto source = reuses.find(id);
    const bool inPlace = source != reuses.end() && written.count(source->second);
    if (inPlace &&
        std::none_of(this->inPlace.begin(), this->inPlace.end(), [&](const InPlace &allowed) {
          return allowed.output == id && storage[allowed.input] == source->second;
        }))
      throw std::runtime_error("device program: graph-plan-memory placed " + plan.buffers[id].name +
                               " over " + plan.buffers[source->second].name +
                               ", which its kernel does not allow");
    out.placements.push_back(
        {id, static_cast<uint64_t>(offset->second), inPlace ? source->second : plan::kNoBuffer});
  }
  // The arena's size is graph-plan-memory's, rounded up to the device alignment.
  out.arenaBytes = alignUp(static_cast<uint64_t>(arena.getBytes()));
}

} // namespace deviceprogram

/// The grid follows the kernel's iteration space: grid-stride kernels (elements, rows) get at
/// most kMaxGridStrideBlocks blocks and loop over the rest, while column and multi-tensor
/// kernels have no stride loop and get exactly the blocks their work needs.
KernelShape kernelShape(const KernelLaunch &launch) {
  KernelShape shape;
  const int64_t threads = launch.blockSize;
  // Enough blocks for one unit of work per thread, capped (the kernel's stride loop covers more).
  auto blocksFor = [&](int64_t work) {
    return std::clamp<int64_t>((work + threads - 1) / threads, 1, deviceprogram::kMaxGridStrideBlocks);
  };
  switch (launch.space) {
  case KernelLaunch::Space::Elements:
    // A vectorised kernel's thread handles a pack of vectorWidth elements per iteration.
    shape.grid =
        blocksFor((launch.elements + launch.vectorWidth - 1) / std::max(1, launch.vectorWidth));
    break;
  case KernelLaunch::Space::Rows: {
    const int64_t perBlock = std::max(1, launch.rowsPerBlock);
    shape.grid = std::clamp<int64_t>((launch.rows + perBlock - 1) / perBlock, 1,
                                     deviceprogram::kMaxGridStrideBlocks);
    break;
  }
  case KernelLaunch::Space::Columns:
    // One block per 32 columns and row chunk, no grid-stride loop: every column needs its
    // blocks.
    shape.grid = std::max<int64_t>(1, (launch.rowLength + 31) / 32);
    shape.gridY = static_cast<uint32_t>(std::max(1, launch.chunks));
    break;
  case KernelLaunch::Space::Single:
    shape.grid = 1;
    break;
  case KernelLaunch::Space::Tensors:
    // Block b works on chunk b of the table: exactly as many blocks as chunks.
    shape.grid = std::max<int64_t>(1, launch.elements);
    break;
  }
  // Column kernels run (32 columns, 8 row slices) blocks; every other kind a 1-D block.
  if (launch.space == KernelLaunch::Space::Columns) {
    shape.block[0] = static_cast<uint32_t>(launch.blockSize / launch.blockRows);
    shape.block[1] = static_cast<uint32_t>(launch.blockRows);
  } else {
    shape.block[0] = static_cast<uint32_t>(launch.blockSize);
  }
  return shape;
}

bool flashUsesTensorCores(const std::string &dtype) { return dtype == "bf16" || dtype == "f16"; }

/// The source of one flash-attention module: an `extern "C"` wrapper per entry point that
/// instantiates the FlashAttention.cuh template (FlashAttentionMma.cuh's tensor-core one for
/// the forward, dq and dk/dv of 16-bit storage) for the storage type, the head dim and (from
/// the `_causal` suffix) the causal mask. Every entry point takes the operands' layout
/// (`ampc::flash::Layout`, by value) last.
std::string flashAttentionModuleSource(const std::string &dtype, int64_t headDim,
                                       const std::vector<std::string> &entries) {
  const std::string element = dtype == "bf16"  ? "ampc::flash::Bf16"
                              : dtype == "f16" ? "ampc::flash::F16"
                                               : "ampc::flash::F32";
  const bool mma = flashUsesTensorCores(dtype);
  const std::string header = mma ? "FlashAttentionMma.cuh" : "FlashAttention.cuh";
  const std::string forward = mma ? "mmaAttentionForward" : "flashAttentionForward";
  const std::string dqKernel = mma ? "mmaAttentionBackwardDq" : "flashAttentionBackwardDq";
  const std::string dkdvKernel = mma ? "mmaAttentionBackwardDkDv" : "flashAttentionBackwardDkDv";
  const std::string d = std::to_string(headDim);
  std::ostringstream source;
  source << "// ampc_flash_attention_" << dtype << "_d" << d
         << ": the flash-attention entry points a model needs\n"
         << "// (runtime/cuda/device/" << header << "), " << dtype << " storage, head dim " << d
         << ".\n\n#include \"runtime/cuda/device/" << header << "\"\n\n"
         << "using Element = " << element << ";\nusing Storage = Element::Storage;\n";
  const std::string bounds =
      "extern \"C\" __global__ void __launch_bounds__(ampc::flash::kThreads)\n";
  for (const std::string &entry : entries) {
    const bool causal = entry.size() > 7 && entry.compare(entry.size() - 7, 7, "_causal") == 0;
    const std::string flag = causal ? "true" : "false";
    source << "\n" << bounds << entry << "(";
    // The entry's kind is read from its name: _fwd_, _bwd_delta_, _bwd_dq_, else _bwd_dkdv_.
    if (entry.find("_fwd_") != std::string::npos)
      source << "const Storage *q, const Storage *k, const Storage *v, Storage *o, float *lse,\n"
             << "    int queries, int keys, float scale, ampc::flash::Layout layout) {\n"
             << "  ampc::flash::" << forward << "<Element, " << d << ", " << flag
             << ">(q, k, v, o, lse, queries, keys, scale, layout);\n}\n";
    else if (entry.find("_bwd_delta_") != std::string::npos)
      source << "const Storage *o, const Storage *dO, float *delta, long long rows,\n"
             << "    int queries, ampc::flash::Layout layout) {\n"
             << "  ampc::flash::flashAttentionBackwardDelta<Element, " << d
             << ">(o, dO, delta, rows, queries, layout);\n}\n";
    else if (entry.find("_bwd_dq_") != std::string::npos)
      source << "const Storage *q, const Storage *k, const Storage *v, const Storage *dO,\n"
             << "    const float *lse, const float *delta, Storage *dq, int queries, int keys,\n"
             << "    float scale, ampc::flash::Layout layout) {\n"
             << "  ampc::flash::" << dqKernel << "<Element, " << d << ", " << flag
             << ">(q, k, v, dO, lse, delta, dq, queries, keys, scale, layout);\n}\n";
    else
      source << "const Storage *q, const Storage *k, const Storage *v, const Storage *dO,\n"
             << "    const float *lse, const float *delta, Storage *dk, Storage *dv, int queries,\n"
             << "    int keys, float scale, ampc::flash::Layout layout) {\n"
             << "  ampc::flash::" << dkdvKernel << "<Element, " << d << ", " << flag
             << ">(q, k, v, dO, lse, delta, dk, dv, queries, keys, scale, layout);\n}\n";
  }
  return source.str();
}

/// The device program of \p model's plan, with the sources of its modules (not yet compiled).
DeviceProgramSources buildDeviceProgram(graph::ModelOp model, const plan::Plan &plan,
                                        const PlanProvenance &provenance) {
  return deviceprogram::Builder(model, plan, provenance).run();
}

} // namespace ampc