//===- Optimizer.cuh - The optimizer step's device code -------------------===//
//
// The kernels of the training step's optimizer phase, as device functions that generated
// kernels call: the multi-tensor AdamW / SGD update of every parameter in one launch, the two
// stages of the global gradient norm, and the one-thread kernels of the step's scalars (the
// backward pass's seed, the learning-rate schedule, the loss-scale update). The generator
// (compiler/cuda/CudaCodegenTraining.cpp) writes each kernel's entry point, its signature bound
// to plan values, its launch bounds and its name, and passes what it decides: the update rule,
// the chunk size of the tensor tables, compiled-in settings. The arithmetic is the CPU
// backend's (runtime/cpu/OptimizerKernels.cpp), in the same order, so the results agree bit for
// bit (EmulatedOptimizerTest). NVRTC-compilable: no standard library headers.
//
//===----------------------------------------------------------------------===//

#ifndef AMPC_RUNTIME_CUDA_DEVICE_OPTIMIZER_CUH
#define AMPC_RUNTIME_CUDA_DEVICE_OPTIMIZER_CUH

#include "runtime/cuda/device/KernelSupport.h"
#include "runtime/numerics/LossScale.h"

namespace ampc {
namespace device {

//===----------------------------------------------------------------------===//
// Tensor tables
//===----------------------------------------------------------------------===//

/// One parameter of the multi-tensor update; the runtime fills a device array of these
/// (runtime/cuda/Executor.cpp packs the entries byte by byte at these offsets, 88 bytes each, so
/// the field order and types are part of the contract with the runtime; docs/plan-format.md).
struct OptimizerTensor {
  float *param;        ///< f32 master weight, updated in place
  float *grad;         ///< f32 accumulator, zeroed
  float *firstMoment;  ///< AdamW m, or the SGD momentum buffer
  float *secondMoment; ///< AdamW v (unused by SGD)
  void *copy;          ///< the bf16/f16 copy the micro step reads, or null
  int copyType;        ///< 0 none, 1 bf16, 2 f16
  long long elements;
  long long firstBlock; ///< blocks [firstBlock, next entry's firstBlock) update this tensor
  float beta1, beta2, eps, weightDecay, clipNorm, momentum;
};

/// One gradient accumulator of the global norm (24 bytes; the runtime fills these too).
struct NormTensor {
  const float *data;
  long long elements;
  long long firstBlock;
};

/// The entry of \p table (OptimizerTensor or NormTensor) whose block range holds this block: a
/// binary search over firstBlock. Each tensor of a table is cut into chunks of a fixed size, one
/// block each, so a small tensor (a bias) costs one block rather than a launch. Memory: about
/// log2(tensors) entries' firstBlock read.
template <typename Entry>
__device__ __forceinline__ const Entry &tensorOfBlock(const Entry *table, int tensors) {
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

//===----------------------------------------------------------------------===//
// The multi-tensor update
//===----------------------------------------------------------------------===//

/// The gradient-clipping coefficient, in double as the CPU backend (cpu::kernels::
/// clipCoefficient): min(1, clip_norm / (norm + 1e-6)); a NaN coefficient (from a NaN norm) is
/// kept rather than replaced by 1, so a bad norm is not silently ignored; clip_norm <= 0
/// disables clipping.
__device__ __forceinline__ float clipCoefficient(float clipNorm, double norm) {
  double coefficient = 1.0;
  if (clipNorm > 0.0f) {
    const double c = static_cast<double>(clipNorm) / (norm + 1e-6);
    coefficient = c < 1.0 || c != c ? c : 1.0;
  }
  return static_cast<float>(coefficient);
}

/// AdamW (decoupled weight decay, torch's formulation) for one tensor of the table at step t
/// (counted from 1): the bias corrections 1 - b1^t and sqrt(1 - b2^t) are folded into stepSize
/// and correction2Sqrt once per block, in double; per element, in f32:
///   g = clip grad; p = p (1 - lr wd); m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2;
///   p = p - lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps).
struct AdamW {
  /// The moments an element reads and writes besides p and grad: m and v.
  enum { kMoments = 2 };
  float clip, decay, beta1, beta2, oneMinusBeta1, oneMinusBeta2, stepSize, correction2Sqrt, eps;

  __device__ __forceinline__ AdamW(const OptimizerTensor &tensor, double lr, float clip, double t)
      : clip(clip), decay(static_cast<float>(1.0 - lr * tensor.weightDecay)), beta1(tensor.beta1),
        beta2(tensor.beta2), oneMinusBeta1(static_cast<float>(1.0 - static_cast<double>(beta1))),
        oneMinusBeta2(static_cast<float>(1.0 - static_cast<double>(beta2))),
        stepSize(static_cast<float>(lr / (1.0 - pow(static_cast<double>(beta1), t)))),
        correction2Sqrt(static_cast<float>(sqrt(1.0 - pow(static_cast<double>(beta2), t)))),
        eps(tensor.eps) {}

  /// Updates one element: \p p, \p m and \p v in place, from its accumulated \p grad.
  __device__ __forceinline__ void update(float &p, float grad, float &m, float &v) const {
    const float g = grad * clip;
    p = p * decay;
    m = beta1 * m + oneMinusBeta1 * g;
    v = beta2 * v + oneMinusBeta2 * (g * g);
    p = p - stepSize * (m / (sqrtf(v) / correction2Sqrt + eps));
  }
};

/// SGD with momentum (torch's form, no dampening or Nesterov); weight decay joins the gradient.
/// Per element, in f32: g = clip grad + wd p; buf = momentum buf + g; p = p - lr buf.
struct Sgd {
  /// The one moment an element reads and writes: the momentum buffer.
  enum { kMoments = 1 };
  float clip, lr, weightDecay, momentum;

  __device__ __forceinline__ Sgd(const OptimizerTensor &tensor, double lr, float clip, double)
      : clip(clip), lr(static_cast<float>(lr)), weightDecay(tensor.weightDecay),
        momentum(tensor.momentum) {}

  /// Updates one element: \p p and the momentum buffer \p buffer in place.
  __device__ __forceinline__ void update(float &p, float grad, float &buffer, float &) const {
    const float g = grad * clip + weightDecay * p;
    buffer = momentum * buffer + g;
    p = p - lr * buffer;
  }
};

/// Stores the bf16/f16 copy of the 4 weights \p p at \p copy + \p i as one 8-byte store of their
/// bits, element k in bits [16 k, 16 k + 16) (little-endian): a Pack<bfloat16, 4> copied as a
/// struct is stored as four 2-byte stores.
template <typename T>
__device__ __forceinline__ void storeCopyPack(void *copy, long long i, const Pack<float, 4> &p) {
  unsigned long long bits = 0;
#pragma unroll
  for (int k = 0; k < 4; ++k)
    bits |= static_cast<unsigned long long>(fromFloat<T>(p.v[k]).bits) << (16 * k);
  *reinterpret_cast<unsigned long long *>(static_cast<T *>(copy) + i) = bits;
}

/// The step of an update without loss scaling: never skipped, t = the run's step + 1.
struct RunStep {
  unsigned long long step;
  __device__ __forceinline__ bool skipped() const { return false; }
  __device__ __forceinline__ double t() const { return static_cast<double>(step) + 1.0; }
};

/// The step of an update under loss scaling: skipped when the scaler's overflow flag is set,
/// t = the scaler's count of applied steps + 1 (skipped steps do not advance the bias
/// correction, torch's rule).
struct ScaledStep {
  const float *foundNonfinite;
  const float *appliedSteps;
  __device__ __forceinline__ bool skipped() const { return foundNonfinite[0] != 0.0f; }
  __device__ __forceinline__ double t() const { return static_cast<double>(appliedSteps[0]) + 1.0; }
};

/// The multi-tensor optimizer update (Rule: AdamW or Sgd; Step: RunStep or ScaledStep), one
/// block's share: block b updates chunk b - firstBlock (Chunk elements; a tensor's last chunk is
/// short) of the table entry whose block range holds b. \p lr and \p gradNorm are the step's
/// scalars (one f32 each), taken in double as the CPU backend. Whether or not the step applies,
/// the gradient accumulator is zeroed and the bf16/f16 copy (copyType 1 or 2) is rewritten from
/// the f32 weight.
///
/// Each thread takes 4 consecutive elements per iteration (256 threads cover a 4096-element
/// chunk in 4 iterations). Every pointer is 16-byte aligned: the runtime places each buffer at
/// a 256-byte-aligned address (runtime/cuda/Memory.h, kBufferAlignment; docs/plan-format.md,
/// "Memory"), and a chunk starts at a multiple of Chunk elements (a multiple of 4), so every
/// pack starts at a multiple of 4. Only a tensor's last chunk can end in 1-3 elements that fill
/// no pack: the scalar tail, the same f32 operations in the same order.
/// Memory: p, grad and the moments read and written once in 16-byte accesses, the copy written
/// once in 8-byte stores.
template <typename Rule, long long Chunk, typename Step>
__device__ __forceinline__ void multiTensorUpdate(const OptimizerTensor *table, long long tensors,
                                                  const float *lr, const float *gradNorm,
                                                  Step step) {
  static_assert(Chunk % 4 == 0, "a chunk starts a pack");
  const OptimizerTensor &tensor = tensorOfBlock(table, static_cast<int>(tensors));
  // [begin, end) is this block's chunk of its tensor.
  const long long begin = (static_cast<long long>(blockIdx.x) - tensor.firstBlock) * Chunk;
  const long long end = min(tensor.elements, begin + Chunk);
  // Skipped on a non-finite gradient (the accumulator is still zeroed).
  const bool skip = step.skipped();
  const double lrValue = static_cast<double>(lr[0]);
  const float clip = clipCoefficient(tensor.clipNorm, static_cast<double>(gradNorm[0]));
  const Rule rule(tensor, lrValue, clip, step.t());
  // The entry's fields in registers: as far as the compiler knows, the stores below could alias
  // the table, so a field read inside the loops would be re-read every iteration and the packed
  // stores split into 4-byte ones.
  float *const param = tensor.param;
  float *const accumulator = tensor.grad;
  float *const firstMoment = tensor.firstMoment;
  float *const secondMoment = Rule::kMoments == 2 ? tensor.secondMoment : nullptr;
  void *const copy = tensor.copy;
  const int copyType = tensor.copyType;

  const long long packEnd = end - (end - begin) % 4;
  for (long long i = begin + 4ll * threadIdx.x; i < packEnd; i += 4ll * blockDim.x) {
    Pack<float, 4> p = *reinterpret_cast<Pack<float, 4> *>(param + i);
    if (!skip) {
      const Pack<float, 4> grad = *reinterpret_cast<Pack<float, 4> *>(accumulator + i);
      Pack<float, 4> m = *reinterpret_cast<Pack<float, 4> *>(firstMoment + i);
      Pack<float, 4> v;
      if (Rule::kMoments == 2)
        v = *reinterpret_cast<Pack<float, 4> *>(secondMoment + i);
#pragma unroll
      for (int k = 0; k < 4; ++k)
        rule.update(p.v[k], grad.v[k], m.v[k], v.v[k]);
      *reinterpret_cast<Pack<float, 4> *>(firstMoment + i) = m;
      if (Rule::kMoments == 2)
        *reinterpret_cast<Pack<float, 4> *>(secondMoment + i) = v;
      *reinterpret_cast<Pack<float, 4> *>(param + i) = p;
    }
    *reinterpret_cast<Pack<float, 4> *>(accumulator + i) = Pack<float, 4>{};
    if (copyType == 1)
      storeCopyPack<bfloat16>(copy, i, p);
    else if (copyType == 2)
      storeCopyPack<half16>(copy, i, p);
  }
  // Scalar tail: the elements of [packEnd, end), fewer than 4.
  for (long long i = packEnd + threadIdx.x; i < end; i += blockDim.x) {
    float p = param[i];
    if (!skip) {
      const float grad = accumulator[i];
      float m = firstMoment[i];
      float v = 0.0f;
      if (Rule::kMoments == 2)
        v = secondMoment[i];
      rule.update(p, grad, m, v);
      firstMoment[i] = m;
      if (Rule::kMoments == 2)
        secondMoment[i] = v;
      param[i] = p;
    }
    accumulator[i] = 0.0f;
    if (copyType == 1)
      static_cast<bfloat16 *>(copy)[i] = fromFloat<bfloat16>(p);
    else if (copyType == 2)
      static_cast<half16 *>(copy)[i] = fromFloat<half16>(p);
  }
}

//===----------------------------------------------------------------------===//
// The global gradient norm
//===----------------------------------------------------------------------===//

/// The sum of \p value over the block, in double, valid in every thread (as blockSum in f32);
/// \p scratch holds 32 doubles in shared memory.
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

/// Stage 1 of the global norm: partials[b] = the sum of squares of block b's chunk (Chunk
/// elements, the optimizer's chunking) of the table's accumulators, in double, as the CPU
/// backend sums them. Memory: every accumulator read once; one double written a block.
template <long long Chunk>
__device__ __forceinline__ void globalNormPartial(const NormTensor *table, long long tensors,
                                                  double *partials) {
  __shared__ double reduceScratch[32];
  const NormTensor &tensor = tensorOfBlock(table, static_cast<int>(tensors));
  const long long begin = (static_cast<long long>(blockIdx.x) - tensor.firstBlock) * Chunk;
  const long long end = min(tensor.elements, begin + Chunk);
  double squares = 0.0;
  for (long long i = begin + threadIdx.x; i < end; i += blockDim.x) {
    const double x = static_cast<double>(tensor.data[i]);
    squares += x * x;
  }
  squares = blockSumDouble(squares, reduceScratch);
  if (threadIdx.x == 0)
    partials[blockIdx.x] = squares;
}

/// Stage 2 of the global norm, one block: norm = sqrt(the sum of the \p blocks partials), in
/// double. Each thread sums a strided subset, the warps reduce by shuffles, and thread 0 adds
/// the (at most 32) warp totals in a fixed order, so the norm is the same on every run.
/// Memory: the partials read once, one f32 written.
__device__ __forceinline__ void globalNormFinish(const double *partials, long long blocks,
                                                 float *norm) {
  __shared__ double warpTotals[32];
  double total = 0.0;
  for (long long b = threadIdx.x; b < blocks; b += blockDim.x)
    total += partials[b];
  for (int offset = 16; offset > 0; offset >>= 1)
    total += __shfl_xor_sync(0xffffffffu, total, offset);
  if ((threadIdx.x & 31) == 0)
    warpTotals[threadIdx.x >> 5] = total;
  __syncthreads();
  if (threadIdx.x == 0) {
    double sum = 0.0;
    for (int w = 0; w < static_cast<int>(blockDim.x >> 5); ++w)
      sum += warpTotals[w];
    norm[0] = static_cast<float>(sqrt(sum));
  }
}

//===----------------------------------------------------------------------===//
// The step's scalars
//===----------------------------------------------------------------------===//

/// The backward pass's seed, d(loss)/d(loss) scaled for accumulation and loss scaling:
/// seed = loss scale / accum_steps, so the summed micro-step gradients are the scaled mean
/// gradient. Memory: one scalar read and written.
__device__ __forceinline__ void gradSeed(float *seed, const float *scale, float accumSteps) {
  seed[0] = scale[0] / accumSteps;
}
/// The seed without loss scaling: 1 / accum_steps. Memory: one scalar written.
__device__ __forceinline__ void gradSeed(float *seed, float accumSteps) {
  seed[0] = 1.0f / accumSteps;
}

/// A learning-rate schedule's settings, compiled into the kernel.
struct LrScheduleSettings {
  bool cosine; ///< cosine decay after the warmup; else constant
  double lr, warmupSteps, minLr;
  /// The step the cosine reaches min_lr; 0: the run's total steps.
  double decaySteps;
};

/// The learning rate of step \p step, in double as the CPU backend: linear warmup over the
/// first warmupSteps steps, reaching lr at step warmupSteps - 1; then constant, or cosine from lr
/// down to minLr over [warmupSteps, decay] (decaySteps, or \p totalSteps when it is 0), held at
/// minLr afterwards. Memory: one scalar written.
__device__ __forceinline__ void learningRate(float *rate, unsigned long long step,
                                             unsigned long long totalSteps,
                                             const LrScheduleSettings &settings) {
  const double s = static_cast<double>(step);
  const double warmup = settings.warmupSteps;
  const double lr = settings.lr;
  double value = lr;
  if (s < warmup) {
    value = lr * (s + 1.0) / warmup;
  } else if (settings.cosine) {
    const double minLr = settings.minLr;
    const double decay =
        settings.decaySteps > 0.0 ? settings.decaySteps : static_cast<double>(totalSteps);
    const double progress = fmin(fmax((s - warmup) / fmax(1.0, decay - warmup), 0.0), 1.0);
    value = minLr + 0.5 * (1.0 + cos(3.14159265358979323846 * progress)) * (lr - minLr);
  }
  rate[0] = static_cast<float>(value);
}

/// A dynamic loss scaler's settings (numerics::LossScaleConfig's but the initial scale),
/// compiled into the kernel.
struct DynamicLossScale {
  float growthFactor, backoffFactor;
  int growthInterval;
  float minScale;
};

/// Ends a loss-scaled optimizer step on the device, with no host synchronisation: counts the
/// step in \p appliedSteps if it was applied (\p foundNonfinite clear), runs the dynamic
/// scaler's rule (numerics::updateLossScale, GradScaler's, shared with the CPU backend) when
/// \p dynamic is not null, and clears the flag for the next step. The scaler's counters live in
/// f32 state buffers (the plan's state is all f32, exact up to 2^24) and are converted to the
/// int fields of LossScaleState and back; floorHits counts the backoffs min_scale stopped (for
/// the runtime's warning). A static scale never changes: only the count and the flag are
/// touched. Memory: five scalars, read and written by the launch's first thread alone (the
/// others return: each scalar has one writer, whatever the launch's shape).
__device__ __forceinline__ void finishLossScaledStep(float *scale, float *growthTracker,
                                                     float *floorHits, float *foundNonfinite,
                                                     float *appliedSteps,
                                                     const DynamicLossScale *dynamic) {
  if (threadIdx.x != 0 || blockIdx.x != 0)
    return;
  const bool overflow = foundNonfinite[0] != 0.0f;
  if (!overflow)
    appliedSteps[0] = appliedSteps[0] + 1.0f;
  if (dynamic != nullptr) {
    numerics::LossScaleConfig config;
    config.growthFactor = dynamic->growthFactor;
    config.backoffFactor = dynamic->backoffFactor;
    config.growthInterval = dynamic->growthInterval;
    config.minScale = dynamic->minScale;
    numerics::LossScaleState state{scale[0], static_cast<int>(growthTracker[0]),
                                   static_cast<int>(floorHits[0])};
    numerics::updateLossScale(state, config, overflow);
    scale[0] = state.scale;
    growthTracker[0] = static_cast<float>(state.growthTracker);
    floorHits[0] = static_cast<float>(state.floorHits);
  }
  foundNonfinite[0] = 0.0f;
}

} // namespace device
} // namespace ampc

#endif // AMPC_RUNTIME_CUDA_DEVICE_OPTIMIZER_CUH
