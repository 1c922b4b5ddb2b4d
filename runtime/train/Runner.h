//===- Runner.h - The training loop of a standalone training executable ---===//
//
// A training executable (`ampc compile model.mlir -o train_gpt`) is the
// generic runner `ampc-train-runner` with a training plan appended
// (runtime/train/Bundle.h). This is everything it does after loading its
// plan: parse the command line, pick the data (runtime/train/Data.h), run the
// micro steps and optimizer steps on the CPU or CUDA backend (Backend.h), print
// progress and
// write one JSON object per step to the metrics log.
//
//   train_gpt --steps N [--seed S] [--data FILE] [--data-format tokens|text]
//             [--log FILE] [--device auto|cpu|cuda] [--threads N] [--quiet]
//             [--checkpoint-dir DIR [--checkpoint-every N] [--keep K]]
//             [--resume latest|DIR|FILE] [--on-checkpoint-error stop|continue]
//             [--init-from FILE] [--export-weights FILE] [--export-dtype f32|bf16|f16]
//             [--val-data FILE [--eval-every N] [--eval-batches K]]
//             [--ema-decay D [--export-ema FILE] [--eval-ema]]
//             [--inject-overflow STEP[,STEP...]] [--info] [--help]
//
// Checkpoints (runtime/train/Checkpoint.h, docs/checkpoint-format.md) are
// written at optimizer-step boundaries; a resumed run logs bit-identical
// figures to an uninterrupted one. SIGINT and SIGTERM finish the current
// optimizer step, write a checkpoint when --checkpoint-dir is given, and exit
// with status 130 (SIGINT) or 143 (SIGTERM).
//
// Weights come in and go out as safetensors files named by the model's
// parameters (runtime/train/Weights.h). A validation loss (--val-data) is the
// forward pass alone (TrainingBackend::evaluateLoss) over fixed batches of the
// held-out file, logged as "val_loss" with the best so far; --ema-decay keeps
// a moving average of the weights, checkpointed with the run.
//
// Exit status: 0 on success, 1 for a failure while loading or training (bad
// data file, unwritable log, a loss or gradient norm that is not finite),
// 2 for a bad command line. With loss scaling, a step whose gradients
// overflow is skipped and training goes on; only a loss that stays
// non-finite for more than kMaxNonFiniteLossSteps steps in a row stops it.
//
//===----------------------------------------------------------------------===//

#ifndef AMPC_RUNTIME_TRAIN_RUNNER_H
#define AMPC_RUNTIME_TRAIN_RUNNER_H

#include "runtime/plan/Plan.h"
#include "runtime/train/Data.h"

#include <cstdint>
#include <cstdio>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace ampc::train {

/// The command line of a training executable.
struct RunnerOptions {
  uint64_t steps = 100; ///< optimizer steps, >= 1
  uint64_t seed = 0;    ///< keys initialisation, data and dropout
  std::string dataPath; ///< a token file; empty for the synthetic task
  std::optional<DataFormat> dataFormat;
  std::string logPath; ///< the JSONL metrics log; empty for none
  /// "auto" (the GPU when it can run the plan, else the CPU with a note),
  /// "cpu" or "cuda" (the GPU or an error).
  std::string device = "auto";
  /// auto only: train on the CPU (with a warning) when a GPU is there but
  /// fails, instead of stopping with the error.
  bool cpuFallback = false;
  int threads = 0;    ///< CPU threads; 0 = AMPC_CPU_THREADS or all
  bool quiet = false; ///< no progress lines
  bool info = false;  ///< describe the model and exit
  bool help = false;  ///< print the usage and exit
  /// --profile[=K]: time every device step group over the last K optimizer
  /// steps (0: off) and print the top profileTop rows.
  uint64_t profileSteps = 0;
  size_t profileTop = 20;
  /// GPU: how each matmul's cuBLASLt algorithm is chosen, "timed" (the fastest of the
  /// heuristic's candidates, run while the executor is built) or "heuristic" (its first).
  std::string matmulAlgorithms = "timed";
  /// GPU: which attention runs the 16-bit attention steps, "timed" (cuDNN's fused attention
  /// where it builds and measures faster than ampc's kernels, each pass timed at start),
  /// "ampc" (ampc's kernels) or "cudnn" (cuDNN's wherever it builds).
  std::string attention = "timed";
  /// --summary FILE: one JSON object at the end (losses, step times,
  /// device memory); empty for none.
  std::string summaryPath;
  /// Testing aid: 1-based optimizer steps (sorted, unique) whose first micro
  /// step behaves as if a gradient had overflowed (RunOptions::
  /// injectNonFinite).
  std::vector<uint64_t> injectOverflow;
  /// --checkpoint-dir DIR: where checkpoints are written; empty for none.
  std::string checkpointDir;
  /// --checkpoint-every N: a checkpoint after every N optimizer steps (0:
  /// only at the end and when stopped by a signal).
  uint64_t checkpointEvery = 0;
  /// --keep K: the newest checkpoints kept in checkpointDir (>= 1).
  uint64_t keep = 3;
  /// --resume: "latest" (the newest valid checkpoint of checkpointDir), a
  /// directory (its newest valid checkpoint) or a checkpoint file; empty to
  /// start from step 0.
  std::string resume;
  /// --on-checkpoint-error continue: warn and train on when a checkpoint
  /// cannot be written (default: stop with status 1).
  bool continueOnCheckpointError = false;
  /// --init-from FILE: start from the weights of a safetensors file
  /// (runtime/train/Weights.h) instead of the initialisers; empty for none.
  std::string initFrom;
  /// --export-weights FILE: write the trained weights there at the end.
  std::string exportWeights;
  /// --export-dtype: "F32" (default), "BF16" or "F16".
  std::string exportDtype = "F32";
  /// --val-data FILE: held-out data for a validation loss; empty for none.
  std::string valDataPath;
  /// --eval-every N: a validation loss every N optimizer steps and at the
  /// last one.
  uint64_t evalEvery = 100;
  /// --eval-batches K: the validation loss is the mean over K fixed batches.
  uint64_t evalBatches = 20;
  /// --ema-decay D: keep an exponential moving average of the weights with
  /// decay D in (0, 1); 0 for none.
  double emaDecay = 0;
  /// --export-ema FILE: write the moving average there at the end.
  std::string exportEma;
  /// --eval-ema: the validation loss uses the moving average's weights.
  bool evalEma = false;
  /// Data parallel (runtime/train/Distributed.h, launched by mpirun/srun):
  /// --shard-optimizer splits the optimizer state over the ranks (ZeRO-1).
  bool shardOptimizer = false;
  /// --dist-timeout S: the longest wait for the other ranks, in seconds.
  double distTimeout = 300;
  /// Testing aids for data parallel runs: --inject-overflow STEP@RANK (the
  /// overflow on that rank only) and --inject-rank-failure STEP@RANK (that
  /// rank dies with SIGKILL at the start of the step), --inject-rank-hang
  /// STEP@RANK (that rank stops with SIGSTOP there, as a hung one).
  std::vector<std::pair<uint64_t, int>> injectOverflowOnRank;
  std::vector<std::pair<uint64_t, int>> injectRankFailure, injectRankHang;
  /// --inject-stop STEP@RANK: that rank gets SIGTERM in the step, as if a
  /// user or scheduler stopped it alone.
  std::vector<std::pair<uint64_t, int>> injectStop;
};

/// With loss scaling, training stops when the loss itself is not finite for
/// more than this many consecutive optimizer steps.
inline constexpr uint64_t kMaxNonFiniteLossSteps = 5;

/// A bad command line; what() is one line, without the program name.
class UsageError : public std::runtime_error {
public:
  using runtime_error::runtime_error;
};

/// Parses \p args (the arguments after the program name). Throws UsageError
/// for an unknown flag, a missing or malformed value, --steps 0,
/// --threads 0, or an --inject-overflow step that is 0 or beyond --steps.
/// `--flag=value` is accepted as well as `--flag value`.
RunnerOptions parseRunnerArguments(const std::vector<std::string> &args);

/// The options that shape a run, as a command line ("--steps 200 --seed 0
/// --device cpu --data train.bin ..."), recorded in its checkpoints.
std::string optionsLine(const RunnerOptions &options);

/// The --help text of the program called \p program.
std::string runnerUsage(const std::string &program);

/// Seconds as "m:ss" (under an hour) or "h:mm:ss", rounded down.
std::string formatDuration(double seconds);
/// A rate as "850.0", "12.3k", "4.56M" or "1.23G".
std::string formatRate(double perSecond);
/// \p value for JSON: "%.9g", or null when it is not finite.
std::string jsonNumber(double value);

/// The state after one optimizer step, as shown and logged.
struct StepRecord {
  uint64_t step = 0;  ///< 1-based
  uint64_t steps = 0; ///< the total
  double loss = 0, gradNorm = 0, learningRate = 0;
  /// Cumulative tokens (language models) or samples (others).
  uint64_t units = 0;
  bool tokens = false;         ///< units are tokens
  double elapsed = 0;          ///< seconds since training started
  double stepMilliseconds = 0; ///< this step's time (GPU: CUDA events)
  /// The plan scales its loss: the fields below are shown and logged.
  bool lossScaling = false;
  double lossScale = 0;      ///< the scale after this step's update
  bool skipped = false;      ///< this step's update was skipped
  uint64_t skippedSteps = 0; ///< skipped steps so far
  /// The device that ran the step when it is not the CPU ("cuda"): shown
  /// on the progress line and logged as "device"; "" for the CPU, whose
  /// lines and records are as they always were.
  std::string device;
  /// A validation loss was computed after this step (--val-data): its value
  /// and the best one so far, with its step.
  bool validated = false;
  double valLoss = 0, bestValLoss = 0;
  uint64_t bestValStep = 0;
};

/// A loss scale as text: "65536", "0.5", "1.1e+12".
std::string formatScale(double scale);

/// The progress line: "step 37/200 | loss 3.2145 | grad norm 0.812 | lr
/// 3.00e-04 | 12.3k tok/s | 0:05 elapsed, ETA 0:22"; with loss scaling,
/// "| scale 65536 " (and "| skipped 2 " once a step was skipped) after the
/// learning rate; on a GPU "| cuda " before the rate; after a validation,
/// "| val 3.3012 " (with " (best)" when it is the best so far) after the loss.
std::string progressLine(const StepRecord &record);
/// One JSONL object (no newline): {"step", "loss", "grad_norm", "lr",
/// ["loss_scale", "skipped",] "tokens" or "samples", "tokens_per_s" or
/// "samples_per_s", "elapsed_s", "step_ms" [, "device"] [, "val_loss",
/// "best_val_loss", "best_val_step"]}. step_ms is the
/// step's GPU time from CUDA events on a GPU, its host time on the CPU.
std::string jsonRecord(const StepRecord &record);

/// The median of \p values (0 when empty).
double median(std::vector<double> values);

/// Prints --info: the model, its parameter count, inputs, accumulation
/// steps, the training summary (which names the precision), the loss
/// scaling, parameter copies and non-finite check when the plan has them,
/// and the task.
void printModelInfo(const plan::Plan &plan, std::FILE *out);

/// Where a training run writes.
struct RunnerStreams {
  std::FILE *out = stdout; ///< start line, progress, end line, --info
  std::FILE *err = stderr; ///< errors and warnings
  /// Rewrite the progress line in place with '\r' (a terminal); otherwise
  /// print a line every max(1, steps / 20) steps and at the last.
  bool interactive = false;
};

/// Runs \p options against \p plan (the part of main after the plan is
/// loaded; --help and --device are handled by the caller but checked here
/// too). Messages are prefixed with "<program>: error: ". Returns the exit
/// status.
int runTraining(const plan::Plan &plan, const RunnerOptions &options, const std::string &program,
                const RunnerStreams &streams);

} // namespace ampc::train

#endif // AMPC_RUNTIME_TRAIN_RUNNER_H
