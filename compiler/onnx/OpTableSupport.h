//===- OpTableSupport.h - What the op table's converters share -*- C++ -*-===//
//
// Private to compiler/onnx: the context a converter sees and the helpers the converters of
// OpTable.cpp and OpTableImages.cpp share.
//
//===----------------------------------------------------------------------===//

#ifndef AMPC_COMPILER_ONNX_OPTABLESUPPORT_H
#define AMPC_COMPILER_ONNX_OPTABLESUPPORT_H

#include "compiler/onnx/GraphBuilder.h"
#include "compiler/onnx/OnnxFile.h"

#include <cmath>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace ampc::onnximport {

using mlir::Float32Type;
using mlir::FloatType;
using mlir::Type;
using mlir::Value;

/// What a converter sees: the builder, the node, its inputs and where its outputs go.
struct NodeContext {
  GraphBuilder &graph;
  const onnx::NodeProto &node;
  const std::vector<ImportedValue *> &inputs;
  std::vector<ImportedValue> &outputs;
  int64_t opset;

  bool has(size_t i) const { return i < inputs.size() && inputs[i]; }
  ImportedValue &input(size_t i) const {
    if (!has(i))
      throw ImportError("input " + std::to_string(i) + " is missing");
    return *inputs[i];
  }
  /// An input that must be known at import time (a shape, axes, a scalar), by its role.
  const HostTensor &constantInput(size_t i, const std::string &role) const {
    if (!input(i).isConstant())
      throw ImportError("its " + role + " (input " + std::to_string(i) +
                        ") is computed from the model's inputs; ampc needs it known at import "
                        "time (static shapes)");
    return *input(i).constant;
  }
  /// The float element type the node computes in: that of its first non-constant input.
  Type floatElement() const {
    for (ImportedValue *value : inputs)
      if (value && !value->isConstant()) {
        Type element = value->pending != Pending::None
                           ? GraphBuilder::tensorType(value->pendingInput).getElementType()
                           : GraphBuilder::tensorType(value->value).getElementType();
        if (!llvm::isa<FloatType>(element))
          throw ImportError("its input is an integer tensor computed from the model's inputs; "
                            "the graph dialect does arithmetic on float tensors only");
        return element;
      }
    return Float32Type::get(graph.builder.getContext());
  }
  /// Input \p i as a graph value (a constant in \p element).
  Value tensor(size_t i, Type element = {}) const { return graph.tensor(input(i), element); }
  void result(Value value, size_t i = 0) const {
    outputs.resize(std::max(outputs.size(), i + 1));
    outputs[i].value = value;
  }
  void pending(Pending kind, Value x) const {
    outputs.resize(1);
    outputs[0].pending = kind;
    outputs[0].pendingInput = x;
  }
};

/// A scalar constant input's value, or nothing.
inline std::optional<double> scalarConstant(const ImportedValue &value) {
  if (!value.isConstant() || value.constant->values.size() != 1)
    return std::nullopt;
  return value.constant->values[0];
}

inline bool near(std::optional<double> value, double expected) {
  return value && std::fabs(*value - expected) <= 1e-6 * std::fabs(expected);
}

using Converter = std::function<void(const NodeContext &)>;

/// Adds the converters of the image operators (OpTableImages.cpp) to \p table.
void addImageConverters(std::map<std::string, Converter> &table);

} // namespace ampc::onnximport

#endif // AMPC_COMPILER_ONNX_OPTABLESUPPORT_H
