//===- PlanEmitterImpl.h - The plan emitter's state -------------*- C++ -*-===//
//
// Private to compiler/lowering/PlanEmitter*.cpp: the Emitter that lowers a graph model to a plan.
// PlanEmitter.cpp holds the buffers and instructions it appends, the forward ops and the walk
// over the model's functions; PlanEmitterSymbols.cpp declares the model's symbols (parameters,
// inputs, training state, parameter copies, the loss scaler) and the valid range of integer
// inputs; PlanEmitterTraining.cpp lowers the gradient and training-state ops and writes the
// plan's training summary.
//
//===--------------------------------------------------------------------------===//

#ifndef AMPC_COMPILER_LOWERING_PLANEMITTERIMPL_H
#define AMPC_COMPILER_LOWERING_PLANEMITTERIMPL_H

#include "compiler/lowering/PlanEmitter.h"
#include "runtime/plan/PlanAttrs.h"

#include "llvm/ADT/APFloat.h"
#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/StringMap.h"

#include <cstdint>
#include <map>
#include <string>
#include <type_traits>
#include <vector>

namespace ampc::planemitter {

/// A shape or an i64-array attribute as the plan stores it (owned, unlike MLIR's views).
inline std::vector<int64_t> toVector(llvm::ArrayRef<int64_t> values) {
  return std::vector<int64_t>(values.begin(), values.end());
}

/// Builds the plan op by op, keeping the buffer of every SSA value.
///
/// The model's symbols (parameters, inputs, training state, parameter copies, the loss scaler)
/// become the first buffers, in declaration order; every op result after that gets a fresh
/// temporary buffer, except where the op only names an existing buffer (a symbol read, the loss
/// scale) or updates one in place (gradient accumulation, the optimizer updates). Buffer ids are
/// therefore indices into `result.buffers` and never change once handed out.
class Emitter {
public:
  Emitter(graph::ModelOp model, PlanProvenance *provenance, const GivenValues *given)
      : model(model), provenance(provenance), given(given) {
    result.modelName = model.getSymName().str();
  }

  /// Lowers the whole model: symbols, then the micro step, then the optimizer step if any.
  mlir::FailureOr<plan::Plan> run();

private:
  /// Declares a buffer of a ranked tensor type; fails for element types the plan cannot hold.
  mlir::FailureOr<uint32_t> addBuffer(mlir::Location loc, const std::string &name, mlir::Type type,
                                      plan::BufferRole role);
  /// Appends an instruction whose results are new temporaries for `values`.
  mlir::LogicalResult addInstruction(mlir::Operation *op, plan::OpCode code,
                                     mlir::ValueRange operands, mlir::ValueRange values,
                                     std::map<std::string, plan::AttrValue> attrs = {});
  /// Appends an instruction that reads `operands` and updates the symbols' buffers in place:
  /// the symbols' buffers come first among the operands and are the results.
  mlir::LogicalResult addInPlace(mlir::Operation *op, plan::OpCode code,
                                 llvm::ArrayRef<mlir::FlatSymbolRefAttr> updated,
                                 mlir::ValueRange operands,
                                 std::map<std::string, plan::AttrValue> attrs);
  /// Declares the model's symbols, in declaration order, as the plan's first buffers.
  mlir::LogicalResult declareSymbols();
  /// Lowers the ops of a single-block function into `target`, recording their provenance.
  mlir::LogicalResult emitFunction(mlir::func::FuncOp func, std::vector<plan::Instruction> &target);
  /// Lowers the ops that `emitOp` leaves: gradients, accumulation, the optimizer step's ops.
  mlir::LogicalResult emitTrainingOp(mlir::Operation *op);
  /// Fills the plan's one-line training summary.
  void describeTraining();
  /// Declares the loss scaler's settings and state buffers.
  mlir::LogicalResult emitLossScaler(graph::LossScaleOp scaler);
  /// Lowers one forward-pass op (or hands it to `emitTrainingOp`).
  mlir::LogicalResult emitOp(mlir::Operation *op);
  /// Copies a dense constant's data into the plan's constant section.
  mlir::LogicalResult emitConstant(graph::ConstantOp op);
  /// Lowers a split into one slice per piece (the plan has no multi-result split).
  mlir::LogicalResult emitSplit(graph::SplitOp op);
  /// Lowers a clip or its gradient: an infinite bound is no attribute.
  mlir::LogicalResult emitClip(mlir::Operation *op, plan::OpCode code, llvm::APFloat min,
                               llvm::APFloat max);
  /// Lowers a convolution or one of its gradients with the window's attributes.
  template <typename ConvOp>
  mlir::LogicalResult emitConv2d(mlir::Operation *op, plan::OpCode code, ConvOp conv);
  /// Lowers a pooling or its gradient with the window's attributes.
  template <typename PoolOp>
  mlir::LogicalResult emitPool2d(mlir::Operation *op, plan::OpCode code, PoolOp pool);
  /// Derives the valid range of integer inputs from the ops that index with them.
  void inferInputBounds();

  graph::ModelOp model;
  PlanProvenance *provenance;
  const GivenValues *given;
  plan::Plan result;
  /// The buffer holding each SSA value lowered so far.
  llvm::DenseMap<mlir::Value, uint32_t> bufferOf;
  /// The buffer of each model symbol (parameter, input, state, copy, loss scaler's scale).
  llvm::StringMap<uint32_t> symbolBuffer;
  /// Where instructions go: the forward / micro step, or the optimizer step.
  std::vector<plan::Instruction> *instructions = &result.instructions;
  /// Streams of dropouts that name none (models not built for training): numbered after the
  /// largest explicit stream.
  int64_t nextDropoutStream = 0;
};

// The window ops' lowerings are templates over the op class: the forward ops' (PlanEmitter.cpp)
// and their gradients' (PlanEmitterTraining.cpp) instantiate them.

template <typename ConvOp>
mlir::LogicalResult Emitter::emitConv2d(mlir::Operation *op, plan::OpCode code, ConvOp conv) {
  return addInstruction(op, code, op->getOperands(), op->getResults(),
                        {plan::attr::strides(toVector(conv.getStrides())),
                         plan::attr::pads(toVector(conv.getPadding())),
                         plan::attr::dilations(toVector(conv.getDilations())),
                         plan::attr::groups(static_cast<int64_t>(conv.getGroups()))});
}

template <typename PoolOp>
mlir::LogicalResult Emitter::emitPool2d(mlir::Operation *op, plan::OpCode code, PoolOp pool) {
  std::map<std::string, plan::AttrValue> attrs = {
      plan::attr::kernelShape(toVector(pool.getKernelSize())),
      plan::attr::strides(toVector(pool.getStrides())),
      plan::attr::pads(toVector(pool.getPadding())),
      plan::attr::ceilMode(int64_t(pool.getCeilMode()))};
  if constexpr (std::is_same_v<PoolOp, graph::MaxPool2dOp> ||
                std::is_same_v<PoolOp, graph::MaxPool2dGradOp>)
    attrs.insert(plan::attr::dilations(toVector(pool.getDilations())));
  else
    attrs.insert(plan::attr::countIncludePad(int64_t(pool.getCountIncludePad())));
  return addInstruction(op, code, op->getOperands(), op->getResults(), std::move(attrs));
}

} // namespace ampc::planemitter

#endif // AMPC_COMPILER_LOWERING_PLANEMITTERIMPL_H
