//===- ampc-opt.cpp - mlir-opt for the graph dialect ----------------------===//
//
// Parses, verifies, transforms and prints graph IR. Every pass of the pipeline is registered
// here, so the IR after any stage can be printed:
//   ampc-opt model.mlir --graph-inline-calls
// and so is the whole training pipeline with `ampc compile`'s options and defaults, which prints
// the IR `ampc compile` lowers:
//   ampc-opt model.mlir --ampc-training-pipeline="precision=fp16 memory-budget=50%"
//
//===--------------------------------------------------------------------------===//

#include "dialects/Graph/GraphDialect.h"
#include "passes/Passes.h"
#include "passes/TrainingPipeline.h"

#include "mlir/IR/DialectRegistry.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "mlir/Transforms/Passes.h"

int main(int argc, char **argv) {
  mlir::DialectRegistry registry;
  registry.insert<ampc::graph::GraphDialect, mlir::func::FuncDialect>();
  ampc::graph::registerGraphPasses();
  ampc::graph::registerTrainingPipeline();
  mlir::registerCanonicalizerPass();
  mlir::registerCSEPass();
  return mlir::asMainReturnCode(mlir::MlirOptMain(argc, argv, "ampc optimizer driver\n", registry));
}
