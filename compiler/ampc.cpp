//===- ampc.cpp - the ampc command-line driver -----------------------------===//
//
//   ampc verify MODEL.mlir                 parse and verify a model file, summarise it
//   ampc plan MODEL.mlir -o MODEL.plan     lower it to a runtime plan file
//   ampc eval MODEL.mlir|MODEL.plan [--seed N] [--input NAME=FILE]... [--precision f32|f64]
//                                          evaluate the loss on the CPU reference backend
//
// Every user mistake (a bad model file, flag or data file) ends with a one-line message or a
// located diagnostic and exit status 1.
//
//===--------------------------------------------------------------------------===//

#include "compiler/ModelLoader.h"
#include "compiler/PlanEmitter.h"
#include "runtime/cpu/Executor.h"
#include "runtime/plan/Plan.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/raw_ostream.h"

#include <chrono>
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
  ampc plan MODEL.mlir -o PLAN
      Lower the model to a runtime plan file (docs/plan-format.md).
  ampc eval MODEL.mlir|PLAN [--seed N] [--input NAME=FILE]... [--precision f32|f64]
      Evaluate the model's loss on the CPU reference backend. Parameters are initialised from
      the seed; inputs not given with --input are drawn from the seed too (integer inputs
      uniformly over their valid ids). FILE holds the input's raw little-endian elements.

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
};

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
  if (options.verb != "verify" && options.verb != "plan" && options.verb != "eval")
    throw UsageError{"unknown command '" + options.verb +
                     "'; the commands are verify, plan and eval (see 'ampc --help')"};
  for (size_t i = 1; i < args.size(); ++i) {
    llvm::StringRef arg = args[i];
    auto value = [&]() -> llvm::StringRef {
      if (i + 1 >= args.size())
        throw UsageError{arg.str() + " needs a value"};
      return args[++i];
    };
    if (arg == "-o" && options.verb == "plan") {
      options.output = value().str();
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
  return options;
}

/// Number of elements of all parameters.
int64_t countParameters(const plan::Plan &compiled) {
  int64_t total = 0;
  for (const plan::Parameter &parameter : compiled.parameters)
    total += plan::numElements(compiled.buffers[parameter.buffer]);
  return total;
}

/// Parses, verifies and lowers a model file; diagnostics are printed with their locations.
std::optional<plan::Plan> compileModel(const std::string &path) {
  mlir::MLIRContext context;
  registerModelDialects(context);
  llvm::SourceMgr sourceMgr;
  mlir::SourceMgrDiagnosticHandler handler(sourceMgr, &context);
  auto loaded = loadModel(path, sourceMgr, context);
  if (failed(loaded) || failed(flattenModel(loaded->model)))
    return std::nullopt;
  auto compiled = emitPlan(loaded->model);
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

int run(const Options &options) {
  bool isPlanFile = llvm::StringRef(options.model).ends_with(".plan");
  if (isPlanFile && options.verb != "eval")
    throw UsageError{"'ampc " + options.verb + "' takes a model file (.mlir), not a plan"};
  std::optional<plan::Plan> compiled;
  if (isPlanFile)
    compiled = plan::loadPlan(options.model);
  else
    compiled = compileModel(options.model);
  if (!compiled)
    return 1;
  if (options.verb == "verify") {
    printSummary(*compiled);
    std::printf("%s: ok\n", options.model.c_str());
    return 0;
  }
  if (options.verb == "plan") {
    plan::savePlan(*compiled, options.output);
    std::printf("wrote %s (%zu buffers, %zu instructions)\n", options.output.c_str(),
                compiled->buffers.size(), compiled->instructions.size());
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
  try {
    return run(parseArguments(argc, argv));
  } catch (const UsageError &error) {
    std::fprintf(stderr, "ampc: error: %s\n", error.message.c_str());
  } catch (const std::exception &error) {
    std::fprintf(stderr, "ampc: error: %s\n", error.what());
  }
  return 1;
}
