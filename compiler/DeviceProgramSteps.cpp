//===- DeviceProgramSteps.cpp - device steps of one fused group ------------------===//
//
// Translates one fused group into the steps of its step group: generated kernels become
// launches, their arguments bound to plan buffers through the emitter's provenance ("@symbol",
// "%N", "%N#k") and their scratch sliced from the group's; matmul groups become cuBLASLt
// matmuls with their epilogue; attention groups flash-attention calls; zeroing kernels memsets.
// Kernels and flash entry points are interned into the program's modules as they are used.
//
//===--------------------------------------------------------------------------===//

#include "compiler/DeviceProgramBuilderInternal.h"

#include "mlir/IR/BuiltinAttributes.h"

#include <set>
#include <sstream>

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

uint32_t Builder::internFlash(const std::string &dtype, int64_t headDim,
                              const std::string &entry) {
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

Operation *Builder::opNumber(const std::string &text, const GeneratedKernel &kernel) const {
  size_t end = text.find('#');
  std::string digits = text.substr(1, end == std::string::npos ? std::string::npos : end - 1);
  char *rest = nullptr;
  unsigned long long number = std::strtoull(digits.c_str(), &rest, 10);
  if (text.empty() || text[0] != '%' || digits.empty() || *rest != '\0' ||
      number >= opsByIndex.size())
    throw std::runtime_error("device program: kernel " + kernel.name + " has an argument bound "
                             "to '" + text + "', which names no op of " +
                             function.getName().str());
  return opsByIndex[number];
}

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

int64_t Builder::bindingInstruction(const std::string &binding,
                                    const GeneratedKernel &kernel) const {
  Operation *op = opNumber(binding.substr(binding.find('%')), kernel);
  auto it = provenance.instructionsOf.find(op);
  if (it == provenance.instructionsOf.end() || it->second.empty())
    throw std::runtime_error("device program: kernel " + kernel.name + " reports errors for an "
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
  const int64_t threads = launch.blockSize;
  auto blocksFor = [&](int64_t work) {
    return std::clamp<int64_t>((work + threads - 1) / threads, 1, kMaxGridStrideBlocks);
  };
  int64_t grid = 1;
  switch (launch.space) {
  case KernelLaunch::Space::Elements:
    grid = blocksFor((launch.elements + launch.vectorWidth - 1) / std::max(1, launch.vectorWidth));
    break;
  case KernelLaunch::Space::Rows:
    grid = std::clamp<int64_t>(launch.rows, 1, kMaxGridStrideBlocks);
    break;
  case KernelLaunch::Space::Columns:
    // One block per 32 columns, no grid-stride loop: every column needs its block.
    grid = std::max<int64_t>(1, (launch.rowLength + 31) / 32);
    break;
  case KernelLaunch::Space::Single:
    grid = 1;
    break;
  case KernelLaunch::Space::Tensors:
    // Block b works on chunk b of the table: exactly as many blocks as chunks.
    grid = std::max<int64_t>(1, launch.elements);
    break;
  }
  if (grid > 0x7fffffff)
    throw DeviceProgramUnsupported("kernel " + kernel.name + " needs " + std::to_string(grid) +
                                   " blocks, more than a CUDA grid has");
  step.grid[0] = static_cast<uint32_t>(grid);
  if (launch.space == KernelLaunch::Space::Columns) {
    step.block[0] = static_cast<uint32_t>(launch.blockSize / launch.blockRows);
    step.block[1] = static_cast<uint32_t>(launch.blockRows);
  } else {
    step.block[0] = static_cast<uint32_t>(launch.blockSize);
  }

  for (const KernelParam &param : kernel.params) {
    if (!param.aliasOf.empty())
      for (const KernelParam &input : kernel.params)
        if (input.name == param.aliasOf)
          inPlace.push_back({groupIndex, bindingBuffer(param.value, kernel),
                             bindingBuffer(input.value, kernel)});
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
    case KernelParam::Role::Scalar:
      if (param.value == "seed") {
        arg.kind = plan::ArgKind::Seed;
      } else if (param.value == "step") {
        arg.kind = plan::ArgKind::Step;
      } else if (param.value == "total_steps") {
        arg.kind = plan::ArgKind::TotalSteps;
      } else {
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
      }
      break;
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

plan::AttentionStep Builder::attentionStep(Operation *op, GroupScratch &scratch) {
  plan::AttentionStep step;
  const bool backward = llvm::isa<AttentionGradOp>(op);
  step.pass = backward ? plan::AttentionPass::Backward : plan::AttentionPass::Forward;
  Value q = op->getOperand(0), k = op->getOperand(1), v = op->getOperand(2);
  const std::string where = "the attention at " + formatLocation(op->getLoc(), true);
  const std::vector<int64_t> qShape = shapeOf(q), kShape = shapeOf(k), vShape = shapeOf(v);
  const int64_t headDim = qShape.back();
  if (vShape.back() != headDim)
    throw DeviceProgramUnsupported(where + " has value head dim " + std::to_string(vShape.back()) +
                                   " != query head dim " + std::to_string(headDim) +
                                   "; the flash kernels need them equal");
  if (headDim != 16 && headDim != 32 && headDim != 64 && headDim != 128)
    throw DeviceProgramUnsupported(where + " has head dim " + std::to_string(headDim) +
                                   "; the flash kernels have 16, 32, 64 and 128");
  const std::string dtype = floatName(getElementTypeOrSelf(q.getType()));
  std::vector<Value> all(op->getOperands().begin(), op->getOperands().end());
  all.insert(all.end(), op->getResults().begin(), op->getResults().end());
  for (Value value : all)
    if (floatName(getElementTypeOrSelf(value.getType())) != dtype || dtype.empty())
      throw DeviceProgramUnsupported(where + " mixes element types; the flash kernels read and "
                                             "write one");
  const size_t lead = qShape.size() - 2;
  step.queries = qShape[lead];
  step.keys = kShape[lead];
  step.headDim = headDim;
  step.heads = lead >= 1 ? qShape[lead - 1] : 1;
  step.batch = lead >= 1 ? product(qShape, 0, lead - 1) : 1;
  step.q = bufferOf(q);
  step.k = bufferOf(k);
  step.v = bufferOf(v);
  bool causal;
  double scale;
  if (auto forward = llvm::dyn_cast<AttentionOp>(op)) {
    causal = forward.getCausal();
    scale = forward.getEffectiveScale();
    step.out = bufferOf(forward.getResult());
  } else {
    auto grad = llvm::cast<AttentionGradOp>(op);
    causal = grad.getCausal();
    scale = grad.getEffectiveScale();
    step.dOut = bufferOf(grad.getGrad());
    step.dq = bufferOf(grad.getQueryGrad());
    step.dk = bufferOf(grad.getKeyGrad());
    step.dv = bufferOf(grad.getValueGrad());
  }
  step.causal = causal;
  step.scale = static_cast<float>(scale);
  const std::string suffix = dtype + "_d" + std::to_string(headDim);
  const std::string causality = causal ? "_causal" : "";
  step.forwardKernel =
      internFlash(dtype, headDim, "ampc_flash_attention_fwd_" + suffix + causality);
  const uint64_t rows = static_cast<uint64_t>(step.batch * step.heads * step.queries);
  step.lseOffset = scratch.slice("lse", rows * 4);
  if (backward) {
    step.deltaKernel = internFlash(dtype, headDim, "ampc_flash_attention_bwd_delta_" + suffix);
    step.dqKernel =
        internFlash(dtype, headDim, "ampc_flash_attention_bwd_dq_" + suffix + causality);
    step.dkdvKernel =
        internFlash(dtype, headDim, "ampc_flash_attention_bwd_dkdv_" + suffix + causality);
    const uint64_t elementBytes = dtype == "f32" ? 4 : 2;
    step.outOffset = scratch.slice("out", rows * headDim * elementBytes);
    step.deltaOffset = scratch.slice("delta", rows * 4);
  }
  return step;
}

void Builder::buildGroup(const FusedGroup &group, plan::DeviceGroup &out,
                         GroupScratch &scratch) {
  const std::string kind = group.kind;
  auto generated = [&]() -> const std::vector<const GeneratedKernel *> & {
    static const std::vector<const GeneratedKernel *> none;
    auto it = kernelsOfGroup.find({function.getName().str(), group.id});
    return it == kernelsOfGroup.end() ? none : it->second;
  };
  if (kind == "matmul" || kind == "matmul_epilogue" || kind == "bias_grad")
    out.steps.push_back(matmulStep(group));
  if (kind == "attention") {
    for (Operation *op : group.ops)
      if (llvm::isa<AttentionOp, AttentionGradOp>(op))
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
