//===- CudaCodegenReductions.cpp - Reduction and loss kernels -------------===//
//
// The loop skeletons built around a reduction: sum/mean/max over arbitrary axes and the
// bias gradient, max and embedding gradients, the MSE loss and the fused cross-entropy
// classifier. The row kernels (norms, softmax) and the two-stage column sums are in
// CudaCodegenRows.cpp.
//
//===----------------------------------------------------------------------===//

#include "compiler/cuda/KernelGenerator.h"
#include "compiler/cuda/RowWalk.h"

#include <algorithm>
#include <sstream>
#include <stdexcept>

using namespace mlir;
using namespace ampc::graph;

namespace ampc {
namespace cudagen {

namespace {

/// Threads of the classifier's block per row (compiled into its pack walk), at most.
constexpr int kClassifierThreads = 1024;
/// A packed row's block: about 4 packs a thread, between 128 and kClassifierThreads threads, so
/// that short rows (an 8192-token vocabulary: 1024 packs, 256 threads) put several rows on a
/// multiprocessor at once, where one 1024-thread block per row left each row's load, block
/// reductions and stores in sequence with two rows in flight.
int classifierThreads(int64_t packs) {
  const int64_t threads = ((packs + 3) / 4 + 31) / 32 * 32;
  return static_cast<int>(std::clamp<int64_t>(threads, 128, kClassifierThreads));
}
/// The most 32-bit registers a classifier thread gives to its row's held packs: a thread has 64
/// (a 1024-thread block, or the blocks __launch_bounds__ asks to fit 1024 threads). The
/// 50304-long bf16 rows of a GPT-2 vocabulary hold 28; ptxas for sm_90 gives that kernel 59
/// registers in all (62 for f16), without spilling. f32 logits beside a 16-bit gradient (32-byte
/// packs) would hold 32 at 4 packs a thread: they take the two-read walk.
constexpr int64_t kClassifierHeldRegisters = 28;

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
    auto emitSum = [&](KernelWriter &writer, Scope &scope,
                       const std::function<std::string(int)> &accumulator) {
      scope.line(accumulator(0) + " += " + writer.element(input, "i", scope) + ";");
    };
    KernelWriter storeWriter(opIndex, members);
    Scope storeScope;
    storeScope.indent = "    ";
    storeScope.line("const float total = total0;");
    storeScope.line("const float result = " + finalValue + ";");
    KernelWriter::bind(storeScope, result, "i", "result");
    for (Value output : outputs)
      storeWriter.store(output, "i", storeWriter.element(output, "i", storeScope), storeScope);
    ColumnStoreFrame frame;
    accumulateColumnTotals(storeWriter, storeScope, result, frame);
    columnSumKernels(emitSum, storeWriter, storeScope.text.str(), 1, reduced, outCount,
                     group->kind == "bias_grad" ? "bias_grad" : "reduction", stem + "_columns",
                     std::string(isMean ? "out[j] = mean" : "out[j] = sum") +
                         " over the leading dimensions of x[row, j] (a column sum), in f32.",
                     frame);
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
/// The count kernel is device code (runtime/cuda/device/Classifier.cuh); loss_grad is written
/// here whole: its passes over a row are RowWalk's, generated around the group's fused
/// producers and consumers.
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

  // 1. Count the labelled rows (the mean's divisor) and reset the loss: Classifier.cuh's
  // crossEntropyCount.
  {
    KernelWriter writer(opIndex, members);
    writer.include("runtime/cuda/device/Classifier.cuh");
    std::string labels = writer.tensorParam(loss.getLabels(), Role::Input);
    std::string out = writer.tensorParam(loss.getResult(), Role::Output);
    // `labelled` is an f32 count in scratch, read by the second kernel as the mean's divisor.
    writer.scratchParam("labelled", {1});
    writer.scalarParam("rows", "i64", "rows");
    const std::string body = "  crossEntropyCount(" + labels + ", rows, " + ignore + ", " +
                             (mean ? "true" : "false") + ", " + out + ", labelled);\n";
    KernelLaunch launch;
    launch.space = KernelLaunch::Space::Single;
    launch.blockSize = 1024;
    launch.rows = rows;
    finish(writer, "cross_entropy", "count",
           "labelled = the number of rows whose label is not ignore_index; loss = 0 (NaN for a\n"
           "mean over no labelled row). Memory: the labels read once.",
           body, launch);
  }
  // 2. One block per row: loss and gradient from the same statistics. Emitted with \p walk (one
  // element at a time, or 16-byte packs, held in registers or read again by each pass); returns
  // the body.
  Value logits = loss.getLogits();
  // e^x by exp2 where every row tensor is 16-bit (the error is far below their step), else expf.
  const bool stored16 =
      isReducedFloat(elementOf(logits)) && (!grad || isReducedFloat(elementOf(grad.getResult())));
  auto exp = [&](const std::string &x) {
    return std::string(stored16 ? "expForStorage16(" : "expf(") + x + ")";
  };
  auto emit = [&](KernelWriter &writer, RowWalk &walk) {
    std::string labels = writer.tensorParam(loss.getLabels(), Role::Input);
    std::string lossOut = writer.tensorParam(loss.getResult(), Role::Output);
    writer.scratchParam("labelled", {1});
    std::vector<Value> gradOutputs;
    for (Value output : groupOutputs(writer))
      if (grad && writer.dependsOn(output, grad.getResult()))
        gradOutputs.push_back(output);
    std::ostringstream head;
    head << "  __shared__ float reduceScratch[32];\n"
         << "  const float count = labelled[0];\n";
    if (grad) {
      Scope dlossScope;
      // dloss is the scalar seed of the loss's gradient, read once per block.
      dlossScope.indent = "  ";
      std::string dloss = writer.element(grad.getGrad(), "0", dlossScope);
      head << dlossScope.text.str() << "  // dlogits = (softmax - onehot) * dloss / count.\n"
           << "  const float gradScale = "
           << (mean ? "count == 0.0f ? 0.0f : " + dloss + " / count" : dloss) << ";\n";
    }
    // Each row, one block: read the label's logit, then the stable log-sum-exp; loss_row =
    // logsumexp - x[label].
    const std::string errors = writer.errorParam(loss);
    head
        << "  for (long long row = blockIdx.x; row < rows; row += gridDim.x) {\n"
        << "    const long long label = static_cast<long long>(" << labels << "[row]);\n"
        << "    const bool ignored = label == " << ignore << ";\n"
        << "    // A label outside [0, L) that is not ignore_index: the CPU backend stops with an\n"
        << "    // error; here the loss and the row's gradient become NaN and the error record\n"
        << "    // names the label.\n"
        << "    const bool outside = !ignored && (label < 0 || label >= L);\n";
    std::ostringstream body;
    {
      Scope labelScope;
      labelScope.indent = "      ";
      std::string x = writer.element(logits, "row * L + label", labelScope);
      body << "    // The label's logit is read before the row's first barrier, so the gradient "
              "may\n"
           << "    // overwrite the logits in place (each element is read before it is "
              "written).\n"
           << "    float labelLogit = 0.0f;\n"
           << "    if (threadIdx.x == 0 && !ignored && !outside) {\n"
           << labelScope.text.str() << "      labelLogit = " << x << ";\n    }\n";
    }
    if (walk.holdPacks) {
      // The row is in registers: the maximum in one pass (no exponential), then the sum of
      // exp(x - maximum) in a second, every exponential independent of the others.
      body << "    float maximum = -__int_as_float(0x7f800000);\n"
           << walk.pass([&](Scope &s) {
                s.line("maximum = fmaxf(maximum, " + writer.element(logits, "i", s) + ");");
              })
           << "    maximum = blockMax(maximum, reduceScratch);\n"
           << "    float total = 0.0f;\n"
           << walk.pass([&](Scope &s) {
                s.line("total += " + exp(writer.element(logits, "i", s) + " - maximum") + ";");
              })
           << "    total = blockSum(total, reduceScratch);\n";
    } else {
      // Read from memory by each pass: one pass (each thread's running maximum and its sum of
      // exp(x - maximum), rescaled when the maximum grows; then the block's).
      body << "    float maximum = -__int_as_float(0x7f800000), total = 0.0f;\n"
           << walk.pass([&](Scope &s) {
                s.line("const float x = " + writer.element(logits, "i", s) + ";");
                s.line("if (x > maximum) {");
                s.line("  total = total * " + exp("maximum - x") + " + 1.0f;");
                s.line("  maximum = x;");
                s.line("} else {");
                s.line("  total += " + exp("x - maximum") + ";");
                s.line("}");
              })
           << "    // The row's maximum, and every thread's sum rescaled to it (a thread that saw\n"
           << "    // no element adds 0).\n"
           << "    const float rowMaximum = blockMax(maximum, reduceScratch);\n"
           << "    total = blockSum(total == 0.0f ? 0.0f : total * " << exp("maximum - rowMaximum")
           << ",\n                     reduceScratch);\n"
           << "    maximum = rowMaximum;\n";
    }
    body << "    const float logSumExp = maximum + logf(total);\n";
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
      // One division a row: softmax_j * dloss (/ count) = exp(x_j - maximum) * rowScale.
      body << "    const float rowScale = gradScale / total;\n"
           << walk.pass([&](Scope &s) {
                std::string x = writer.element(logits, "i", s);
                // softmax_j - [j == label], scaled by dloss (/ count): the gradient of the row's
                // loss.
                std::string value = "ignored ? 0.0f : outside ? __int_as_float(0x7fffffff) : " +
                                    exp(x + " - maximum") +
                                    " * rowScale - (j == label ? gradScale : 0.0f)";
                if (isReducedFloat(elementOf(grad.getResult())))
                  value = "roundAs<" + cType(elementOf(grad.getResult())) + ">(" + value + ")";
                s.line("const float dlogit = " + value + ";");
                KernelWriter::bind(s, grad.getResult(), "i", "dlogit");
                for (Value output : gradOutputs)
                  writer.store(output, "i", writer.element(output, "i", s), s);
              });
    }
    body << "  }\n";
    // The held packs' loads come first in the row, before the label's logit and every pass.
    const std::string text = head.str() + walk.holdLoad() + body.str();
    // The gradient may be written over the logits it is computed from: same shape and element
    // type, each element read (by the thread that writes it, or before the row's barriers)
    // first.
    for (KernelParam &output : writer.params)
      if (output.role == Role::Output && output.shape == shape)
        for (const KernelParam &input : writer.params)
          if (input.role == Role::Input && input.shape == shape &&
              input.elementType == output.elementType)
            output.aliasOf = input.name;
    writer.scalarParam("rows", "i64", "rows");
    writer.scalarParam("L", "i64", "row_length");
    return text;
  };

  // A block per row: classifier rows are vocabulary-long. The unpacked kernel first: it tells
  // which operands the row's elements come from.
  const RowSpan blockSpan{false};
  auto unpackedWriter = std::make_unique<KernelWriter>(opIndex, members);
  RowWalk unpacked(blockSpan, *unpackedWriter, kClassifierThreads);
  std::string body = emit(*unpackedWriter, unpacked);
  KernelWriter *writer = unpackedWriter.get();
  // Packs of 16 bytes over the narrowest of the row tensors (the logits as stored, the
  // gradient): every one of them must be a float [rows, L] tensor, read or written at i.
  int narrowest = 4;
  bool packable = !unpacked.broadcastRead && rows > 0;
  for (const KernelParam &param : unpackedWriter->params)
    if ((param.role == Role::Input || param.role == Role::Output) &&
        numElements(param.shape) == rows * classes) {
      if (param.elementType != "f32" && param.elementType != "bf16" && param.elementType != "f16")
        packable = false;
      narrowest = std::min(narrowest, param.elementType == "f32" ? 4 : 2);
    }
  const int width = 16 / narrowest;
  // Packed, the row's packs held in registers when they fit (one read of the row), else read
  // again by each pass.
  std::unique_ptr<KernelWriter> packedWriter;
  bool held = false;
  int threads = kClassifierThreads;
  for (bool hold : {true, false}) {
    if (!packable || classes % width != 0 || writer != unpackedWriter.get())
      break;
    auto candidate = std::make_unique<KernelWriter>(opIndex, members);
    const int packedThreads = classifierThreads(classes / width);
    RowWalk packed(blockSpan, *candidate, packedThreads);
    packed.packed = true;
    packed.width = width;
    packed.packs = classes / width;
    packed.rows = rows;
    packed.holdPacks = hold;
    std::string packedBody = emit(*candidate, packed);
    if (packed.broadcastRead || !packed.packsValid ||
        (hold && packed.heldRegisters() > kClassifierHeldRegisters))
      continue;
    body = std::move(packedBody);
    packedWriter = std::move(candidate);
    writer = packedWriter.get();
    held = hold;
    threads = packedThreads;
  }
  const bool vectorised = writer == packedWriter.get();
  KernelLaunch launch;
  launch.space = KernelLaunch::Space::Rows;
  launch.rows = rows;
  // One block per row, L = the class count (the vocabulary for a language model).
  launch.rowLength = classes;
  launch.blockSize = threads;
  // Blocks of fewer threads share a multiprocessor: ptxas keeps a thread within the 64
  // registers of a 1024-thread block, so 1024 threads' worth of rows fit (the 8192-class rows'
  // 256-thread kernel took 79 registers, 3 blocks, without the bound; 64 with it, no spills).
  launch.minBlocks = threads < kClassifierThreads ? kClassifierThreads / threads : 0;
  const std::string statistics =
      held ? "Per row (one block of " + std::to_string(threads) + " threads): the row's packs of " +
                 std::to_string(width) +
                 " read once into registers; from them the maximum, then sum(exp(x - max)), in "
                 "f32"
           : std::string("Per row (one block): the maximum and sum(exp(x - max)) in f32 in one "
                         "pass (a running\nmaximum per thread, its sum rescaled as it grows)");
  const std::string memory =
      held ? "the logits row read once (in registers for every pass)"
           : std::string("the logits row read twice (the second time from L2)") +
                 (vectorised ? ", in packs of " + std::to_string(width) : "");
  finish(*writer, "cross_entropy", "loss_grad",
         statistics + "; exp" + (stored16 ? " as exp2 (16-bit rows)" : "") +
             ";\nloss += (logsumexp - x[label])" + (mean ? " / count" : "") +
             " (f32 atomicAdd), rows labelled ignore_index skipped;\n"
             "dlogits = (softmax - onehot(label)) * dloss" +
             (mean ? " / count" : "") +
             " (one division a row), 0 on ignored rows; dlogits may overwrite the logits in "
             "place. A label\noutside [0, L) that is not ignore_index makes the loss and its "
             "row's gradient NaN and is\nreported in the error record. The logits are never "
             "written in f32. Memory: " +
             memory + ", dlogits written once.",
         body, launch);
}

} // namespace cudagen
} // namespace ampc
