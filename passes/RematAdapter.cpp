//===- RematAdapter.cpp - the training step as a remat problem, and back ---===//

#include "passes/RematAdapter.h"
#include "passes/MemoryPlanner.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "llvm/ADT/StringExtras.h"

#include <chrono>
#include <cmath>

using namespace mlir;

namespace ampc::graph {

namespace {

/// The call site an inlined op came from (its outermost caller), or null.
LocationAttr outermostCaller(Location loc) {
  LocationAttr found;
  while (auto call = llvm::dyn_cast<CallSiteLoc>(loc)) {
    found = call.getCaller();
    loc = call.getCaller();
  }
  return found;
}

} // namespace

int64_t RematGraph::stepPeak(const RematSimulation &simulation) const {
  return std::max(simulation.peakBytes, problem.persistentBytes + optimizerStepBytes);
}

int64_t RematGraph::planBytes(const RematSimulation &simulation) const {
  return std::max(stepPeak(simulation), problem.persistentBytes + arenaBytes(simulation));
}

int64_t RematGraph::arenaBytes(const RematSimulation &simulation) const {
  std::vector<BufferLifetime> lifetimes;
  for (size_t s = 0; s < simulation.schedule.size(); ++s) {
    int64_t bytes = problem.ops[simulation.schedule[s].op].bytes;
    if (bytes > 0 && simulation.lastUse[s] >= 0)
      lifetimes.push_back({bytes, int64_t(s), simulation.lastUse[s]});
  }
  return planMemory(lifetimes, alignment).arenaBytes;
}

FailureOr<RematGraph> buildRematGraph(ModelOp model, int64_t alignment, int64_t workspaceBytes) {
  func::FuncOp entry = model.getEntryFunction();
  auto step = SymbolTable::lookupNearestSymbolFrom<func::FuncOp>(
      model, StringAttr::get(model.getContext(), "optimizer_step"));
  if (!entry || entry.getSymName() != "micro_step" || !step) {
    model.emitError("has no training step (micro_step and optimizer_step); run "
                    "--graph-build-training before planning rematerialization");
    return failure();
  }
  if (!entry.getBody().front().getOps<func::CallOp>().empty()) {
    entry.emitError("calls other functions; run --graph-inline-calls first");
    return failure();
  }
  RematGraph graph;
  graph.alignment = alignment;
  graph.workspaceBytes = workspaceBytes;
  graph.persistent = persistentBytes(model);
  graph.problem.persistentBytes = graph.persistent.total() + workspaceBytes;
  graph.optimizerStepBytes = planMemory(collectArenaValues(step).lifetimes, alignment).arenaBytes;

  Block &body = entry.getBody().front();
  llvm::DenseMap<Operation *, int64_t> indexOf;
  int64_t numForward = -1;
  for (Operation &op : body) {
    if (numForward < 0 && llvm::isa<GradSeedOp>(op))
      numForward = static_cast<int64_t>(graph.ops.size());
    indexOf[&op] = static_cast<int64_t>(graph.ops.size());
    graph.ops.push_back(&op);
  }
  if (numForward < 0) {
    entry.emitError("has no graph.grad_seed: not a training step built by graph-build-training");
    return failure();
  }
  graph.problem.numForward = numForward;

  llvm::DenseMap<Attribute, int64_t> blockOf;
  std::vector<int64_t> blockLength;
  std::vector<int64_t> readAtEnd;
  for (auto [index, op] : llvm::enumerate(graph.ops)) {
    RematOp node;
    node.name = op->getName().stripDialect().str();
    if (auto loc = llvm::dyn_cast<FileLineColLoc>(op->getLoc()))
      node.name += " at line " + std::to_string(loc.getLine());
    else if (auto call = llvm::dyn_cast<CallSiteLoc>(op->getLoc()))
      if (auto callee = llvm::dyn_cast<FileLineColLoc>(call.getCallee()))
        if (auto caller = llvm::dyn_cast<FileLineColLoc>(outermostCaller(op->getLoc())))
          node.name += " at line " + std::to_string(callee.getLine()) + " <- " +
                       std::to_string(caller.getLine());
    bool persistentData = namesPersistentData(op);
    Operation *viewed = viewSource(op);
    if (int operand = inPlaceOperand(op); operand >= 0)
      if (Operation *source = op->getOperand(operand).getDefiningOp();
          source && indexOf.count(source) && !namesPersistentData(source))
        node.inPlaceOf = indexOf[source];
    if (viewed && indexOf.count(viewed))
      node.aliasOf = indexOf[viewed];
    else if (!persistentData)
      for (Value result : op->getResults())
        node.bytes += alignUp(bytesOf(result.getType()), alignment);
    node.cost = node.aliasOf >= 0 ? 0 : estimateFlops(op);
    graph.stepFlops += op->hasTrait<OpTrait::IsTerminator>() ? 0 : node.cost;
    node.isMatmul = llvm::isa<MatmulOp, AttentionOp, QkvAttentionOp>(op);
    node.isRandom = llvm::isa<DropoutOp>(op);
    node.pinned = persistentData || op->getNumRegions() > 0 || (!isPure(op) && !node.isRandom);
    for (Value operand : op->getOperands()) {
      Operation *def = operand.getDefiningOp();
      if (!def || !indexOf.count(def))
        continue;
      int64_t operandIndex = indexOf[def];
      if (std::find(node.operands.begin(), node.operands.end(), operandIndex) ==
          node.operands.end())
        node.operands.push_back(operandIndex);
      if (llvm::isa<LossOp, func::ReturnOp>(op))
        readAtEnd.push_back(operandIndex);
    }
    if (static_cast<int64_t>(index) < numForward)
      if (LocationAttr caller = outermostCaller(op->getLoc())) {
        auto [it, inserted] = blockOf.try_emplace(caller, int64_t(blockLength.size()));
        if (inserted)
          blockLength.push_back(0);
        node.blockId = it->second;
        node.positionInBlock = blockLength[it->second]++;
      }
    graph.problem.ops.push_back(std::move(node));
  }
  // The loss and the returned values are read after the last op: pin them and let the
  // terminator read them.
  RematOp &terminator = graph.problem.ops.back();
  for (int64_t value : readAtEnd) {
    graph.problem.ops[value].pinned = true;
    if (std::find(terminator.operands.begin(), terminator.operands.end(), value) ==
        terminator.operands.end())
      terminator.operands.push_back(value);
  }
  return graph;
}

int64_t applyRemat(const RematGraph &graph, const RematSimulation &simulation) {
  IRMapping clones;
  std::vector<int64_t> pending;
  int64_t inserted = 0;
  for (const RematStep &step : simulation.schedule) {
    if (step.isClone) {
      pending.push_back(step.op);
      continue;
    }
    Operation *op = graph.ops[step.op];
    if (step.op < graph.problem.numForward)
      continue;
    OpBuilder builder(op);
    for (int64_t v : pending) {
      Operation *original = graph.ops[v];
      Operation *clone = builder.clone(*original, clones);
      clone->setAttr(GraphDialect::kRecomputedAttrName, builder.getUnitAttr());
      ++inserted;
    }
    pending.clear();
    for (OpOperand &operand : op->getOpOperands())
      if (Value clone = clones.lookupOrNull(operand.get()))
        operand.set(clone);
  }
  return inserted;
}

std::optional<size_t> chooseRematPlan(const RematGraph &graph, const RematFrontier &frontier,
                                      int64_t budgetBytes) {
  // Peaks ascend and costs descend along the frontier: the last plan that fits is the cheapest.
  // Among the plans whose live values fit, from the cheapest down, the first whose arena fits.
  size_t fitting = 0;
  while (fitting < frontier.plans.size() &&
         graph.stepPeak(frontier.simulations[fitting]) <= budgetBytes)
    ++fitting;
  for (size_t i = fitting; i-- > 0;)
    if (graph.planBytes(frontier.simulations[i]) <= budgetBytes)
      return i;
  return std::nullopt;
}

std::string infeasibleBudgetMessage(const RematGraph &graph, const RematFrontier &frontier,
                                    int64_t budgetBytes) {
  int64_t floorBytes = graph.problem.persistentBytes + graph.optimizerStepBytes;
  std::string text;
  llvm::raw_string_ostream os(text);
  if (floorBytes > budgetBytes) {
    os << "the memory budget " << budgetBytes
       << " bytes is below the persistent buffers and the optimizer step (" << floorBytes
       << " bytes: parameters " << graph.persistent.parameters << ", parameter copies "
       << graph.persistent.parameterCopies << ", gradient accumulators "
       << graph.persistent.gradients << ", optimizer state " << graph.persistent.optimizerState
       << ", inputs " << graph.persistent.inputs << ", workspace " << graph.workspaceBytes
       << "), which no recomputation reduces";
    return text;
  }
  RematPlan smallest = planRemat(graph.problem, frontier, budgetBytes);
  // The smallest budget met: the least any frontier plan needs, its arena included.
  int64_t minimum = INT64_MAX;
  for (const RematSimulation &simulation : frontier.simulations)
    minimum = std::min(minimum, graph.planBytes(simulation));
  if (smallest.feasible)
    os << "the memory budget " << budgetBytes
       << " bytes is met by the live values of some plans but not by their arenas (best-fit "
          "placement leaves gaps)";
  else
    os << smallest.diagnostic;
  os << "; the smallest budget that can be met is " << minimum << " bytes";
  return text;
}

int64_t ByteSize::resolve(int64_t noRematPeak) const {
  return percent ? static_cast<int64_t>(std::floor(double(noRematPeak) * value / 100.0))
                 : static_cast<int64_t>(value);
}

std::optional<ByteSize> parseByteSize(llvm::StringRef text) {
  text = text.trim();
  size_t end = 0;
  while (end < text.size() && (llvm::isDigit(text[end]) || text[end] == '.'))
    ++end;
  llvm::StringRef number = text.take_front(end), unit = text.drop_front(end).trim();
  double value = 0;
  if (number.empty() || number.getAsDouble(value) || !std::isfinite(value) || value < 0)
    return std::nullopt;
  static const std::pair<const char *, double> units[] = {{"", 1},
                                                          {"B", 1},
                                                          {"KiB", 1024.0},
                                                          {"MiB", 1048576.0},
                                                          {"GiB", 1073741824.0},
                                                          {"TiB", 1099511627776.0},
                                                          {"kB", 1e3},
                                                          {"KB", 1e3},
                                                          {"MB", 1e6},
                                                          {"GB", 1e9},
                                                          {"TB", 1e12}};
  ByteSize size;
  if (unit == "%") {
    size.value = value;
    size.percent = true;
    return size;
  }
  for (auto [name, factor] : units)
    if (unit == name) {
      size.value = std::floor(value * factor);
      if (size.value > 9.0e18)
        return std::nullopt;
      return size;
    }
  return std::nullopt;
}

FailureOr<RematAnalysis> analyzeRemat(ModelOp model, int64_t alignment, int64_t workspaceBytes) {
  FailureOr<RematGraph> graph = buildRematGraph(model, alignment, workspaceBytes);
  if (failed(graph))
    return failure();
  RematAnalysis analysis;
  analysis.graph = std::move(*graph);
  auto start = std::chrono::steady_clock::now();
  analysis.frontier = rematFrontier(analysis.graph.problem);
  analysis.planningSeconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  analysis.noRemat = simulateRemat(analysis.graph.problem,
                                   std::vector<bool>(analysis.graph.problem.ops.size(), false));
  analysis.noRematPeak = analysis.graph.planBytes(analysis.noRemat);
  return analysis;
}

RematDecision decideRemat(const RematAnalysis &analysis, const ByteSize &budget) {
  RematDecision decision;
  decision.budgetBytes = budget.resolve(analysis.noRematPeak);
  std::optional<size_t> chosen =
      chooseRematPlan(analysis.graph, analysis.frontier, decision.budgetBytes);
  if (!chosen) {
    decision.infeasible =
        infeasibleBudgetMessage(analysis.graph, analysis.frontier, decision.budgetBytes);
    return decision;
  }
  const RematSimulation &plan = analysis.frontier.simulations[*chosen];
  decision.plan = &plan;
  decision.peakBytes = analysis.graph.stepPeak(plan);
  decision.arenaBytes = analysis.graph.arenaBytes(plan);
  decision.liveBytes = plan.peakBytes - analysis.graph.problem.persistentBytes;
  decision.extraFlops = plan.extraCost;
  for (const RematStep &step : plan.schedule)
    decision.clones += step.isClone;
  return decision;
}

RematAttr rematResult(const RematAnalysis &analysis, const RematDecision &decision,
                      MLIRContext *context) {
  return RematAttr::get(context, decision.budgetBytes, decision.peakBytes, analysis.noRematPeak,
                        decision.liveBytes, static_cast<int64_t>(std::llround(decision.extraFlops)),
                        static_cast<int64_t>(std::llround(analysis.graph.stepFlops)),
                        analysis.graph.problem.persistentBytes);
}

} // namespace ampc::graph
