//===- ModelLoader.cpp - read a model file and prepare it for lowering ---===//
//
// The front of every verb: parse and verify, then either flatten (a forward-only plan) or run
// the training pipeline (passes/TrainingPipeline.h); no other pass order is written here.
//
//===----------------------------------------------------------------------===//

#include "compiler/lowering/ModelLoader.h"
#include "passes/Passes.h"

#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Support/FileUtilities.h"
#include "llvm/Support/MemoryBuffer.h"

using namespace mlir;

namespace ampc {

void registerModelDialects(MLIRContext &context) {
  DialectRegistry registry;
  registry.insert<graph::GraphDialect, func::FuncDialect>();
  context.appendDialectRegistry(registry);
  context.loadAllAvailableDialects();
}

FailureOr<LoadedModel> loadModel(const std::string &path, llvm::SourceMgr &sourceMgr,
                                 MLIRContext &context) {
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
  return loaded;
}

LogicalResult flattenModel(graph::ModelOp model,
                           const graph::GraphAssignPrecisionOptions *precision) {
  PassManager pm(model->getContext(), graph::ModelOp::getOperationName());
  pm.addPass(graph::createGraphInlineCalls());
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
