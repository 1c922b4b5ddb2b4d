//===- RunnerOptions.cpp - A training executable's command line ----------===//
//
// parseRunnerArguments and runnerUsage (Runner.h): the flags of a training
// executable, their checks and its --help text.
//
//===----------------------------------------------------------------------===//

#include "runtime/train/Runner.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace ampc::train {

//===----------------------------------------------------------------------===//
// Command line
//===----------------------------------------------------------------------===//

namespace {

/// \p text as a non-negative decimal integer; UsageError naming \p flag.
uint64_t parseCount(const std::string &flag, const std::string &text) {
  bool digits = !text.empty();
  for (char c : text)
    digits = digits && c >= '0' && c <= '9';
  if (!digits)
    throw UsageError(flag + " expects a non-negative integer, got '" + text + "'");
  errno = 0;
  const unsigned long long value = std::strtoull(text.c_str(), nullptr, 10);
  if (errno == ERANGE)
    throw UsageError(flag + " is at most 18446744073709551615, got " + text);
  return value;
}

/// \p text as a real number; UsageError naming \p flag.
double parseReal(const std::string &flag, const std::string &text) {
  char *end = nullptr;
  errno = 0;
  const double value = std::strtod(text.c_str(), &end);
  if (text.empty() || *end || errno == ERANGE || !std::isfinite(value))
    throw UsageError(flag + " expects a number, got '" + text + "'");
  return value;
}

/// A file name for \p flag (not empty).
std::string fileName(const std::string &flag, const std::string &text) {
  if (text.empty())
    throw UsageError(flag + " needs a file name");
  return text;
}

/// Adds the comma-separated 1-based steps of \p text to \p steps.
void parseSteps(const std::string &flag, const std::string &text, std::vector<uint64_t> &steps) {
  size_t begin = 0;
  while (true) {
    const size_t comma = text.find(',', begin);
    const std::string item =
        text.substr(begin, comma == std::string::npos ? std::string::npos : comma - begin);
    if (item.empty())
      throw UsageError(flag +
                       " expects STEP[,STEP...] (1-based optimizer steps), "
                       "got '" +
                       text + "'");
    const uint64_t step = parseCount(flag, item);
    if (step == 0)
      throw UsageError(flag + " steps are 1-based, got 0");
    steps.push_back(step);
    if (comma == std::string::npos)
      break;
    begin = comma + 1;
  }
}

/// Parses "STEP@RANK" (1-based optimizer step, 0-based rank) of \p flag.
std::pair<uint64_t, int> parseStepAtRank(const std::string &flag, const std::string &text) {
  const size_t at = text.find('@');
  if (at == std::string::npos || at == 0 || at + 1 == text.size())
    throw UsageError(flag + " expects STEP@RANK (a 1-based optimizer step and a rank), got '" +
                     text + "'");
  const uint64_t step = parseCount(flag, text.substr(0, at));
  const uint64_t rank = parseCount(flag, text.substr(at + 1));
  if (step == 0)
    throw UsageError(flag + " steps are 1-based, got 0");
  if (rank > 1u << 20)
    throw UsageError(flag + " rank " + std::to_string(rank) + " is out of range");
  return {step, static_cast<int>(rank)};
}

} // namespace

RunnerOptions parseRunnerArguments(const std::vector<std::string> &args) {
  RunnerOptions options;
  bool evalFlags = false; // --eval-every or --eval-batches given
  for (size_t i = 0; i < args.size(); ++i) {
    std::string flag = args[i];
    std::optional<std::string> inlineValue;
    if (flag.rfind("--", 0) == 0) {
      const size_t equals = flag.find('=');
      if (equals != std::string::npos) {
        inlineValue = flag.substr(equals + 1);
        flag = flag.substr(0, equals);
      }
    }
    auto value = [&]() -> std::string {
      if (inlineValue)
        return *inlineValue;
      if (i + 1 >= args.size())
        throw UsageError(flag + " needs a value");
      return args[++i];
    };
    auto noValue = [&] {
      if (inlineValue)
        throw UsageError(flag + " takes no value");
    };
    if (flag == "--steps") {
      options.steps = parseCount(flag, value());
      if (options.steps == 0)
        throw UsageError("--steps must be at least 1");
    } else if (flag == "--seed") {
      options.seed = parseCount(flag, value());
    } else if (flag == "--data") {
      options.dataPath = value();
      if (options.dataPath.empty())
        throw UsageError("--data needs a file name");
    } else if (flag == "--data-format") {
      const std::string format = value();
      if (format == "tokens")
        options.dataFormat = DataFormat::Tokens;
      else if (format == "text")
        options.dataFormat = DataFormat::Text;
      else
        throw UsageError("--data-format is tokens (uint16 .bin) or text, got '" + format + "'");
    } else if (flag == "--log") {
      options.logPath = value();
      if (options.logPath.empty())
        throw UsageError("--log needs a file name");
    } else if (flag == "--device") {
      options.device = value();
      if (options.device != "auto" && options.device != "cpu" && options.device != "cuda")
        throw UsageError("--device is auto, cpu or cuda, got '" + options.device + "'");
    } else if (flag == "--cpu-fallback") {
      noValue();
      options.cpuFallback = true;
    } else if (flag == "--threads") {
      const uint64_t threads = parseCount(flag, value());
      if (threads == 0 || threads > 4096)
        throw UsageError("--threads must be between 1 and 4096, got " + std::to_string(threads));
      options.threads = static_cast<int>(threads);
    } else if (flag == "--profile") {
      options.profileSteps = inlineValue ? parseCount(flag, *inlineValue) : 3;
      if (options.profileSteps == 0)
        throw UsageError("--profile=K needs K >= 1 (steps to profile)");
    } else if (flag == "--matmul-algorithms") {
      options.matmulAlgorithms = value();
      if (options.matmulAlgorithms != "timed" && options.matmulAlgorithms != "heuristic")
        throw UsageError("--matmul-algorithms is timed or heuristic, got '" +
                         options.matmulAlgorithms + "'");
    } else if (flag == "--attention") {
      options.attention = value();
      if (options.attention != "timed" && options.attention != "ampc" &&
          options.attention != "cudnn")
        throw UsageError("--attention is timed, ampc or cudnn, got '" + options.attention + "'");
    } else if (flag == "--profile-top") {
      options.profileTop = static_cast<size_t>(parseCount(flag, value()));
      if (options.profileTop == 0)
        throw UsageError("--profile-top must be at least 1");
    } else if (flag == "--summary") {
      options.summaryPath = value();
      if (options.summaryPath.empty())
        throw UsageError("--summary needs a file name");
    } else if (flag == "--checkpoint-dir") {
      options.checkpointDir = value();
      if (options.checkpointDir.empty())
        throw UsageError("--checkpoint-dir needs a directory");
    } else if (flag == "--checkpoint-every") {
      options.checkpointEvery = parseCount(flag, value());
      if (options.checkpointEvery == 0)
        throw UsageError("--checkpoint-every must be at least 1");
    } else if (flag == "--keep") {
      options.keep = parseCount(flag, value());
      if (options.keep == 0)
        throw UsageError("--keep must be at least 1");
    } else if (flag == "--resume") {
      options.resume = value();
      if (options.resume.empty())
        throw UsageError("--resume needs 'latest', a checkpoint directory or a checkpoint file");
    } else if (flag == "--on-checkpoint-error") {
      const std::string action = value();
      if (action == "stop")
        options.continueOnCheckpointError = false;
      else if (action == "continue")
        options.continueOnCheckpointError = true;
      else
        throw UsageError("--on-checkpoint-error is stop or continue, got '" + action + "'");
    } else if (flag == "--init-from") {
      options.initFrom = fileName(flag, value());
    } else if (flag == "--export-weights") {
      options.exportWeights = fileName(flag, value());
    } else if (flag == "--export-dtype") {
      const std::string dtype = value();
      if (dtype == "f32" || dtype == "bf16" || dtype == "f16") {
        options.exportDtype = dtype;
        std::transform(dtype.begin(), dtype.end(), options.exportDtype.begin(), ::toupper);
      } else {
        throw UsageError("--export-dtype is f32, bf16 or f16, got '" + dtype + "'");
      }
    } else if (flag == "--val-data") {
      options.valDataPath = fileName(flag, value());
    } else if (flag == "--eval-every") {
      options.evalEvery = parseCount(flag, value());
      if (options.evalEvery == 0)
        throw UsageError("--eval-every must be at least 1");
      evalFlags = true;
    } else if (flag == "--eval-batches") {
      options.evalBatches = parseCount(flag, value());
      if (options.evalBatches == 0 || options.evalBatches > 100000)
        throw UsageError("--eval-batches must be between 1 and 100000");
      evalFlags = true;
    } else if (flag == "--ema-decay") {
      const std::string text = value();
      options.emaDecay = parseReal(flag, text);
      if (!(options.emaDecay > 0 && options.emaDecay < 1))
        throw UsageError("--ema-decay must be between 0 and 1 (exclusive), e.g. 0.999; got " +
                         text);
    } else if (flag == "--export-ema") {
      options.exportEma = fileName(flag, value());
    } else if (flag == "--eval-ema") {
      noValue();
      options.evalEma = true;
    } else if (flag == "--inject-overflow") {
      const std::string steps = value();
      if (steps.find('@') != std::string::npos)
        options.injectOverflowOnRank.push_back(parseStepAtRank(flag, steps));
      else
        parseSteps(flag, steps, options.injectOverflow);
    } else if (flag == "--inject-rank-failure") {
      options.injectRankFailure.push_back(parseStepAtRank(flag, value()));
    } else if (flag == "--inject-rank-hang") {
      options.injectRankHang.push_back(parseStepAtRank(flag, value()));
    } else if (flag == "--inject-stop") {
      options.injectStop.push_back(parseStepAtRank(flag, value()));
    } else if (flag == "--shard-optimizer") {
      noValue();
      options.shardOptimizer = true;
    } else if (flag == "--dist-timeout") {
      const uint64_t seconds = parseCount(flag, value());
      if (seconds == 0)
        throw UsageError("--dist-timeout must be at least 1 (seconds)");
      options.distTimeout = static_cast<double>(seconds);
    } else if (flag == "--quiet" || flag == "-q") {
      noValue();
      options.quiet = true;
    } else if (flag == "--info") {
      noValue();
      options.info = true;
    } else if (flag == "--help" || flag == "-h") {
      noValue();
      options.help = true;
    } else if (flag.rfind("-", 0) == 0) {
      throw UsageError("unknown option '" + flag + "'");
    } else {
      throw UsageError("unexpected argument '" + flag + "'; every option is a --flag");
    }
  }
  if (options.dataFormat && options.dataPath.empty())
    throw UsageError("--data-format needs --data FILE");
  if (options.checkpointDir.empty()) {
    if (options.checkpointEvery)
      throw UsageError("--checkpoint-every needs --checkpoint-dir DIR");
    if (options.resume == "latest")
      throw UsageError("--resume latest needs --checkpoint-dir DIR (where to look)");
  }
  if (evalFlags && options.valDataPath.empty())
    throw UsageError("--eval-every and --eval-batches need --val-data FILE");
  if (options.emaDecay == 0 && (!options.exportEma.empty() || options.evalEma))
    throw UsageError(std::string(options.evalEma ? "--eval-ema" : "--export-ema") +
                     " needs --ema-decay D");
  if (options.evalEma && options.valDataPath.empty())
    throw UsageError("--eval-ema needs --val-data FILE");
  std::sort(options.injectOverflow.begin(), options.injectOverflow.end());
  options.injectOverflow.erase(
      std::unique(options.injectOverflow.begin(), options.injectOverflow.end()),
      options.injectOverflow.end());
  if (!options.injectOverflow.empty() && options.injectOverflow.back() > options.steps)
    throw UsageError("--inject-overflow step " + std::to_string(options.injectOverflow.back()) +
                     " is beyond the last step (--steps " + std::to_string(options.steps) + ")");
  return options;
}

std::string optionsLine(const RunnerOptions &options) {
  const RunnerOptions defaults;
  std::string line = "--steps " + std::to_string(options.steps) + " --seed " +
                     std::to_string(options.seed) + " --device " + options.device;
  auto add = [&](const char *flag, const std::string &value) {
    if (!value.empty())
      line += std::string(" ") + flag + " " + value;
  };
  add("--data", options.dataPath);
  if (options.dataFormat)
    add("--data-format", *options.dataFormat == DataFormat::Tokens ? "tokens" : "text");
  add("--init-from", options.initFrom);
  add("--val-data", options.valDataPath);
  if (!options.valDataPath.empty()) {
    add("--eval-every", std::to_string(options.evalEvery));
    add("--eval-batches", std::to_string(options.evalBatches));
  }
  if (options.emaDecay) {
    char decay[32];
    std::snprintf(decay, sizeof(decay), "%.17g", options.emaDecay);
    add("--ema-decay", decay);
  }
  add("--checkpoint-dir", options.checkpointDir);
  if (options.checkpointEvery)
    add("--checkpoint-every", std::to_string(options.checkpointEvery));
  if (options.keep != defaults.keep)
    add("--keep", std::to_string(options.keep));
  add("--log", options.logPath);
  add("--export-weights", options.exportWeights);
  add("--export-ema", options.exportEma);
  return line;
}

std::string runnerUsage(const std::string &program) {
  return "usage: " + program + R"( [--steps N] [options]

Trains the model compiled into this executable on a GPU or the CPU and reports
the loss.

options:
  --steps N            optimizer steps to run (default 100)
  --seed S             seed for initialisation, data and dropout (default 0)
  --data FILE          train on FILE instead of the built-in synthetic task:
                       NumPy arrays (FILE.npz, one array per model input named
                       as the input, a row per example; rows shuffled each
                       epoch), or for a language model a nanoGPT .bin file
                       (uint16 tokens) or text (one token per byte)
  --data-format F      tokens or text (default: tokens for .bin, else text)
  --log FILE           write one JSON object per step to FILE (JSONL)
  --device D           auto (default): the GPU when the NVIDIA driver loads, a
                       GPU is present and the plan has GPU code, else the CPU
                       (one line says why); a GPU that is there but fails is
                       an error; cuda: the GPU or an error; cpu
  --cpu-fallback       with auto: train on the CPU, with a warning, when the
                       GPU is there but fails
  --threads N          CPU threads (default: AMPC_CPU_THREADS or all cores)
  --quiet              no progress lines (nor notes on skipped steps)
  --summary FILE       write one JSON object at the end: losses, the median
                       step time after warm-up, device memory (planned,
                       allocated, in use on the GPU)
  --profile[=K]        GPU: time every fused kernel group with CUDA events
                       over the last K steps (default 3; they run without
                       CUDA graphs) and print where the time goes
  --profile-top N      rows of the --profile report (default 20)
  --matmul-algorithms A
                       GPU: timed (default) runs cuBLASLt's first 8
                       candidates for every distinct matmul once, at start,
                       and keeps the fastest; heuristic takes its first
  --attention A        GPU, bf16/f16 attention: timed (default) runs cuDNN's
                       fused attention (libcudnn.so.9, when it loads) and
                       ampc's kernels once per distinct problem at start and
                       keeps the faster; ampc: ampc's kernels only; cudnn:
                       cuDNN's wherever it builds
  --checkpoint-dir DIR write checkpoints to DIR (created if missing) at the
                       end of the run, when stopped by SIGINT or SIGTERM, and
                       every --checkpoint-every steps
  --checkpoint-every N a checkpoint after every N optimizer steps
  --keep K             keep the K newest checkpoints in DIR (default 3)
  --resume R           continue a run from a checkpoint, bit for bit: R is
                       latest (the newest valid one in --checkpoint-dir, or
                       step 0 when there is none yet), a directory (its
                       newest valid one) or a step-N.ckpt file; the plan,
                       --seed, --steps and --data must be those of the run
                       that wrote it
  --on-checkpoint-error A
                       stop (default: exit 1) or continue (warn and train
                       on) when a checkpoint cannot be written
  --init-from FILE     start from the weights in FILE (safetensors, tensors
                       named as the model's parameters; F32, BF16 or F16)
                       instead of the model's initialisers
  --export-weights FILE
                       write the trained weights to FILE (safetensors) at
                       the end
  --export-dtype T     f32 (default), bf16 or f16 for the exported weights
  --val-data FILE      held-out data (as --data) for a validation loss: the
                       forward pass alone, without dropout, logged as
                       val_loss with the best step so far
  --eval-every N       a validation loss every N steps and at the last
                       (default 100)
  --eval-batches K     batches of --val-data per validation loss (default 20;
                       the same K each time)
  --ema-decay D        keep an exponential moving average of the weights,
                       updated after every step with decay D (e.g. 0.999)
  --export-ema FILE    write the moving average to FILE at the end
  --eval-ema           validate with the moving average's weights
  --shard-optimizer    data parallel runs (mpirun -np N): split the AdamW
                       state over the ranks (ZeRO-1); each rank updates its
                       share of the weights and the ranks all-gather them
  --dist-timeout S     data parallel runs: stop with an error when the other
                       ranks have not answered within S seconds (default 300)
  --info               describe the model and its inputs, then exit
  --help               show this help

testing aids:
  --inject-overflow S[,S...]
                       make optimizer steps S (1-based) behave as if their
                       gradients had overflowed, to exercise loss scaling:
                       the update is skipped and the scale backs off (no
                       effect on a plan without loss scaling); S@R: step S on
                       rank R only (data parallel runs)
  --inject-rank-failure S@R
                       rank R of a data parallel run dies (SIGKILL) in step S
  --inject-rank-hang S@R
                       rank R of a data parallel run stops (SIGSTOP) in step S
  --inject-stop S@R    rank R of a data parallel run gets SIGTERM in step S
)";
}

} // namespace ampc::train
