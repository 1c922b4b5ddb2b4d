//===- GraphPlanRemat.cpp - recompute forward values to meet a memory budget -===//
//
// Adapts the IR to RematPlanner through RematAdapter's one entry point (analyzeRemat, then
// decideRemat for the budget: the chosen plan's best-fit arena is checked as well as its
// simulated peak), rewrites micro_step with the clones and records the decision as
// `graph.remat`. See Passes.td for the contract.
//
//===--------------------------------------------------------------------------===//

#include "passes/Passes.h"
#include "passes/RematAdapter.h"

namespace ampc::graph {
#define GEN_PASS_DEF_GRAPHPLANREMAT
#include "passes/Passes.h.inc"
} // namespace ampc::graph

using namespace mlir;
using namespace ampc::graph;

namespace {

struct GraphPlanRematPass : ampc::graph::impl::GraphPlanRematBase<GraphPlanRematPass> {
  using Base::Base;

  void runOnOperation() override {
    ModelOp model = getOperation();
    if (budget.empty())
      return;
    std::optional<ByteSize> budgetSize = parseByteSize(budget);
    std::optional<ByteSize> workspaceSize = parseByteSize(workspace);
    if (!budgetSize) {
      model.emitError("graph-plan-remat: cannot read the memory budget '")
          << budget.getValue() << "' " << kBudgetSyntax;
      return signalPassFailure();
    }
    if (!workspaceSize || workspaceSize->percent) {
      model.emitError("graph-plan-remat: cannot read the workspace size '")
          << workspace.getValue() << "' (write bytes, 64MiB or 1GB)";
      return signalPassFailure();
    }
    if (alignment <= 0 || (alignment & (alignment - 1)) != 0) {
      model.emitError("graph-plan-remat: alignment must be a power of two, got ")
          << alignment.getValue();
      return signalPassFailure();
    }
    FailureOr<RematAnalysis> analysis = analyzeRemat(model, alignment, workspaceSize->resolve(0));
    if (failed(analysis))
      return signalPassFailure();
    RematDecision decision = decideRemat(*analysis, *budgetSize);
    if (!decision.plan) {
      model.emitError("graph-plan-remat: ") << decision.infeasible;
      return signalPassFailure();
    }
    applyRemat(analysis->graph, *decision.plan);
    model.getEntryFunction()->setAttr(GraphDialect::kRematAttrName,
                                      rematResult(*analysis, decision, model.getContext()));
  }
};

} // namespace
