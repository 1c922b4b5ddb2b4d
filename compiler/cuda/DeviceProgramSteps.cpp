//===- DeviceProgramSteps.cpp - One fused group into device steps -------------===//
//
// The Builder's translation of one fused group (DeviceProgramBuilderImpl.h): generated kernels
// become launches with every argument bound to a plan buffer through the emitter's provenance,
// matmul groups cuBLASLt matmuls with their epilogues, attention groups flash-attention calls
// with their scratch and operand layouts, an embedding gradient's zeroing a memset.
//
//===--------------------------------------------------------------------------===//

#include "compiler/cuda/DeviceProgramBuilderImpl.h"

//===----------------------------------------------------------------------===//
// One fused group into device steps
//===----------------------------------------------------------------------===//

using namespace mlir;
using namespace ampc::graph;

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
/// matmul_epilogue group adds the bias (and a tanh gelu, or a residual read as C with beta 1) in
/// cuBLASLt's epilogue, or multiplies the product by a tanh gelu's derivative at an aux input
/// (DGELU); a bias_grad
/// group's matmul is plain, its bias sum a generated kernel. A matmul_accumulate group, and a
/// bias_grad group holding its product's accumulate_grad, add the product into the gradient
/// accumulator: C = D = the accumulator, beta = 1 (the bias sum's accumulate_grad, when the
/// group holds it, is the sum kernels').
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
  // A bias_grad group's other accumulate_grad adds the bias sum: its kernels do that.
  for (Operation *op : group.ops) {
    auto accumulate = llvm::dyn_cast<AccumulateGradOp>(op);
    if (!accumulate)
      continue;
    if (group.kind == "bias_grad" && accumulate.getGrad() != matmul.getResult() &&
        llvm::isa_and_nonnull<SumOp>(accumulate.getGrad().getDefiningOp()))
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

  // A tanh gelu's gradient of the product: D = product * gelu'(x), x the gelu's input read as
  // the aux matrix (the forward's GELU_AUX wrote it, or any value of D's shape and dtype).
  for (Operation *op : group.ops)
    if (auto geluGrad = llvm::dyn_cast<GeluGradOp>(op)) {
      if (geluGrad.getApproximation() != GeluApproximation::tanh ||
          geluGrad.getGrad() != matmul.getResult() || geluGrad.getInput() == matmul.getResult())
        throw std::runtime_error("device program: the gelu_grad in " +
                                 describeGroup(function, group.id, group.kind) +
                                 " is not a tanh gelu's gradient of the product");
      step.epilogue = plan::Epilogue::DGelu;
      step.aux = bufferOf(geluGrad.getInput());
      step.d = bufferOf(geluGrad.getResult());
      return step;
    }

  // Otherwise: the bias add reading the product, then a tanh gelu of the sum or a residual add
  // of a value of D's shape (C, beta = 1), or only the residual add.
  AddOp residual;
  for (Operation *op : group.ops) {
    if (auto found = llvm::dyn_cast<AddOp>(op)) {
      const bool readsProduct =
          found.getLhs() == matmul.getResult() || found.getRhs() == matmul.getResult();
      Value other = found.getLhs() == matmul.getResult() ? found.getRhs() : found.getLhs();
      if (readsProduct && shapeOf(other) == std::vector<int64_t>{n})
        add = found;
      else
        residual = found;
    }
    if (auto found = llvm::dyn_cast<GeluOp>(op))
      gelu = found;
  }
  if (residual) {
    // D = A B (+ bias) + C: the residual's other operand is C, read by cuBLASLt with beta 1.
    Value sum = add ? add.getResult() : matmul.getResult();
    if ((residual.getLhs() != sum && residual.getRhs() != sum) || gelu)
      throw std::runtime_error("device program: the residual add in " +
                               describeGroup(function, group.id, group.kind) +
                               " does not add to the product or its biased sum");
    Value addend = residual.getLhs() == sum ? residual.getRhs() : residual.getLhs();
    if (shapeOf(addend) != shapeOf(residual.getResult()))
      throw std::runtime_error("device program: the residual of " + where + " is broadcast");
    step.c = bufferOf(addend);
    step.beta = 1.0f;
    step.d = bufferOf(residual.getResult());
    if (!add)
      return step;
  }
  if (!add)
    throw std::runtime_error("device program: no bias add in " +
                             describeGroup(function, group.id, group.kind));
  // cuBLASLt's bias epilogue adds a vector of length N to every row.
  Value bias = add.getLhs() == matmul.getResult() ? add.getRhs() : add.getLhs();
  step.bias = bufferOf(bias);
  if (!gelu) {
    step.epilogue = plan::Epilogue::Bias;
    if (!residual)
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
  // bf16 and f16 run on the tensor cores (FlashAttentionMma.cuh, 64 rows a block; the forward
  // 128 at head dims up to 64, kMmaForwardBlockRows); f32 keeps the fp32-FMA kernels (32 rows a
  // block).
  const bool tensorCores = flashUsesTensorCores(dtype);
  step.blockRows = tensorCores ? 64 : 32;
  step.forwardBlockRows = !tensorCores ? 32 : headDim <= 64 ? 128 : 64;
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
