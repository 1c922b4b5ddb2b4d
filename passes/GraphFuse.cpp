//===- GraphFuse.cpp - group the ops of the training step into kernels ----===//
//
// Adapts the entry function (micro_step after graph-build-training) and optimizer_step to the
// plain op graph of FusionGrouping.h: each op's fusion class and role, its operands and result
// shapes, and order edges between ops that touch the same training state (a parameter, an
// accumulator, a moment, the loss scaler) through symbols rather than SSA values. The grouping
// comes back as typed attributes: each op's graph.fusion (its group and the group's kind) and the
// function's graph.fusion_schedule (the order the groups run in); types, values and the order of
// the ops are left as they are.
//
//===--------------------------------------------------------------------------===//

#include "passes/FusionGrouping.h"
#include "passes/Passes.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/StringMap.h"

namespace ampc::graph {
#define GEN_PASS_DEF_GRAPHFUSE
#include "passes/Passes.h.inc"
} // namespace ampc::graph

using namespace mlir;
using namespace ampc::graph;

namespace {

/// The fusion class of `op`, and its role for the ops the rules name.
FusionOpClass classify(Operation *op, FusionRole &role) {
  // The roles the grouping rules look for.
  role = FusionRole::None;
  if (auto cast = llvm::dyn_cast<CastOp>(op)) {
    Type from = getElementTypeOrSelf(cast.getInput().getType());
    Type to = getElementTypeOrSelf(cast.getType());
    bool widening = from == to || (to.isF32() && (from.isBF16() || from.isF16()));
    role = widening ? FusionRole::WideningCast : FusionRole::Cast;
  } else if (llvm::isa<AddOp>(op)) {
    role = FusionRole::Add;
  } else if (auto gelu = llvm::dyn_cast<GeluOp>(op)) {
    if (gelu.getApproximation() == GeluApproximation::tanh)
      role = FusionRole::TanhGelu;
  } else if (auto geluGrad = llvm::dyn_cast<GeluGradOp>(op)) {
    // cuBLASLt's DGELU epilogue takes the tanh form; only bf16 and f16 products are known to
    // have DGELU kernels (the reduced-precision training the epilogue exists for), so an f32
    // gradient keeps its elementwise kernel.
    Type element = getElementTypeOrSelf(geluGrad.getType());
    if (geluGrad.getApproximation() == GeluApproximation::tanh &&
        (element.isBF16() || element.isF16()))
      role = FusionRole::TanhGeluGrad;
  } else if (llvm::isa<ReshapeOp>(op)) {
    role = FusionRole::Reshape;
  } else if (llvm::isa<BroadcastOp>(op)) {
    role = FusionRole::Broadcast;
  } else if (llvm::isa<SumOp>(op)) {
    role = FusionRole::Sum;
  } else if (llvm::isa<CrossEntropyOp>(op)) {
    role = FusionRole::CrossEntropy;
  } else if (llvm::isa<CrossEntropyGradOp>(op)) {
    role = FusionRole::CrossEntropyGrad;
  } else if (llvm::isa<LayerNormGradOp, RmsNormGradOp>(op)) {
    role = FusionRole::NormGrad;
  }
  // The class is the op's own declaration (Graph_ElementwiseKernel, ... in GraphOps.td).
  if (op->hasTrait<ElementwiseKernel>())
    return FusionOpClass::Elementwise;
  if (op->hasTrait<DataMovementKernel>())
    return FusionOpClass::DataMovement;
  if (op->hasTrait<ReductionKernel>())
    return FusionOpClass::Reduction;
  if (op->hasTrait<MatmulKernel>())
    return FusionOpClass::MatMul;
  if (op->hasTrait<AttentionKernel>())
    return FusionOpClass::Attention;
  if (op->hasTrait<AccumulateKernel>())
    return FusionOpClass::Accumulate;
  if (op->hasTrait<OptimizerKernel>())
    return FusionOpClass::Optimizer;
  // Convolution, pooling and batch norm (ImageKernel) have kernels of their own that nothing fuses into;
  // get_param, get_input, constant, loss, grad_seed, get_loss_scale, global_norm, lr_schedule,
  // update_loss_scale, return: no kernel of their own.
  return FusionOpClass::Other;
}

FusionShape shapeOf(Value value) {
  if (auto type = llvm::dyn_cast<RankedTensorType>(value.getType()))
    return FusionShape(type.getShape().begin(), type.getShape().end());
  return {};
}

/// The training state an op reads and writes by name.
struct StateEffects {
  llvm::SmallVector<StringRef, 4> reads, writes;
};

StateEffects stateEffects(Operation *op) {
  StateEffects effects;
  if (auto get = llvm::dyn_cast<GetParamOp>(op)) {
    effects.reads.push_back(get.getName());
  } else if (auto accumulate = llvm::dyn_cast<AccumulateGradOp>(op)) {
    effects.writes.push_back(accumulate.getAccumulator());
    // Unscaling reads the scale; raising the non-finite flag commutes with the other
    // accumulations, and nothing in the micro step reads the flag.
    if (auto scaler = accumulate.getUnscale())
      effects.reads.push_back(*scaler);
  } else if (auto norm = llvm::dyn_cast<GlobalNormOp>(op)) {
    for (Attribute state : norm.getStates())
      effects.reads.push_back(llvm::cast<FlatSymbolRefAttr>(state).getValue());
  } else if (auto adamw = llvm::dyn_cast<AdamWOp>(op)) {
    effects.writes.append(
        {adamw.getParam(), adamw.getGrad(), adamw.getFirstMoment(), adamw.getSecondMoment()});
    if (auto copy = adamw.getCopy())
      effects.writes.push_back(*copy);
    if (auto scaler = adamw.getSkipNonfinite())
      effects.reads.push_back(*scaler);
  } else if (auto sgd = llvm::dyn_cast<SgdOp>(op)) {
    effects.writes.append({sgd.getParam(), sgd.getGrad(), sgd.getMomentumBuffer()});
    if (auto copy = sgd.getCopy())
      effects.writes.push_back(*copy);
    if (auto scaler = sgd.getSkipNonfinite())
      effects.reads.push_back(*scaler);
  } else if (auto get = llvm::dyn_cast<GetLossScaleOp>(op)) {
    effects.reads.push_back(get.getScaler());
  } else if (auto update = llvm::dyn_cast<UpdateLossScaleOp>(op)) {
    effects.writes.push_back(update.getScaler());
  }
  return effects;
}

/// The plain graph of `block`'s ops; `ops` receives them in program order.
FusionGraph buildFusionGraph(Block &block, std::vector<Operation *> &ops) {
  FusionGraph graph;
  llvm::DenseMap<Operation *, int> indexOf;
  llvm::DenseMap<Value, int> externalIndex;
  // Per state symbol: the last op writing it and the ops reading it since.
  struct StateUse {
    int lastWriter = -1;
    std::vector<int> readersSince;
  };
  llvm::StringMap<StateUse> stateUses;

  for (Operation &op : block) {
    FusionOp node;
    node.name = op.getName().getStringRef().str();
    node.opClass = classify(&op, node.role);
    for (Value operand : op.getOperands()) {
      FusionOperand input;
      input.shape = shapeOf(operand);
      if (auto result = llvm::dyn_cast<OpResult>(operand);
          result && indexOf.count(result.getOwner())) {
        input.value =
            FusionValue{indexOf[result.getOwner()], static_cast<int>(result.getResultNumber())};
      } else {
        auto inserted = externalIndex.try_emplace(operand, static_cast<int>(externalIndex.size()));
        input.value = FusionValue{-1, inserted.first->second};
      }
      node.operands.push_back(std::move(input));
    }
    for (Value result : op.getResults())
      node.results.push_back(shapeOf(result));
    if (auto matmul = llvm::dyn_cast<MatmulOp>(op)) {
      node.transposeLhs = matmul.getTransposeLhs();
      node.transposeRhs = matmul.getTransposeRhs();
    }
    if (auto sum = llvm::dyn_cast<SumOp>(op))
      node.axes.assign(sum.getAxes().begin(), sum.getAxes().end());
    // Unscaling divides by the loss scale the device holds and raises the non-finite flag
    // from the gradient itself: a matmul writing into the accumulator does neither.
    if (auto accumulate = llvm::dyn_cast<AccumulateGradOp>(op)) {
      const bool f32 = getElementTypeOrSelf(accumulate.getGrad().getType()).isF32();
      node.addsUnchanged = f32 && !accumulate.getUnscale();
      node.unscalesF32 = f32 && accumulate.getUnscale().has_value();
    }

    // Order edges: a read after the last write, a write after the last write and every read
    // since.
    int index = static_cast<int>(ops.size());
    StateEffects effects = stateEffects(&op);
    auto after = [&](int before) {
      if (before >= 0 && std::find(node.orderAfter.begin(), node.orderAfter.end(), before) ==
                             node.orderAfter.end())
        node.orderAfter.push_back(before);
    };
    for (StringRef state : effects.reads) {
      StateUse &use = stateUses[state];
      after(use.lastWriter);
      use.readersSince.push_back(index);
    }
    for (StringRef state : effects.writes) {
      StateUse &use = stateUses[state];
      after(use.lastWriter);
      for (int reader : use.readersSince)
        if (reader != index)
          after(reader);
      use.lastWriter = index;
      use.readersSince.clear();
    }

    indexOf[&op] = index;
    ops.push_back(&op);
    graph.add(std::move(node));
  }
  return graph;
}

struct GraphFusePass : ampc::graph::impl::GraphFuseBase<GraphFusePass> {
  using Base::Base;

  void runOnOperation() override {
    ModelOp model = getOperation();
    llvm::SmallVector<func::FuncOp, 2> functions;
    if (func::FuncOp entry = model.getEntryFunction())
      functions.push_back(entry);
    if (auto step = mlir::SymbolTable::lookupNearestSymbolFrom<func::FuncOp>(
            model, StringAttr::get(model.getContext(), "optimizer_step"));
        step && !llvm::is_contained(functions, step))
      functions.push_back(step);
    if (functions.empty()) {
      model.emitError("graph-fuse: the model has no entry function (no graph.loss)");
      return signalPassFailure();
    }
    for (func::FuncOp function : functions)
      if (failed(fuse(function)))
        return signalPassFailure();
  }

  LogicalResult fuse(func::FuncOp function) {
    if (!llvm::hasSingleElement(function.getBody()))
      return function.emitError("graph-fuse: expected a function with one block");
    std::vector<Operation *> ops;
    FusionGraph graph = buildFusionGraph(function.getBody().front(), ops);
    FusionPlan plan = planFusion(graph);
    if (auto problem = checkFusionPlan(graph, plan))
      return function.emitError("graph-fuse: invalid grouping: ") << *problem;

    Builder builder(function.getContext());
    for (size_t i = 0; i < ops.size(); ++i) {
      const FusionGroup &group = plan.groups[plan.groupOf[i]];
      std::optional<GroupKind> kind = symbolizeGroupKind(fusionKindName(group.kind));
      if (!kind)
        return ops[i]->emitError("graph-fuse: no dialect group kind for '")
               << fusionKindName(group.kind) << "'";
      ops[i]->setAttr(GraphDialect::kFusionAttrName,
                      FusionAttr::get(function.getContext(), plan.groupOf[i], *kind));
    }
    // The order the groups run in (graph-plan-memory places values for it, the device program
    // follows it).
    std::vector<int> order = scheduleFusionGroups(graph, plan);
    function->setAttr(
        GraphDialect::kFusionScheduleAttrName,
        builder.getDenseI64ArrayAttr(std::vector<int64_t>(order.begin(), order.end())));
    return success();
  }
};

} // namespace
