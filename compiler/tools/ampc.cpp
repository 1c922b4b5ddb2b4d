//===- ampc.cpp - the ampc command-line driver -----------------------------===//
//
//   ampc verify MODEL.mlir                 parse and verify a model file, summarise it
//   ampc plan MODEL.mlir -o PLAN [--train [TRAINING...]] [PRECISION...]
//                                          lower it to a runtime plan file
//   ampc compile MODEL.mlir -o BINARY [TRAINING...] [PRECISION...] [MLIR...]
//                                          write a standalone training executable
//   ampc report precision MODEL.mlir [TRAINING...] [PRECISION...]
//                                          the dtypes of every op of the training step
//   ampc report memory MODEL.mlir [TRAINING...] [PRECISION...] [--memory-budget B,...]
//                                          where the training step's memory goes
//   ampc report time MODEL.mlir [TRAINING...] [PRECISION...] [--gpu NAME]
//                                          the device step's predicted time on a GPU
//   ampc eval MODEL.mlir|MODEL.plan [--seed N] [--weights FILE] [--input NAME=FILE]...
//             [--precision f32|f64] [--grads FILE.safetensors]
//                                          evaluate the loss (and gradients) on the CPU backend
//   ampc import MODEL.onnx -o MODEL.mlir [--input-shape NAME=DIMS]...
//                                          an ONNX model as a graph model and its weights
//
// Every command that reads a model also takes an ONNX file (.onnx), imported on the fly.
//   ampc plot METRICS.jsonl... -o FILE.png|FILE.svg [--size WxH]
//                                          draw training metrics logs against the step
//
// The command line is llvm::cl's: one cl::SubCommand per verb, every option declared once with
// the verbs that take it (cl::sub) and its help category, so `ampc --help` and
// `ampc COMMAND --help` come from the declarations. The training pipeline's flags carry the names
// of its pass options (passes/TrainingPipeline.h) and write them in place. `ampc compile` and
// `ampc plan --train` also take MLIR's pass-manager, context and printer options
// (--mlir-timing, --mlir-print-ir-after-all, --mlir-pass-pipeline-crash-reproducer, ...).
//
// Every user mistake (a bad model file, flag or data file) ends with a one-line message or a
// located diagnostic and exit status 1.
//
// This file is the command line: its options, their checks and the help. What each command
// then does is in AmpcCommands.cpp.
//
//===--------------------------------------------------------------------------===//

#include "compiler/lowering/ModelLoader.h"
#include "compiler/lowering/PlanEmitter.h"
#include "compiler/onnx/OnnxImporter.h"
#include "compiler/report/MemoryReport.h"
#include "compiler/report/MetricsPlot.h"
#include "compiler/report/PrecisionReport.h"
#include "compiler/report/RematReport.h"
#include "compiler/tools/AmpcCommands.h"
#include "compiler/tools/OptionParsers.h"
#include "passes/RematAdapter.h"
#include "passes/TrainingPipeline.h"
#include "runtime/cpu/Executor.h"
#include "runtime/plan/GradientBuckets.h"
#include "runtime/plan/Plan.h"
#include "runtime/plan/SafeTensors.h"
#include "runtime/train/Bundle.h"
#include "runtime/train/Weights.h"

#include "mlir/IR/AsmState.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Support/FileUtilities.h"
#include "mlir/Support/Timing.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Config/llvm-config.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/raw_ostream.h"

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>
#include <vector>

using namespace ampc;
using driver::Options;
using driver::runCommand;
using driver::UsageError;
using namespace ampc::driver::parsers;
namespace cl = llvm::cl;

namespace {

//===----------------------------------------------------------------------===//
// Commands
//===----------------------------------------------------------------------===//

// Each command's one-line description (`ampc --help` lists them); overview() adds the details
// to the command's own help.
cl::SubCommand verifyCommand("verify", "Parse and verify a model file; summarise its parameters "
                                       "and inputs");
cl::SubCommand planCommand("plan", "Lower a model to a runtime plan file: the forward pass, or "
                                   "with --train the training step");
cl::SubCommand compileCommand("compile", "Write a standalone training executable: the runtime "
                                         "and the plan of the training step");
cl::SubCommand reportCommand("report", "Print the precision of every op of the training step, "
                                       "or where its memory goes");
cl::SubCommand evalCommand("eval", "Evaluate a model's loss on the CPU reference backend");
cl::SubCommand plotCommand("plot", "Draw training metrics logs (--log FILE.jsonl): loss, learning "
                                   "rate, gradient norm, loss scale, throughput");
cl::SubCommand importCommand("import", "Import an ONNX model: write it as a graph model and its "
                                       "initial weights as a safetensors file beside it");

/// Every command, in the order the messages name them.
cl::SubCommand *const commands[] = {&verifyCommand, &planCommand, &evalCommand,  &compileCommand,
                                    &reportCommand, &plotCommand, &importCommand};

cl::SubCommandGroup allCommands({&verifyCommand, &planCommand, &compileCommand, &reportCommand,
                                 &evalCommand, &plotCommand, &importCommand});
/// The commands that read a model file (.mlir or .onnx) as their one positional argument.
cl::SubCommandGroup modelCommands({&verifyCommand, &planCommand, &compileCommand, &importCommand});
/// The commands that can read an ONNX file (--input-shape).
cl::SubCommandGroup onnxCommands({&verifyCommand, &planCommand, &compileCommand, &reportCommand,
                                  &evalCommand, &importCommand});
/// The commands that write an output file (-o).
cl::SubCommandGroup outputCommands({&planCommand, &compileCommand, &plotCommand, &importCommand});
/// The commands that lower a model and can write the IR they lower (--emit-mlir).
cl::SubCommandGroup loweringCommands({&planCommand, &compileCommand});
/// The commands that take the training pipeline's options: plan (with --train), compile and
/// report (--memory-budget: report memory).
cl::SubCommandGroup pipelineCommands({&planCommand, &compileCommand, &reportCommand});

//===----------------------------------------------------------------------===//
// Options
//===----------------------------------------------------------------------===//

cl::OptionCategory outputCategory("Output options");
cl::OptionCategory trainingCategory(
    "Training options",
    "Fixed at compile time. The names are the training pipeline's options (ampc-opt\n"
    "--ampc-training-pipeline=\"lr=1e-3 ...\"); 'ampc plan' takes them with --train.");
cl::OptionCategory precisionCategory(
    "Precision options",
    "bf16 is the default of 'ampc compile', 'ampc report' and 'ampc plan --train'; a forward\n"
    "plan is assigned a precision only when --precision is given.");
cl::OptionCategory memoryCategory("Memory options");
cl::OptionCategory evalCategory("Evaluation options");
cl::OptionCategory plotCategory("Plot options");
cl::OptionCategory onnxCategory("ONNX options", "For a model given as an ONNX file (.onnx).");
cl::OptionCategory mlirCategory(
    "MLIR options",
    "The instrumentation of the pass manager that runs the training pipeline ('ampc plan':\n"
    "with --train), and MLIR's context and IR printing options.");

/// What the pipeline's flags set: its pass options, with the passes' defaults.
graph::TrainingPipelineConfig pipeline;

// Arguments that are not options. A command's positional list holds the model file (and for
// `ampc report` what to report); the sink holds what no option of the command matched, so
// the driver names the mistake (and the command it belongs to) in its own words.
cl::list<std::string> modelArguments(cl::Positional, cl::sub(modelCommands),
                                     cl::desc("MODEL.mlir|MODEL.onnx"));
cl::list<std::string> reportArguments(cl::Positional, cl::sub(reportCommand),
                                      cl::desc("precision|memory MODEL.mlir"));
cl::list<std::string> evalArguments(cl::Positional, cl::sub(evalCommand),
                                    cl::desc("MODEL.mlir|PLAN"));
cl::list<std::string> plotArguments(cl::Positional, cl::sub(plotCommand),
                                    cl::desc("METRICS.jsonl..."));
cl::list<std::string> unknownArguments(cl::Sink, cl::sub(cl::SubCommand::getTopLevel()),
                                       cl::sub(allCommands));

/// The options, by the names of their flags.
namespace flags {

// Output.
cl::opt<std::string> output("o", cl::sub(outputCommands), cl::cat(outputCategory),
                            cl::value_desc("FILE"),
                            cl::desc("The plan (plan), the training executable (compile), the "
                                     "plot, .png or .svg (plot), or the model file (import)"));
cl::opt<bool, false, FlagParser>
    train("train", cl::sub(planCommand), cl::cat(outputCategory),
          cl::desc("Lower the training step rather than the forward pass (bf16 unless "
                   "--precision says otherwise, as compile)"));
cl::opt<std::string> emitMlir("emit-mlir", cl::sub(loweringCommands), cl::cat(outputCategory),
                              cl::value_desc("FILE"),
                              cl::desc("Also write the IR of the training step the plan is "
                                       "lowered from (plan: with --train)"));

// Training: graph-build-training.
cl::opt<int64_t, true, CountParser> accumSteps(
    "accum-steps", cl::location(pipeline.training.accumSteps), cl::sub(pipelineCommands),
    cl::cat(trainingCategory), cl::value_desc("N"),
    cl::desc("Micro-batches per optimizer step; each micro-batch's loss is divided by N,\n"
             "so N micro-batches of B equal one batch of N*B (default 1)"));
cl::opt<std::string, true> optimizer("optimizer", cl::location(pipeline.training.optimizer),
                                     cl::sub(pipelineCommands), cl::cat(trainingCategory),
                                     cl::value_desc("adamw|sgd"),
                                     cl::desc("The optimizer (default adamw)"));
cl::opt<double, true, RealParser> lr("lr", cl::location(pipeline.training.lr),
                                     cl::sub(pipelineCommands), cl::cat(trainingCategory),
                                     cl::value_desc("X"),
                                     cl::desc("Peak learning rate (default 3e-4)"));
cl::opt<double, true, RealParser> beta1("beta1", cl::location(pipeline.training.beta1),
                                        cl::sub(pipelineCommands), cl::cat(trainingCategory),
                                        cl::value_desc("X"),
                                        cl::desc("AdamW first-moment decay (default 0.9)"));
cl::opt<double, true, RealParser> beta2("beta2", cl::location(pipeline.training.beta2),
                                        cl::sub(pipelineCommands), cl::cat(trainingCategory),
                                        cl::value_desc("X"),
                                        cl::desc("AdamW second-moment decay (default 0.95)"));
cl::opt<double, true, RealParser> eps("eps", cl::location(pipeline.training.eps),
                                      cl::sub(pipelineCommands), cl::cat(trainingCategory),
                                      cl::value_desc("X"),
                                      cl::desc("AdamW epsilon (default 1e-8)"));
cl::opt<double, true, RealParser> weightDecay(
    "weight-decay", cl::location(pipeline.training.weightDecay), cl::sub(pipelineCommands),
    cl::cat(trainingCategory), cl::value_desc("X"),
    cl::desc("AdamW decoupled weight decay / SGD L2 penalty (default 0.1); biases and norm\n"
             "gains are not decayed unless the model says {weight_decay = true}"));
cl::opt<double, true, RealParser> momentum("momentum", cl::location(pipeline.training.momentum),
                                           cl::sub(pipelineCommands), cl::cat(trainingCategory),
                                           cl::value_desc("X"),
                                           cl::desc("SGD momentum (default 0.9)"));
cl::opt<double, true, RealParser>
    clipNorm("clip-norm", cl::location(pipeline.training.clipNorm), cl::sub(pipelineCommands),
             cl::cat(trainingCategory), cl::value_desc("X"),
             cl::desc("Clip the global gradient norm (default 1.0; 0 disables)"));
cl::opt<std::string, true>
    schedule("schedule", cl::location(pipeline.training.schedule), cl::sub(pipelineCommands),
             cl::cat(trainingCategory), cl::value_desc("constant|cosine"),
             cl::desc("The learning-rate schedule after the warmup (default constant)"));
cl::opt<int64_t, true, CountParser> warmupSteps("warmup-steps",
                                                cl::location(pipeline.training.warmupSteps),
                                                cl::sub(pipelineCommands),
                                                cl::cat(trainingCategory), cl::value_desc("N"),
                                                cl::desc("Linear warmup steps (default 0)"));
cl::opt<int64_t, true, CountParser> decaySteps(
    "decay-steps", cl::location(pipeline.training.decaySteps), cl::sub(pipelineCommands),
    cl::cat(trainingCategory), cl::value_desc("N"),
    cl::desc("Cosine: the step where the rate reaches min-lr (default: the run's --steps)"));
cl::opt<double, true, RealParser> minLr("min-lr", cl::location(pipeline.training.minLr),
                                        cl::sub(pipelineCommands), cl::cat(trainingCategory),
                                        cl::value_desc("X"),
                                        cl::desc("Cosine: the final rate (default lr / 10)"));

// Precision: graph-assign-precision.
cl::opt<std::string, true, PrecisionModeParser> precision(
    "precision", cl::location(pipeline.precision.mode), cl::sub(pipelineCommands),
    cl::cat(precisionCategory), cl::value_desc("bf16|fp16|fp32"),
    cl::desc("Matmuls and attention read the reduced type and accumulate in f32; softmax,\n"
             "norms, losses and reductions compute in f32; master weights, accumulators and\n"
             "optimizer state are f32 (default bf16)"));
cl::opt<std::string, true>
    policy("policy", cl::location(pipeline.precision.policyFile), cl::sub(pipelineCommands),
           cl::cat(precisionCategory), cl::value_desc("FILE"),
           cl::desc("Move op kinds between the lists: lines 'reduced: kind, ...', 'fp32: ...',\n"
                    "'follow: ...', 'store_fp32: ...' (a kind put in two lists is an error)"));
cl::opt<std::string, true> reducedOps("reduced-ops", cl::location(pipeline.precision.reducedOps),
                                      cl::sub(pipelineCommands), cl::cat(precisionCategory),
                                      cl::value_desc("K,K"),
                                      cl::desc("Op kinds to run in the reduced type"));
cl::opt<std::string, true> fp32Ops("fp32-ops", cl::location(pipeline.precision.fp32Ops),
                                   cl::sub(pipelineCommands), cl::cat(precisionCategory),
                                   cl::value_desc("K,K"), cl::desc("Op kinds to run in f32"));
cl::opt<std::string, true> followOps("follow-ops", cl::location(pipeline.precision.followOps),
                                     cl::sub(pipelineCommands), cl::cat(precisionCategory),
                                     cl::value_desc("K,K"),
                                     cl::desc("Op kinds that run in the type of their inputs"));
cl::opt<std::string, true> storeFp32Ops("store-fp32-ops",
                                        cl::location(pipeline.precision.storeFp32Ops),
                                        cl::sub(pipelineCommands), cl::cat(precisionCategory),
                                        cl::value_desc("K,K"),
                                        cl::desc("Op kinds whose results are stored in f32"));

// Precision: graph-insert-loss-scaling.

/// auto, dynamic, none, or static=SCALE, which is static with SCALE as the initial scale (as
/// --initial-loss-scale; the later of the two wins).
struct LossScalingParser : cl::parser<std::string> {
  using cl::parser<std::string>::parser;
  bool parse(cl::Option &, llvm::StringRef name, llvm::StringRef text, std::string &value) {
    llvm::StringRef mode = text;
    if (mode.consume_front("static=")) {
      if (mode.getAsDouble(pipeline.scaling.initialScale))
        return usageError("--" + name + " static= expects a number, got '" + mode + "'");
      value = "static";
    } else if (mode == "auto" || mode == "dynamic" || mode == "none") {
      value = mode.str();
    } else {
      return usageError("--" + name + " is auto, dynamic, none or static=SCALE, got '" + text +
                        "'");
    }
    return false;
  }
};

cl::opt<std::string, true, LossScalingParser>
    lossScaling("loss-scaling", cl::location(pipeline.scaling.mode), cl::sub(pipelineCommands),
                cl::cat(precisionCategory), cl::value_desc("auto|dynamic|none|static=SCALE"),
                cl::desc("Loss scaling (default auto: dynamic for fp16, none otherwise)"));
cl::opt<double, true, RealParser> initialLossScale("initial-loss-scale",
                                                   cl::location(pipeline.scaling.initialScale),
                                                   cl::sub(pipelineCommands),
                                                   cl::cat(precisionCategory), cl::value_desc("X"),
                                                   cl::desc("The first scale (default 65536)"));
cl::opt<int64_t, true, CountParser> lossScaleGrowthInterval(
    "loss-scale-growth-interval", cl::location(pipeline.scaling.growthInterval),
    cl::sub(pipelineCommands), cl::cat(precisionCategory), cl::value_desc("N"),
    cl::desc("Finite steps before the scale grows (default 2000)"));
cl::opt<double, true, ScaleFactorParser> lossScaleGrowthFactor(
    "loss-scale-growth-factor", cl::location(pipeline.scaling.growthFactor),
    cl::sub(pipelineCommands), cl::cat(precisionCategory), cl::value_desc("X"),
    cl::desc("The scale is multiplied by X after the growth interval (default 2)"));
cl::opt<double, true, ScaleFactorParser> lossScaleBackoffFactor(
    "loss-scale-backoff-factor", cl::location(pipeline.scaling.backoffFactor),
    cl::sub(pipelineCommands), cl::cat(precisionCategory), cl::value_desc("X"),
    cl::desc("The scale is multiplied by X after an overflow (default 0.5)"));
cl::opt<double, true, RealParser>
    lossScaleFloor("loss-scale-floor", cl::location(pipeline.scaling.minScale),
                   cl::sub(pipelineCommands), cl::cat(precisionCategory), cl::value_desc("X"),
                   cl::desc("The scale never falls below X (default 1; a warning when reached)"));
cl::opt<bool, true, FlagParser>
    debugNonfinite("debug-nonfinite", cl::location(pipeline.scaling.debugNonfinite),
                   cl::sub(pipelineCommands), cl::cat(precisionCategory),
                   cl::desc("The training binary names the first op whose result became inf/NaN"));

// Memory: graph-chunk-classifier.
cl::opt<std::string, true> classifierChunk(
    "classifier-chunk", cl::location(pipeline.classifier.chunkBytes), cl::sub(pipelineCommands),
    cl::cat(memoryCategory), cl::value_desc("B"),
    cl::desc("Compute the output head and its cross-entropy (and their gradients) in chunks of\n"
             "rows when the logits would exceed B bytes in f32 (default 256MiB; 0 keeps them\n"
             "whole), so the whole logits never exist"));

// Memory: graph-plan-remat.
cl::opt<std::string, true> memoryBudget(
    "memory-budget", cl::location(pipeline.memoryBudget), cl::sub(pipelineCommands),
    cl::cat(memoryCategory), cl::value_desc("B"),
    cl::desc("Recompute activations in the backward pass so the whole step (parameters,\n"
             "gradients, optimizer state, a 32 MiB matmul workspace and the live values)\n"
             "fits B: bytes, 6GiB, 512MiB, 1.5GB, or a share of the peak without remat such\n"
             "as 75%. 'report memory' takes a list B,B,... and shows each plan"));
cl::opt<std::string> plot("plot", cl::sub(reportCommand), cl::cat(memoryCategory),
                          cl::value_desc("FILE.png"),
                          cl::desc("report memory with --memory-budget: plot the memory over "
                                   "time with and without remat"));

cl::opt<std::string> gradBucketSize(
    "grad-bucket-size", cl::sub(pipelineCommands), cl::cat(trainingCategory),
    cl::value_desc("SIZE"), cl::init("25MiB"),
    cl::desc("Data parallel runs on GPUs all-reduce the gradients in buckets of about SIZE\n"
             "(bytes, 4MiB, 25MiB; default 25MiB), each as soon as the backward pass has\n"
             "finished it"));
cl::opt<std::string> gpu("gpu", cl::sub(reportCommand), cl::cat(memoryCategory),
                         cl::value_desc("NAME"), cl::init("h200"),
                         cl::desc("report time: the GPU whose step time is predicted (h200, "
                                  "h100; default h200)"));
cl::opt<int64_t, false, CountParser>
    worldSize("world-size", cl::sub(reportCommand), cl::cat(memoryCategory), cl::value_desc("N"),
              cl::desc("report memory: also what each of N data-parallel ranks holds, with and "
                       "without the sharded optimizer state (ZeRO-1, --shard-optimizer)"));

// Evaluation.
cl::opt<uint64_t, false, SeedParser> seed("seed", cl::sub(evalCommand), cl::cat(evalCategory),
                                          cl::value_desc("N"),
                                          cl::desc("Seed of the parameters and the drawn "
                                                   "inputs (default 0)"));
cl::list<std::string, bool, InputParser>
    inputs("input", cl::sub(evalCommand), cl::cat(evalCategory), cl::value_desc("NAME=FILE"),
           cl::desc("The raw little-endian elements of input @NAME (repeatable)"));
cl::opt<std::string>
    weights("weights", cl::sub(evalCommand), cl::cat(evalCategory), cl::value_desc("FILE"),
            cl::desc("Evaluate at the weights of a safetensors file (tensors named "
                     "as the model's parameters; a training executable's "
                     "--export-weights) instead of the initialisers"));
cl::opt<std::string, false, CpuPrecisionParser>
    evalPrecision("precision", cl::sub(evalCommand), cl::cat(evalCategory),
                  cl::value_desc("f32|f64"),
                  cl::desc("The CPU backend's compute type (default f32)"), cl::init("f32"));

cl::opt<std::string> grads("grads", cl::sub(evalCommand), cl::cat(evalCategory),
                           cl::value_desc("FILE.safetensors"),
                           cl::desc("Also compute the gradient of the loss for every parameter "
                                    "(in fp32,\nas the training step does) and write them to FILE, "
                                    "named like the parameters"));

// ONNX.
cl::list<std::string, bool, InputShapeParser>
    inputShapes("input-shape", cl::sub(onnxCommands), cl::cat(onnxCategory),
                cl::value_desc("NAME=DIMS"),
                cl::desc("The static shape of an ONNX input whose dimensions the file leaves "
                         "symbolic,\nsuch as tokens=4x16 (repeatable)"));

cl::list<std::string> constantInitializers(
    "constant-initializer", cl::sub(onnxCommands), cl::cat(onnxCategory), cl::value_desc("NAME"),
    cl::CommaSeparated,
    cl::desc("Keep these ONNX initializers constant rather than train them (buffers the loss\n"
             "depends on, such as rotary tables; repeatable or comma-separated)"));

// Plot.
cl::opt<std::string, false, SizeParser> size("size", cl::sub(plotCommand), cl::cat(plotCategory),
                                             cl::value_desc("WxH"),
                                             cl::desc("The image's size in pixels (default "
                                                      "1200x900)"),
                                             cl::init("1200x900"));

} // namespace flags

/// MLIR's options that configure the pass manager (IR printing, timing, statistics, crash
/// reproducers): the training pipeline's, so `ampc plan` takes them with --train only.
std::vector<cl::Option *> passManagerOptions;
/// All of MLIR's options the driver takes, by name.
llvm::StringMap<cl::Option *> mlirOptions;

/// Whether MLIR's option `name` is on the command line.
bool givenMlirOption(llvm::StringRef name) {
  cl::Option *option = mlirOptions.lookup(name);
  return option && option->getNumOccurrences();
}

/// The options `registerOptions` adds to llvm::cl's top level.
std::vector<cl::Option *> addedOptions(llvm::function_ref<void()> registerOptions) {
  llvm::StringMap<cl::Option *> &topLevel = cl::getRegisteredOptions();
  llvm::StringSet<> before;
  for (const auto &entry : topLevel)
    before.insert(entry.getKey());
  registerOptions();
  std::vector<cl::Option *> added;
  for (const auto &entry : topLevel)
    if (!before.contains(entry.getKey()))
      added.push_back(entry.getValue());
  return added;
}

/// Registers MLIR's pass-manager, timing, context and printer options for `ampc compile` and
/// `ampc plan`. MLIR declares them without cl::sub, so llvm::cl puts them in the top level only,
/// where no subcommand sees them; they are moved, in the MLIR category.
void registerMlirOptions() {
  passManagerOptions = addedOptions([] {
    mlir::registerPassManagerCLOptions();
    mlir::registerDefaultTimingManagerCLOptions();
  });
  std::vector<cl::Option *> all = addedOptions([] {
    mlir::registerMLIRContextCLOptions();
    mlir::registerAsmPrinterCLOptions();
  });
  all.insert(all.end(), passManagerOptions.begin(), passManagerOptions.end());
  for (cl::Option *option : all) {
    option->removeArgument();
    option->addSubCommand(compileCommand);
    option->addSubCommand(planCommand);
    option->addCategory(mlirCategory);
    option->addArgument();
    mlirOptions[option->ArgStr] = option;
  }
}

/// Hides LLVM's own options (the libraries' hundreds) from every help text.
void hideUnrelatedOptions() {
  const cl::OptionCategory *categories[] = {&outputCategory, &trainingCategory, &precisionCategory,
                                            &memoryCategory, &evalCategory,     &plotCategory,
                                            &onnxCategory,   &mlirCategory};
  cl::HideUnrelatedOptions(categories);
  for (cl::SubCommand *command : commands)
    cl::HideUnrelatedOptions(categories, *command);
}

/// The overview of `ampc --help`, or the details of a command for `ampc COMMAND --help`.
std::string overview(cl::SubCommand *command) {
  std::string text = "ampc: a mixed-precision training compiler\n";
  if (!command)
    return text + R"(
  ampc verify MODEL.mlir
  ampc plan MODEL.mlir -o PLAN [--train] [options]
  ampc compile MODEL.mlir -o BINARY [options]
  ampc report precision|memory|time MODEL.mlir [options]
  ampc eval MODEL.mlir|PLAN [--seed N] [--weights FILE] [--input NAME=FILE]...
            [--precision f32|f64]
  ampc plot METRICS.jsonl... -o FILE.png|FILE.svg [--size WxH]
  ampc import MODEL.onnx -o MODEL.mlir [--input-shape NAME=DIMS]...

Every command that reads a model takes an ONNX file (MODEL.onnx) as well.
Each command's options: ampc COMMAND --help. An option's value follows it as --flag=value or
--flag value.
)";
  if (command == &planCommand)
    return text + R"(
The plan format is docs/plan-format.md. With --train, the plan holds the training step that
'ampc compile' puts in its executable.
)";
  if (command == &compileCommand)
    return text + R"(
'ampc compile' derives the backward pass and the optimizer step and writes one executable: the
runtime plus the plan, no MLIR at run time. Run it with
  ./BINARY --steps N [--seed S] [--data FILE] [--log metrics.jsonl]   (./BINARY --help)
)";
  if (command == &reportCommand)
    return text + R"(
'ampc report precision' prints the dtypes every op of the training step computes, accumulates
and stores in, the rule that decided each, and the totals (casts, bytes converted, reduced
FLOPs). 'ampc report memory' prints the persistent buffers by kind, the arena of each step
function, the peak and the largest values live at it; with --memory-budget, what
rematerialization does for each budget (and a plot with --plot). 'ampc report time' predicts
the device step's time on a GPU (--gpu h200|h100) without one: per step group, per kind and
for the whole step, each beside its floor (bytes at a device copy's bandwidth, FLOPs at the
tensor cores' peak).
)";
  if (command == &plotCommand)
    return text + R"(
'ampc plot' reads the metrics logs training executables write with --log FILE.jsonl and draws,
against the step, in panels over one x axis: the loss (a validation loss dashed, where lines
have val_loss), the learning rate, the gradient norm, the loss scale (log axis; when a run
scales its loss) and the throughput (tokens/s or samples/s). Each log is a run in its own
colour, named in the legend by its file name.
)";
  if (command == &importCommand)
    return text + R"(
'ampc import' writes the ONNX model as a graph model (MODEL.mlir) and the initial values of its
parameters (the file's trainable initializers) beside it as MODEL.safetensors, which the model
names; compiling MODEL.mlir (or MODEL.onnx directly) starts training from those values.
)";
  if (command == &evalCommand)
    return text + R"(
Parameters are initialised from the seed; inputs not given with --input are drawn from the seed
too (integer inputs uniformly over their valid ids). FILE holds the input's raw little-endian
elements.
)";
  return text;
}

void printVersion(llvm::raw_ostream &os) {
  os << "ampc " << AMPC_VERSION << "\n  built with LLVM and MLIR " << LLVM_VERSION_STRING << "\n";
}

//===----------------------------------------------------------------------===//
// The command line checked
//===----------------------------------------------------------------------===//

/// The command argv names, as llvm::cl picks it (by the first argument), or null: the top
/// level (no command, or an unknown one).
cl::SubCommand *commandNamed(int argc, char **argv) {
  if (argc < 2)
    return nullptr;
  for (cl::SubCommand *command : commands)
    if (command->getName() == argv[1])
      return command;
  return nullptr;
}

/// "'ampc plan' and 'ampc compile'".
std::string listCommands(llvm::ArrayRef<cl::SubCommand *> list) {
  std::string text;
  for (size_t i = 0; i < list.size(); ++i) {
    if (i)
      text += i + 1 == list.size() ? " and " : ", ";
    text += "'ampc " + list[i]->getName().str() + "'";
  }
  return text;
}

/// Checks that the last argument is not an option that needs a value: llvm::cl would take the
/// next argument as the value, and at the end there is none.
void checkLastValue(cl::SubCommand &command, int argc, char **argv) {
  if (argc < 2)
    return;
  llvm::StringRef last = argv[argc - 1];
  if (!last.starts_with("-") || last.contains('='))
    return;
  auto found = cl::getRegisteredOptions(command).find(last.ltrim('-'));
  if (found != cl::getRegisteredOptions(command).end() &&
      found->second->getValueExpectedFlag() == cl::ValueRequired)
    throw UsageError{last.str() + " needs a value"};
}

/// The message for an argument no option of `command` (null: the top level) matched.
std::string unknownOption(llvm::StringRef argument, cl::SubCommand *command) {
  llvm::StringRef flag = argument.split('=').first;
  llvm::StringRef name = flag.ltrim('-');
  std::string where = command ? "'ampc " + command->getName().str() + "'" : "'ampc'";
  std::vector<cl::SubCommand *> owners;
  for (cl::SubCommand *other : commands)
    if (other != command && cl::getRegisteredOptions(*other).count(name))
      owners.push_back(other);
  if (!owners.empty() && !command)
    return flag.str() + " goes after the command: it is an option of " + listCommands(owners);
  if (!owners.empty())
    return where + " does not take " + flag.str() + ": it is an option of " + listCommands(owners);
  std::string help = command ? "ampc " + command->getName().str() + " --help" : "ampc --help";
  std::string nearest;
  unsigned distance = 3;
  for (const auto &entry :
       cl::getRegisteredOptions(command ? *command : cl::SubCommand::getTopLevel())) {
    if (entry.getValue()->getOptionHiddenFlag() != cl::NotHidden)
      continue;
    // A suggestion keeps some of what was typed: 'x' suggests nothing, not '-o'.
    unsigned edits = name.edit_distance(entry.getKey(), true, distance);
    if (edits < distance && edits < name.size()) {
      distance = edits;
      nearest = (entry.getKey().size() == 1 ? "-" : "--") + entry.getKey().str();
    }
  }
  std::string suggestion = nearest.empty() ? "" : "; did you mean '" + nearest + "'?";
  return "unknown option '" + flag.str() + "' for " + where + suggestion + " (see '" + help + "')";
}

/// The options of the command llvm::cl parsed, checked together.
Options checkedOptions(cl::SubCommand *command) {
  if (!command) {
    if (unknownArguments.empty())
      throw UsageError{"no command given; try 'ampc --help'"};
    llvm::StringRef first = unknownArguments.front();
    if (!first.starts_with("-"))
      throw UsageError{"unknown command '" + first.str() +
                       "'; the commands are verify, plan, eval, compile, report, plot and import "
                       "(see 'ampc --help')"};
    throw UsageError{unknownOption(first, nullptr)};
  }
  if (!unknownArguments.empty())
    throw UsageError{unknownOption(unknownArguments.front(), command)};

  Options options;
  options.verb = command->getName().str();
  if (command == &plotCommand) {
    options.logs.assign(plotArguments.begin(), plotArguments.end());
    if (options.logs.empty())
      throw UsageError{"'ampc plot' needs a metrics log (written by a training executable's "
                       "--log FILE.jsonl)"};
    options.output = flags::output;
    llvm::StringRef output = options.output;
    if (output.empty())
      throw UsageError{"'ampc plot' needs an output file: -o FILE.png or -o FILE.svg"};
    if (!output.ends_with_insensitive(".png") && !output.ends_with_insensitive(".svg"))
      throw UsageError{"'ampc plot' writes .png or .svg files, got '" + options.output + "'"};
    auto [width, height] = llvm::StringRef(flags::size).split('x');
    width.getAsInteger(10, options.width);
    height.getAsInteger(10, options.height);
    return options;
  }
  std::vector<std::string> positional;
  if (command == &reportCommand) {
    if (reportArguments.empty() ||
        (reportArguments.front() != "precision" && reportArguments.front() != "memory" &&
         reportArguments.front() != "time"))
      throw UsageError{"'ampc report' needs what to report: 'ampc report precision "
                       "MODEL.mlir', 'ampc report memory MODEL.mlir' or 'ampc report time "
                       "MODEL.mlir'"};
    options.report = reportArguments.front();
    if (options.report != "memory" && flags::worldSize.getNumOccurrences())
      throw UsageError{"--world-size is for 'ampc report memory'"};
    if (options.report != "time" && flags::gpu.getNumOccurrences())
      throw UsageError{"--gpu is for 'ampc report time'"};
    options.gpu = flags::gpu;
    positional.assign(reportArguments.begin() + 1, reportArguments.end());
  } else if (command == &evalCommand) {
    positional.assign(evalArguments.begin(), evalArguments.end());
  } else {
    positional.assign(modelArguments.begin(), modelArguments.end());
  }
  if (positional.empty())
    throw UsageError{"'ampc " + options.verb + "' needs a model file"};
  if (positional.size() > 1)
    throw UsageError{"unexpected argument '" + positional[1] + "': give one model file"};
  options.model = positional.front();

  options.output = flags::output;
  if (command == &planCommand && options.output.empty())
    throw UsageError{"'ampc plan' needs an output file: -o PLAN"};
  if (command == &compileCommand && options.output.empty())
    throw UsageError{"'ampc compile' needs an output file: -o BINARY"};
  if (command == &importCommand) {
    if (!isOnnxFile(options.model))
      throw UsageError{"'ampc import' reads an ONNX file (.onnx), got '" + options.model + "'"};
    if (options.output.empty())
      throw UsageError{"'ampc import' needs an output file: -o MODEL.mlir"};
    if (!llvm::StringRef(options.output).ends_with(".mlir"))
      throw UsageError{"'ampc import' writes a model file (.mlir), got '" + options.output + "'"};
    options.onnx.weightsName =
        std::filesystem::path(options.output).replace_extension(".safetensors").filename();
  }
  for (llvm::StringRef shape : flags::inputShapes) {
    auto [name, dims] = shape.split('=');
    if (!isOnnxFile(options.model))
      throw UsageError{"--input-shape is for ONNX models (.onnx); '" + options.model +
                       "' states its shapes"};
    if (options.onnx.inputShapes.count(name.str()))
      throw UsageError{"--input-shape gives '" + name.str() + "' twice"};
    parseDims(dims.str(), options.onnx.inputShapes[name.str()]);
  }
  for (const std::string &name : flags::constantInitializers) {
    if (!isOnnxFile(options.model))
      throw UsageError{"--constant-initializer is for ONNX models (.onnx)"};
    options.onnx.constants.insert(name);
  }
  options.grads = flags::grads;
  if (!options.grads.empty() && llvm::StringRef(options.model).ends_with(".plan"))
    throw UsageError{"--grads needs a model file (.mlir or .onnx): it compiles the training "
                     "step"};

  options.train = command == &compileCommand || command == &reportCommand || flags::train;
  // A forward plan is assigned a precision only when one is asked for.
  options.assignPrecision = options.train || flags::precision.getNumOccurrences();
  options.pipeline = pipeline;
  options.emitMlir = flags::emitMlir;
  options.plot = flags::plot;
  options.worldSize = flags::worldSize;
  {
    std::optional<graph::ByteSize> size = graph::parseByteSize(flags::gradBucketSize);
    if (!size || size->percent || size->value < 1)
      throw UsageError{"--grad-bucket-size expects a size in bytes (4MiB, 25MiB, 1000000), got '" +
                       flags::gradBucketSize + "'"};
    options.gradBucketBytes = static_cast<uint64_t>(size->value);
  }
  if (flags::worldSize.getNumOccurrences() && (options.worldSize < 1 || options.worldSize > 65536))
    throw UsageError{"--world-size must be between 1 and 65536, got " +
                     std::to_string(options.worldSize)};
  if (command == &planCommand && !flags::train) {
    for (const auto &entry : cl::getRegisteredOptions(planCommand))
      if (entry.getValue()->getNumOccurrences() &&
          llvm::is_contained(entry.getValue()->Categories, &trainingCategory))
        throw UsageError{"training options need --train with 'ampc plan'"};
    if (flags::memoryBudget.getNumOccurrences())
      throw UsageError{"--memory-budget needs --train with 'ampc plan'"};
    if (flags::emitMlir.getNumOccurrences())
      throw UsageError{"--emit-mlir needs --train with 'ampc plan': it writes the training "
                       "step's IR"};
    for (cl::Option *option : passManagerOptions)
      if (option->getNumOccurrences())
        throw UsageError{"--" + option->ArgStr.str() +
                         " needs --train with 'ampc plan': it instruments the training "
                         "pipeline"};
  }
  // MLIR makes this a fatal error when the pass manager is set up.
  if (givenMlirOption("mlir-pass-pipeline-local-reproducer") &&
      !givenMlirOption("mlir-disable-threading"))
    throw UsageError{"--mlir-pass-pipeline-local-reproducer needs --mlir-disable-threading"};
  if (command == &reportCommand && options.report == "time" &&
      (llvm::StringRef(pipeline.memoryBudget).contains(',') || flags::plot.getNumOccurrences()))
    throw UsageError{std::string(flags::plot.getNumOccurrences() ? "--plot is"
                                                                 : "a list of budgets is") +
                     " for 'ampc report memory'; 'ampc report time' takes one --memory-budget"};
  if (command == &reportCommand && options.report == "precision" &&
      (flags::memoryBudget.getNumOccurrences() || flags::plot.getNumOccurrences()))
    throw UsageError{
        std::string(flags::memoryBudget.getNumOccurrences() ? "--memory-budget" : "--plot") +
        " is for 'ampc report memory'"};
  if (command != &reportCommand && llvm::StringRef(pipeline.memoryBudget).contains(','))
    throw UsageError{"--memory-budget takes one budget for 'ampc " + options.verb +
                     "' (a list is for 'ampc report memory')"};
  if (!options.plot.empty() && options.pipeline.memoryBudget.empty())
    throw UsageError{"--plot needs --memory-budget: it draws the live memory with and without "
                     "rematerialization"};

  options.seed = flags::seed;
  options.weights = flags::weights;
  options.precision = flags::evalPrecision == "f64" ? cpu::Precision::F64 : cpu::Precision::F32;
  for (llvm::StringRef input : flags::inputs) {
    auto [name, file] = input.split('=');
    options.inputs.emplace_back(name.str(), file.str());
  }
  options.printOpOnDiagnostic = givenMlirOption("mlir-print-op-on-diagnostic");
  return options;
}

} // namespace

int main(int argc, char **argv) {
  const std::string argv0 = argv[0];
  // Registered first, so --mlir-print-ir-after=graph-fuse and the like know the passes.
  graph::registerGraphPasses();
  registerMlirOptions();
  hideUnrelatedOptions();
  cl::SetVersionPrinter(printVersion);
  cl::SubCommand *command = commandNamed(argc, argv);
  try {
    checkLastValue(command ? *command : cl::SubCommand::getTopLevel(), argc, argv);
    // With an error stream llvm::cl reports a mistake and returns false rather than exiting
    // with its own status; --help and --version still exit here, with status 0.
    if (!cl::ParseCommandLineOptions(argc, argv, overview(command), &llvm::errs()))
      return 1;
    return runCommand(checkedOptions(command), argv0);
  } catch (const UsageError &error) {
    std::fprintf(stderr, "ampc: error: %s\n", error.message.c_str());
  } catch (const std::exception &error) {
    std::fprintf(stderr, "ampc: error: %s\n", error.what());
  }
  return 1;
}
