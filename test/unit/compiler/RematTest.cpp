//===- RematTest.cpp - graph-plan-remat on the CPU backend ------------------===//
//
// A rematerialized training step is the same computation: the tiny GPT with dropout, planned at
// several budgets, gives bit-identical losses, gradients and updates to the plain step on the
// CPU backend, dropout included (its clones reuse the forward's random stream). And the plan's
// memory figure is what the backend measures: the peak of live temporaries during a micro step
// is within 5% of the planned peak of the micro step's own values.
//
//===--------------------------------------------------------------------------===//

#include "CompileHelpers.h"

#include "compiler/lowering/ModelLoader.h"
#include "passes/OpCost.h"
#include "runtime/cpu/Executor.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

using namespace ampc;

namespace {

/// The tiny GPT with dropout after the attention projection and after the GELU.
std::string tinyGptWithDropout() {
  std::ifstream file(std::string(AMPC_SOURCE_DIR) + "/examples/gpt/tiny.mlir");
  std::stringstream text;
  text << file.rdbuf();
  std::string model = text.str();
  auto replace = [&](const std::string &from, const std::string &to) {
    size_t at = model.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    if (at != std::string::npos)
      model.replace(at, from.size(), to);
  };
  replace("%f = graph.gelu tanh %f1 : tensor<4x32x256xf32>",
          "%fg = graph.gelu tanh %f1 : tensor<4x32x256xf32>\n"
          "    %f = graph.dropout %fg {p = 0.1 : f64} : tensor<4x32x256xf32>");
  replace("%y = graph.add %y3, %attn.proj.b : tensor<4x32x64xf32>, tensor<64xf32>",
          "%yb = graph.add %y3, %attn.proj.b : tensor<4x32x64xf32>, tensor<64xf32>\n"
          "    %y = graph.dropout %yb {p = 0.1 : f64} : tensor<4x32x64xf32>");
  return model;
}

struct Compiled {
  plan::Plan plan;
  /// What graph-plan-remat recorded (0 without a budget).
  int64_t plannedLiveBytes = 0, plannedPeakBytes = 0, persistentBytes = 0;
  int clones = 0, dropoutClones = 0;
  /// The no-remat micro step's values at their busiest op (graph-plan-memory).
  int64_t peakLiveWithoutRemat = 0;
};

/// bf16 training step of `path`, rematerialized for `budget` unless it is empty.
std::optional<Compiled> compile(const std::string &path, const std::string &budget) {
  Compiled out;
  std::string diagnostics;
  auto compiled = test_support::compileFileWith(path, &diagnostics, [&](graph::ModelOp model) {
    graph::GraphBuildTrainingOptions training;
    graph::GraphAssignPrecisionOptions precision;
    precision.mode = "bf16";
    graph::GraphInsertLossScalingOptions scaling;
    if (failed(buildTraining(model, training)) ||
        failed(assignPrecision(model, precision, &scaling)))
      return mlir::failure();
    if (!budget.empty() && failed(planRemat(model, budget, 0)))
      return mlir::failure();
    auto entry = model.getEntryFunction();
    if (auto result = entry->getAttrOfType<graph::RematAttr>(graph::GraphDialect::kRematAttrName)) {
      out.plannedLiveBytes = result.getLiveBytes();
      out.plannedPeakBytes = result.getPeakBytes();
    }
    out.persistentBytes = graph::persistentBytes(model).total();
    entry.walk([&](mlir::Operation *op) {
      if (op->hasAttr(graph::GraphDialect::kRecomputedAttrName)) {
        ++out.clones;
        out.dropoutClones += llvm::isa<graph::DropoutOp>(op);
      }
    });
    if (failed(planMemory(model)))
      return mlir::failure();
    out.peakLiveWithoutRemat =
        entry->getAttrOfType<graph::ArenaAttr>(graph::GraphDialect::kArenaAttrName)
            .getPeakLiveBytes();
    return mlir::success();
  });
  EXPECT_TRUE(compiled.has_value()) << diagnostics;
  if (!compiled)
    return std::nullopt;
  out.plan = std::move(*compiled);
  return out;
}

struct StepResult {
  std::vector<double> losses;
  std::map<std::string, std::vector<double>> gradients;
  std::vector<double> parameters;
  int64_t peakTemporaryBytes = 0;
};

/// Two optimizer steps of two micro steps each, on the same data and seed; the gradients
/// after the first micro step, the parameters at the end.
StepResult train(const plan::Plan &compiled) {
  StepResult result;
  cpu::Executor executor(compiled, cpu::Precision::F32);
  executor.initializeParameters(3);
  executor.randomizeInputs(4);
  for (uint64_t step = 0; step < 2; ++step) {
    for (uint64_t micro = 0; micro < 2; ++micro) {
      cpu::RunOptions options;
      options.seed = 9;
      options.step = step * 2 + micro;
      options.training = true;
      options.totalSteps = 2;
      options.keepTemporaries = false;
      result.losses.push_back(executor.run(options));
      result.peakTemporaryBytes =
          std::max(result.peakTemporaryBytes, executor.peakTemporaryBytes());
      if (step == 0 && micro == 0)
        for (size_t id = 0; id < compiled.buffers.size(); ++id)
          if (compiled.buffers[id].role == plan::BufferRole::State &&
              llvm::StringRef(compiled.buffers[id].name).ends_with(".grad"))
            result.gradients[compiled.buffers[id].name] = executor.bufferValues(id);
    }
    cpu::RunOptions options;
    options.step = step;
    options.totalSteps = 2;
    executor.runOptimizerStep(options);
  }
  for (const plan::Parameter &parameter : compiled.parameters)
    for (double value : executor.parameterValues(parameter.name))
      result.parameters.push_back(value);
  return result;
}

class RematTest : public ::testing::Test {
protected:
  void SetUp() override {
    path = test_support::uniqueTempPath("tiny_dropout");
    std::ofstream(path) << tinyGptWithDropout();
  }
  void TearDown() override { std::remove(path.c_str()); }
  std::string path;
};

TEST_F(RematTest, RecomputedStepIsBitIdenticalAndMeasuredAsPlanned) {
  auto plain = compile(path, "");
  ASSERT_TRUE(plain);
  StepResult reference = train(plain->plan);
  // Without remat the backend's live temporaries peak at graph-plan-memory's peak too.
  EXPECT_NEAR(double(reference.peakTemporaryBytes), double(plain->peakLiveWithoutRemat),
              0.05 * double(plain->peakLiveWithoutRemat));

  // Budgets between the persistent buffers and the peak without remat, as shares of the
  // micro step's own values (the persistent part dominates this small model).
  auto full = compile(path, "100%");
  ASSERT_TRUE(full);
  EXPECT_EQ(full->clones, 0);
  int64_t persistent = full->persistentBytes;
  int dropoutClones = 0, planned = 0;
  int64_t previousPeak = INT64_MAX;
  for (double share : {0.9, 0.75, 0.6, 0.5, 0.4, 0.3}) {
    std::string budget =
        std::to_string(persistent + int64_t(share * double(full->plannedLiveBytes)));
    SCOPED_TRACE(budget);
    std::optional<Compiled> remat;
    {
      ::testing::ScopedTrace quiet(__FILE__, __LINE__, "may be infeasible");
      std::string diagnostics;
      auto probe = test_support::compileFileWith(path, &diagnostics, [&](graph::ModelOp model) {
        graph::GraphBuildTrainingOptions training;
        graph::GraphAssignPrecisionOptions precision;
        graph::GraphInsertLossScalingOptions scaling;
        if (failed(buildTraining(model, training)) ||
            failed(assignPrecision(model, precision, &scaling)))
          return mlir::failure();
        return planRemat(model, budget, 0);
      });
      if (!probe) {
        EXPECT_NE(diagnostics.find("the smallest budget that can be met is"), std::string::npos)
            << diagnostics;
        break;
      }
    }
    remat = compile(path, budget);
    ASSERT_TRUE(remat);
    ++planned;
    ASSERT_GT(remat->clones, 0);
    dropoutClones += remat->dropoutClones;
    EXPECT_GT(remat->plan.instructions.size(), plain->plan.instructions.size());
    EXPECT_LE(remat->plannedPeakBytes, previousPeak);
    previousPeak = remat->plannedPeakBytes;

    StepResult result = train(remat->plan);
    // Bit-identical: the same values computed in the same order, only at other times.
    ASSERT_EQ(result.losses.size(), reference.losses.size());
    for (size_t i = 0; i < result.losses.size(); ++i)
      EXPECT_EQ(result.losses[i], reference.losses[i]) << "micro step " << i;
    EXPECT_EQ(result.gradients, reference.gradients);
    EXPECT_EQ(result.parameters, reference.parameters);

    // The backend's measured peak is the planned one.
    std::printf(
        "budget %s bytes: planned %lld bytes of micro-step values (%d clones, %d of dropout), "
        "measured %lld\n",
        budget.c_str(), (long long)remat->plannedLiveBytes, remat->clones, remat->dropoutClones,
        (long long)result.peakTemporaryBytes);
    EXPECT_NEAR(double(result.peakTemporaryBytes), double(remat->plannedLiveBytes),
                0.05 * double(remat->plannedLiveBytes));
    EXPECT_LT(result.peakTemporaryBytes, reference.peakTemporaryBytes);
  }
  EXPECT_GE(planned, 3);
  // Some budget recomputes a dropout: its mask came out the same.
  EXPECT_GT(dropoutClones, 0);
}

TEST_F(RematTest, InfeasibleBudgetNamesTheSmallestOne) {
  std::string diagnostics;
  auto compiled = test_support::compileFileWith(path, &diagnostics, [&](graph::ModelOp model) {
    graph::GraphBuildTrainingOptions training;
    if (failed(buildTraining(model, training)))
      return mlir::failure();
    // Just above the persistent buffers: no plan keeps the activations that small.
    return planRemat(model, std::to_string(graph::persistentBytes(model).total() + 4096), 0);
  });
  EXPECT_FALSE(compiled.has_value());
  EXPECT_NE(diagnostics.find("the smallest budget that can be met is"), std::string::npos)
      << diagnostics;
  EXPECT_NE(diagnostics.find("dominated by"), std::string::npos) << diagnostics;
}

} // namespace
