//===- CudaCodegenTest.cpp - generated CUDA kernels compile and read right -===//
//
// Every example model in every precision (bf16, fp16 with dynamic loss scaling, fp32) goes
// through the pipeline up to graph-fuse; every kernel generated for it is compiled with NVRTC
// for sm_80 and sm_90 (cubin) and compute_90 (PTX). Kernels with the same code (the same op
// structure in another layer, model or precision) compile once. Small hand-written models check
// what the generated source says: the fused ops in its header, the vectorised loop, one AdamW
// launch for every parameter; the tiny GPT's layer norms read its residual stream in the type
// it is stored in; GPT-124M's layer-norm row kernels read each row operand once, in 16-byte
// packs. No GPU is needed.
//
//===----------------------------------------------------------------------===//

#include "compiler/cuda/CudaCodegen.h"
#include "CodegenHelpers.h"
#include "CompileHelpers.h"
#include "runtime/cuda/Nvrtc.h"

#include "mlir/Pass/PassManager.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <map>
#include <mutex>
#include <set>
#include <thread>

using namespace ampc;

namespace {

std::vector<std::string> nvrtcOptions() {
  std::vector<std::string> options = cuda::cudaIncludeOptions();
  for (const std::string &option : generatedKernelIncludeOptions())
    options.push_back(option);
  return options;
}

//===----------------------------------------------------------------------===//
// Every example model, every precision, every kernel through NVRTC
//===----------------------------------------------------------------------===//

TEST(CudaCodegen, EveryExampleModelCompilesWithNvrtc) {
  const auto start = std::chrono::steady_clock::now();
  const char *models[] = {"mlp/mlp.mlir", "gpt/tiny.mlir", "gpt/gpt10m.mlir", "gpt/gpt30m.mlir",
                          "gpt/gpt124m.mlir"};
  // Unique code -> one kernel with that code (its source and name).
  std::map<std::string, const GeneratedKernel *> unique;
  std::vector<std::vector<GeneratedKernel>> all;
  std::set<std::string> kinds;
  size_t total = 0;
  for (const char *model : models)
    for (const PrecisionCase &mode : kPrecisions) {
      all.push_back(generateForFile(test_support::examplePath(model), mode));
      const auto &kernels = all.back();
      ASSERT_FALSE(kernels.empty()) << model << " " << mode.mode;
      for (const GeneratedKernel &kernel : kernels) {
        kinds.insert(kernel.kind);
        EXPECT_FALSE(kernel.fusedOps.empty()) << kernel.name;
        if (kernel.source.empty()) {
          EXPECT_EQ(kernel.kind, "attention") << kernel.name;
          continue;
        }
        ++total;
        EXPECT_NE(kernel.source.find("extern \"C\" __global__"), std::string::npos);
        EXPECT_NE(kernel.source.find(kernel.name + "("), std::string::npos) << kernel.name;
        auto [it, inserted] = unique.try_emplace(kernel.code, &kernel);
        if (!inserted)
          EXPECT_EQ(it->second->name, kernel.name) << "equal code, different names";
      }
    }
  // The group kinds the GPT models and the MLP produce, and the scalar kernels.
  for (const char *kind :
       {"elementwise", "copy", "reduction", "embedding", "cross_entropy", "bias_grad", "accumulate",
        "optimizer", "attention", "grad_seed", "lr_schedule", "global_norm", "update_loss_scale"})
    EXPECT_TRUE(kinds.count(kind)) << "no kernel of kind " << kind;
  const auto generated = std::chrono::steady_clock::now();

  // AMPC_CODEGEN_DUMP=<dir> writes every unique kernel to <dir>/<name>.cu for reading.
  if (const char *dump = std::getenv("AMPC_CODEGEN_DUMP"))
    for (auto &entry : unique)
      std::ofstream(std::string(dump) + "/" + entry.second->name + ".cu") << entry.second->source;

  // Compile the unique kernels on two threads, three targets each.
  std::vector<const GeneratedKernel *> work;
  for (auto &entry : unique)
    work.push_back(entry.second);
  const std::vector<std::string> options = nvrtcOptions();
  std::atomic<size_t> next{0};
  std::mutex failuresMutex;
  std::vector<std::string> failures;
  auto compileAll = [&] {
    for (size_t i; (i = next++) < work.size();) {
      const GeneratedKernel &kernel = *work[i];
      try {
        for (const char *arch : {"sm_80", "sm_90"}) {
          std::vector<char> cubin =
              cuda::compileToCubin(kernel.source, kernel.name + ".cu", arch, options);
          if (cubin.size() < 4 || std::string(cubin.data(), 4) != "\x7f"
                                                                  "ELF")
            throw std::runtime_error("not an ELF cubin for " + std::string(arch));
        }
        std::string ptx =
            cuda::compileToPtx(kernel.source, kernel.name + ".cu", "compute_90", options);
        if (ptx.find(".entry " + kernel.name) == std::string::npos)
          throw std::runtime_error("the PTX has no entry " + kernel.name);
      } catch (const std::exception &error) {
        std::lock_guard<std::mutex> lock(failuresMutex);
        failures.push_back(error.what());
      }
    }
  };
  std::thread helper(compileAll);
  compileAll();
  helper.join();
  for (const std::string &failure : failures)
    ADD_FAILURE() << failure;
  const auto end = std::chrono::steady_clock::now();
  auto seconds = [](auto from, auto to) {
    return std::chrono::duration<double>(to - from).count();
  };
  std::printf("[ codegen  ] %zu kernels over 5 models x 3 precisions, %zu unique; generated in "
              "%.2f s, compiled (x3 targets, 2 threads) in %.2f s\n",
              total, unique.size(), seconds(start, generated), seconds(generated, end));
}

//===----------------------------------------------------------------------===//
// What the generated source says
//===----------------------------------------------------------------------===//

const char *kChainModel = R"(
graph.model @chain {
  graph.param @w : tensor<64x64xf32> init #graph.normal<std = 0.02>
  graph.param @b : tensor<64xf32> init #graph.zeros
  graph.input @x : tensor<32x64xf32>
  graph.input @y : tensor<32x64xf32>
  func.func @forward() {
    %w = graph.get_param @w : tensor<64x64xf32>
    %b = graph.get_param @b : tensor<64xf32>
    %x = graph.get_input @x : tensor<32x64xf32>
    %y = graph.get_input @y : tensor<32x64xf32>
    %h = graph.matmul %x, %w : tensor<32x64xf32>, tensor<64x64xf32>
    %hb = graph.add %h, %b : tensor<32x64xf32>, tensor<64xf32>
    %s = graph.silu %hb : tensor<32x64xf32>
    %t = graph.mul %s, %x : tensor<32x64xf32>, tensor<32x64xf32>
    %u = graph.tanh %t : tensor<32x64xf32>
    %l = graph.mse_loss %u, %y : tensor<32x64xf32>
    graph.loss %l : tensor<f32>
    return
  }
}
)";

TEST(CudaCodegen, HeaderListsFusedOpsWithLocations) {
  auto kernels = generateForText(kChainModel, kPrecisions[0]);
  const GeneratedKernel *kernel = findKernel(kernels, "elementwise", "graph.silu");
  ASSERT_NE(kernel, nullptr);
  // silu, mul and tanh run in one kernel; the header names each with its line.
  for (const char *op : {"graph.silu at", "graph.mul at", "graph.tanh at"}) {
    auto it = std::find_if(kernel->fusedOps.begin(), kernel->fusedOps.end(),
                           [&](const std::string &fused) { return fused.rfind(op, 0) == 0; });
    ASSERT_NE(it, kernel->fusedOps.end()) << op;
    EXPECT_NE(it->find(".mlir:"), std::string::npos) << *it;
    EXPECT_NE(kernel->source.find("//   " + *it), std::string::npos) << kernel->source;
  }
  EXPECT_NE(kernel->source.find("// Fused ops:"), std::string::npos);
  EXPECT_NE(kernel->source.find("// graph.silu"), std::string::npos) << kernel->source;
}

TEST(CudaCodegen, AlignedElementwiseChainIsVectorised) {
  auto kernels = generateForText(kChainModel, kPrecisions[0]);
  const GeneratedKernel *kernel = findKernel(kernels, "elementwise", "graph.silu");
  ASSERT_NE(kernel, nullptr);
  // The f32 input @y sets the width: 4 elements, 16 bytes of f32 and 8 of bf16 per access,
  // with a scalar tail.
  EXPECT_EQ(kernel->launch.vectorWidth, 4) << kernel->source;
  EXPECT_NE(kernel->source.find("Pack<bfloat16, 4>"), std::string::npos) << kernel->source;
  EXPECT_NE(kernel->source.find("Pack<float, 4>"), std::string::npos) << kernel->source;
  EXPECT_NE(kernel->source.find("// Scalar tail."), std::string::npos);
  EXPECT_NE(kernel->source.find("roundAs<bfloat16>"), std::string::npos);
  // In f32 the packs hold 4 elements.
  auto f32Kernels = generateForText(kChainModel, kPrecisions[2]);
  const GeneratedKernel *f32Kernel = findKernel(f32Kernels, "elementwise", "graph.silu");
  ASSERT_NE(f32Kernel, nullptr);
  EXPECT_EQ(f32Kernel->launch.vectorWidth, 4);
  EXPECT_NE(f32Kernel->source.find("Pack<float, 4>"), std::string::npos);
  // The kernels compile.
  for (const GeneratedKernel *k : {kernel, f32Kernel})
    EXPECT_NO_THROW(cuda::compileToPtx(k->source, k->name + ".cu", "compute_90", nvrtcOptions()));
}

const char *kBroadcastModel = R"(
graph.model @broadcast {
  graph.param @b : tensor<64xf32> init #graph.zeros
  graph.input @x : tensor<32x64xf32>
  graph.input @y : tensor<32x64xf32>
  func.func @forward() {
    %b = graph.get_param @b : tensor<64xf32>
    %x = graph.get_input @x : tensor<32x64xf32>
    %y = graph.get_input @y : tensor<32x64xf32>
    %u = graph.tanh %x : tensor<32x64xf32>
    %v = graph.mul %u, %b : tensor<32x64xf32>, tensor<64xf32>
    %l = graph.mse_loss %v, %y : tensor<32x64xf32>
    graph.loss %l : tensor<f32>
    return
  }
}
)";

TEST(CudaCodegen, BroadcastOperandIsIndexedNotVectorised) {
  // `%v = mul %u, %b` reads the [64] gain broadcast over [32, 64]: index i % 64.
  auto kernels = generateForText(kBroadcastModel, kPrecisions[2]);
  bool found = false;
  for (const GeneratedKernel &kernel : kernels)
    if (kernel.source.find("(i % 64ll)") != std::string::npos) {
      found = true;
      EXPECT_EQ(kernel.launch.vectorWidth, 1) << kernel.source;
    }
  EXPECT_TRUE(found);
}

TEST(CudaCodegen, AdamWIsOneLaunchOverEveryParameter) {
  auto kernels = generateForText(kChainModel, kPrecisions[1]);
  std::vector<const GeneratedKernel *> optimizers;
  for (const GeneratedKernel &kernel : kernels)
    if (kernel.kind == "optimizer")
      optimizers.push_back(&kernel);
  ASSERT_EQ(optimizers.size(), 1u);
  const GeneratedKernel &adamw = *optimizers.front();
  ASSERT_EQ(adamw.table.size(), 2u);
  EXPECT_EQ(adamw.table[0].param, "w");
  EXPECT_EQ(adamw.table[0].grad, "w.grad");
  EXPECT_EQ(adamw.table[0].copyType, "f16");
  EXPECT_EQ(adamw.table[1].param, "b");
  EXPECT_EQ(adamw.table[0].firstBlock, 0);
  EXPECT_EQ(adamw.table[1].firstBlock, 1); // 4096 elements of w fill one block
  EXPECT_EQ(adamw.launch.elements, 2);
  EXPECT_EQ(adamw.fusedOps.size(), 2u);
  // The entry calls the device code of runtime/cuda/device/Optimizer.cuh with the rule, the
  // chunk and, under loss scaling, the scaler's flag and applied-step count.
  EXPECT_NE(adamw.source.find("#include \"runtime/cuda/device/Optimizer.cuh\""), std::string::npos);
  EXPECT_NE(adamw.source.find("found_nonfinite"), std::string::npos);
  EXPECT_NE(adamw.source.find("multiTensorUpdate<AdamW, 4096ll>(table, tensors, in0, in1, "
                              "ScaledStep{state0, state1});"),
            std::string::npos)
      << adamw.source;
  // There: 16-byte packs of 4 f32 elements, the f16 copy as one 8-byte store, a scalar tail.
  std::ifstream headerFile(AMPC_SOURCE_DIR "/runtime/cuda/device/Optimizer.cuh");
  const std::string header{std::istreambuf_iterator<char>(headerFile), {}};
  EXPECT_NE(header.find("struct OptimizerTensor"), std::string::npos);
  EXPECT_NE(header.find("Pack<float, 4> p = *reinterpret_cast<Pack<float, 4> *>(param + i);"),
            std::string::npos);
  EXPECT_NE(header.find("storeCopyPack<half16>(copy, i, p);"), std::string::npos);
  EXPECT_NE(
      header.find("*reinterpret_cast<unsigned long long *>(static_cast<T *>(copy) + i) = bits;"),
      std::string::npos);
  EXPECT_NE(header.find("static_cast<half16 *>(copy)[i] = fromFloat<half16>(p);"),
            std::string::npos);
  EXPECT_NE(header.find("for (long long i = packEnd + threadIdx.x; i < end;"), std::string::npos);
  EXPECT_EQ(adamw.launch.blockSize, 256);
  EXPECT_NO_THROW(cuda::compileToCubin(adamw.source, adamw.name + ".cu", "sm_90", nvrtcOptions()));
}

TEST(CudaCodegen, PerRunValuesAreReadFromTheRunScalars) {
  // A CUDA graph replays the arguments it captured: the learning-rate schedule and AdamW (bf16:
  // no loss scaling, so its bias correction takes the host's step) read the step and the run
  // length from the run-scalar block, and no kernel takes them by value.
  auto kernels = generateForFile(test_support::examplePath("gpt/tiny.mlir"), kPrecisions[0]);
  size_t readers = 0;
  for (const GeneratedKernel &kernel : kernels) {
    for (const KernelParam &param : kernel.params)
      if (param.role == KernelParam::Role::Scalar)
        EXPECT_TRUE(param.name != "seed" && param.name != "step" && param.name != "totalSteps")
            << kernel.name << " takes " << param.name << " by value";
    if (kernel.kind != "lr_schedule" && kernel.kind != "optimizer")
      continue;
    ++readers;
    EXPECT_NE(kernel.source.find("const unsigned long long *__restrict__ runScalars"),
              std::string::npos)
        << kernel.source;
    EXPECT_NE(kernel.source.find("const unsigned long long step = runScalars[1];"),
              std::string::npos)
        << kernel.source;
    if (kernel.kind == "lr_schedule") {
      EXPECT_NE(kernel.source.find("const unsigned long long totalSteps = runScalars[2];"),
                std::string::npos)
          << kernel.source;
      EXPECT_NO_THROW(
          cuda::compileToCubin(kernel.source, kernel.name + ".cu", "sm_90", nvrtcOptions()));
    }
  }
  EXPECT_EQ(readers, 2u);
}

TEST(CudaCodegen, AccumulateUnscalesAndRaisesTheFlagOnTheDevice) {
  auto kernels = generateForText(kChainModel, kPrecisions[1]);
  const GeneratedKernel *accumulate = findKernel(kernels, "accumulate", "graph.accumulate_grad");
  ASSERT_NE(accumulate, nullptr);
  EXPECT_NE(accumulate->source.find("/ scale"), std::string::npos);
  EXPECT_NE(accumulate->source.find("atomicExch("), std::string::npos);
  EXPECT_NE(accumulate->source.find("__syncthreads_or(nonFinite)"), std::string::npos);
}

TEST(CudaCodegen, MatmulsGetNoKernelAndAttentionAStub) {
  auto kernels = generateForFile(test_support::examplePath("gpt/tiny.mlir"), kPrecisions[0]);
  int attention = 0;
  for (const GeneratedKernel &kernel : kernels) {
    for (const std::string &op : kernel.fusedOps)
      if (kernel.kind != "bias_grad")
        EXPECT_EQ(op.rfind("graph.matmul at", 0), std::string::npos)
            << kernel.kind << " kernel " << kernel.name << " holds a matmul";
    if (kernel.kind == "attention") {
      ++attention;
      EXPECT_TRUE(kernel.source.empty());
      EXPECT_FALSE(kernel.params.empty());
    }
  }
  EXPECT_EQ(attention, 4); // two layers, forward and backward
}

TEST(CudaCodegen, NormsReadTheResidualStreamInItsStoredType) {
  // The tiny GPT's residual stream is [4, 32, 64]. Its layer norms and their gradients (row
  // and column kernels) read it as it is stored: bf16 or f16 in the reduced modes, widened as
  // each element is loaded, so the step holds no f32 copy of it.
  const std::map<std::string, std::string> stored = {
      {"bf16", "bf16"}, {"fp16", "f16"}, {"fp32", "f32"}};
  for (const PrecisionCase &mode : kPrecisions) {
    auto kernels = generateForFile(test_support::examplePath("gpt/tiny.mlir"), mode);
    int forward = 0, backward = 0;
    for (const GeneratedKernel &kernel : kernels) {
      bool norm = false, grad = false;
      for (const std::string &op : kernel.fusedOps) {
        norm = norm || op.rfind("graph.layernorm at", 0) == 0;
        grad = grad || op.rfind("graph.layernorm_grad at", 0) == 0;
      }
      if (!norm && !grad)
        continue;
      forward += norm;
      backward += grad && kernel.launch.space == KernelLaunch::Space::Rows;
      int residuals = 0;
      for (const KernelParam &param : kernel.params)
        if (param.role == KernelParam::Role::Input && param.shape == std::vector<int64_t>{4, 32, 64}) {
          ++residuals;
          EXPECT_EQ(param.elementType, stored.at(mode.mode))
              << mode.mode << ": " << param.value << " in\n" << kernel.source;
        }
      if (kernel.launch.space != KernelLaunch::Space::Elements)
        EXPECT_GE(residuals, 1) << mode.mode << "\n" << kernel.source;
      EXPECT_NO_THROW(
          cuda::compileToPtx(kernel.source, kernel.name + ".cu", "compute_90", nvrtcOptions()))
          << mode.mode << " " << kernel.name;
    }
    // Two per layer and the final norm, forward and backward.
    EXPECT_EQ(forward, 5) << mode.mode;
    EXPECT_EQ(backward, 5) << mode.mode;
  }
}

/// How many times \p needle occurs in \p text.
size_t occurrences(const std::string &text, const std::string &needle) {
  size_t count = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1))
    ++count;
  return count;
}

/// A layer norm of a bf16 residual sum over rows of \p length, trained against an MSE target.
std::string residualNormModel(int length) {
  const std::string l = std::to_string(length);
  const std::string x = "tensor<4x32x" + l + "xbf16>", w = "tensor<4x32x" + l + "xf32>",
                    v = "tensor<" + l + "xf32>";
  return "graph.model @ln {\n"
         "  graph.param @w : " + w + " init #graph.normal<std = 1.0>\n"
         "  graph.param @g : " + v + " init #graph.ones\n"
         "  graph.param @b : " + v + " init #graph.zeros\n"
         "  graph.input @a : " + x + "\n"
         "  graph.input @t : " + x + "\n"
         "  func.func @forward() {\n"
         "    %w = graph.get_param @w : " + w + "\n"
         "    %g = graph.get_param @g : " + v + "\n"
         "    %b = graph.get_param @b : " + v + "\n"
         "    %a = graph.get_input @a : " + x + "\n"
         "    %t = graph.get_input @t : " + x + "\n"
         "    %wc = graph.cast %w : " + w + " -> " + x + "\n"
         "    %x = graph.add %a, %wc : " + x + ", " + x + "\n"
         "    %y = graph.layernorm %x, %g, %b : " + x + ", " + v + ", " + v + "\n"
         "    %l = graph.mse_loss %y, %t : " + x + "\n"
         "    graph.loss %l : tensor<f32>\n"
         "    return\n"
         "  }\n"
         "}\n";
}

TEST(CudaCodegen, LayerNormRowKernelsReadEachRowOnceInPacks) {
  // GPT-124M in bf16: rows of 768 are 96 packs of 8 bf16 (16 bytes), three per lane. Each of
  // the norm's row kernels (the forward; the gradient with its fused producers and the residual
  // gradient's add) reads every [rows, 768] operand with one pack load in its source (the load
  // pass, or for an operand only a consumer reads, the final pass) and never element by
  // element; gamma and beta (f32) come as packs of 8 too (two 16-byte accesses), and the
  // outputs are pack stores (the first layer's dx in f32, for the embeddings' gradients).
  auto kernels = generateForFile(test_support::examplePath("gpt/gpt124m.mlir"), kPrecisions[0]);
  int forward = 0, backward = 0;
  for (const GeneratedKernel &kernel : kernels) {
    if (kernel.launch.space != KernelLaunch::Space::Rows)
      continue;
    bool norm = false, grad = false;
    for (const std::string &op : kernel.fusedOps) {
      norm = norm || op.rfind("graph.layernorm at", 0) == 0;
      grad = grad || op.rfind("graph.layernorm_grad at", 0) == 0;
    }
    if (!norm && !grad)
      continue;
    forward += norm;
    backward += grad;
    ASSERT_EQ(kernel.launch.rowLength, 768) << kernel.source;
    int rowOperands = 0;
    for (const KernelParam &param : kernel.params) {
      if (param.role != KernelParam::Role::Input && param.role != KernelParam::Role::Output)
        continue;
      const std::string element = param.elementType == "f32" ? "float" : "bfloat16";
      const std::string pack = "Pack<" + element + ", 8> *>(" + param.name + ")[";
      if (param.role == KernelParam::Role::Input)
        EXPECT_EQ(occurrences(kernel.source, "reinterpret_cast<const " + pack), 1u)
            << param.name << " in\n" << kernel.source;
      else
        EXPECT_EQ(occurrences(kernel.source, "reinterpret_cast<" + pack), 1u)
            << param.name << " in\n" << kernel.source;
      // Every access goes through the pack: no element-by-element read or write.
      EXPECT_EQ(occurrences(kernel.source, " " + param.name + "["), 0u)
          << param.name << " in\n" << kernel.source;
      if (param.shape.size() == 3) {
        EXPECT_NE(kernel.source.find(param.name + ")[row * 96ll + p]"), std::string::npos)
            << kernel.source;
        ++rowOperands;
      }
    }
    // The forward reads x and writes y; the gradient reads x and dy (or what dy is computed
    // from) and writes dx.
    EXPECT_GE(rowOperands, grad ? 3 : 2) << kernel.source;
    // x is held in registers: three packs of 8 a lane.
    EXPECT_NE(kernel.source.find("float xs[24];"), std::string::npos) << kernel.source;
    EXPECT_NE(kernel.source.find("q < 3;"), std::string::npos) << kernel.source;
    if (grad)
      EXPECT_NE(kernel.source.find("float gs[24];"), std::string::npos) << kernel.source;
  }
  // Two per layer and the final norm, forward and backward.
  EXPECT_EQ(forward, 25);
  EXPECT_EQ(backward, 25);

  // Rows of 770 are not whole packs of 8: the row is walked element by element, once per pass.
  auto odd = generateForText(residualNormModel(770), kPrecisions[0]);
  int oddKernels = 0;
  for (const GeneratedKernel &kernel : odd)
    if (kernel.launch.space == KernelLaunch::Space::Rows) {
      ++oddKernels;
      EXPECT_EQ(kernel.source.find("Pack<"), std::string::npos) << kernel.source;
      EXPECT_NE(kernel.source.find("for (long long j = lane; j < L; j += 32)"), std::string::npos)
          << kernel.source;
    }
  EXPECT_EQ(oddKernels, 2); // layernorm, layernorm_grad
  // The same model at 768 takes the packed walk, in both row kernels.
  auto even = generateForText(residualNormModel(768), kPrecisions[0]);
  int evenKernels = 0;
  for (const GeneratedKernel &kernel : even)
    if (kernel.launch.space == KernelLaunch::Space::Rows) {
      ++evenKernels;
      EXPECT_NE(kernel.source.find("const Pack<bfloat16, 8> pk_"), std::string::npos)
          << kernel.source;
      EXPECT_NO_THROW(
          cuda::compileToPtx(kernel.source, kernel.name + ".cu", "compute_90", nvrtcOptions()))
          << kernel.name;
    }
  EXPECT_EQ(evenKernels, 2);
}

TEST(CudaCodegen, NvrtcErrorNamesTheKernel) {
  auto kernels = generateForText(kChainModel, kPrecisions[0]);
  ASSERT_FALSE(kernels.empty());
  const GeneratedKernel &kernel = kernels.front();
  std::string broken = kernel.source + "\nstatic_assert(false, \"broken on purpose\");\n";
  try {
    cuda::compileToCubin(broken, kernel.name + ".cu", "sm_90", nvrtcOptions());
    FAIL() << "expected NvrtcError";
  } catch (const cuda::NvrtcError &error) {
    EXPECT_NE(std::string(error.what()).find(kernel.name), std::string::npos);
    EXPECT_NE(error.log().find("broken on purpose"), std::string::npos);
    EXPECT_EQ(error.source(), broken);
  }
}

} // namespace
