//===- AmpcCommands.cpp - what each ampc command does -----------------------===//
//
// The commands' work once the command line is parsed and checked (ampc.cpp): load or import the
// model, run the training pipeline, emit the plan and the training executable, print the
// reports, evaluate, import and plot.
//
//===--------------------------------------------------------------------------===//

#include "compiler/tools/AmpcCommands.h"

#include "compiler/cuda/DeviceCode.h"
#include "compiler/cuda/DeviceProgramBuilder.h"
#include "compiler/lowering/ModelLoader.h"
#include "compiler/lowering/PlanEmitter.h"
#include "compiler/onnx/OnnxImporter.h"
#include "compiler/report/MemoryReport.h"
#include "compiler/report/MetricsPlot.h"
#include "compiler/report/PrecisionReport.h"
#include "compiler/report/RematReport.h"
#include "compiler/report/TimeReport.h"
#include "compiler/support/Format.h"
#include "passes/RematAdapter.h"
#include "runtime/cpu/Executor.h"
#include "runtime/plan/GradientBuckets.h"
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
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/raw_ostream.h"

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>

using namespace ampc;

namespace ampc::driver {

namespace {

/// Number of elements of all parameters.
int64_t countParameters(const plan::Plan &compiled) {
  int64_t total = 0;
  for (const plan::Parameter &parameter : compiled.parameters)
    total += plan::numElements(compiled.buffers[parameter.buffer]);
  return total;
}

/// What the last compileModel said about the plan's GPU code, for the verbs that print it.
std::string deviceSummary;

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
  // MLIR's --mlir-* options instrument the pass manager of the pipeline.
  auto applyMlirOptions = [](mlir::PassManager &pm) -> mlir::LogicalResult {
    if (failed(mlir::applyPassManagerCLOptions(pm)))
      return mlir::failure();
    mlir::applyDefaultTimingPassManagerCLOptions(pm);
    return mlir::success();
  };
  if (failed(runTrainingPipeline(loaded, options.pipeline, graph::PipelinePart::All,
                                 applyMlirOptions)))
    return std::nullopt;
  if (!options.emitMlir.empty() && !emitMlir(*loaded.module, options.emitMlir))
    return std::nullopt;
  // A step no machine could hold is refused with its figures now, not when it runs out of
  // memory: 64 TiB is more than any one machine's memory, host or device.
  constexpr int64_t kMachineLimit = int64_t(1) << 46;
  if (const MemoryTotals totals = memoryTotals(loaded.model); totals.peak > kMachineLimit) {
    loaded.model.emitError("the training step needs ")
        << formatBytes(totals.peak) << " at its peak (persistent "
        << formatBytes(totals.persistent.total()) << ", largest arena "
        << formatBytes(std::max(totals.microStepArena, totals.optimizerStepArena))
        << "), more than any machine holds (" << formatBytes(kMachineLimit)
        << "); make the model or its micro-batch smaller "
           "(`ampc report memory` breaks it down)";
    return std::nullopt;
  }
  PlanProvenance provenance;
  auto compiled = emitPlan(loaded.model, &provenance, &loaded.given);
  if (failed(compiled))
    return std::nullopt;
  if (!options.deviceProgram)
    return std::move(*compiled);
  DeviceCodeResult device = attachDeviceProgram(loaded.model, *compiled, provenance);
  if (device.unsupported)
    llvm::errs() << "ampc: warning: " << device.summary << "\n";
  // Which gradients data parallel runs all-reduce together, and after which step group of the
  // backward pass each bucket is final.
  plan::assignGradientBuckets(*compiled, options.gradBucketBytes);
  deviceSummary = device.unsupported ? "gpu: none (see the warning above)" : device.summary;
  if (!options.pipeline.memoryBudget.empty())
    printRematSummary(loaded.model);
  return std::move(*compiled);
}

/// `ampc report time`: the whole pipeline (with --memory-budget, if given), the plan and its
/// device program (its kernels generated, not compiled), then the time model's report.
bool reportTime(LoadedModel &loaded, const Options &options) {
  const plan::GpuModel *gpu = plan::findGpuModel(options.gpu);
  if (!gpu) {
    llvm::errs() << "ampc: error: --gpu " << options.gpu << " is not a GPU the time model knows ("
                 << plan::gpuModelNames() << ")\n";
    return false;
  }
  if (failed(runTrainingPipeline(loaded, options.pipeline, graph::PipelinePart::All)))
    return false;
  PlanProvenance provenance;
  auto compiled = emitPlan(loaded.model, &provenance, &loaded.given);
  if (failed(compiled))
    return false;
  try {
    compiled->device = buildDeviceProgram(loaded.model, *compiled, provenance).program;
  } catch (const DeviceProgramUnsupported &error) {
    llvm::errs() << "ampc: error: no device program to time: " << error.what() << "\n";
    return false;
  }
  printTimeReport(*compiled, *gpu, llvm::outs());
  llvm::outs().flush();
  return true;
}

/// `ampc report`: the training pipeline without a budget, then the report of the final IR (the
/// step the device runs). The remat section decides its budgets on the step as written, before
/// rematerialization and fusion, as graph-plan-remat does.
bool reportTrainingStep(LoadedModel &loaded, const Options &options) {
  if (options.report == "time")
    return reportTime(loaded, options);
  graph::TrainingPipelineConfig config = options.pipeline;
  config.memoryBudget.clear(); // The report's budgets are a list, decided below.
  if (failed(runTrainingPipeline(loaded, config, graph::PipelinePart::TrainingStep)))
    return false;
  mlir::OwningOpRef<mlir::ModuleOp> beforeRemat;
  if (!options.pipeline.memoryBudget.empty())
    beforeRemat = loaded.module->clone();
  if (failed(runTrainingPipeline(loaded, config, graph::PipelinePart::MemoryPlanning)))
    return false;
  if (options.report == "precision") {
    printPrecisionReport(loaded.model, llvm::outs());
    llvm::outs().flush();
    return true;
  }
  printMemoryReport(loaded.model, llvm::outs());
  if (options.worldSize > 0) {
    printDataParallelMemory(loaded.model, static_cast<int>(options.worldSize), llvm::outs());
    // The gradient buckets of the plan `ampc compile` writes from this IR.
    PlanProvenance provenance;
    auto compiled = emitPlan(loaded.model, &provenance);
    if (failed(compiled))
      return false;
    attachDeviceProgram(loaded.model, *compiled, provenance);
    plan::assignGradientBuckets(*compiled, options.gradBucketBytes);
    llvm::outs() << "gradient buckets (all-reduced over the ranks as each becomes final)\n"
                 << plan::describeGradientBuckets(*compiled);
  }
  llvm::outs().flush();
  if (options.pipeline.memoryBudget.empty())
    return true;
  std::vector<std::string> budgets;
  llvm::SmallVector<llvm::StringRef> parts;
  llvm::StringRef(options.pipeline.memoryBudget).split(parts, ',');
  for (llvm::StringRef part : parts)
    budgets.push_back(part.trim().str());
  graph::ModelOp model = *beforeRemat->getOps<graph::ModelOp>().begin();
  bool printed = printRematReport(model, budgets, options.plot, llvm::outs(), llvm::errs());
  llvm::outs().flush();
  return printed;
}

/// `ampc import`: the model file and its weights beside it.
bool importModel(LoadedModel &loaded, const Options &options) {
  const std::string weights =
      std::filesystem::path(options.output).replace_extension(".safetensors").string();
  try {
    writeGivenValues(loaded.model, loaded.given, weights);
  } catch (const std::exception &error) {
    llvm::errs() << "ampc: error: " << error.what() << "\n";
    return false;
  }
  if (!emitMlir(*loaded.module, options.output))
    return false;
  size_t params = 0, inputs = 0;
  for (mlir::Operation &op : loaded.model.getBodyBlock()) {
    params += llvm::isa<graph::ParamOp>(op);
    inputs += llvm::isa<graph::InputOp>(op);
  }
  std::printf("imported %s: %zu parameter%s, %zu input%s; wrote %s and %s\n", options.model.c_str(),
              params, params == 1 ? "" : "s", inputs, inputs == 1 ? "" : "s",
              options.output.c_str(), weights.c_str());
  return true;
}

/// Parses, verifies and lowers a model file (with its training step when `options.train`);
/// diagnostics are printed with their locations.
std::optional<plan::Plan> compileModel(const std::string &path, const Options &options) {
  mlir::MLIRContext context;
  registerModelDialects(context);
  // Diagnostics point at the model file; a dump of the IR would bury them (unless
  // --mlir-print-op-on-diagnostic asks for it).
  if (!options.printOpOnDiagnostic)
    context.printOpOnDiagnostic(false);
  llvm::SourceMgr sourceMgr;
  mlir::SourceMgrDiagnosticHandler handler(sourceMgr, &context);
  auto loaded = loadModel(path, sourceMgr, context, options.onnx);
  if (failed(loaded))
    return std::nullopt;
  if (options.verb == "import")
    return importModel(*loaded, options) ? std::optional<plan::Plan>(plan::Plan()) : std::nullopt;
  if (options.train && options.verb != "report")
    return compileTrainingStep(*loaded, options);
  if (options.verb == "report")
    return reportTrainingStep(*loaded, options) ? std::optional<plan::Plan>(plan::Plan())
                                                : std::nullopt;
  if (failed(flattenModel(loaded->model,
                          options.assignPrecision ? &options.pipeline.precision : nullptr)))
    return std::nullopt;
  // A forward-only plan.
  auto compiled = emitPlan(loaded->model, nullptr, &loaded->given);
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
  if (!options.weights.empty()) {
    try {
      const train::ParameterValues values = train::readWeights(compiled, options.weights);
      for (size_t i = 0; i < compiled.parameters.size(); ++i)
        executor.setParameterValues(compiled.parameters[i].name, values[i]);
    } catch (const safetensors::Error &error) {
      throw UsageError{error.what()};
    }
  }
  // Read every data file first, so a missing file fails before any other work.
  std::vector<std::pair<std::string, std::vector<uint8_t>>> given;
  for (const auto &[name, path] : options.inputs)
    given.emplace_back(name, readDataFile(name, path));
  bool allGiven =
      std::all_of(compiled.inputs.begin(), compiled.inputs.end(), [&](const plan::Input &input) {
        return std::any_of(given.begin(), given.end(),
                           [&](const auto &entry) { return entry.first == input.name; });
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
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf(
      "loss %.6f (%s, %s, %.3f s on the CPU backend)\n", loss,
      options.weights.empty()
          ? ("seed " + std::to_string(options.seed)).c_str()
          : ("weights " + options.weights + ", seed " + std::to_string(options.seed)).c_str(),
      options.precision == cpu::Precision::F64 ? "f64" : "f32", seconds);
  return 0;
}

/// `ampc eval --grads`: the training step compiled in fp32 (one micro-batch, no loss scaling),
/// one micro step on the CPU backend, and each parameter's gradient accumulator written out.
int evaluateGradients(Options options) {
  options.train = true;
  options.verb = "plan";
  options.pipeline = graph::TrainingPipelineConfig();
  options.pipeline.precision.mode = "fp32";
  options.pipeline.training.accumSteps = 1;
  options.deviceProgram = false;
  std::optional<plan::Plan> compiled = compileModel(options.model, options);
  if (!compiled)
    return 1;
  cpu::Executor executor(*compiled, options.precision);
  executor.initializeParameters(options.seed);
  if (!options.weights.empty()) {
    try {
      const train::ParameterValues values = train::readWeights(*compiled, options.weights);
      for (size_t i = 0; i < compiled->parameters.size(); ++i)
        executor.setParameterValues(compiled->parameters[i].name, values[i]);
    } catch (const safetensors::Error &error) {
      throw UsageError{error.what()};
    }
  }
  std::vector<std::pair<std::string, std::vector<uint8_t>>> given;
  for (const auto &[name, path] : options.inputs)
    given.emplace_back(name, readDataFile(name, path));
  executor.randomizeInputs(options.seed);
  for (const auto &[name, data] : given)
    executor.setInput(name, data.data(), data.size());
  // The micro step in training mode, as a training run takes it: batch norms normalise with the
  // batch's statistics (their gradients assume it), and a dropout draws its mask from the seed.
  cpu::RunOptions run;
  run.seed = options.seed;
  run.training = true;
  run.keepTemporaries = false;
  const double loss = executor.run(run);
  safetensors::File file;
  file.metadata["loss"] = std::to_string(loss);
  for (const plan::Parameter &parameter : compiled->parameters) {
    const std::string name = parameter.name + ".grad";
    uint32_t buffer;
    try {
      buffer = plan::findBuffer(*compiled, name);
    } catch (const plan::PlanError &) {
      continue; // the loss does not depend on this parameter
    }
    std::vector<double> values = executor.bufferValues(buffer);
    file.tensors.push_back(
        safetensors::fromFloats(parameter.name, compiled->buffers[parameter.buffer].shape,
                                std::vector<float>(values.begin(), values.end())));
  }
  safetensors::writeFile(options.grads, file);
  std::printf("loss %.6f (seed %llu, %s, the training step on the CPU backend); wrote the "
              "gradients of %zu parameters to %s\n",
              loss, static_cast<unsigned long long>(options.seed),
              options.precision == cpu::Precision::F64 ? "f64" : "f32", file.tensors.size(),
              options.grads.c_str());
  return 0;
}

/// `ampc plot`: every log read (the first bad one is the error), then the figure.
int plotLogs(const Options &options) {
  std::vector<MetricsRun> runs(options.logs.size());
  std::string error;
  for (size_t i = 0; i < options.logs.size(); ++i)
    if (!readMetricsLog(options.logs[i], runs[i], error))
      throw UsageError{error};
  if (!plotMetrics(runs, options.output, options.width, options.height, error))
    throw UsageError{"cannot write the plot '" + options.output + "': " + error};
  size_t steps = 0;
  for (const MetricsRun &run : runs)
    steps = std::max(steps, run.points("loss").size());
  std::printf("wrote %s (%dx%d): %zu run%s, up to %zu steps\n", options.output.c_str(),
              options.width, options.height, runs.size(), runs.size() == 1 ? "" : "s", steps);
  return 0;
}

} // namespace

int runCommand(const Options &options, const std::string &argv0) {
  if (options.verb == "plot")
    return plotLogs(options);
  bool isPlanFile = llvm::StringRef(options.model).ends_with(".plan");
  if (isPlanFile && options.verb != "eval")
    throw UsageError{"'ampc " + options.verb + "' takes a model file (.mlir), not a plan"};
  if (options.verb == "eval" && !options.grads.empty())
    return evaluateGradients(options);
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
  if (options.verb == "report" || options.verb == "import")
    return 0;
  if (options.verb == "compile") {
    train::writeTrainingExecutable(train::findRunner(argv0, AMPC_TRAIN_RUNNER_BUILD_PATH),
                                   *compiled, options.output);
    printSummary(*compiled);
    std::printf("training: %s\n", compiled->trainingSummary.c_str());
    if (!deviceSummary.empty())
      std::printf("%s\n", deviceSummary.c_str());
    std::printf("wrote %s; run it with: %s --steps 200\n", options.output.c_str(),
                llvm::StringRef(options.output).contains('/') ? options.output.c_str()
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

} // namespace ampc::driver
