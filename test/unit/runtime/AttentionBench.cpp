//===- AttentionBench.cpp - Time the flash-attention kernels on a GPU -------===//
//
// ampc_attention_bench [--iterations N] [--json FILE] [--mma-only] [--source]
//
// Times the attention kernels the CUDA backend launches at GPT shapes (GPT-124M: B 16, H 12,
// T = S = 1024, head dim 64, causal; the same with head dim 128 and H 6; and non-causal), bf16,
// for both implementations: the fp32-FMA kernels (FlashAttention.cuh) and the tensor-core
// ones (FlashAttentionMma.cuh). Each kernel is launched N times (default 20) after 3 warm-up
// launches, each launch between two CUDA events; the table has the median. Forward = the fwd
// kernel; backward = delta + dq + dk/dv as the executor launches them (reading the forward's
// saved o and lse). TFLOP/s use FlashAttention's counts: forward 4 B H T S D, backward
// 10 B H T S D (its five products), halved when causal; this backward computes seven
// products, so its rate on its own work is 7/5 of the figure shown. Both implementations run
// on the same inputs and the tensor-core outputs are compared with the fp32-FMA ones
// (relative-norm difference), a check at full size that the emulator's small shapes cannot
// give. The tensor-core kernels run a third time on the layout a compiled GPT gives them
// (graph.qkv_attention): q, k, v read in place from one packed [B, T, 3 H D] buffer, o and dO
// token-major [B, T, H D], dq, dk, dv written into one packed gradient; the same arithmetic on
// the same values, so its outputs must equal the contiguous run's bit for bit, and its times
// show what the strided rows cost. At head dim 64 the tensor-core forward (two 16-row tiles of
// queries a warp, 32-key tiles) is timed beside the one-tile version it replaced (one tile a
// warp, 64 rows a block, 64-key tiles), whose o must agree with it to 2e-2; and the backward's
// variants (kBackwardVariants: 32-row tiles, more blocks a multiprocessor) beside the default,
// whose dq, dk and dv must agree with it to 2e-2. Last, cuDNN's fused attention
// (runtime/cuda/CudnnAttention.h, opened at run time) runs on the packed layout, timed the same
// way, its o, dq, dk and dv compared with the tensor-core kernels' (2e-2); where cuDNN cannot
// run (no libcudnn.so.9, no engine for the problem) the row says why and nothing fails. Exit
// status 0, or 1 when a difference exceeds 2e-2 or the packed outputs differ at all; 2 without
// a GPU.
//
// --mma-only runs the tensor-core kernels (and their variants) at GPT-124M's causal shape only,
// contiguous, without the comparisons: what a profiler's run needs (run.sh kernels).
//
// The kernels are compiled with NVRTC from the headers in kernel-include/ beside this
// executable (or $AMPC_KERNEL_INCLUDE), as the GPU tests do.
//
//===----------------------------------------------------------------------===//

#include "AttentionReference.h"
#include "runtime/cuda/CudnnAttention.h"
#include "runtime/cuda/Device.h"
#include "runtime/cuda/Errors.h"
#include "runtime/cuda/FlashAttentionLayout.h"
#include "runtime/cuda/Module.h"
#include "runtime/cuda/Nvrtc.h"

#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

namespace {

using namespace ampc;
using namespace ampc::test;

struct Shape {
  const char *label;
  int batch, heads, tokens, headDim;
  bool causal;
};

constexpr Shape kShapes[] = {{"gpt124m", 16, 12, 1024, 64, true},
                             {"gpt124m-noncausal", 16, 12, 1024, 64, false},
                             {"d128", 16, 6, 1024, 128, true}};

/// Tensor-core backward variants at head dim 64, timed beside the default on the same inputs:
/// dq's key tile, dk/dv's query tile, and the blocks per multiprocessor asked of ptxas
/// (__launch_bounds__'s second argument: 3 caps a thread at 168 registers). ptxas for sm_90:
/// the default dq 200 registers and dk/dv 255 (two blocks a multiprocessor); 32-row tiles 168
/// and 214; with 3 blocks, 32-row tiles 168 and 168 (8 bytes of spill), 64-row tiles 28 and
/// 120 bytes of spill.
struct BackwardVariant {
  const char *name;
  int dqKeys, dkvQueries, minBlocks;
};
constexpr BackwardVariant kBackwardVariants[] = {
    {"tiles32", 32, 32, 1}, {"tiles32_3blocks", 32, 32, 3}, {"3blocks", 64, 64, 3}};

/// The source of one module: the bf16 entry points of head dims 64 and 128, from either
/// header, and for the tensor cores the bench's own variants.
std::string moduleSource(bool tensorCores) {
  std::string source = tensorCores ? "#include \"runtime/cuda/device/FlashAttentionMma.cuh\"\n"
                                   : "#include \"runtime/cuda/device/FlashAttention.cuh\"\n";
  const std::string macro =
      tensorCores ? "AMPC_FLASH_ATTENTION_MMA_ENTRY_POINTS" : "AMPC_FLASH_ATTENTION_ENTRY_POINTS";
  for (int d : {64, 128})
    source += macro + "(bf16, ampc::flash::Bf16, " + std::to_string(d) + ")\n";
  // The tensor-core forward with one 16-row tile of queries a warp (64 rows a block), as it
  // was before two: timed beside the default at head dim 64.
  if (tensorCores)
    for (const char *causal : {"false", "true"})
      source += std::string("extern \"C\" __global__ void __launch_bounds__(128) "
                            "ampc_bench_fwd_one_tile_bf16_d64") +
                (causal[0] == 't' ? "_causal" : "") +
                "(const unsigned short *q, const unsigned short *k, const unsigned short *v, "
                "unsigned short *o, float *lse, int queries, int keys, float scale, "
                "ampc::flash::Layout layout) {\n"
                "  ampc::flash::mmaAttentionForward<ampc::flash::Bf16, 64, " +
                causal + ", 1>(q, k, v, o, lse, queries, keys, scale, layout);\n}\n";
  // The backward variants (kBackwardVariants), dq and dk/dv, causal and not.
  if (tensorCores)
    for (const BackwardVariant &variant : kBackwardVariants)
      for (const char *causal : {"false", "true"}) {
        const std::string bounds = "extern \"C\" __global__ void __launch_bounds__(128, " +
                                   std::to_string(variant.minBlocks) + ") ampc_bench_bwd_";
        const std::string suffix =
            std::string("_") + variant.name + "_bf16_d64" + (causal[0] == 't' ? "_causal" : "");
        source += bounds + "dq" + suffix +
                  "(const unsigned short *q, const unsigned short *k, const unsigned short *v, "
                  "const unsigned short *dO, const float *lse, const float *delta, "
                  "unsigned short *dq, int queries, int keys, float scale, "
                  "ampc::flash::Layout layout) {\n"
                  "  ampc::flash::mmaAttentionBackwardDq<ampc::flash::Bf16, 64, " +
                  causal + ", " + std::to_string(variant.dqKeys) +
                  ">(q, k, v, dO, lse, delta, dq, queries, keys, scale, layout);\n}\n";
        source += bounds + "dkdv" + suffix +
                  "(const unsigned short *q, const unsigned short *k, const unsigned short *v, "
                  "const unsigned short *dO, const float *lse, const float *delta, "
                  "unsigned short *dk, unsigned short *dv, int queries, int keys, float scale, "
                  "ampc::flash::Layout layout) {\n"
                  "  ampc::flash::mmaAttentionBackwardDkDv<ampc::flash::Bf16, 64, " +
                  causal + ", " + std::to_string(variant.dkvQueries) +
                  ">(q, k, v, dO, lse, delta, dk, dv, queries, keys, scale, layout);\n}\n";
      }
  return source;
}

/// moduleSource compiled for this GPU.
std::unique_ptr<cuda::Module> compileModule(cuda::Device &device, bool tensorCores) {
  const std::string source = moduleSource(tensorCores);
  std::vector<std::string> options = cuda::cudaIncludeOptions();
  options.push_back("-I" + kernelIncludeDirectory());
  cuda::KernelBinaries binaries;
  const int arch = device.info().computeMajor * 10 + device.info().computeMinor;
  if (arch == 80 || arch == 90) {
    binaries.cubins.push_back(
        {arch, cuda::compileToCubin(source, "attention_bench.cu", "sm_" + std::to_string(arch),
                                    options)});
  } else {
    binaries.ptx = cuda::compileToPtx(source, "attention_bench.cu", "compute_80", options);
    binaries.ptxArch = 80;
  }
  return std::make_unique<cuda::Module>(device, binaries,
                                        tensorCores ? "tensor-core attention" : "fp32 attention");
}

struct Timing {
  /// The tensor-core forward with one 16-row tile a warp (head dim 64, contiguous); 0 if not run.
  double forwardOneTile = 0;
  double forward = 0, delta = 0, dq = 0, dkdv = 0;
  double backward() const { return delta + dq + dkdv; }
};

/// The median of \p iterations launches of \p launch, each between two events.
template <typename Launch>
double medianMilliseconds(cuda::Device &device, int iterations, Launch launch) {
  cuda::Event start(device), end(device);
  for (int i = 0; i < 3; ++i)
    launch();
  std::vector<double> times;
  for (int i = 0; i < iterations; ++i) {
    start.record();
    launch();
    end.record();
    end.synchronize();
    times.push_back(cuda::Event::elapsedMilliseconds(start, end));
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

/// A new device allocation holding \p bytes.
cuda::DeviceAllocation uploaded(cuda::Device &device, const std::vector<char> &bytes,
                                const char *what) {
  cuda::DeviceAllocation allocation = device.allocate(bytes.size(), what);
  device.copyToDevice(allocation.pointer(), bytes.data(), bytes.size());
  return allocation;
}

/// The bytes of \p allocation (waits for the stream).
std::vector<char> downloaded(cuda::Device &device, const cuda::DeviceAllocation &allocation) {
  std::vector<char> bytes(allocation.bytes());
  device.copyToHost(bytes.data(), allocation.pointer(), bytes.size());
  return bytes;
}

struct Outputs {
  std::vector<char> o, dq, dk, dv;
};

/// Copies the 2-byte elements of a head-major [B, H, T, D] tensor into part \p part of a
/// token-major [B, T, parts H D] one (\p toTokenMajor), or back.
void relayout(const Shape &shape, int parts, int part, const std::vector<char> &from,
              std::vector<char> &to, bool toTokenMajor) {
  const size_t width = static_cast<size_t>(shape.heads) * shape.headDim;
  const size_t rowBytes = 2 * static_cast<size_t>(shape.headDim);
  for (int b = 0; b < shape.batch; ++b)
    for (int h = 0; h < shape.heads; ++h)
      for (int t = 0; t < shape.tokens; ++t) {
        const size_t token = ((static_cast<size_t>(b) * shape.tokens + t) * parts + part) * width +
                             static_cast<size_t>(h) * shape.headDim;
        const size_t head =
            ((static_cast<size_t>(b) * shape.heads + h) * shape.tokens + t) * shape.headDim;
        const size_t source = toTokenMajor ? head : token, target = toTokenMajor ? token : head;
        std::memcpy(to.data() + 2 * target, from.data() + 2 * source, rowBytes);
      }
}

/// Head-major outputs from a packed run's o ([B, T, H D]) and packed dq, dk, dv
/// ([B, T, 3 H D]), \p elements each.
Outputs unpackOutputs(const Shape &shape, size_t elements, const std::vector<char> &oLaid,
                      const std::vector<char> &gradients) {
  Outputs outputs = {std::vector<char>(elements * 2), std::vector<char>(elements * 2),
                     std::vector<char>(elements * 2), std::vector<char>(elements * 2)};
  relayout(shape, 1, 0, oLaid, outputs.o, false);
  relayout(shape, 3, 0, gradients, outputs.dq, false);
  relayout(shape, 3, 1, gradients, outputs.dk, false);
  relayout(shape, 3, 2, gradients, outputs.dv, false);
  return outputs;
}

/// A backward variant's dq and dk/dv times, and its largest relative-norm difference from the
/// default's dq, dk and dv.
struct VariantTiming {
  const BackwardVariant *variant;
  double dq = 0, dkdv = 0, difference = 0;
};

struct Run {
  Timing timing;
  std::vector<VariantTiming> variants;
  /// The one-tile forward's o against the default forward's (relative norm): the two sum their
  /// key tiles in different sizes (64 and 32 keys), so they differ by rounding only.
  double oneTileDifference = 0;
  Outputs outputs;
};

/// Times the kernels of \p module on \p shape. The inputs are head-major [B, H, T, D]; with
/// \p packed the kernels get them as a compiled GPT lays them out (q, k, v side by side in one
/// [B, T, 3 H D] buffer, dO and o [B, T, H D], dq, dk, dv side by side), and the outputs come
/// back head-major either way.
Run runShape(cuda::Device &device, cuda::Module &module, bool tensorCores, bool packed,
             const Shape &shape, const std::vector<char> &qBytes, const std::vector<char> &kBytes,
             const std::vector<char> &vBytes, const std::vector<char> &dyBytes, int iterations) {
  const size_t elements = qBytes.size() / 2;
  const size_t rows = elements / shape.headDim;
  auto upload = [&](const std::vector<char> &bytes, const char *what) {
    return uploaded(device, bytes, what);
  };
  // Head-major: one buffer per operand. Packed: q, k, v (and dq, dk, dv) in the first buffer,
  // H D elements apart; the other two unused.
  std::vector<char> first = qBytes, dyLaid = dyBytes;
  if (packed) {
    first.assign(3 * qBytes.size(), 0);
    const std::vector<char> *parts[] = {&qBytes, &kBytes, &vBytes};
    for (int part = 0; part < 3; ++part)
      relayout(shape, 3, part, *parts[part], first, true);
    relayout(shape, 1, 0, dyBytes, dyLaid, true);
  }
  cuda::DeviceAllocation q = upload(first, "q"), k = upload(packed ? dyLaid : kBytes, "k"),
                         v = upload(packed ? dyLaid : vBytes, "v"), dy = upload(dyLaid, "dO");
  cuda::DeviceAllocation o = device.allocate(elements * 2, "o"),
                         dq = device.allocate(first.size(), "dq"),
                         dk = device.allocate(elements * 2, "dk"),
                         dv = device.allocate(elements * 2, "dv"),
                         lse = device.allocate(rows * 4, "lse"),
                         delta = device.allocate(rows * 4, "delta");
  const std::string suffix = "bf16_d" + std::to_string(shape.headDim);
  const std::string causal = shape.causal ? "_causal" : "";
  cuda::Kernel &forward = module.kernel("ampc_flash_attention_fwd_" + suffix + causal);
  cuda::Kernel &deltaKernel = module.kernel("ampc_flash_attention_bwd_delta_" + suffix);
  cuda::Kernel &dqKernel = module.kernel("ampc_flash_attention_bwd_dq_" + suffix + causal);
  cuda::Kernel &dkdvKernel = module.kernel("ampc_flash_attention_bwd_dkdv_" + suffix + causal);

  int queries = shape.tokens, keys = shape.tokens;
  float scale = 1.0f / std::sqrt(static_cast<float>(shape.headDim));
  long long deltaRows = static_cast<long long>(rows);
  // Every operand contiguous [B, H, T, D], or packed as above.
  cuda::FlashLayout layout =
      cuda::FlashLayout::contiguous(shape.heads, shape.tokens, shape.tokens, shape.headDim);
  const int64_t width = static_cast<int64_t>(shape.heads) * shape.headDim;
  if (packed) {
    layout.q = layout.k = layout.v = {shape.tokens * 3 * width, shape.headDim, 3 * width};
    layout.o = layout.dO = {shape.tokens * width, shape.headDim, width};
  }
  const unsigned rowsPerBlock = tensorCores ? 64 : 32;
  cuda::LaunchConfig tiles;
  tiles.block[0] = 128;
  tiles.grid[0] = (shape.tokens + rowsPerBlock - 1) / rowsPerBlock;
  tiles.grid[1] = static_cast<unsigned>(shape.batch * shape.heads);
  // The forward's rows per block: 128 for the tensor-core kernels at head dims up to 64 (the
  // plan's forward rows per block).
  const unsigned forwardRows = !tensorCores ? 32 : shape.headDim <= 64 ? 128 : 64;
  cuda::LaunchConfig forwardTiles = tiles;
  forwardTiles.grid[0] = (shape.tokens + forwardRows - 1) / forwardRows;
  CUdeviceptr qp = q.pointer(), kp = k.pointer(), vp = v.pointer(), dyp = dy.pointer(),
              op = o.pointer(), dqp = dq.pointer(), dkp = dk.pointer(), dvp = dv.pointer(),
              lsep = lse.pointer(), deltap = delta.pointer();
  if (packed) {
    kp = qp + 2 * width;
    vp = qp + 4 * width;
    dkp = dqp + 2 * width;
    dvp = dqp + 4 * width;
  }
  Run run;
  run.timing.forward = medianMilliseconds(device, iterations, [&] {
    forward.launch(forwardTiles, {&qp, &kp, &vp, &op, &lsep, &queries, &keys, &scale, &layout});
  });
  auto download = [&](const cuda::DeviceAllocation &allocation) {
    return downloaded(device, allocation);
  };
  if (tensorCores && !packed && shape.headDim == 64) {
    // The one-tile forward (64-key tiles) into buffers of its own.
    cuda::DeviceAllocation oOne = device.allocate(o.bytes(), "o (one tile a warp)"),
                           lseOne = device.allocate(lse.bytes(), "lse (one tile a warp)");
    CUdeviceptr oOnep = oOne.pointer(), lseOnep = lseOne.pointer();
    cuda::Kernel &oneTile = module.kernel(std::string("ampc_bench_fwd_one_tile_bf16_d64") +
                                          (shape.causal ? "_causal" : ""));
    run.timing.forwardOneTile = medianMilliseconds(device, iterations, [&] {
      oneTile.launch(tiles, {&qp, &kp, &vp, &oOnep, &lseOnep, &queries, &keys, &scale, &layout});
    });
    device.synchronize("running the one-tile forward");
    run.oneTileDifference = relativeError(decode(download(oOne), Storage::Bf16),
                                          decode(download(o), Storage::Bf16));
  }
  run.timing.delta = medianMilliseconds(device, iterations, [&] {
    deltaKernel.launch(cuda::LaunchConfig::linear(static_cast<unsigned>((deltaRows + 3) / 4), 128),
                       {&op, &dyp, &deltap, &deltaRows, &queries, &layout});
  });
  run.timing.dq = medianMilliseconds(device, iterations, [&] {
    dqKernel.launch(tiles,
                    {&qp, &kp, &vp, &dyp, &lsep, &deltap, &dqp, &queries, &keys, &scale, &layout});
  });
  run.timing.dkdv = medianMilliseconds(device, iterations, [&] {
    dkdvKernel.launch(
        tiles, {&qp, &kp, &vp, &dyp, &lsep, &deltap, &dkp, &dvp, &queries, &keys, &scale, &layout});
  });
  device.synchronize("running the attention kernels");
  if (tensorCores && !packed && shape.headDim == 64) {
    // The backward variants into buffers of their own, against the default's outputs.
    const std::vector<double> dqDefault = decode(download(dq), Storage::Bf16),
                              dkDefault = decode(download(dk), Storage::Bf16),
                              dvDefault = decode(download(dv), Storage::Bf16);
    cuda::DeviceAllocation dqV = device.allocate(dq.bytes(), "dq (variant)"),
                           dkV = device.allocate(dk.bytes(), "dk (variant)"),
                           dvV = device.allocate(dv.bytes(), "dv (variant)");
    CUdeviceptr dqVp = dqV.pointer(), dkVp = dkV.pointer(), dvVp = dvV.pointer();
    for (const BackwardVariant &variant : kBackwardVariants) {
      const std::string name = std::string("_") + variant.name + "_bf16_d64" + causal;
      cuda::Kernel &dqVariant = module.kernel("ampc_bench_bwd_dq" + name);
      cuda::Kernel &dkdvVariant = module.kernel("ampc_bench_bwd_dkdv" + name);
      VariantTiming timing{&variant};
      timing.dq = medianMilliseconds(device, iterations, [&] {
        dqVariant.launch(tiles, {&qp, &kp, &vp, &dyp, &lsep, &deltap, &dqVp, &queries, &keys,
                                 &scale, &layout});
      });
      timing.dkdv = medianMilliseconds(device, iterations, [&] {
        dkdvVariant.launch(tiles, {&qp, &kp, &vp, &dyp, &lsep, &deltap, &dkVp, &dvVp, &queries,
                                   &keys, &scale, &layout});
      });
      device.synchronize("running a backward variant");
      timing.difference =
          std::max({relativeError(decode(download(dqV), Storage::Bf16), dqDefault),
                    relativeError(decode(download(dkV), Storage::Bf16), dkDefault),
                    relativeError(decode(download(dvV), Storage::Bf16), dvDefault)});
      run.variants.push_back(timing);
    }
  }
  if (!packed) {
    run.outputs = {download(o), download(dq), download(dk), download(dv)};
    return run;
  }
  run.outputs = unpackOutputs(shape, elements, download(o), download(dq));
  return run;
}

/// \p text as the inside of a JSON string.
std::string jsonEscaped(const std::string &text) {
  std::string escaped;
  for (char c : text) {
    if (c == '"' || c == '\\')
      escaped += '\\';
    if (static_cast<unsigned char>(c) < 0x20)
      escaped += ' ';
    else
      escaped += c;
  }
  return escaped;
}

/// cuDNN's fused attention (runtime/cuda/CudnnAttention.h) on the layout a compiled GPT gives
/// the attention steps (q, k, v packed [B, T, 3 H D]; o, dO token-major; dq, dk, dv packed),
/// timed as the kernels are; its outputs come back head-major. \p error is cuDNN's message when
/// it could not run (no library, no engine for the problem), and the run is then empty.
struct CudnnRun {
  std::string description, error;
  double forward = 0, backward = 0;
  Outputs outputs;
};

CudnnRun runCudnn(cuda::Device &device, const Shape &shape, const std::vector<char> &qBytes,
                  const std::vector<char> &kBytes, const std::vector<char> &vBytes,
                  const std::vector<char> &dyBytes, int iterations) {
  CudnnRun run;
  const size_t elements = qBytes.size() / 2;
  const int64_t width = static_cast<int64_t>(shape.heads) * shape.headDim;
  cuda::CudnnAttentionProblem problem;
  problem.batch = shape.batch;
  problem.heads = shape.heads;
  problem.queries = problem.keys = shape.tokens;
  problem.headDim = shape.headDim;
  problem.causal = shape.causal;
  problem.scale = 1.0f / std::sqrt(static_cast<float>(shape.headDim));
  problem.type = plan::DType::BF16;
  // Packed as graph.qkv_attention's step reads and writes them: (batch, head, row) strides.
  const cuda::AttentionStrides packed{shape.tokens * 3 * width, shape.headDim, 3 * width},
      tokenMajor{shape.tokens * width, shape.headDim, width};
  problem.q = problem.k = problem.v = problem.dq = problem.dk = problem.dv = packed;
  problem.o = problem.dO = tokenMajor;
  std::unique_ptr<cuda::CudnnAttention> attention;
  try {
    attention = std::make_unique<cuda::CudnnAttention>(problem, device.stream());
  } catch (const cuda::CudaError &error) {
    run.error = error.what();
    return run;
  }
  run.description = attention->description();
  std::vector<char> qkv(3 * qBytes.size()), dyLaid(dyBytes.size());
  const std::vector<char> *parts[] = {&qBytes, &kBytes, &vBytes};
  for (int part = 0; part < 3; ++part)
    relayout(shape, 3, part, *parts[part], qkv, true);
  relayout(shape, 1, 0, dyBytes, dyLaid, true);
  auto upload = [&](const std::vector<char> &bytes, const char *what) {
    return uploaded(device, bytes, what);
  };
  cuda::DeviceAllocation q = upload(qkv, "q, k, v"), dy = upload(dyLaid, "dO");
  cuda::DeviceAllocation o = device.allocate(elements * 2, "o"),
                         dqkv = device.allocate(qkv.size(), "dq, dk, dv"),
                         lse = device.allocate(elements / shape.headDim * 4, "lse");
  const size_t workspaceBytes =
      std::max<size_t>({attention->forwardWorkspaceBytes(), attention->backwardWorkspaceBytes(), 256});
  cuda::DeviceAllocation workspace = device.allocate(workspaceBytes, "cuDNN workspace");
  const CUdeviceptr qp = q.pointer(), kp = qp + 2 * width, vp = qp + 4 * width,
                    dqp = dqkv.pointer(), dkp = dqp + 2 * width, dvp = dqp + 4 * width;
  try {
    run.forward = medianMilliseconds(device, iterations, [&] {
      attention->forward(qp, kp, vp, o.pointer(), lse.pointer(), workspace.pointer());
    });
    run.backward = medianMilliseconds(device, iterations, [&] {
      attention->backward(qp, kp, vp, o.pointer(), dy.pointer(), lse.pointer(), dqp, dkp, dvp,
                          workspace.pointer());
    });
  } catch (const cuda::CudaError &error) {
    run.error = error.what();
    return run;
  }
  device.synchronize("running cuDNN's attention");
  auto download = [&](const cuda::DeviceAllocation &allocation) {
    return downloaded(device, allocation);
  };
  run.outputs = unpackOutputs(shape, elements, download(o), download(dqkv));
  return run;
}

} // namespace

int main(int argc, char **argv) {
  int iterations = 20;
  std::string jsonPath;
  // Only the tensor-core kernels at GPT-124M's causal shape (with the variants), contiguous: what
  // a profiler run (run.sh kernels) needs; nothing is compared with the fp32-FMA kernels.
  bool mmaOnly = false;
  for (int i = 1; i < argc; ++i) {
    const std::string argument = argv[i];
    if (argument == "--iterations" && i + 1 < argc) {
      iterations = std::max(1, std::atoi(argv[++i]));
    } else if (argument == "--json" && i + 1 < argc) {
      jsonPath = argv[++i];
    } else if (argument == "--mma-only") {
      mmaOnly = true;
    } else if (argument == "--source") {
      // The tensor-core module's source, for ptxas or nvcc without a GPU.
      std::cout << moduleSource(true);
      return 0;
    } else {
      std::cerr << "usage: ampc_attention_bench [--iterations N] [--json FILE] [--mma-only] "
                   "[--source]\n";
      return 2;
    }
  }
  std::unique_ptr<cuda::Device> device;
  try {
    device = std::make_unique<cuda::Device>();
  } catch (const cuda::CudaError &error) {
    std::cerr << "ampc_attention_bench: " << error.what() << "\n";
    return 2;
  }
  if (!device->info().supportsBf16()) {
    std::cerr << "ampc_attention_bench: the kernels need sm_80 or newer\n";
    return 2;
  }
  try {
    std::unique_ptr<cuda::Module> fma = mmaOnly ? nullptr : compileModule(*device, false);
    std::unique_ptr<cuda::Module> mma = compileModule(*device, true);
    std::ostringstream json;
    json << "{\"device\": \"" << device->info().name << "\", \"iterations\": " << iterations
         << ", \"results\": [";
    std::printf("%-18s %-12s %9s %9s %9s %9s %9s %9s %9s\n", "shape", "kernels", "fwd ms",
                "delta ms", "dq ms", "dkdv ms", "bwd ms", "fwd TF/s", "bwd TF/s");
    bool agree = true;
    bool firstResult = true;
    for (const Shape &shape : kShapes) {
      if (mmaOnly && &shape != &kShapes[0])
        continue;
      std::mt19937 generator(2024);
      const size_t elements =
          static_cast<size_t>(shape.batch) * shape.heads * shape.tokens * shape.headDim;
      const std::vector<char> q = encode(randomInputs(elements, Storage::Bf16, generator),
                                         Storage::Bf16);
      const std::vector<char> k = encode(randomInputs(elements, Storage::Bf16, generator),
                                         Storage::Bf16);
      const std::vector<char> v = encode(randomInputs(elements, Storage::Bf16, generator),
                                         Storage::Bf16);
      const std::vector<char> dy = encode(randomInputs(elements, Storage::Bf16, generator),
                                          Storage::Bf16);
      const double pairs = static_cast<double>(shape.batch) * shape.heads * shape.tokens *
                           shape.tokens * shape.headDim * (shape.causal ? 0.5 : 1.0);
      Run runs[3];
      for (int which = mmaOnly ? 1 : 0; which < (mmaOnly ? 2 : 3); ++which) {
        // fp32 FMA, tensor cores, tensor cores on the packed layout.
        const bool tensorCores = which >= 1, packed = which == 2;
        runs[which] = runShape(*device, tensorCores ? *mma : *fma, tensorCores, packed, shape, q,
                               k, v, dy, iterations);
        const Timing &t = runs[which].timing;
        const double forwardRate = 4 * pairs / (t.forward * 1e-3) / 1e12;
        const double backwardRate = 10 * pairs / (t.backward() * 1e-3) / 1e12;
        const char *name = packed ? "mma packed" : tensorCores ? "tensor cores" : "fp32 FMA";
        std::printf("%-18s %-12s %9.3f %9.3f %9.3f %9.3f %9.3f %9.1f %9.1f\n", shape.label, name,
                    t.forward, t.delta, t.dq, t.dkdv, t.backward(), forwardRate, backwardRate);
        json << (firstResult ? "" : ", ") << "{\"shape\": \"" << shape.label
             << "\", \"kernels\": \"" << (packed ? "mma_packed" : tensorCores ? "mma" : "fma")
             << "\", \"batch\": "
             << shape.batch << ", \"heads\": " << shape.heads << ", \"tokens\": " << shape.tokens
             << ", \"head_dim\": " << shape.headDim
             << ", \"causal\": " << (shape.causal ? "true" : "false")
             << ", \"forward_ms\": " << t.forward << ", \"delta_ms\": " << t.delta
             << ", \"dq_ms\": " << t.dq << ", \"dkdv_ms\": " << t.dkdv
             << ", \"backward_ms\": " << t.backward() << ", \"forward_tflops\": " << forwardRate
             << ", \"backward_tflops\": " << backwardRate << "}";
        firstResult = false;
        for (const VariantTiming &variant : runs[which].variants) {
          const double total = t.delta + variant.dq + variant.dkdv;
          const double rate = 10 * pairs / (total * 1e-3) / 1e12;
          std::printf("%-18s %-12s %9s %9.3f %9.3f %9.3f %9.3f %9s %9.1f   (bwd %s: dq %d-key "
                      "tiles, dk/dv %d-query tiles, %d blocks/SM asked; dq, dk, dv and the "
                      "default's %s)\n",
                      shape.label, "mma bwd var", "", t.delta, variant.dq, variant.dkdv, total, "",
                      rate, variant.variant->name, variant.variant->dqKeys,
                      variant.variant->dkvQueries, variant.variant->minBlocks,
                      variant.difference < 2e-2 ? "agree" : "DIFFER");
          json << ", {\"shape\": \"" << shape.label
               << "\", \"kernels\": \"mma_backward_" << variant.variant->name
               << "\", \"dq_ms\": " << variant.dq << ", \"dkdv_ms\": " << variant.dkdv
               << ", \"backward_ms\": " << total << ", \"backward_tflops\": " << rate
               << ", \"difference\": " << variant.difference << "}";
          agree = agree && variant.difference < 2e-2;
        }
        if (t.forwardOneTile > 0) {
          const double oneTileRate = 4 * pairs / (t.forwardOneTile * 1e-3) / 1e12;
          std::printf("%-18s %-12s %9.3f %49s %9.1f   (one 16-row tile a warp; o and the default's %s)\n",
                      shape.label, "mma 1 tile", t.forwardOneTile, "", oneTileRate,
                      runs[which].oneTileDifference < 2e-2 ? "agree" : "DIFFER");
          json << ", {\"shape\": \"" << shape.label
               << "\", \"kernels\": \"mma_forward_one_tile\", \"forward_ms\": " << t.forwardOneTile
               << ", \"forward_tflops\": " << oneTileRate
               << ", \"o_difference\": " << runs[which].oneTileDifference << "}";
          agree = agree && runs[which].oneTileDifference < 2e-2;
        }
      }
      if (mmaOnly)
        continue;
      const char *names[] = {"o", "dq", "dk", "dv"};
      const std::vector<char> *fmaOut[] = {&runs[0].outputs.o, &runs[0].outputs.dq,
                                           &runs[0].outputs.dk, &runs[0].outputs.dv};
      const std::vector<char> *mmaOut[] = {&runs[1].outputs.o, &runs[1].outputs.dq,
                                           &runs[1].outputs.dk, &runs[1].outputs.dv};
      std::printf("%-18s tensor cores vs fp32 FMA (relative-norm difference):", shape.label);
      for (int i = 0; i < 4; ++i) {
        const double difference = relativeError(decode(*mmaOut[i], Storage::Bf16),
                                                decode(*fmaOut[i], Storage::Bf16));
        std::printf(" %s %.2e", names[i], difference);
        agree = agree && difference < 2e-2;
      }
      std::printf("\n");
      const std::vector<char> *packedOut[] = {&runs[2].outputs.o, &runs[2].outputs.dq,
                                              &runs[2].outputs.dk, &runs[2].outputs.dv};
      std::printf("%-18s packed layout vs contiguous, tensor cores:", shape.label);
      for (int i = 0; i < 4; ++i) {
        const bool same = *packedOut[i] == *mmaOut[i];
        std::printf(" %s %s", names[i], same ? "identical" : "DIFFERENT");
        agree = agree && same;
      }
      std::printf("\n");
      // cuDNN's fused attention on the packed layout, against the tensor-core kernels.
      const CudnnRun cudnn = runCudnn(*device, shape, q, k, v, dy, iterations);
      if (!cudnn.error.empty()) {
        std::printf("%-18s cudnn        not run: %s\n", shape.label, cudnn.error.c_str());
        json << ", {\"shape\": \"" << shape.label << "\", \"kernels\": \"cudnn\", \"error\": \""
             << jsonEscaped(cudnn.error) << "\"}";
        continue;
      }
      const double forwardRate = 4 * pairs / (cudnn.forward * 1e-3) / 1e12;
      const double backwardRate = 10 * pairs / (cudnn.backward * 1e-3) / 1e12;
      std::printf("%-18s %-12s %9.3f %9s %9s %9s %9.3f %9.1f %9.1f   (%s)\n", shape.label,
                  "cudnn packed", cudnn.forward, "", "", "", cudnn.backward, forwardRate,
                  backwardRate, cudnn.description.c_str());
      const std::vector<char> *cudnnOut[] = {&cudnn.outputs.o, &cudnn.outputs.dq,
                                             &cudnn.outputs.dk, &cudnn.outputs.dv};
      std::printf("%-18s cuDNN vs tensor cores (relative-norm difference):", shape.label);
      json << ", {\"shape\": \"" << shape.label << "\", \"kernels\": \"cudnn_packed\", "
           << "\"engines\": \"" << jsonEscaped(cudnn.description) << "\", \"forward_ms\": "
           << cudnn.forward << ", \"backward_ms\": " << cudnn.backward
           << ", \"forward_tflops\": " << forwardRate << ", \"backward_tflops\": " << backwardRate;
      for (int i = 0; i < 4; ++i) {
        const double difference = relativeError(decode(*cudnnOut[i], Storage::Bf16),
                                                decode(*mmaOut[i], Storage::Bf16));
        std::printf(" %s %.2e", names[i], difference);
        json << ", \"" << names[i] << "_difference\": " << difference;
        agree = agree && difference < 2e-2;
      }
      json << "}";
      std::printf("\n");
    }
    json << "]}\n";
    if (!jsonPath.empty())
      std::ofstream(jsonPath) << json.str();
    if (!agree)
      std::printf("FAIL: the tensor-core kernels (or cuDNN's attention) differ from the fp32-FMA "
                  "ones by more than 2e-2, or their packed-layout outputs from the contiguous "
                  "ones\n");
    return agree ? 0 : 1;
  } catch (const std::exception &error) {
    std::cerr << "ampc_attention_bench: " << error.what() << "\n";
    return 1;
  }
}
