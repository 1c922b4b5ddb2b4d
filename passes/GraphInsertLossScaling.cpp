//===- GraphInsertLossScaling.cpp - scale the loss, unscale while accumulating --===//
//
// Adds the scaler and threads it through the training step: the backward seed is multiplied by
// the scale, the accumulation divides by it and flags non-finite gradients, the optimizer
// updates skip themselves on the flag, and the step ends with the scale update. The state
// machine itself (GradScaler's rules plus a floor) is runtime/numerics/LossScale.h, shared by the
// CPU and CUDA backends.
//
//===--------------------------------------------------------------------------===//

#include "passes/Passes.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/Verifier.h"

#include <cmath>

namespace ampc::graph {
#define GEN_PASS_DEF_GRAPHINSERTLOSSSCALING
#include "passes/Passes.h.inc"
} // namespace ampc::graph

using namespace mlir;
using namespace ampc::graph;

namespace {

struct GraphInsertLossScalingPass
    : ampc::graph::impl::GraphInsertLossScalingBase<GraphInsertLossScalingPass> {
  using Base::Base;

  void runOnOperation() override {
    ModelOp model = getOperation();
    MLIRContext *context = model.getContext();
    std::string chosen = mode;
    if (chosen == "auto") {
      auto precision = model->getAttrOfType<StringAttr>(GraphDialect::kPrecisionModeAttrName);
      chosen = precision && precision.getValue() == "fp16" ? "dynamic" : "none";
    }
    if (chosen != "dynamic" && chosen != "static" && chosen != "none") {
      model.emitError("graph-insert-loss-scaling: invalid mode '")
          << mode << "': the modes are auto, dynamic, static and none";
      return signalPassFailure();
    }
    if (chosen == "none")
      return;

    mlir::SymbolTable symbols(model);
    auto step = symbols.lookup<func::FuncOp>("optimizer_step");
    func::FuncOp micro = model.getEntryFunction();
    if (!step || !micro || micro.getBody().front().getOps<GradSeedOp>().empty()) {
      model.emitError("loss scaling needs the training step: run --graph-build-training first");
      return signalPassFailure();
    }
    if (!model.getBodyBlock().getOps<LossScaleOp>().empty()) {
      model.emitError("already has a loss scaler; graph-insert-loss-scaling runs once");
      return signalPassFailure();
    }
    if (symbols.lookup("loss_scale")) {
      symbols.lookup("loss_scale")
          ->emitError("the symbol @loss_scale is reserved for the loss "
                      "scaler");
      return signalPassFailure();
    }

    // The scaler, after the last declaration of the model.
    Operation *lastDecl = nullptr;
    for (Operation &op : model.getBodyBlock())
      if (!llvm::isa<func::FuncOp>(op))
        lastDecl = &op;
    OpBuilder b(context);
    b.setInsertionPointAfter(lastDecl);
    auto scaler = b.create<LossScaleOp>(
        model.getLoc(), b.getStringAttr("loss_scale"),
        LossScaleModeAttr::get(context, chosen == "dynamic" ? LossScaleMode::dynamic
                                                            : LossScaleMode::static_scale),
        b.getF64FloatAttr(initialScale), b.getF64FloatAttr(growthFactor),
        b.getF64FloatAttr(backoffFactor), b.getI64IntegerAttr(growthInterval),
        b.getF64FloatAttr(chosen == "dynamic" ? double(minScale) : 0.0));
    if (failed(mlir::verify(scaler))) // reports the invalid option value at the model
      return signalPassFailure();
    auto ref = FlatSymbolRefAttr::get(scaler.getSymNameAttr());

    // Scale the seed of the backward pass.
    for (GradSeedOp seed :
         llvm::make_early_inc_range(micro.getBody().front().getOps<GradSeedOp>())) {
      OpBuilder before(seed);
      Value scale = before.create<GetLossScaleOp>(seed.getLoc(), ref);
      seed.getScaleMutable().assign(scale);
    }
    // Unscale while accumulating; skip the updates on overflow; end with the scale update.
    micro.walk([&](AccumulateGradOp accumulate) { accumulate.setUnscaleAttr(ref); });
    step.walk([&](AdamWOp update) { update.setSkipNonfiniteAttr(ref); });
    step.walk([&](SgdOp update) { update.setSkipNonfiniteAttr(ref); });
    OpBuilder end(step.getBody().front().getTerminator());
    end.create<UpdateLossScaleOp>(step.getLoc(), ref);
    if (debugNonfinite)
      model->setAttr(GraphDialect::kDebugNonfiniteAttrName, UnitAttr::get(context));
  }
};

} // namespace
