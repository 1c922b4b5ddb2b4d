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

/// The element count of a tensor value.
static int64_t elementsOf(Value value) { return graph::elementsOf(value.getType()); }

/// The precision report's totals over the micro step: ops that carry a precision decision,
/// the casts among them, the bytes the casts and parameter copies convert per optimizer step,
/// and the FLOPs, split by whether they are computed in reduced precision.
PrecisionTotals precisionTotals(ModelOp model) {
  PrecisionTotals totals;
  func::FuncOp entry = model.getEntryFunction();
  int64_t accumSteps = 1;
  // A cast runs once per micro step, so per optimizer step it converts accum_steps times its
  // elements (the gradient seed holds the accumulation count; forward-only models have 1).
  entry.walk([&](GradSeedOp seed) { accumSteps = seed.getAccumStepsAttr().getInt(); });
  entry.walk([&](Operation *op) {
    auto precision = op->getAttrOfType<PrecisionAttr>(graph::GraphDialect::kPrecisionAttrName);
    if (!precision)
      return;
    ++totals.ops;
    // Only ops the precision pass annotated count. A cast moves data without arithmetic: it
    // reads the source type and writes the target type per element, and adds no FLOPs.
    if (auto cast = llvm::dyn_cast<CastOp>(op)) {
      ++totals.casts;
      int64_t elements = elementsOf(cast.getResult());
      auto from = llvm::cast<RankedTensorType>(cast.getInput().getType()).getElementType();
      auto to = llvm::cast<RankedTensorType>(cast.getType()).getElementType();
      totals.bytesConverted +=
          accumSteps * elements * (bytesPerElement(from) + bytesPerElement(to));
      return;
    }
    // An op is reduced-precision work when its compute type is not f32 (bf16 or f16 matmuls).
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

/// An MLIR type as the report prints it ("bf16", "f32").
static std::string typeName(Type type) {
  std::string text;
  llvm::raw_string_ostream os(text);
  os << type;
  return text;
}

/// Prints `ampc report precision`: one row per annotated op of the micro step with the
/// compute, accumulate and storage types and the rule that chose them, then the totals.
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
  // `ops` counts the casts too; the line reports them apart.
  int64_t copies = llvm::range_size(model.getBodyBlock().getOps<ParamCopyOp>());
  os << "\n";
  os << "ops: " << totals.ops - totals.casts << ", casts inserted: " << totals.casts
     << ", parameter copies (refreshed once per optimizer step): " << copies << "\n";
  // Decimal units (1 kB = 1000 B), the largest that keeps the figure at least 1.
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
