//===- CudaCodegenReductions.cpp - Row, reduction and loss kernels --------===//
//
// The loop skeletons built around a reduction: the row kernels (norms, softmax and their
// gradients) with the norm-gradient column sums, sum/mean/max over arbitrary axes and the
// bias gradient, max and embedding gradients, the MSE loss and the fused cross-entropy
// classifier.
//
//===----------------------------------------------------------------------===//

#include "compiler/cuda/KernelGenerator.h"

#include <algorithm>
#include <sstream>
#include <stdexcept>

using namespace mlir;
using namespace ampc::graph;

namespace ampc {
namespace cudagen {

//===----------------------------------------------------------------------===//
// Row kernels: norms, softmax and their gradients (one warp or one block per row)
//===----------------------------------------------------------------------===//

namespace {

/// Who works on one row: a warp (rows up to kWarpRowLimit long; 8 rows per 256-thread block,
/// the row statistics are warp shuffles, no barrier) or the whole block (longer rows; block
/// sums through shared memory).
struct RowSpan {
  bool warp = true;
  /// The first column a thread takes and the stride between its columns.
  const char *first() const { return warp ? "lane" : "threadIdx.x"; }
  const char *stride() const { return warp ? "32" : "blockDim.x"; }
  /// The row's total of a per-thread partial, in every thread of the row.
  std::string sum(const std::string &value) const {
    return warp ? "warpSum(" + value + ")" : "blockSum(" + value + ", reduceScratch)";
  }
  std::string max(const std::string &value) const {
    return warp ? "warpMax(" + value + ")" : "blockMax(" + value + ", reduceScratch)";
  }
  /// The one thread of the row that writes per-row values.
  const char *leader() const { return warp ? "lane == 0" : "threadIdx.x == 0"; }
};

/// Rows up to this long get a warp each (each lane then takes at most 64 elements a pass).
constexpr int64_t kWarpRowLimit = 2048;
/// Threads of a warp-per-row kernel's block: 8 warps, 8 rows.
constexpr int kWarpRowBlock = 256;

/// Emits `for (j ...) { const long long i = row * L + j; <body> }` with a fresh scope.
template <typename F>
/// The row's threads stride over its first `limit` elements; `j` is the column (what gamma
/// and beta are indexed by) and `i = row * L + j` the flat element index, so every operand of
/// the row is addressed as the contiguous slice [row * L, row * L + L).
std::string rowLoop(const RowSpan &span, F body, const std::string &limit = "L") {
  Scope scope;
  scope.indent = "      ";
  body(scope);
  return std::string("    for (long long j = ") + span.first() + "; j < " + limit +
         "; j += " + span.stride() + ") {\n      const long long i = row * L + j;\n" +
         scope.text.str() + "    }\n";
}

/// Emits the layer-norm statistics of the current row: `mean` and `rstd` = 1 / sqrt(var + eps),
/// the biased variance taken around the mean in a second pass (f32 block sums).
std::string layerNormStatistics(const RowSpan &span, KernelWriter &writer, Value input,
                                const std::string &eps) {
  // Two passes (sum, then sum of squared deviations) rather than E[x^2] - E[x]^2: the CPU
  // backend computes the variance around the mean, and the one-pass form loses precision to
  // cancellation when |mean| is large against the deviation.
  // One statement per loop: the element reads name their temporaries in emission order.
  std::string text = "    float sum = 0.0f;\n";
  text +=
      rowLoop(span, [&](Scope &s) { s.line("sum += " + writer.element(input, "i", s) + ";"); });
  // The row sum combines the threads' partial sums and hands every thread of the row the
  // total, so all of them can use the statistic in the next loop.
  text += "    const float mean = " + span.sum("sum") + " / static_cast<float>(L);\n" +
          "    float squares = 0.0f;\n";
  text += rowLoop(span, [&](Scope &s) {
    s.line("const float centred = " + writer.element(input, "i", s) + " - mean;");
    s.line("squares += centred * centred;");
  });
  text += "    const float rstd = 1.0f / sqrtf(" + span.sum("squares") +
          " / static_cast<float>(L) + " + eps + ");\n";
  return text;
}

/// Emits the RMS-norm statistic of the current row: `r` = 1 / sqrt(mean(x^2) + eps).
std::string rmsNormStatistic(const RowSpan &span, KernelWriter &writer, Value input,
                             const std::string &eps) {
  std::string text = "    float squares = 0.0f;\n";
  text += rowLoop(span, [&](Scope &s) {
    std::string xv = writer.element(input, "i", s);
    s.line("squares += " + xv + " * " + xv + ";");
  });
  text += "    const float r = 1.0f / sqrtf(" + span.sum("squares") +
          " / static_cast<float>(L) + " + eps + ");\n";
  return text;
}

} // namespace

/// Emits the row kernel of a norm, a softmax or one of their gradients (a warp per row, or a
/// block per row for rows longer than kWarpRowLimit), with the group's fused elementwise
/// producers (read through `writer.element`) and consumers (stored from the anchor's bound
/// result). The row is the last axis; every kernel reads its row once per pass and relies on
/// L1/L2 to keep it resident between passes.
void Generator::rowKernel(Operation *anchor) {
  KernelWriter writer(opIndex, members);
  Value input = anchor->getOperand(0);
  const Shape shape = shapeOf(input);
  const int64_t length = shape.empty() ? 1 : shape.back();
  // Everything before the last axis is flattened into rows; an empty shape (scalar) is one row of
  // one.
  const int64_t rows = numElements(shape) / std::max<int64_t>(length, 1);
  RowSpan span;
  span.warp = length <= kWarpRowLimit;
  Value primary = anchor->getResult(0);
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
  const std::string resultType = cType(elementOf(primary));
  // The anchor's value is rounded to its reduced type where the unfused op would have stored
  // it, so fused consumers see exactly what the CPU reference reads back.
  auto rounded = [&](const std::string &expression) {
    return isReducedFloat(elementOf(primary)) ? "roundAs<" + resultType + ">(" + expression + ")"
                                              : expression;
  };
  std::ostringstream body;
  std::string math, stem;
  std::string statsScratch;
  // The norm gradients leave two floats per row for the column kernel: (mean, rstd) for layer
  // norm, (0, r) for RMS norm, so that kernel computes xhat = (x - s0) * s1 for both.
  if (llvm::isa<LayerNormGradOp, RmsNormGradOp>(anchor))
    statsScratch = writer.scratchParam("rowStats", {rows, 2});

  if (span.warp) {
    // Warp w of block b takes rows 8 b + w, then strides by the grid's warps, so a grid smaller
    // than the row count still covers them all. A warp's lanes never wait for other warps.
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
    // Layer norm: three passes over the row (sum, squared deviations, normalise), gamma and beta
    // indexed by the column j since they have the row's length.
    math = "y = (x - mean) * rstd * gamma + beta per row of L, mean and biased variance in f32\n"
           "(two passes), rstd = 1 / sqrt(var + eps); then the fused consumers of y.\n"
           "Memory: x read three times (the row stays in L1/L2), gamma/beta, outputs written "
           "once.";
    std::string x;
    body << layerNormStatistics(span, writer, input, eps) << rowLoop(span, [&](Scope &s) {
      std::string xv = writer.element(input, "i", s);
      std::string g = writer.element(norm.getGamma(), "j", s);
      std::string b = writer.element(norm.getBeta(), "j", s);
      s.line("const float y = " + rounded("(" + xv + " - mean) * rstd * " + g + " + " + b) + ";");
      KernelWriter::bind(s, primary, "i", "y");
      storeOutputs(s);
    });
  } else if (auto norm = llvm::dyn_cast<RmsNormOp>(anchor)) {
    stem = "rmsnorm";
    const std::string eps = floatLiteral(norm.getEpsilon().convertToDouble());
    // RMS norm: one statistic pass (sum of squares), then the scaled row; no centring, no beta.
    math = "y = x * r * gamma per row of L, r = 1 / sqrt(mean(x^2) + eps) in f32; then the\n"
           "fused consumers of y. Memory: x read twice, outputs written once.";
    body << rmsNormStatistic(span, writer, input, eps) << rowLoop(span, [&](Scope &s) {
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
           "beyond (causal: valid = i + 1 + S - T for query row i); f32 statistics.\n"
           "Memory: x read three times, y written once.";
    if (softmax.getCausal()) {
      // row % T is the query index within the row's [T, S] attention block.
      const int64_t queries = shape[shape.size() - 2];
      body << "    // Causal: row i of each [T, S] block sees keys j <= i + (S - T).\n"
           << "    const long long valid = min(L, row % " << queries << "ll + 1 + (L - " << queries
           << "ll));\n";
    } else {
      body << "    const long long valid = L;\n";
    }
    // 0x7f800000 is +inf's bit pattern: the maximum starts at -inf.
    body << "    float maximum = -__int_as_float(0x7f800000);\n"
         << rowLoop(
                span,
                [&](Scope &s) {
                  std::string xv = writer.element(input, "i", s);
                  s.line("maximum = maximum < " + xv + " ? " + xv + " : maximum;");
                },
                "valid")
         << "    maximum = " << span.max("maximum") << ";\n"
         << "    // A row of -inf subtracts 0 instead, giving NaN as the CPU backend does.\n"
         << "    if (maximum == -__int_as_float(0x7f800000)) maximum = 0.0f;\n"
         << "    float total = 0.0f;\n"
         << rowLoop(
                span,
                [&](Scope &s) {
                  s.line("total += expf(" + writer.element(input, "i", s) + " - maximum);");
                },
                "valid")
         << "    total = " << span.sum("total") << ";\n"
         << rowLoop(span, [&](Scope &s) {
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
    math = "dx = y * (dy - sum(dy * y)) per row, the sum in f32.\n"
           "Memory: y and dy read twice, dx written once.";
    body << "    float dot = 0.0f;\n"
         << rowLoop(span,
                    [&](Scope &s) {
                      s.line("dot += " + writer.element(grad.getGrad(), "i", s) + " * " +
                             writer.element(grad.getResultValue(), "i", s) + ";");
                    })
         << "    dot = " << span.sum("dot") << ";\n"
         << rowLoop(span, [&](Scope &s) {
              std::string y = writer.element(grad.getResultValue(), "i", s);
              std::string dy = writer.element(grad.getGrad(), "i", s);
              s.line("const float dx = " + rounded(y + " * (" + dy + " - dot)") + ";");
              KernelWriter::bind(s, primary, "i", "dx");
              storeOutputs(s);
            });
  } else if (auto grad = llvm::dyn_cast<LayerNormGradOp>(anchor)) {
    // Layer-norm gradient: recompute mean and rstd (cheaper than storing them in the forward),
    // save them for the column kernel, take the two row means of g = dy * gamma and of g * xhat,
    // then dx = rstd * (g - mean(g) - xhat * mean(g * xhat)).
    stem = "layernorm_grad";
    const std::string eps = floatLiteral(grad.getEpsilon().convertToDouble());
    math = "Per row: mean, rstd as the forward; g = dy * gamma, xhat = (x - mean) * rstd;\n"
           "dx = rstd * (g - mean(g) - xhat * mean(g * xhat)); then the fused consumers of dx.\n"
           "Row statistics (mean, rstd) go to rowStats for the dgamma/dbeta column kernel.\n"
           "Memory: x read four times and dy twice per row (L1/L2-resident), dx written once.";
    body << layerNormStatistics(span, writer, input, eps)
         // One thread per row writes the statistics; every thread of the row has the same
         // values after the row sums.
         << "    if (" << span.leader() << ") {\n      rowStats[2 * row] = mean;\n"
         << "      rowStats[2 * row + 1] = rstd;\n    }\n"
         << "    float sumG = 0.0f, sumGXhat = 0.0f;\n"
         << rowLoop(span,
                    [&](Scope &s) {
                      std::string xv = writer.element(input, "i", s);
                      std::string dy = writer.element(grad.getGrad(), "i", s);
                      std::string g = writer.element(grad.getGamma(), "j", s);
                      s.line("const float gj = " + dy + " * " + g + ";");
                      s.line("sumG += gj;");
                      s.line("sumGXhat += gj * ((" + xv + " - mean) * rstd);");
                    })
         << "    const float meanG = " << span.sum("sumG") << " / static_cast<float>(L);\n"
         << "    const float meanGXhat = " << span.sum("sumGXhat") << " / static_cast<float>(L);\n"
         << rowLoop(span, [&](Scope &s) {
              std::string xv = writer.element(input, "i", s);
              std::string dy = writer.element(grad.getGrad(), "i", s);
              std::string g = writer.element(grad.getGamma(), "j", s);
              s.line("const float xhat = (" + xv + " - mean) * rstd;");
              s.line("const float dx = " +
                     rounded("rstd * (" + dy + " * " + g + " - meanG - xhat * meanGXhat)") + ";");
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
           "rowStats for the dgamma column kernel. Memory: x read three times, dy twice.";
    body << rmsNormStatistic(span, writer, input, eps)
         // A zero "mean" makes the column kernel's xhat = x * r, RMS norm's normalised input.
         << "    if (" << span.leader() << ") {\n      rowStats[2 * row] = 0.0f;\n"
         << "      rowStats[2 * row + 1] = r;\n    }\n"
         << "    float sumGX = 0.0f;\n"
         << rowLoop(span,
                    [&](Scope &s) {
                      std::string xv = writer.element(input, "i", s);
                      std::string dy = writer.element(grad.getGrad(), "i", s);
                      std::string g = writer.element(grad.getGamma(), "j", s);
                      s.line("sumGX += " + dy + " * " + g + " * " + xv + ";");
                    })
         << "    const float meanGX = " << span.sum("sumGX") << " / static_cast<float>(L);\n"
         << rowLoop(span, [&](Scope &s) {
              std::string xv = writer.element(input, "i", s);
              std::string dy = writer.element(grad.getGrad(), "i", s);
              std::string g = writer.element(grad.getGamma(), "j", s);
              s.line("const float dx = " +
                     rounded("r * (" + dy + " * " + g + ") - " + xv + " * r * r * r * meanGX") +
                     ";");
              KernelWriter::bind(s, primary, "i", "dx");
              storeOutputs(s);
            });
  }
  body << "  }\n";
  writer.scalarParam("rows", "i64", "rows");
  writer.scalarParam("L", "i64", "row_length");
  KernelLaunch launch;
  launch.space = KernelLaunch::Space::Rows;
  launch.rows = rows;
  launch.rowLength = length;
  // The block size is compiled into __launch_bounds__. A warp per row: 8 rows per block of 256;
  // a block per row: 1024 threads serve every longer row.
  launch.blockSize = span.warp ? kWarpRowBlock : 1024;
  launch.rowsPerBlock = span.warp ? kWarpRowBlock / 32 : 1;
  finish(writer, "reduction", stem, math, body.str(), launch);
}

/// Blocks the first stage of a column sum aims at: about 8 per multiprocessor of an H100 (132),
/// so that reading the rows keeps the memory system busy even when L is a few hundred columns.
constexpr int64_t kColumnSumBlocks = 1024;

/// Column sums over a [rows, L] iteration space, in two kernels. One block per 32 columns (the
/// whole sum in one block) left most of the GPU idle when L is a few hundred (24 blocks for
/// L = 768) while each thread looped over thousands of rows; instead:
///   `<stem>_partial`: grid (ceil(L / 32), chunks), block (32 columns, 8 row slices); block
///       (x, c) sums rows [c * ceil(rows / chunks), ...) of its columns, the 8 slices meet in
///       shared memory, and the f32 partial goes to scratch columnPartials[s][c][column];
///   `<stem>`: one thread per column adds its chunks' partials in chunk order (so the result
///       does not depend on the grid) and runs the store code (the group's fused consumers).
/// chunks is compiled in: ceil(kColumnSumBlocks / column blocks), at most one chunk per 64 rows.
void Generator::columnSumKernels(KernelWriter &sumWriter, const std::string &sumCode,
                                 KernelWriter &storeWriter, const std::string &storeCode, int sums,
                                 int64_t rows, int64_t length, const std::string &kind,
                                 const std::string &stem, const std::string &math) {
  const int64_t columnBlocks = std::max<int64_t>(1, (length + 31) / 32);
  const int64_t chunks =
      std::clamp<int64_t>((kColumnSumBlocks + columnBlocks - 1) / columnBlocks, 1,
                          std::max<int64_t>(1, rows / 64));
  sumWriter.scratchParam("columnPartials", {sums, chunks, length});
  sumWriter.scalarParam("rows", "i64", "rows");
  sumWriter.scalarParam("L", "i64", "row_length");
  std::ostringstream partial;
  partial << "  __shared__ float partial[" << sums << "][8][33];\n"
          << "  const long long column = static_cast<long long>(blockIdx.x) * 32 + threadIdx.x;\n"
          << "  // This block's chunk of rows: [first, last).\n"
          << "  const long long chunkRows = (rows + gridDim.y - 1) / gridDim.y;\n"
          << "  const long long first = static_cast<long long>(blockIdx.y) * chunkRows;\n"
          << "  const long long last = min(rows, first + chunkRows);\n"
          << "  float sum0 = 0.0f, sum1 = 0.0f;\n"
          << "  if (column < L) {\n"
          << "    for (long long row = first + threadIdx.y; row < last; row += blockDim.y) {\n"
          << "      const long long i = row * L + column;\n"
          << sumCode << "    }\n  }\n"
          << "  (void)sum1;\n"
          << "  partial[0][threadIdx.y][threadIdx.x] = sum0;\n";
  if (sums == 2)
    partial << "  partial[1][threadIdx.y][threadIdx.x] = sum1;\n";
  partial << "  __syncthreads();\n"
          << "  if (threadIdx.y == 0 && column < L) {\n"
          << "    for (int s = 0; s < " << sums << "; ++s) {\n"
          << "      float total = 0.0f;\n"
          << "      for (int y = 0; y < 8; ++y)\n"
          << "        total += partial[s][y][threadIdx.x];\n"
          << "      columnPartials[(static_cast<long long>(s) * gridDim.y + blockIdx.y) * L + "
             "column] = total;\n"
          << "    }\n  }\n";
  KernelLaunch first;
  first.space = KernelLaunch::Space::Columns;
  first.rows = rows;
  first.rowLength = length;
  first.blockSize = 256;
  first.blockRows = 8; // (32 columns, 8 row slices)
  first.chunks = static_cast<int>(chunks);
  finish(sumWriter, kind, stem + "_partial",
         math + "\nStage 1 of 2: grid (ceil(L / 32), " + std::to_string(chunks) +
             " row chunks), block (32 columns, 8 row\nslices); f32 partial sums to "
             "columnPartials. Memory: the inputs read once, coalesced.",
         partial.str(), first);

  storeWriter.scratchParam("columnPartials", {sums, chunks, length});
  storeWriter.scalarParam("L", "i64", "row_length");
  std::ostringstream total;
  total << "  for (long long column = static_cast<long long>(blockIdx.x) * blockDim.x + "
           "threadIdx.x; column < L;\n"
        << "       column += static_cast<long long>(gridDim.x) * blockDim.x) {\n"
        << "    float total0 = 0.0f, total1 = 0.0f;\n"
        << "    for (long long c = 0; c < " << chunks << "ll; ++c) {\n"
        << "      total0 += columnPartials[c * L + column];\n";
  if (sums == 2)
    total << "      total1 += columnPartials[(" << chunks << "ll + c) * L + column];\n";
  total << "    }\n"
        << "    (void)total1;\n"
        << "    const long long i = column;\n"
        << storeCode << "  }\n";
  KernelLaunch second;
  second.space = KernelLaunch::Space::Elements;
  second.elements = length;
  second.rows = 1;
  second.rowLength = length;
  second.blockSize = 256;
  finish(storeWriter, kind, stem,
         math + "\nStage 2 of 2: one thread per column adds the " + std::to_string(chunks) +
             " chunks' partials in order, then\nthe fused consumers. Memory: the partials read "
             "once, the outputs written once.",
         total.str(), second);
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
  KernelWriter sumWriter(opIndex, members);
  sumWriter.scratchParam("rowStats", {rows, 2});
  Scope sumScope;
  sumScope.indent = "      ";
  std::string xv = sumWriter.element(input, "i", sumScope);
  std::string dy = sumWriter.element(dyValue, "i", sumScope);
  // dgamma[j] = sum_rows dy * xhat and dbeta[j] = sum_rows dy: the gradient of y = xhat * gamma
  // + beta with respect to the per-column parameters.
  sumScope.line("const float xhat = (" + xv + " - rowStats[2 * row]) * rowStats[2 * row + 1];");
  sumScope.line("sum0 += " + dy + " * xhat;");
  if (layer)
    sumScope.line("sum1 += " + dy + ";");

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
  columnSumKernels(sumWriter, sumScope.text.str(), storeWriter, storeScope.text.str(),
                   layer ? 2 : 1, rows, length, "reduction",
                   layer ? "layernorm_grad_params" : "rmsnorm_grad_params",
                   layer ? "dgamma[j] = sum over rows of dy * xhat, dbeta[j] = sum of dy, in f32."
                         : "dgamma[j] = sum over rows of dy * x * r, in f32.");
}

namespace {

/// The input index of (kept index o, reduced index r) for a reduction of \p shape over \p axes.
///
/// Both `o` (over the kept dims) and `r` (over the reduced dims) are row-major flat indices of
/// their own sub-shape. Walking the dims innermost first, dim d's coordinate is
/// (o or r) / inner % shape[d], where inner is the product of the sizes of the inner dims of
/// the same kind; times d's stride in the input it gives the term of the flat input index.
/// Size-1 dims contribute nothing and are left out, and the constants are compiled in.
std::string reductionIndex(const Shape &shape, const std::vector<int64_t> &axes) {
  Shape strides(shape.size(), 1);
  for (size_t d = shape.size(); d-- > 1;)
    strides[d - 1] = strides[d] * shape[d];
  std::string expression;
  int64_t keptInner = 1, reducedInner = 1;
  for (size_t d = shape.size(); d-- > 0;) {
    const bool reduced = std::find(axes.begin(), axes.end(), int64_t(d)) != axes.end();
    int64_t &inner = reduced ? reducedInner : keptInner;
    if (shape[d] != 1) {
      std::string term = "(" + std::string(reduced ? "r" : "o") + " / " + std::to_string(inner) +
                         "ll % " + std::to_string(shape[d]) + "ll) * " +
                         std::to_string(strides[d]) + "ll";
      expression = term + (expression.empty() ? "" : " + " + expression);
    }
    inner *= shape[d];
  }
  return expression.empty() ? "0ll" : expression;
}

} // namespace

/// Emits sum, mean or max over arbitrary axes, with the group's fused producers and
/// consumers: a coalesced column sum when the axes are a leading run (the bias gradient's
/// case), otherwise one block per output element.
void Generator::reduceKernel(Operation *anchor) {
  KernelWriter writer(opIndex, members);
  Value input = anchor->getOperand(0);
  const Shape shape = shapeOf(input);
  std::vector<int64_t> axes;
  if (auto sum = llvm::dyn_cast<SumOp>(anchor))
    axes.assign(sum.getAxes().begin(), sum.getAxes().end());
  else if (auto mean = llvm::dyn_cast<MeanOp>(anchor))
    axes.assign(mean.getAxes().begin(), mean.getAxes().end());
  else if (auto max = llvm::dyn_cast<MaxOp>(anchor))
    axes.assign(max.getAxes().begin(), max.getAxes().end());
  const bool isMax = llvm::isa<MaxOp>(anchor), isMean = llvm::isa<MeanOp>(anchor);
  Value result = anchor->getResult(0);
  const int64_t outCount = numElements(shapeOf(result));
  // Elements per output; an empty result reduces nothing.
  const int64_t reduced = outCount ? numElements(shape) / outCount : 0;
  const std::string stem = anchor->getName().stripDialect().str();
  // The mean divides the f32 sum once by the compiled-in count, as the CPU backend does.
  std::string finalValue = isMean ? "total / " + floatLiteral(double(reduced)) : "total";
  if (isReducedFloat(elementOf(result)))
    finalValue = "roundAs<" + cType(elementOf(result)) + ">(" + finalValue + ")";

  // Reducing a leading run of dimensions: a column sum, coalesced along the columns.
  // Max keeps the general path: its NaN-propagating compare and the -inf start differ from the
  // column sum's additive combine.
  bool leading = !isMax && !axes.empty();
  for (size_t k = 0; k < axes.size(); ++k)
    leading = leading && axes[k] == int64_t(k);
  // Only what the reduction computes: a bias_grad group's matmul result is cuBLASLt's.
  std::vector<Value> outputs;
  for (Value output : groupOutputs(writer))
    if (writer.dependsOn(output, result))
      outputs.push_back(output);
  std::ostringstream body;
  KernelLaunch launch;
  // The input is viewed as [rows = reduced, L = outCount]: output j sums column j, in the two
  // kernels of columnSumKernels, as the norm-gradient columns.
  if (leading) {
    KernelWriter sumWriter(opIndex, members);
    Scope sumScope;
    sumScope.indent = "      ";
    sumScope.line("sum0 += " + sumWriter.element(input, "i", sumScope) + ";");
    KernelWriter storeWriter(opIndex, members);
    Scope storeScope;
    storeScope.indent = "    ";
    storeScope.line("const float total = total0;");
    storeScope.line("const float result = " + finalValue + ";");
    KernelWriter::bind(storeScope, result, "i", "result");
    for (Value output : outputs)
      storeWriter.store(output, "i", storeWriter.element(output, "i", storeScope), storeScope);
    columnSumKernels(sumWriter, sumScope.text.str(), storeWriter, storeScope.text.str(), 1,
                     reduced, outCount, group->kind == "bias_grad" ? "bias_grad" : "reduction",
                     stem + "_columns",
                     std::string(isMean ? "out[j] = mean" : "out[j] = sum") +
                         " over the leading dimensions of x[row, j] (a column sum), in f32.");
    return;
  }
  // General: one block per output element, threads over its reduced elements. The input index
  // of (o, r) is computed from the compiled-in strides; it is not coalesced in general, but each
  // input element is still read exactly once.
  const std::string inputIndex = reductionIndex(shape, axes);
  Scope sumScope;
  sumScope.indent = "      ";
  std::string xv = writer.element(input, "i", sumScope);
  // Max: a NaN (x != x) replaces any total, so a NaN anywhere in the group wins, as on the CPU.
  sumScope.line(isMax
                    ? "total = total < " + xv + " || " + xv + " != " + xv + " ? " + xv + " : total;"
                    : "total += " + xv + ";");
  Scope storeScope;
  storeScope.indent = "      ";
  storeScope.line("const float result = " + finalValue + ";");
  KernelWriter::bind(storeScope, result, "o", "result");
  for (Value output : outputs)
    writer.store(output, "o", writer.element(output, "o", storeScope), storeScope);
  body << "  __shared__ float reduceScratch[32];\n"
       << "  for (long long o = blockIdx.x; o < " << outCount << "ll; o += gridDim.x) {\n"
       << "    float total = " << (isMax ? "-__int_as_float(0x7f800000)" : "0.0f") << ";\n"
       << "    for (long long r = threadIdx.x; r < " << reduced << "ll; r += blockDim.x) {\n"
       << "      const long long i = " << inputIndex << ";\n"
       << sumScope.text.str() << "    }\n"
       << "    total = " << (isMax ? "blockMax" : "blockSum") << "(total, reduceScratch);\n"
       << "    if (threadIdx.x == 0) {\n"
       << storeScope.text.str() << "    }\n  }\n";
  launch.space = KernelLaunch::Space::Rows;
  launch.rows = outCount;
  launch.rowLength = reduced;
  launch.blockSize = 256;
  finish(writer, group->kind == "bias_grad" ? "bias_grad" : "reduction", stem,
         std::string(isMax    ? "out[o] = max"
                     : isMean ? "out[o] = mean"
                              : "out[o] = sum") +
             " of x over the reduced axes (one block per output element),\nf32 accumulation. "
             "Memory: x read once, out written once.",
         body.str(), launch);
}

/// Emits the gradient of max: dy flows to the one element of each reduced group that the
/// forward max picked, and 0 to the others.
void Generator::maxGradKernel(MaxGradOp anchor) {
  KernelWriter writer(opIndex, members);
  const Shape shape = shapeOf(anchor.getInput());
  std::vector<int64_t> axes(anchor.getAxes().begin(), anchor.getAxes().end());
  const int64_t outCount = numElements(shapeOf(anchor.getGrad()));
  const int64_t reduced = outCount ? numElements(shape) / outCount : 0;
  const std::string inputIndex = reductionIndex(shape, axes);
  Scope findScope;
  findScope.indent = "      ";
  std::string xv = writer.element(anchor.getInput(), "i", findScope);
  // The first maximum: a NaN takes the place of a non-NaN best (best == best is false only for
  // NaN); otherwise only a strictly larger value does, so each thread keeps the lowest index of
  // equal values, and blockArgMax breaks ties across threads by the lower index.
  findScope.line("if (" + xv + " != " + xv + " ? best == best : " + xv + " > best) {");
  findScope.line("  best = " + xv + ";\n" + findScope.indent + "  bestIndex = r;");
  findScope.line("}");
  Scope writeScope;
  writeScope.indent = "      ";
  std::string dx =
      isReducedFloat(elementOf(anchor.getResult()))
          ? "roundAs<" + cType(elementOf(anchor.getResult())) + ">(r == bestIndex ? dy : 0.0f)"
          : "(r == bestIndex ? dy : 0.0f)";
  writeScope.line("const float dx = " + dx + ";");
  KernelWriter::bind(writeScope, anchor.getResult(), "i", "dx");
  for (Value output : groupOutputs(writer))
    writer.store(output, "i", writer.element(output, "i", writeScope), writeScope);
  Scope dyScope;
  dyScope.indent = "    ";
  std::string dyv = writer.element(anchor.getGrad(), "o", dyScope);
  std::ostringstream body;
  // Two passes per group: find the arg-max (INT64_MAX: none yet), then write every dx of the group.
  body << "  __shared__ float scratchValue[32];\n  __shared__ long long scratchIndex[32];\n"
       << "  for (long long o = blockIdx.x; o < " << outCount << "ll; o += gridDim.x) {\n"
       << "    float best = -__int_as_float(0x7f800000);\n"
       << "    long long bestIndex = 0x7fffffffffffffffll;\n"
       << "    for (long long r = threadIdx.x; r < " << reduced << "ll; r += blockDim.x) {\n"
       << "      const long long i = " << inputIndex << ";\n"
       << findScope.text.str() << "    }\n"
       << "    blockArgMax(best, bestIndex, scratchValue, scratchIndex);\n"
       << dyScope.text.str() << "    const float dy = " << dyv << ";\n"
       << "    for (long long r = threadIdx.x; r < " << reduced << "ll; r += blockDim.x) {\n"
       << "      const long long i = " << inputIndex << ";\n"
       << writeScope.text.str() << "    }\n  }\n";
  KernelLaunch launch;
  launch.space = KernelLaunch::Space::Rows;
  launch.rows = outCount;
  launch.rowLength = reduced;
  finish(writer, "reduction", "max_grad",
         "dx = dy of the group at the group's first maximum (lowest index; a NaN wins), 0\n"
         "elsewhere; one block per reduced group. Memory: x read once, dx written once.",
         body.str(), launch);
}

/// Emits the embedding gradient's two kernels: zero the table gradient, then scatter-add each
/// row of dy into the table row its id names.
void Generator::embeddingGradKernels(EmbeddingGradOp anchor) {
  Value table = anchor.getResult();
  if (!elementOf(table).isF32())
    throw std::runtime_error("CUDA codegen: " + describeOp(anchor) +
                             " must produce f32 (it is summed with atomicAdd)");
  // dy is [..., width]: flat element i is column i % width of token i / width.
  const int64_t width = shapeOf(table).back();
  const int64_t count = numElements(shapeOf(anchor.getGrad()));
  {
    KernelWriter writer(opIndex, members);
    std::string out = writer.tensorParam(table, Role::Output);
    writer.scalarParam("n", "i64", "elements");
    std::ostringstream body;
    body << "  const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;\n"
         << "  for (long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; "
            "i < n; i += stride)\n"
         << "    " << out << "[i] = 0.0f;\n";
    KernelLaunch launch;
    launch.elements = numElements(shapeOf(table));
    finish(writer, "reduction", "embedding_grad_zero",
           "dtable = 0 (the scatter-add below sums into it). Memory: dtable written once.",
           body.str(), launch);
  }
  KernelWriter writer(opIndex, members);
  Scope scope;
  scope.indent = "    ";
  std::string dy = writer.element(anchor.getGrad(), "i", scope);
  std::string out = writer.tensorParam(table, Role::Output);
  // The ids are integers, loaded raw rather than through the f32 conversion.
  scope.line("const long long id = static_cast<long long>(" +
             writer.rawLoad(anchor.getIndices(), "i / " + std::to_string(width) + "ll") + ");");
  // An id outside the table (the CPU backend stops there) adds nothing and is reported.
  const std::string rows = std::to_string(shapeOf(table).front()) + "ll";
  const std::string errors = writer.errorParam(anchor);
  // Error code 2: an embedding id out of range (1 is a cross-entropy label).
  scope.line("if (id < 0ll || id >= " + rows + ") {");
  scope.line("  reportError(" + errors + ", 2u, site, i / " + std::to_string(width) + "ll, id, " +
             rows + ");");
  scope.line("  continue;");
  scope.line("}");
  // Repeated ids collide on the same table row, hence the atomics; their order, and so the
  // rounding of the sum, varies from run to run.
  scope.line("atomicAdd(&" + out + "[id * " + std::to_string(width) + "ll + i % " +
             std::to_string(width) + "ll], " + dy + ");");
  writer.scalarParam("n", "i64", "elements");
  std::ostringstream body;
  body << "  const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;\n"
       << "  for (long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; "
          "i < n; i += stride) {\n"
       << scope.text.str() << "  }\n";
  KernelLaunch launch;
  launch.elements = count;
  finish(writer, "reduction", "embedding_grad",
         "dtable[ids[r], d] += dy[r, d] with f32 atomicAdd (order-dependent rounding); an id\n"
         "outside the table is skipped and reported in the error record.\n"
         "Memory: dy and ids read once; dtable read-modify-written through L2 atomics.",
         body.str(), launch);
}

/// Emits the mean squared error as a single 1024-thread block: each thread sums its strided
/// squared differences, one block sum, one divide by the compiled-in element count.
void Generator::mseLossKernel(MseLossOp anchor) {
  KernelWriter writer(opIndex, members);
  const int64_t count = numElements(shapeOf(anchor.getPrediction()));
  Scope scope;
  scope.indent = "    ";
  std::string p = writer.element(anchor.getPrediction(), "i", scope);
  std::string t = writer.element(anchor.getTarget(), "i", scope);
  scope.line("const float d = " + p + " - " + t + ";");
  scope.line("total += d * d;");
  std::string out = writer.tensorParam(anchor.getResult(), Role::Output);
  std::ostringstream body;
  body << "  __shared__ float reduceScratch[32];\n  float total = 0.0f;\n"
       << "  for (long long i = threadIdx.x; i < " << count << "ll; i += blockDim.x) {\n"
       << scope.text.str() << "  }\n"
       << "  total = blockSum(total, reduceScratch);\n"
       << "  if (threadIdx.x == 0)\n    " << out << "[0] = total / " << floatLiteral(double(count))
       << ";\n";
  KernelLaunch launch;
  launch.space = KernelLaunch::Space::Single;
  launch.blockSize = 1024;
  finish(writer, "reduction", "mse_loss",
         "loss = mean((p - t)^2) in f32, one block. Memory: p and t read once.", body.str(),
         launch);
}

//===----------------------------------------------------------------------===//
// The fused classifier: cross-entropy loss and its gradient
//===----------------------------------------------------------------------===//

/// Emits the fused classifier: cross-entropy loss and (when the group has it) its gradient
/// from one read of each logits row's statistics, in two kernels (count, then loss_grad).
/// The loss is accumulated with atomicAdd across rows, so the count kernel must run first.
void Generator::crossEntropyKernels() {
  CrossEntropyOp loss;
  CrossEntropyGradOp grad;
  for (Operation *op : group->ops) {
    if (auto found = llvm::dyn_cast<CrossEntropyOp>(op))
      loss = found;
    if (auto found = llvm::dyn_cast<CrossEntropyGradOp>(op))
      grad = found;
  }
  if (!loss)
    throw std::runtime_error("CUDA codegen: cross_entropy group without cross_entropy");
  const Shape shape = shapeOf(loss.getLogits());
  const int64_t classes = shape.back(), rows = numElements(shape) / classes;
  const bool mean = loss.getReduction() == LossReduction::mean;
  // ignore_index is compiled in as a long long literal, compared with the label cast to 64 bits.
  const std::string ignore =
      "(" + std::to_string(static_cast<int64_t>(loss.getIgnoreIndex())) + "ll)";

  // 1. Count the labelled rows (the mean's divisor) and reset the loss.
  {
    KernelWriter writer(opIndex, members);
    std::string labels = writer.tensorParam(loss.getLabels(), Role::Input);
    std::string out = writer.tensorParam(loss.getResult(), Role::Output);
    // `labelled` is an f32 count in scratch, read by the second kernel as the mean's divisor.
    writer.scratchParam("labelled", {1});
    writer.scalarParam("rows", "i64", "rows");
    std::ostringstream body;
    body << "  __shared__ float reduceScratch[32];\n  float count = 0.0f;\n"
         << "  for (long long row = threadIdx.x; row < rows; row += blockDim.x)\n"
         << "    count += static_cast<long long>(" << labels << "[row]) != " << ignore
         << " ? 1.0f : 0.0f;\n"
         << "  count = blockSum(count, reduceScratch);\n"
         << "  if (threadIdx.x == 0) {\n    labelled[0] = count;\n"
         << "    // With every row ignored the mean is 0/0 = NaN, as in PyTorch.\n"
         << "    " << out
         << "[0] = " << (mean ? "count == 0.0f ? __int_as_float(0x7fffffff) : 0.0f" : "0.0f")
         << ";\n  }\n";
    KernelLaunch launch;
    launch.space = KernelLaunch::Space::Single;
    launch.blockSize = 1024;
    launch.rows = rows;
    finish(writer, "cross_entropy", "count",
           "labelled = the number of rows whose label is not ignore_index; loss = 0.\n"
           "Memory: the labels read once.",
           body.str(), launch);
  }
  // 2. One block per row: loss and gradient from the same statistics.
  KernelWriter writer(opIndex, members);
  Value logits = loss.getLogits();
  std::string labels = writer.tensorParam(loss.getLabels(), Role::Input);
  std::string lossOut = writer.tensorParam(loss.getResult(), Role::Output);
  writer.scratchParam("labelled", {1});
  std::vector<Value> gradOutputs;
  for (Value output : groupOutputs(writer))
    if (grad && writer.dependsOn(output, grad.getResult()))
      gradOutputs.push_back(output);
  std::ostringstream body;
  body << "  __shared__ float reduceScratch[32];\n"
       << "  const float count = labelled[0];\n";
  if (grad) {
    Scope dlossScope;
    // dloss is the scalar seed of the loss's gradient, read once per block.
    dlossScope.indent = "  ";
    std::string dloss = writer.element(grad.getGrad(), "0", dlossScope);
    body << dlossScope.text.str() << "  // dlogits = (softmax - onehot) * dloss / count.\n"
         << "  const float gradScale = "
         << (mean ? "count == 0.0f ? 0.0f : " + dloss + " / count" : dloss) << ";\n";
  }
  // Each row, one block: read the label's logit, then the stable log-sum-exp (row max, then the
  // sum of exp(x - max)); loss_row = logsumexp - x[label].
  const std::string errors = writer.errorParam(loss);
  // A block per row: classifier rows are vocabulary-long.
  const RowSpan blockSpan{false};
  body << "  for (long long row = blockIdx.x; row < rows; row += gridDim.x) {\n"
       << "    const long long label = static_cast<long long>(" << labels << "[row]);\n"
       << "    const bool ignored = label == " << ignore << ";\n"
       << "    // A label outside [0, L) that is not ignore_index: the CPU backend stops with an\n"
       << "    // error; here the loss and the row's gradient become NaN and the error record\n"
       << "    // names the label.\n"
       << "    const bool outside = !ignored && (label < 0 || label >= L);\n";
  {
    Scope labelScope;
    labelScope.indent = "      ";
    std::string x = writer.element(logits, "row * L + label", labelScope);
    body << "    // The label's logit is read before the row's first barrier, so the gradient may\n"
         << "    // overwrite the logits in place (each element is read before it is written).\n"
         << "    float labelLogit = 0.0f;\n"
         << "    if (threadIdx.x == 0 && !ignored && !outside) {\n"
         << labelScope.text.str() << "      labelLogit = " << x << ";\n    }\n";
  }
  body << "    float maximum = -__int_as_float(0x7f800000);\n"
       << rowLoop(blockSpan,
                  [&](Scope &s) {
                    std::string x = writer.element(logits, "i", s);
                    s.line("maximum = maximum < " + x + " ? " + x + " : maximum;");
                  })
       << "    maximum = blockMax(maximum, reduceScratch);\n"
       << "    float total = 0.0f;\n"
       << rowLoop(blockSpan,
                  [&](Scope &s) {
                    s.line("total += expf(" + writer.element(logits, "i", s) + " - maximum);");
                  })
       << "    total = blockSum(total, reduceScratch);\n"
       << "    const float logSumExp = maximum + logf(total);\n";
  // Thread 0 adds the row's loss (divided by the count for a mean) into the scalar with
  // atomicAdd; 0x7fffffff is a quiet NaN for a bad label.
  body << "    if (threadIdx.x == 0 && !ignored) {\n"
       << "      if (outside) {\n"
       << "        atomicAdd(" << lossOut << ", __int_as_float(0x7fffffff));\n"
       << "        reportError(" << errors << ", 1u, site, row, label, L);\n"
       << "      } else {\n"
       << "        atomicAdd(" << lossOut << ", (logSumExp - labelLogit)"
       << (mean ? " / count" : "") << ");\n      }\n    }\n";
  if (grad) {
    body << rowLoop(blockSpan, [&](Scope &s) {
      std::string x = writer.element(logits, "i", s);
      // softmax_j - [j == label], scaled by dloss (/ count): the gradient of the row's loss.
      std::string value = "ignored ? 0.0f : outside ? __int_as_float(0x7fffffff) : (expf(" + x +
                          " - maximum) / total - (j == label ? 1.0f : 0.0f)) * gradScale";
      if (isReducedFloat(elementOf(grad.getResult())))
        value = "roundAs<" + cType(elementOf(grad.getResult())) + ">(" + value + ")";
      s.line("const float dlogit = " + value + ";");
      KernelWriter::bind(s, grad.getResult(), "i", "dlogit");
      for (Value output : gradOutputs)
        writer.store(output, "i", writer.element(output, "i", s), s);
    });
  }
  body << "  }\n";
  // The gradient may be written over the logits it is computed from: same shape and element
  // type, each element read (by the thread that writes it, or before the row's barriers) first.
  for (KernelParam &output : writer.params)
    if (output.role == Role::Output && output.shape == shape)
      for (const KernelParam &input : writer.params)
        if (input.role == Role::Input && input.shape == shape &&
            input.elementType == output.elementType)
          output.aliasOf = input.name;
  writer.scalarParam("rows", "i64", "rows");
  writer.scalarParam("L", "i64", "row_length");
  KernelLaunch launch;
  launch.space = KernelLaunch::Space::Rows;
  launch.rows = rows;
  // One block per row, L = the class count (the vocabulary for a language model).
  launch.rowLength = classes;
  launch.blockSize = 1024;
  finish(writer, "cross_entropy", "loss_grad",
         std::string("Per row (one block): max and sum(exp(x - max)) in f32; loss += (logsumexp - "
                     "x[label])") +
             (mean ? " / count" : "") +
             " (f32 atomicAdd), rows labelled ignore_index skipped;\n"
             "dlogits = (softmax - onehot(label)) * dloss" +
             (mean ? " / count" : "") +
             ", 0 on ignored rows; dlogits may overwrite the logits in place. A label\n"
             "outside [0, L) that is not ignore_index makes\n"
             "the loss and its row's gradient NaN and is reported in the error record. The\n"
             "logits are never written in f32. Memory: the logits row read three times\n"
             "(L2-resident), dlogits written once.",
         body.str(), launch);
}

} // namespace cudagen
} // namespace ampc
