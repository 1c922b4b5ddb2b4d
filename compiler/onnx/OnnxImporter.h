//===- OnnxImporter.h - ONNX models as graph-dialect models -----*- C++ -*-===//
//
// `ampc import model.onnx -o model.mlir`, and every verb given a .onnx file, go through
// importOnnxModel: the ONNX graph becomes one graph.model whose trainable initializers are
// graph.param ... init #graph.given (their values returned beside the module, and written by
// `ampc import` as a safetensors file the model names), whose other initializers and shape
// computations are folded into constants, whose graph inputs are graph.input, and whose scalar
// output is the graph.loss. The pieces: OnnxFile (protobuf, tensors, external data),
// ShapeFolding (import-time evaluation), OpTable (operators as graph ops, import-time raising).
//
//===----------------------------------------------------------------------===//

#ifndef AMPC_COMPILER_ONNX_ONNXIMPORTER_H
#define AMPC_COMPILER_ONNX_ONNXIMPORTER_H

#include "compiler/lowering/PlanEmitter.h"
#include "dialects/Graph/GraphDialect.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"

#include <map>
#include <set>
#include <string>
#include <vector>

namespace ampc {

/// What the user adds to an ONNX file.
struct OnnxImportOptions {
  /// Static shapes for inputs whose dimensions the file leaves symbolic (--input-shape NAME=DIMS).
  std::map<std::string, std::vector<int64_t>> inputShapes;
  /// Initializers kept as constants though the loss depends on them (--constant-initializer):
  /// buffers such as rotary tables, which ONNX files do not tell from parameters.
  std::set<std::string> constants;
  /// The weights file the imported model names (its `weights` attribute); the ONNX file's own
  /// name when empty.
  std::string weightsName;
  /// The most elements the constants evaluated at import time (shapes, masks) may hold in all,
  /// 2 GiB as doubles: each may have 2^26, and a few bytes of ConstantOfShape ask for that.
  int64_t maxFoldedElements = int64_t(1) << 28;
};

/// An imported model and its parameters' initial values.
struct ImportedOnnxModel {
  mlir::OwningOpRef<mlir::ModuleOp> module;
  graph::ModelOp model;
  GivenValues given;
};

/// Imports \p path. On failure one located error has been emitted (the file, and the node, its
/// op type, opset and position where one is involved).
mlir::FailureOr<ImportedOnnxModel> importOnnxModel(const std::string &path,
                                                   mlir::MLIRContext &context,
                                                   const OnnxImportOptions &options);

/// Writes the imported parameters' values as a safetensors file (F32, names = parameter names).
/// Throws std::runtime_error naming the file when it cannot be written.
void writeGivenValues(graph::ModelOp model, const GivenValues &given, const std::string &path);

/// Parses --input-shape's DIMS ("4x16" or "4,16"); false when malformed.
bool parseDims(const std::string &text, std::vector<int64_t> &dims);

} // namespace ampc

#endif // AMPC_COMPILER_ONNX_ONNXIMPORTER_H
