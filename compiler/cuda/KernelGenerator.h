//===- KernelGenerator.h - the generator of fused groups' CUDA kernels -*- C++ -*-===//
//
// The kernel generator behind CudaCodegen.h: the KernelWriter, which collects a kernel's
// parameters (each bound to a plan value) and evaluates the group's ops element by element into
// CUDA C++, and the Generator, which picks a kernel family for each fused group. One family per
// file: elementwise and copy kernels (CudaCodegenElementwise.cpp), the norm and softmax row
// kernels and two-stage column sums (CudaCodegenRows.cpp, walking rows with RowWalk.h), the
// other reductions and the classifier (CudaCodegenReductions.cpp), the training-step kernels
// (CudaCodegenTraining.cpp); the element evaluator, naming, hashing and headers in
// CudaCodegen.cpp.
//
//===----------------------------------------------------------------------===//

#ifndef AMPC_COMPILER_CUDA_KERNELGENERATOR_H
#define AMPC_COMPILER_CUDA_KERNELGENERATOR_H

#include "compiler/cuda/CudaCodegen.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/SmallPtrSet.h"

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace ampc {
namespace cudagen {

// The MLIR names the generator's declarations use (using-declarations, not directives: a file
// that includes this header sees only these).
namespace func = mlir::func;
using mlir::DenseMap;
using mlir::Operation;
using mlir::OpResult;
using mlir::SmallPtrSet;
using mlir::Type;
using mlir::Value;

using Shape = std::vector<int64_t>;
using Role = KernelParam::Role;

//===----------------------------------------------------------------------===//
// Small helpers (CudaCodegen.cpp)
//===----------------------------------------------------------------------===//

Shape shapeOf(Value value);
int64_t numElements(const Shape &shape);
Type elementOf(Value value);
std::string dtypeName(Type type);
std::string cType(Type type);
bool isReducedFloat(Type type);
std::string floatLiteral(double value);
std::string doubleLiteral(double value);
std::string broadcastIndex(const std::string &index, const Shape &in, const Shape &out);
std::string describeOp(Operation *op);

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
  /// The outputs stored in a vectorised body (each through its pack po_<name>).
  std::set<std::string> packsWritten;
  /// Set when an external value is read at an index other than its own element.
  bool broadcastRead = false;
  bool gatherRead = false;

  void line(const std::string &statement) { text << indent << statement << "\n"; }
};

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

/// Emits `for (j ...) { const long long i = row * L + j; <body> }` with a fresh scope.
/// The row's threads stride over its first `limit` elements; `j` is the column (what gamma
/// and beta are indexed by) and `i = row * L + j` the flat element index, so every operand of
/// the row is addressed as the contiguous slice [row * L, row * L + L).
template <typename F>
inline std::string rowLoop(const RowSpan &span, F body, const std::string &limit = "L") {
  Scope scope;
  scope.indent = "      ";
  body(scope);
  return std::string("    for (long long j = ") + span.first() + "; j < " + limit +
         "; j += " + span.stride() + ") {\n      const long long i = row * L + j;\n" +
         scope.text.str() + "    }\n";
}

class KernelWriter {
public:
  KernelWriter(const llvm::DenseMap<Operation *, int> &opIndex,
               const llvm::SmallPtrSetImpl<Operation *> &members)
      : opIndex(opIndex), members(members) {}

  std::vector<KernelParam> params;
  /// Statements at the start of the kernel (the reads of the run scalars).
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
    if (auto get = llvm::dyn_cast<graph::GetParamOp>(op))
      return "@" + get.getName().str();
    if (auto get = llvm::dyn_cast<graph::GetInputOp>(op))
      return "@" + get.getName().str();
    if (auto get = llvm::dyn_cast<graph::GetLossScaleOp>(op))
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

  /// A per-run value ("seed", "step" or "totalSteps") as a local of that name, read at the start
  /// of the kernel from the run-scalar argument (plan::RunScalarBlock: seed, step, total steps).
  /// A CUDA graph replays the arguments it captured, so these are never passed by value.
  std::string runScalar(const std::string &name) {
    static const char *const fields[] = {"seed", "step", "totalSteps"};
    int field = -1;
    for (int i = 0; i < 3; ++i)
      if (name == fields[i])
        field = i;
    if (field < 0)
      throw std::runtime_error("CUDA codegen: '" + name + "' is not a run scalar");
    bool bound = false;
    for (const KernelParam &param : params)
      bound = bound || param.role == Role::RunScalars;
    if (!bound)
      params.push_back({Role::RunScalars, "runScalars", "u64", {3}, "run_scalars"});
    const std::string read =
        "const unsigned long long " + name + " = runScalars[" + std::to_string(field) + "];";
    if (std::find(prologue.begin(), prologue.end(), read) == prologue.end())
      prologue.push_back(read);
    return name;
  }

  std::string scratchParam(const std::string &name, Shape shape, const std::string &dtype = "f32") {
    params.push_back({Role::Scratch, name, dtype, std::move(shape), "scratch"});
    return name;
  }

  /// The error record argument and the `site` scalar (the plan instruction of \p op, which the
  /// record names), for kernels that check their data; returns the record's name.
  std::string errorParam(Operation *op) {
    usesErrors = true;
    for (const KernelParam &param : params)
      if (param.role == Role::ErrorRecord)
        return param.name;
    params.push_back({Role::ErrorRecord, "errors", "ErrorRecord", {}, "error_record"});
    scalarParam("site", "i64", "instruction %" + std::to_string(opIndex.lookup(op)));
    return "errors";
  }

  /// The C declaration of every parameter, in order.
  std::string signature() const {
    std::string text;
    std::set<std::string> aliased;
    for (const KernelParam &param : params)
      if (!param.aliasOf.empty()) {
        aliased.insert(param.name);
        aliased.insert(param.aliasOf);
      }
    for (size_t i = 0; i < params.size(); ++i) {
      const KernelParam &param = params[i];
      std::string type;
      if (param.role == Role::Scalar)
        type = param.elementType == "u64" ? "unsigned long long" : "long long";
      else if (param.role == Role::Table)
        type = "const " + param.elementType + " *__restrict__";
      else if (param.role == Role::ErrorRecord)
        type = "ErrorRecord *__restrict__";
      else if (param.role == Role::RunScalars)
        type = "const unsigned long long *__restrict__";
      else {
        std::string element = param.elementType == "f32"    ? "float"
                              : param.elementType == "f64"  ? "double"
                              : param.elementType == "bf16" ? "bfloat16"
                              : param.elementType == "f16"  ? "half16"
                              : param.elementType == "i32"  ? "int"
                                                            : "long long";
        bool readOnly = param.role == Role::Input;
        type = (readOnly ? "const " : "") + element +
               (aliased.count(param.name) ? " *" : " *__restrict__");
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
  void store(Value value, const std::string &index, const std::string &expression, Scope &scope) {
    std::string param = tensorParam(value, Role::Output);
    std::string type = cType(elementOf(value));
    if (scope.vector) {
      scope.packsWritten.insert(param);
      scope.line("po_" + param + ".v[k] = fromFloat<" + type + ">(" + expression + ");");
    } else
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

  /// Includes \p header (a path from the repository root): the device code of a fixed kernel
  /// (runtime/cuda/device/*.cuh) that the entry point calls, or the numerics the body calls.
  void include(const std::string &header) {
    if (std::find(headers.begin(), headers.end(), header) == headers.end())
      headers.push_back(header);
  }

  /// The device headers the kernel includes besides KernelSupport.h, in order.
  std::vector<std::string> headers;
  /// Seed and step of the dropout masks (the CPU backend's keying).
  bool usesRandom = false;
  /// The kernel reports bad data through the error record (errorParam).
  bool usesErrors = false;

private:
  const llvm::DenseMap<Operation *, int> &opIndex;
  const llvm::SmallPtrSetImpl<Operation *> &members;
  std::map<std::pair<void *, int>, std::string> tensorNames;
  std::map<std::string, std::string> stateNames;
  int inputs = 0, outputs = 0, states = 0, temps = 0;
};

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
  /// Finishes a kernel: header comment, includes (KernelSupport.h, the writer's headers, the
  /// numerics the body names), the entry point around \p body; name from the code's hash.
  void finish(KernelWriter &writer, const std::string &kind, const std::string &stem,
              const std::string &math, const std::string &body, KernelLaunch launch,
              std::vector<TensorTableEntry> table = {});

  std::vector<Value> groupOutputs(const KernelWriter &writer) const {
    std::vector<Value> outputs;
    for (Operation *op : group->ops)
      for (Value result : op->getResults())
        if (writer.readOutside(result) && !llvm::isa<graph::ReshapeOp>(op))
          outputs.push_back(result);
    return outputs;
  }

  /// The end of a kernel that unscales gradients: every thread's `nonFinite` reduced over the
  /// block by __syncthreads_or (every thread must reach it: after the loops), and one thread a
  /// block raising the scaler's flag at \p foundPtr.
  static std::string raiseNonFiniteFlag(const std::string &foundPtr) {
    return "  // Raise the scaler's non-finite flag (no host synchronisation; the optimizer\n"
           "  // step reads it).\n"
           "  if (__syncthreads_or(nonFinite) && threadIdx.x == 0)\n"
           "    atomicExch(" +
           foundPtr + ", 1.0f);\n";
  }

  /// What a column sum's second stage runs before and after its loop over the columns: under
  /// loss scaling, reading the scale and raising the scaler's non-finite flag.
  struct ColumnStoreFrame {
    std::string prologue, epilogue;
  };
  /// A column sum's second stage: the statements adding element i of each of the group's
  /// accumulate_grad gradients computed from \p root (a sum's or norm gradient's result) into
  /// its f32 accumulator, unchanged or divided by the loss scale (graph-fuse merges only f32
  /// gradients). An unscaling one sets \p frame.
  void accumulateColumnTotals(KernelWriter &writer, Scope &scope, Value root,
                              ColumnStoreFrame &frame);

  void elementwiseKernel(const std::string &kind, const std::string &math);
  void copyKernel();
  void rowKernel(Operation *anchor);
  void normGradColumns(Operation *anchor);
  /// Emits, into a scope, the statements that add element i (row `row`) to the sums: sum s is
  /// the accumulator named `accumulator(s)`. Called once per variant of the first stage, each
  /// with a fresh writer.
  using ColumnSumEmitter = std::function<void(KernelWriter &writer, Scope &scope,
                                              const std::function<std::string(int)> &accumulator)>;
  /// Column sums over [rows, L] in two kernels (see the definition): \p emitSum adds element i
  /// to the sums (1 or 2: \p sums); \p storeCode stores from `total0` (`total1`) at `i` = the
  /// column with \p storeWriter's params, inside \p frame.
  void columnSumKernels(const ColumnSumEmitter &emitSum, KernelWriter &storeWriter,
                        const std::string &storeCode, int sums, int64_t rows, int64_t length,
                        const std::string &kind, const std::string &stem, const std::string &math,
                        const ColumnStoreFrame &frame = {});
  void reduceKernel(Operation *anchor);
  void maxGradKernel(graph::MaxGradOp anchor);
  void embeddingGradKernels(graph::EmbeddingGradOp anchor);
  void mseLossKernel(graph::MseLossOp anchor);
  void crossEntropyKernels();
  void optimizerKernel();
  void attentionStub();
  void gradSeedKernel(graph::GradSeedOp op);
  void lrScheduleKernel(graph::LrScheduleOp op);
  void globalNormKernels(graph::GlobalNormOp op);
  void updateLossScaleKernel(graph::UpdateLossScaleOp op);
};

} // namespace cudagen
} // namespace ampc

#endif // AMPC_COMPILER_CUDA_KERNELGENERATOR_H
