//===- CudaCodegen.cpp - CUDA C++ kernels for the fused groups ------------===//
//
// Walks the fused micro_step and optimizer_step group by group and writes one CUDA C++
// translation unit per kernel launch. The core is an element evaluator: given a value of the
// group and the flat index of one of its elements, it emits the statements that compute that
// element in f32 from the group's external inputs (loads, broadcast indexing, the elementwise
// ops, embedding gathers), rounding wherever the unfused op would have stored a bf16/f16 value.
// Each kernel kind (elementwise, row reductions, column sums, gathers, the classifier, the
// optimizer) is a loop skeleton around that evaluator; the results of the op a skeleton is
// built around (a layernorm's y, a sum's total) are bound to variables so the evaluator
// continues into the group's elementwise consumers and stores every value read outside.
//
//===----------------------------------------------------------------------===//

#include "compiler/CudaCodegen.h"
#include "compiler/PlanEmitter.h"

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
namespace {

using Shape = std::vector<int64_t>;
using Role = KernelParam::Role;

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

/// 64-bit FNV-1a, for kernel names that depend on the code only.
uint64_t fnv1a64(const std::string &text) {
  uint64_t hash = 1469598103934665603ull;
  for (unsigned char c : text) {
    hash ^= c;
    hash *= 1099511628211ull;
  }
  return hash;
}

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

//===----------------------------------------------------------------------===//
// One kernel: its parameters and the element evaluator
//===----------------------------------------------------------------------===//

/// A body being emitted: the statements, and the elements already computed in it.
struct Scope {
  std::ostringstream text;
  std::string indent = "    ";
  std::map<std::pair<void *, std::string>, std::string> known;
  /// Vectorised loops: externals are read from packs named after their parameter.
  bool vector = false;
  std::set<std::string> packsRead;
  /// Set when an external value is read at an index other than its own element.
  bool broadcastRead = false;
  bool gatherRead = false;

  void line(const std::string &statement) { text << indent << statement << "\n"; }
};

class KernelWriter {
public:
  KernelWriter(const llvm::DenseMap<Operation *, int> &opIndex,
               const llvm::SmallPtrSetImpl<Operation *> &members)
      : opIndex(opIndex), members(members) {}

  std::vector<KernelParam> params;
  /// Statements at the start of the kernel (reads of scalars).
  std::vector<std::string> prologue;

  bool inGroup(Operation *op) const { return op && members.count(op); }
  bool inGroup(Value value) const { return inGroup(value.getDefiningOp()); }

  /// Whether \p value (a result of the group) is read by an op outside it.
  bool readOutside(Value value) const {
    for (Operation *user : value.getUsers())
      if (!inGroup(user))
        return true;
    return false;
  }

  /// What an SSA value is bound to, for KernelParam::value.
  std::string binding(Value value) const {
    Operation *op = value.getDefiningOp();
    if (!op)
      return "%arg";
    if (auto get = llvm::dyn_cast<GetParamOp>(op))
      return "@" + get.getName().str();
    if (auto get = llvm::dyn_cast<GetInputOp>(op))
      return "@" + get.getName().str();
    if (auto get = llvm::dyn_cast<GetLossScaleOp>(op))
      return "@" + get.getScaler().str() + ".scale";
    auto result = llvm::cast<OpResult>(value);
    std::string text = "%" + std::to_string(opIndex.lookup(op));
    if (result.getResultNumber() > 0)
      text += "#" + std::to_string(result.getResultNumber());
    return text;
  }

  /// The kernel argument for a tensor value read or written by the kernel.
  std::string tensorParam(Value value, Role role) {
    auto key = std::make_pair(value.getAsOpaquePointer(), static_cast<int>(role));
    if (auto it = tensorNames.find(key); it != tensorNames.end())
      return it->second;
    std::string name = (role == Role::Output ? "out" : "in") +
                       std::to_string(role == Role::Output ? outputs++ : inputs++);
    params.push_back({role, name, dtypeName(elementOf(value)), shapeOf(value), binding(value)});
    tensorNames[key] = name;
    return name;
  }

  /// A kernel argument bound to training state by name (an accumulator, a scaler field).
  std::string stateParam(const std::string &symbol, const std::string &dtype, Shape shape) {
    if (auto it = stateNames.find(symbol); it != stateNames.end())
      return it->second;
    std::string name = "state" + std::to_string(states++);
    params.push_back({Role::State, name, dtype, std::move(shape), "@" + symbol});
    stateNames[symbol] = name;
    return name;
  }

  /// A by-value argument (a size, the seed, the step); \p name is its C name.
  std::string scalarParam(const std::string &name, const std::string &dtype,
                          const std::string &value) {
    for (const KernelParam &param : params)
      if (param.name == name)
        return name;
    params.push_back({Role::Scalar, name, dtype, {}, value});
    return name;
  }

  std::string scratchParam(const std::string &name, Shape shape, const std::string &dtype = "f32") {
    params.push_back({Role::Scratch, name, dtype, std::move(shape), "scratch"});
    return name;
  }

  /// The C declaration of every parameter, in order.
  std::string signature() const {
    std::string text;
    for (size_t i = 0; i < params.size(); ++i) {
      const KernelParam &param = params[i];
      std::string type;
      if (param.role == Role::Scalar)
        type = param.elementType == "u64" ? "unsigned long long" : "long long";
      else if (param.role == Role::Table)
        type = "const " + param.elementType + " *__restrict__";
      else {
        std::string element = param.elementType == "f32"    ? "float"
                              : param.elementType == "bf16" ? "bfloat16"
                              : param.elementType == "f16"  ? "half16"
                              : param.elementType == "i32"  ? "int"
                                                            : "long long";
        bool readOnly = param.role == Role::Input;
        type = (readOnly ? "const " : "") + element + " *__restrict__";
      }
      text += (i ? ",\n    " : "    ") + type + " " + param.name;
    }
    return text;
  }

  /// A fresh name for a temporary.
  std::string temp(const std::string &stem = "t") { return stem + std::to_string(temps++); }

  /// Pre-binds element \p index of \p value to the variable \p name in \p scope (the result of
  /// the op a kernel is built around).
  static void bind(Scope &scope, Value value, const std::string &index, const std::string &name) {
    scope.known[{value.getAsOpaquePointer(), index}] = name;
  }

  /// Emits the statements computing element \p index of \p value in f32 and returns the
  /// variable that holds it.
  std::string element(Value value, const std::string &index, Scope &scope);

  /// The raw (unconverted) load of element \p index of an external value.
  std::string rawLoad(Value value, const std::string &index) {
    return tensorParam(value, Role::Input) + "[" + index + "]";
  }

  /// The f32 value of element \p index of the group-external value \p value.
  std::string loadExternal(Value value, const std::string &index, Scope &scope) {
    std::string param = tensorParam(value, Role::Input);
    if (scope.vector && numElements(shapeOf(value)) == 1)
      return "toFloat(" + param + "[0])"; // a scalar, read once per pack
    if (scope.vector) {
      scope.packsRead.insert(param);
      return "toFloat(pk_" + param + ".v[k])";
    }
    return "toFloat(" + param + "[" + index + "])";
  }

  /// Emits the store of \p expression (f32) as element \p index of the group result \p value.
  void store(Value value, const std::string &index, const std::string &expression,
             Scope &scope) {
    std::string param = tensorParam(value, Role::Output);
    std::string type = cType(elementOf(value));
    if (scope.vector)
      scope.line("po_" + param + ".v[k] = fromFloat<" + type + ">(" + expression + ");");
    else
      scope.line(param + "[" + index + "] = fromFloat<" + type + ">(" + expression + ");");
  }

  /// Whether \p value, a value of the group, is computed from \p root inside the group.
  bool dependsOn(Value value, Value root) const {
    if (value == root)
      return true;
    Operation *op = value.getDefiningOp();
    if (!inGroup(op))
      return false;
    for (Value operand : op->getOperands())
      if (dependsOn(operand, root))
        return true;
    return false;
  }

  /// Seed and step of the dropout masks (the CPU backend's keying).
  bool usesRandom = false;

private:
  const llvm::DenseMap<Operation *, int> &opIndex;
  const llvm::SmallPtrSetImpl<Operation *> &members;
  std::map<std::pair<void *, int>, std::string> tensorNames;
  std::map<std::string, std::string> stateNames;
  int inputs = 0, outputs = 0, states = 0, temps = 0;
};

/// The f32 expression of an elementwise op over its operands' f32 values.
std::string elementwiseExpression(Operation *op, const std::vector<std::string> &in,
                                  const std::string &index, KernelWriter &writer) {
  return llvm::TypeSwitch<Operation *, std::string>(op)
      .Case([&](AddOp) { return in[0] + " + " + in[1]; })
      .Case([&](SubOp) { return in[0] + " - " + in[1]; })
      .Case([&](MulOp) { return in[0] + " * " + in[1]; })
      .Case([&](DivOp) { return in[0] + " / " + in[1]; })
      .Case([&](NegOp) { return "-" + in[0]; })
      // max(x, 0) keeping NaN, as the CPU backend (and PyTorch) do.
      .Case([&](ReluOp) { return "(" + in[0] + " > 0.0f || " + in[0] + " != " + in[0] + " ? " +
                                 in[0] + " : 0.0f)"; })
      .Case([&](SiluOp) { return in[0] + " / (1.0f + expf(-" + in[0] + "))"; })
      .Case([&](TanhOp) { return "tanhf(" + in[0] + ")"; })
      .Case([&](ExpOp) { return "expf(" + in[0] + ")"; })
      .Case([&](LogOp) { return "logf(" + in[0] + ")"; })
      .Case([&](SqrtOp) { return "sqrtf(" + in[0] + ")"; })
      .Case([&](RsqrtOp) { return "1.0f / sqrtf(" + in[0] + ")"; })
      .Case([&](GeluOp gelu) {
        const std::string &x = in[0];
        if (gelu.getApproximation() == GeluApproximation::erf)
          return "0.5f * " + x + " * (1.0f + erff(" + x + " * 0.707106781f))";
        return "0.5f * " + x + " * (1.0f + tanhf(0.797884561f * (" + x + " + 0.044715f * " + x +
               " * " + x + " * " + x + ")))";
      })
      .Case([&](ReluGradOp) { return in[1] + " * (" + in[0] + " > 0.0f ? 1.0f : 0.0f)"; })
      .Case([&](SiluGradOp) {
        return "siluGrad(" + in[0] + ", " + in[1] + ")";
      })
      .Case([&](GeluGradOp grad) {
        return std::string(grad.getApproximation() == GeluApproximation::erf ? "geluErfGrad("
                                                                              : "geluTanhGrad(") +
               in[0] + ", " + in[1] + ")";
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
    scope.line("const long long " + row + " = static_cast<long long>(" +
               rawLoad(embedding.getIndices(), "(" + index + ") / " + std::to_string(width) +
                       "ll") +
               ");");
    if (inGroup(embedding.getTable()))
      throw std::runtime_error("CUDA codegen: an embedding table computed in the kernel (" +
                               describeOp(op) + ")");
    result = temp();
    scope.line("const float " + result + " = toFloat(" +
               rawLoad(embedding.getTable(), row + " * " + std::to_string(width) + "ll + (" +
                                                 index + ") % " + std::to_string(width) + "ll") +
               ");");
  } else if (op->getNumResults() == 1 &&
             llvm::isa<AddOp, SubOp, MulOp, DivOp, NegOp, ReluOp, SiluOp, TanhOp, ExpOp, LogOp,
                       SqrtOp, RsqrtOp, GeluOp, ReluGradOp, SiluGradOp, GeluGradOp, DropoutOp,
                       CastOp>(op)) {
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

/// Shared device functions for the activation gradients (the CPU backend's formulas).
const char *kActivationGradients = R"(// dy * s (1 + x (1 - s)), s = sigmoid(x)
__device__ __forceinline__ float siluGrad(float x, float dy) {
  const float s = 1.0f / (1.0f + expf(-x));
  return dy * s * (1.0f + x * (1.0f - s));
}
// dy * (Phi(x) + x phi(x))
__device__ __forceinline__ float geluErfGrad(float x, float dy) {
  const float cdf = 0.5f * (1.0f + erff(x * 0.707106781f));
  const float pdf = 0.398942280f * expf(-0.5f * x * x);
  return dy * (cdf + x * pdf);
}
// dy * (0.5 (1 + tanh u) + 0.5 x (1 - tanh^2 u) du/dx), u = sqrt(2/pi) (x + 0.044715 x^3)
__device__ __forceinline__ float geluTanhGrad(float x, float dy) {
  const float th = tanhf(0.797884561f * (x + 0.044715f * x * x * x));
  const float du = 0.797884561f * (1.0f + 3.0f * 0.044715f * x * x);
  return dy * (0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * du);
}

)";

//===----------------------------------------------------------------------===//
// The generator: one group at a time
//===----------------------------------------------------------------------===//

struct Group {
  mutable func::FuncOp function;
  int64_t id = 0;
  std::string kind;
  std::vector<Operation *> ops;
};

class Generator {
public:
  explicit Generator(std::vector<GeneratedKernel> &kernels) : kernels(kernels) {}

  void run(func::FuncOp function);

private:
  std::vector<GeneratedKernel> &kernels;
  llvm::DenseMap<Operation *, int> opIndex;
  llvm::SmallPtrSet<Operation *, 32> members;
  const Group *group = nullptr;

  void generate(const Group &g);
  /// Finishes a kernel: header comment, includes, the code; name from the code's hash.
  void finish(KernelWriter &writer, const std::string &kind, const std::string &stem,
              const std::string &math, const std::string &body, KernelLaunch launch,
              std::vector<TensorTableEntry> table = {}, const std::string &preamble = "");

  std::vector<Value> groupOutputs(const KernelWriter &writer) const {
    std::vector<Value> outputs;
    for (Operation *op : group->ops)
      for (Value result : op->getResults())
        if (writer.readOutside(result) && !llvm::isa<ReshapeOp>(op))
          outputs.push_back(result);
    return outputs;
  }

  void elementwiseKernel(const std::string &kind, const std::string &math);
  void copyKernel();
  void rowKernel(Operation *anchor);
  void normGradColumns(Operation *anchor);
  void reduceKernel(Operation *anchor);
  void maxGradKernel(MaxGradOp anchor);
  void embeddingGradKernels(EmbeddingGradOp anchor);
  void mseLossKernel(MseLossOp anchor);
  void crossEntropyKernels();
  void optimizerKernel();
  void attentionStub();
  void gradSeedKernel(GradSeedOp op);
  void lrScheduleKernel(LrScheduleOp op);
  void globalNormKernels(GlobalNormOp op);
  void updateLossScaleKernel(UpdateLossScaleOp op);
};

void Generator::finish(KernelWriter &writer, const std::string &kind, const std::string &stem,
                       const std::string &math, const std::string &body, KernelLaunch launch,
                       std::vector<TensorTableEntry> table, const std::string &preamble) {
  std::ostringstream code;
  code << "#include \"runtime/cuda/device/KernelSupport.h\"\n";
  if (writer.usesRandom || body.find("numerics::") != std::string::npos ||
      preamble.find("numerics::") != std::string::npos)
    code << "#include \"runtime/numerics/Philox.h\"\n";
  if (body.find("updateLossScale") != std::string::npos)
    code << "#include \"runtime/numerics/LossScale.h\"\n";
  code << "\nusing namespace ampc;\nusing namespace ampc::device;\n\n";
  if (body.find("Grad(") != std::string::npos)
    code << kActivationGradients;
  code << preamble;
  code << "extern \"C\" __global__ void __launch_bounds__(" << launch.blockSize
       << ") KERNEL_NAME(\n"
       << writer.signature() << ") {\n"
       << body << "}\n";
  std::string text = code.str();
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
    static const char *roles[] = {"in", "out", "state", "scalar", "scratch", "table"};
    header << "//   " << param.name << " (" << roles[static_cast<int>(param.role)] << ", "
           << param.elementType;
    if (param.role != Role::Scalar) {
      header << "[";
      for (size_t d = 0; d < param.shape.size(); ++d)
        header << (d ? "x" : "") << param.shape[d];
      header << "]";
    }
    header << "): " << param.value << "\n";
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
    auto id = op.getAttrOfType<IntegerAttr>("fusion_group");
    if (!id)
      throw std::runtime_error("CUDA codegen: " + describeOp(&op) +
                               " has no fusion_group (run --graph-fuse first)");
    Group &g = groups[id.getInt()];
    g.function = function;
    g.id = id.getInt();
    if (auto kind = op.getAttrOfType<StringAttr>("fusion_kind"))
      g.kind = kind.getValue().str();
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
    // cuBLASLt's BIAS / GELU_AUX_BIAS epilogues cover a matmul, a bias add and a tanh gelu;
    // anything else would need a kernel of its own.
    if (Operation *extra = findOp([](Operation *op) {
          return !llvm::isa<MatmulOp, AddOp, GeluOp, ReshapeOp>(op);
        }))
      throw std::runtime_error("CUDA codegen: " + describeOp(extra) +
                               " in a matmul epilogue cuBLASLt cannot apply");
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
                       SoftmaxGradOp, SumOp, MeanOp, MaxOp, MaxGradOp, EmbeddingOp,
                       EmbeddingGradOp, MseLossOp>(op);
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

//===----------------------------------------------------------------------===//
// Elementwise and accumulate: one iteration space
//===----------------------------------------------------------------------===//

void Generator::elementwiseKernel(const std::string &kind, const std::string &) {
  // The iteration space: the largest value of the group.
  Shape space;
  for (Operation *op : group->ops) {
    for (Value result : op->getResults())
      if (numElements(shapeOf(result)) > numElements(space))
        space = shapeOf(result);
    if (auto accumulate = llvm::dyn_cast<AccumulateGradOp>(op))
      if (numElements(shapeOf(accumulate.getGrad())) > numElements(space))
        space = shapeOf(accumulate.getGrad());
  }
  const int64_t count = numElements(space);

  // Emits one element's work: every output and accumulator update at index `i`.
  auto emitBody = [&](KernelWriter &writer, Scope &scope) {
    for (Value output : groupOutputs(writer)) {
      if (numElements(shapeOf(output)) != count)
        throw std::runtime_error("CUDA codegen: an output of group " + std::to_string(group->id) +
                                 " has a different size than the group's space");
      writer.store(output, "i", writer.element(output, "i", scope), scope);
    }
    for (Operation *op : group->ops) {
      auto accumulate = llvm::dyn_cast<AccumulateGradOp>(op);
      if (!accumulate)
        continue;
      std::string g = writer.element(accumulate.getGrad(), "i", scope);
      std::string acc = writer.stateParam(accumulate.getAccumulator().str(), "f32",
                                          shapeOf(accumulate.getGrad()));
      std::string target = scope.vector ? "pa_" + acc + ".v[k]" : acc + "[i]";
      if (accumulate.getUnscale()) {
        std::string v = writer.temp("u");
        scope.line("const float " + v + " = " + g + " / scale; // unscaled gradient");
        scope.line("nonFinite = nonFinite || !isFinite(" + v + ");");
        scope.line(target + " += " + v + ";");
      } else {
        scope.line(target + " += " + g + ";");
      }
    }
  };

  KernelWriter writer(opIndex, members);
  // The scalar loop first: it tells whether every read is a plain, aligned element read.
  Scope scalar;
  scalar.indent = "    ";
  emitBody(writer, scalar);
  std::vector<std::string> accumulators;
  std::string scalePtr, foundPtr;
  for (Operation *op : group->ops)
    if (auto accumulate = llvm::dyn_cast<AccumulateGradOp>(op)) {
      accumulators.push_back(writer.stateParam(accumulate.getAccumulator().str(), "f32",
                                               shapeOf(accumulate.getGrad())));
      if (auto scaler = accumulate.getUnscale()) {
        scalePtr = writer.stateParam(scaler->str() + ".scale", "f32", {});
        foundPtr = writer.stateParam(scaler->str() + ".found_nonfinite", "f32", {});
      }
    }
  if (writer.usesRandom) {
    writer.scalarParam("seed", "u64", "seed");
    writer.scalarParam("step", "u64", "step");
  }
  writer.scalarParam("n", "i64", "elements");

  // 16-byte accesses when every operand is read element for element.
  int maxBytes = 1;
  bool allFloat = true;
  for (const KernelParam &param : writer.params)
    if (param.role == Role::Input || param.role == Role::Output || param.role == Role::State) {
      if (numElements(param.shape) == 1 && count != 1)
        continue; // scalars are read directly, not in packs
      if (numElements(param.shape) != count)
        allFloat = false;
      if (param.elementType == "i32" || param.elementType == "i64")
        allFloat = false;
      maxBytes = std::max(maxBytes, param.elementType == "f32" ? 4 : 2);
    }
  const bool vectorise = allFloat && !scalar.broadcastRead && !scalar.gatherRead && count > 0;
  const int width = 16 / maxBytes;

  std::ostringstream body;
  body << "  const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;\n"
       << "  const long long first = static_cast<long long>(blockIdx.x) * blockDim.x + "
          "threadIdx.x;\n";
  if (!scalePtr.empty())
    body << "  const float scale = " << scalePtr << "[0];\n  bool nonFinite = false;\n";
  std::string tailStart = "first";
  if (vectorise) {
    Scope vector;
    vector.vector = true;
    vector.indent = "      ";
    emitBody(writer, vector);
    auto elementC = [](const std::string &dtype) {
      return dtype == "f32" ? std::string("float") : dtype == "bf16" ? "bfloat16" : "half16";
    };
    body << "  // Vectorised loop: " << width << " elements per thread and operand, each operand "
         << "read or\n  // written as one access of " << width << " x its element size (16 bytes "
         << "for the widest);\n  // the tail below takes the n % " << width << " left.\n"
         << "  const long long packs = n / " << width << ";\n"
         << "  for (long long p = first; p < packs; p += stride) {\n";
    for (const KernelParam &param : writer.params) {
      std::string pack = "Pack<" + elementC(param.elementType) + ", " + std::to_string(width) + ">";
      if (param.role == Role::Input && vector.packsRead.count(param.name))
        body << "    const " << pack << " pk_" << param.name << " = reinterpret_cast<const "
             << pack << " *>(" << param.name << ")[p];\n";
      else if (param.role == Role::Output)
        body << "    " << pack << " po_" << param.name << ";\n";
      else if (param.role == Role::State && !param.shape.empty())
        body << "    " << pack << " pa_" << param.name << " = reinterpret_cast<" << pack
             << " *>(" << param.name << ")[p];\n";
    }
    body << "#pragma unroll\n    for (int k = 0; k < " << width << "; ++k) {\n"
         << "      const long long i = p * " << width << " + k;\n"
         << "      (void)i;\n"
         << vector.text.str() << "    }\n";
    for (const KernelParam &param : writer.params) {
      std::string pack = "Pack<" + elementC(param.elementType) + ", " + std::to_string(width) + ">";
      if (param.role == Role::Output)
        body << "    reinterpret_cast<" << pack << " *>(" << param.name << ")[p] = po_"
             << param.name << ";\n";
      else if (param.role == Role::State && !param.shape.empty())
        body << "    reinterpret_cast<" << pack << " *>(" << param.name << ")[p] = pa_"
             << param.name << ";\n";
    }
    body << "  }\n";
    tailStart = "packs * " + std::to_string(width) + " + first";
  }
  body << (vectorise ? "  // Scalar tail.\n" : "  // Grid-stride loop over the elements.\n")
       << "  for (long long i = " << tailStart << "; i < n; i += stride) {\n"
       << scalar.text.str() << "  }\n";
  if (!foundPtr.empty())
    body << "  // Raise the scaler's non-finite flag (no host synchronisation; the optimizer\n"
         << "  // step reads it).\n"
         << "  if (__syncthreads_or(nonFinite) && threadIdx.x == 0)\n"
         << "    atomicExch(" << foundPtr << ", 1.0f);\n";

  std::string math;
  if (kind == "accumulate")
    math = foundPtr.empty() ? "acc[i] += g[i] (f32), g the fused gradient expression.\n"
                            : "acc[i] += g[i] / scale (f32); the non-finite flag is set (atomic "
                              "store) if any\ng[i] / scale is inf or NaN.\n";
  else if (kind == "embedding")
    math = "out[r, d] = table[ids[r], d], then the fused elementwise consumers, per element.\n";
  else
    math = "out[i] = the fused elementwise expression of the inputs at i (broadcast inputs\n"
           "indexed by their NumPy broadcast strides), computed in f32.\n";
  math += "Memory: reads each input once, writes each output once" +
          std::string(accumulators.empty() ? "" : ", read-modify-writes the f32 accumulator") +
          ".";
  KernelLaunch launch;
  launch.space = KernelLaunch::Space::Elements;
  launch.elements = count;
  launch.vectorWidth = vectorise ? width : 1;
  std::string stem;
  for (Operation *op : group->ops) {
    if (llvm::isa<ReshapeOp, BroadcastOp>(op))
      continue;
    std::string name = op->getName().stripDialect().str();
    if (stem.size() < 40 && stem.find(name) == std::string::npos)
      stem += (stem.empty() ? "" : "_") + name;
  }
  finish(writer, kind, stem, math, body.str(), launch);
}

//===----------------------------------------------------------------------===//
// Copy: gathers through transpose, slice, pad, concat, split, broadcast, reshape
//===----------------------------------------------------------------------===//

/// Emits statements declaring `name` (of C type `type`) as element `index` of `value`, walking
/// the data-movement ops of the group back to an external value; values keep their bits.
void gatherElement(KernelWriter &writer, Value value, const std::string &index,
                   const std::string &name, const std::string &type, Scope &scope) {
  Operation *op = value.getDefiningOp();
  if (!writer.inGroup(op)) {
    scope.line(name + " = " + writer.rawLoad(value, index) + ";");
    return;
  }
  const Shape out = shapeOf(value);
  // Coordinates of `index` in `out`: c[d] = index / inner[d] % out[d].
  auto coordinates = [&](const std::string &stem) {
    std::vector<std::string> names;
    int64_t inner = 1;
    std::vector<std::string> lines;
    for (size_t d = out.size(); d-- > 0;) {
      std::string c = stem + std::to_string(d);
      lines.push_back("const long long " + c + " = (" + index + ") / " + std::to_string(inner) +
                      "ll % " + std::to_string(out[d]) + "ll;");
      inner *= out[d];
      names.insert(names.begin(), c);
    }
    for (auto it = lines.rbegin(); it != lines.rend(); ++it)
      scope.line(*it);
    return names;
  };
  auto linear = [](const std::vector<std::string> &c, const Shape &shape) {
    std::string expression;
    int64_t inner = 1;
    for (size_t d = shape.size(); d-- > 0;) {
      expression = c[d] + (inner == 1 ? "" : " * " + std::to_string(inner) + "ll") +
                   (expression.empty() ? "" : " + " + expression);
      inner *= shape[d];
    }
    return expression.empty() ? std::string("0ll") : expression;
  };
  const std::string stem = writer.temp("c") + "_";
  if (auto reshape = llvm::dyn_cast<ReshapeOp>(op))
    return gatherElement(writer, reshape.getInput(), index, name, type, scope);
  if (auto broadcast = llvm::dyn_cast<BroadcastOp>(op))
    return gatherElement(writer, broadcast.getInput(),
                         broadcastIndex(index, shapeOf(broadcast.getInput()), out), name, type,
                         scope);
  if (auto transpose = llvm::dyn_cast<TransposeOp>(op)) {
    // out[c] = in[c'] with c'[perm[d]] = c[d]
    std::vector<std::string> c = coordinates(stem);
    Shape inShape = shapeOf(transpose.getInput());
    std::vector<std::string> inCoords(c.size());
    for (size_t d = 0; d < c.size(); ++d)
      inCoords[transpose.getPermutation()[d]] = c[d];
    return gatherElement(writer, transpose.getInput(), linear(inCoords, inShape), name, type,
                         scope);
  }
  if (auto slice = llvm::dyn_cast<SliceOp>(op)) {
    std::vector<std::string> c = coordinates(stem);
    for (size_t d = 0; d < c.size(); ++d)
      if (slice.getStarts()[d] != 0)
        c[d] = "(" + c[d] + " + " + std::to_string(slice.getStarts()[d]) + "ll)";
    return gatherElement(writer, slice.getInput(), linear(c, shapeOf(slice.getInput())), name,
                         type, scope);
  }
  if (auto split = llvm::dyn_cast<SplitOp>(op)) {
    const unsigned piece = llvm::cast<OpResult>(value).getResultNumber();
    int64_t offset = 0;
    for (unsigned k = 0; k < piece; ++k)
      offset += split.getSizes()[k];
    std::vector<std::string> c = coordinates(stem);
    const int64_t axis = split.getAxis();
    if (offset)
      c[axis] = "(" + c[axis] + " + " + std::to_string(offset) + "ll)";
    return gatherElement(writer, split.getInput(), linear(c, shapeOf(split.getInput())), name,
                         type, scope);
  }
  if (auto pad = llvm::dyn_cast<PadOp>(op)) {
    // Zero outside [low, low + in) along every dimension.
    std::vector<std::string> c = coordinates(stem);
    Shape inShape = shapeOf(pad.getInput());
    std::string inside;
    for (size_t d = 0; d < c.size(); ++d) {
      const int64_t low = pad.getLow()[d];
      if (low)
        c[d] = "(" + c[d] + " - " + std::to_string(low) + "ll)";
      if (low || pad.getHigh()[d])
        inside += std::string(inside.empty() ? "" : " && ") + c[d] + " >= 0 && " + c[d] + " < " +
                  std::to_string(inShape[d]) + "ll";
    }
    if (inside.empty())
      return gatherElement(writer, pad.getInput(), linear(c, inShape), name, type, scope);
    scope.line("if (" + inside + ") {");
    scope.indent += "  ";
    gatherElement(writer, pad.getInput(), linear(c, inShape), name, type, scope);
    scope.indent.resize(scope.indent.size() - 2);
    scope.line("} else {");
    scope.line("  " + name + " = fromFloat<" + type + ">(0.0f);");
    scope.line("}");
    return;
  }
  if (auto concat = llvm::dyn_cast<ConcatOp>(op)) {
    std::vector<std::string> c = coordinates(stem);
    const int64_t axis = concat.getAxis();
    int64_t offset = 0;
    const auto inputs = concat.getInputs();
    for (size_t k = 0; k < inputs.size(); ++k) {
      const Shape partShape = shapeOf(inputs[k]);
      std::vector<std::string> pc = c;
      if (offset)
        pc[axis] = "(" + c[axis] + " - " + std::to_string(offset) + "ll)";
      const bool last = k + 1 == inputs.size();
      if (!last)
        scope.line(std::string(k ? "} else if (" : "if (") + c[axis] + " < " +
                   std::to_string(offset + partShape[axis]) + "ll) {");
      else if (k)
        scope.line("} else {");
      if (inputs.size() > 1)
        scope.indent += "  ";
      gatherElement(writer, inputs[k], linear(pc, partShape), name, type, scope);
      if (inputs.size() > 1)
        scope.indent.resize(scope.indent.size() - 2);
      offset += partShape[axis];
    }
    if (inputs.size() > 1)
      scope.line("}");
    return;
  }
  throw std::runtime_error("CUDA codegen: " + describeOp(op) + " in a copy kernel");
}

void Generator::copyKernel() {
  KernelWriter writer(opIndex, members);
  std::vector<Value> outputs = groupOutputs(writer);
  int64_t space = 0;
  for (Value output : outputs)
    space = std::max(space, numElements(shapeOf(output)));
  std::ostringstream body;
  body << "  const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;\n"
       << "  for (long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; "
          "i < n;\n       i += stride) {\n";
  for (Value output : outputs) {
    Scope scope;
    scope.indent = "      ";
    const std::string type = cType(elementOf(output));
    std::string value = writer.temp("v");
    scope.line(type + " " + value + ";");
    gatherElement(writer, output, "i", value, type, scope);
    std::string param = writer.tensorParam(output, Role::Output);
    const int64_t count = numElements(shapeOf(output));
    body << "    if (i < " << count << "ll) {\n"
         << scope.text.str() << "      " << param << "[i] = " << value << ";\n    }\n";
  }
  body << "  }\n";
  writer.scalarParam("n", "i64", "elements");
  KernelLaunch launch;
  launch.elements = space;
  std::string stem;
  for (Operation *op : group->ops) {
    std::string name = op->getName().stripDialect().str();
    if (name != "reshape" && stem.find(name) == std::string::npos)
      stem += (stem.empty() ? "" : "_") + name;
  }
  finish(writer, "copy", stem,
         "out[i] = the element of the input that the data-movement chain maps to i (bits\n"
         "copied unchanged). Memory: one read and one write per output element.",
         body.str(), launch);
}

//===----------------------------------------------------------------------===//
// Row kernels: norms, softmax and their gradients (one block per row)
//===----------------------------------------------------------------------===//

/// Emits `for (j ...) { const long long i = row * L + j; <body> }` with a fresh scope.
template <typename F>
std::string rowLoop(KernelWriter &writer, F body, const std::string &limit = "L") {
  Scope scope;
  scope.indent = "      ";
  body(scope);
  (void)writer;
  return "    for (long long j = threadIdx.x; j < " + limit +
         "; j += blockDim.x) {\n      const long long i = row * L + j;\n" + scope.text.str() +
         "    }\n";
}

void Generator::rowKernel(Operation *anchor) {
  KernelWriter writer(opIndex, members);
  Value input = anchor->getOperand(0);
  const Shape shape = shapeOf(input);
  const int64_t length = shape.empty() ? 1 : shape.back();
  const int64_t rows = numElements(shape) / std::max<int64_t>(length, 1);
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
  auto storeOutputs = [&](Scope &scope) {
    for (Value output : outputs)
      writer.store(output, "i", writer.element(output, "i", scope), scope);
  };
  const std::string resultType = cType(elementOf(primary));
  auto rounded = [&](const std::string &expression) {
    return isReducedFloat(elementOf(primary)) ? "roundAs<" + resultType + ">(" + expression + ")"
                                              : expression;
  };
  std::ostringstream body;
  std::string math, stem;
  std::string statsScratch;
  if (llvm::isa<LayerNormGradOp, RmsNormGradOp>(anchor))
    statsScratch = writer.scratchParam("rowStats", {rows, 2});

  body << "  __shared__ float reduceScratch[32];\n"
       << "  for (long long row = blockIdx.x; row < rows; row += gridDim.x) {\n";
  if (auto norm = llvm::dyn_cast<LayerNormOp>(anchor)) {
    stem = "layernorm";
    const std::string eps = floatLiteral(norm.getEpsilon().convertToDouble());
    math = "y = (x - mean) * rstd * gamma + beta per row of L, mean and biased variance in f32\n"
           "(two passes), rstd = 1 / sqrt(var + eps); then the fused consumers of y.\n"
           "Memory: x read three times (the row stays in L1/L2), gamma/beta, outputs written "
           "once.";
    std::string x;
    body << "    float sum = 0.0f;\n"
         << rowLoop(writer, [&](Scope &s) { s.line("sum += " + writer.element(input, "i", s) + ";"); })
         << "    const float mean = blockSum(sum, reduceScratch) / static_cast<float>(L);\n"
         << "    float squares = 0.0f;\n"
         << rowLoop(writer, [&](Scope &s) {
              s.line("const float centred = " + writer.element(input, "i", s) + " - mean;");
              s.line("squares += centred * centred;");
            })
         << "    const float rstd = 1.0f / sqrtf(blockSum(squares, reduceScratch) / "
            "static_cast<float>(L) + "
         << eps << ");\n"
         << rowLoop(writer, [&](Scope &s) {
              std::string xv = writer.element(input, "i", s);
              std::string g = writer.element(norm.getGamma(), "j", s);
              std::string b = writer.element(norm.getBeta(), "j", s);
              s.line("const float y = " + rounded("(" + xv + " - mean) * rstd * " + g + " + " + b) +
                     ";");
              KernelWriter::bind(s, primary, "i", "y");
              storeOutputs(s);
            });
  } else if (auto norm = llvm::dyn_cast<RmsNormOp>(anchor)) {
    stem = "rmsnorm";
    const std::string eps = floatLiteral(norm.getEpsilon().convertToDouble());
    math = "y = x * r * gamma per row of L, r = 1 / sqrt(mean(x^2) + eps) in f32; then the\n"
           "fused consumers of y. Memory: x read twice, outputs written once.";
    body << "    float squares = 0.0f;\n"
         << rowLoop(writer, [&](Scope &s) {
              std::string xv = writer.element(input, "i", s);
              s.line("squares += " + xv + " * " + xv + ";");
            })
         << "    const float r = 1.0f / sqrtf(blockSum(squares, reduceScratch) / "
            "static_cast<float>(L) + "
         << eps << ");\n"
         << rowLoop(writer, [&](Scope &s) {
              std::string xv = writer.element(input, "i", s);
              std::string g = writer.element(norm.getGamma(), "j", s);
              s.line("const float y = " + rounded(xv + " * r * " + g) + ";");
              KernelWriter::bind(s, primary, "i", "y");
              storeOutputs(s);
            });
  } else if (auto softmax = llvm::dyn_cast<SoftmaxOp>(anchor)) {
    stem = softmax.getCausal() ? "softmax_causal" : "softmax";
    math = "y = exp(x - max) / sum(exp(x - max)) over the row's first `valid` entries, 0\n"
           "beyond (causal: valid = i + 1 + S - T for query row i); f32 statistics.\n"
           "Memory: x read three times, y written once.";
    if (softmax.getCausal()) {
      const int64_t queries = shape[shape.size() - 2];
      body << "    // Causal: row i of each [T, S] block sees keys j <= i + (S - T).\n"
           << "    const long long valid = min(L, row % " << queries << "ll + 1 + (L - " << queries
           << "ll));\n";
    } else {
      body << "    const long long valid = L;\n";
    }
    body << "    float maximum = -__int_as_float(0x7f800000);\n"
         << rowLoop(writer, [&](Scope &s) {
              std::string xv = writer.element(input, "i", s);
              s.line("maximum = maximum < " + xv + " ? " + xv + " : maximum;");
            }, "valid")
         << "    maximum = blockMax(maximum, reduceScratch);\n"
         << "    // A row of -inf subtracts 0 instead, giving NaN as the CPU backend does.\n"
         << "    if (maximum == -__int_as_float(0x7f800000)) maximum = 0.0f;\n"
         << "    float total = 0.0f;\n"
         << rowLoop(writer, [&](Scope &s) {
              s.line("total += expf(" + writer.element(input, "i", s) + " - maximum);");
            }, "valid")
         << "    total = blockSum(total, reduceScratch);\n"
         << rowLoop(writer, [&](Scope &s) {
              std::string xv = writer.element(input, "i", s);
              s.line("const float y = " + rounded("j < valid ? expf(" + xv + " - maximum) / total : 0.0f") + ";");
              KernelWriter::bind(s, primary, "i", "y");
              storeOutputs(s);
            });
  } else if (auto grad = llvm::dyn_cast<SoftmaxGradOp>(anchor)) {
    stem = "softmax_grad";
    math = "dx = y * (dy - sum(dy * y)) per row, the sum in f32.\n"
           "Memory: y and dy read twice, dx written once.";
    body << "    float dot = 0.0f;\n"
         << rowLoop(writer, [&](Scope &s) {
              s.line("dot += " + writer.element(grad.getGrad(), "i", s) + " * " +
                     writer.element(grad.getResultValue(), "i", s) + ";");
            })
         << "    dot = blockSum(dot, reduceScratch);\n"
         << rowLoop(writer, [&](Scope &s) {
              std::string y = writer.element(grad.getResultValue(), "i", s);
              std::string dy = writer.element(grad.getGrad(), "i", s);
              s.line("const float dx = " + rounded(y + " * (" + dy + " - dot)") + ";");
              KernelWriter::bind(s, primary, "i", "dx");
              storeOutputs(s);
            });
  } else if (auto grad = llvm::dyn_cast<LayerNormGradOp>(anchor)) {
    stem = "layernorm_grad";
    const std::string eps = floatLiteral(grad.getEpsilon().convertToDouble());
    math = "Per row: mean, rstd as the forward; g = dy * gamma, xhat = (x - mean) * rstd;\n"
           "dx = rstd * (g - mean(g) - xhat * mean(g * xhat)); then the fused consumers of dx.\n"
           "Row statistics (mean, rstd) go to rowStats for the dgamma/dbeta column kernel.\n"
           "Memory: x read four times and dy twice per row (L1/L2-resident), dx written once.";
    body << "    float sum = 0.0f;\n"
         << rowLoop(writer, [&](Scope &s) { s.line("sum += " + writer.element(input, "i", s) + ";"); })
         << "    const float mean = blockSum(sum, reduceScratch) / static_cast<float>(L);\n"
         << "    float squares = 0.0f;\n"
         << rowLoop(writer, [&](Scope &s) {
              s.line("const float centred = " + writer.element(input, "i", s) + " - mean;");
              s.line("squares += centred * centred;");
            })
         << "    const float rstd = 1.0f / sqrtf(blockSum(squares, reduceScratch) / "
            "static_cast<float>(L) + "
         << eps << ");\n"
         << "    if (threadIdx.x == 0) {\n      rowStats[2 * row] = mean;\n"
         << "      rowStats[2 * row + 1] = rstd;\n    }\n"
         << "    float sumG = 0.0f, sumGXhat = 0.0f;\n"
         << rowLoop(writer, [&](Scope &s) {
              std::string xv = writer.element(input, "i", s);
              std::string dy = writer.element(grad.getGrad(), "i", s);
              std::string g = writer.element(grad.getGamma(), "j", s);
              s.line("const float gj = " + dy + " * " + g + ";");
              s.line("sumG += gj;");
              s.line("sumGXhat += gj * ((" + xv + " - mean) * rstd);");
            })
         << "    const float meanG = blockSum(sumG, reduceScratch) / static_cast<float>(L);\n"
         << "    const float meanGXhat = blockSum(sumGXhat, reduceScratch) / "
            "static_cast<float>(L);\n"
         << rowLoop(writer, [&](Scope &s) {
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
    stem = "rmsnorm_grad";
    const std::string eps = floatLiteral(grad.getEpsilon().convertToDouble());
    math = "Per row: r = 1 / sqrt(mean(x^2) + eps), g = dy * gamma;\n"
           "dx = r * g - x * r^3 * mean(g * x); then the fused consumers of dx. r goes to\n"
           "rowStats for the dgamma column kernel. Memory: x read three times, dy twice.";
    body << "    float squares = 0.0f;\n"
         << rowLoop(writer, [&](Scope &s) {
              std::string xv = writer.element(input, "i", s);
              s.line("squares += " + xv + " * " + xv + ";");
            })
         << "    const float r = 1.0f / sqrtf(blockSum(squares, reduceScratch) / "
            "static_cast<float>(L) + "
         << eps << ");\n"
         << "    if (threadIdx.x == 0) {\n      rowStats[2 * row] = 0.0f;\n"
         << "      rowStats[2 * row + 1] = r;\n    }\n"
         << "    float sumGX = 0.0f;\n"
         << rowLoop(writer, [&](Scope &s) {
              std::string xv = writer.element(input, "i", s);
              std::string dy = writer.element(grad.getGrad(), "i", s);
              std::string g = writer.element(grad.getGamma(), "j", s);
              s.line("sumGX += " + dy + " * " + g + " * " + xv + ";");
            })
         << "    const float meanGX = blockSum(sumGX, reduceScratch) / static_cast<float>(L);\n"
         << rowLoop(writer, [&](Scope &s) {
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
  launch.blockSize = length >= 1024 ? 1024 : length >= 256 ? 256 : 128;
  // The block size is compiled into __launch_bounds__; 1024 serves every row length.
  launch.blockSize = 1024;
  finish(writer, "reduction", stem, math, body.str(), launch);
}

/// dgamma (and dbeta) of a norm gradient: column sums over the rows, 32 columns per block and
/// 8 row slices, reading the row statistics the row kernel left.
void Generator::normGradColumns(Operation *anchor) {
  KernelWriter writer(opIndex, members);
  Value input = anchor->getOperand(0), dyValue = anchor->getOperand(2);
  const Shape shape = shapeOf(input);
  const int64_t length = shape.back(), rows = numElements(shape) / length;
  const bool layer = llvm::isa<LayerNormGradOp>(anchor);
  std::vector<Value> outputs;
  for (Value output : groupOutputs(writer))
    for (unsigned r = 1; r < anchor->getNumResults(); ++r)
      if (writer.dependsOn(output, anchor->getResult(r))) {
        outputs.push_back(output);
        break;
      }
  writer.scratchParam("rowStats", {rows, 2});
  Scope sumScope;
  sumScope.indent = "      ";
  std::string xv = writer.element(input, "i", sumScope);
  std::string dy = writer.element(dyValue, "i", sumScope);
  sumScope.line("const float xhat = (" + xv + " - rowStats[2 * row]) * rowStats[2 * row + 1];");
  sumScope.line("dgamma += " + dy + " * xhat;");
  if (layer)
    sumScope.line("dbeta += " + dy + ";");
  Scope storeScope;
  storeScope.indent = "      ";
  for (unsigned r = 1; r < anchor->getNumResults(); ++r) {
    Value result = anchor->getResult(r);
    std::string total = r == 1 ? "totalGamma" : "totalBeta";
    std::string value = isReducedFloat(elementOf(result))
                            ? "roundAs<" + cType(elementOf(result)) + ">(" + total + ")"
                            : total;
    storeScope.line("const float result" + std::to_string(r) + " = " + value + ";");
    KernelWriter::bind(storeScope, result, "i", "result" + std::to_string(r));
  }
  for (Value output : outputs)
    writer.store(output, "i", writer.element(output, "i", storeScope), storeScope);

  std::ostringstream body;
  body << "  __shared__ float partialGamma[8][33], partialBeta[8][33];\n"
       << "  const long long column = static_cast<long long>(blockIdx.x) * 32 + threadIdx.x;\n"
       << "  float dgamma = 0.0f, dbeta = 0.0f;\n"
       << "  if (column < L) {\n"
       << "    for (long long row = threadIdx.y; row < rows; row += blockDim.y) {\n"
       << "      const long long i = row * L + column;\n"
       << sumScope.text.str() << "    }\n  }\n"
       << "  (void)dbeta;\n"
       << "  partialGamma[threadIdx.y][threadIdx.x] = dgamma;\n"
       << "  partialBeta[threadIdx.y][threadIdx.x] = dbeta;\n"
       << "  __syncthreads();\n"
       << "  if (threadIdx.y == 0 && column < L) {\n"
       << "    float totalGamma = 0.0f, totalBeta = 0.0f;\n"
       << "    for (int y = 0; y < 8; ++y) {\n"
       << "      totalGamma += partialGamma[y][threadIdx.x];\n"
       << "      totalBeta += partialBeta[y][threadIdx.x];\n    }\n"
       << "    (void)totalBeta;\n"
       << "    const long long i = column;\n"
       << storeScope.text.str() << "  }\n";
  writer.scalarParam("rows", "i64", "rows");
  writer.scalarParam("L", "i64", "row_length");
  KernelLaunch launch;
  launch.space = KernelLaunch::Space::Columns;
  launch.rows = rows;
  launch.rowLength = length;
  launch.blockSize = 256;
  launch.blockRows = 8; // (32 columns, 8 row slices)
  finish(writer, "reduction", layer ? "layernorm_grad_params" : "rmsnorm_grad_params",
         std::string(layer ? "dgamma[j] = sum over rows of dy * xhat, dbeta[j] = sum of dy"
                           : "dgamma[j] = sum over rows of dy * x * r") +
             ", in f32; block (32, 8):\n32 columns per block, 8 row slices summed in shared "
             "memory. Memory: x and dy read once,\ncoalesced along the columns.",
         body.str(), launch);
}

//===----------------------------------------------------------------------===//
// sum / mean / max over arbitrary axes, and the bias gradient
//===----------------------------------------------------------------------===//

/// The input index of (kept index o, reduced index r) for a reduction of \p shape over \p axes.
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
  const int64_t reduced = outCount ? numElements(shape) / outCount : 0;
  const std::string stem = anchor->getName().stripDialect().str();
  std::string finalValue = isMean ? "total / " + floatLiteral(double(reduced)) : "total";
  if (isReducedFloat(elementOf(result)))
    finalValue = "roundAs<" + cType(elementOf(result)) + ">(" + finalValue + ")";

  // Reducing a leading run of dimensions: a column sum, coalesced along the columns.
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
  if (leading) {
    Scope sumScope;
    sumScope.indent = "      ";
    sumScope.line("total += " + writer.element(input, "i", sumScope) + ";");
    Scope storeScope;
    storeScope.indent = "      ";
    storeScope.line("const float result = " + finalValue + ";");
    KernelWriter::bind(storeScope, result, "i", "result");
    for (Value output : outputs)
      writer.store(output, "i", writer.element(output, "i", storeScope), storeScope);
    body << "  __shared__ float partial[8][33];\n"
         << "  const long long column = static_cast<long long>(blockIdx.x) * 32 + threadIdx.x;\n"
         << "  float total = 0.0f;\n"
         << "  if (column < L) {\n"
         << "    for (long long row = threadIdx.y; row < rows; row += blockDim.y) {\n"
         << "      const long long i = row * L + column;\n"
         << sumScope.text.str() << "    }\n  }\n"
         << "  partial[threadIdx.y][threadIdx.x] = total;\n"
         << "  __syncthreads();\n"
         << "  if (threadIdx.y == 0 && column < L) {\n"
         << "    total = 0.0f;\n"
         << "    for (int y = 0; y < 8; ++y)\n      total += partial[y][threadIdx.x];\n"
         << "    const long long i = column;\n"
         << storeScope.text.str() << "  }\n";
    writer.scalarParam("rows", "i64", "rows");
    writer.scalarParam("L", "i64", "row_length");
    launch.space = KernelLaunch::Space::Columns;
    launch.rows = reduced;
    launch.rowLength = outCount;
    launch.blockSize = 256;
    launch.blockRows = 8; // (32 columns, 8 row slices)
    finish(writer, group->kind == "bias_grad" ? "bias_grad" : "reduction", stem + "_columns",
           std::string(isMean ? "out[j] = mean" : "out[j] = sum") +
               " over the leading dimensions of x[row, j] (a column sum), in f32;\n"
               "block (32, 8): 32 columns per block, 8 row slices summed in shared memory.\n"
               "Memory: x read once, coalesced along the columns; out written once.",
           body.str(), launch);
    return;
  }
  // General: one block per output element, threads over its reduced elements.
  const std::string inputIndex = reductionIndex(shape, axes);
  Scope sumScope;
  sumScope.indent = "      ";
  std::string xv = writer.element(input, "i", sumScope);
  sumScope.line(isMax ? "total = total < " + xv + " || " + xv + " != " + xv + " ? " + xv + " : total;"
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
         std::string(isMax ? "out[o] = max" : isMean ? "out[o] = mean" : "out[o] = sum") +
             " of x over the reduced axes (one block per output element),\nf32 accumulation. "
             "Memory: x read once, out written once.",
         body.str(), launch);
}

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
  findScope.line("if (" + xv + " != " + xv + " ? best == best : " + xv + " > best) {");
  findScope.line("  best = " + xv + ";\n" + findScope.indent + "  bestIndex = r;");
  findScope.line("}");
  Scope writeScope;
  writeScope.indent = "      ";
  std::string dx = isReducedFloat(elementOf(anchor.getResult()))
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

void Generator::embeddingGradKernels(EmbeddingGradOp anchor) {
  Value table = anchor.getResult();
  if (!elementOf(table).isF32())
    throw std::runtime_error("CUDA codegen: " + describeOp(anchor) +
                             " must produce f32 (it is summed with atomicAdd)");
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
  scope.line("const long long id = static_cast<long long>(" +
             writer.rawLoad(anchor.getIndices(), "i / " + std::to_string(width) + "ll") + ");");
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
         "dtable[ids[r], d] += dy[r, d] with f32 atomicAdd (order-dependent rounding).\n"
         "Memory: dy and ids read once; dtable read-modify-written through L2 atomics.",
         body.str(), launch);
}

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
  const std::string ignore =
      "(" + std::to_string(static_cast<int64_t>(loss.getIgnoreIndex())) + "ll)";

  // 1. Count the labelled rows (the mean's divisor) and reset the loss.
  {
    KernelWriter writer(opIndex, members);
    std::string labels = writer.tensorParam(loss.getLabels(), Role::Input);
    std::string out = writer.tensorParam(loss.getResult(), Role::Output);
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
         << "    " << out << "[0] = " << (mean ? "count == 0.0f ? __int_as_float(0x7fffffff) : 0.0f" : "0.0f")
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
    dlossScope.indent = "  ";
    std::string dloss = writer.element(grad.getGrad(), "0", dlossScope);
    body << dlossScope.text.str() << "  // dlogits = (softmax - onehot) * dloss / count.\n"
         << "  const float gradScale = "
         << (mean ? "count == 0.0f ? 0.0f : " + dloss + " / count" : dloss) << ";\n";
  }
  body << "  for (long long row = blockIdx.x; row < rows; row += gridDim.x) {\n"
       << "    const long long label = static_cast<long long>(" << labels << "[row]);\n"
       << "    const bool ignored = label == " << ignore << ";\n"
       << "    float maximum = -__int_as_float(0x7f800000);\n"
       << rowLoop(writer, [&](Scope &s) {
            std::string x = writer.element(logits, "i", s);
            s.line("maximum = maximum < " + x + " ? " + x + " : maximum;");
          })
       << "    maximum = blockMax(maximum, reduceScratch);\n"
       << "    float total = 0.0f;\n"
       << rowLoop(writer, [&](Scope &s) {
            s.line("total += expf(" + writer.element(logits, "i", s) + " - maximum);");
          })
       << "    total = blockSum(total, reduceScratch);\n"
       << "    const float logSumExp = maximum + logf(total);\n";
  {
    Scope labelScope;
    labelScope.indent = "      ";
    std::string x = writer.element(logits, "row * L + label", labelScope);
    body << "    if (threadIdx.x == 0 && !ignored) {\n"
         << "      // Out-of-range labels (the CPU backend rejects them) give NaN.\n"
         << "      if (label < 0 || label >= L) {\n"
         << "        atomicAdd(" << lossOut << ", __int_as_float(0x7fffffff));\n"
         << "      } else {\n"
         << labelScope.text.str() << "        atomicAdd(" << lossOut << ", (logSumExp - " << x
         << ")" << (mean ? " / count" : "") << ");\n      }\n    }\n";
  }
  if (grad) {
    body << rowLoop(writer, [&](Scope &s) {
      std::string x = writer.element(logits, "i", s);
      std::string value = "ignored ? 0.0f : (expf(" + x +
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
  writer.scalarParam("rows", "i64", "rows");
  writer.scalarParam("L", "i64", "row_length");
  KernelLaunch launch;
  launch.space = KernelLaunch::Space::Rows;
  launch.rows = rows;
  launch.rowLength = classes;
  launch.blockSize = 1024;
  finish(writer, "cross_entropy", "loss_grad",
         std::string("Per row (one block): max and sum(exp(x - max)) in f32; loss += (logsumexp - "
                     "x[label])") +
             (mean ? " / count" : "") +
             " (f32 atomicAdd), rows labelled ignore_index skipped;\n"
             "dlogits = (softmax - onehot(label)) * dloss" +
             (mean ? " / count" : "") +
             ", 0 on ignored rows. The logits are never\nwritten in f32. Memory: the logits row "
             "read three times (L2-resident), dlogits written once.",
         body.str(), launch);
}

//===----------------------------------------------------------------------===//
// The multi-tensor optimizer and the small scalar ops
//===----------------------------------------------------------------------===//

/// Elements per block of the multi-tensor kernels.
constexpr int64_t kTensorChunk = 4096;

const char *kTensorTable = R"(// One parameter of the multi-tensor update; the runtime fills a device array of these.
struct OptimizerTensor {
  float *param;        // f32 master weight, updated in place
  float *grad;         // f32 accumulator, zeroed
  float *firstMoment;  // AdamW m, or the SGD momentum buffer
  float *secondMoment; // AdamW v (unused by SGD)
  void *copy;          // the bf16/f16 copy the micro step reads, or null
  int copyType;        // 0 none, 1 bf16, 2 f16
  long long elements;
  long long firstBlock; // blocks [firstBlock, next entry's firstBlock) update this tensor
  float beta1, beta2, eps, weightDecay, clipNorm, momentum;
};

// The entry whose block range holds this block: a binary search over firstBlock.
__device__ __forceinline__ const OptimizerTensor &tensorOfBlock(const OptimizerTensor *table,
                                                                int tensors) {
  int low = 0, high = tensors - 1;
  while (low < high) {
    const int middle = (low + high + 1) / 2;
    if (table[middle].firstBlock <= static_cast<long long>(blockIdx.x))
      low = middle;
    else
      high = middle - 1;
  }
  return table[low];
}

)";

void Generator::optimizerKernel() {
  KernelWriter writer(opIndex, members);
  std::vector<TensorTableEntry> table;
  bool adamw = false, sgd = false, skips = false;
  std::string scaler;
  Value lr, norm;
  ModelOp model = group->function->getParentOfType<ModelOp>();
  int64_t firstBlock = 0;
  for (Operation *op : group->ops) {
    TensorTableEntry entry;
    std::optional<StringRef> copy, skip;
    if (auto update = llvm::dyn_cast<AdamWOp>(op)) {
      adamw = true;
      entry.param = update.getParam().str();
      entry.grad = update.getGrad().str();
      entry.firstMoment = update.getFirstMoment().str();
      entry.secondMoment = update.getSecondMoment().str();
      entry.beta1 = update.getBeta1().convertToDouble();
      entry.beta2 = update.getBeta2().convertToDouble();
      entry.eps = update.getEps().convertToDouble();
      entry.weightDecay = update.getWeightDecay().convertToDouble();
      entry.clipNorm = update.getClipNorm().convertToDouble();
      copy = update.getCopy();
      skip = update.getSkipNonfinite();
      lr = update.getLr();
      norm = update.getGradNorm();
    } else if (auto update = llvm::dyn_cast<SgdOp>(op)) {
      sgd = true;
      entry.param = update.getParam().str();
      entry.grad = update.getGrad().str();
      entry.firstMoment = update.getMomentumBuffer().str();
      entry.momentum = update.getMomentum().convertToDouble();
      entry.weightDecay = update.getWeightDecay().convertToDouble();
      entry.clipNorm = update.getClipNorm().convertToDouble();
      copy = update.getCopy();
      skip = update.getSkipNonfinite();
      lr = update.getLr();
      norm = update.getGradNorm();
    } else {
      continue;
    }
    if (copy) {
      entry.copy = copy->str();
      auto copyOp = SymbolTable::lookupSymbolIn(model, *copy);
      if (auto paramCopy = llvm::dyn_cast_or_null<ParamCopyOp>(copyOp))
        entry.copyType = dtypeName(paramCopy.getTensorType().getElementType());
    }
    if (skip) {
      skips = true;
      scaler = skip->str();
    }
    if (auto param = llvm::dyn_cast_or_null<ParamOp>(SymbolTable::lookupSymbolIn(model, entry.param)))
      entry.elements = param.getTensorType().getNumElements();
    entry.firstBlock = firstBlock;
    firstBlock += (entry.elements + kTensorChunk - 1) / kTensorChunk;
    table.push_back(entry);
  }
  if (adamw && sgd)
    throw std::runtime_error("CUDA codegen: AdamW and SGD updates in one optimizer group");
  writer.params.push_back({Role::Table, "table", "OptimizerTensor", {int64_t(table.size())}, "table"});
  writer.scalarParam("tensors", "i64", "table_entries");
  std::string lrPtr = writer.tensorParam(lr, Role::Input);
  std::string normPtr = writer.tensorParam(norm, Role::Input);
  std::string found, applied;
  if (skips) {
    found = writer.stateParam(scaler + ".found_nonfinite", "f32", {});
    applied = writer.stateParam(scaler + ".applied_steps", "f32", {});
  } else {
    writer.scalarParam("step", "u64", "step");
  }

  std::ostringstream body;
  body << "  const OptimizerTensor &tensor = tensorOfBlock(table, static_cast<int>(tensors));\n"
       << "  const long long begin = (static_cast<long long>(blockIdx.x) - tensor.firstBlock) * "
       << kTensorChunk << "ll;\n"
       << "  const long long end = min(tensor.elements, begin + " << kTensorChunk << "ll);\n";
  if (skips)
    body << "  // Skipped on a non-finite gradient (the accumulator is still zeroed).\n"
         << "  const bool skip = " << found << "[0] != 0.0f;\n";
  else
    body << "  const bool skip = false;\n";
  body << "  // Scalars in double, as the CPU backend: clip = min(1, clip_norm / (norm + 1e-6)).\n"
       << "  const double lr = static_cast<double>(" << lrPtr << "[0]);\n"
       << "  const double norm = static_cast<double>(" << normPtr << "[0]);\n"
       << "  double clipCoefficient = 1.0;\n"
       << "  if (tensor.clipNorm > 0.0f) {\n"
       << "    const double c = static_cast<double>(tensor.clipNorm) / (norm + 1e-6);\n"
       << "    clipCoefficient = c < 1.0 || c != c ? c : 1.0;\n  }\n"
       << "  const float clip = static_cast<float>(clipCoefficient);\n";
  std::string math;
  if (adamw) {
    body << "  // t counts the applied steps (torch's rule under loss scaling).\n"
         << "  const double t = "
         << (skips ? "static_cast<double>(" + applied + "[0]) + 1.0" : "static_cast<double>(step) + 1.0")
         << ";\n"
         << "  const float decay = static_cast<float>(1.0 - lr * tensor.weightDecay);\n"
         << "  const float beta1 = tensor.beta1, beta2 = tensor.beta2;\n"
         << "  const float oneMinusBeta1 = static_cast<float>(1.0 - static_cast<double>(tensor.beta1));\n"
         << "  const float oneMinusBeta2 = static_cast<float>(1.0 - static_cast<double>(tensor.beta2));\n"
         << "  const float stepSize = static_cast<float>(lr / (1.0 - pow(static_cast<double>(tensor.beta1), t)));\n"
         << "  const float correction2Sqrt = static_cast<float>(sqrt(1.0 - pow(static_cast<double>(tensor.beta2), t)));\n"
         << "  for (long long i = begin + threadIdx.x; i < end; i += blockDim.x) {\n"
         << "    float p = tensor.param[i];\n"
         << "    if (!skip) {\n"
         << "      const float g = tensor.grad[i] * clip;\n"
         << "      p = p * decay;\n"
         << "      const float m = beta1 * tensor.firstMoment[i] + oneMinusBeta1 * g;\n"
         << "      const float v = beta2 * tensor.secondMoment[i] + oneMinusBeta2 * (g * g);\n"
         << "      tensor.firstMoment[i] = m;\n      tensor.secondMoment[i] = v;\n"
         << "      p = p - stepSize * (m / (sqrtf(v) / correction2Sqrt + tensor.eps));\n"
         << "      tensor.param[i] = p;\n    }\n"
         << "    tensor.grad[i] = 0.0f;\n";
    math = "AdamW over every parameter in one launch: g = clip * grad; p *= 1 - lr * wd;\n"
           "m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2;\n"
           "p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps); grad = 0; the bf16/f16\n"
           "copy refreshed from p. Block b updates a 4096-element chunk of the table entry\n"
           "holding it. Memory: p, grad, m, v read and written once; the copy written once.";
  } else {
    body << "  const float lrValue = static_cast<float>(lr);\n"
         << "  for (long long i = begin + threadIdx.x; i < end; i += blockDim.x) {\n"
         << "    float p = tensor.param[i];\n"
         << "    if (!skip) {\n"
         << "      const float g = tensor.grad[i] * clip + tensor.weightDecay * p;\n"
         << "      const float buffer = tensor.momentum * tensor.firstMoment[i] + g;\n"
         << "      tensor.firstMoment[i] = buffer;\n"
         << "      p = p - lrValue * buffer;\n      tensor.param[i] = p;\n    }\n"
         << "    tensor.grad[i] = 0.0f;\n";
    math = "SGD with momentum over every parameter in one launch: g = clip * grad + wd * p;\n"
           "buf = momentum * buf + g; p -= lr * buf; grad = 0; the bf16/f16 copy refreshed.\n"
           "Memory: p, grad, buf read and written once; the copy written once.";
  }
  body << "    if (tensor.copyType == 1)\n"
       << "      static_cast<bfloat16 *>(tensor.copy)[i] = fromFloat<bfloat16>(p);\n"
       << "    else if (tensor.copyType == 2)\n"
       << "      static_cast<half16 *>(tensor.copy)[i] = fromFloat<half16>(p);\n"
       << "  }\n";
  KernelLaunch launch;
  launch.space = KernelLaunch::Space::Tensors;
  launch.elements = firstBlock;
  launch.blockSize = 256;
  finish(writer, "optimizer", adamw ? "adamw" : "sgd", math, body.str(), launch, table,
         kTensorTable);
}

void Generator::attentionStub() {
  GeneratedKernel kernel;
  kernel.kind = "attention";
  kernel.function = group->function.getName().str();
  kernel.group = group->id;
  KernelWriter writer(opIndex, members);
  for (Operation *op : group->ops) {
    kernel.fusedOps.push_back(describeOp(op));
    if (llvm::isa<AttentionOp, AttentionGradOp>(op)) {
      kernel.name = llvm::isa<AttentionOp>(op) ? "attention_forward" : "attention_backward";
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

void Generator::gradSeedKernel(GradSeedOp op) {
  KernelWriter writer(opIndex, members);
  std::string scale = op.getScale() ? writer.tensorParam(op.getScale(), Role::Input) : "";
  std::string out = writer.tensorParam(op.getResult(), Role::Output);
  std::string body = "  " + out + "[0] = " + (scale.empty() ? "1.0f" : scale + "[0]") + " / " +
                     floatLiteral(double(op.getAccumSteps())) + ";\n";
  KernelLaunch launch;
  launch.space = KernelLaunch::Space::Single;
  launch.blockSize = 32;
  Group single{group->function, group->id, "none", {op}};
  const Group *saved = group;
  group = &single;
  finish(writer, "grad_seed", "",
         "seed = (loss scale or 1) / accum_steps. Memory: one scalar read and written.", body,
         launch);
  group = saved;
}

void Generator::lrScheduleKernel(LrScheduleOp op) {
  KernelWriter writer(opIndex, members);
  std::string out = writer.tensorParam(op.getResult(), Role::Output);
  writer.scalarParam("step", "u64", "step");
  writer.scalarParam("totalSteps", "u64", "total_steps");
  const bool cosine = op.getKind() == LrSchedule::cosine;
  std::ostringstream body;
  body << "  const double s = static_cast<double>(step);\n"
       << "  const double warmup = " << doubleLiteral(double(op.getWarmupSteps())) << ";\n"
       << "  const double lr = " << doubleLiteral(op.getLr().convertToDouble()) << ";\n"
       << "  double rate = lr;\n"
       << "  if (s < warmup) {\n    rate = lr * (s + 1.0) / warmup;\n  }";
  if (cosine)
    body << " else {\n"
         << "    const double minLr = " << doubleLiteral(op.getMinLr().convertToDouble()) << ";\n"
         << "    const double decay = "
         << (op.getDecaySteps() > 0 ? doubleLiteral(double(op.getDecaySteps()))
                                    : std::string("static_cast<double>(totalSteps)"))
         << ";\n"
         << "    const double progress = fmin(fmax((s - warmup) / fmax(1.0, decay - warmup), 0.0), 1.0);\n"
         << "    rate = minLr + 0.5 * (1.0 + cos(3.14159265358979323846 * progress)) * (lr - minLr);\n"
         << "  }\n";
  else
    body << "\n  (void)totalSteps;\n";
  body << "  " << out << "[0] = static_cast<float>(rate);\n";
  KernelLaunch launch;
  launch.space = KernelLaunch::Space::Single;
  launch.blockSize = 32;
  Group single{group->function, group->id, "none", {op}};
  const Group *saved = group;
  group = &single;
  finish(writer, "lr_schedule", cosine ? "cosine" : "constant",
         "lr of step s: linear warmup, then constant or cosine decay to min_lr (in double,\n"
         "as the CPU backend). Memory: one scalar written.",
         body.str(), launch);
  group = saved;
}

const char *kNormTable = R"(// One tensor of the global norm; the runtime fills a device array of these.
struct NormTensor {
  const float *data;
  long long elements;
  long long firstBlock;
};

)";

void Generator::globalNormKernels(GlobalNormOp op) {
  ModelOp model = group->function->getParentOfType<ModelOp>();
  std::vector<TensorTableEntry> table;
  int64_t blocks = 0;
  for (Attribute state : op.getStates()) {
    TensorTableEntry entry;
    entry.grad = llvm::cast<FlatSymbolRefAttr>(state).getValue().str();
    if (auto stateOp = llvm::dyn_cast_or_null<StateOp>(SymbolTable::lookupSymbolIn(model, entry.grad)))
      entry.elements = stateOp.getTensorType().getNumElements();
    entry.firstBlock = blocks;
    blocks += (entry.elements + kTensorChunk - 1) / kTensorChunk;
    table.push_back(entry);
  }
  Group single{group->function, group->id, "none", {op}};
  const Group *saved = group;
  group = &single;
  {
    KernelWriter writer(opIndex, members);
    writer.params.push_back({Role::Table, "table", "NormTensor", {int64_t(table.size())}, "table"});
    writer.scalarParam("tensors", "i64", "table_entries");
    writer.scratchParam("partials", {blocks});
    std::ostringstream body;
    body << "  __shared__ float reduceScratch[32];\n"
         << "  int low = 0, high = static_cast<int>(tensors) - 1;\n"
         << "  while (low < high) {\n"
         << "    const int middle = (low + high + 1) / 2;\n"
         << "    if (table[middle].firstBlock <= static_cast<long long>(blockIdx.x)) low = middle;\n"
         << "    else high = middle - 1;\n  }\n"
         << "  const NormTensor &tensor = table[low];\n"
         << "  const long long begin = (static_cast<long long>(blockIdx.x) - tensor.firstBlock) * "
         << kTensorChunk << "ll;\n"
         << "  const long long end = min(tensor.elements, begin + " << kTensorChunk << "ll);\n"
         << "  float squares = 0.0f;\n"
         << "  for (long long i = begin + threadIdx.x; i < end; i += blockDim.x)\n"
         << "    squares += tensor.data[i] * tensor.data[i];\n"
         << "  squares = blockSum(squares, reduceScratch);\n"
         << "  if (threadIdx.x == 0)\n    partials[blockIdx.x] = squares;\n";
    KernelLaunch launch;
    launch.space = KernelLaunch::Space::Tensors;
    launch.elements = blocks;
    finish(writer, "global_norm", "partial",
           "Stage 1 of the global norm: partials[b] = sum of squares of block b's 4096-element\n"
           "chunk of the table's tensors (f32). Memory: every accumulator read once.",
           body.str(), launch, table, kNormTable);
  }
  KernelWriter writer(opIndex, members);
  writer.scratchParam("partials", {blocks});
  writer.scalarParam("blocks", "i64", "table_blocks");
  std::string out = writer.tensorParam(op.getResult(), Role::Output);
  std::ostringstream body;
  body << "  __shared__ double warpTotals[32];\n  double total = 0.0;\n"
       << "  for (long long b = threadIdx.x; b < blocks; b += blockDim.x)\n"
       << "    total += static_cast<double>(partials[b]);\n"
       << "  for (int offset = 16; offset > 0; offset >>= 1)\n"
       << "    total += __shfl_xor_sync(0xffffffffu, total, offset);\n"
       << "  if ((threadIdx.x & 31) == 0)\n    warpTotals[threadIdx.x >> 5] = total;\n"
       << "  __syncthreads();\n"
       << "  if (threadIdx.x == 0) {\n    double sum = 0.0;\n"
       << "    for (int w = 0; w < static_cast<int>(blockDim.x >> 5); ++w)\n      sum += warpTotals[w];\n"
       << "    " << out << "[0] = static_cast<float>(sqrt(sum));\n  }\n";
  KernelLaunch launch;
  launch.space = KernelLaunch::Space::Single;
  launch.blockSize = 1024;
  finish(writer, "global_norm", "finish",
         "Stage 2: norm = sqrt(sum of the partials), summed in double by one block.\n"
         "Memory: the partials read once.",
         body.str(), launch);
  group = saved;
}

void Generator::updateLossScaleKernel(UpdateLossScaleOp op) {
  ModelOp model = group->function->getParentOfType<ModelOp>();
  auto scaler = llvm::dyn_cast_or_null<LossScaleOp>(SymbolTable::lookupSymbolIn(model, op.getScaler()));
  if (!scaler)
    throw std::runtime_error("CUDA codegen: " + describeOp(op) + " names no graph.loss_scale");
  KernelWriter writer(opIndex, members);
  const std::string name = op.getScaler().str();
  std::string scale = writer.stateParam(name + ".scale", "f32", {});
  std::string tracker = writer.stateParam(name + ".growth_tracker", "f32", {});
  std::string found = writer.stateParam(name + ".found_nonfinite", "f32", {});
  std::string applied = writer.stateParam(name + ".applied_steps", "f32", {});
  std::string floorHits = writer.stateParam(name + ".floor_hits", "i32", {});
  const bool dynamic = scaler.getMode() == LossScaleMode::dynamic;
  std::ostringstream body;
  body << "  const bool overflow = " << found << "[0] != 0.0f;\n"
       << "  if (!overflow)\n    " << applied << "[0] = " << applied << "[0] + 1.0f;\n";
  if (dynamic)
    body << "  numerics::LossScaleConfig config;\n"
         << "  config.growthFactor = " << floatLiteral(scaler.getGrowthFactor().convertToDouble()) << ";\n"
         << "  config.backoffFactor = " << floatLiteral(scaler.getBackoffFactor().convertToDouble()) << ";\n"
         << "  config.growthInterval = " << scaler.getGrowthInterval() << ";\n"
         << "  config.minScale = " << floatLiteral(scaler.getMinScale().convertToDouble()) << ";\n"
         << "  numerics::LossScaleState state{" << scale << "[0], static_cast<int>(" << tracker
         << "[0]), " << floorHits << "[0]};\n"
         << "  numerics::updateLossScale(state, config, overflow);\n"
         << "  " << scale << "[0] = state.scale;\n"
         << "  " << tracker << "[0] = static_cast<float>(state.growthTracker);\n"
         << "  " << floorHits << "[0] = state.floorHits;\n";
  else
    body << "  (void)" << scale << ";\n  (void)" << tracker << ";\n  (void)" << floorHits << ";\n";
  body << "  " << found << "[0] = 0.0f;\n";
  KernelLaunch launch;
  launch.space = KernelLaunch::Space::Single;
  launch.blockSize = 32;
  Group single{group->function, group->id, "none", {op}};
  const Group *saved = group;
  group = &single;
  finish(writer, "update_loss_scale", dynamic ? "dynamic" : "static",
         "Ends the optimizer step on the device (LossScale.h, GradScaler's rule): count the\n"
         "step if applied, back off or grow the scale, clear the non-finite flag.\n"
         "floor_hits is the scaler's count of backoffs stopped by min_scale (for the warning).\n"
         "Memory: five scalars.",
         body.str(), launch);
  group = saved;
}

} // namespace

std::vector<GeneratedKernel> generateKernels(graph::ModelOp model) {
  std::vector<GeneratedKernel> kernels;
  Generator generator(kernels);
  if (func::FuncOp entry = model.getEntryFunction())
    generator.run(entry);
  if (auto step = SymbolTable::lookupSymbolIn(model, "optimizer_step"))
    if (auto function = llvm::dyn_cast<func::FuncOp>(step);
        function && function != model.getEntryFunction())
      generator.run(function);
  return kernels;
}

std::vector<std::string> generatedKernelIncludeOptions() {
  return {"-I" AMPC_REPO_ROOT};
}

} // namespace ampc
