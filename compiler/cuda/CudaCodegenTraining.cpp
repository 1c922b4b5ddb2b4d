//===- CudaCodegenTraining.cpp - Optimizer and scalar step kernels --------===//
//
// The multi-tensor optimizer (AdamW, SGD) and the small kernels of the step's scalar ops: the
// gradient seed, the learning-rate schedule, the global gradient norm and the loss-scale
// update.
//
//===----------------------------------------------------------------------===//

#include "compiler/cuda/KernelGenerator.h"

#include <algorithm>
#include <functional>
#include <sstream>
#include <stdexcept>

using namespace mlir;
using namespace ampc::graph;

namespace ampc {
namespace cudagen {

//===----------------------------------------------------------------------===//
// The multi-tensor optimizer and the small scalar ops
//===----------------------------------------------------------------------===//

namespace {

/// Elements per block of the multi-tensor kernels: each tensor is cut into 4096-element
/// chunks, one block each, so a launch's grid is the sum of the chunk counts and a small
/// tensor (a bias) costs one block rather than a launch.
constexpr int64_t kTensorChunk = 4096;

/// Threads per block of the optimizer kernel, each moving 4 consecutive f32 elements (16 bytes)
/// per iteration: 4 iterations per chunk. A chunk starts at a multiple of 4 elements, so every
/// 4-element pack of it is 16-byte aligned in an aligned buffer.
constexpr int kOptimizerThreads = 256;
static_assert(kTensorChunk % (4 * kOptimizerThreads) == 0,
              "an optimizer block covers its chunk in whole iterations of 4-element packs");

/// Device source prepended to the optimizer kernel: the table entry and the block-to-tensor
/// search. The runtime (runtime/cuda/Executor.cpp) packs the entries byte by byte at this
/// struct's offsets, so its field order and types are part of the contract with the runtime.
const char *kTensorTable =
    R"(// One parameter of the multi-tensor update; the runtime fills a device array of these.
struct OptimizerTensor {
  float *param;        // f32 master weight, updated in place
  float *grad;         // f32 accumulator, zeroed
  float *firstMoment;  // AdamW m, or the SGD momentum buffer
  float *secondMoment; // AdamW v (unused by SGD)
  void *copy;          // the bf16/f16 copy the micro step reads, or null
  int copyType;        // 0 none, 1 bf16, 2 f16
  long long elements;
  long long firstBlock; // blocks [firstBlock, next entry's firstBlock) update this tensor
  float beta1, beta2, eps, weightDecay, clipNorm, momentum;
};

// The entry whose block range holds this block: a binary search over firstBlock.
__device__ __forceinline__ const OptimizerTensor &tensorOfBlock(const OptimizerTensor *table,
                                                                int tensors) {
  int low = 0, high = tensors - 1;
  while (low < high) {
    const int middle = (low + high + 1) / 2;
    if (table[middle].firstBlock <= static_cast<long long>(blockIdx.x))
      low = middle;
    else
      high = middle - 1;
  }
  return table[low];
}

)";

} // namespace

/// Emits the one multi-tensor launch that applies every AdamW (or SGD) update of the optimizer
/// step: the table lists each parameter with its state and hyper-parameters, and block b
/// updates one chunk of the tensor whose block range holds b.
void Generator::optimizerKernel() {
  KernelWriter writer(opIndex, members);
  std::vector<TensorTableEntry> table;
  bool adamw = false, sgd = false, skips = false;
  std::string scaler;
  Value lr, norm;
  ModelOp model = group->function->getParentOfType<ModelOp>();
  int64_t firstBlock = 0;
  // Gather one table entry per update, in the group's order, assigning each its run of blocks;
  // the lr and grad-norm scalars are shared by every update of a step, so the last one seen
  // serves.
  for (Operation *op : group->ops) {
    TensorTableEntry entry;
    std::optional<StringRef> copy, skip;
    // What AdamW and SGD updates have alike.
    auto common = [&](auto update) {
      entry.param = update.getParam().str();
      entry.grad = update.getGrad().str();
      entry.weightDecay = update.getWeightDecay().convertToDouble();
      entry.clipNorm = update.getClipNorm().convertToDouble();
      copy = update.getCopy();
      skip = update.getSkipNonfinite();
      lr = update.getLr();
      norm = update.getGradNorm();
    };
    if (auto update = llvm::dyn_cast<AdamWOp>(op)) {
      adamw = true;
      common(update);
      entry.firstMoment = update.getFirstMoment().str();
      entry.secondMoment = update.getSecondMoment().str();
      entry.beta1 = update.getBeta1().convertToDouble();
      entry.beta2 = update.getBeta2().convertToDouble();
      entry.eps = update.getEps().convertToDouble();
    } else if (auto update = llvm::dyn_cast<SgdOp>(op)) {
      sgd = true;
      common(update);
      entry.firstMoment = update.getMomentumBuffer().str();
      entry.momentum = update.getMomentum().convertToDouble();
    } else {
      continue;
    }
    // copyType (0 none, 1 bf16, 2 f16) picks the store of the refreshed reduced-precision copy.
    if (copy) {
      entry.copy = copy->str();
      auto copyOp = SymbolTable::lookupSymbolIn(model, *copy);
      if (auto paramCopy = llvm::dyn_cast_or_null<ParamCopyOp>(copyOp))
        entry.copyType = dtypeName(paramCopy.getTensorType().getElementType());
    }
    if (skip) {
      skips = true;
      scaler = skip->str();
    }
    if (auto param =
            llvm::dyn_cast_or_null<ParamOp>(SymbolTable::lookupSymbolIn(model, entry.param)))
      entry.elements = param.getTensorType().getNumElements();
    // ceil(elements / 4096) blocks per tensor; firstBlock is the running total, which the device
    // binary-searches.
    entry.firstBlock = firstBlock;
    firstBlock += (entry.elements + kTensorChunk - 1) / kTensorChunk;
    table.push_back(entry);
  }
  // The kernel has one update rule compiled in: a step mixing optimizers cannot share a launch.
  if (adamw && sgd)
    throw std::runtime_error("CUDA codegen: AdamW and SGD updates in one optimizer group");
  writer.params.push_back(
      {Role::Table, "table", "OptimizerTensor", {int64_t(table.size())}, "table"});
  writer.scalarParam("tensors", "i64", "table_entries");
  std::string lrPtr = writer.tensorParam(lr, Role::Input);
  std::string normPtr = writer.tensorParam(norm, Role::Input);
  std::string found, applied;
  if (skips) {
    // Under loss scaling the kernel reads the step's overflow flag and takes t from the applied
    // step count (skipped steps do not advance the bias correction); otherwise t comes from the
    // host's step counter.
    found = writer.stateParam(scaler + ".found_nonfinite", "f32", {});
    applied = writer.stateParam(scaler + ".applied_steps", "f32", {});
  } else if (adamw) {
    // Only AdamW's bias correction reads the step; SGD reads no run scalar.
    writer.runScalar("step");
  }

  std::ostringstream body;
  // [begin, end) is this block's chunk of its tensor; the last chunk of a tensor is short.
  body << "  const OptimizerTensor &tensor = tensorOfBlock(table, static_cast<int>(tensors));\n"
       << "  const long long begin = (static_cast<long long>(blockIdx.x) - tensor.firstBlock) * "
       << kTensorChunk << "ll;\n"
       << "  const long long end = min(tensor.elements, begin + " << kTensorChunk << "ll);\n";
  if (skips)
    body << "  // Skipped on a non-finite gradient (the accumulator is still zeroed).\n"
         << "  const bool skip = " << found << "[0] != 0.0f;\n";
  else
    body << "  const bool skip = false;\n";
  // Gradient clipping by the global norm: scale every gradient by clip_norm / (norm + 1e-6)
  // when that is below 1; a NaN coefficient (from a NaN norm) is kept rather than replaced by
  // 1, so a bad norm is not silently ignored. clip_norm <= 0 disables clipping.
  body << "  // Scalars in double, as the CPU backend: clip = min(1, clip_norm / (norm + 1e-6)).\n"
       << "  const double lr = static_cast<double>(" << lrPtr << "[0]);\n"
       << "  const double norm = static_cast<double>(" << normPtr << "[0]);\n"
       << "  double clipCoefficient = 1.0;\n"
       << "  if (tensor.clipNorm > 0.0f) {\n"
       << "    const double c = static_cast<double>(tensor.clipNorm) / (norm + 1e-6);\n"
       << "    clipCoefficient = c < 1.0 || c != c ? c : 1.0;\n  }\n"
       << "  const float clip = static_cast<float>(clipCoefficient);\n";
  std::string math;
  // The per-element update, written once over the names of an element's values (p and the
  // moments are read-modify-written in place, grad is read) and used by both loops below, so the
  // packed and the scalar elements do the same f32 operations in the same order.
  std::function<std::string(const std::string &, const std::string &, const std::string &,
                            const std::string &, const std::string &)>
      update;
  if (adamw) {
    // AdamW (decoupled weight decay, torch's formulation): the bias corrections 1 - b1^t and
    // sqrt(1 - b2^t) are folded into stepSize and correction2Sqrt once per block, in double;
    // per element the update is in f32:
    // p = p (1 - lr wd) - lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps).
    body << "  // t counts the applied steps (torch's rule under loss scaling).\n"
         << "  const double t = "
         << (skips ? "static_cast<double>(" + applied + "[0]) + 1.0"
                   : "static_cast<double>(step) + 1.0")
         << ";\n"
         << "  const float decay = static_cast<float>(1.0 - lr * tensor.weightDecay);\n"
         << "  const float beta1 = tensor.beta1, beta2 = tensor.beta2;\n"
         << "  const float oneMinusBeta1 = static_cast<float>(1.0 - "
            "static_cast<double>(tensor.beta1));\n"
         << "  const float oneMinusBeta2 = static_cast<float>(1.0 - "
            "static_cast<double>(tensor.beta2));\n"
         << "  const float stepSize = static_cast<float>(lr / (1.0 - "
            "pow(static_cast<double>(tensor.beta1), t)));\n"
         << "  const float correction2Sqrt = static_cast<float>(sqrt(1.0 - "
            "pow(static_cast<double>(tensor.beta2), t)));\n";
    update = [](const std::string &indent, const std::string &p, const std::string &grad,
                const std::string &m, const std::string &v) {
      return indent + "const float g = " + grad + " * clip;\n" + indent + p + " = " + p +
             " * decay;\n" + indent + m + " = beta1 * " + m + " + oneMinusBeta1 * g;\n" + indent +
             v + " = beta2 * " + v + " + oneMinusBeta2 * (g * g);\n" + indent + p + " = " + p +
             " - stepSize * (" + m + " / (sqrtf(" + v + ") / correction2Sqrt + eps));\n";
    };
    math = "AdamW over every parameter in one launch: g = clip * grad; p *= 1 - lr * wd;\n"
           "m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2;\n"
           "p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps); grad = 0; the bf16/f16\n"
           "copy refreshed from p. Block b updates a 4096-element chunk of the table entry\n"
           "holding it, each thread 4 consecutive elements per iteration.\n"
           "Memory: p, grad, m, v read and written once in 16-byte accesses; the copy written\n"
           "once in 8-byte stores.";
  } else {
    // SGD with momentum (torch's form, no dampening or Nesterov): weight decay joins the
    // gradient, buf = momentum * buf + g, p -= lr * buf.
    body << "  const float lrValue = static_cast<float>(lr);\n";
    update = [](const std::string &indent, const std::string &p, const std::string &grad,
                const std::string &buffer, const std::string &) {
      return indent + "const float g = " + grad + " * clip + weightDecay * " + p + ";\n" + indent +
             buffer + " = momentum * " + buffer + " + g;\n" + indent + p + " = " + p +
             " - lrValue * " + buffer + ";\n";
    };
    math = "SGD with momentum over every parameter in one launch: g = clip * grad + wd * p;\n"
           "buf = momentum * buf + g; p -= lr * buf; grad = 0; the bf16/f16 copy refreshed.\n"
           "Each thread updates 4 consecutive elements per iteration. Memory: p, grad, buf read\n"
           "and written once in 16-byte accesses; the copy written once in 8-byte stores.";
  }
  // The state each element reads and writes besides p and grad: AdamW's two moments, SGD's
  // momentum buffer.
  std::vector<std::pair<std::string, std::string>> moments = {{"m", "firstMoment"}};
  if (adamw)
    moments.push_back({"v", "secondMoment"});
  // The entry's pointers and per-element constants, read from the table once: as far as the
  // compiler knows, the stores below could alias the table, so a field read inside the loops is
  // re-read every iteration and the packed stores are split into 4-byte ones.
  body << "  // The entry's fields in registers (stores through them could alias the table).\n"
       << "  float *const param = tensor.param;\n"
       << "  float *const accumulator = tensor.grad;\n";
  for (const auto &[name, field] : moments)
    body << "  float *const " << field << " = tensor." << field << ";\n";
  body << "  void *const copy = tensor.copy;\n"
       << "  const int copyType = tensor.copyType;\n";
  if (adamw)
    body << "  const float eps = tensor.eps;\n";
  else
    body << "  const float weightDecay = tensor.weightDecay, momentum = tensor.momentum;\n";
  auto packAt = [](const std::string &type, const std::string &pointer) {
    return "*reinterpret_cast<Pack<" + type + ", 4> *>(" + pointer + " + i)";
  };
  // Packed loop. Whether or not the step was skipped, the gradient accumulator is zeroed and the
  // micro step's bf16/f16 copy is rewritten from the (possibly unchanged) f32 master weight.
  body << "  // 16-byte accesses: each thread takes 4 consecutive elements per iteration (a\n"
       << "  // " << kOptimizerThreads << "-thread block covers its " << kTensorChunk
       << "-element chunk in " << kTensorChunk / (4 * kOptimizerThreads)
       << " iterations). Every pointer is\n"
       << "  // 16-byte aligned: the runtime places each buffer at a 256-byte-aligned address\n"
       << "  // (runtime/cuda/Memory.h, kBufferAlignment; docs/plan-format.md, \"Memory\"), and a\n"
       << "  // chunk starts at a multiple of 4096 elements, so every i below starts a pack.\n"
       << "  // Only a tensor's last chunk can end in 1-3 elements that fill no pack: the scalar\n"
       << "  // tail.\n"
       << "  const long long packEnd = end - (end - begin) % 4;\n"
       << "  for (long long i = begin + 4ll * threadIdx.x; i < packEnd; i += 4ll * blockDim.x) {\n"
       << "    Pack<float, 4> p = " << packAt("float", "param") << ";\n"
       << "    if (!skip) {\n"
       << "      const Pack<float, 4> grad = " << packAt("float", "accumulator") << ";\n";
  for (const auto &[name, field] : moments)
    body << "      Pack<float, 4> " << name << " = " << packAt("float", field) << ";\n";
  body << "#pragma unroll\n"
       << "      for (int k = 0; k < 4; ++k) {\n"
       << update("        ", "p.v[k]", "grad.v[k]", "m.v[k]", "v.v[k]") << "      }\n";
  for (const auto &[name, field] : moments)
    body << "      " << packAt("float", field) << " = " << name << ";\n";
  body << "      " << packAt("float", "param") << " = p;\n"
       << "    }\n"
       << "    " << packAt("float", "accumulator") << " = Pack<float, 4>{};\n";
  // The copy's 4 rounded values go out as one 8-byte store of their bits, element k in bits
  // [16 k, 16 k + 16) (little-endian); a Pack<bfloat16, 4> copied as a struct is stored as four
  // 2-byte stores.
  for (const auto &[code, type] : {std::pair{1, "bfloat16"}, std::pair{2, "half16"}}) {
    const std::string t = type;
    body << (code == 1 ? "    if" : " else if") << " (copyType == " << code << ") {\n"
         << "      unsigned long long bits = 0;\n"
         << "#pragma unroll\n"
         << "      for (int k = 0; k < 4; ++k)\n"
         << "        bits |= static_cast<unsigned long long>(fromFloat<" << t
         << ">(p.v[k]).bits) << (16 * k);\n"
         << "      *reinterpret_cast<unsigned long long *>(static_cast<" << t
         << " *>(copy) + i) = bits;\n"
         << "    }";
  }
  body << "\n  }\n";
  // Scalar tail: the same update, one element per thread.
  body << "  // Scalar tail: the elements of [packEnd, end), fewer than 4.\n"
       << "  for (long long i = packEnd + threadIdx.x; i < end; i += blockDim.x) {\n"
       << "    float p = param[i];\n"
       << "    if (!skip) {\n"
       << "      const float grad = accumulator[i];\n";
  for (const auto &[name, field] : moments)
    body << "      float " << name << " = " << field << "[i];\n";
  body << update("      ", "p", "grad", "m", "v");
  for (const auto &[name, field] : moments)
    body << "      " << field << "[i] = " << name << ";\n";
  body << "      param[i] = p;\n"
       << "    }\n"
       << "    accumulator[i] = 0.0f;\n"
       << "    if (copyType == 1)\n"
       << "      static_cast<bfloat16 *>(copy)[i] = fromFloat<bfloat16>(p);\n"
       << "    else if (copyType == 2)\n"
       << "      static_cast<half16 *>(copy)[i] = fromFloat<half16>(p);\n"
       << "  }\n";
  KernelLaunch launch;
  launch.space = KernelLaunch::Space::Tensors;
  // For Tensors launches `elements` is the block count: the grid is exactly one block per chunk.
  launch.elements = firstBlock;
  launch.blockSize = kOptimizerThreads;
  finish(writer, "optimizer", adamw ? "adamw" : "sgd", math, body.str(), launch, table,
         kTensorTable);
}

/// Emits the backward pass's seed, d(loss)/d(loss) scaled for accumulation and loss scaling:
/// scale / accum_steps, so the summed micro-step gradients are the scaled mean gradient.
void Generator::gradSeedKernel(GradSeedOp op) {
  KernelWriter writer(opIndex, members);
  std::string scale = op.getScale() ? writer.tensorParam(op.getScale(), Role::Input) : "";
  std::string out = writer.tensorParam(op.getResult(), Role::Output);
  std::string body = "  " + out + "[0] = " + (scale.empty() ? "1.0f" : scale + "[0]") + " / " +
                     floatLiteral(double(op.getAccumSteps())) + ";\n";
  KernelLaunch launch;
  launch.space = KernelLaunch::Space::Single;
  launch.blockSize = 32;
  // The scalar kernels are built outside a fused group: a one-op group stands in for the
  // header's op list while `finish` runs, then the real group is restored.
  Group single{group->function, group->id, "none", {op}};
  const Group *saved = group;
  group = &single;
  finish(writer, "grad_seed", "",
         "seed = (loss scale or 1) / accum_steps. Memory: one scalar read and written.", body,
         launch);
  group = saved;
}

/// Emits the learning-rate schedule as a one-thread kernel, so the rate never round-trips
/// through the host: the settings are compiled in, the step and run length are read from the
/// run scalars.
void Generator::lrScheduleKernel(LrScheduleOp op) {
  KernelWriter writer(opIndex, members);
  std::string out = writer.tensorParam(op.getResult(), Role::Output);
  writer.runScalar("step");
  writer.runScalar("totalSteps");
  const bool cosine = op.getKind() == LrSchedule::cosine;
  std::ostringstream body;
  // Linear warmup over the first `warmup` steps, reaching lr at step warmup - 1; then constant,
  // or cosine from lr down to min_lr over [warmup, decay] (decay_steps, or the run's total steps
  // when it is 0), held at min_lr afterwards. All in double, as the CPU backend.
  body << "  const double s = static_cast<double>(step);\n"
       << "  const double warmup = " << doubleLiteral(double(op.getWarmupSteps())) << ";\n"
       << "  const double lr = " << doubleLiteral(op.getLr().convertToDouble()) << ";\n"
       << "  double rate = lr;\n"
       << "  if (s < warmup) {\n    rate = lr * (s + 1.0) / warmup;\n  }";
  if (cosine)
    body << " else {\n"
         << "    const double minLr = " << doubleLiteral(op.getMinLr().convertToDouble()) << ";\n"
         << "    const double decay = "
         << (op.getDecaySteps() > 0 ? doubleLiteral(double(op.getDecaySteps()))
                                    : std::string("static_cast<double>(totalSteps)"))
         << ";\n"
         << "    const double progress = fmin(fmax((s - warmup) / fmax(1.0, decay - warmup), 0.0), "
            "1.0);\n"
         << "    rate = minLr + 0.5 * (1.0 + cos(3.14159265358979323846 * progress)) * (lr - "
            "minLr);\n"
         << "  }\n";
  else
    body << "\n  (void)totalSteps;\n";
  body << "  " << out << "[0] = static_cast<float>(rate);\n";
  KernelLaunch launch;
  launch.space = KernelLaunch::Space::Single;
  launch.blockSize = 32;
  Group single{group->function, group->id, "none", {op}};
  const Group *saved = group;
  group = &single;
  finish(writer, "lr_schedule", cosine ? "cosine" : "constant",
         "lr of step s: linear warmup, then constant or cosine decay to min_lr (in double,\n"
         "as the CPU backend). Memory: one scalar written.",
         body.str(), launch);
  group = saved;
}

namespace {

/// Device source prepended to the global-norm partial kernel: the table of accumulators (laid
/// out as the runtime packs it) and a double-precision block sum.
const char *kNormTable =
    R"(// One tensor of the global norm; the runtime fills a device array of these.
struct NormTensor {
  const float *data;
  long long elements;
  long long firstBlock;
};

// The sum of value over the block, in double, valid in every thread (as blockSum in f32).
__device__ __forceinline__ double blockSumDouble(double value, double *scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int warps = (blockDim.x + 31) >> 5;
  for (int offset = 16; offset > 0; offset >>= 1)
    value += __shfl_xor_sync(0xffffffffu, value, offset);
  __syncthreads();
  if (lane == 0)
    scratch[warp] = value;
  __syncthreads();
  value = lane < warps ? scratch[lane] : 0.0;
  for (int offset = 16; offset > 0; offset >>= 1)
    value += __shfl_xor_sync(0xffffffffu, value, offset);
  return value;
}

)";

} // namespace

/// Emits the global gradient norm, sqrt(sum over all accumulators of g^2), in two kernels:
/// per-chunk partial sums over a tensor table (the optimizer's chunking), then one block
/// that adds the partials and takes the root. Two stages avoid double atomics and keep the
/// summation order fixed, so the norm is the same on every run.
void Generator::globalNormKernels(GlobalNormOp op) {
  ModelOp model = group->function->getParentOfType<ModelOp>();
  std::vector<TensorTableEntry> table;
  int64_t blocks = 0;
  // The same 4096-element chunking as the optimizer, over the gradient accumulators.
  for (Attribute state : op.getStates()) {
    TensorTableEntry entry;
    entry.grad = llvm::cast<FlatSymbolRefAttr>(state).getValue().str();
    if (auto stateOp =
            llvm::dyn_cast_or_null<StateOp>(SymbolTable::lookupSymbolIn(model, entry.grad)))
      entry.elements = stateOp.getTensorType().getNumElements();
    entry.firstBlock = blocks;
    blocks += (entry.elements + kTensorChunk - 1) / kTensorChunk;
    table.push_back(entry);
  }
  Group single{group->function, group->id, "none", {op}};
  const Group *saved = group;
  group = &single;
  {
    KernelWriter writer(opIndex, members);
    writer.params.push_back({Role::Table, "table", "NormTensor", {int64_t(table.size())}, "table"});
    writer.scalarParam("tensors", "i64", "table_entries");
    writer.scratchParam("partials", {blocks}, "f64");
    std::ostringstream body;
    body
        // The same block-to-tensor binary search as tensorOfBlock, written inline: this kernel's
        // prelude is kNormTable, not kTensorTable.
        << "  __shared__ double reduceScratch[32];\n"
        << "  int low = 0, high = static_cast<int>(tensors) - 1;\n"
        << "  while (low < high) {\n"
        << "    const int middle = (low + high + 1) / 2;\n"
        << "    if (table[middle].firstBlock <= static_cast<long long>(blockIdx.x)) low = middle;\n"
        << "    else high = middle - 1;\n  }\n"
        << "  const NormTensor &tensor = table[low];\n"
        << "  const long long begin = (static_cast<long long>(blockIdx.x) - tensor.firstBlock) * "
        << kTensorChunk << "ll;\n"
        << "  const long long end = min(tensor.elements, begin + " << kTensorChunk << "ll);\n"
        << "  // Squares summed in double, as the CPU backend sums them.\n"
        << "  double squares = 0.0;\n"
        << "  for (long long i = begin + threadIdx.x; i < end; i += blockDim.x) {\n"
        << "    const double x = static_cast<double>(tensor.data[i]);\n"
        << "    squares += x * x;\n  }\n"
        << "  squares = blockSumDouble(squares, reduceScratch);\n"
        << "  if (threadIdx.x == 0)\n    partials[blockIdx.x] = squares;\n";
    KernelLaunch launch;
    launch.space = KernelLaunch::Space::Tensors;
    launch.elements = blocks;
    finish(writer, "global_norm", "partial",
           "Stage 1 of the global norm: partials[b] = sum of squares of block b's 4096-element\n"
           "chunk of the table's tensors, in double (the CPU backend sums in double).\n"
           "Memory: every accumulator read once.",
           body.str(), launch, table, kNormTable);
  }
  KernelWriter writer(opIndex, members);
  writer.scratchParam("partials", {blocks}, "f64");
  // Stage 2 reads the f64 partials scratch the first stage wrote, one value per stage-1
  // block.
  writer.scalarParam("blocks", "i64", "table_blocks");
  std::string out = writer.tensorParam(op.getResult(), Role::Output);
  std::ostringstream body;
  // Each thread sums a strided subset of the partials, the warps reduce by shuffles, and thread
  // 0 adds the (at most 32) warp totals in a fixed order.
  body << "  __shared__ double warpTotals[32];\n  double total = 0.0;\n"
       << "  for (long long b = threadIdx.x; b < blocks; b += blockDim.x)\n"
       << "    total += partials[b];\n"
       << "  for (int offset = 16; offset > 0; offset >>= 1)\n"
       << "    total += __shfl_xor_sync(0xffffffffu, total, offset);\n"
       << "  if ((threadIdx.x & 31) == 0)\n    warpTotals[threadIdx.x >> 5] = total;\n"
       << "  __syncthreads();\n"
       << "  if (threadIdx.x == 0) {\n    double sum = 0.0;\n"
       << "    for (int w = 0; w < static_cast<int>(blockDim.x >> 5); ++w)\n      sum += "
          "warpTotals[w];\n"
       << "    " << out << "[0] = static_cast<float>(sqrt(sum));\n  }\n";
  KernelLaunch launch;
  launch.space = KernelLaunch::Space::Single;
  launch.blockSize = 1024;
  launch.elements = blocks; // the partial sums it reads: `table_blocks`
  finish(writer, "global_norm", "finish",
         "Stage 2: norm = sqrt(sum of the partials), summed in double by one block.\n"
         "Memory: the partials read once.",
         body.str(), launch);
  group = saved;
}

/// Emits the last kernel of a loss-scaled optimizer step: count the step if it was applied,
/// run the dynamic scaler's rule (numerics::updateLossScale, shared with the CPU backend) on
/// the device, and clear the overflow flag for the next step. No host synchronisation.
void Generator::updateLossScaleKernel(UpdateLossScaleOp op) {
  ModelOp model = group->function->getParentOfType<ModelOp>();
  auto scaler =
      llvm::dyn_cast_or_null<LossScaleOp>(SymbolTable::lookupSymbolIn(model, op.getScaler()));
  if (!scaler)
    throw std::runtime_error("CUDA codegen: " + describeOp(op) + " names no graph.loss_scale");
  KernelWriter writer(opIndex, members);
  const std::string name = op.getScaler().str();
  std::string scale = writer.stateParam(name + ".scale", "f32", {});
  std::string tracker = writer.stateParam(name + ".growth_tracker", "f32", {});
  std::string found = writer.stateParam(name + ".found_nonfinite", "f32", {});
  std::string applied = writer.stateParam(name + ".applied_steps", "f32", {});
  // The count of backoffs the floor stopped: an f32 state buffer (exact up to 2^24), the
  // plan's loss-scaling floor_hits.
  std::string floorHits = writer.stateParam(name + ".floor_hits", "f32", {});
  const bool dynamic = scaler.getMode() == LossScaleMode::dynamic;
  std::ostringstream body;
  // The counters live in f32 state buffers (the plan's state is all f32) and are converted to
  // the int fields of LossScaleState and back; a static scale never changes, so only the
  // applied count and the flag are touched.
  body << "  const bool overflow = " << found << "[0] != 0.0f;\n"
       << "  if (!overflow)\n    " << applied << "[0] = " << applied << "[0] + 1.0f;\n";
  if (dynamic)
    body << "  numerics::LossScaleConfig config;\n"
         << "  config.growthFactor = " << floatLiteral(scaler.getGrowthFactor().convertToDouble())
         << ";\n"
         << "  config.backoffFactor = " << floatLiteral(scaler.getBackoffFactor().convertToDouble())
         << ";\n"
         << "  config.growthInterval = " << scaler.getGrowthInterval() << ";\n"
         << "  config.minScale = " << floatLiteral(scaler.getMinScale().convertToDouble()) << ";\n"
         << "  numerics::LossScaleState state{" << scale << "[0], static_cast<int>(" << tracker
         << "[0]), static_cast<int>(" << floorHits << "[0])};\n"
         << "  numerics::updateLossScale(state, config, overflow);\n"
         << "  " << scale << "[0] = state.scale;\n"
         << "  " << tracker << "[0] = static_cast<float>(state.growthTracker);\n"
         << "  " << floorHits << "[0] = static_cast<float>(state.floorHits);\n";
  else
    body << "  (void)" << scale << ";\n  (void)" << tracker << ";\n  (void)" << floorHits << ";\n";
  body << "  " << found << "[0] = 0.0f;\n";
  KernelLaunch launch;
  launch.space = KernelLaunch::Space::Single;
  launch.blockSize = 32;
  Group single{group->function, group->id, "none", {op}};
  const Group *saved = group;
  group = &single;
  finish(writer, "update_loss_scale", dynamic ? "dynamic" : "static",
         "Ends the optimizer step on the device (LossScale.h, GradScaler's rule): count the\n"
         "step if applied, back off or grow the scale, clear the non-finite flag.\n"
         "floor_hits is the scaler's count of backoffs stopped by min_scale (for the warning).\n"
         "Memory: five scalars.",
         body.str(), launch);
  group = saved;
}

} // namespace cudagen
} // namespace ampc
