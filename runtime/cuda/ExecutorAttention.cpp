//===- ExecutorAttention.cpp - Attention steps: our kernels or cuDNN's ----===//
//
// An attention step runs either the backend's own flash-attention kernels (FlashAttention.cuh
// for f32 storage, FlashAttentionMma.cuh for bf16/f16) or, for 16-bit storage, cuDNN's fused
// attention (CudnnAttention.h), opened at run time. Which one is measured, not assumed: while
// the executor is built, each distinct problem (shapes, masking, scale, storage type, operand
// layouts) and pass (forward, backward) runs both on the step's own buffers, filled with random
// values: cuDNN's outputs must be ours to kAttentionAgreement, and then each is timed (runs
// queued back to back between CUDA events, the median of kTimedRuns) and the faster is kept.
// Where cuDNN is missing, refuses the problem or fails, the step keeps our kernels and the
// choice says why. Both read and write the plan's buffers in the same layouts and the same lse,
// so a forward of one and a backward of the other agree.
//
// cuDNN drives the GPU through the system's libcuda, so it is only tried on a Device that uses
// it too (not over a test's stand-in driver, whose streams and memory it cannot see).
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/ExecutorState.h"
#include "runtime/cuda/FlashAttentionLayout.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <random>
#include <set>

namespace ampc::cuda {

namespace {

/// Timings of each implementation per distinct problem and pass (after one untimed run), and
/// runs queued back to back per timing.
constexpr int kTimedRuns = 5;
constexpr int kRunsPerTiming = 4;
/// Elements encoded, decoded and compared at a time (the host never holds a whole output as
/// doubles: a GPT-124M gradient is 38M elements).
constexpr size_t kCompareChunk = size_t(1) << 20;
/// How closely cuDNN's lse must be ours, element by element (|difference| / (1 + |ours|)): the
/// other side's backward may read it, and exp(s - lse) carries its error into every gradient.
constexpr double kLseAgreement = 1e-3;

const char *passName(plan::AttentionPass pass) {
  return pass == plan::AttentionPass::Forward ? "forward" : "backward";
}

/// "[B 16, H 12, T 1024, S 1024, D 64, causal, bf16]".
std::string describeProblem(const CudnnAttentionProblem &p) {
  return "[B " + std::to_string(p.batch) + ", H " + std::to_string(p.heads) + ", T " +
         std::to_string(p.queries) + ", S " + std::to_string(p.keys) + ", D " +
         std::to_string(p.headDim) + (p.causal ? ", causal, " : ", ") + plan::dtypeName(p.type) +
         "]";
}

/// The problem and its layouts: every field, so that steps share a CudnnAttention only when
/// cuDNN would build the same graphs for them.
std::string problemKey(const CudnnAttentionProblem &p) {
  std::string key = describeProblem(p);
  char scale[32];
  std::snprintf(scale, sizeof(scale), " scale %a", static_cast<double>(p.scale));
  key += scale;
  for (const AttentionStrides *strides : {&p.q, &p.k, &p.v, &p.o, &p.dO, &p.dq, &p.dk, &p.dv})
    key += " (" + std::to_string((*strides)[0]) + "," + std::to_string((*strides)[1]) + "," +
           std::to_string((*strides)[2]) + ")";
  return key;
}

AttentionStrides stridesOf(const plan::AttentionLayout &layout) {
  return {layout.batchStride, layout.headStride, layout.rowStride};
}

/// The first line of \p text.
std::string firstLine(const std::string &text) { return text.substr(0, text.find('\n')); }

} // namespace

const char *attentionSelectionName(AttentionSelection selection) {
  switch (selection) {
  case AttentionSelection::Timed:
    return "timed";
  case AttentionSelection::Own:
    return "ampc";
  case AttentionSelection::Cudnn:
    return "cudnn";
  }
  return "?";
}

std::string formatAttentionChoices(const std::vector<AttentionChoice> &choices) {
  if (choices.empty())
    return "";
  std::string text = "attention (each distinct problem and pass, chosen at start):\n";
  auto number = [](const char *format, double value) {
    char text[32];
    std::snprintf(text, sizeof(text), format, value);
    return std::string(text);
  };
  for (const AttentionChoice &choice : choices) {
    text += "  " + choice.problem + ": ";
    const std::string agreement =
        choice.difference >= 0 ? "outputs agree to " + number("%.1e", choice.difference) : "";
    if (choice.cudnn) {
      text += "cuDNN";
      if (choice.cudnnMs > 0)
        text += number(" %.3f ms", choice.cudnnMs) + " (ours" + number(" %.3f ms", choice.ownMs) +
                (agreement.empty() ? "" : "; " + agreement) + ")";
      else if (!agreement.empty())
        text += " (" + agreement + ")";
      text += ", " + choice.engine + "\n";
    } else {
      text += "ours";
      if (choice.ownMs > 0)
        text += number(" %.3f ms", choice.ownMs);
      if (choice.cudnnMs > 0)
        text += " (cuDNN" + number(" %.3f ms", choice.cudnnMs) + ", " + choice.engine + ")";
      else
        text += " (cuDNN's not used: " + choice.why + ")";
      text += "\n";
    }
  }
  return text;
}

void Executor::Impl::chooseAttention() {
  if (options.attentionSelection == AttentionSelection::Own)
    return;
  auto writable = [&](uint32_t buffer) { return writableWhileBuilding(buffer); };
  // The 16-bit steps by problem, then pass; in program order.
  struct Pass {
    std::string problem;
    plan::AttentionPass pass;
    std::vector<const plan::AttentionStep *> steps;
    bool writable = true;
    bool aligned = true; ///< every operand's first element 16-byte aligned, as cuDNN reads them
  };
  auto operandsAligned = [&](const plan::AttentionStep &step) {
    const std::pair<uint32_t, const plan::AttentionLayout *> operands[] = {
        {step.q, &step.qLayout},   {step.k, &step.kLayout},    {step.v, &step.vLayout},
        {step.out, &step.oLayout}, {step.dOut, &step.oLayout}, {step.dq, &step.qLayout},
        {step.dk, &step.kLayout},  {step.dv, &step.vLayout}};
    for (const auto &[buffer, layout] : operands)
      if (buffer != kNoBuffer && attentionOperand(buffer, *layout) % 16 != 0)
        return false;
    return attentionLse(step) % 16 == 0;
  };
  std::vector<Pass> passes;
  std::map<std::string, CudnnAttentionProblem> problems;
  std::map<std::string, CudnnAttention::Passes> needed; // which graphs each problem needs
  for (const FunctionState *f : {&micro, &optimizer})
    for (const plan::DeviceGroup &group : f->program->groups)
      for (const plan::DeviceStep &deviceStep : group.steps) {
        const auto *step = std::get_if<plan::AttentionStep>(&deviceStep);
        if (!step)
          continue;
        const plan::DType type = plan.buffers[step->q].dtype;
        // cuDNN's backward reads the forward's o and lse; one that recomputes them keeps ours.
        if ((type != plan::DType::BF16 && type != plan::DType::F16) ||
            (step->pass == plan::AttentionPass::Backward && !step->readsSavedForward()))
          continue;
        CudnnAttentionProblem p;
        p.batch = step->batch;
        p.heads = step->heads;
        p.queries = step->queries;
        p.keys = step->keys;
        p.headDim = step->headDim;
        p.causal = step->causal;
        p.scale = step->scale;
        p.type = type;
        p.q = p.dq = stridesOf(step->qLayout);
        p.k = p.dk = stridesOf(step->kLayout);
        p.v = p.dv = stridesOf(step->vLayout);
        p.o = p.dO = stridesOf(step->oLayout);
        const std::string key = problemKey(p);
        problems.emplace(key, p);
        CudnnAttention::Passes &graphs =
            needed.emplace(key, CudnnAttention::Passes{false, false}).first->second;
        (step->pass == plan::AttentionPass::Forward ? graphs.forward : graphs.backward) = true;
        auto found = std::find_if(passes.begin(), passes.end(), [&](const Pass &each) {
          return each.problem == key && each.pass == step->pass;
        });
        if (found == passes.end()) {
          passes.push_back({key, step->pass, {}, true, true});
          found = std::prev(passes.end());
        }
        found->steps.push_back(step);
        const bool forward = step->pass == plan::AttentionPass::Forward;
        // The comparison fills the inputs with random values; the runs write the outputs.
        bool touchable = writable(step->q) && writable(step->k) && writable(step->v) &&
                         writable(step->out) && writable(step->lse);
        if (!forward)
          touchable = touchable && writable(step->dOut) && writable(step->dq) &&
                      writable(step->dk) && writable(step->dv);
        found->writable = found->writable && touchable;
        found->aligned = found->aligned && operandsAligned(*step);
      }
  if (passes.empty())
    return;

  // A pass's choice, named "forward [B .., H .., ...]", before it is made.
  auto choiceFor = [&](const Pass &pass) {
    AttentionChoice choice;
    choice.problem =
        std::string(passName(pass.pass)) + " " + describeProblem(problems[pass.problem]);
    return choice;
  };

  // cuDNN's graphs for every distinct problem, and why not where they do not build.
  std::map<std::string, std::string> unavailable;
  size_t workspaceBytes = 0;
  for (const auto &[key, problem] : problems) {
    if (!device.usesSystemDriver()) {
      unavailable[key] = "the device runs over a stand-in for libcuda, which cuDNN cannot use";
      continue;
    }
    try {
      // cuDNN's handle takes the context current on this thread.
      device.makeCurrent();
      auto attention = std::make_unique<CudnnAttention>(problem, device.stream(), needed[key]);
      workspaceBytes = std::max({workspaceBytes, attention->forwardWorkspaceBytes(),
                                 attention->backwardWorkspaceBytes()});
      cudnnProblems[key] = std::move(attention);
    } catch (const CudaError &error) {
      unavailable[key] = firstLine(error.what());
    }
  }
  if (!cudnnProblems.empty()) {
    try {
      cudnnWorkspace =
          device.allocate(std::max<size_t>(workspaceBytes, 256), "cuDNN's attention workspace");
    } catch (const CudaError &error) {
      for (const auto &entry : cudnnProblems)
        unavailable[entry.first] = firstLine(error.what());
      cudnnProblems.clear();
    }
  }
  if (cudnnProblems.empty()) {
    // Nothing to compare or time: every pass keeps our kernels, and the device sees no work.
    for (const Pass &pass : passes) {
      AttentionChoice choice = choiceFor(pass);
      choice.why = unavailable[pass.problem];
      attentionChoices.push_back(choice);
    }
    return;
  }

  Event start(device), end(device);
  // Milliseconds per run of \p run: the median of kTimedRuns timings of kRunsPerTiming runs
  // queued back to back, each timing started while an untimed run keeps the GPU busy, so that
  // the host's time to queue a run (cuDNN's is larger than ours) hides behind the GPU's.
  auto perRunMs = [&](const std::function<void()> &run) {
    run();
    std::vector<double> times;
    for (int i = 0; i < kTimedRuns; ++i) {
      run();
      start.record();
      for (int r = 0; r < kRunsPerTiming; ++r)
        run();
      end.record();
      end.synchronize("timing an attention step");
      times.push_back(Event::elapsedMilliseconds(start, end) / kRunsPerTiming);
    }
    std::sort(times.begin(), times.end());
    return times[times.size() / 2];
  };
  const bool timed = options.attentionSelection == AttentionSelection::Timed;
  for (const Pass &pass : passes) {
    AttentionChoice choice = choiceFor(pass);
    auto built = cudnnProblems.find(pass.problem);
    if (built == cudnnProblems.end()) {
      choice.why = unavailable[pass.problem];
      attentionChoices.push_back(choice);
      continue;
    }
    const CudnnAttention &attention = *built->second;
    choice.engine = attention.description();
    const plan::AttentionStep &step = *pass.steps.front();
    bool useCudnn = true;
    if (!pass.aligned) {
      useCudnn = false;
      choice.why = "an operand does not start on a 16-byte boundary";
    } else if (!pass.writable && timed) {
      useCudnn = false;
      choice.why = "not compared: the step reads or writes a buffer that may already hold a "
                   "value";
    } else {
      try {
        if (pass.writable) {
          // Compared with ours on random inputs, then (timed) both timed.
          const std::string disagreement = compareWithOurs(step, attention, choice.difference);
          if (!disagreement.empty()) {
            useCudnn = false;
            choice.why = disagreement;
          } else if (timed) {
            choice.cudnnMs = perRunMs([&] { runCudnnAttention(step, attention); });
          }
        } else {
          // --attention cudnn on a step whose buffers may hold values: one run must succeed.
          runCudnnAttention(step, attention);
          device.synchronize("trying cuDNN's attention");
        }
      } catch (const CudaError &error) {
        useCudnn = false;
        choice.why = firstLine(error.what());
        // A fault on the GPU is sticky: then nothing else can run in this process.
        try {
          device.synchronize("after cuDNN's attention failed");
        } catch (const CudaError &fault) {
          throw CudaError(fault.kind(),
                          std::string(fault.what()) + " (while trying cuDNN's attention for " +
                              choice.problem + "; --attention ampc runs without it)",
                          fault.code());
        }
      }
      if (timed) {
        choice.ownMs = perRunMs([&] { runOwnAttention(step); });
        if (useCudnn && choice.cudnnMs >= choice.ownMs) {
          useCudnn = false;
          choice.why = "slower";
        }
      }
    }
    choice.cudnn = useCudnn;
    if (useCudnn)
      for (const plan::AttentionStep *each : pass.steps)
        cudnnSteps[each] = &attention;
    attentionChoices.push_back(choice);
  }
  device.synchronize("choosing each attention step's implementation");

  // Keep only what the chosen passes use: cuDNN's graphs, and the workspace their passes need
  // (a backward's holds its f32 dQ accumulator; a problem whose backward stays ours needs none).
  std::set<const CudnnAttention *> used;
  size_t neededBytes = 0;
  for (const auto &[step, attention] : cudnnSteps) {
    used.insert(attention);
    neededBytes = std::max(neededBytes, step->pass == plan::AttentionPass::Forward
                                            ? attention->forwardWorkspaceBytes()
                                            : attention->backwardWorkspaceBytes());
  }
  for (auto it = cudnnProblems.begin(); it != cudnnProblems.end();)
    it = used.count(it->second.get()) ? std::next(it) : cudnnProblems.erase(it);
  if (cudnnProblems.empty()) {
    cudnnWorkspace = DeviceAllocation();
  } else if (std::max<size_t>(neededBytes, 256) < cudnnWorkspace.bytes()) {
    cudnnWorkspace = DeviceAllocation();
    cudnnWorkspace =
        device.allocate(std::max<size_t>(neededBytes, 256), "cuDNN's attention workspace");
  }
}

std::string Executor::Impl::compareWithOurs(const plan::AttentionStep &step,
                                            const CudnnAttention &attention, double &difference) {
  const bool forward = step.pass == plan::AttentionPass::Forward;
  // Inputs of unit scale, uploaded a chunk at a time. A backward's o and lse need not come from
  // a forward: both implementations compute the same function of them (lse near log S keeps
  // exp(s - lse) of the order of a softmax).
  std::mt19937 generator(20261129);
  std::set<uint32_t> filled;
  auto fill = [&](uint32_t buffer, double low, double high) {
    if (buffer == kNoBuffer || !filled.insert(buffer).second)
      return;
    std::uniform_real_distribution<double> uniform(low, high);
    const plan::Buffer &b = plan.buffers[buffer];
    const size_t count = static_cast<size_t>(plan::numElements(b)),
                 width = plan::dtypeBytes(b.dtype);
    for (size_t first = 0; first < count; first += kCompareChunk) {
      std::vector<double> values(std::min(kCompareChunk, count - first));
      for (double &value : values)
        value = uniform(generator);
      const std::vector<uint8_t> bytes = encodeValues(values, b.dtype);
      device.copyToDevice(address(buffer) + first * width, bytes.data(), bytes.size());
    }
  };
  for (uint32_t input : {step.q, step.k, step.v})
    fill(input, -1, 1);
  if (!forward) {
    fill(step.dOut, -1, 1);
    fill(step.out, -1, 1);
    const double logKeys = std::log(static_cast<double>(step.keys));
    fill(step.lse, logKeys, logKeys + 1);
  }
  std::vector<uint32_t> outputs;
  for (uint32_t output : forward ? std::vector<uint32_t>{step.out, step.lse}
                                 : std::vector<uint32_t>{step.dq, step.dk, step.dv})
    if (output != kNoBuffer && std::find(outputs.begin(), outputs.end(), output) == outputs.end())
      outputs.push_back(output);
  auto download = [&](uint32_t buffer) {
    std::vector<uint8_t> bytes(bufferBytes(plan.buffers[buffer]));
    device.copyToHost(bytes.data(), address(buffer), bytes.size());
    return bytes;
  };
  runOwnAttention(step);
  std::vector<std::vector<uint8_t>> ours;
  for (uint32_t output : outputs)
    ours.push_back(download(output));
  runCudnnAttention(step, attention);
  difference = 0;
  for (size_t i = 0; i < outputs.size(); ++i) {
    const plan::Buffer &b = plan.buffers[outputs[i]];
    const std::vector<uint8_t> theirs = download(outputs[i]);
    const size_t count = static_cast<size_t>(plan::numElements(b)),
                 width = plan::dtypeBytes(b.dtype);
    // The 16-bit outputs by relative norm; the f32 lse, which the other side's backward may
    // read, element by element.
    double squaredError = 0, squaredNorm = 0, lseError = 0;
    for (size_t first = 0; first < count; first += kCompareChunk) {
      const size_t n = std::min(kCompareChunk, count - first);
      const std::vector<double> a = decodeValues(theirs.data() + first * width, b.dtype, n);
      const std::vector<double> e = decodeValues(ours[i].data() + first * width, b.dtype, n);
      for (size_t j = 0; j < n; ++j) {
        squaredError += (a[j] - e[j]) * (a[j] - e[j]);
        squaredNorm += e[j] * e[j];
        lseError = std::max(lseError, std::fabs(a[j] - e[j]) / (1 + std::fabs(e[j])));
        if (std::isnan(a[j]) != std::isnan(e[j]))
          lseError = INFINITY;
      }
    }
    const char *name = outputs[i] == step.lse ? "lse" : forward ? "o" : "dq, dk, dv";
    char text[160];
    if (b.dtype == plan::DType::F32) {
      if (!(lseError <= kLseAgreement)) {
        std::snprintf(text, sizeof(text),
                      "its %s differs from ampc's kernels' by %.2e (relative, largest)", name,
                      lseError);
        difference = INFINITY;
        return text;
      }
      continue;
    }
    const double relative = std::sqrt(squaredError / std::max(squaredNorm, 1e-30));
    difference = std::max(difference, std::isnan(relative) ? INFINITY : relative);
    if (!(relative <= kAttentionAgreement)) {
      std::snprintf(text, sizeof(text),
                    "its %s differ from ampc's kernels' by %.2e (relative norm)", name, relative);
      return text;
    }
  }
  return "";
}

void Executor::Impl::runAttention(const plan::AttentionStep &step) {
  const auto chosen = cudnnSteps.find(&step);
  if (chosen != cudnnSteps.end())
    runCudnnAttention(step, *chosen->second);
  else
    runOwnAttention(step);
}

void Executor::Impl::runCudnnAttention(const plan::AttentionStep &step,
                                       const CudnnAttention &attention) {
  auto at = [&](uint32_t buffer, const plan::AttentionLayout &layout) {
    return attentionOperand(buffer, layout);
  };
  const CUdeviceptr q = at(step.q, step.qLayout), k = at(step.k, step.kLayout),
                    v = at(step.v, step.vLayout), o = at(step.out, step.oLayout);
  const CUdeviceptr lse = attentionLse(step);
  if (step.pass == plan::AttentionPass::Forward) {
    attention.forward(q, k, v, o, lse, cudnnWorkspace.pointer());
    return;
  }
  attention.backward(q, k, v, o, at(step.dOut, step.oLayout), lse, at(step.dq, step.qLayout),
                     at(step.dk, step.kLayout), at(step.dv, step.vLayout),
                     cudnnWorkspace.pointer());
}

void Executor::Impl::runOwnAttention(const plan::AttentionStep &step) {
  int queries = static_cast<int>(step.queries);
  int keys = static_cast<int>(step.keys);
  float scale = step.scale;
  const unsigned slices = static_cast<unsigned>(step.batch * step.heads);
  const int64_t rowsPerBlock = step.blockRows;
  const unsigned queryTiles =
      static_cast<unsigned>((step.queries + rowsPerBlock - 1) / rowsPerBlock);
  // Each operand's pointer is at its first element (its layout's byte offset); the kernels
  // find every row from the strides in the layout argument.
  auto at = [&](uint32_t buffer, const plan::AttentionLayout &layout) {
    return attentionOperand(buffer, layout);
  };
  CUdeviceptr q = at(step.q, step.qLayout), k = at(step.k, step.kLayout),
              v = at(step.v, step.vLayout);
  // The row log-sum-exp: the forward's lse buffer (written by a forward, read by a backward that
  // uses the saved forward), or scratch.
  CUdeviceptr lse = attentionLse(step);
  LaunchConfig tiles;
  tiles.block[0] = 128;
  tiles.grid[0] = queryTiles;
  tiles.grid[1] = slices;
  // The forward kernel's own rows per block (128 for the tensor-core kernels at D <= 64).
  LaunchConfig forwardTiles = tiles;
  forwardTiles.grid[0] =
      static_cast<unsigned>((step.queries + step.forwardBlockRows - 1) / step.forwardBlockRows);
  if (step.pass == plan::AttentionPass::Forward) {
    CUdeviceptr o = at(step.out, step.oLayout);
    FlashLayout layout = FlashLayout::of(step);
    kernelAt(step.forwardKernel)
        .launch(forwardTiles, {&q, &k, &v, &o, &lse, &queries, &keys, &scale, &layout});
    return;
  }
  // The saved forward output, or o and lse recomputed into scratch by the forward kernel (o
  // contiguous there).
  const bool saved = step.readsSavedForward();
  CUdeviceptr o = saved ? at(step.out, step.oLayout) : scratch.pointer() + step.outOffset;
  FlashLayout layout = FlashLayout::of(step, !saved);
  CUdeviceptr delta = scratch.pointer() + step.deltaOffset;
  CUdeviceptr dO = at(step.dOut, step.oLayout), dq = at(step.dq, step.qLayout),
              dk = at(step.dk, step.kLayout), dv = at(step.dv, step.vLayout);
  if (!saved)
    kernelAt(step.forwardKernel)
        .launch(forwardTiles, {&q, &k, &v, &o, &lse, &queries, &keys, &scale, &layout});
  long long rows = static_cast<long long>(slices) * step.queries;
  kernelAt(step.deltaKernel)
      .launch(LaunchConfig::linear(static_cast<unsigned>((rows + 3) / 4), 128),
              {&o, &dO, &delta, &rows, &queries, &layout});
  kernelAt(step.dqKernel)
      .launch(tiles, {&q, &k, &v, &dO, &lse, &delta, &dq, &queries, &keys, &scale, &layout});
  LaunchConfig keyTiles = tiles;
  keyTiles.grid[0] = static_cast<unsigned>((step.keys + rowsPerBlock - 1) / rowsPerBlock);
  kernelAt(step.dkdvKernel)
      .launch(keyTiles,
              {&q, &k, &v, &dO, &lse, &delta, &dk, &dv, &queries, &keys, &scale, &layout});
}

} // namespace ampc::cuda
