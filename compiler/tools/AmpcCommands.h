//===- AmpcCommands.h - what each ampc command does ------------*- C++ -*-===//
//
// ampc.cpp parses and checks the command line into Options; runCommand does the command's
// work (AmpcCommands.cpp).
//
//===--------------------------------------------------------------------------===//

#ifndef AMPC_COMPILER_TOOLS_AMPCCOMMANDS_H
#define AMPC_COMPILER_TOOLS_AMPCCOMMANDS_H

#include "compiler/onnx/OnnxImporter.h"
#include "passes/TrainingPipeline.h"
#include "runtime/cpu/Executor.h"
#include "runtime/plan/GradientBuckets.h"

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace ampc::driver {

/// A user-facing failure: printed as "ampc: error: <message>", exit status 1.
struct UsageError {
  std::string message;
};

/// Parsed command line of one verb.
struct Options {
  std::string verb;
  std::string model;
  std::string output;
  uint64_t seed = 0;
  cpu::Precision precision = cpu::Precision::F32;
  std::vector<std::pair<std::string, std::string>> inputs;
  /// ampc eval --weights FILE (safetensors); empty for the initialisers.
  std::string weights;
  /// Build the training step (always for compile; plan --train).
  bool train = false;
  /// Assign precision (compile and report: bf16 unless --precision says otherwise).
  bool assignPrecision = false;
  /// The training pipeline's options: training, precision, loss scaling and the memory budget
  /// (one for compile and plan, a comma-separated list for report memory).
  graph::TrainingPipelineConfig pipeline;
  /// What `ampc report` prints: "precision", "memory" or "time".
  std::string report;
  /// --gpu NAME (report time): the GPU the time model describes.
  std::string gpu = "h200";
  /// --plot FILE.png (report memory with a budget).
  std::string plot;
  /// --world-size N (report memory): the per-rank memory of data-parallel runs; 0 for none.
  int64_t worldSize = 0;
  /// --grad-bucket-size: the gradient buckets' size in bytes.
  uint64_t gradBucketBytes = plan::kDefaultGradientBucketBytes;
  /// --emit-mlir FILE (compile, plan --train): the IR the plan is lowered from.
  std::string emitMlir;
  /// ampc plot: the metrics logs and the image's size.
  std::vector<std::string> logs;
  int width = 1200, height = 900;
  /// How ONNX files are imported (--input-shape).
  OnnxImportOptions onnx;
  /// ampc eval --grads FILE.
  std::string grads;
  /// Whether a training plan gets its device program (not for the CPU-only gradients).
  bool deviceProgram = true;
  /// --mlir-print-op-on-diagnostic was given: diagnostics print the op they are about.
  bool printOpOnDiagnostic = false;
};

/// Runs the command \p options describe; \p argv0 locates the training runner next to the
/// compiler. Returns the exit status; UsageError for a user's mistake.
int runCommand(const Options &options, const std::string &argv0);

} // namespace ampc::driver

#endif // AMPC_COMPILER_TOOLS_AMPCCOMMANDS_H
