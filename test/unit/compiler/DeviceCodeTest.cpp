//===- DeviceCodeTest.cpp - the device program's kernels compiled with NVRTC -===//
//
// The tiny GPT in fp16 (dynamic loss scaling, so every kind of step kernel) gets its device
// program compiled the way `ampc compile` does: every module for sm_80 and sm_90 (cubin) and
// compute_90 (PTX), the flash-attention module with exactly the entries the program launches,
// the result a valid plan; compiling again finds every binary in the kernel cache. Built only
// with the CUDA toolkit; no GPU is needed.
//
//===--------------------------------------------------------------------------===//

#include "compiler/cuda/DeviceCode.h"
#include "CompileHelpers.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>

using namespace ampc;

namespace {

TEST(DeviceCode, CompilesTheTinyGptIntoAValidPlan) {
  ASSERT_TRUE(deviceCompilerAvailable());
  const std::filesystem::path cache = std::filesystem::temp_directory_path() /
                                      ("ampc_kernel_cache_test_" + std::to_string(::getpid()));
  std::filesystem::remove_all(cache);
  ::setenv("AMPC_KERNEL_CACHE", cache.c_str(), 1);

  mlir::MLIRContext context;
  registerModelDialects(context);
  llvm::SourceMgr sourceMgr;
  mlir::SourceMgrDiagnosticHandler handler(sourceMgr, &context);
  auto loaded = loadModel(test_support::examplePath("gpt/tiny.mlir"), sourceMgr, context);
  ASSERT_TRUE(succeeded(loaded));
  graph::TrainingPipelineConfig config;
  config.precision.mode = "fp16";
  config.scaling.mode = "dynamic";
  ASSERT_TRUE(succeeded(runTrainingPipeline(*loaded, config)));
  PlanProvenance provenance;
  auto compiled = emitPlan(loaded->model, &provenance);
  ASSERT_TRUE(succeeded(compiled));
  plan::Plan plan = std::move(*compiled);

  DeviceProgramSources sources = buildDeviceProgram(loaded->model, plan, provenance);
  DeviceProgramSources again = sources;
  const DeviceCompileStats first = compileDeviceModules(sources, 2);
  EXPECT_EQ(first.modules, sources.program.modules.size());
  EXPECT_EQ(first.compiled, 3 * first.modules);
  EXPECT_EQ(first.cached, 0u);
  std::printf("[ device   ] tiny fp16: %zu modules x 3 targets compiled in %.1f s on 2 threads\n",
              first.modules, first.seconds);
  for (const plan::DeviceModule &module : sources.program.modules) {
    for (const std::vector<uint8_t> *cubin : {&module.cubinSm80, &module.cubinSm90}) {
      ASSERT_GE(cubin->size(), 4u) << module.name;
      EXPECT_EQ(std::string(cubin->begin(), cubin->begin() + 4), "\x7f"
                                                                 "ELF")
          << module.name;
    }
    EXPECT_NE(module.ptx.find(".target sm_90"), std::string::npos) << module.name;
  }
  for (const plan::DeviceKernel &kernel : sources.program.kernels)
    EXPECT_NE(sources.program.modules[kernel.module].ptx.find(".entry " + kernel.entry + "("),
              std::string::npos)
        << kernel.entry;
  plan.device = sources.program;
  EXPECT_NO_THROW(plan::validatePlan(plan));

  // The same sources again: every binary from the cache, byte for byte.
  const DeviceCompileStats second = compileDeviceModules(again, 2);
  EXPECT_EQ(second.compiled, 0u);
  EXPECT_EQ(second.cached, 3 * second.modules);
  for (size_t m = 0; m < again.program.modules.size(); ++m) {
    EXPECT_EQ(again.program.modules[m].cubinSm90, sources.program.modules[m].cubinSm90);
    EXPECT_EQ(again.program.modules[m].ptx, sources.program.modules[m].ptx);
  }
  ::unsetenv("AMPC_KERNEL_CACHE");
  std::filesystem::remove_all(cache);
}

/// A model with what the examples lack: dropout (fused into a norm gradient's kernel in the
/// backward pass), rmsnorm, silu, softmax, max with keepdims, a broadcast subtraction.
const char *kMixedModel = R"(
graph.model @mix {
  graph.param @w : tensor<16x32xf32> init #graph.normal<std = 0.1>
  graph.param @g : tensor<32xf32> init #graph.ones
  graph.input @x : tensor<4x8x16xf32>
  graph.input @y : tensor<4x8x32xf32>
  func.func @forward() {
    %w = graph.get_param @w : tensor<16x32xf32>
    %g = graph.get_param @g : tensor<32xf32>
    %x = graph.get_input @x : tensor<4x8x16xf32>
    %y = graph.get_input @y : tensor<4x8x32xf32>
    %h = graph.matmul %x, %w : tensor<4x8x16xf32>, tensor<16x32xf32>
    %d = graph.dropout %h {p = 0.1 : f64} : tensor<4x8x32xf32>
    %n = graph.rmsnorm %d, %g : tensor<4x8x32xf32>, tensor<32xf32>
    %s = graph.silu %n : tensor<4x8x32xf32>
    %m = graph.max %s axes [2] keepdims : tensor<4x8x32xf32>
    %sm = graph.softmax %s : tensor<4x8x32xf32>
    %e = graph.sub %sm, %m : tensor<4x8x32xf32>, tensor<4x8x1xf32>
    %l = graph.mse_loss %e, %y : tensor<4x8x32xf32>
    graph.loss %l : tensor<f32>
    return
  }
}
)";

TEST(DeviceCode, CompilesDropoutNormsAndReductions) {
  ::setenv("AMPC_KERNEL_CACHE", "off", 1);
  const std::string path = test_support::uniqueTempPath("ampc_device_code_mix");
  std::ofstream(path) << kMixedModel;
  for (const char *mode : {"bf16", "fp32"}) {
    mlir::MLIRContext context;
    registerModelDialects(context);
    llvm::SourceMgr sourceMgr;
    mlir::SourceMgrDiagnosticHandler handler(sourceMgr, &context);
    auto loaded = loadModel(path, sourceMgr, context);
    ASSERT_TRUE(succeeded(loaded));
    graph::TrainingPipelineConfig config;
    config.precision.mode = mode;
    ASSERT_TRUE(succeeded(runTrainingPipeline(*loaded, config)));
    PlanProvenance provenance;
    auto compiled = emitPlan(loaded->model, &provenance);
    ASSERT_TRUE(succeeded(compiled));
    DeviceCodeResult result = attachDeviceProgram(loaded->model, *compiled, provenance);
    EXPECT_FALSE(result.unsupported) << mode << ": " << result.summary;
    EXPECT_FALSE(compiled->device.empty()) << mode;
    // The dropout's seed and step reach every kernel that draws a mask, through the run-scalar
    // block: no launch takes a per-run value by value, which a replayed graph would keep.
    size_t seeded = 0, byValue = 0;
    for (const plan::DeviceFunction *f :
         {&compiled->device.microStep, &compiled->device.optimizerStep})
      for (const plan::DeviceGroup &group : f->groups)
        for (const plan::DeviceStep &step : group.steps)
          if (const auto *launch = std::get_if<plan::LaunchStep>(&step))
            for (const plan::DeviceArgument &arg : launch->args) {
              seeded += f == &compiled->device.microStep && arg.kind == plan::ArgKind::RunScalars;
              byValue += arg.kind == plan::ArgKind::Seed || arg.kind == plan::ArgKind::Step ||
                         arg.kind == plan::ArgKind::TotalSteps;
            }
    EXPECT_GE(seeded, 2u) << mode; // the forward mask and the backward one
    EXPECT_EQ(byValue, 0u) << mode;
  }
  std::remove(path.c_str());
  ::unsetenv("AMPC_KERNEL_CACHE");
}

TEST(DeviceCode, AttachDescribesWhatItCompiled) {
  ::setenv("AMPC_KERNEL_CACHE", "off", 1);
  mlir::MLIRContext context;
  registerModelDialects(context);
  llvm::SourceMgr sourceMgr;
  mlir::SourceMgrDiagnosticHandler handler(sourceMgr, &context);
  auto loaded = loadModel(test_support::examplePath("mlp/mlp.mlir"), sourceMgr, context);
  ASSERT_TRUE(succeeded(loaded));
  ASSERT_TRUE(succeeded(runTrainingPipeline(*loaded, {})));
  PlanProvenance provenance;
  auto compiled = emitPlan(loaded->model, &provenance);
  ASSERT_TRUE(succeeded(compiled));
  DeviceCodeResult result = attachDeviceProgram(loaded->model, *compiled, provenance);
  ::unsetenv("AMPC_KERNEL_CACHE");
  EXPECT_FALSE(result.unsupported);
  EXPECT_EQ(result.summary.rfind("gpu: ", 0), 0u) << result.summary;
  EXPECT_NE(result.summary.find("0 of "), std::string::npos) << result.summary;
  EXPECT_FALSE(compiled->device.empty());
  EXPECT_NO_THROW(plan::validatePlan(*compiled));
}

} // namespace
