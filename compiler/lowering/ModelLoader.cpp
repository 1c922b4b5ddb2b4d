//===- ModelLoader.cpp - read a model file and prepare it for lowering ---===//
//
// The front of every verb: parse and verify, then either flatten (a forward-only plan,
// flattenModel) or run the training pipeline, whose pass order is written only in
// passes/TrainingPipeline.cpp.
//
//===----------------------------------------------------------------------===//

#include "compiler/lowering/ModelLoader.h"
#include "passes/Passes.h"
#include "runtime/plan/SafeTensors.h"

#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Support/FileUtilities.h"
#include "llvm/Support/MemoryBuffer.h"

#include <filesystem>

using namespace mlir;

namespace ampc {

void registerModelDialects(MLIRContext &context) {
  DialectRegistry registry;
  registry.insert<graph::GraphDialect, func::FuncDialect>();
  context.appendDialectRegistry(registry);
  context.loadAllAvailableDialects();
}

bool isOnnxFile(const std::string &path) {
  return llvm::StringRef(path).ends_with_insensitive(".onnx");
}

/// Reads the weights file \p model names (relative to \p path's directory) and checks it holds
/// a float tensor of the right shape for every parameter initialised #graph.given.
static LogicalResult readGivenValues(graph::ModelOp model, const std::string &path,
                                     GivenValues &given) {
  std::optional<llvm::StringRef> weights = model.getWeights();
  if (!weights)
    return success();
  const std::string file =
      (std::filesystem::path(path).parent_path() / weights->str()).lexically_normal().string();
  safetensors::File values;
  bool needed = false;
  for (auto param : model.getBodyBlock().getOps<graph::ParamOp>())
    needed |= llvm::isa<graph::GivenInitAttr>(param.getInit());
  if (!needed)
    return success();
  try {
    values = safetensors::readFile(file);
  } catch (const safetensors::Error &error) {
    return model.emitError() << error.what() << " (the weights file the model names)";
  }
  for (auto param : model.getBodyBlock().getOps<graph::ParamOp>()) {
    if (!llvm::isa<graph::GivenInitAttr>(param.getInit()))
      continue;
    const std::string name = param.getSymName().str();
    const safetensors::Tensor *tensor = values.find(name);
    if (!tensor)
      return param.emitError("parameter @")
             << name << " is initialised #graph.given, but the weights file '" << file
             << "' has no tensor '" << name << "'";
    auto shape = param.getTensorType().getShape();
    if (tensor->shape != std::vector<int64_t>(shape.begin(), shape.end()))
      return param.emitError("parameter @")
             << name << " is " << param.getType() << ", but its tensor in '" << file
             << "' has shape [" << llvm::make_range(tensor->shape.begin(), tensor->shape.end())
             << "]";
    try {
      given[name] = safetensors::toFloats(*tensor);
    } catch (const safetensors::Error &error) {
      return param.emitError("parameter @") << name << ": '" << file << "': " << error.what();
    }
  }
  return success();
}

FailureOr<LoadedModel> loadModel(const std::string &path, llvm::SourceMgr &sourceMgr,
                                 MLIRContext &context, const OnnxImportOptions &onnx) {
  if (isOnnxFile(path)) {
    auto imported = importOnnxModel(path, context, onnx);
    if (failed(imported))
      return failure();
    LoadedModel loaded;
    loaded.module = std::move(imported->module);
    loaded.model = imported->model;
    loaded.given = std::move(imported->given);
    return loaded;
  }
  std::string openError;
  auto file = openInputFile(path, &openError);
  if (!file) {
    emitError(UnknownLoc::get(&context))
        << "cannot read model file '" << path << "': " << openError;
    return failure();
  }
  sourceMgr.AddNewSourceBuffer(std::move(file), llvm::SMLoc());
  LoadedModel loaded;
  loaded.module = parseSourceFile<ModuleOp>(sourceMgr, &context);
  if (!loaded.module)
    return failure(); // The parser or the verifier has reported a located error.

  for (Operation &op : loaded.module->getBody()->getOperations()) {
    auto model = llvm::dyn_cast<graph::ModelOp>(op);
    if (!model) {
      op.emitError("a model file holds one graph.model and nothing else; found '")
          << op.getName() << "'";
      return failure();
    }
    if (loaded.model) {
      model.emitError("a model file holds exactly one graph.model; @")
          << model.getSymName() << " is a second one";
      return failure();
    }
    loaded.model = model;
  }
  if (!loaded.model) {
    emitError(FileLineColLoc::get(&context, path, 1, 1))
        << "no graph.model in the file: a model file holds one graph.model with its "
           "parameters, inputs and entry function";
    return failure();
  }
  if (failed(readGivenValues(loaded.model, path, loaded.given)))
    return failure();
  return loaded;
}

LogicalResult flattenModel(graph::ModelOp model,
                           const graph::GraphAssignPrecisionOptions *precision) {
  PassManager pm(model->getContext(), graph::ModelOp::getOperationName());
  pm.addPass(graph::createGraphInlineCalls());
  pm.addPass(graph::createGraphRaiseFusedOps());
  pm.addPass(graph::createGraphPackQkvAttention());
  if (precision)
    pm.addPass(graph::createGraphAssignPrecision(*precision));
  return pm.run(model);
}

LogicalResult runTrainingPipeline(LoadedModel &loaded, const graph::TrainingPipelineConfig &config,
                                  graph::PipelinePart part,
                                  llvm::function_ref<LogicalResult(PassManager &)> configure) {
  PassManager pm(loaded.module->getContext());
  graph::buildTrainingPipeline(pm, config, part);
  if (configure && failed(configure(pm)))
    return failure();
  return pm.run(*loaded.module);
}

} // namespace ampc
