//===- CudaCodegenTraining.cpp - Optimizer and scalar step kernels --------===//
//
// The multi-tensor optimizer (AdamW, SGD) and the small kernels of the step's scalar ops: the
// gradient seed, the learning-rate schedule, the global gradient norm and the loss-scale
// update. Their device code is fixed and lives in runtime/cuda/device/Optimizer.cuh; each
// kernel here is the entry point that calls it: the signature (every argument bound to a plan
// value), the launch bounds, the name, and what the compiler decides (the update rule, the
// chunk size of the tensor tables, the compiled-in settings), plus the header comment.
//
//===----------------------------------------------------------------------===//

#include "compiler/cuda/KernelGenerator.h"

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

/// The device code of every kernel here.
constexpr const char *kOptimizerHeader = "runtime/cuda/device/Optimizer.cuh";

/// Elements per block of the multi-tensor kernels: each tensor is cut into 4096-element
/// chunks, one block each, so a launch's grid is the sum of the chunk counts and a small
/// tensor (a bias) costs one block rather than a launch. Passed to the device code as its
/// `Chunk` template argument.
constexpr int64_t kTensorChunk = 4096;

/// Threads per block of the optimizer kernel, each moving 4 consecutive f32 elements (16 bytes)
/// per iteration: 4 iterations per chunk. A chunk starts at a multiple of 4 elements, so every
/// 4-element pack of it is 16-byte aligned in an aligned buffer.
constexpr int kOptimizerThreads = 256;
static_assert(kTensorChunk % (4 * kOptimizerThreads) == 0,
              "an optimizer block covers its chunk in whole iterations of 4-element packs");

/// Runs \p emit with \p group standing for a one-op group of \p op: the scalar kernels are built
/// outside a fused group, and the header's op list names the op.
template <typename F> void asSingleOpGroup(const Group *&group, Operation *op, F emit) {
  Group single{group->function, group->id, "none", {op}};
  const Group *saved = group;
  group = &single;
  emit();
  group = saved;
}

} // namespace

/// Emits the one multi-tensor launch that applies every AdamW (or SGD) update of the optimizer
/// step: the table lists each parameter with its state and hyper-parameters, and block b
/// updates one chunk of the tensor whose block range holds b (multiTensorUpdate).
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
  writer.include(kOptimizerHeader);
  writer.params.push_back(
      {Role::Table, "table", "OptimizerTensor", {int64_t(table.size())}, "table"});
  writer.scalarParam("tensors", "i64", "table_entries");
  std::string lrPtr = writer.tensorParam(lr, Role::Input);
  std::string normPtr = writer.tensorParam(norm, Role::Input);
  // Under loss scaling the kernel reads the step's overflow flag and takes t from the applied
  // step count (skipped steps do not advance the bias correction); otherwise t comes from the
  // run's step, which only AdamW's bias correction reads (SGD reads no run scalar).
  std::string step = "RunStep{0ull}";
  if (skips) {
    // The flag's argument first, then the count's.
    const std::string found = writer.stateParam(scaler + ".found_nonfinite", "f32", {});
    const std::string applied = writer.stateParam(scaler + ".applied_steps", "f32", {});
    step = "ScaledStep{" + found + ", " + applied + "}";
  } else if (adamw) {
    step = "RunStep{" + writer.runScalar("step") + "}";
  }
  const std::string body = std::string("  multiTensorUpdate<") + (adamw ? "AdamW" : "Sgd") + ", " +
                           std::to_string(kTensorChunk) + "ll>(table, tensors, " + lrPtr + ", " +
                           normPtr + ", " + step + ");\n";
  const std::string math =
      adamw
          ? "AdamW over every parameter in one launch: g = clip * grad; p *= 1 - lr * wd;\n"
            "m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2;\n"
            "p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps); grad = 0; the bf16/f16\n"
            "copy refreshed from p. Block b updates a 4096-element chunk of the table entry\n"
            "holding it, each thread 4 consecutive elements per iteration.\n"
            "Memory: p, grad, m, v read and written once in 16-byte accesses; the copy written\n"
            "once in 8-byte stores."
          : "SGD with momentum over every parameter in one launch: g = clip * grad + wd * p;\n"
            "buf = momentum * buf + g; p -= lr * buf; grad = 0; the bf16/f16 copy refreshed.\n"
            "Each thread updates 4 consecutive elements per iteration. Memory: p, grad, buf read\n"
            "and written once in 16-byte accesses; the copy written once in 8-byte stores.";
  KernelLaunch launch;
  launch.space = KernelLaunch::Space::Tensors;
  // For Tensors launches `elements` is the block count: the grid is exactly one block per chunk.
  launch.elements = firstBlock;
  launch.blockSize = kOptimizerThreads;
  finish(writer, "optimizer", adamw ? "adamw" : "sgd", math, body, launch, table);
}

/// Emits the backward pass's seed, d(loss)/d(loss) scaled for accumulation and loss scaling:
/// scale / accum_steps, so the summed micro-step gradients are the scaled mean gradient.
void Generator::gradSeedKernel(GradSeedOp op) {
  KernelWriter writer(opIndex, members);
  writer.include(kOptimizerHeader);
  // The seed's overloads: (out, scale, accum_steps) under loss scaling, else (out, accum_steps).
  std::string scale = op.getScale() ? writer.tensorParam(op.getScale(), Role::Input) : "";
  std::string out = writer.tensorParam(op.getResult(), Role::Output);
  std::string body = "  gradSeed(" + out + ", " + (scale.empty() ? "" : scale + ", ") +
                     floatLiteral(double(op.getAccumSteps())) + ");\n";
  KernelLaunch launch;
  launch.space = KernelLaunch::Space::Single;
  launch.blockSize = 32;
  asSingleOpGroup(group, op, [&] {
    finish(writer, "grad_seed", "",
           "seed = (loss scale or 1) / accum_steps. Memory: one scalar read and written.", body,
           launch);
  });
}

/// Emits the learning-rate schedule as a one-thread kernel, so the rate never round-trips
/// through the host: the settings are compiled in, the step and run length are read from the
/// run scalars.
void Generator::lrScheduleKernel(LrScheduleOp op) {
  KernelWriter writer(opIndex, members);
  writer.include(kOptimizerHeader);
  std::string out = writer.tensorParam(op.getResult(), Role::Output);
  writer.runScalar("step");
  writer.runScalar("totalSteps");
  const bool cosine = op.getKind() == LrSchedule::cosine;
  // The settings in the order of LrScheduleSettings; decay_steps 0 decays over the run's total
  // steps.
  std::ostringstream body;
  body << "  // cosine, lr, warmup_steps, min_lr, decay_steps\n"
       << "  const LrScheduleSettings settings = {" << (cosine ? "true" : "false") << ", "
       << doubleLiteral(op.getLr().convertToDouble()) << ", "
       << doubleLiteral(double(op.getWarmupSteps())) << ", "
       << doubleLiteral(op.getMinLr().convertToDouble()) << ", "
       << doubleLiteral(double(op.getDecaySteps())) << "};\n"
       << "  learningRate(" << out << ", step, totalSteps, settings);\n";
  KernelLaunch launch;
  launch.space = KernelLaunch::Space::Single;
  launch.blockSize = 32;
  asSingleOpGroup(group, op, [&] {
    finish(writer, "lr_schedule", cosine ? "cosine" : "constant",
           "lr of step s: linear warmup, then constant or cosine decay to min_lr (in double,\n"
           "as the CPU backend). Memory: one scalar written.",
           body.str(), launch);
  });
}

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
  asSingleOpGroup(group, op, [&] {
    KernelWriter writer(opIndex, members);
    writer.include(kOptimizerHeader);
    writer.params.push_back({Role::Table, "table", "NormTensor", {int64_t(table.size())}, "table"});
    writer.scalarParam("tensors", "i64", "table_entries");
    writer.scratchParam("partials", {blocks}, "f64");
    KernelLaunch launch;
    launch.space = KernelLaunch::Space::Tensors;
    launch.elements = blocks;
    finish(writer, "global_norm", "partial",
           "Stage 1 of the global norm: partials[b] = sum of squares of block b's 4096-element\n"
           "chunk of the table's tensors, in double (the CPU backend sums in double).\n"
           "Memory: every accumulator read once.",
           "  globalNormPartial<" + std::to_string(kTensorChunk) +
               "ll>(table, tensors, partials);\n",
           launch, table);
  });
  asSingleOpGroup(group, op, [&] {
    KernelWriter writer(opIndex, members);
    writer.include(kOptimizerHeader);
    writer.scratchParam("partials", {blocks}, "f64");
    // Stage 2 reads the f64 partials scratch the first stage wrote, one value per stage-1
    // block.
    writer.scalarParam("blocks", "i64", "table_blocks");
    std::string out = writer.tensorParam(op.getResult(), Role::Output);
    KernelLaunch launch;
    launch.space = KernelLaunch::Space::Single;
    launch.blockSize = 1024;
    launch.elements = blocks; // the partial sums it reads: `table_blocks`
    finish(writer, "global_norm", "finish",
           "Stage 2: norm = sqrt(sum of the partials), summed in double by one block.\n"
           "Memory: the partials read once.",
           "  globalNormFinish(partials, blocks, " + out + ");\n", launch);
  });
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
  writer.include(kOptimizerHeader);
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
  // A dynamic scaler's settings are compiled in; a static scale never changes.
  if (dynamic)
    body << "  // growth factor, backoff factor, growth interval, min scale\n"
         << "  const DynamicLossScale settings = {"
         << floatLiteral(scaler.getGrowthFactor().convertToDouble()) << ", "
         << floatLiteral(scaler.getBackoffFactor().convertToDouble()) << ", "
         << scaler.getGrowthInterval() << ", "
         << floatLiteral(scaler.getMinScale().convertToDouble()) << "};\n";
  body << "  finishLossScaledStep(" << scale << ", " << tracker << ", " << floorHits << ", "
       << found << ", " << applied << ", " << (dynamic ? "&settings" : "nullptr") << ");\n";
  KernelLaunch launch;
  launch.space = KernelLaunch::Space::Single;
  launch.blockSize = 32;
  asSingleOpGroup(group, op, [&] {
    finish(writer, "update_loss_scale", dynamic ? "dynamic" : "static",
           "Ends the optimizer step on the device (LossScale.h, GradScaler's rule): count the\n"
           "step if applied, back off or grow the scale, clear the non-finite flag.\n"
           "floor_hits is the scaler's count of backoffs stopped by min_scale (for the warning).\n"
           "Memory: five scalars.",
           body.str(), launch);
  });
}

} // namespace cudagen
} // namespace ampc
