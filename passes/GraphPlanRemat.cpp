//===- GraphPlanRemat.cpp - recompute forward values to meet a memory budget -===//
//
// Adapts the IR to RematPlanner through RematAdapter: reads micro_step, plans it for the
// budget, checks the chosen plan's best-fit arena as well as its simulated peak, and rewrites
// micro_step with the clones. See Passes.td for the contract.
//
//===--------------------------------------------------------------------------===//

#include "passes/Passes.h"
#include "passes/RematAdapter.h"

#include "mlir/IR/Builders.h"

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
          << budget.getValue() << "' (write bytes, 6GiB, 512MiB, 1.5GB or 75%)";
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
    FailureOr<RematGraph> graph =
        buildRematGraph(model, alignment, workspaceSize->resolve(0));
    if (failed(graph))
      return signalPassFailure();

    RematFrontier frontier = rematFrontier(graph->problem);
    RematSimulation noRemat =
        simulateRemat(graph->problem, std::vector<bool>(graph->problem.ops.size(), false));
    int64_t noRematPeak = graph->planBytes(noRemat);
    int64_t budgetBytes = budgetSize->resolve(noRematPeak);
    std::optional<size_t> chosen = chooseRematPlan(*graph, frontier, budgetBytes);
    if (!chosen) {
      model.emitError("graph-plan-remat: ")
          << infeasibleBudgetMessage(*graph, frontier, budgetBytes);
      return signalPassFailure();
    }
    const RematSimulation &plan = frontier.simulations[*chosen];
    applyRemat(*graph, plan);

    func::FuncOp entry = model.getEntryFunction();
    OpBuilder b(model.getContext());
    entry->setAttr("remat_budget_bytes", b.getI64IntegerAttr(budgetBytes));
    entry->setAttr("remat_peak_bytes", b.getI64IntegerAttr(graph->stepPeak(plan)));
    entry->setAttr("remat_no_remat_peak_bytes", b.getI64IntegerAttr(noRematPeak));
    entry->setAttr("remat_live_bytes",
                   b.getI64IntegerAttr(plan.peakBytes - graph->problem.persistentBytes));
    entry->setAttr("remat_extra_flops", b.getF64FloatAttr(plan.extraCost));
    entry->setAttr("remat_step_flops", b.getF64FloatAttr(graph->stepFlops));
  }
};

} // namespace
