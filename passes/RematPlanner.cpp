//===- RematPlanner.cpp - what to save and what to recompute under a budget
//---===//
//
// See RematPlanner.h for the model and the algorithm. The simulator is the
// single source of truth for peaks and costs: every candidate plan, whatever
// produced it, is judged by it.
//
//===--------------------------------------------------------------------------===//

#include "passes/RematPlanner.h"

#include <boost/graph/adjacency_list.hpp>
#include <boost/graph/push_relabel_max_flow.hpp>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <sstream>

namespace ampc::graph {

std::vector<bool> rematCandidates(const RematProblem &problem) {
  std::vector<bool> candidate(problem.ops.size(), false);
  for (const RematOp &op : problem.ops)
    for (int64_t operand : op.operands)
      if (operand < problem.numForward && !problem.ops[operand].pinned)
        candidate[operand] = true;
  return candidate;
}

/// The candidates some backward op reads: each must be kept or recomputed.
static std::vector<bool> neededByBackward(const RematProblem &problem) {
  std::vector<bool> needed(problem.ops.size(), false);
  for (size_t b = problem.numForward; b < problem.ops.size(); ++b)
    for (int64_t operand : problem.ops[b].operands)
      if (operand < problem.numForward && !problem.ops[operand].pinned)
        needed[operand] = true;
  return needed;
}

//===----------------------------------------------------------------------===//
// The simulator
//===----------------------------------------------------------------------===//

namespace {

/// Builds the emitted schedule of one plan and the lifetimes of its value
/// instances.
class ScheduleBuilder {
public:
  ScheduleBuilder(const RematProblem &problem, const std::vector<bool> &recompute)
      : problem(problem), recompute(recompute) {}

  RematSimulation run(bool wantContributors) {
    const auto &ops = problem.ops;
    int64_t numOps = static_cast<int64_t>(ops.size());
    int64_t numForward = problem.numForward;
    steps.reserve(numOps * 2);
    available.assign(numOps, -1);
    // Forward: every op runs once, reading the original instances.
    for (int64_t v = 0; v < numForward; ++v) {
      int64_t step = emit(v, false);
      for (int64_t operand : ops[v].operands)
        lastUse[available[operand]] = step;
      available[v] = step;
    }
    // Entering the backward: only pinned and kept values stay available.
    std::vector<bool> candidate = rematCandidates(problem);
    for (int64_t v = 0; v < numForward; ++v)
      if (!ops[v].pinned && !(candidate[v] && !recompute[v]))
        available[v] = -1;
    for (int64_t b = numForward; b < numOps; ++b) {
      for (int64_t operand : ops[b].operands)
        materialize(operand);
      int64_t step = emit(b, false);
      for (int64_t operand : ops[b].operands)
        lastUse[available[operand]] = step;
      available[b] = step;
    }
    return measure(wantContributors);
  }

private:
  int64_t emit(int64_t op, bool isClone) {
    int64_t step = static_cast<int64_t>(steps.size());
    steps.push_back({op, isClone});
    lastUse.push_back(step);
    const RematOp &node = problem.ops[op];
    aliasSource.push_back(node.aliasOf >= 0 ? available[node.aliasOf] : -1);
    inPlaceSource.push_back(node.inPlaceOf >= 0 ? available[node.inPlaceOf] : -1);
    return step;
  }

  /// Clones `v` (after its unavailable operands) unless it is available.
  void materialize(int64_t v) {
    if (available[v] >= 0)
      return;
    for (int64_t operand : problem.ops[v].operands)
      materialize(operand);
    int64_t step = emit(v, true);
    for (int64_t operand : problem.ops[v].operands)
      lastUse[available[operand]] = step;
    available[v] = step;
  }

  /// Which instances share storage: a view shares its source's; an in-place op takes its
  /// source's when that storage's last reader is the op itself and the sizes agree. Returns
  /// per step the step that owns its bytes, and fills `end` with each owner's last reader.
  std::vector<int64_t> storageOwners(std::vector<int64_t> &end) const {
    size_t numSteps = steps.size();
    std::vector<int64_t> owner(numSteps);
    end.assign(numSteps, -1);
    for (size_t s = 0; s < numSteps; ++s) {
      owner[s] = static_cast<int64_t>(s);
      if (aliasSource[s] >= 0) {
        owner[s] = owner[aliasSource[s]];
      } else if (inPlaceSource[s] >= 0) {
        int64_t source = owner[inPlaceSource[s]];
        if (end[source] == static_cast<int64_t>(s) &&
            problem.ops[steps[source].op].bytes == problem.ops[steps[s].op].bytes)
          owner[s] = source;
      }
      int64_t &last = end[owner[s]];
      last = owner[s] == static_cast<int64_t>(s) ? lastUse[s] : std::max(last, lastUse[s]);
    }
    return owner;
  }

  RematSimulation measure(bool wantContributors) {
    RematSimulation sim;
    size_t numSteps = steps.size();
    std::vector<int64_t> end;
    std::vector<int64_t> owner = storageOwners(end);
    std::vector<int64_t> delta(numSteps + 1, 0);
    for (size_t s = 0; s < numSteps; ++s) {
      const RematOp &op = problem.ops[steps[s].op];
      if (owner[s] == static_cast<int64_t>(s)) {
        delta[s] += op.bytes;
        delta[end[s] + 1] -= op.bytes;
      }
      if (steps[s].isClone) {
        sim.extraCost += op.cost;
        if (op.isMatmul)
          sim.matmulCost += op.cost;
      }
    }
    int64_t live = 0, peak = -1;
    if (wantContributors)
      sim.liveBytes.resize(numSteps);
    for (size_t s = 0; s < numSteps; ++s) {
      live += delta[s];
      if (wantContributors)
        sim.liveBytes[s] = live;
      if (live > peak) {
        peak = live;
        sim.peakStep = static_cast<int64_t>(s);
      }
    }
    sim.peakBytes = problem.persistentBytes + std::max<int64_t>(peak, 0);
    if (wantContributors) {
      sim.atPeak.push_back({-1, false, problem.persistentBytes, "persistent"});
      std::vector<PeakContributor> values;
      for (size_t s = 0; s <= static_cast<size_t>(sim.peakStep) && s < numSteps; ++s)
        if (owner[s] == static_cast<int64_t>(s) && end[s] >= sim.peakStep &&
            problem.ops[steps[s].op].bytes > 0) {
          const RematOp &op = problem.ops[steps[s].op];
          values.push_back({steps[s].op, steps[s].isClone, op.bytes, op.name});
        }
      std::stable_sort(
          values.begin(), values.end(),
          [](const PeakContributor &a, const PeakContributor &b) { return a.bytes > b.bytes; });
      sim.atPeak.insert(sim.atPeak.end(), values.begin(), values.end());
      sim.schedule = steps;
      sim.lastUse.resize(numSteps);
      for (size_t s = 0; s < numSteps; ++s)
        sim.lastUse[s] = owner[s] == static_cast<int64_t>(s) ? end[s] : -1;
    }
    return sim;
  }

  const RematProblem &problem;
  const std::vector<bool> &recompute;
  std::vector<RematStep> steps;
  /// Per step: the last step that reads the instance it defines.
  std::vector<int64_t> lastUse;
  /// Per step: the instance a view shares, or the one an in-place op may take over (-1: none).
  std::vector<int64_t> aliasSource, inPlaceSource;
  /// Per op: the step of the instance readers use now, or -1.
  std::vector<int64_t> available;
};

} // namespace

RematSimulation simulateRemat(const RematProblem &problem, const std::vector<bool> &recompute) {
  return ScheduleBuilder(problem, recompute).run(/*wantContributors=*/true);
}

//===----------------------------------------------------------------------===//
// Candidate plans
//===----------------------------------------------------------------------===//

namespace {

using FlowTraits = boost::adjacency_list_traits<boost::vecS, boost::vecS, boost::directedS>;
using FlowGraph = boost::adjacency_list<
    boost::vecS, boost::vecS, boost::directedS, boost::no_property,
    boost::property<
        boost::edge_capacity_t, int64_t,
        boost::property<boost::edge_residual_capacity_t, int64_t,
                        boost::property<boost::edge_reverse_t, FlowTraits::edge_descriptor>>>>;

constexpr int64_t kInfinite = int64_t(1) << 50;

/// The min cut of step 1 over the forward ops in `scope` (others are treated as
/// available for free): returns, per op, whether the cut recomputes it.
class MinCutSolver {
public:
  MinCutSolver(const RematProblem &problem, const std::vector<bool> &candidate)
      : problem(problem), candidate(candidate), needed(neededByBackward(problem)) {
    // Normalise costs and bytes so that lambda = 1 weighs all recompute against
    // all saving.
    double totalCost = 0, totalBytes = 0;
    for (int64_t v = 0; v < problem.numForward; ++v) {
      totalCost += problem.ops[v].cost;
      if (candidate[v])
        totalBytes += static_cast<double>(problem.ops[v].bytes);
    }
    costScale = totalCost > 0 ? 1e9 / totalCost : 0;
    byteScale = totalBytes > 0 ? 1e9 / totalBytes : 0;
  }

  std::vector<bool> solve(double lambda, double matmulFactor) const {
    int64_t numForward = problem.numForward;
    FlowGraph graph(2 * numForward + 2);
    int64_t source = 2 * numForward, sink = 2 * numForward + 1;
    auto capacity = boost::get(boost::edge_capacity, graph);
    auto reverse = boost::get(boost::edge_reverse, graph);
    auto addEdge = [&](int64_t from, int64_t to, int64_t cap) {
      auto forward = boost::add_edge(from, to, graph).first;
      auto backward = boost::add_edge(to, from, graph).first;
      capacity[forward] = cap;
      capacity[backward] = 0;
      reverse[forward] = backward;
      reverse[backward] = forward;
    };
    auto clampCap = [](double x) {
      return static_cast<int64_t>(std::min(std::llround(x), (long long)(kInfinite / 4)));
    };
    for (int64_t v = 0; v < numForward; ++v) {
      const RematOp &op = problem.ops[v];
      int64_t in = 2 * v, out = 2 * v + 1;
      if (op.pinned) {
        addEdge(source, in, kInfinite);
        addEdge(in, out, 0);
      } else {
        double recomputeCost = op.cost * costScale * (op.isMatmul ? matmulFactor : 1.0);
        addEdge(source, in, clampCap(recomputeCost));
        addEdge(in, out,
                candidate[v] ? clampCap(lambda * static_cast<double>(op.bytes) * byteScale)
                             : kInfinite);
      }
      for (int64_t operand : op.operands)
        addEdge(2 * operand + 1, in, kInfinite);
      if (needed[v])
        addEdge(out, sink, kInfinite);
    }
    boost::push_relabel_max_flow(graph, source, sink);
    // The source side: reachable from the source through edges with residual
    // capacity.
    auto residual = boost::get(boost::edge_residual_capacity, graph);
    std::vector<bool> sourceSide(2 * numForward + 2, false);
    std::vector<int64_t> stack = {source};
    sourceSide[source] = true;
    while (!stack.empty()) {
      int64_t u = stack.back();
      stack.pop_back();
      for (auto [e, end] = boost::out_edges(u, graph); e != end; ++e) {
        int64_t w = static_cast<int64_t>(boost::target(*e, graph));
        if (!sourceSide[w] && residual[*e] > 0) {
          sourceSide[w] = true;
          stack.push_back(w);
        }
      }
    }
    std::vector<bool> recompute(problem.ops.size(), false);
    // Kept: the value crosses the cut (its in-node on the source side, its out-node on the
    // sink side); every other candidate is dropped after the forward (recomputed if needed).
    for (int64_t v = 0; v < numForward; ++v)
      if (candidate[v] && !(sourceSide[2 * v] && !sourceSide[2 * v + 1]))
        recompute[v] = true;
    return recompute;
  }

private:
  const RematProblem &problem;
  const std::vector<bool> &candidate;
  std::vector<bool> needed;
  double costScale = 0, byteScale = 0;
};

/// Step 2: keeps a value of `base` only when more than `segmentBytes` of
/// forward values were produced since the last kept one; matmuls stay kept
/// unless `thinMatmuls`.
std::vector<bool> thin(const RematProblem &problem, const std::vector<bool> &candidate,
                       const std::vector<bool> &base, double segmentBytes, bool thinMatmuls) {
  std::vector<bool> recompute = base;
  double accumulated = 0;
  for (int64_t v = 0; v < problem.numForward; ++v) {
    const RematOp &op = problem.ops[v];
    if (op.pinned)
      continue;
    accumulated += static_cast<double>(op.bytes);
    if (!candidate[v] || base[v])
      continue;
    if (accumulated > segmentBytes || (op.isMatmul && !thinMatmuls)) {
      accumulated = 0;
      continue;
    }
    recompute[v] = true;
  }
  return recompute;
}

struct Evaluated {
  std::vector<bool> recompute;
  int64_t peak;
  double cost, matmulCost;
};

/// Orders plans for the frontier: peak, then cost, then matmul cost, then the
/// flags.
bool betterFirst(const Evaluated &a, const Evaluated &b) {
  if (a.peak != b.peak)
    return a.peak < b.peak;
  if (a.cost != b.cost)
    return a.cost < b.cost;
  if (a.matmulCost != b.matmulCost)
    return a.matmulCost < b.matmulCost;
  return a.recompute < b.recompute;
}

/// Collects simulated plans, once each.
class PlanPool {
public:
  explicit PlanPool(const RematProblem &problem) : problem(problem) {}

  void add(const std::vector<bool> &recompute) {
    if (!seen.insert(recompute).second)
      return;
    RematSimulation sim = ScheduleBuilder(problem, recompute).run(false);
    plans.push_back({recompute, sim.peakBytes, sim.extraCost, sim.matmulCost});
  }

  /// Pareto frontier: peaks ascending, costs strictly descending. With `layers` > 1, also the
  /// frontiers of what is left after removing the earlier ones (the neighbourhood the local
  /// search starts from), concatenated.
  std::vector<Evaluated> frontier(int layers = 1) const {
    std::vector<Evaluated> sorted = plans;
    std::sort(sorted.begin(), sorted.end(), betterFirst);
    std::vector<Evaluated> kept;
    for (int layer = 0; layer < layers && !sorted.empty(); ++layer) {
      std::vector<Evaluated> front, rest;
      for (Evaluated &plan : sorted)
        if (front.empty() || plan.cost < front.back().cost)
          front.push_back(std::move(plan));
        else
          rest.push_back(std::move(plan));
      kept.insert(kept.end(), front.begin(), front.end());
      sorted = std::move(rest);
    }
    return kept;
  }

  size_t size() const { return plans.size(); }

private:
  const RematProblem &problem;
  std::set<std::vector<bool>> seen;
  std::vector<Evaluated> plans;
};

/// Candidates grouped by their position in repeated blocks: each group holds
/// the ops at one position of every block of the most common length (at least
/// two blocks), so flipping a group changes that position in every layer.
std::vector<std::vector<size_t>> blockPositions(const RematProblem &problem,
                                                const std::vector<bool> &candidate) {
  std::map<int64_t, int64_t> blockSize;
  for (const RematOp &op : problem.ops)
    if (op.blockId >= 0)
      blockSize[op.blockId] = std::max(blockSize[op.blockId], op.positionInBlock + 1);
  std::map<int64_t, int64_t> sizeCount;
  for (auto [block, size] : blockSize)
    ++sizeCount[size];
  int64_t commonSize = -1, commonCount = 1;
  for (auto [size, count] : sizeCount)
    if (count > commonCount) {
      commonSize = size;
      commonCount = count;
    }
  if (commonSize < 0)
    return {};
  std::vector<std::vector<size_t>> groups(commonSize);
  for (size_t v = 0; v < problem.ops.size(); ++v) {
    const RematOp &op = problem.ops[v];
    if (candidate[v] && op.blockId >= 0 && blockSize[op.blockId] == commonSize &&
        op.positionInBlock >= 0)
      groups[op.positionInBlock].push_back(v);
  }
  std::vector<std::vector<size_t>> repeated;
  for (auto &group : groups)
    if (group.size() >= 2)
      repeated.push_back(std::move(group));
  return repeated;
}

} // namespace

RematFrontier rematFrontier(const RematProblem &problem) {
  std::vector<bool> candidate = rematCandidates(problem);
  PlanPool pool(problem);
  std::vector<bool> keepAll(problem.ops.size(), false);
  pool.add(keepAll);

  // Step 1: the lambda sweep, matmuls discouraged and at their true cost.
  MinCutSolver cuts(problem, candidate);
  std::set<std::vector<bool>> bases = {keepAll};
  for (double matmulFactor : {64.0, 1.0})
    for (int k = -24; k <= 24; ++k)
      bases.insert(cuts.solve(std::pow(2.0, k / 2.0), matmulFactor));

  // Step 2: thin each distinct cut with a geometric sweep of segment bounds.
  double forwardBytes = 0, smallest = 0;
  for (int64_t v = 0; v < problem.numForward; ++v)
    if (!problem.ops[v].pinned && problem.ops[v].bytes > 0) {
      forwardBytes += static_cast<double>(problem.ops[v].bytes);
      smallest = smallest == 0 ? double(problem.ops[v].bytes)
                               : std::min(smallest, double(problem.ops[v].bytes));
    }
  for (const std::vector<bool> &base : bases) {
    pool.add(base);
    if (smallest <= 0)
      continue;
    for (bool thinMatmuls : {false, true})
      for (double bound = smallest / 2; bound <= forwardBytes; bound *= 1.25)
        pool.add(thin(problem, candidate, base, bound, thinMatmuls));
  }

  // Step 3 (repeated blocks): project every frontier plan onto uniform plans,
  // each block's decisions applied to every block.
  std::vector<std::vector<size_t>> positions = blockPositions(problem, candidate);
  auto projectOntoBlocks = [&] {
    if (positions.empty())
      return;
    size_t blocks = 0;
    for (const auto &group : positions)
      blocks = std::max(blocks, group.size());
    for (const Evaluated &plan : pool.frontier())
      for (size_t block = 0; block < blocks; ++block) {
        std::vector<bool> uniform = plan.recompute;
        for (const auto &group : positions)
          if (block < group.size())
            for (size_t v : group)
              uniform[v] = plan.recompute[group[block]];
        pool.add(uniform);
      }
  };
  projectOntoBlocks();

  // Layer checkpointing: keep what a block hands to other blocks (its boundary values), in
  // every block or every k-th one, and recompute the rest of the block; selectively, keep its
  // matmul results too. The searches below refine these (a widened copy of a boundary value
  // is cheaper to recompute than to keep, for instance).
  if (!positions.empty()) {
    std::vector<bool> boundary(problem.ops.size(), false);
    for (int64_t v = 0; v < problem.numForward; ++v)
      for (int64_t operand : problem.ops[v].operands)
        if (problem.ops[operand].blockId >= 0 &&
            problem.ops[operand].blockId != problem.ops[v].blockId)
          boundary[operand] = true;
    int64_t numBlocks = 0;
    for (const RematOp &op : problem.ops)
      numBlocks = std::max(numBlocks, op.blockId + 1);
    for (int64_t stride = 1; stride * stride <= 4 * numBlocks; ++stride)
      for (bool keepMatmuls : {false, true}) {
        std::vector<bool> plan(problem.ops.size(), false);
        for (size_t v = 0; v < problem.ops.size(); ++v) {
          const RematOp &op = problem.ops[v];
          if (!candidate[v] || op.blockId < 0)
            continue;
          bool checkpoint = boundary[v] && (op.blockId + 1) % stride == 0;
          plan[v] = !checkpoint && !(keepMatmuls && op.isMatmul);
        }
        pool.add(plan);
      }
  }

  // Step 4: local search around the frontier while it is cheap enough: single
  // flips (a position of every block at once where blocks repeat), and pairs of
  // flips on small problems (a checkpoint moved by one value is a pair).
  std::vector<std::vector<size_t>> moves;
  std::vector<bool> inBlockMove(candidate.size(), false);
  for (const auto &group : positions) {
    moves.push_back(group);
    for (size_t v : group)
      inBlockMove[v] = true;
  }
  for (size_t v = 0; v < candidate.size(); ++v)
    if (candidate[v] && !inBlockMove[v])
      moves.push_back({v});
  // The cap on simulated steps keeps GPT-sized problems well under a second.
  double workLeft = 6e7;
  for (int round = 0; round < 8; ++round) {
    std::vector<Evaluated> front = pool.frontier(moves.size() <= 32 ? 3 : 1);
    double simulationWork = static_cast<double>(front.size()) * problem.ops.size();
    bool pairs = moves.size() <= 32;
    double numMoves = static_cast<double>(moves.size());
    double roundWork = simulationWork * numMoves * (pairs ? numMoves / 2.0 + 1 : 1);
    if (roundWork > workLeft)
      break;
    workLeft -= roundWork;
    size_t before = pool.size();
    auto flip = [](std::vector<bool> &plan, const std::vector<size_t> &move) {
      for (size_t v : move)
        plan[v] = !plan[v];
    };
    for (const Evaluated &plan : front)
      for (size_t i = 0; i < moves.size(); ++i) {
        std::vector<bool> flipped = plan.recompute;
        flip(flipped, moves[i]);
        pool.add(flipped);
        for (size_t j = i + 1; pairs && j < moves.size(); ++j) {
          std::vector<bool> twice = flipped;
          flip(twice, moves[j]);
          pool.add(twice);
        }
      }
    if (pool.size() == before)
      break;
  }
  projectOntoBlocks();

  RematFrontier result;
  for (const Evaluated &plan : pool.frontier()) {
    result.plans.push_back(plan.recompute);
    result.simulations.push_back(simulateRemat(problem, plan.recompute));
  }
  return result;
}

RematPlan planRemat(const RematProblem &problem, const RematFrontier &frontier,
                    int64_t budgetBytes) {
  RematPlan plan;
  plan.budgetBytes = budgetBytes;
  if (frontier.plans.empty())
    return plan;
  plan.minimumBudgetBytes = frontier.simulations.front().peakBytes;
  // Peaks ascend and costs descend: the last plan that fits is the cheapest
  // that fits.
  size_t chosen = 0;
  for (size_t i = 0; i < frontier.plans.size(); ++i)
    if (frontier.simulations[i].peakBytes <= budgetBytes) {
      chosen = i;
      plan.feasible = true;
    }
  plan.recompute = frontier.plans[chosen];
  plan.simulation = frontier.simulations[chosen];
  if (!plan.feasible) {
    std::ostringstream os;
    os << "memory budget " << budgetBytes << " bytes cannot be met; the smallest peak found is "
       << plan.minimumBudgetBytes << " bytes, dominated by";
    const auto &atPeak = plan.simulation.atPeak;
    for (size_t i = 0; i < atPeak.size() && i < 4; ++i)
      os << (i ? ", " : " ") << (atPeak[i].op < 0 ? "persistent state" : atPeak[i].name)
         << (atPeak[i].isClone ? " (recomputed)" : "") << " (" << atPeak[i].bytes << " bytes)";
    plan.diagnostic = os.str();
  }
  return plan;
}

RematPlan planRemat(const RematProblem &problem, int64_t budgetBytes) {
  return planRemat(problem, rematFrontier(problem), budgetBytes);
}

} // namespace ampc::graph
