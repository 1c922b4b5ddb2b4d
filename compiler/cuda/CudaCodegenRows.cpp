//===- CudaCodegenRows.cpp - Row kernels and two-stage column sums --------===//
//
// The row kernels of norms, softmax and their gradients (a warp per row, or a block for long
// rows), and column sums in two stages (the norm gradients' dgamma/dbeta here; the bias
// gradients and leading-axis sums of reduceKernel call the same columnSumKernels).
//
//===----------------------------------------------------------------------===//

#include "compiler/cuda/KernelGenerator.h"
#include "compiler/cuda/RowWalk.h"

#include <algorithm>
#include <functional>
#include <memory>
#include <sstream>

using namespace mlir;
using namespace ampc::graph;

namespace ampc {
namespace cudagen {

//===----------------------------------------------------------------------===//
// Row kernels: norms, softmax and their gradients (one warp or one block per row)
//===----------------------------------------------------------------------===//

namespace {

/// Rows up to this long get a warp each (each lane then takes at most 64 elements a pass).
constexpr int64_t kWarpRowLimit = 2048;
/// Threads of a warp-per-row kernel's block: 8 warps, 8 rows.
constexpr int kWarpRowBlock = 256;
/// The most floats a lane of a packed warp-per-row kernel holds (RowWalk): one held operand up to
/// L = 2048, two (the gradients' x and dy) up to L = 1024. Measured with ptxas for sm_90 on the
/// layer-norm kernels of bf16 rows: 95-127 registers at L = 768; at L = 2048 the forward uses 218
/// and the gradient (128 held floats) 247-254 without spilling, one fused producer away from it
/// and at one 256-thread block per multiprocessor, so longer gradients keep the unpacked walk.
constexpr int64_t kHeldFloatsPerLane = 64;

/// Emits the layer-norm statistics of the current row: `mean` and `rstd` = 1 / sqrt(var + eps),
/// the biased variance taken around the mean in a second pass (f32 block sums).
std::string layerNormStatistics(RowWalk &walk, KernelWriter &writer, Value input,
                                const std::string &eps) {
  // Two passes (sum, then sum of squared deviations) rather than E[x^2] - E[x]^2: the CPU
  // backend computes the variance around the mean, and the one-pass form loses precision to
  // cancellation when |mean| is large against the deviation.
  // One statement per loop: the element reads name their temporaries in emission order.
  std::string text = "    float sum = 0.0f;\n";
  text += walk.pass([&](Scope &s) { s.line("sum += " + writer.element(input, "i", s) + ";"); });
  // The row sum combines the threads' partial sums and hands every thread of the row the
  // total, so all of them can use the statistic in the next loop.
  text += "    const float mean = " + walk.span.sum("sum") + " / static_cast<float>(L);\n" +
          "    float squares = 0.0f;\n";
  text += walk.pass([&](Scope &s) {
    s.line("const float centred = " + writer.element(input, "i", s) + " - mean;");
    s.line("squares += centred * centred;");
  });
  text += "    const float rstd = 1.0f / sqrtf(" + walk.span.sum("squares") +
          " / static_cast<float>(L) + " + eps + ");\n";
  return text;
}

/// Emits the RMS-norm statistic of the current row: `r` = 1 / sqrt(mean(x^2) + eps).
std::string rmsNormStatistic(RowWalk &walk, KernelWriter &writer, Value input,
                             const std::string &eps) {
  std::string text = "    float squares = 0.0f;\n";
  text += walk.pass([&](Scope &s) {
    std::string xv = writer.element(input, "i", s);
    s.line("squares += " + xv + " * " + xv + ";");
  });
  text += "    const float r = 1.0f / sqrtf(" + walk.span.sum("squares") +
          " / static_cast<float>(L) + " + eps + ");\n";
  return text;
}

} // namespace

/// Emits the row kernel of a norm, a softmax or one of their gradients (a warp per row, or a
/// block per row for rows longer than kWarpRowLimit), with the group's fused elementwise
/// producers (read through `writer.element`) and consumers (stored from the anchor's bound
/// result). The row is the last axis. A warp-per-row kernel whose operands allow it reads its
/// row once, in packs, into registers (RowWalk); the others read the row once per pass and rely
/// on L1/L2 to keep it resident between passes.
void Generator::rowKernel(Operation *anchor) {
  Value input = anchor->getOperand(0);
  const Shape shape = shapeOf(input);
  const int64_t length = shape.empty() ? 1 : shape.back();
  // Everything before the last axis is flattened into rows; an empty shape (scalar) is one row of
  // one.
  const int64_t rows = numElements(shape) / std::max<int64_t>(length, 1);
  RowSpan span;
  span.warp = length <= kWarpRowLimit;
  Value primary = anchor->getResult(0);
  const std::string resultType = cType(elementOf(primary));
  // The anchor's value is rounded to its reduced type where the unfused op would have stored
  // it, so fused consumers see exactly what the CPU reference reads back.
  auto rounded = [&](const std::string &expression) {
    return isReducedFloat(elementOf(primary)) ? "roundAs<" + resultType + ">(" + expression + ")"
                                              : expression;
  };

  // Emits the kernel's body with \p walk; the math and stem of its header.
  auto emit = [&](KernelWriter &writer, RowWalk &walk, std::string &math, std::string &stem) {
    // Outputs computed in row space (those of a norm gradient's dgamma/dbeta come later).
    std::vector<Value> outputs;
    for (Value output : groupOutputs(writer)) {
      bool columns = false;
      for (unsigned r = 1; r < anchor->getNumResults(); ++r)
        columns = columns || writer.dependsOn(output, anchor->getResult(r));
      if (!columns)
        outputs.push_back(output);
    }
    // Each row-space output is recomputed from the bound anchor value at element i and stored.
    auto storeOutputs = [&](Scope &scope) {
      for (Value output : outputs)
        writer.store(output, "i", writer.element(output, "i", scope), scope);
    };
    // The memory line of the header.
    auto memory = [&](const std::string &unpacked, const std::string &packedReads) {
      return walk.packed
                 ? "Memory: " + packedReads + " read once per row into registers, in packs of " +
                       std::to_string(walk.width) + "; outputs written once, in packs."
                 : "Memory: " + unpacked;
    };
    // The value of element i of \p value, held by the load pass.
    auto held = [&](const std::string &array, Value value) {
      return RowWalk::Held{
          array, [&writer, value](Scope &s) { return writer.element(value, "i", s); }, value};
    };
    std::ostringstream body;
    // The norm gradients leave two floats per row for the column kernel: (mean, rstd) for layer
    // norm, (0, r) for RMS norm, so that kernel computes xhat = (x - s0) * s1 for both.
    if (llvm::isa<LayerNormGradOp, RmsNormGradOp>(anchor))
      writer.scratchParam("rowStats", {rows, 2});

    if (span.warp) {
      // Warp w of block b takes rows 8 b + w, then strides by the grid's warps, so a grid
      // smaller than the row count still covers them all. A warp's lanes never wait for other
      // warps.
      body << "  const int lane = threadIdx.x % 32;\n"
           << "  const long long warps = static_cast<long long>(gridDim.x) * (blockDim.x / 32);\n"
           << "  for (long long row = static_cast<long long>(blockIdx.x) * (blockDim.x / 32) + "
              "threadIdx.x / 32; row < rows; row += warps) {\n";
    } else {
      // reduceScratch holds one partial per warp: 32 warps is the most a 1024-thread block has.
      // Blocks stride over rows, so a grid smaller than the row count still covers them all.
      body << "  __shared__ float reduceScratch[32];\n"
           << "  for (long long row = blockIdx.x; row < rows; row += gridDim.x) {\n";
    }
    if (auto norm = llvm::dyn_cast<LayerNormOp>(anchor)) {
      stem = "layernorm";
      const std::string eps = floatLiteral(norm.getEpsilon().convertToDouble());
      // Layer norm: three passes over the row (sum, squared deviations, normalise), gamma and
      // beta indexed by the column j since they have the row's length.
      math = "y = (x - mean) * rstd * gamma + beta per row of L, mean and biased variance in f32\n"
             "(two passes), rstd = 1 / sqrt(var + eps); then the fused consumers of y.\n" +
             memory("x read three times (the row stays in L1/L2), gamma/beta, outputs written "
                    "once.",
                    "x (with its fused producers evaluated once per element)");
      body << walk.load({held("xs", input)}) << layerNormStatistics(walk, writer, input, eps)
           << walk.pass([&](Scope &s) {
                std::string xv = writer.element(input, "i", s);
                std::string g = writer.element(norm.getGamma(), "j", s);
                std::string b = writer.element(norm.getBeta(), "j", s);
                s.line("const float y = " +
                       rounded("(" + xv + " - mean) * rstd * " + g + " + " + b) + ";");
                KernelWriter::bind(s, primary, "i", "y");
                storeOutputs(s);
              });
    } else if (auto norm = llvm::dyn_cast<RmsNormOp>(anchor)) {
      stem = "rmsnorm";
      const std::string eps = floatLiteral(norm.getEpsilon().convertToDouble());
      // RMS norm: one statistic pass (sum of squares), then the scaled row; no centring, no beta.
      math = "y = x * r * gamma per row of L, r = 1 / sqrt(mean(x^2) + eps) in f32; then the\n"
             "fused consumers of y. " +
             memory("x read twice, outputs written once.", "x");
      body << walk.load({held("xs", input)}) << rmsNormStatistic(walk, writer, input, eps)
           << walk.pass([&](Scope &s) {
                std::string xv = writer.element(input, "i", s);
                std::string g = writer.element(norm.getGamma(), "j", s);
                s.line("const float y = " + rounded(xv + " * r * " + g) + ";");
                KernelWriter::bind(s, primary, "i", "y");
                storeOutputs(s);
              });
    } else if (auto softmax = llvm::dyn_cast<SoftmaxOp>(anchor)) {
      // Softmax, the numerically stable form: subtract the row maximum before exp so no term
      // overflows. The causal form masks key j > i + (S - T) of query row i (T queries, S = L
      // keys, the queries aligned with the last T keys); masked entries take no part in the
      // statistics and are written as 0.
      stem = softmax.getCausal() ? "softmax_causal" : "softmax";
      math = "y = exp(x - max) / sum(exp(x - max)) over the row's first `valid` entries, 0\n"
             "beyond (causal: valid = i + 1 + S - T for query row i); f32 statistics.\n" +
             memory("x read three times, y written once.", "x (the whole row)");
      if (softmax.getCausal()) {
        // row % T is the query index within the row's [T, S] attention block.
        const int64_t queries = shape[shape.size() - 2];
        body << "    // Causal: row i of each [T, S] block sees keys j <= i + (S - T).\n"
             << "    const long long valid = min(L, row % " << queries << "ll + 1 + (L - "
             << queries << "ll));\n";
      } else {
        body << "    const long long valid = L;\n";
      }
      // 0x7f800000 is +inf's bit pattern: the maximum starts at -inf.
      body << walk.load({held("xs", input)}) << "    float maximum = -__int_as_float(0x7f800000);\n"
           << walk.pass(
                  [&](Scope &s) {
                    std::string xv = writer.element(input, "i", s);
                    s.line("maximum = maximum < " + xv + " ? " + xv + " : maximum;");
                  },
                  "valid")
           << "    maximum = " << span.max("maximum") << ";\n"
           << "    // A row of -inf subtracts 0 instead, giving NaN as the CPU backend does.\n"
           << "    if (maximum == -__int_as_float(0x7f800000)) maximum = 0.0f;\n"
           << "    float total = 0.0f;\n"
           << walk.pass(
                  [&](Scope &s) {
                    s.line("total += expf(" + writer.element(input, "i", s) + " - maximum);");
                  },
                  "valid")
           << "    total = " << span.sum("total") << ";\n"
           << walk.pass([&](Scope &s) {
                std::string xv = writer.element(input, "i", s);
                s.line("const float y = " +
                       rounded("j < valid ? expf(" + xv + " - maximum) / total : 0.0f") + ";");
                KernelWriter::bind(s, primary, "i", "y");
                storeOutputs(s);
              });
    } else if (auto grad = llvm::dyn_cast<SoftmaxGradOp>(anchor)) {
      // Softmax gradient from its output y: dx = y * (dy - <dy, y>), one dot product per row
      // (a block sum), then the elementwise pass.
      stem = "softmax_grad";
      math = "dx = y * (dy - sum(dy * y)) per row, the sum in f32.\n" +
             memory("y and dy read twice, dx written once.", "y and dy");
      body << walk.load({held("dys", grad.getGrad()), held("ys", grad.getResultValue())})
           << "    float dot = 0.0f;\n"
           << walk.pass([&](Scope &s) {
                s.line("dot += " + writer.element(grad.getGrad(), "i", s) + " * " +
                       writer.element(grad.getResultValue(), "i", s) + ";");
              })
           << "    dot = " << span.sum("dot") << ";\n"
           << walk.pass([&](Scope &s) {
                std::string y = writer.element(grad.getResultValue(), "i", s);
                std::string dy = writer.element(grad.getGrad(), "i", s);
                s.line("const float dx = " + rounded(y + " * (" + dy + " - dot)") + ";");
                KernelWriter::bind(s, primary, "i", "dx");
                storeOutputs(s);
              });
    } else if (auto grad = llvm::dyn_cast<LayerNormGradOp>(anchor)) {
      // Layer-norm gradient: recompute mean and rstd (cheaper than storing them in the
      // forward), save them for the column kernel, take the two row means of g = dy * gamma and
      // of g * xhat, then dx = rstd * (g - mean(g) - xhat * mean(g * xhat)).
      stem = "layernorm_grad";
      const std::string eps = floatLiteral(grad.getEpsilon().convertToDouble());
      math = "Per row: mean, rstd as the forward; g = dy * gamma, xhat = (x - mean) * rstd;\n"
             "dx = rstd * (g - mean(g) - xhat * mean(g * xhat)); then the fused consumers of dx.\n"
             "Row statistics (mean, rstd) go to rowStats for the dgamma/dbeta column kernel.\n" +
             memory("x read four times and dy twice per row (L1/L2-resident), dx written once.",
                    "x and dy (held as g = dy * gamma)");
      // g = dy * gamma: packed, the load pass keeps the product (gamma is then read once per
      // row); unpacked, each pass multiplies again.
      auto gradient = [&](Scope &s) {
        std::string dy = writer.element(grad.getGrad(), "i", s);
        return dy + " * " + writer.element(grad.getGamma(), "j", s);
      };
      body << walk.load({held("xs", input), {"gs", gradient, Value()}})
           << layerNormStatistics(walk, writer, input, eps)
           // One thread per row writes the statistics; every thread of the row has the same
           // values after the row sums.
           << "    if (" << span.leader() << ") {\n      rowStats[2 * row] = mean;\n"
           << "      rowStats[2 * row + 1] = rstd;\n    }\n"
           << "    float sumG = 0.0f, sumGXhat = 0.0f;\n"
           << walk.pass([&](Scope &s) {
                std::string xv = writer.element(input, "i", s);
                std::string g = walk.packed ? "gs[e]" : gradient(s);
                s.line("const float gj = " + g + ";");
                s.line("sumG += gj;");
                s.line("sumGXhat += gj * ((" + xv + " - mean) * rstd);");
              })
           << "    const float meanG = " << span.sum("sumG") << " / static_cast<float>(L);\n"
           << "    const float meanGXhat = " << span.sum("sumGXhat")
           << " / static_cast<float>(L);\n"
           << walk.pass([&](Scope &s) {
                std::string xv = writer.element(input, "i", s);
                std::string g = walk.packed ? "gs[e]" : gradient(s);
                s.line("const float xhat = (" + xv + " - mean) * rstd;");
                s.line("const float dx = " +
                       rounded("rstd * (" + g + " - meanG - xhat * meanGXhat)") + ";");
                KernelWriter::bind(s, primary, "i", "dx");
                storeOutputs(s);
              });
    } else if (auto grad = llvm::dyn_cast<RmsNormGradOp>(anchor)) {
      // RMS-norm gradient: with y = x * r * gamma and r = (mean(x^2) + eps)^-1/2,
      // dx = r * g - x * r^3 * mean(g * x), g = dy * gamma; one statistic pass, one dot pass.
      stem = "rmsnorm_grad";
      const std::string eps = floatLiteral(grad.getEpsilon().convertToDouble());
      math = "Per row: r = 1 / sqrt(mean(x^2) + eps), g = dy * gamma;\n"
             "dx = r * g - x * r^3 * mean(g * x); then the fused consumers of dx. r goes to\n"
             "rowStats for the dgamma column kernel. " +
             memory("x read three times, dy twice.", "x and dy (held as g = dy * gamma)");
      auto gradient = [&](Scope &s) {
        std::string dy = writer.element(grad.getGrad(), "i", s);
        return dy + " * " + writer.element(grad.getGamma(), "j", s);
      };
      body << walk.load({held("xs", input), {"gs", gradient, Value()}})
           << rmsNormStatistic(walk, writer, input, eps)
           // A zero "mean" makes the column kernel's xhat = x * r, RMS norm's normalised input.
           << "    if (" << span.leader() << ") {\n      rowStats[2 * row] = 0.0f;\n"
           << "      rowStats[2 * row + 1] = r;\n    }\n"
           << "    float sumGX = 0.0f;\n"
           << walk.pass([&](Scope &s) {
                std::string xv = writer.element(input, "i", s);
                std::string g = walk.packed ? "gs[e]" : gradient(s);
                s.line("sumGX += " + g + " * " + xv + ";");
              })
           << "    const float meanGX = " << span.sum("sumGX") << " / static_cast<float>(L);\n"
           << walk.pass([&](Scope &s) {
                std::string xv = writer.element(input, "i", s);
                std::string g = walk.packed ? "gs[e]" : gradient(s);
                s.line("const float dx = " +
                       rounded("r * (" + g + ") - " + xv + " * r * r * r * meanGX") + ";");
                KernelWriter::bind(s, primary, "i", "dx");
                storeOutputs(s);
              });
    }
    body << "  }\n";
    writer.scalarParam("rows", "i64", "rows");
    writer.scalarParam("L", "i64", "row_length");
    return body.str();
  };

  // The unpacked kernel first: it tells whether every operand can be read in packs.
  std::string math, stem;
  auto unpackedWriter = std::make_unique<KernelWriter>(opIndex, members);
  RowWalk unpacked(span, *unpackedWriter);
  std::string body = emit(*unpackedWriter, unpacked, math, stem);
  KernelWriter *writer = unpackedWriter.get();

  // Packs of W = 16 bytes over the narrowest row operand: 8 elements with any bf16/f16 row
  // operand (an f32 operand beside them is read as two 16-byte accesses a pack), else 4. Every
  // tensor operand must be a float row of the same length (rows * L elements, read at i) or a
  // per-column vector of L (read at j); scalars are read directly.
  int narrowest = 4;
  bool packable = span.warp && !unpacked.broadcastRead && rows > 0;
  for (const KernelParam &param : unpackedWriter->params) {
    if (param.role != Role::Input && param.role != Role::Output)
      continue;
    const int64_t elements = numElements(param.shape);
    if (param.role == Role::Input && elements == 1)
      continue;
    if (param.elementType != "f32" && param.elementType != "bf16" && param.elementType != "f16")
      packable = false;
    else if (param.role == Role::Output && elements != rows * length)
      packable = false;
    else if (elements == rows * length)
      narrowest = std::min(narrowest, param.elementType == "f32" ? 4 : 2);
    else if (elements != length)
      packable = false;
  }
  const int width = 16 / narrowest;
  // The gradients hold two operands (x and g, or dy and y), the forwards one.
  const int64_t heldOperands =
      llvm::isa<LayerNormGradOp, RmsNormGradOp, SoftmaxGradOp>(anchor) ? 2 : 1;
  const int64_t heldFloats = heldOperands * ((length / width + 31) / 32) * width;
  packable = packable && length % width == 0 && heldFloats <= kHeldFloatsPerLane;
  std::unique_ptr<KernelWriter> packedWriter;
  if (packable) {
    packedWriter = std::make_unique<KernelWriter>(opIndex, members);
    RowWalk packed(span, *packedWriter);
    packed.packed = true;
    packed.width = width;
    packed.packs = length / width;
    packed.rows = rows;
    std::string packedMath, packedStem;
    std::string packedBody = emit(*packedWriter, packed, packedMath, packedStem);
    if (!packed.broadcastRead) {
      body = std::move(packedBody);
      math = std::move(packedMath);
      writer = packedWriter.get();
    }
  }

  KernelLaunch launch;
  launch.space = KernelLaunch::Space::Rows;
  launch.rows = rows;
  launch.rowLength = length;
  // The block size is compiled into __launch_bounds__. A warp per row: 8 rows per block of 256;
  // a block per row: 1024 threads serve every longer row.
  launch.blockSize = span.warp ? kWarpRowBlock : 1024;
  launch.rowsPerBlock = span.warp ? kWarpRowBlock / 32 : 1;
  finish(*writer, "reduction", stem, math, body, launch);
}

/// The skeleton of the column sums (columnSumPartial, columnSumPartialPacked, columnSumTotals).
constexpr const char *kColumnSumHeader = "runtime/cuda/device/ColumnSum.cuh";

/// Blocks the first stage of a column sum aims at: about 8 per multiprocessor of an H100 (132),
/// so that reading the rows keeps the memory system busy even when L is a few hundred columns.
constexpr int64_t kColumnSumBlocks = 1024;

/// Column sums over a [rows, L] iteration space, in two kernels. One block per 32 columns (the
/// whole sum in one block) left most of the GPU idle when L is a few hundred (24 blocks for
/// L = 768) while each thread looped over thousands of rows; instead:
///   `<stem>_partial`: grid (column blocks, chunks), block (32 threads across, 8 row slices);
///       block (x, c) sums rows [c * ceil(rows / chunks), ...) of its columns, the 8 slices meet
///       in shared memory, and the f32 partial goes to scratch columnPartials[s][c][column].
///       Packed (L a multiple of the pack, every operand a [rows, L] float tensor read at i):
///       a thread takes a 16-byte pack of W consecutive columns (8 bf16/f16, 4 f32; 32 bytes
///       for an f32 operand beside 16-bit ones), so a block covers 32 W columns and a warp
///       reads 512 contiguous bytes of a row per access, four rows in flight; otherwise a
///       thread takes one column, one element per access;
///   `<stem>`: one thread per column adds its chunks' partials in chunk order (so the result
///       does not depend on the grid) and runs the store code (the group's fused consumers).
/// chunks is compiled in: ceil(kColumnSumBlocks / column blocks), at most one chunk per 64 rows
/// (packed: half those blocks, at most one chunk per 128 rows).
/// The skeletons are runtime/cuda/device/ColumnSum.cuh's (columnSumPartial or
/// columnSumPartialPacked, then columnSumTotals); each entry generates what they call: a lambda
/// that adds an element (a row's pack) to the sums from \p emitSum, and one that stores a
/// column's totals (\p storeCode), with \p frame's statements around the call.
void Generator::columnSumKernels(const ColumnSumEmitter &emitSum, KernelWriter &storeWriter,
                                 const std::string &storeCode, int sums, int64_t rows,
                                 int64_t length, const std::string &kind, const std::string &stem,
                                 const std::string &math, const ColumnStoreFrame &frame) {
  // The one-column walk, which also tells what the packed one would read.
  KernelWriter unpackedWriter(opIndex, members);
  Scope unpackedScope;
  unpackedScope.indent = "    ";
  emitSum(unpackedWriter, unpackedScope, [](int s) { return "sum" + std::to_string(s); });
  // The packed walk: every operand read in packs a float [rows, L] tensor; W from the narrowest.
  auto packedWriter = std::make_unique<KernelWriter>(opIndex, members);
  Scope packedScope;
  packedScope.vector = true;
  packedScope.indent = "      ";
  emitSum(*packedWriter, packedScope, [](int s) { return "sum" + std::to_string(s) + "[k]"; });
  bool packable = !unpackedScope.broadcastRead && !unpackedScope.gatherRead &&
                  !packedScope.broadcastRead && !packedScope.gatherRead &&
                  !packedScope.packsRead.empty() && rows > 0;
  int narrowest = 4;
  for (const KernelParam &param : packedWriter->params)
    if (packedScope.packsRead.count(param.name)) {
      packable =
          packable && numElements(param.shape) == rows * length &&
          (param.elementType == "f32" || param.elementType == "bf16" || param.elementType == "f16");
      narrowest = std::min(narrowest, param.elementType == "f32" ? 4 : 2);
    }
  const int width = 16 / narrowest;
  const bool packed = packable && length % width == 0;
  KernelWriter &sumWriter = packed ? *packedWriter : unpackedWriter;
  const int64_t perBlock = packed ? 32 * width : 32;
  const int64_t columnBlocks = std::max<int64_t>(1, (length + perBlock - 1) / perBlock);
  // Packed blocks cover W times the columns and move W times the bytes a row: half the blocks
  // and twice the rows a chunk keep the second stage's per-column additions few (L = 768: 3
  // column blocks x 128 chunks).
  const int64_t blocks = packed ? kColumnSumBlocks / 2 : kColumnSumBlocks;
  const int64_t chunks = std::clamp<int64_t>((blocks + columnBlocks - 1) / columnBlocks, 1,
                                             std::max<int64_t>(1, rows / (packed ? 128 : 64)));
  sumWriter.scratchParam("columnPartials", {sums, chunks, length});
  sumWriter.scalarParam("rows", "i64", "rows");
  sumWriter.scalarParam("L", "i64", "row_length");
  sumWriter.include(kColumnSumHeader);
  const std::string s = std::to_string(sums);
  std::ostringstream partial;
  if (packed) {
    // The skeleton is columnSumPartialPacked's; the row's pack loads and the element sums are
    // generated.
    const std::string w = std::to_string(width), packs = std::to_string(length / width);
    partial << "  // Adds row `row` of this thread's pack p of " << w << " columns to the sums.\n"
            << "  auto addRow = [&](long long row, long long p, float (&sum0)[" << w
            << "], float (&sum1)[" << w << "]) {\n";
    for (const KernelParam &param : packedWriter->params)
      if (packedScope.packsRead.count(param.name)) {
        const std::string pack = "Pack<" + packElement(param.elementType) + ", " + w + ">";
        partial << "    const " << pack << " pk_" << param.name << " = reinterpret_cast<const "
                << pack << " *>(" << param.name << ")[row * " << packs << "ll + p];\n";
      }
    partial << "#pragma unroll\n"
            << "    for (int k = 0; k < " << w << "; ++k) {\n"
            << "      const long long i = row * L + p * " << w << " + k;\n"
            << "      (void)i;\n"
            << packedScope.text.str() << "    }\n"
            << "  };\n"
            << "  columnSumPartialPacked<" << s << ", " << w << ", " << packs
            << "ll>(rows, L, columnPartials, addRow);\n";
  } else {
    partial << "  // Adds element i (row `row`) to the sums.\n"
            << "  auto addElement = [&](long long row, long long i, float &sum0, float &sum1) {\n"
            << unpackedScope.text.str() << "  };\n"
            << "  columnSumPartial<" << s << ">(rows, L, columnPartials, addElement);\n";
  }
  KernelLaunch first;
  first.space = KernelLaunch::Space::Columns;
  first.rows = rows;
  first.rowLength = length;
  first.blockSize = 256;
  first.blockRows = 8; // (32 threads across, 8 row slices)
  first.chunks = static_cast<int>(chunks);
  first.vectorWidth = packed ? width : 1;
  finish(sumWriter, kind, stem + "_partial",
         math + "\nStage 1 of 2: grid (" + std::to_string(columnBlocks) + " column blocks, " +
             std::to_string(chunks) + " row chunks), block (32 " +
             (packed ? "packs of " + std::to_string(width) + " columns" : std::string("columns")) +
             ", 8 row\nslices); f32 partial sums to columnPartials. Memory: the inputs read once, "
             "coalesced" +
             (packed ? ", in 16-byte packs." : "."),
         partial.str(), first);

  storeWriter.scratchParam("columnPartials", {sums, chunks, length});
  storeWriter.scalarParam("L", "i64", "row_length");
  storeWriter.include(kColumnSumHeader);
  // The skeleton is columnSumTotals'; the store of a column's totals and its frame are
  // generated.
  std::ostringstream total;
  total << frame.prologue << "  // Stores column i's totals (total0, total1).\n"
        << "  auto store = [&](long long i, float total0, float total1) {\n"
        << storeCode << "  };\n"
        << "  columnSumTotals<" << s << ", " << chunks << "ll>(columnPartials, L, store);\n"
        << frame.epilogue;
  KernelLaunch second;
  second.space = KernelLaunch::Space::Elements;
  second.elements = length;
  second.rows = 1;
  second.rowLength = length;
  second.blockSize = 256;
  finish(storeWriter, kind, stem,
         math + "\nStage 2 of 2: one thread per column adds the " + std::to_string(chunks) +
             " chunks' partials in order, then\nthe fused consumers" +
             (frame.epilogue.empty() ? std::string()
                                     : " (totals divided by the loss scale into their "
                                       "accumulators, the\nnon-finite flag raised if any is "
                                       "inf or NaN)") +
             ". Memory: the partials read once, the outputs written once.",
         total.str(), second);
}

void Generator::accumulateColumnTotals(KernelWriter &writer, Scope &scope, Value root,
                                       ColumnStoreFrame &frame) {
  for (Operation *op : group->ops) {
    auto accumulate = llvm::dyn_cast<AccumulateGradOp>(op);
    if (!accumulate || !writer.dependsOn(accumulate.getGrad(), root))
      continue;
    if (!elementOf(accumulate.getGrad()).isF32())
      throw std::runtime_error("CUDA codegen: " + describeOp(op) +
                               " does not add an f32 column total");
    const std::string acc =
        writer.stateParam(accumulate.getAccumulator().str(), "f32", shapeOf(accumulate.getGrad()));
    const std::string g = writer.element(accumulate.getGrad(), "i", scope);
    auto scaler = accumulate.getUnscale();
    if (!scaler) {
      scope.line(acc + "[i] += " + g + "; // accumulate_grad");
      continue;
    }
    // As the accumulate kernels do: divided by the scale the device holds, a non-finite
    // quotient raising the flag once per block after the loop (every thread reaches it).
    const std::string scalePtr = writer.stateParam(scaler->str() + ".scale", "f32", {});
    const std::string foundPtr = writer.stateParam(scaler->str() + ".found_nonfinite", "f32", {});
    const std::string u = writer.temp("u");
    scope.line("const float " + u + " = " + g + " / scale; // unscaled gradient");
    scope.line("nonFinite = nonFinite || !isFinite(" + u + ");");
    scope.line(acc + "[i] += " + u + "; // accumulate_grad");
    frame.prologue = "  const float scale = " + scalePtr + "[0];\n  bool nonFinite = false;\n";
    frame.epilogue = raiseNonFiniteFlag(foundPtr);
  }
}

/// dgamma (and dbeta) of a norm gradient: column sums over the rows (columnSumKernels),
/// reading the row statistics the row kernel left.
void Generator::normGradColumns(Operation *anchor) {
  Value input = anchor->getOperand(0), dyValue = anchor->getOperand(2);
  const Shape shape = shapeOf(input);
  const int64_t length = shape.back(), rows = numElements(shape) / length;
  const bool layer = llvm::isa<LayerNormGradOp>(anchor);
  // The sums read x, dy and the same scratch slice the row kernel wrote (bound by name; these
  // kernels are launched after the row kernel).
  auto emitSum = [&](KernelWriter &writer, Scope &scope,
                     const std::function<std::string(int)> &accumulator) {
    writer.scratchParam("rowStats", {rows, 2});
    std::string xv = writer.element(input, "i", scope);
    std::string dy = writer.element(dyValue, "i", scope);
    // dgamma[j] = sum_rows dy * xhat and dbeta[j] = sum_rows dy: the gradient of y = xhat *
    // gamma + beta with respect to the per-column parameters.
    scope.line("const float xhat = (" + xv + " - rowStats[2 * row]) * rowStats[2 * row + 1];");
    scope.line(accumulator(0) + " += " + dy + " * xhat;");
    if (layer)
      scope.line(accumulator(1) + " += " + dy + ";");
  };

  // Results 1 and 2 of the norm gradient (dgamma, dbeta; RMS norm has only dgamma) and what
  // the group computes from them are the stores; the row kernel took the rest.
  KernelWriter storeWriter(opIndex, members);
  std::vector<Value> outputs;
  for (Value output : groupOutputs(storeWriter))
    for (unsigned r = 1; r < anchor->getNumResults(); ++r)
      if (storeWriter.dependsOn(output, anchor->getResult(r))) {
        outputs.push_back(output);
        break;
      }
  Scope storeScope;
  storeScope.indent = "    ";
  for (unsigned r = 1; r < anchor->getNumResults(); ++r) {
    Value result = anchor->getResult(r);
    // Result 1 is dgamma (total0), result 2 dbeta (total1); each is rounded where its op
    // would have stored it.
    std::string total = r == 1 ? "total0" : "total1";
    std::string value = isReducedFloat(elementOf(result))
                            ? "roundAs<" + cType(elementOf(result)) + ">(" + total + ")"
                            : total;
    storeScope.line("const float result" + std::to_string(r) + " = " + value + ";");
    KernelWriter::bind(storeScope, result, "i", "result" + std::to_string(r));
  }
  for (Value output : outputs)
    storeWriter.store(output, "i", storeWriter.element(output, "i", storeScope), storeScope);
  ColumnStoreFrame frame;
  for (unsigned r = 1; r < anchor->getNumResults(); ++r)
    accumulateColumnTotals(storeWriter, storeScope, anchor->getResult(r), frame);
  columnSumKernels(emitSum, storeWriter, storeScope.text.str(), layer ? 2 : 1, rows, length,
                   "reduction", layer ? "layernorm_grad_params" : "rmsnorm_grad_params",
                   layer ? "dgamma[j] = sum over rows of dy * xhat, dbeta[j] = sum of dy, in f32."
                         : "dgamma[j] = sum over rows of dy * x * r, in f32.",
                   frame);
}

} // namespace cudagen
} // namespace ampc
