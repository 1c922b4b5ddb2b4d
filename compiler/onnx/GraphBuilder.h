//===- GraphBuilder.h - the ONNX importer's view of values and graph ops -*- C++ -*-===//
//
// While importing, every ONNX value name maps to an ImportedValue: a graph-dialect SSA value, an
// import-time constant (HostTensor, from initializers, Constant nodes and shape folding), or
// both once a constant has been materialised as graph.constant. GraphBuilder creates graph ops
// at the current node's location and holds the small helpers the op table (OpTable.cpp) is
// written with.
//
//===------------------------------------------------------------------------------===//

#ifndef AMPC_COMPILER_ONNX_GRAPHBUILDER_H
#define AMPC_COMPILER_ONNX_GRAPHBUILDER_H

#include "compiler/onnx/OnnxFile.h"
#include "dialects/Graph/GraphDialect.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"

#include <optional>
#include <string>
#include <vector>

namespace ampc::onnximport {

/// Import-time raising: a value recognised as a step of a fused op's decomposition and not built
/// yet. The next node either completes the pattern (Mul(x, Sigmoid(x)) is graph.silu; the erf
/// form of GELU, x * (1 + Erf(x / sqrt 2)) * 0.5, is graph.gelu erf; NegativeLogLikelihoodLoss of
/// a LogSoftmax is graph.cross_entropy) or reads the value, which is then built from plain ops.
enum class Pending {
  None,
  Erf,        ///< Erf(x / sqrt 2)
  OnePlusErf, ///< 1 + Erf(x / sqrt 2)
  TwiceGelu,  ///< x * (1 + Erf(x / sqrt 2))
  Sigmoid,    ///< Sigmoid(x)
  LogSoftmax, ///< LogSoftmax(x) over the last axis
  /// A training BatchNormalization's updated running mean or variance: ampc updates them in
  /// place (graph.update_running_stats), so no op may read them as values.
  RunningStatistic,
  /// A Dropout's mask output: the graph's dropout draws its mask inside the op.
  DropoutMask
};

/// One ONNX value during import.
struct ImportedValue {
  /// The graph value (null while the value is only a constant not yet needed as a tensor).
  mlir::Value value;
  /// The value when it is known at import time.
  std::optional<HostTensor> constant;
  /// Set when the value is a parameter read (graph.get_param): its name.
  std::string param;
  /// A boolean tensor held as f32 0 and 1 (a bool graph input, such as a key padding mask, and
  /// what data movement and Cast to bool make of it): Where and Not take it as a condition.
  bool mask = false;
  /// A pattern step not built yet, and the x it applies to.
  Pending pending = Pending::None;
  mlir::Value pendingInput;

  bool isConstant() const { return constant.has_value(); }
};

/// Creates graph ops for the node being converted.
class GraphBuilder {
public:
  GraphBuilder(mlir::OpBuilder &builder, mlir::Location loc) : builder(builder), loc(loc) {}

  mlir::OpBuilder &builder;
  /// The location of the node being converted.
  mlir::Location loc;

  /// The graph element type of an ONNX data type; ImportError for types the dialect lacks.
  mlir::Type elementType(int32_t dtype) const;
  static mlir::RankedTensorType tensorType(mlir::Value value) {
    return llvm::cast<mlir::RankedTensorType>(value.getType());
  }
  static std::vector<int64_t> shapeOf(mlir::Value value) {
    auto shape = tensorType(value).getShape();
    return std::vector<int64_t>(shape.begin(), shape.end());
  }
  /// The static shape of an imported value (constant, pending or not).
  static std::vector<int64_t> shapeOf(const ImportedValue &value) {
    if (value.pending != Pending::None)
      return shapeOf(value.pendingInput);
    return value.value ? shapeOf(value.value) : value.constant->shape;
  }

  /// A graph.constant holding \p tensor in \p element (the tensor's own type when null).
  mlir::Value constant(const HostTensor &tensor, mlir::Type element = {});
  /// A scalar (rank-0) float constant of \p element.
  mlir::Value scalar(double value, mlir::Type element);
  /// The graph value of \p value, materialising a constant (in \p element when given, so a
  /// constant operand takes the float type of the tensor it meets) or a pending pattern step.
  mlir::Value tensor(ImportedValue &value, mlir::Type element = {});

  /// Creates a graph op. An op that infers its result type is checked first: operands that do
  /// not fit (a file's MatMul of [2, 4] by [5, 3]) are an ImportError carrying the op's own
  /// message, where OpBuilder::create would stop the process.
  template <typename Op, typename... Args> mlir::Value create(Args &&...args) {
    if constexpr (Op::template hasTrait<mlir::InferTypeOpInterface::Trait>()) {
      mlir::OperationState state(loc, Op::getOperationName());
      Op::build(builder, state, mlir::Type(), std::forward<Args>(args)...);
      state.types.clear();
      llvm::SmallVector<mlir::Type> types;
      if (failed(inferTypes<Op>(state, types)))
        throw ImportError(inferenceError);
      state.addTypes(types);
      return builder.create(state)->getResult(0);
    } else {
      return builder.create<Op>(loc, std::forward<Args>(args)...).getResult();
    }
  }
  mlir::Value reshape(mlir::Value input, const std::vector<int64_t> &shape);
  mlir::Value transpose(mlir::Value input, const std::vector<int64_t> &permutation);
  mlir::Value broadcast(mlir::Value input, const std::vector<int64_t> &shape);
  mlir::Value slice(mlir::Value input, const std::vector<int64_t> &starts,
                    const std::vector<int64_t> &sizes);
  mlir::Value cast(mlir::Value input, mlir::Type element);

private:
  /// Op's result types for \p state; on failure the op's diagnostic is in inferenceError.
  template <typename Op>
  mlir::LogicalResult inferTypes(mlir::OperationState &state,
                                 llvm::SmallVectorImpl<mlir::Type> &types) {
    mlir::MLIRContext *context = builder.getContext();
    inferenceError = "the operands do not fit " + Op::getOperationName().str();
    mlir::ScopedDiagnosticHandler capture(context, [&](mlir::Diagnostic &diagnostic) {
      inferenceError = diagnostic.str();
      return mlir::success();
    });
    return Op::inferReturnTypes(context, loc, state.operands,
                                state.attributes.getDictionary(context), state.getRawProperties(),
                                state.regions, types);
  }

  std::string inferenceError;
};

/// The `NAME.num_batches_tracked` PyTorch keeps beside a batch norm's `NAME.running_mean`, or
/// "" when \p runningMean is not so named.
inline std::string batchCountName(const std::string &runningMean) {
  const std::string suffix = ".running_mean";
  if (runningMean.size() <= suffix.size() ||
      runningMean.compare(runningMean.size() - suffix.size(), suffix.size(), suffix) != 0)
    return "";
  return runningMean.substr(0, runningMean.size() - suffix.size()) + ".num_batches_tracked";
}

/// Whether the op table converts \p opType (of the default domain).
bool isImportedOp(const std::string &opType);

/// Converts one node whose inputs are not all constants into graph ops: \p inputs holds the node's
/// inputs (null for an absent optional input), \p outputs receives one value per node output.
/// Throws ImportError naming the cause; the caller adds the node's description.
void convertNode(GraphBuilder &graph, const onnx::NodeProto &node,
                 const std::vector<ImportedValue *> &inputs, std::vector<ImportedValue> &outputs,
                 int64_t opset);

} // namespace ampc::onnximport

#endif // AMPC_COMPILER_ONNX_GRAPHBUILDER_H
