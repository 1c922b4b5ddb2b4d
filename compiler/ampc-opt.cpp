//===- ampc-opt.cpp - mlir-opt for the graph dialect ----------------------===//
//
// Parses, verifies, transforms and prints graph IR. Every pass of the pipeline is registered
// here, so the IR after any stage can be printed:
//   ampc-opt model.mlir --graph-inline-calls
//
//===--------------------------------------------------------------------------===//

#include "dialects/Graph/GraphDialect.h"
#include "passes/Passes.h"

#include "mlir/IR/DialectRegistry.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "mlir/Transforms/Passes.h"

int main(int argc, char **argv) {
  mlir::DialectRegistry registry;
  registry.insert<ampc::graph::GraphDialect, mlir::func::FuncDialect>();
  ampc::graph::registerGraphPasses();
  mlir::registerCanonicalizerPass();
  mlir::registerCSEPass();
  return mlir::asMainReturnCode(
      mlir::MlirOptMain(argc, argv, "ampc optimizer driver\n", registry));
}
