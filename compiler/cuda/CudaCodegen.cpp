//===- CudaCodegen.cpp - CUDA C++ kernels for the fused groups ------------===//
//
// Walks the fused micro_step and optimizer_step group by group and writes one CUDA C++
// translation unit per kernel launch. The core is an element evaluator: given a value of the
// group and the flat index of one of its elements, it emits the statements that compute that
// element in f32 from the group's external inputs (loads, broadcast indexing, the elementwise
// ops, embedding gathers), rounding wherever the unfused op would have stored a bf16/f16 value.
// Each kernel kind (elementwise, row reductions, column sums, gathers, the classifier) is a
// loop skeleton around that evaluator; the results of the op a skeleton is built around (a
// layernorm's y, a sum's total) are bound to variables so the evaluator continues into the
// group's elementwise consumers and stores every value read outside. Fixed code is device code
// in runtime/cuda/device/*.cuh, which the kernels include and call: the optimizer step's
// kernels (Optimizer.cuh), the column sums' skeletons, to which the evaluated elements are
// passed as lambdas (ColumnSum.cuh), the classifier's count (Classifier.cuh) and the error
// record (ErrorRecord.cuh).
//
// This file holds the driver (walking the groups, dispatching on their kinds), the element
// evaluator, and the naming, hashing and header of every kernel. The loop skeletons live by
// family in CudaCodegenElementwise.cpp (elementwise, accumulate, embedding, copy),
// CudaCodegenRows.cpp (the norm and softmax row kernels, two-stage column sums),
// CudaCodegenReductions.cpp (other sums, max, embedding and bias gradients, the MSE loss, the
// classifier) and CudaCodegenTraining.cpp (the entry points of the optimizer and the scalar
// step kernels); they share the writer and the generator through KernelGenerator.h.
//
//===----------------------------------------------------------------------===//

#include "compiler/cuda/KernelGenerator.h"
#include "compiler/lowering/PlanEmitter.h"
#include "compiler/support/Format.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/SmallPtrSet.h"
#include "llvm/ADT/TypeSwitch.h"

#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>

#ifndef AMPC_REPO_ROOT
#define AMPC_REPO_ROOT "."
#endif

using namespace mlir;
using namespace ampc::graph;

namespace ampc {
namespace cudagen {

Shape shapeOf(Value value) {
  if (auto type = llvm::dyn_cast<RankedTensorType>(value.getType()))
    return Shape(type.getShape().begin(), type.getShape().end());
  return {};
}

int64_t numElements(const Shape &shape) {
  int64_t count = 1;
  for (int64_t dim : shape)
    count *= dim;
  return count;
}

Type elementOf(Value value) { return getElementTypeOrSelf(value.getType()); }

/// "f32", "bf16", "f16", "i32", "i64".
std::string dtypeName(Type type) {
  if (type.isF32())
    return "f32";
  if (type.isBF16())
    return "bf16";
  if (type.isF16())
    return "f16";
  if (type.isInteger(32))
    return "i32";
  if (type.isInteger(64))
    return "i64";
  throw std::runtime_error("CUDA codegen: unsupported element type");
}

/// The C type of a stored element.
std::string cType(Type type) {
  if (type.isF32())
    return "float";
  if (type.isBF16())
    return "bfloat16";
  if (type.isF16())
    return "half16";
  if (type.isInteger(32))
    return "int";
  if (type.isInteger(64))
    return "long long";
  throw std::runtime_error("CUDA codegen: unsupported element type");
}

bool isReducedFloat(Type type) { return type.isBF16() || type.isF16(); }

/// A float literal that reads back as the same f32 value.
std::string floatLiteral(double value) {
  if (std::isinf(value))
    return value > 0 ? "__int_as_float(0x7f800000)" : "(-__int_as_float(0x7f800000))";
  char text[64];
  std::snprintf(text, sizeof(text), "%.9g", static_cast<double>(static_cast<float>(value)));
  std::string literal = text;
  if (literal.find_first_of(".e") == std::string::npos)
    literal += ".0";
  return literal + "f";
}

std::string doubleLiteral(double value) {
  char text[64];
  std::snprintf(text, sizeof(text), "%.17g", value);
  std::string literal = text;
  if (literal.find_first_of(".e") == std::string::npos)
    literal += ".0";
  return literal;
}

namespace {

/// 64-bit FNV-1a, for kernel names that depend on the code only.
uint64_t fnv1a64(const std::string &text) {
  uint64_t hash = 1469598103934665603ull;
  for (unsigned char c : text) {
    hash ^= c;
    hash *= 1099511628211ull;
  }
  return hash;
}

} // namespace

/// The index of the element of a value of shape \p in that NumPy broadcasting maps element
/// \p index of shape \p out to: a sum of (index / inner % size) * stride terms over runs of
/// dimensions that are kept, the broadcast ones dropped.
std::string broadcastIndex(const std::string &index, const Shape &in, const Shape &out) {
  const size_t rank = out.size();
  Shape inAligned(rank, 1);
  for (size_t d = 0; d < in.size(); ++d)
    inAligned[rank - in.size() + d] = in[d];
  Shape inStride(rank, 1), outInner(rank, 1);
  for (size_t d = rank; d-- > 1;) {
    inStride[d - 1] = inStride[d] * inAligned[d];
    outInner[d - 1] = outInner[d] * out[d];
  }
  std::string expression;
  size_t d = 0;
  while (d < rank) {
    const bool kept = !(inAligned[d] == 1 && out[d] != 1);
    size_t end = d;
    int64_t size = 1;
    while (end < rank && (!(inAligned[end] == 1 && out[end] != 1)) == kept)
      size *= out[end++];
    if (kept && size > 1) {
      const int64_t inner = outInner[end - 1], stride = inStride[end - 1];
      std::string term = inner == 1 ? index : "(" + index + " / " + std::to_string(inner) + "ll)";
      if (d > 0)
        term = "(" + term + " % " + std::to_string(size) + "ll)";
      if (stride != 1)
        term += " * " + std::to_string(stride) + "ll";
      expression += (expression.empty() ? "" : " + ") + term;
    }
    d = end;
  }
  return expression.empty() ? "0ll" : expression;
}

/// The location of \p op as "graph.add at tiny.mlir:12:5".
std::string describeOp(Operation *op) {
  return op->getName().getStringRef().str() + " at " + formatLocation(op->getLoc(), true);
}

namespace {

/// The namespace of the elementwise opcodes' scalar math (runtime/numerics/Elementwise.h), as
/// generated kernels name it.
constexpr const char *kScalarMath = "numerics::ops::";

/// numerics::ops::<name>::apply over \p in, the f32 values of an op's operands; the kernel
/// includes the header that defines it.
std::string scalarCall(const char *name, const std::vector<std::string> &in,
                       KernelWriter &writer) {
  writer.include("runtime/numerics/Elementwise.h");
  std::string call = std::string(kScalarMath) + name + "::apply(";
  for (size_t i = 0; i < in.size(); ++i)
    call += (i ? ", " : "") + in[i];
  return call + ")";
}

/// The f32 expression of an elementwise op over its operands' f32 values.
std::string elementwiseExpression(Operation *op, const std::vector<std::string> &in,
                                  const std::string &index, KernelWriter &writer) {
  return llvm::TypeSwitch<Operation *, std::string>(op)
  // Each elementwise opcode's element is numerics::ops::Name::apply (Elementwise.h), the
  // function the CPU backend maps over its arrays.
#define AMPC_BINARY_OP(Name, ...)                                                                  \
  .Case([&](Name##Op) { return scalarCall(#Name, in, writer); })
#define AMPC_UNARY_OP(Name, ...) AMPC_BINARY_OP(Name)
#define AMPC_UNARY_GRAD_OP(Name, ...) AMPC_BINARY_OP(Name)
#include "runtime/plan/OpCodes.def"
      .Case([&](GeluOp gelu) {
        return scalarCall(gelu.getApproximation() == GeluApproximation::erf ? "GeluErf"
                                                                            : "GeluTanh",
                          in, writer);
      })
      .Case([&](GeluGradOp grad) {
        return scalarCall(grad.getApproximation() == GeluApproximation::erf ? "GeluErfGrad"
                                                                            : "GeluTanhGrad",
                          in, writer);
      })
      .Case([&](ClipOp clip) {
        return scalarCall("Clip",
                          {in[0], floatLiteral(clip.getMin().convertToDouble()),
                           floatLiteral(clip.getMax().convertToDouble())},
                          writer);
      })
      .Case([&](ClipGradOp clip) {
        return scalarCall("ClipGrad",
                          {in[0], in[1], floatLiteral(clip.getMin().convertToDouble()),
                           floatLiteral(clip.getMax().convertToDouble())},
                          writer);
      })
      .Case([&](DropoutOp dropout) {
        // Kept iff uniform01(seed, step, stream, e) >= p, then scaled by 1 / (1 - p).
        writer.usesRandom = true;
        const double p = dropout.getP().convertToDouble();
        const int64_t stream = dropout.getStream() ? static_cast<int64_t>(*dropout.getStream()) : 0;
        return "(static_cast<double>(numerics::uniform01(seed, step, " + std::to_string(stream) +
               "u, static_cast<unsigned long long>(" + index + "))) >= " + doubleLiteral(p) +
               " ? " + in[0] + " * " + floatLiteral(1.0 / (1.0 - p)) + " : 0.0f)";
      })
      .Case([&](CastOp cast) {
        if (!llvm::isa<FloatType>(elementOf(cast.getResult())))
          throw std::runtime_error("CUDA codegen: a cast to an integer type inside a kernel (" +
                                   describeOp(op) + ")");
        return in[0];
      })
      .Default([&](Operation *) -> std::string {
        throw std::runtime_error("CUDA codegen: no elementwise form for " + describeOp(op));
      });
}

} // namespace

std::string KernelWriter::element(Value value, const std::string &index, Scope &scope) {
  auto key = std::make_pair(value.getAsOpaquePointer(), index);
  if (auto it = scope.known.find(key); it != scope.known.end())
    return it->second;
  Operation *op = value.getDefiningOp();
  std::string result;
  if (!inGroup(op)) {
    result = temp();
    scope.line("const float " + result + " = " + loadExternal(value, index, scope) + ";");
  } else if (auto reshape = llvm::dyn_cast<ReshapeOp>(op)) {
    // Same row-major elements in a new shape.
    result = element(reshape.getInput(), index, scope);
  } else if (auto broadcast = llvm::dyn_cast<BroadcastOp>(op)) {
    scope.broadcastRead = true;
    result = element(broadcast.getInput(),
                     broadcastIndex(index, shapeOf(broadcast.getInput()), shapeOf(value)), scope);
  } else if (auto embedding = llvm::dyn_cast<EmbeddingOp>(op)) {
    // out[r, d] = table[ids[r], d]
    scope.gatherRead = true;
    const int64_t width = shapeOf(value).back();
    std::string row = temp("id");
    scope.line(
        "const long long " + row + " = static_cast<long long>(" +
        rawLoad(embedding.getIndices(), "(" + index + ") / " + std::to_string(width) + "ll") +
        ");");
    if (inGroup(embedding.getTable()))
      throw std::runtime_error("CUDA codegen: an embedding table computed in the kernel (" +
                               describeOp(op) + ")");
    // An id outside the table (the CPU backend stops there) reads nothing: the element is NaN
    // and the error record names the id.
    const std::string rows = std::to_string(shapeOf(embedding.getTable()).front()) + "ll";
    const std::string errors = errorParam(op);
    scope.line("const bool " + row + "_in = " + row + " >= 0ll && " + row + " < " + rows + ";");
    scope.line("if (!" + row + "_in)");
    scope.line("  reportError(" + errors + ", 2u, site, (" + index + ") / " +
               std::to_string(width) + "ll, " + row + ", " + rows + ");");
    result = temp();
    scope.line("const float " + result + " = " + row + "_in ? toFloat(" +
               rawLoad(embedding.getTable(), row + " * " + std::to_string(width) + "ll + (" +
                                                 index + ") % " + std::to_string(width) + "ll") +
               ") : __int_as_float(0x7fffffff);");
  } else if (op->getNumResults() == 1 && op->hasTrait<graph::ElementwiseKernel>()) {
    const Shape shape = shapeOf(value);
    std::vector<std::string> operands;
    for (Value operand : op->getOperands()) {
      const Shape operandShape = shapeOf(operand);
      if (numElements(operandShape) == numElements(shape)) {
        operands.push_back(element(operand, index, scope));
      } else if (numElements(operandShape) == 1 && !inGroup(operand)) {
        // A scalar operand (the loss seed, a constant): the same element for every index.
        operands.push_back(element(operand, "0", scope));
      } else {
        scope.broadcastRead = true;
        operands.push_back(element(operand, broadcastIndex(index, operandShape, shape), scope));
      }
    }
    std::string expression = elementwiseExpression(op, operands, index, *this);
    // A bf16/f16 result is rounded where the unfused op would have stored it.
    if (isReducedFloat(elementOf(value)))
      expression = "roundAs<" + cType(elementOf(value)) + ">(" + expression + ")";
    result = temp();
    scope.line("const float " + result + " = " + expression + "; // " +
               op->getName().getStringRef().str());
  } else {
    throw std::runtime_error("CUDA codegen: " + describeOp(op) +
                             " cannot be evaluated element by element in its kernel");
  }
  scope.known[key] = result;
  return result;
}

namespace {

/// The runtime's error record (plan::DeviceErrorRecord) and reportError, which fills it.
constexpr const char *kErrorRecordHeader = "runtime/cuda/device/ErrorRecord.cuh";

} // namespace

//===----------------------------------------------------------------------===//
// The generator: one group at a time
//===----------------------------------------------------------------------===//

void Generator::finish(KernelWriter &writer, const std::string &kind, const std::string &stem,
                       const std::string &math, const std::string &body, KernelLaunch launch,
                       std::vector<TensorTableEntry> table) {
  // A dropout mask evaluated anywhere in the kernel (a row kernel's fused consumers included)
  // needs the run's seed and step; the elementwise skeleton adds them before its size.
  if (writer.usesRandom) {
    writer.runScalar("seed");
    writer.runScalar("step");
  }
  if (writer.usesErrors)
    writer.include(kErrorRecordHeader);
  if (writer.usesRandom)
    writer.include("runtime/numerics/Philox.h");
  std::ostringstream code;
  code << "#include \"runtime/cuda/device/KernelSupport.h\"\n";
  // The device code the body calls: a fixed kernel's (runtime/cuda/device/*.cuh), the scalar
  // math, the random numbers.
  for (const std::string &header : writer.headers)
    code << "#include \"" << header << "\"\n";
  code << "\nusing namespace ampc;\nusing namespace ampc::device;\n\n";
  code << "extern \"C\" __global__ void __launch_bounds__(" << launch.blockSize
       << (launch.minBlocks > 0 ? ", " + std::to_string(launch.minBlocks) : std::string())
       << ") KERNEL_NAME(\n"
       << writer.signature() << ") {\n";
  for (const std::string &read : writer.prologue)
    code << "  " << read << "\n";
  code << body << "}\n";
  std::string text = code.str();
  // A short hash keeps names readable and mostly distinct; kernels are told apart by their full
  // source (DeviceProgramBuilder), never by this name.
  char hash[17];
  std::snprintf(hash, sizeof(hash), "%08llx",
                static_cast<unsigned long long>(fnv1a64(text) & 0xffffffffull));
  std::string name = "ampc_" + kind + (stem.empty() ? "" : "_" + stem) + "_" + hash;
  for (size_t at; (at = text.find("KERNEL_NAME")) != std::string::npos;)
    text.replace(at, 11, name);

  GeneratedKernel kernel;
  kernel.name = name;
  kernel.kind = kind;
  kernel.function = group->function.getName().str();
  kernel.group = group->id;
  for (Operation *op : group->ops)
    kernel.fusedOps.push_back(describeOp(op));
  kernel.params = writer.params;
  kernel.launch = launch;
  kernel.table = std::move(table);
  kernel.code = text;

  std::ostringstream header;
  header << "// " << name << ": " << kind << " kernel of " << kernel.function << ", fusion group "
         << group->id << "\n//\n// Fused ops:\n";
  for (const std::string &op : kernel.fusedOps)
    header << "//   " << op << "\n";
  header << "//\n";
  std::istringstream mathLines(math);
  for (std::string line; std::getline(mathLines, line);)
    header << "// " << line << "\n";
  header << "//\n// Arguments:\n";
  for (const KernelParam &param : kernel.params) {
    static const char *roles[] = {"in",      "out",   "state",  "scalar",
                                  "scratch", "table", "errors", "run_scalars"};
    header << "//   " << param.name << " (" << roles[static_cast<int>(param.role)] << ", "
           << param.elementType;
    if (param.role != Role::Scalar && param.role != Role::ErrorRecord) {
      header << "[";
      for (size_t d = 0; d < param.shape.size(); ++d)
        header << (d ? "x" : "") << param.shape[d];
      header << "]";
    }
    header << "): " << param.value;
    if (!param.aliasOf.empty())
      header << " (may overwrite " << param.aliasOf << " in place)";
    header << "\n";
  }
  header << "\n";
  kernel.source = header.str() + text;
  kernels.push_back(std::move(kernel));
}

void Generator::run(func::FuncOp function) {
  opIndex.clear();
  std::map<int64_t, Group> groups;
  int index = 0;
  for (Operation &op : function.getBody().front()) {
    opIndex[&op] = index++;
    auto fusion = op.getAttrOfType<FusionAttr>(GraphDialect::kFusionAttrName);
    if (!fusion)
      throw std::runtime_error("CUDA codegen: " + describeOp(&op) +
                               " has no graph.fusion (run --graph-fuse first)");
    Group &g = groups[fusion.getGroup()];
    g.function = function;
    g.id = fusion.getGroup();
    g.kind = stringifyGroupKind(fusion.getKind()).str();
    g.ops.push_back(&op);
  }
  for (auto &entry : groups)
    generate(entry.second);
}

void Generator::generate(const Group &g) {
  group = &g;
  members.clear();
  for (Operation *op : g.ops)
    members.insert(op);
  auto findOp = [&](auto predicate) -> Operation * {
    for (Operation *op : g.ops)
      if (predicate(op))
        return op;
    return nullptr;
  };

  if (g.kind == "none") {
    // The small scalar ops of the step get tiny kernels of their own.
    for (Operation *op : g.ops) {
      if (auto seed = llvm::dyn_cast<GradSeedOp>(op))
        gradSeedKernel(seed);
      else if (auto schedule = llvm::dyn_cast<LrScheduleOp>(op))
        lrScheduleKernel(schedule);
      else if (auto norm = llvm::dyn_cast<GlobalNormOp>(op))
        globalNormKernels(norm);
      else if (auto update = llvm::dyn_cast<UpdateLossScaleOp>(op))
        updateLossScaleKernel(update);
    }
    return;
  }
  if (g.kind == "view" || g.kind == "matmul")
    return;
  if (g.kind == "matmul_epilogue") {
    // cuBLASLt's BIAS / GELU_AUX_BIAS / DGELU epilogues cover a matmul, a bias add and a tanh
    // gelu, or a tanh gelu's gradient; anything else would need a kernel of its own.
    if (Operation *extra = findOp([](Operation *op) {
          return !llvm::isa<MatmulOp, AddOp, GeluOp, GeluGradOp, ReshapeOp>(op);
        }))
      throw std::runtime_error("CUDA codegen: " + describeOp(extra) +
                               " in a matmul epilogue cuBLASLt cannot apply");
    return;
  }
  if (g.kind == "matmul_accumulate") {
    // cuBLASLt adds the product into the accumulator (beta = 1): no kernel.
    if (Operation *extra = findOp(
            [](Operation *op) { return !llvm::isa<MatmulOp, AccumulateGradOp, ReshapeOp>(op); }))
      throw std::runtime_error("CUDA codegen: " + describeOp(extra) +
                               " in a matmul that accumulates into its gradient");
    return;
  }
  if (g.kind == "attention")
    return attentionStub();
  if (g.kind == "elementwise")
    return elementwiseKernel("elementwise", "");
  if (g.kind == "accumulate")
    return elementwiseKernel("accumulate", "");
  if (g.kind == "copy")
    return copyKernel();
  if (g.kind == "optimizer")
    return optimizerKernel();
  if (g.kind == "cross_entropy")
    return crossEntropyKernels();
  if (g.kind == "bias_grad") {
    // The weight-gradient matmul is cuBLASLt's; the bias gradient is a column sum of the
    // matmul's operand, generated here (an f32 result from bf16/f16 data, which the BGRAD
    // epilogues do not write).
    Operation *sum = findOp([](Operation *op) { return llvm::isa<SumOp>(op); });
    return reduceKernel(sum);
  }
  if (g.kind == "reduction") {
    Operation *anchor = findOp([](Operation *op) {
      return llvm::isa<LayerNormOp, LayerNormGradOp, RmsNormOp, RmsNormGradOp, SoftmaxOp,
                       SoftmaxGradOp, SumOp, MeanOp, MaxOp, MaxGradOp, EmbeddingOp, EmbeddingGradOp,
                       MseLossOp>(op);
    });
    if (!anchor)
      throw std::runtime_error("CUDA codegen: reduction group " + std::to_string(g.id) +
                               " has no reduction op");
    if (llvm::isa<EmbeddingOp>(anchor))
      return elementwiseKernel("embedding", "");
    if (llvm::isa<LayerNormOp, RmsNormOp, SoftmaxOp, SoftmaxGradOp>(anchor))
      return rowKernel(anchor);
    if (llvm::isa<LayerNormGradOp, RmsNormGradOp>(anchor)) {
      rowKernel(anchor);
      return normGradColumns(anchor);
    }
    if (llvm::isa<SumOp, MeanOp, MaxOp>(anchor))
      return reduceKernel(anchor);
    if (auto maxGrad = llvm::dyn_cast<MaxGradOp>(anchor))
      return maxGradKernel(maxGrad);
    if (auto embeddingGrad = llvm::dyn_cast<EmbeddingGradOp>(anchor))
      return embeddingGradKernels(embeddingGrad);
    if (auto mse = llvm::dyn_cast<MseLossOp>(anchor))
      return mseLossKernel(mse);
  }
  throw std::runtime_error("CUDA codegen: no kernel for fusion kind '" + g.kind + "' (group " +
                           std::to_string(g.id) + ")");
}

void Generator::attentionStub() {
  GeneratedKernel kernel;
  kernel.kind = "attention";
  kernel.function = group->function.getName().str();
  kernel.group = group->id;
  KernelWriter writer(opIndex, members);
  for (Operation *op : group->ops) {
    kernel.fusedOps.push_back(describeOp(op));
    if (llvm::isa<AttentionOp, AttentionGradOp, QkvAttentionOp, QkvAttentionGradOp>(op)) {
      kernel.name = llvm::isa<AttentionOp, QkvAttentionOp>(op) ? "attention_forward"
                                                                : "attention_backward";
      for (Value operand : op->getOperands())
        writer.tensorParam(operand, Role::Input);
    }
  }
  for (Value output : groupOutputs(writer))
    writer.tensorParam(output, Role::Output);
  kernel.params = writer.params;
  kernel.launch.space = KernelLaunch::Space::Rows;
  kernels.push_back(std::move(kernel));
}

} // namespace cudagen

std::vector<GeneratedKernel> generateKernels(graph::ModelOp model) {
  std::vector<GeneratedKernel> kernels;
  cudagen::Generator generator(kernels);
  if (func::FuncOp entry = model.getEntryFunction())
    generator.run(entry);
  if (auto step = SymbolTable::lookupSymbolIn(model, "optimizer_step"))
    if (auto function = llvm::dyn_cast<func::FuncOp>(step);
        function && function != model.getEntryFunction())
      generator.run(function);
  return kernels;
}

std::vector<std::string> generatedKernelIncludeOptions() { return {"-I" AMPC_REPO_ROOT}; }

} // namespace ampc
