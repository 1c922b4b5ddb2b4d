//===- EmulatedKernelsTest.cpp - Generated kernels run in the device emulator -===//
//
// The kernels graph-fuse's groups become (compiler/cuda) are CUDA C++ that only a GPU runs.
// This test compiles a generated kernel's source as host C++ (test/unit/emulation's
// DeviceEmulator.h first) into a shared library with an entry that unpacks a cuLaunchKernel-
// style argument array, launches it in the emulator with the grid and block the device
// program gives it (kernelShape), and compares what it writes with references computed here
// in double. Here: softmax's row kernels (forward, causal or not, and gradient, packed and
// not), the two column-sum kernels, the classifier's loss-and-gradient kernel, and a copy kernel of
// the attention head layout, moved in 16-byte packs. The norms' kernels are in
// EmulatedNormKernelsTest.cpp, the optimizer's in EmulatedOptimizerTest.cpp; the helpers they share
// in EmulatedKernelSupport.h.
//
// The host compiler ($CXX, else c++) runs once per kernel; the libraries live in a temporary
// directory removed at the end.
//
//===----------------------------------------------------------------------===//

#include "../runtime/AttentionReference.h"
#include "CodegenHelpers.h"
#include "EmulatedKernelSupport.h"
#include "compiler/cuda/DeviceProgramBuilder.h"
#include "runtime/numerics/Float16.h"

#include <dlfcn.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

using namespace ampc;
using namespace ampc::test::emulated;
using ampc::test::relativeError;
namespace fs = std::filesystem;

namespace {

/// A softmax over [batch, T, S] rows (causal: row t sees keys j <= t + S - T), trained against
/// an MSE target: forward and gradient are both row kernels.
std::string softmaxModel(int batch, int queries, int keys, bool causal) {
  const std::string x = "tensor<" + std::to_string(batch) + "x" + std::to_string(queries) + "x" +
                        std::to_string(keys) + "xf32>";
  return "graph.model @sm {\n"
         "  graph.param @w : " +
         x +
         " init #graph.normal<std = 1.0>\n"
         "  graph.input @t : " +
         x +
         "\n"
         "  func.func @forward() {\n"
         "    %w = graph.get_param @w : " +
         x +
         "\n"
         "    %t = graph.get_input @t : " +
         x +
         "\n"
         "    %y = graph.softmax %w" +
         (causal ? " causal" : "") + " : " + x +
         "\n"
         "    %l = graph.mse_loss %y, %t : " +
         x +
         "\n"
         "    graph.loss %l : tensor<f32>\n"
         "    return\n"
         "  }\n"
         "}\n";
}

struct SoftmaxCase {
  int batch, queries, keys;
  bool causal;
  /// Whether the forward and the gradient's row kernels take the packed register walk.
  bool packedForward = false, packedBackward = false;
};

class EmulatedSoftmax : public ::testing::TestWithParam<SoftmaxCase> {};

TEST_P(EmulatedSoftmax, ForwardAndGradientRowKernelsMatchADoubleReference) {
  const SoftmaxCase c = GetParam();
  const std::vector<GeneratedKernel> kernels =
      generateForText(softmaxModel(c.batch, c.queries, c.keys, c.causal), kPrecisions[2]);
  const GeneratedKernel *forward = kernelWith(kernels, KernelLaunch::Space::Rows, "graph.softmax");
  const GeneratedKernel *backward =
      kernelWith(kernels, KernelLaunch::Space::Rows, "graph.softmax_grad");
  std::string all;
  for (const GeneratedKernel &kernel : kernels)
    for (const std::string &fused : kernel.fusedOps)
      all += kernel.name + ": " + fused + "\n";
  ASSERT_TRUE(forward && backward) << all;
  EXPECT_EQ(readsPacks(*forward), c.packedForward) << forward->source;
  EXPECT_EQ(readsPacks(*backward), c.packedBackward) << backward->source;
  TemporaryDirectory directory;
  std::mt19937 generator(11);
  const int rows = c.batch * c.queries, L = c.keys;
  const size_t n = static_cast<size_t>(rows) * L;

  HostKernel forwardKernel(*forward, directory.path);
  ASSERT_TRUE(forwardKernel.ok()) << forwardKernel.error() << "\n" << forward->source;
  Arguments fa(*forward);
  const std::vector<double> x = fillRandom(fa[fa.bound("@w").name], "f32", generator);
  forwardKernel.run(forward->launch, fa.bind());
  std::vector<double> y(n, 0.0);
  for (int r = 0; r < rows; ++r) {
    const int valid = c.causal ? std::min(L, r % c.queries + 1 + (L - c.queries)) : L;
    double maximum = -INFINITY, total = 0;
    for (int j = 0; j < valid; ++j)
      maximum = std::max(maximum, x[static_cast<size_t>(r) * L + j]);
    for (int j = 0; j < valid; ++j)
      total += std::exp(x[static_cast<size_t>(r) * L + j] - maximum);
    for (int j = 0; j < valid; ++j)
      y[static_cast<size_t>(r) * L + j] =
          std::exp(x[static_cast<size_t>(r) * L + j] - maximum) / total;
  }
  std::string yName;
  for (const KernelParam &param : forward->params)
    if (param.role == KernelParam::Role::Output)
      yName = param.name;
  ASSERT_FALSE(yName.empty()) << forward->source;
  EXPECT_LT(relativeError(readAll(fa[yName], "f32", n), y), 1e-6);
  expectElementsNear(readAll(fa[yName], "f32", n), y, 1e-5, 1e-7, "y");

  // The gradient with the loss's gradient fused in: dy = (y - t) c, dx = y (dy - sum(dy y)).
  HostKernel backwardKernel(*backward, directory.path);
  ASSERT_TRUE(backwardKernel.ok()) << backwardKernel.error() << "\n" << backward->source;
  Arguments ba(*backward);
  const double scale = 0.61;
  std::vector<char> yBytes(n * 4), cBytes(16);
  for (size_t i = 0; i < n; ++i)
    writeElement(yBytes, "f32", i, y[i]);
  writeElement(cBytes, "f32", 0, scale);
  std::vector<double> t;
  for (const KernelParam &param : backward->params) {
    if (param.role != KernelParam::Role::Input)
      continue;
    if (param.value == "@t")
      t = fillRandom(ba[param.name], "f32", generator);
    else if (param.shape.empty())
      ba[param.name] = cBytes;
    else
      ba[param.name] = yBytes;
  }
  ASSERT_EQ(t.size(), n) << backward->source;
  backwardKernel.run(backward->launch, ba.bind());
  std::vector<double> dx(n);
  for (int r = 0; r < rows; ++r) {
    double dot = 0;
    for (int j = 0; j < L; ++j) {
      const size_t i = static_cast<size_t>(r) * L + j;
      dot += (y[i] - t[i]) * scale * y[i];
    }
    for (int j = 0; j < L; ++j) {
      const size_t i = static_cast<size_t>(r) * L + j;
      dx[i] = y[i] * ((y[i] - t[i]) * scale - dot);
    }
  }
  size_t outputs = 0;
  for (const KernelParam &param : backward->params)
    if (param.role == KernelParam::Role::Output && param.shape.size() == 3) {
      EXPECT_LT(relativeError(readAll(ba[param.name], "f32", n), dx), 1e-5) << param.name;
      expectElementsNear(readAll(ba[param.name], "f32", n), dx, 1e-4, 1e-6 * rms(dx), "dx");
      ++outputs;
    }
  EXPECT_EQ(outputs, 1u) << backward->source;
}

INSTANTIATE_TEST_SUITE_P(Shapes, EmulatedSoftmax,
                         ::testing::Values(
                             // f32 rows of whole packs (4 elements) take the packed walk, up to
                             // 2048 for the forward and 1024 for the gradient (two held
                             // operands); 11, 130 and the block-per-row 2100 do not.
                             SoftmaxCase{2, 9, 40, false, true, true}, SoftmaxCase{3, 7, 11, true},
                             SoftmaxCase{1, 5, 2100, true}, SoftmaxCase{2, 8, 64, true, true, true},
                             SoftmaxCase{1, 8, 1024, true, true, true},
                             SoftmaxCase{1, 4, 2048, false, true, false},
                             SoftmaxCase{2, 4, 130, false}),
                         [](const ::testing::TestParamInfo<SoftmaxCase> &info) {
                           return std::to_string(info.param.batch) + "x" +
                                  std::to_string(info.param.queries) + "x" +
                                  std::to_string(info.param.keys) +
                                  (info.param.causal ? "_causal" : "");
                         });

/// A sum over the leading axis of an input x [rows, L] (f32 or a 16-bit type, summed in f32),
/// fitted to a target: its forward is the two column-sum kernels (the first stage's blocks each
/// sum a chunk of rows into scratch, the second adds the chunks), which bias gradients and norm
/// parameter gradients use too.
std::string columnSumModel(int rows, int length, const std::string &type) {
  const std::string x =
      "tensor<" + std::to_string(rows) + "x" + std::to_string(length) + "x" + type + ">";
  const std::string v = "tensor<" + std::to_string(length) + "xf32>";
  const std::string cast = type == "f32" ? ""
                                         : "    %xf = graph.cast %x : " + x + " -> tensor<" +
                                               std::to_string(rows) + "x" + std::to_string(length) +
                                               "xf32>\n";
  const std::string summed = type == "f32" ? "%x" : "%xf";
  return "graph.model @cs {\n"
         "  graph.param @w : " +
         v +
         " init #graph.normal<std = 1.0>\n"
         "  graph.input @x : " +
         x +
         "\n"
         "  func.func @forward() {\n"
         "    %w = graph.get_param @w : " +
         v +
         "\n"
         "    %x = graph.get_input @x : " +
         x + "\n" + cast + "    %s = graph.sum " + summed + " axes [0] : tensor<" +
         std::to_string(rows) + "x" + std::to_string(length) +
         "xf32>\n"
         "    %l = graph.mse_loss %s, %w : " +
         v +
         "\n"
         "    graph.loss %l : tensor<f32>\n"
         "    return\n"
         "  }\n"
         "}\n";
}

struct ColumnSumCase {
  int rows, length;
  std::string type;
  /// Whether the first stage reads x in 16-byte packs (L a multiple of 8 bf16/f16, 4 f32).
  bool packed;
};

class EmulatedColumnSum : public ::testing::TestWithParam<ColumnSumCase> {};

TEST_P(EmulatedColumnSum, BothStagesMatchADoubleReference) {
  const ColumnSumCase c = GetParam();
  const std::vector<GeneratedKernel> kernels =
      generateForText(columnSumModel(c.rows, c.length, c.type), kPrecisions[2]);
  const GeneratedKernel *first = kernelWith(kernels, KernelLaunch::Space::Columns, "graph.sum");
  const GeneratedKernel *second = kernelWith(kernels, KernelLaunch::Space::Elements, "graph.sum");
  std::string all;
  for (const GeneratedKernel &kernel : kernels)
    for (const std::string &fused : kernel.fusedOps)
      all += kernel.name + ": " + fused + "\n";
  ASSERT_TRUE(first && second) << all;
  EXPECT_EQ(readsPacks(*first), c.packed) << first->source;
  // Several row chunks from 128 rows (one-column walk) or 256 (packed).
  EXPECT_GT(first->launch.chunks, c.rows >= (c.packed ? 256 : 128) ? 1 : 0) << first->source;
  TemporaryDirectory directory;
  HostKernel firstKernel(*first, directory.path), secondKernel(*second, directory.path);
  ASSERT_TRUE(firstKernel.ok()) << firstKernel.error() << "\n" << first->source;
  ASSERT_TRUE(secondKernel.ok()) << secondKernel.error() << "\n" << second->source;

  Arguments fa(*first);
  std::mt19937 generator(17);
  const std::vector<double> x = fillRandom(fa[fa.bound("@x").name], c.type, generator);
  firstKernel.run(first->launch, fa.bind());
  Arguments sa(*second);
  for (const KernelParam &param : second->params)
    if (param.role == KernelParam::Role::Scratch)
      sa[param.name] = fa[param.name];
  secondKernel.run(second->launch, sa.bind());

  std::vector<double> expected(c.length, 0.0);
  for (int r = 0; r < c.rows; ++r)
    for (int j = 0; j < c.length; ++j)
      expected[j] += x[static_cast<size_t>(r) * c.length + j];
  size_t checked = 0;
  for (const KernelParam &param : second->params)
    if (param.role == KernelParam::Role::Output) {
      ASSERT_EQ(param.shape, (std::vector<int64_t>{c.length})) << second->source;
      // f32 sums of c.rows terms of a few units.
      expectElementsNear(readAll(sa[param.name], "f32", c.length), expected, 1e-5, 1e-6 * c.rows,
                         "column sums");
      ++checked;
    }
  EXPECT_EQ(checked, 1u) << second->source;
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, EmulatedColumnSum,
    ::testing::Values(
        // GPT widths in bf16 over several row chunks (the last one shorter),
        // a partial column block (384 = 48 packs of 8 over blocks of 32),
        // f16 and f32 packs, and widths that are not whole packs.
        ColumnSumCase{400, 768, "bf16", true}, ColumnSumCase{290, 3072, "bf16", true},
        ColumnSumCase{260, 384, "bf16", true}, ColumnSumCase{300, 512, "f16", true},
        ColumnSumCase{300, 100, "f32", true}, ColumnSumCase{70, 770, "bf16", false},
        ColumnSumCase{140, 42, "f32", false}),
    [](const ::testing::TestParamInfo<ColumnSumCase> &info) {
      return std::to_string(info.param.rows) + "x" + std::to_string(info.param.length) + "_" +
             info.param.type;
    });

/// A bias added to an input, fitted to a target: in fp16 mode with dynamic loss scaling the
/// bias's gradient is a column sum of the scaled dy, divided by the loss scale as the sum's
/// second stage adds it into the accumulator.
std::string biasModel(int rows, int length) {
  const std::string x = "tensor<" + std::to_string(rows) + "x" + std::to_string(length) + "xf32>";
  const std::string v = "tensor<" + std::to_string(length) + "xf32>";
  return "graph.model @bias {\n"
         "  graph.param @b : " +
         v +
         " init #graph.normal<std = 1.0>\n"
         "  graph.input @x : " +
         x +
         "\n"
         "  graph.input @t : " +
         x +
         "\n"
         "  func.func @forward() {\n"
         "    %b = graph.get_param @b : " +
         v +
         "\n"
         "    %x = graph.get_input @x : " +
         x +
         "\n"
         "    %t = graph.get_input @t : " +
         x +
         "\n"
         "    %y = graph.add %x, %b : " +
         x + ", " + v +
         "\n"
         "    %l = graph.mse_loss %y, %t : " +
         x +
         "\n"
         "    graph.loss %l : tensor<f32>\n"
         "    return\n"
         "  }\n"
         "}\n";
}

TEST(EmulatedColumnSum, UnscalingSecondStageDividesByTheScaleAndRaisesTheFlag) {
  const int rows = 300, length = 512;
  const std::vector<GeneratedKernel> kernels =
      generateForText(biasModel(rows, length), kPrecisions[1]); // fp16, dynamic scaling
  const GeneratedKernel *first = kernelWith(kernels, KernelLaunch::Space::Columns, "graph.sum");
  const GeneratedKernel *second = kernelWith(kernels, KernelLaunch::Space::Elements, "graph.sum");
  ASSERT_TRUE(first && second);
  // The accumulate joined the sum: no kernel of its own adds the bias's gradient.
  bool accumulates = false;
  for (const std::string &fused : second->fusedOps)
    accumulates = accumulates || fused.rfind("graph.accumulate_grad", 0) == 0;
  ASSERT_TRUE(accumulates) << second->source;
  for (const GeneratedKernel &kernel : kernels)
    EXPECT_NE(kernel.kind, "accumulate") << kernel.source;
  TemporaryDirectory directory;
  HostKernel firstKernel(*first, directory.path), secondKernel(*second, directory.path);
  ASSERT_TRUE(firstKernel.ok()) << firstKernel.error() << "\n" << first->source;
  ASSERT_TRUE(secondKernel.ok()) << secondKernel.error() << "\n" << second->source;

  const double scale = 1024.0, start = 0.5;
  std::mt19937 generator(23);
  for (bool overflow : {false, true}) {
    SCOPED_TRACE(overflow ? "an inf in the gradient" : "finite");
    // Stage 1 computes the scaled dy = (y - t) c (the mean's and the loss scale's factor c, a
    // scalar) and sums its columns.
    std::string ops;
    for (const std::string &fused : first->fusedOps)
      ops += fused.substr(0, fused.find(" at ")) + " ";
    ASSERT_EQ(ops, "graph.sub graph.mul graph.sum graph.accumulate_grad ") << first->source;
    Arguments fa(*first);
    const double c = 3.0;
    std::vector<double> y, t;
    for (const KernelParam &param : first->params) {
      if (param.role != KernelParam::Role::Input)
        continue;
      if (param.shape.empty())
        writeElement(fa[param.name], param.elementType, 0, c);
      else if (param.value == "@t")
        t = fillRandom(fa[param.name], param.elementType, generator);
      else
        y = fillRandom(fa[param.name], param.elementType, generator);
      if (overflow && param.value != "@t" && !param.shape.empty()) {
        writeElement(fa[param.name], param.elementType, 7 * length + 3, INFINITY);
        y[7 * length + 3] = INFINITY;
      }
    }
    ASSERT_EQ(y.size(), static_cast<size_t>(rows) * length) << first->source;
    ASSERT_EQ(t.size(), y.size()) << first->source;
    std::vector<double> dy(y.size());
    for (size_t i = 0; i < y.size(); ++i)
      dy[i] = (y[i] - t[i]) * c;
    firstKernel.run(first->launch, fa.bind());
    // Stage 2: the accumulator starts at 0.5, the scaler holds its scale and a clear flag.
    Arguments sa(*second);
    std::string accumulator, scaleArg, found;
    for (const KernelParam &param : second->params) {
      if (param.role == KernelParam::Role::Scratch)
        sa[param.name] = fa[param.name];
      if (param.role != KernelParam::Role::State)
        continue;
      if (param.value.size() > 6 && param.value.substr(param.value.size() - 6) == ".scale")
        scaleArg = param.name;
      else if (param.value.find(".found_nonfinite") != std::string::npos)
        found = param.name;
      else
        accumulator = param.name;
    }
    ASSERT_FALSE(accumulator.empty() || scaleArg.empty() || found.empty()) << second->source;
    for (int j = 0; j < length; ++j)
      writeElement(sa[accumulator], "f32", static_cast<size_t>(j), start);
    writeElement(sa[scaleArg], "f32", 0, scale);
    writeElement(sa[found], "f32", 0, 0.0);
    secondKernel.run(second->launch, sa.bind());

    std::vector<double> expected(length, 0.0);
    for (int r = 0; r < rows; ++r)
      for (int j = 0; j < length; ++j)
        expected[j] += dy[static_cast<size_t>(r) * length + j];
    std::vector<double> added = readAll(sa[accumulator], "f32", length);
    for (int j = 0; j < length; ++j) {
      if (overflow && j == 3) {
        EXPECT_TRUE(std::isinf(added[j])) << added[j];
        continue;
      }
      // f32 sums of 300 terms of a few units, divided by the scale.
      EXPECT_NEAR(added[j], start + expected[j] / scale, 1e-6 * (1 + std::abs(expected[j])))
          << "column " << j;
    }
    EXPECT_EQ(readAll(sa[found], "f32", 1)[0], overflow ? 1.0 : 0.0);
  }
}

/// The classifier alone: logits = h W (h an input [rows, 16], W a parameter [16, classes]: in
/// bf16 mode the logits are stored in bf16, as a language model's head writes them), labels an
/// input; the loss is the mean cross-entropy. Its kernels are the count and the fused
/// loss-and-gradient row kernel, which the test runs on logits it chooses.
std::string classifierModel(int rows, int classes) {
  const std::string x = "tensor<" + std::to_string(rows) + "x" + std::to_string(classes) + "xf32>";
  const std::string h = "tensor<" + std::to_string(rows) + "x16xf32>";
  const std::string w = "tensor<16x" + std::to_string(classes) + "xf32>";
  const std::string labels = "tensor<" + std::to_string(rows) + "xi32>";
  return "graph.model @ce {\n"
         "  graph.param @w : " +
         w +
         " init #graph.normal<std = 1.0>\n"
         "  graph.input @h : " +
         h +
         "\n"
         "  graph.input @labels : " +
         labels +
         "\n"
         "  func.func @forward() {\n"
         "    %w = graph.get_param @w : " +
         w +
         "\n"
         "    %h = graph.get_input @h : " +
         h +
         "\n"
         "    %x = graph.matmul %h, %w : " +
         h + ", " + w +
         "\n"
         "    %y = graph.get_input @labels : " +
         labels +
         "\n"
         "    %l = graph.cross_entropy %x, %y : " +
         x + ", " + labels +
         "\n"
         "    graph.loss %l : tensor<f32>\n"
         "    return\n"
         "  }\n"
         "}\n";
}

struct ClassifierCase {
  int rows, classes;
  /// The precision mode: bf16 or f16 (logits read as the 16-bit copy, gradient stored in it; the
  /// f16 mode's loss scale is the seed the test writes) or fp32.
  std::string type;
  /// Whether the loss-and-gradient kernel reads the logits in 16-byte packs.
  bool packed;
  /// Whether it holds a thread's packs of the row in registers (read once for every pass).
  bool held;
  /// Its block's threads: about 4 packs a thread, 128 to 1024 (1024 when not packed).
  int threads;
};

class EmulatedClassifier : public ::testing::TestWithParam<ClassifierCase> {};

TEST_P(EmulatedClassifier, LossAndGradientMatchADoubleReference) {
  const ClassifierCase c = GetParam();
  const std::vector<GeneratedKernel> kernels =
      generateForText(classifierModel(c.rows, c.classes), c.type == "bf16"  ? kPrecisions[0]
                                                          : c.type == "f16" ? kPrecisions[1]
                                                                            : kPrecisions[2]);
  const GeneratedKernel *kernel =
      kernelWith(kernels, KernelLaunch::Space::Rows, "graph.cross_entropy");
  ASSERT_TRUE(kernel);
  EXPECT_EQ(readsPacks(*kernel), c.packed) << kernel->source;
  EXPECT_EQ(kernel->source.find(" hp_") != std::string::npos, c.held) << kernel->source;
  EXPECT_EQ(kernel->launch.blockSize, c.threads) << kernel->source;
  TemporaryDirectory directory;
  HostKernel host(*kernel, directory.path);
  ASSERT_TRUE(host.ok()) << host.error() << "\n" << kernel->source;

  // Labels: row 1 ignored (ignore_index -100), the others spread over the classes, the first
  // and the last class among them.
  const size_t rows = static_cast<size_t>(c.rows), classes = static_cast<size_t>(c.classes);
  std::vector<long long> labels(rows);
  for (size_t r = 0; r < rows; ++r)
    labels[r] = r == 1 ? -100 : r == 0 ? 0 : r == 2 ? c.classes - 1 : (r * 7919) % classes;
  const double labelled = static_cast<double>(rows - (rows > 1 ? 1 : 0));
  Arguments arguments(*kernel);
  std::mt19937 generator(5);
  std::vector<double> x;
  std::string gradName;
  for (const KernelParam &param : kernel->params) {
    if (param.role == KernelParam::Role::Scalar)
      continue;
    std::vector<char> &bytes = arguments[param.name];
    if (param.role == KernelParam::Role::Input && param.shape.size() == 2) {
      x = fillRandom(bytes, param.elementType, generator);
      for (double &value : x) // logits of a few units, some rows far from zero
        value *= 3.0;
      for (size_t i = 0; i < x.size(); ++i)
        writeElement(bytes, param.elementType, i, x[i] + (i / classes == 3 ? 40.0 : 0.0));
      x = readAll(bytes, param.elementType, x.size());
    } else if (param.role == KernelParam::Role::Input && param.shape.size() == 1) {
      for (size_t r = 0; r < rows; ++r)
        writeElement(bytes, param.elementType, r, static_cast<double>(labels[r]));
    } else if (param.role == KernelParam::Role::Input) {
      writeElement(bytes, param.elementType, 0, 1.0); // the loss's gradient seed
    } else if (param.role == KernelParam::Role::Scratch) {
      writeElement(bytes, "f32", 0, labelled); // the count kernel's result
    } else if (param.role == KernelParam::Role::Output && param.shape.empty()) {
      writeElement(bytes, param.elementType, 0, 0.0); // the count kernel zeroes the loss
    } else if (param.role == KernelParam::Role::Output) {
      gradName = param.name;
    } else if (param.role == KernelParam::Role::ErrorRecord) {
      std::fill(bytes.begin(), bytes.end(), '\0');
    }
  }
  ASSERT_EQ(x.size(), rows * classes) << kernel->source;
  ASSERT_FALSE(gradName.empty()) << kernel->source;
  host.run(kernel->launch, arguments.bind());

  double loss = 0;
  std::vector<double> grad(rows * classes, 0.0);
  for (size_t r = 0; r < rows; ++r) {
    if (labels[r] == -100)
      continue;
    double maximum = -INFINITY, total = 0;
    for (size_t j = 0; j < classes; ++j)
      maximum = std::max(maximum, x[r * classes + j]);
    for (size_t j = 0; j < classes; ++j)
      total += std::exp(x[r * classes + j] - maximum);
    loss += (maximum + std::log(total) - x[r * classes + labels[r]]) / labelled;
    for (size_t j = 0; j < classes; ++j)
      grad[r * classes + j] = (std::exp(x[r * classes + j] - maximum) / total -
                               (static_cast<long long>(j) == labels[r] ? 1.0 : 0.0)) /
                              labelled;
  }
  std::string lossName;
  for (const KernelParam &param : kernel->params)
    if (param.role == KernelParam::Role::Output && param.shape.empty())
      lossName = param.name;
  EXPECT_NEAR(readElement(arguments[lossName], "f32", 0), loss, 1e-5 * std::abs(loss));
  const std::string gradType = arguments.param(gradName).elementType;
  const std::vector<double> got = readAll(arguments[gradName], gradType, rows * classes);
  // f16 stores the smallest probabilities as subnormals, whose step is 2^-24 whatever their size.
  expectElementsNear(got, grad, 2 * storedStep(gradType),
                     1e-7 / classes + (gradType == "f16" ? std::ldexp(1.0, -24) : 0.0), "dlogits");
  for (size_t j = 0; j < classes; ++j)
    ASSERT_EQ(got[classes + j], 0.0) << "the ignored row's gradient, class " << j;
}

INSTANTIATE_TEST_SUITE_P(Shapes, EmulatedClassifier,
                         ::testing::Values(
                             // Classes a multiple of the pack (8 bf16, 4 f32): packed, with the
                             // last round of packs partial (1000 / 8 = 125 packs over 1024
                             // threads; 50304 / 8 = 6288 = 6 rounds and a partial seventh),
                             // held in registers up to 32 of them a thread (50304 bf16: 7 packs
                             // of 4 registers), about 4 packs a thread in blocks of 128 to 1024.
                             ClassifierCase{5, 50304, "bf16", true, true, 1024},
                             ClassifierCase{4, 1000, "bf16", true, true, 128},
                             ClassifierCase{3, 8192, "f16", true, true, 256},
                             ClassifierCase{4, 256, "f32", true, true, 128},
                             ClassifierCase{4, 4100, "f32", true, true, 288},
                             // 40000 f32: 10 packs a thread, 40 registers: read by each pass.
                             ClassifierCase{2, 40000, "f32", true, false, 1024},
                             // Not a multiple of the pack: one element at a time.
                             ClassifierCase{4, 250, "f32", false, false, 1024},
                             ClassifierCase{3, 1001, "bf16", false, false, 1024}),
                         [](const ::testing::TestParamInfo<ClassifierCase> &info) {
                           return std::to_string(info.param.rows) + "x" +
                                  std::to_string(info.param.classes) + "_" + info.param.type;
                         });

/// The attention head layout in miniature: w [2, 5, 48] split into three [2, 5, 16] pieces, the
/// first viewed as [2, 5, 2, 8] and transposed to [2, 2, 5, 8] (heads before tokens), trained
/// against an MSE target: the forward's copy kernel moves whole 16-byte packs.
const char *kHeadLayoutModel = R"(
graph.model @heads {
  graph.param @w : tensor<2x5x48xf32> init #graph.normal<std = 1.0>
  graph.input @t : tensor<2x2x5x8xf32>
  func.func @forward() {
    %w = graph.get_param @w : tensor<2x5x48xf32>
    %t = graph.get_input @t : tensor<2x2x5x8xf32>
    %q0, %k0, %v0 = graph.split %w axis 2 sizes [16, 16, 16] : tensor<2x5x48xf32>
    %q1 = graph.reshape %q0 : tensor<2x5x16xf32> -> tensor<2x5x2x8xf32>
    %q = graph.transpose %q1 [0, 2, 1, 3] : tensor<2x5x2x8xf32>
    %l = graph.mse_loss %q, %t : tensor<2x2x5x8xf32>
    graph.loss %l : tensor<f32>
    return
  }
}
)";

TEST(EmulatedCopy, HeadLayoutCopyMovesPacksAndMatchesTheGather) {
  const std::vector<GeneratedKernel> kernels = generateForText(kHeadLayoutModel, kPrecisions[2]);
  const GeneratedKernel *copy = nullptr;
  for (const GeneratedKernel &kernel : kernels)
    if (kernel.kind == "copy" && kernel.function == "micro_step" && !copy)
      for (const KernelParam &param : kernel.params)
        if (param.value == "@w")
          copy = &kernel;
  ASSERT_NE(copy, nullptr);
  // f32: 4 elements a pack.
  EXPECT_EQ(copy->launch.vectorWidth, 4) << copy->source;
  EXPECT_NE(copy->source.find("Pack<float, 4>"), std::string::npos) << copy->source;
  TemporaryDirectory directory;
  HostKernel kernel(*copy, directory.path);
  ASSERT_TRUE(kernel.ok()) << kernel.error() << "\n" << copy->source;
  Arguments arguments(*copy);
  std::mt19937 generator(3);
  const std::vector<double> w = fillRandom(arguments[arguments.bound("@w").name], "f32", generator);
  kernel.run(copy->launch, arguments.bind());
  size_t checked = 0;
  for (const KernelParam &param : copy->params) {
    if (param.role != KernelParam::Role::Output)
      continue;
    ASSERT_EQ(param.shape, (std::vector<int64_t>{2, 2, 5, 8})) << copy->source;
    const std::vector<double> q = readAll(arguments[param.name], "f32", 160);
    for (int b = 0; b < 2; ++b)
      for (int h = 0; h < 2; ++h)
        for (int t = 0; t < 5; ++t)
          for (int d = 0; d < 8; ++d)
            EXPECT_EQ(q[((b * 2 + h) * 5 + t) * 8 + d], w[(b * 5 + t) * 48 + h * 8 + d])
                << "b " << b << " h " << h << " t " << t << " d " << d;
    ++checked;
  }
  EXPECT_EQ(checked, 1u) << copy->source;
}

} // namespace
