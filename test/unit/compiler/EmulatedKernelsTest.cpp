//===- EmulatedKernelsTest.cpp - Generated kernels run in the device emulator -===//
//
// The kernels graph-fuse's groups become (compiler/cuda) are CUDA C++ that only a GPU runs.
// This test compiles a generated kernel's source as host C++ (test/unit/emulation's
// DeviceEmulator.h first) into a shared library with an entry that unpacks a cuLaunchKernel-
// style argument array, launches it in the emulator with the grid and block the device
// program gives it (kernelShape), and compares what it writes with references computed here
// in double. Softmax's row kernels (forward, causal or not, and gradient), layer norm's and RMS
// norm's row kernels (forward; the gradient's statistics and, over a residual sum with a
// parameter, dx) and the gradients' two-stage column sums are covered with row lengths that are
// not multiples of a warp, rows short enough for a warp each and longer ones for a block each,
// more rows than a block covers, and several row chunks, in f32 and with bf16 or f16 x and dy
// (which the kernels widen as they load them, computing in f32). Rows of whole packs take the
// packed walk (the row read once, in 16-byte packs, into registers), the others the element
// loop; each case says which it expects, and y, dx, dgamma and dbeta are checked element by
// element. Last, a copy kernel of the attention head layout, moved in 16-byte packs.
//
// The host compiler ($CXX, else c++) runs once per kernel; the libraries live in a temporary
// directory removed at the end.
//
//===----------------------------------------------------------------------===//

#include "../runtime/AttentionReference.h"
#include "CodegenHelpers.h"
#include "HostKernel.h"
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
using ampc::test::relativeError;
namespace fs = std::filesystem;

namespace {

using test::HostKernel;

/// A temporary directory for this file's kernels, removed with this object.
struct TemporaryDirectory : test::TemporaryDirectory {
  TemporaryDirectory() : test::TemporaryDirectory("ampc_emulated_kernels") {}
};

size_t elementBytes(const std::string &type) {
  return type == "i64" || type == "u64" ? 8 : type == "bf16" || type == "f16" ? 2 : 4;
}

double readElement(const std::vector<char> &bytes, const std::string &type, size_t i) {
  if (type == "f32") {
    float value;
    std::memcpy(&value, bytes.data() + 4 * i, 4);
    return value;
  }
  if (type == "bf16" || type == "f16") {
    uint16_t bits;
    std::memcpy(&bits, bytes.data() + 2 * i, 2);
    return type == "bf16" ? numerics::bf16BitsToFloat(bits) : numerics::f16BitsToFloat(bits);
  }
  if (type == "i32") {
    int32_t value;
    std::memcpy(&value, bytes.data() + 4 * i, 4);
    return value;
  }
  int64_t value;
  std::memcpy(&value, bytes.data() + 8 * i, 8);
  return static_cast<double>(value);
}

void writeElement(std::vector<char> &bytes, const std::string &type, size_t i, double value) {
  if (type == "f32") {
    const float f = static_cast<float>(value);
    std::memcpy(bytes.data() + 4 * i, &f, 4);
  } else if (type == "bf16" || type == "f16") {
    const float f = static_cast<float>(value);
    const uint16_t bits = type == "bf16" ? numerics::floatToBF16Bits(f) : numerics::floatToF16Bits(f);
    std::memcpy(bytes.data() + 2 * i, &bits, 2);
  } else if (type == "i32") {
    const int32_t v = static_cast<int32_t>(value);
    std::memcpy(bytes.data() + 4 * i, &v, 4);
  } else {
    const int64_t v = static_cast<int64_t>(value);
    std::memcpy(bytes.data() + 8 * i, &v, 8);
  }
}

/// A generated kernel's arguments as host memory: one buffer per tensor, scratch, table or
/// error record argument (inputs filled by the test, outputs poisoned with NaN bytes), and the
/// scalar sizes from its launch.
struct Arguments {
  const GeneratedKernel &kernel;
  std::map<std::string, std::vector<char>> buffers; ///< by parameter name
  std::vector<void *> pointers;                     ///< one per parameter, as cuLaunchKernel's
  std::vector<void *> addresses;
  std::vector<long long> scalars;

  explicit Arguments(const GeneratedKernel &k) : kernel(k) {
    for (const KernelParam &param : kernel.params) {
      if (param.role == KernelParam::Role::Scalar)
        continue;
      int64_t elements = 1;
      for (int64_t size : param.shape)
        elements *= size;
      const size_t bytes = param.role == KernelParam::Role::ErrorRecord
                               ? 32
                               : static_cast<size_t>(elements) * elementBytes(param.elementType);
      buffers[param.name] = std::vector<char>(std::max<size_t>(bytes, 16), '\xff');
    }
  }

  std::vector<char> &operator[](const std::string &name) { return buffers.at(name); }
  const KernelParam &param(const std::string &name) const {
    for (const KernelParam &param : kernel.params)
      if (param.name == name)
        return param;
    throw std::runtime_error("no parameter " + name + " in " + kernel.name);
  }
  /// The parameter whose binding is \p value ("@x", "%3", ...).
  const KernelParam &bound(const std::string &value) const {
    for (const KernelParam &param : kernel.params)
      if (param.value == value)
        return param;
    throw std::runtime_error("no parameter bound to " + value + " in " + kernel.name);
  }

  std::vector<void *> &bind() {
    const KernelLaunch &launch = kernel.launch;
    pointers.clear();
    addresses.assign(kernel.params.size(), nullptr);
    scalars.assign(kernel.params.size(), 0);
    for (size_t i = 0; i < kernel.params.size(); ++i) {
      const KernelParam &param = kernel.params[i];
      if (param.role != KernelParam::Role::Scalar) {
        addresses[i] = buffers.at(param.name).data();
        pointers.push_back(&addresses[i]);
        continue;
      }
      long long value = 0;
      if (param.value == "elements")
        value = launch.elements;
      else if (param.value == "rows")
        value = launch.rows;
      else if (param.value == "row_length")
        value = launch.rowLength;
      scalars[i] = value;
      pointers.push_back(&scalars[i]);
    }
    return pointers;
  }
};

/// Fills \p bytes (a tensor of \p type) with N(0, 1) values rounded to the type; returns them.
std::vector<double> fillRandom(std::vector<char> &bytes, const std::string &type,
                               std::mt19937 &generator, double mean = 0) {
  std::normal_distribution<double> normal(mean, 1.0);
  const size_t count = bytes.size() / elementBytes(type);
  std::vector<double> values(count);
  for (size_t i = 0; i < count; ++i) {
    writeElement(bytes, type, i, normal(generator));
    values[i] = readElement(bytes, type, i);
  }
  return values;
}

std::vector<double> readAll(const std::vector<char> &bytes, const std::string &type, size_t count) {
  std::vector<double> values(count);
  for (size_t i = 0; i < count; ++i)
    values[i] = readElement(bytes, type, i);
  return values;
}

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

/// Expects every element of \p actual within |actual - expected| <= relative |expected| +
/// absolute of \p expected; reports the first few that are not and how many.
void expectElementsNear(const std::vector<double> &actual, const std::vector<double> &expected,
                        double relative, double absolute, const std::string &what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  size_t wrong = 0;
  for (size_t i = 0; i < expected.size(); ++i) {
    const double error = std::abs(actual[i] - expected[i]);
    if (!(error <= relative * std::abs(expected[i]) + absolute)) {
      if (wrong < 5)
        ADD_FAILURE() << what << " element " << i << ": " << actual[i] << ", expected "
                      << expected[i];
      ++wrong;
    }
  }
  EXPECT_EQ(wrong, 0u) << what << ": elements outside the tolerance";
}

/// The root mean square of \p values.
double rms(const std::vector<double> &values) {
  double squares = 0;
  for (double value : values)
    squares += value * value;
  return values.empty() ? 0 : std::sqrt(squares / values.size());
}

/// A bf16/f16/f32 value's relative rounding step: one unit in the last place of the stored type.
double storedStep(const std::string &type) {
  return type == "bf16" ? 1.0 / 128 : type == "f16" ? 1.0 / 1024 : 1e-5;
}

/// Whether a row kernel holds its row in registers, read in 16-byte packs (the packed walk).
bool readsPacks(const GeneratedKernel &kernel) {
  return kernel.source.find("const Pack<") != std::string::npos;
}

const GeneratedKernel *kernelWith(const std::vector<GeneratedKernel> &kernels,
                                  KernelLaunch::Space space, const std::string &op) {
  for (const GeneratedKernel &kernel : kernels)
    if (kernel.launch.space == space)
      for (const std::string &fused : kernel.fusedOps)
        if (fused.rfind(op + " at ", 0) == 0)
          return &kernel;
  return nullptr;
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

/// \p value as it is stored in \p type.
double storedAs(const std::string &type, double value) {
  std::vector<char> bytes(8);
  writeElement(bytes, type, 0, value);
  return readElement(bytes, type, 0);
}

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
    ASSERT_EQ(ops, "graph.sub graph.mul graph.layernorm_grad ")
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
  auto bindInputs = [&](Arguments &arguments, const GeneratedKernel &kernel) {
    for (const KernelParam &param : kernel.params) {
      if (param.role != KernelParam::Role::Input)
        continue;
      if (param.value == xValue)
        arguments[param.name] = fa[fa.bound(xValue).name];
      else if (param.value == "@g")
        arguments[param.name] = fa[fa.bound("@g").name];
      else if (param.value == "@t")
        arguments[param.name] = tBytes;
      else if (param.shape.empty())
        arguments[param.name] = cBytes;
      else
        arguments[param.name] = yBytes; // the forward's result, as the backward reads it
    }
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
  // Scratch slices are shared by name within a group: the row statistics.
  for (const KernelParam &param : columns->params)
    if (param.role == KernelParam::Role::Scratch)
      for (const KernelParam &rowParam : backward->params)
        if (rowParam.role == KernelParam::Role::Scratch && rowParam.name == param.name)
          ca[param.name] = ra[rowParam.name];
  columnKernel.run(columns->launch, ca.bind());
  // The second stage adds the chunks' partial sums and stores dgamma and dbeta.
  Arguments ta(*totals);
  for (const KernelParam &param : totals->params)
    if (param.role == KernelParam::Role::Scratch)
      ta[param.name] = ca[param.name];
  totalKernel.run(totals->launch, ta.bind());
  std::vector<double> dgamma(c.length, 0), dbeta(c.length, 0);
  for (int r = 0; r < c.rows; ++r)
    for (int j = 0; j < c.length; ++j) {
      const size_t i = static_cast<size_t>(r) * c.length + j;
      const double dy = dys[i];
      dgamma[j] += dy * xhat[i];
      dbeta[j] += dy;
    }
  std::vector<std::vector<double>> sums;
  for (const KernelParam &param : totals->params)
    if (param.role == KernelParam::Role::Output || param.role == KernelParam::Role::State)
      sums.push_back(readAll(ta[param.name], "f32", c.length));
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
  for (const GeneratedKernel *kernel : {backward, columns, totals}) {
    std::string ops;
    for (const std::string &fused : kernel->fusedOps)
      ops += fused.substr(0, fused.find(" at ")) + " ";
    ASSERT_EQ(ops, "graph.sub graph.mul graph.rmsnorm_grad ")
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
    for (const KernelParam &param : kernel.params) {
      if (param.role != KernelParam::Role::Input)
        continue;
      if (param.value == xValue)
        arguments[param.name] = fa[fa.bound(xValue).name];
      else if (param.value == "@g")
        arguments[param.name] = fa[fa.bound("@g").name];
      else if (param.value == "@t")
        arguments[param.name] = tBytes;
      else if (param.shape.empty())
        arguments[param.name] = cBytes;
      else if (param.value == yValue)
        arguments[param.name] = fa[fa.bound(yValue).name];
      else
        FAIL() << "unexpected input " << param.value << " in\n" << kernel.source;
    }
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
  for (const KernelParam &param : columns->params)
    if (param.role == KernelParam::Role::Scratch)
      for (const KernelParam &rowParam : backward->params)
        if (rowParam.role == KernelParam::Role::Scratch && rowParam.name == param.name)
          ca[param.name] = ra[rowParam.name];
  columnKernel.run(columns->launch, ca.bind());
  Arguments ta(*totals);
  for (const KernelParam &param : totals->params)
    if (param.role == KernelParam::Role::Scratch)
      ta[param.name] = ca[param.name];
  totalKernel.run(totals->launch, ta.bind());
  size_t sums = 0;
  for (const KernelParam &param : totals->params)
    if (param.role == KernelParam::Role::Output || param.role == KernelParam::Role::State) {
      expectElementsNear(readAll(ta[param.name], "f32", c.length), dgamma, 1e-4,
                         1e-5 * rms(dgamma), "dgamma");
      ++sums;
    }
  EXPECT_EQ(sums, 1u) << totals->source;
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

/// A softmax over [batch, T, S] rows (causal: row t sees keys j <= t + S - T), trained against
/// an MSE target: forward and gradient are both row kernels.
std::string softmaxModel(int batch, int queries, int keys, bool causal) {
  const std::string x = "tensor<" + std::to_string(batch) + "x" + std::to_string(queries) + "x" +
                        std::to_string(keys) + "xf32>";
  return "graph.model @sm {\n"
         "  graph.param @w : " + x + " init #graph.normal<std = 1.0>\n"
         "  graph.input @t : " + x + "\n"
         "  func.func @forward() {\n"
         "    %w = graph.get_param @w : " + x + "\n"
         "    %t = graph.get_input @t : " + x + "\n"
         "    %y = graph.softmax %w" + (causal ? " causal" : "") + " : " + x + "\n"
         "    %l = graph.mse_loss %y, %t : " + x + "\n"
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
      y[static_cast<size_t>(r) * L + j] = std::exp(x[static_cast<size_t>(r) * L + j] - maximum) /
                                          total;
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
                             SoftmaxCase{2, 9, 40, false, true, true},
                             SoftmaxCase{3, 7, 11, true}, SoftmaxCase{1, 5, 2100, true},
                             SoftmaxCase{2, 8, 64, true, true, true},
                             SoftmaxCase{1, 8, 1024, true, true, true},
                             SoftmaxCase{1, 4, 2048, false, true, false},
                             SoftmaxCase{2, 4, 130, false}),
                         [](const ::testing::TestParamInfo<SoftmaxCase> &info) {
                           return std::to_string(info.param.batch) + "x" +
                                  std::to_string(info.param.queries) + "x" +
                                  std::to_string(info.param.keys) +
                                  (info.param.causal ? "_causal" : "");
                         });

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
         "  graph.param @w : " + w + " init #graph.normal<std = 1.0>\n"
         "  graph.input @h : " + h + "\n"
         "  graph.input @labels : " + labels + "\n"
         "  func.func @forward() {\n"
         "    %w = graph.get_param @w : " + w + "\n"
         "    %h = graph.get_input @h : " + h + "\n"
         "    %x = graph.matmul %h, %w : " + h + ", " + w + "\n"
         "    %y = graph.get_input @labels : " + labels + "\n"
         "    %l = graph.cross_entropy %x, %y : " + x + ", " + labels + "\n"
         "    graph.loss %l : tensor<f32>\n"
         "    return\n"
         "  }\n"
         "}\n";
}

struct ClassifierCase {
  int rows, classes;
  /// The precision mode: bf16 (logits read as the bf16 copy, gradient stored in bf16) or fp32.
  std::string type;
  /// Whether the loss-and-gradient kernel reads the logits in 16-byte packs.
  bool packed;
};

class EmulatedClassifier : public ::testing::TestWithParam<ClassifierCase> {};

TEST_P(EmulatedClassifier, LossAndGradientMatchADoubleReference) {
  const ClassifierCase c = GetParam();
  const std::vector<GeneratedKernel> kernels = generateForText(
      classifierModel(c.rows, c.classes), c.type == "bf16" ? kPrecisions[0] : kPrecisions[2]);
  const GeneratedKernel *kernel = kernelWith(kernels, KernelLaunch::Space::Rows,
                                             "graph.cross_entropy");
  ASSERT_TRUE(kernel);
  EXPECT_EQ(readsPacks(*kernel), c.packed) << kernel->source;
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
  expectElementsNear(got, grad, 2 * storedStep(gradType), 1e-7 / classes, "dlogits");
  for (size_t j = 0; j < classes; ++j)
    ASSERT_EQ(got[classes + j], 0.0) << "the ignored row's gradient, class " << j;
}

INSTANTIATE_TEST_SUITE_P(Shapes, EmulatedClassifier,
                         ::testing::Values(
                             // Classes a multiple of the pack (8 bf16, 4 f32): packed, with the
                             // last round of packs partial (1000 / 8 = 125 packs over 1024
                             // threads; 50304 / 8 = 6288 = 6 rounds and a partial seventh).
                             ClassifierCase{5, 50304, "bf16", true},
                             ClassifierCase{4, 1000, "bf16", true},
                             ClassifierCase{4, 256, "f32", true},
                             ClassifierCase{4, 4100, "f32", true},
                             // Not a multiple of the pack: one element at a time.
                             ClassifierCase{4, 250, "f32", false},
                             ClassifierCase{3, 1001, "bf16", false}),
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
