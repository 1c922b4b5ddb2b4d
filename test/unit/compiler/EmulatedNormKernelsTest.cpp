//===- EmulatedNormKernelsTest.cpp - Norm kernels run in the device emulator ---===//
//
// Layer norm's and RMS norm's generated kernels (EmulatedKernelsTest.cpp says how they run in
// the emulator): the forward row kernel, the gradient's row kernel (its statistics and, over a
// residual sum with a parameter, dx) and its two-stage column sums (dgamma, dbeta), with row
// lengths that are not multiples of a warp, rows short enough for a warp each and longer ones
// for a block each, more rows than a block covers, and several row chunks, in f32 and with bf16
// or f16 x and dy (which the kernels widen as they load them, computing in f32). Rows of whole
// packs take the packed walk (the row read once, in 16-byte packs, into registers), the others
// the element loop; each case says which it expects, and y, dx, dgamma and dbeta are checked
// element by element against references in double.
//
//===----------------------------------------------------------------------===//

#include "../runtime/AttentionReference.h"
#include "CodegenHelpers.h"
#include "EmulatedKernelSupport.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

using namespace ampc;
using namespace ampc::test::emulated;
using ampc::test::relativeError;

namespace {

/// A layer norm over rows of length L, trained against an MSE target: its forward is a row
/// kernel, its backward a row kernel (dx) and a column kernel (dgamma, dbeta). x and the target
/// have \p type; gamma and beta are f32.
std::string layerNormModel(int rows, int length, const std::string &type) {
  const std::string x = "tensor<" + std::to_string(rows) + "x" + std::to_string(length) + "x" +
                        type + ">";
  const std::string v = "tensor<" + std::to_string(length) + "xf32>";
  return "graph.model @ln {\n"
         "  graph.param @g : " + v + " init #graph.normal<std = 0.5>\n"
         "  graph.param @b : " + v + " init #graph.normal<std = 0.5>\n"
         "  graph.input @x : " + x + "\n"
         "  graph.input @t : " + x + "\n"
         "  func.func @forward() {\n"
         "    %g = graph.get_param @g : " + v + "\n"
         "    %b = graph.get_param @b : " + v + "\n"
         "    %x = graph.get_input @x : " + x + "\n"
         "    %t = graph.get_input @t : " + x + "\n"
         "    %y = graph.layernorm %x, %g, %b : " + x + ", " + v + ", " + v + "\n"
         "    %l = graph.mse_loss %y, %t : " + x + "\n"
         "    graph.loss %l : tensor<f32>\n"
         "    return\n"
         "  }\n"
         "}\n";
}

/// The same layer norm over a residual sum x = a + w, with w a parameter ([rows, L], f32, read
/// through a cast in the reduced modes): the backward's row kernel then writes dx (the
/// parameter's gradient), which the test checks element by element.
std::string residualLayerNormModel(int rows, int length, const std::string &type) {
  const std::string x = "tensor<" + std::to_string(rows) + "x" + std::to_string(length) + "x" +
                        type + ">";
  const std::string w = "tensor<" + std::to_string(rows) + "x" + std::to_string(length) + "xf32>";
  const std::string v = "tensor<" + std::to_string(length) + "xf32>";
  const std::string cast =
      type == "f32" ? "" : "    %wc = graph.cast %w : " + w + " -> " + x + "\n";
  return "graph.model @ln {\n"
         "  graph.param @w : " + w + " init #graph.normal<std = 1.0>\n"
         "  graph.param @g : " + v + " init #graph.normal<std = 0.5>\n"
         "  graph.param @b : " + v + " init #graph.normal<std = 0.5>\n"
         "  graph.input @a : " + x + "\n"
         "  graph.input @t : " + x + "\n"
         "  func.func @forward() {\n"
         "    %w = graph.get_param @w : " + w + "\n"
         "    %g = graph.get_param @g : " + v + "\n"
         "    %b = graph.get_param @b : " + v + "\n"
         "    %a = graph.get_input @a : " + x + "\n"
         "    %t = graph.get_input @t : " + x + "\n" + cast +
         "    %x = graph.add %a, " + (type == "f32" ? "%w" : "%wc") + " : " + x + ", " + x + "\n"
         "    %y = graph.layernorm %x, %g, %b : " + x + ", " + v + ", " + v + "\n"
         "    %l = graph.mse_loss %y, %t : " + x + "\n"
         "    graph.loss %l : tensor<f32>\n"
         "    return\n"
         "  }\n"
         "}\n";
}

/// Runs a norm gradient's two-stage column sums after its row kernel (\p backward, whose
/// arguments \p ra hold the row statistics it left in scratch; scratch slices are shared by
/// name within a group): the first stage (\p columns, its inputs already in \p ca) writes
/// each chunk's partial sums, the second (\p totals) adds them. Returns the second stage's
/// arguments, which hold dgamma (and dbeta): as outputs, or added into gradient accumulators
/// (state) that start at kAccumulatorStart (columnTotals reads either).
/// Binds the inputs of a norm gradient's kernels: x (\p xValue) and gamma (@g) as the forward's
/// arguments \p fa hold them, the target @t, the scalar loss scale, and the forward's result
/// \p y: the input bound to \p yValue, or with \p yValue empty any other [rows, L] input.
void bindNormGradientInputs(Arguments &arguments, const GeneratedKernel &kernel, Arguments &fa,
                            const std::string &xValue, const std::vector<char> &t,
                            const std::vector<char> &scale, const std::vector<char> &y,
                            const std::string &yValue) {
  for (const KernelParam &param : kernel.params) {
    if (param.role != KernelParam::Role::Input)
      continue;
    if (param.value == xValue)
      arguments[param.name] = fa[fa.bound(xValue).name];
    else if (param.value == "@g")
      arguments[param.name] = fa[fa.bound("@g").name];
    else if (param.value == "@t")
      arguments[param.name] = t;
    else if (param.shape.empty())
      arguments[param.name] = scale;
    else if (yValue.empty() || param.value == yValue)
      arguments[param.name] = y;
    else
      ADD_FAILURE() << "unexpected input " << param.value << " in\n" << kernel.source;
  }
}

/// What a gradient accumulator holds before the step's column totals are added.
constexpr double kAccumulatorStart = 0.5;

Arguments runColumnSums(const GeneratedKernel &backward, Arguments &ra,
                        const GeneratedKernel &columns, Arguments &ca,
                        const HostKernel &columnKernel, const GeneratedKernel &totals,
                        const HostKernel &totalKernel) {
  for (const KernelParam &param : columns.params)
    if (param.role == KernelParam::Role::Scratch)
      for (const KernelParam &rowParam : backward.params)
        if (rowParam.role == KernelParam::Role::Scratch && rowParam.name == param.name)
          ca[param.name] = ra[rowParam.name];
  columnKernel.run(columns.launch, ca.bind());
  Arguments ta(totals);
  for (const KernelParam &param : totals.params) {
    if (param.role == KernelParam::Role::Scratch)
      ta[param.name] = ca[param.name];
    if (param.role == KernelParam::Role::State)
      for (int64_t j = 0; j < param.shape[0]; ++j)
        writeElement(ta[param.name], "f32", static_cast<size_t>(j), kAccumulatorStart);
  }
  totalKernel.run(totals.launch, ta.bind());
  return ta;
}

/// The column totals the second stage left: its outputs, and what it added into each
/// accumulator.
std::vector<std::vector<double>> columnTotals(const GeneratedKernel &totals, Arguments &ta,
                                              int length) {
  std::vector<std::vector<double>> result;
  for (const KernelParam &param : totals.params)
    if (param.role == KernelParam::Role::Output || param.role == KernelParam::Role::State) {
      result.push_back(readAll(ta[param.name], "f32", static_cast<size_t>(length)));
      if (param.role == KernelParam::Role::State)
        for (double &value : result.back())
          value -= kAccumulatorStart;
    }
  return result;
}

struct LayerNormCase {
  int rows, length;
  /// The dtype of x, the target, y and dy: f32 (fp32 mode), or bf16 or f16 (bf16 or fp16 mode),
  /// where the norm and its gradient read the reduced values as they are and compute in f32.
  std::string type = "f32";
  /// x is a residual sum with a parameter (residualLayerNormModel): the gradient writes dx.
  bool residual = false;
  /// Whether the forward and the gradient's row kernels take the packed register walk.
  bool packedForward = false, packedBackward = false;
};

class EmulatedLayerNorm : public ::testing::TestWithParam<LayerNormCase> {};

TEST_P(EmulatedLayerNorm, RowAndColumnKernelsMatchADoubleReference) {
  const LayerNormCase c = GetParam();
  // fp32 storage: the kernels' own arithmetic is what is compared. bf16: the same arithmetic
  // from bf16 x, with y and dy rounded to bf16 where they are stored.
  const bool bf16 = c.type != "f32"; // a reduced type (bf16 or f16)
  const PrecisionCase mode = c.type == "bf16"  ? kPrecisions[0]
                             : c.type == "f16" ? PrecisionCase{"fp16", "none"}
                                               : kPrecisions[2];
  const std::vector<GeneratedKernel> kernels = generateForText(
      c.residual ? residualLayerNormModel(c.rows, c.length, c.type)
                 : layerNormModel(c.rows, c.length, c.type),
      mode);
  const GeneratedKernel *forward = kernelWith(kernels, KernelLaunch::Space::Rows, "graph.layernorm");
  const GeneratedKernel *backward =
      kernelWith(kernels, KernelLaunch::Space::Rows, "graph.layernorm_grad");
  const GeneratedKernel *columns =
      kernelWith(kernels, KernelLaunch::Space::Columns, "graph.layernorm_grad");
  const GeneratedKernel *totals =
      kernelWith(kernels, KernelLaunch::Space::Elements, "graph.layernorm_grad");
  ASSERT_TRUE(forward && backward && columns && totals);
  // The column sums read x and dy in 16-byte packs when L is a multiple of the pack.
  EXPECT_EQ(readsPacks(*columns), c.length % (c.type == "f32" ? 4 : 8) == 0) << columns->source;
  // x: the input, or the residual sum (a separate elementwise kernel's result, which the
  // forward reads as its one [rows, L] input).
  std::string xValue = "@x";
  if (c.residual)
    for (const KernelParam &param : forward->params)
      if (param.role == KernelParam::Role::Input &&
          param.shape == std::vector<int64_t>{c.rows, c.length})
        xValue = param.value;
  // Every kernel that reads x reads it in its own type, and no kernel reads or writes an f32
  // tensor of x's shape in the reduced modes: no widened copy of x (or of y, t or dy) exists
  // (the residual parameter's f32 weight and gradient aside).
  for (const GeneratedKernel *kernel : {forward, backward, columns})
    EXPECT_EQ(Arguments(*kernel).bound(xValue).elementType, c.type) << kernel->source;
  for (const GeneratedKernel *kernel : {forward, backward, columns})
    for (const KernelParam &param : kernel->params)
      if (bf16 && param.shape == std::vector<int64_t>{c.rows, c.length})
        EXPECT_EQ(param.elementType, c.type) << param.name << " of\n" << kernel->source;
  // Warp-per-row kernels of rows that are whole packs hold the row in registers.
  EXPECT_EQ(readsPacks(*forward), c.packedForward) << forward->source;
  EXPECT_EQ(readsPacks(*backward), c.packedBackward) << backward->source;
  // Rows up to 2048 long get a warp each, longer ones a block.
  for (const GeneratedKernel *kernel : {forward, backward})
    EXPECT_EQ(kernel->source.find("warpSum(") != std::string::npos, c.length <= 2048)
        << kernel->source;
  TemporaryDirectory directory;
  std::mt19937 generator(5);
  const size_t n = static_cast<size_t>(c.rows) * c.length;
  const double eps = 1e-5;

  // Forward: y = (x - mean) rstd g + b.
  HostKernel forwardKernel(*forward, directory.path);
  ASSERT_TRUE(forwardKernel.ok()) << forwardKernel.error() << "\n" << forward->source;
  Arguments fa(*forward);
  const std::vector<double> x = fillRandom(fa[fa.bound(xValue).name], c.type, generator, 3.0);
  const std::vector<double> g = fillRandom(fa[fa.bound("@g").name], "f32", generator);
  const std::vector<double> b = fillRandom(fa[fa.bound("@b").name], "f32", generator);
  forwardKernel.run(forward->launch, fa.bind());
  std::vector<double> mean(c.rows), rstd(c.rows), xhat(n), y(n);
  for (int r = 0; r < c.rows; ++r) {
    double sum = 0, squares = 0;
    for (int j = 0; j < c.length; ++j)
      sum += x[r * c.length + j];
    mean[r] = sum / c.length;
    for (int j = 0; j < c.length; ++j)
      squares += (x[r * c.length + j] - mean[r]) * (x[r * c.length + j] - mean[r]);
    rstd[r] = 1 / std::sqrt(squares / c.length + eps);
    for (int j = 0; j < c.length; ++j) {
      xhat[r * c.length + j] = (x[r * c.length + j] - mean[r]) * rstd[r];
      y[r * c.length + j] = xhat[r * c.length + j] * g[j] + b[j];
    }
  }
  // y as the forward stores it (bf16: rounded once, from f32 arithmetic; an element whose f32
  // and double values round to neighbouring bf16 values is rare, and costs 2^-8 of it).
  std::vector<double> ys(n);
  for (size_t i = 0; i < n; ++i)
    ys[i] = storedAs(c.type, y[i]);
  // The forward's outputs: y, and whatever else it writes is checked by the backward.
  bool sawY = false;
  for (const KernelParam &param : forward->params)
    if (param.role == KernelParam::Role::Output && param.shape.size() == 2) {
      EXPECT_EQ(param.elementType, c.type) << forward->source;
      EXPECT_LT(relativeError(readAll(fa[param.name], param.elementType, n), ys), bf16 ? 1e-3 : 1e-6)
          << param.name;
      // Element by element: one step of the stored type (the f32 and the double value may round
      // to neighbours), and f32 rounding near zero.
      expectElementsNear(readAll(fa[param.name], param.elementType, n), ys, storedStep(c.type),
                         1e-5 * rms(ys), "y");
      sawY = true;
    }
  EXPECT_TRUE(sawY);

  // Backward. The loss's gradient is fused into the norm gradient's row kernel as its producer:
  // dy = (y - t) c, with c the mean's scale. The row kernel leaves (mean, rstd) per row in
  // scratch (x is an input, so no dx is stored); the column kernel computes dgamma = sum dy xhat
  // and dbeta = sum dy from the same inputs and those statistics.
  HostKernel rowKernel(*backward, directory.path), columnKernel(*columns, directory.path),
      totalKernel(*totals, directory.path);
  ASSERT_TRUE(rowKernel.ok()) << rowKernel.error() << "\n" << backward->source;
  ASSERT_TRUE(columnKernel.ok()) << columnKernel.error() << "\n" << columns->source;
  ASSERT_TRUE(totalKernel.ok()) << totalKernel.error() << "\n" << totals->source;
  for (const GeneratedKernel *kernel : {backward, columns, totals}) {
    std::string ops;
    for (const std::string &fused : kernel->fusedOps)
      ops += fused.substr(0, fused.find(" at ")) + " ";
    // dgamma's and dbeta's accumulate_grad are the column totals' (added into the
    // accumulators, which the test reads as the totals kernel's state).
    ASSERT_EQ(ops, "graph.sub graph.mul graph.layernorm_grad graph.accumulate_grad "
                   "graph.accumulate_grad ")
        << "the fusion changed; update the reference\n" << kernel->source;
  }
  // The inputs both kernels read, by what they are bound to. The scale is a scalar of the
  // backward's type (bf16 in bf16 mode).
  const double scale = storedAs(c.type, 0.37);
  const size_t bytes = n * (bf16 ? 2 : 4);
  std::vector<char> tBytes(bytes), cBytes(16), yBytes(bytes);
  const std::vector<double> t = fillRandom(tBytes, c.type, generator);
  writeElement(cBytes, c.type, 0, scale);
  for (size_t i = 0; i < n; ++i)
    writeElement(yBytes, c.type, i, ys[i]);
  // Any other [rows, L] input is the forward's result, as the backward reads it.
  auto bindInputs = [&](Arguments &arguments, const GeneratedKernel &kernel) {
    bindNormGradientInputs(arguments, kernel, fa, xValue, tBytes, cBytes, yBytes, "");
  };
  Arguments ra(*backward);
  bindInputs(ra, *backward);
  rowKernel.run(backward->launch, ra.bind());
  std::vector<double> stats;
  for (const KernelParam &param : backward->params)
    if (param.role == KernelParam::Role::Scratch)
      stats = readAll(ra[param.name], "f32", 2 * static_cast<size_t>(c.rows));
  ASSERT_EQ(stats.size(), 2u * c.rows) << backward->source;
  for (int r = 0; r < c.rows; ++r) {
    EXPECT_NEAR(stats[2 * r], mean[r], 1e-5 * (1 + std::abs(mean[r]))) << "row " << r;
    EXPECT_NEAR(stats[2 * r + 1], rstd[r], 1e-5 * rstd[r]) << "row " << r;
  }
  // dy = (y - t) * scale, each step rounded where the unfused ops store it.
  std::vector<double> dys(n);
  for (size_t i = 0; i < n; ++i)
    dys[i] = storedAs(c.type, storedAs(c.type, ys[i] - t[i]) * scale);
  // dx = rstd (g - mean(g) - xhat mean(g xhat)), g = dy gamma, stored in x's type: only the
  // residual model reads it (w's gradient); with x an input the row kernel writes no dx.
  size_t dxOutputs = 0;
  for (const KernelParam &param : backward->params)
    if (param.role == KernelParam::Role::Output) {
      ASSERT_TRUE(c.residual) << backward->source;
      ASSERT_EQ(param.shape, (std::vector<int64_t>{c.rows, c.length})) << backward->source;
      std::vector<double> dx(n);
      for (int r = 0; r < c.rows; ++r) {
        double sumG = 0, sumGXhat = 0;
        for (int j = 0; j < c.length; ++j) {
          const size_t i = static_cast<size_t>(r) * c.length + j;
          sumG += dys[i] * g[j];
          sumGXhat += dys[i] * g[j] * xhat[i];
        }
        for (int j = 0; j < c.length; ++j) {
          const size_t i = static_cast<size_t>(r) * c.length + j;
          dx[i] = storedAs(param.elementType, rstd[r] * (dys[i] * g[j] - sumG / c.length -
                                                         xhat[i] * sumGXhat / c.length));
        }
      }
      expectElementsNear(readAll(ra[param.name], param.elementType, n), dx,
                         storedStep(param.elementType), 1e-4 * rms(dx), "dx");
      ++dxOutputs;
    }
  EXPECT_EQ(dxOutputs, c.residual ? 1u : 0u) << backward->source;

  Arguments ca(*columns);
  bindInputs(ca, *columns);
  Arguments ta =
      runColumnSums(*backward, ra, *columns, ca, columnKernel, *totals, totalKernel);
  std::vector<double> dgamma(c.length, 0), dbeta(c.length, 0);
  for (int r = 0; r < c.rows; ++r)
    for (int j = 0; j < c.length; ++j) {
      const size_t i = static_cast<size_t>(r) * c.length + j;
      const double dy = dys[i];
      dgamma[j] += dy * xhat[i];
      dbeta[j] += dy;
    }
  const std::vector<std::vector<double>> sums = columnTotals(*totals, ta, c.length);
  ASSERT_EQ(sums.size(), 2u) << totals->source;
  EXPECT_LT(std::min(relativeError(sums[0], dgamma), relativeError(sums[1], dgamma)), 1e-5);
  EXPECT_LT(std::min(relativeError(sums[0], dbeta), relativeError(sums[1], dbeta)), 1e-5);
  // Element by element (the column sums add f32 terms over the rows).
  const bool gammaFirst = relativeError(sums[0], dgamma) < relativeError(sums[1], dgamma);
  expectElementsNear(sums[gammaFirst ? 0 : 1], dgamma, 1e-4, 1e-5 * rms(dgamma), "dgamma");
  expectElementsNear(sums[gammaFirst ? 1 : 0], dbeta, 1e-4, 1e-5 * rms(dbeta), "dbeta");
}

INSTANTIATE_TEST_SUITE_P(Shapes, EmulatedLayerNorm,
                         ::testing::Values(
                             // Rows of whole packs (4 f32 or 8 bf16 elements) take the packed
                             // walk; 1030 and 3000 do not.
                             LayerNormCase{5, 48, "f32", false, true, true},
                             LayerNormCase{40, 100, "f32", false, true, true},
                             LayerNormCase{3, 1030}, LayerNormCase{2, 3000},
                             LayerNormCase{300, 40, "f32", false, true, true},
                             LayerNormCase{5, 48, "bf16", false, true, true},
                             LayerNormCase{3, 1030, "bf16"},
                             LayerNormCase{300, 40, "bf16", false, true, true},
                             // The residual model (dx checked): GPT-124M's width in bf16 and
                             // f16, f32 rows of 64, rows of 1024 (the gradient's longest packed
                             // row) and 2048 (the forward's longest; the gradient, two held
                             // operands, unpacked), and rows that are not whole bf16 packs.
                             LayerNormCase{20, 768, "bf16", true, true, true},
                             LayerNormCase{20, 768, "f16", true, true, true},
                             LayerNormCase{40, 64, "f32", true, true, true},
                             LayerNormCase{9, 1024, "bf16", true, true, true},
                             LayerNormCase{9, 2048, "bf16", true, true, false},
                             LayerNormCase{12, 770, "bf16", true, false, false},
                             LayerNormCase{30, 100, "bf16", true, false, false}),
                         [](const ::testing::TestParamInfo<LayerNormCase> &info) {
                           return std::to_string(info.param.rows) + "x" +
                                  std::to_string(info.param.length) +
                                  (info.param.type == "f32" ? "" : "_" + info.param.type) +
                                  (info.param.residual ? "_residual" : "");
                         });

/// An RMS norm over a residual sum x = a + w (as residualLayerNormModel), trained against an MSE
/// target: forward and gradient row kernels (y; dx and the row's r) and dgamma's column kernels.
std::string residualRmsNormModel(int rows, int length, const std::string &type) {
  std::string model = residualLayerNormModel(rows, length, type);
  const std::string v = "tensor<" + std::to_string(length) + "xf32>";
  const std::string x = "tensor<" + std::to_string(rows) + "x" + std::to_string(length) + "x" +
                        type + ">";
  auto replace = [&](const std::string &from, const std::string &to) {
    const size_t at = model.find(from);
    ASSERT_NE(at, std::string::npos) << from;
    model.replace(at, from.size(), to);
  };
  replace("  graph.param @b : " + v + " init #graph.normal<std = 0.5>\n", "");
  replace("    %b = graph.get_param @b : " + v + "\n", "");
  replace("graph.layernorm %x, %g, %b : " + x + ", " + v + ", " + v,
          "graph.rmsnorm %x, %g : " + x + ", " + v);
  return model;
}

struct RmsNormCase {
  int rows, length;
  std::string type;
  bool packedForward, packedBackward;
};

class EmulatedRmsNorm : public ::testing::TestWithParam<RmsNormCase> {};

TEST_P(EmulatedRmsNorm, RowAndColumnKernelsMatchADoubleReference) {
  const RmsNormCase c = GetParam();
  const PrecisionCase mode = c.type == "bf16"  ? kPrecisions[0]
                             : c.type == "f16" ? PrecisionCase{"fp16", "none"}
                                               : kPrecisions[2];
  const std::vector<GeneratedKernel> kernels =
      generateForText(residualRmsNormModel(c.rows, c.length, c.type), mode);
  const GeneratedKernel *forward = kernelWith(kernels, KernelLaunch::Space::Rows, "graph.rmsnorm");
  const GeneratedKernel *backward =
      kernelWith(kernels, KernelLaunch::Space::Rows, "graph.rmsnorm_grad");
  const GeneratedKernel *columns =
      kernelWith(kernels, KernelLaunch::Space::Columns, "graph.rmsnorm_grad");
  const GeneratedKernel *totals =
      kernelWith(kernels, KernelLaunch::Space::Elements, "graph.rmsnorm_grad");
  ASSERT_TRUE(forward && backward && columns && totals);
  EXPECT_EQ(readsPacks(*forward), c.packedForward) << forward->source;
  EXPECT_EQ(readsPacks(*backward), c.packedBackward) << backward->source;
  EXPECT_EQ(readsPacks(*columns), c.length % (c.type == "f32" ? 4 : 8) == 0) << columns->source;
  for (const GeneratedKernel *kernel : {backward, columns, totals}) {
    std::string ops;
    for (const std::string &fused : kernel->fusedOps)
      ops += fused.substr(0, fused.find(" at ")) + " ";
    ASSERT_EQ(ops, "graph.sub graph.mul graph.rmsnorm_grad graph.accumulate_grad ")
        << "the fusion changed; update the reference\n" << kernel->source;
  }
  const std::vector<int64_t> rowShape{c.rows, c.length};
  // x is the residual sum, the forward's one [rows, L] input.
  std::string xValue;
  for (const KernelParam &param : forward->params)
    if (param.role == KernelParam::Role::Input && param.shape == rowShape)
      xValue = param.value;
  ASSERT_FALSE(xValue.empty()) << forward->source;
  TemporaryDirectory directory;
  std::mt19937 generator(7);
  const size_t n = static_cast<size_t>(c.rows) * c.length;
  const double eps = 1e-5;

  // Forward: y = x r g, r = 1 / sqrt(mean(x^2) + eps).
  HostKernel forwardKernel(*forward, directory.path);
  ASSERT_TRUE(forwardKernel.ok()) << forwardKernel.error() << "\n" << forward->source;
  Arguments fa(*forward);
  const std::vector<double> x = fillRandom(fa[fa.bound(xValue).name], c.type, generator, 0.5);
  const std::vector<double> g = fillRandom(fa[fa.bound("@g").name], "f32", generator);
  forwardKernel.run(forward->launch, fa.bind());
  std::vector<double> r(c.rows), ys(n);
  for (int row = 0; row < c.rows; ++row) {
    double squares = 0;
    for (int j = 0; j < c.length; ++j)
      squares += x[row * c.length + j] * x[row * c.length + j];
    r[row] = 1 / std::sqrt(squares / c.length + eps);
    for (int j = 0; j < c.length; ++j)
      ys[row * c.length + j] = storedAs(c.type, x[row * c.length + j] * r[row] * g[j]);
  }
  std::string yValue;
  for (const KernelParam &param : forward->params)
    if (param.role == KernelParam::Role::Output && param.shape == rowShape) {
      EXPECT_EQ(param.elementType, c.type) << forward->source;
      expectElementsNear(readAll(fa[param.name], param.elementType, n), ys, storedStep(c.type),
                         1e-5 * rms(ys), "y");
      yValue = param.value;
    }
  ASSERT_FALSE(yValue.empty()) << forward->source;

  // Backward: dy = (y - t) c fused in; dx = r g - x r^3 mean(g x), g = dy gamma; (0, r) per
  // row to scratch; dgamma = sum over rows of dy x r.
  const double scale = storedAs(c.type, 0.37);
  std::vector<char> tBytes(n * elementBytes(c.type)), cBytes(16);
  const std::vector<double> t = fillRandom(tBytes, c.type, generator);
  writeElement(cBytes, c.type, 0, scale);
  auto bindInputs = [&](Arguments &arguments, const GeneratedKernel &kernel) {
    bindNormGradientInputs(arguments, kernel, fa, xValue, tBytes, cBytes,
                           fa[fa.bound(yValue).name], yValue);
  };
  HostKernel rowKernel(*backward, directory.path), columnKernel(*columns, directory.path),
      totalKernel(*totals, directory.path);
  ASSERT_TRUE(rowKernel.ok()) << rowKernel.error() << "\n" << backward->source;
  ASSERT_TRUE(columnKernel.ok()) << columnKernel.error() << "\n" << columns->source;
  ASSERT_TRUE(totalKernel.ok()) << totalKernel.error() << "\n" << totals->source;
  Arguments ra(*backward);
  bindInputs(ra, *backward);
  rowKernel.run(backward->launch, ra.bind());
  std::vector<double> dys(n);
  for (size_t i = 0; i < n; ++i)
    dys[i] = storedAs(c.type, storedAs(c.type, ys[i] - t[i]) * scale);
  std::vector<double> dx(n), dgamma(c.length, 0);
  for (int row = 0; row < c.rows; ++row) {
    double sumGX = 0;
    for (int j = 0; j < c.length; ++j)
      sumGX += dys[row * c.length + j] * g[j] * x[row * c.length + j];
    for (int j = 0; j < c.length; ++j) {
      const size_t i = static_cast<size_t>(row) * c.length + j;
      dx[i] = storedAs(c.type, r[row] * dys[i] * g[j] -
                                   x[i] * r[row] * r[row] * r[row] * sumGX / c.length);
      dgamma[j] += dys[i] * x[i] * r[row];
    }
  }
  size_t outputs = 0;
  for (const KernelParam &param : backward->params) {
    if (param.role == KernelParam::Role::Scratch) {
      const std::vector<double> stats = readAll(ra[param.name], "f32", 2 * c.rows);
      for (int row = 0; row < c.rows; ++row) {
        EXPECT_EQ(stats[2 * row], 0.0) << "row " << row;
        EXPECT_NEAR(stats[2 * row + 1], r[row], 1e-5 * r[row]) << "row " << row;
      }
    }
    if (param.role == KernelParam::Role::Output) {
      ASSERT_EQ(param.shape, rowShape) << backward->source;
      expectElementsNear(readAll(ra[param.name], param.elementType, n), dx,
                         storedStep(param.elementType), 1e-4 * rms(dx), "dx");
      ++outputs;
    }
  }
  EXPECT_EQ(outputs, 1u) << backward->source;

  Arguments ca(*columns);
  bindInputs(ca, *columns);
  Arguments ta =
      runColumnSums(*backward, ra, *columns, ca, columnKernel, *totals, totalKernel);
  const std::vector<std::vector<double>> sums = columnTotals(*totals, ta, c.length);
  ASSERT_EQ(sums.size(), 1u) << totals->source;
  expectElementsNear(sums[0], dgamma, 1e-4, 1e-5 * rms(dgamma), "dgamma");
}

INSTANTIATE_TEST_SUITE_P(Shapes, EmulatedRmsNorm,
                         ::testing::Values(RmsNormCase{20, 768, "bf16", true, true},
                                           RmsNormCase{20, 768, "f16", true, true},
                                           RmsNormCase{40, 64, "f32", true, true},
                                           RmsNormCase{9, 2048, "bf16", true, false},
                                           RmsNormCase{12, 770, "bf16", false, false},
                                           RmsNormCase{3, 2100, "f32", false, false}),
                         [](const ::testing::TestParamInfo<RmsNormCase> &info) {
                           return std::to_string(info.param.rows) + "x" +
                                  std::to_string(info.param.length) + "_" + info.param.type;
                         });

} // namespace
