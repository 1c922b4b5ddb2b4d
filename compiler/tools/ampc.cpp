//===- ampc.cpp - the ampc command-line driver -----------------------------===//
//
//   ampc verify MODEL.mlir                 parse and verify a model file, summarise it
//   ampc plan MODEL.mlir -o MODEL.plan [--train TRAINING...]
//                                          lower it to a runtime plan file
//   ampc compile MODEL.mlir -o BINARY [TRAINING...] [PRECISION...]
//                                          write a standalone training executable
//   ampc report precision MODEL.mlir [PRECISION...]
//                                          the dtypes of every op of the training step
//   ampc report memory MODEL.mlir [TRAINING...] [PRECISION...]
//                                          where the training step's memory goes
//   ampc eval MODEL.mlir|MODEL.plan [--seed N] [--input NAME=FILE]... [--precision f32|f64]
//                                          evaluate the loss on the CPU reference backend
//
// Every user mistake (a bad model file, flag or data file) ends with a one-line message or a
// located diagnostic and exit status 1.
//
//===--------------------------------------------------------------------------===//

#include "compiler/cuda/DeviceCode.h"
#include "compiler/lowering/ModelLoader.h"
#include "compiler/lowering/PlanEmitter.h"
#include "compiler/report/MemoryReport.h"
#include "compiler/report/PrecisionReport.h"
#include "compiler/report/RematReport.h"
#include "passes/TrainingPipeline.h"
#include "runtime/cpu/Executor.h"
#include "runtime/plan/Plan.h"
#include "runtime/train/Bundle.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Support/FileUtilities.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/raw_ostream.h"

#include <chrono>
#include <functional>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>
#include <vector>

using namespace ampc;

namespace {

constexpr const char *kUsage = R"(ampc: a mixed-precision training compiler

usage:
  ampc verify MODEL.mlir
      Parse and verify a model file; print a summary of its parameters and inputs.
  ampc compile MODEL.mlir -o BINARY [training options] [precision options]
      Derive the backward pass and the optimizer step and write a standalone training
      executable (the runtime plus the plan; no MLIR at run time). Run it with
      ./BINARY --steps N [--seed S] [--data FILE] [--log metrics.jsonl]; ./BINARY --help.
  ampc report precision MODEL.mlir [training options] [precision options]
      Print the dtypes every op of the training step computes, accumulates and stores in,
      the rule that decided each, and the totals (casts, bytes converted, reduced FLOPs).
  ampc report memory MODEL.mlir [training options] [precision options]
                     [--memory-budget B[,B...]] [--plot FILE.png]
      Print the training step's memory: persistent buffers by kind, the arena of each step
      function (graph-plan-memory), the peak, and the largest values live at the peak. With
      --memory-budget, what rematerialization does for each budget: the peak before and
      after, the values recomputed, the extra FLOPs, and a memory-over-time table (and a
      plot with --plot).
  ampc plan MODEL.mlir -o PLAN [--train [training options]] [precision options]
      Lower the model to a runtime plan file (docs/plan-format.md): the forward pass, or with
      --train the training step.
  ampc eval MODEL.mlir|PLAN [--seed N] [--input NAME=FILE]... [--precision f32|f64]
      Evaluate the model's loss on the CPU reference backend. Parameters are initialised from
      the seed; inputs not given with --input are drawn from the seed too (integer inputs
      uniformly over their valid ids). FILE holds the input's raw little-endian elements.

training options (compile, report, plan --train):
  --accum-steps N        micro-batches per optimizer step; each micro-batch's loss is divided
                         by N, so N micro-batches of B equal one batch of N*B (default 1)
  --optimizer NAME       adamw (default) or sgd
  --lr X                 peak learning rate (default 3e-4)
  --beta1 X, --beta2 X   AdamW moment decays (default 0.9, 0.95)
  --eps X                AdamW epsilon (default 1e-8)
  --weight-decay X       AdamW decoupled weight decay / SGD L2 penalty (default 0.1); biases
                         and norm gains are not decayed unless the model file says
                         {weight_decay = true} on the parameter
  --momentum X           SGD momentum (default 0.9)
  --clip-norm X          clip the global gradient norm (default 1.0; 0 disables)
  --schedule NAME        constant (default) or cosine, both after a linear warmup
  --warmup-steps N       linear warmup steps (default 0)
  --decay-steps N        cosine: the step where the rate reaches min-lr (default: the run's
                         --steps)
  --min-lr X             cosine: the final rate (default lr / 10)

precision options (compile, report, plan; ampc eval's --precision is the CPU compute type):
  --precision MODE       bf16 (the default, except for a forward-only plan), fp16 or fp32:
                         matmuls and attention read the reduced type and accumulate in f32;
                         softmax, norms, losses and reductions compute in f32; master weights,
                         accumulators and optimizer state are f32
  --policy FILE          move op kinds between the lists: lines 'reduced: kind, ...',
                         'fp32: ...', 'follow: ...', 'store_fp32: ...'
  --reduced-ops K,K  --fp32-ops K,K  --follow-ops K,K  --store-fp32-ops K,K
                         the same from the command line (a kind put in two lists is an error)
  --loss-scaling MODE    auto (default: dynamic for fp16, none otherwise), dynamic, none, or
                         static=SCALE
  --initial-loss-scale X the first scale (default 65536)
  --loss-scale-growth-interval N
                         finite steps before the scale doubles (default 2000)
  --loss-scale-floor X   the scale never falls below X (default 1; a warning when reached)
  --debug-nonfinite      the training binary names the first op whose result became inf/NaN

memory options (compile, plan --train, report memory):
  --memory-budget B      recompute activations in the backward pass so the whole step
                         (parameters, gradients, optimizer state, a 32 MiB matmul workspace
                         and the live values) fits B: bytes, 6GiB, 512MiB, 1.5GB, or a share
                         of the peak without remat such as 75% (graph-plan-remat)

options:
  -h, --help    show this help
)";

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
  /// Build the training step (always for compile; plan --train).
  bool train = false;
  graph::GraphBuildTrainingOptions training;
  /// Assign precision (compile and report: bf16 unless --precision says otherwise).
  bool assignPrecision = false;
  graph::GraphAssignPrecisionOptions mixedPrecision;
  graph::GraphInsertLossScalingOptions scaling;
  /// What `ampc report` prints: "precision" or "memory".
  std::string report;
  /// --memory-budget: one budget (compile, plan), or a comma-separated list (report memory).
  std::string memoryBudget;
  /// --plot FILE.png (report memory with a budget).
  std::string plot;
  /// --emit-mlir FILE (compile, plan --train): the IR the plan is lowered from.
  std::string emitMlir;
};

double parseReal(llvm::StringRef flag, llvm::StringRef text) {
  double value;
  if (text.getAsDouble(value))
    throw UsageError{flag.str() + " expects a number, got '" + text.str() + "'"};
  return value;
}

int64_t parseCount(llvm::StringRef flag, llvm::StringRef text) {
  int64_t value;
  if (text.getAsInteger(10, value))
    throw UsageError{flag.str() + " expects an integer, got '" + text.str() + "'"};
  return value;
}

/// Parses one precision or loss-scaling option; false if `arg` is not one.
bool parsePrecisionOption(llvm::StringRef arg, const std::function<llvm::StringRef()> &value,
                          Options &options) {
  if (arg == "--precision") {
    llvm::StringRef mode = value();
    if (mode != "bf16" && mode != "fp16" && mode != "fp32")
      throw UsageError{"--precision is bf16, fp16 or fp32, got '" + mode.str() + "'"};
    options.mixedPrecision.mode = mode.str();
    options.assignPrecision = true;
  } else if (arg == "--policy") {
    options.mixedPrecision.policyFile = value().str();
  } else if (arg == "--reduced-ops") {
    options.mixedPrecision.reducedOps = value().str();
  } else if (arg == "--fp32-ops") {
    options.mixedPrecision.fp32Ops = value().str();
  } else if (arg == "--follow-ops") {
    options.mixedPrecision.followOps = value().str();
  } else if (arg == "--store-fp32-ops") {
    options.mixedPrecision.storeFp32Ops = value().str();
  } else if (arg == "--loss-scaling") {
    llvm::StringRef mode = value();
    if (mode.consume_front("static=")) {
      options.scaling.mode = "static";
      options.scaling.initialScale = parseReal("--loss-scaling static=", mode);
    } else if (mode == "auto" || mode == "dynamic" || mode == "none") {
      options.scaling.mode = mode.str();
    } else {
      throw UsageError{"--loss-scaling is auto, dynamic, none or static=SCALE, got '" +
                       mode.str() + "'"};
    }
  } else if (arg == "--initial-loss-scale") {
    options.scaling.initialScale = parseReal(arg, value());
  } else if (arg == "--loss-scale-growth-interval") {
    options.scaling.growthInterval = parseCount(arg, value());
  } else if (arg == "--loss-scale-floor") {
    options.scaling.minScale = parseReal(arg, value());
  } else if (arg == "--debug-nonfinite") {
    options.scaling.debugNonfinite = true;
  } else {
    return false;
  }
  return true;
}

/// Parses one training option into `training`; false if `arg` is not one.
bool parseTrainingOption(llvm::StringRef arg, const std::function<llvm::StringRef()> &value,
                         graph::GraphBuildTrainingOptions &training) {
  if (arg == "--accum-steps")
    training.accumSteps = parseCount(arg, value());
  else if (arg == "--optimizer")
    training.optimizer = value().str();
  else if (arg == "--lr")
    training.lr = parseReal(arg, value());
  else if (arg == "--beta1")
    training.beta1 = parseReal(arg, value());
  else if (arg == "--beta2")
    training.beta2 = parseReal(arg, value());
  else if (arg == "--eps")
    training.eps = parseReal(arg, value());
  else if (arg == "--weight-decay")
    training.weightDecay = parseReal(arg, value());
  else if (arg == "--momentum")
    training.momentum = parseReal(arg, value());
  else if (arg == "--clip-norm")
    training.clipNorm = parseReal(arg, value());
  else if (arg == "--schedule")
    training.schedule = value().str();
  else if (arg == "--warmup-steps")
    training.warmupSteps = parseCount(arg, value());
  else if (arg == "--decay-steps")
    training.decaySteps = parseCount(arg, value());
  else if (arg == "--min-lr")
    training.minLr = parseReal(arg, value());
  else
    return false;
  return true;
}

uint64_t parseSeed(llvm::StringRef text) {
  uint64_t seed;
  if (text.getAsInteger(10, seed))
    throw UsageError{"--seed expects a non-negative integer, got '" + text.str() + "'"};
  return seed;
}

Options parseArguments(int argc, char **argv) {
  Options options;
  std::vector<llvm::StringRef> args(argv + 1, argv + argc);
  if (args.empty())
    throw UsageError{"no command given; try 'ampc --help'"};
  options.verb = args[0].str();
  if (options.verb != "verify" && options.verb != "plan" && options.verb != "eval" &&
      options.verb != "compile" && options.verb != "report")
    throw UsageError{"unknown command '" + options.verb +
                     "'; the commands are verify, plan, eval, compile and report (see 'ampc "
                     "--help')"};
  size_t first = 1;
  if (options.verb == "report") {
    if (args.size() < 2 || (args[1] != "precision" && args[1] != "memory"))
      throw UsageError{"'ampc report' needs what to report: 'ampc report precision "
                       "MODEL.mlir' or 'ampc report memory MODEL.mlir'"};
    options.report = args[1].str();
    first = 2;
  }
  options.train = options.verb == "compile" || options.verb == "report";
  options.assignPrecision = options.train;
  bool trainingFlagSeen = false;
  for (size_t i = first; i < args.size(); ++i) {
    llvm::StringRef arg = args[i];
    auto value = [&]() -> llvm::StringRef {
      if (i + 1 >= args.size())
        throw UsageError{arg.str() + " needs a value"};
      return args[++i];
    };
    if (arg == "-o" && (options.verb == "plan" || options.verb == "compile")) {
      options.output = value().str();
    } else if (arg == "--train" && options.verb == "plan") {
      options.train = true;
      options.assignPrecision = true; // bf16 unless --precision says otherwise, as compile
    } else if ((options.verb == "plan" || options.verb == "compile" ||
                options.verb == "report") &&
               parseTrainingOption(arg, value, options.training)) {
      trainingFlagSeen = options.verb == "plan";
    } else if ((options.verb == "plan" || options.verb == "compile" ||
                options.verb == "report") &&
               parsePrecisionOption(arg, value, options)) {
    } else if (arg == "--memory-budget" &&
               (options.verb == "compile" || options.verb == "plan" ||
                options.report == "memory")) {
      options.memoryBudget = value().str();
    } else if (arg == "--emit-mlir" && (options.verb == "compile" || options.verb == "plan")) {
      options.emitMlir = value().str();
    } else if (arg == "--plot" && options.report == "memory") {
      options.plot = value().str();
    } else if (arg == "--seed" && options.verb == "eval") {
      options.seed = parseSeed(value());
    } else if (arg == "--precision" && options.verb == "eval") {
      llvm::StringRef precision = value();
      if (precision == "f32")
        options.precision = cpu::Precision::F32;
      else if (precision == "f64")
        options.precision = cpu::Precision::F64;
      else
        throw UsageError{"--precision is f32 or f64, got '" + precision.str() + "'"};
    } else if (arg == "--input" && options.verb == "eval") {
      auto [name, file] = value().split('=');
      if (name.empty() || file.empty())
        throw UsageError{"--input expects NAME=FILE, got '" + args[i].str() + "'"};
      options.inputs.emplace_back(name.str(), file.str());
    } else if (arg.starts_with("-")) {
      throw UsageError{"unknown option '" + arg.str() + "' for 'ampc " + options.verb +
                       "' (see 'ampc --help')"};
    } else if (options.model.empty()) {
      options.model = arg.str();
    } else {
      throw UsageError{"unexpected argument '" + arg.str() + "': give one model file"};
    }
  }
  if (options.model.empty())
    throw UsageError{"'ampc " + options.verb + "' needs a model file"};
  if (options.verb == "plan" && options.output.empty())
    throw UsageError{"'ampc plan' needs an output file: -o PLAN"};
  if (options.verb == "compile" && options.output.empty())
    throw UsageError{"'ampc compile' needs an output file: -o BINARY"};
  if (trainingFlagSeen && !options.train)
    throw UsageError{"training options need --train with 'ampc plan'"};
  if (!options.memoryBudget.empty() && !options.train)
    throw UsageError{"--memory-budget needs --train with 'ampc plan'"};
  if (!options.memoryBudget.empty() && options.verb != "report" &&
      options.memoryBudget.find(',') != std::string::npos)
    throw UsageError{"--memory-budget takes one budget for 'ampc " + options.verb +
                     "' (a list is for 'ampc report memory')"};
  if (!options.emitMlir.empty() && !options.train)
    throw UsageError{"--emit-mlir needs --train with 'ampc plan': it writes the training step's "
                     "IR"};
  if (!options.plot.empty() && options.memoryBudget.empty())
    throw UsageError{"--plot needs --memory-budget: it draws the live memory with and without "
                     "rematerialization"};
  return options;
}

/// Number of elements of all parameters.
int64_t countParameters(const plan::Plan &compiled) {
  int64_t total = 0;
  for (const plan::Parameter &parameter : compiled.parameters)
    total += plan::numElements(compiled.buffers[parameter.buffer]);
  return total;
}

/// What the last compileModel said about the plan's GPU code, for the verbs that print it.
std::string deviceSummary;

/// The training pipeline's configuration for the driver's options.
graph::TrainingPipelineConfig pipelineConfig(const Options &options) {
  graph::TrainingPipelineConfig config;
  config.training = options.training;
  config.precision = options.mixedPrecision;
  config.scaling = options.scaling;
  config.memoryBudget = options.memoryBudget;
  return config;
}

/// Writes the module to --emit-mlir's file; false (after an error) if it cannot.
bool emitMlir(mlir::ModuleOp module, const std::string &path) {
  std::string error;
  std::unique_ptr<llvm::ToolOutputFile> file = mlir::openOutputFile(path, &error);
  if (!file) {
    llvm::errs() << "ampc: error: cannot write '" << path << "': " << error << "\n";
    return false;
  }
  module.print(file->os());
  file->os() << "\n";
  file->os().flush();
  if (file->os().has_error()) {
    llvm::errs() << "ampc: error: cannot write '" << path << "'\n";
    file->os().clear_error();
    return false;
  }
  file->keep();
  return true;
}

/// The training step of a loaded model through the training pipeline, lowered to a plan with
/// its device program.
std::optional<plan::Plan> compileTrainingStep(LoadedModel &loaded, const Options &options) {
  if (failed(runTrainingPipeline(loaded, pipelineConfig(options))))
    return std::nullopt;
  if (!options.emitMlir.empty() && !emitMlir(*loaded.module, options.emitMlir))
    return std::nullopt;
  PlanProvenance provenance;
  auto compiled = emitPlan(loaded.model, &provenance);
  if (failed(compiled))
    return std::nullopt;
  DeviceCodeResult device = attachDeviceProgram(loaded.model, *compiled, provenance);
  if (device.unsupported)
    llvm::errs() << "ampc: warning: " << device.summary << "\n";
  deviceSummary = device.unsupported ? "gpu: none (see the warning above)" : device.summary;
  if (!options.memoryBudget.empty())
    printRematSummary(loaded.model);
  return std::move(*compiled);
}

/// `ampc report`: the training pipeline without a budget, then the report of the final IR (the
/// step the device runs). The remat section decides its budgets on the step as written, before
/// rematerialization and fusion, as graph-plan-remat does.
bool reportTrainingStep(LoadedModel &loaded, const Options &options) {
  graph::TrainingPipelineConfig config = pipelineConfig(options);
  config.memoryBudget.clear(); // The report's budgets are a list, decided below.
  if (failed(runTrainingPipeline(loaded, config, graph::PipelinePart::TrainingStep)))
    return false;
  mlir::OwningOpRef<mlir::ModuleOp> beforeRemat;
  if (!options.memoryBudget.empty())
    beforeRemat = loaded.module->clone();
  if (failed(runTrainingPipeline(loaded, config, graph::PipelinePart::MemoryPlanning)))
    return false;
  if (options.report == "precision") {
    printPrecisionReport(loaded.model, llvm::outs());
    llvm::outs().flush();
    return true;
  }
  printMemoryReport(loaded.model, llvm::outs());
  llvm::outs().flush();
  if (options.memoryBudget.empty())
    return true;
  std::vector<std::string> budgets;
  llvm::SmallVector<llvm::StringRef> parts;
  llvm::StringRef(options.memoryBudget).split(parts, ',');
  for (llvm::StringRef part : parts)
    budgets.push_back(part.trim().str());
  graph::ModelOp model = *beforeRemat->getOps<graph::ModelOp>().begin();
  bool printed = printRematReport(model, budgets, options.plot, llvm::outs(), llvm::errs());
  llvm::outs().flush();
  return printed;
}

/// Parses, verifies and lowers a model file (with its training step when `options.train`);
/// diagnostics are printed with their locations.
std::optional<plan::Plan> compileModel(const std::string &path, const Options &options) {
  mlir::MLIRContext context;
  registerModelDialects(context);
  // Diagnostics point at the model file; a dump of the IR would bury them.
  context.printOpOnDiagnostic(false);
  llvm::SourceMgr sourceMgr;
  mlir::SourceMgrDiagnosticHandler handler(sourceMgr, &context);
  auto loaded = loadModel(path, sourceMgr, context);
  if (failed(loaded))
    return std::nullopt;
  if (options.train && options.verb != "report")
    return compileTrainingStep(*loaded, options);
  if (options.verb == "report")
    return reportTrainingStep(*loaded, options) ? std::optional<plan::Plan>(plan::Plan())
                                                : std::nullopt;
  if (failed(flattenModel(loaded->model,
                          options.assignPrecision ? &options.mixedPrecision : nullptr)))
    return std::nullopt;
  // A forward-only plan.
  auto compiled = emitPlan(loaded->model, nullptr);
  if (failed(compiled))
    return std::nullopt;
  return std::move(*compiled);
}

void printSummary(const plan::Plan &compiled) {
  auto plural = [](size_t n, const char *noun) {
    return std::to_string(n) + " " + noun + (n == 1 ? "" : "s");
  };
  std::printf("model @%s: %s (%lld elements), %s, %s\n", compiled.modelName.c_str(),
              plural(compiled.parameters.size(), "parameter").c_str(),
              static_cast<long long>(countParameters(compiled)),
              plural(compiled.inputs.size(), "input").c_str(),
              plural(compiled.instructions.size(), "instruction").c_str());
  for (const plan::Input &input : compiled.inputs) {
    const plan::Buffer &buffer = compiled.buffers[input.buffer];
    std::printf("  input @%s : %s %s", input.name.c_str(), plan::dtypeName(buffer.dtype),
                plan::shapeToString(buffer.shape).c_str());
    if (input.bound)
      std::printf(", ids in [0, %lld)", static_cast<long long>(input.bound));
    std::printf("\n");
  }
}

std::vector<uint8_t> readDataFile(const std::string &name, const std::string &path) {
  std::ifstream file(path, std::ios::binary);
  if (!file)
    throw UsageError{"cannot read the data file '" + path + "' given for input @" + name};
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(file), {});
}

int evaluate(const Options &options, const plan::Plan &compiled) {
  cpu::Executor executor(compiled, options.precision);
  executor.initializeParameters(options.seed);
  // Read every data file first, so a missing file fails before any other work.
  std::vector<std::pair<std::string, std::vector<uint8_t>>> given;
  for (const auto &[name, path] : options.inputs)
    given.emplace_back(name, readDataFile(name, path));
  bool allGiven = std::all_of(compiled.inputs.begin(), compiled.inputs.end(),
                              [&](const plan::Input &input) {
                                return std::any_of(given.begin(), given.end(),
                                                   [&](const auto &entry) {
                                                     return entry.first == input.name;
                                                   });
                              });
  // Random draws cover every input; the given data then replaces its inputs' draws.
  if (!allGiven)
    executor.randomizeInputs(options.seed);
  for (const auto &[name, data] : given)
    executor.setInput(name, data.data(), data.size());
  auto start = std::chrono::steady_clock::now();
  cpu::RunOptions run;
  run.seed = options.seed;
  run.keepTemporaries = false; // Only the loss is read: free activations after their last use.
  double loss = executor.run(run);
  double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("loss %.6f (seed %llu, %s, %.3f s on the CPU backend)\n", loss,
              static_cast<unsigned long long>(options.seed),
              options.precision == cpu::Precision::F64 ? "f64" : "f32", seconds);
  return 0;
}

/// argv[0], for finding the training runner next to the compiler.
std::string argv0;

int run(const Options &options) {
  bool isPlanFile = llvm::StringRef(options.model).ends_with(".plan");
  if (isPlanFile && options.verb != "eval")
    throw UsageError{"'ampc " + options.verb + "' takes a model file (.mlir), not a plan"};
  std::optional<plan::Plan> compiled;
  if (isPlanFile)
    compiled = plan::loadPlan(options.model);
  else
    compiled = compileModel(options.model, options);
  if (!compiled)
    return 1;
  if (options.verb == "verify") {
    printSummary(*compiled);
    std::printf("%s: ok\n", options.model.c_str());
    return 0;
  }
  if (options.verb == "report")
    return 0;
  if (options.verb == "compile") {
    train::writeTrainingExecutable(
        train::findRunner(argv0, AMPC_TRAIN_RUNNER_BUILD_PATH), *compiled, options.output);
    printSummary(*compiled);
    std::printf("training: %s\n", compiled->trainingSummary.c_str());
    if (!deviceSummary.empty())
      std::printf("%s\n", deviceSummary.c_str());
    std::printf("wrote %s; run it with: %s --steps 200\n", options.output.c_str(),
                llvm::StringRef(options.output).contains('/')
                    ? options.output.c_str()
                    : ("./" + options.output).c_str());
    return 0;
  }
  if (options.verb == "plan") {
    plan::savePlan(*compiled, options.output);
    std::printf("wrote %s (%zu buffers, %zu instructions)\n", options.output.c_str(),
                compiled->buffers.size(), compiled->instructions.size());
    if (!deviceSummary.empty())
      std::printf("%s\n", deviceSummary.c_str());
    return 0;
  }
  printSummary(*compiled);
  return evaluate(options, *compiled);
}

} // namespace

int main(int argc, char **argv) {
  for (int i = 1; i < argc; ++i) {
    llvm::StringRef arg = argv[i];
    if (arg == "-h" || arg == "--help") {
      std::fputs(kUsage, stdout);
      return 0;
    }
  }
  argv0 = argv[0];
  try {
    return run(parseArguments(argc, argv));
  } catch (const UsageError &error) {
    std::fprintf(stderr, "ampc: error: %s\n", error.message.c_str());
  } catch (const std::exception &error) {
    std::fprintf(stderr, "ampc: error: %s\n", error.what());
  }
  return 1;
}
