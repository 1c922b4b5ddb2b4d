//===- PrecisionReport.cpp - `ampc report precision` ----------------------===//

#include "compiler/report/PrecisionReport.h"
#include "compiler/lowering/PlanEmitter.h"
#include "compiler/support/Format.h"
#include "passes/OpCost.h"

#include "llvm/Support/Format.h"

using namespace mlir;
using namespace ampc::graph;
using ampc::graph::bytesPerElement;
using ampc::graph::estimateFlops;

namespace ampc {

static int64_t elementsOf(Value value) { return graph::elementsOf(value.getType()); }

PrecisionTotals precisionTotals(ModelOp model) {
  PrecisionTotals totals;
  func::FuncOp entry = model.getEntryFunction();
  int64_t accumSteps = 1;
  entry.walk([&](GradSeedOp seed) { accumSteps = seed.getAccumStepsAttr().getInt(); });
  entry.walk([&](Operation *op) {
    auto precision = op->getAttrOfType<PrecisionAttr>(graph::GraphDialect::kPrecisionAttrName);
    if (!precision)
      return;
    ++totals.ops;
    if (auto cast = llvm::dyn_cast<CastOp>(op)) {
      ++totals.casts;
      int64_t elements = elementsOf(cast.getResult());
      auto from = llvm::cast<RankedTensorType>(cast.getInput().getType()).getElementType();
      auto to = llvm::cast<RankedTensorType>(cast.getType()).getElementType();
      totals.bytesConverted +=
          accumSteps * elements * (bytesPerElement(from) + bytesPerElement(to));
      return;
    }
    double flops = estimateFlops(op);
    totals.flops += flops;
    if (!precision.getCompute().isF32())
      totals.reducedFlops += flops;
  });
  // The copies are refreshed once per optimizer step: read f32, write the reduced type.
  for (ParamCopyOp copy : model.getBodyBlock().getOps<ParamCopyOp>())
    totals.bytesConverted += copy.getTensorType().getNumElements() *
                             (4 + bytesPerElement(copy.getTensorType().getElementType()));
  return totals;
}

static std::string typeName(Type type) {
  std::string text;
  llvm::raw_string_ostream os(text);
  os << type;
  return text;
}

void printPrecisionReport(ModelOp model, llvm::raw_ostream &os) {
  auto mode = model->getAttrOfType<StringAttr>(graph::GraphDialect::kPrecisionModeAttrName);
  os << "precision of @" << model.getSymName() << " ("
     << (mode ? mode.getValue() : llvm::StringRef("fp32")) << " mode), micro step:\n";
  const char *header[] = {"op", "location", "compute", "accumulate", "storage", "rule"};
  os << llvm::format("%-20s %-30s %-8s %-10s %-8s %s\n", header[0], header[1], header[2], header[3],
                     header[4], header[5]);
  func::FuncOp entry = model.getEntryFunction();
  entry.walk([&](Operation *op) {
    auto precision = op->getAttrOfType<PrecisionAttr>(graph::GraphDialect::kPrecisionAttrName);
    if (!precision)
      return;
    std::string location = formatLocation(op->getLoc(), /*brief=*/true);
    os << llvm::format("%-20s %-30s %-8s %-10s %-8s %s\n",
                       op->getName().stripDialect().str().c_str(), location.c_str(),
                       typeName(precision.getCompute()).c_str(),
                       typeName(precision.getAccumulate()).c_str(),
                       typeName(precision.getStorage()).c_str(), precision.getRule().str().c_str());
  });
  PrecisionTotals totals = precisionTotals(model);
  int64_t copies = llvm::range_size(model.getBodyBlock().getOps<ParamCopyOp>());
  os << "\n";
  os << "ops: " << totals.ops - totals.casts << ", casts inserted: " << totals.casts
     << ", parameter copies (refreshed once per optimizer step): " << copies << "\n";
  double bytes = double(totals.bytesConverted);
  const char *unit = "B";
  for (const char *larger : {"kB", "MB", "GB"})
    if (bytes >= 1000) {
      bytes /= 1000;
      unit = larger;
    }
  os << llvm::format("bytes converted per optimizer step: %.1f %s (casts are materialised until "
                     "kernel fusion absorbs them)\n",
                     bytes, unit);
  os << llvm::format("FLOPs per micro step: %.3g, in reduced precision: %.2f%%\n", totals.flops,
                     totals.flops > 0 ? 100.0 * totals.reducedFlops / totals.flops : 0.0);
}

} // namespace ampc
