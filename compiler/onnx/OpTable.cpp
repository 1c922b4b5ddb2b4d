//===- OpTable.cpp - ONNX operators as graph-dialect ops -------------------===//
//
// One converter per ONNX operator whose inputs are not all known at import time (those are
// evaluated by ShapeFolding.cpp). Each maps onto the graph dialect's ops: MatMul and Gemm onto
// graph.matmul (transposes as its flags), LayerNormalization onto graph.layernorm,
// SoftmaxCrossEntropyLoss onto graph.cross_entropy, Gather of a table by token ids onto
// graph.embedding, Where with an import-time mask onto arithmetic with the mask, Reshape /
// Squeeze / Unsqueeze / Flatten onto graph.reshape, and so on. Import-time raising (Pending in
// GraphBuilder.h) recognises the ONNX decompositions of GELU (erf form), SiLU and log-softmax +
// negative log-likelihood, whose pieces (Erf, Sigmoid, LogSoftmax) the dialect does not have.
// The image operators (Conv, pooling, BatchNormalization, Clip, Pad) are OpTableImages.cpp's.
//
//===----------------------------------------------------------------------===//

#include "compiler/onnx/OpTableSupport.h"
#include "compiler/onnx/ShapeFolding.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <numeric>

using namespace mlir;

namespace ampc::onnximport {

namespace {

//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//

template <typename Op> void binary(const NodeContext &c) {
  Type element = c.floatElement();
  c.result(c.graph.create<Op>(c.tensor(0, element), c.tensor(1, element)));
}

/// Add: 1 + Erf(x / sqrt 2) continues a GELU.
void convertAdd(const NodeContext &c) {
  for (int side = 0; side < 2; ++side)
    if (c.input(side).pending == Pending::Erf && near(scalarConstant(c.input(1 - side)), 1.0))
      return c.pending(Pending::OnePlusErf, c.input(side).pendingInput);
  binary<graph::AddOp>(c);
}

/// Mul: x * Sigmoid(x) is SiLU; x * (1 + Erf(x / sqrt 2)) and its half are GELU.
void convertMul(const NodeContext &c) {
  for (int side = 0; side < 2; ++side) {
    ImportedValue &self = c.input(side), &other = c.input(1 - side);
    if (self.pending == Pending::Sigmoid && other.value == self.pendingInput && other.value)
      return c.result(c.graph.create<graph::SiluOp>(other.value));
    if (self.pending == Pending::OnePlusErf && other.value == self.pendingInput && other.value)
      return c.pending(Pending::TwiceGelu, other.value);
    if (self.pending == Pending::TwiceGelu && near(scalarConstant(other), 0.5))
      return c.result(c.graph.create<graph::GeluOp>(
          graph::GeluApproximationAttr::get(c.graph.builder.getContext(),
                                            graph::GeluApproximation::erf),
          self.pendingInput));
  }
  binary<graph::MulOp>(c);
}

/// Div: x / sqrt 2 feeding an Erf is recognised by convertErf; plain division otherwise.
void convertDiv(const NodeContext &c) { binary<graph::DivOp>(c); }

/// The x of x / sqrt 2 or x * (1 / sqrt 2), when \p value was computed so (looked up through the
/// graph op that computed it).
Value geluArgument(Value value) {
  Operation *op = value.getDefiningOp();
  if (!op || op->getNumOperands() != 2 || !llvm::isa<graph::DivOp, graph::MulOp>(op))
    return {};
  auto constant = op->getOperand(1).getDefiningOp<graph::ConstantOp>();
  auto dense = constant ? llvm::dyn_cast<DenseFPElementsAttr>(constant.getValue()) : nullptr;
  if (!dense || dense.getNumElements() != 1)
    return {};
  const double c = (*dense.getValues<APFloat>().begin()).convertToDouble();
  const double expected = llvm::isa<graph::DivOp>(op) ? std::sqrt(2.0) : 1 / std::sqrt(2.0);
  if (std::fabs(c - expected) > 1e-6)
    return {};
  return op->getOperand(0);
}

void convertErf(const NodeContext &c) {
  Value argument = c.tensor(0);
  Value x = geluArgument(argument);
  if (!x)
    throw ImportError("Erf is imported only as part of GELU's erf form, x * (1 + erf(x / sqrt 2)) "
                      "/ 2; its argument here is not x / sqrt 2");
  c.pending(Pending::Erf, x);
}

void convertPow(const NodeContext &c) {
  std::optional<double> exponent = scalarConstant(c.input(1));
  if (!exponent)
    throw ImportError("Pow needs a scalar exponent known at import time");
  Value x = c.tensor(0);
  Type element = GraphBuilder::tensorType(x).getElementType();
  if (*exponent == 1)
    return c.result(x);
  if (*exponent == 2)
    return c.result(c.graph.create<graph::MulOp>(x, x));
  if (*exponent == 3)
    return c.result(c.graph.create<graph::MulOp>(c.graph.create<graph::MulOp>(x, x), x));
  if (*exponent == 0.5)
    return c.result(c.graph.create<graph::SqrtOp>(x));
  if (*exponent == -0.5)
    return c.result(c.graph.create<graph::RsqrtOp>(x));
  if (*exponent == -1)
    return c.result(c.graph.create<graph::DivOp>(c.graph.scalar(1.0, element), x));
  throw ImportError("Pow with exponent " + std::to_string(*exponent) +
                    " (ampc imports exponents 1, 2, 3, 0.5, -0.5 and -1)");
}

void convertReciprocal(const NodeContext &c) {
  Value x = c.tensor(0);
  Type element = GraphBuilder::tensorType(x).getElementType();
  // 1 / sqrt(y) is graph.rsqrt.
  if (auto sqrt = x.getDefiningOp<graph::SqrtOp>())
    return c.result(c.graph.create<graph::RsqrtOp>(sqrt.getInput()));
  c.result(c.graph.create<graph::DivOp>(c.graph.scalar(1.0, element), x));
}

/// Where(condition, x, y) with a condition known at import time. A constant fill of -inf (or a
/// huge negative number, as masked_fill writes for attention masks) becomes an additive mask, so
/// that softmax sees -inf where the condition says; otherwise x * c + y * (1 - c).
/// Where with a condition computed from a bool input (a mask m of 0 and 1): m * a + (1 - m) * b,
/// the infinite elements of a constant branch (a fill, or a causal mask of 0 and -inf) taken as
/// the largest finite float of their sign, so 0 * fill stays 0 and an additive attention mask
/// still zeroes its softmax weights.
void convertMaskedWhere(const NodeContext &c) {
  Type element = c.floatElement();
  auto branch = [&](int i) -> Value {
    if (!c.input(i).isConstant())
      return c.tensor(i, element);
    HostTensor finite = *c.input(i).constant;
    bool clamped = false;
    for (double &value : finite.values)
      if (std::isinf(value)) {
        value = value > 0 ? std::numeric_limits<float>::max() : -std::numeric_limits<float>::max();
        clamped = true;
      }
    if (!clamped)
      return c.tensor(i, element);
    finite.dtype = onnx::TensorProto::FLOAT;
    return c.graph.constant(finite, Float32Type::get(c.graph.builder.getContext()));
  };
  Value m = c.tensor(0), a = branch(1), b = branch(2);
  Type f32 = GraphBuilder::tensorType(m).getElementType();
  Value notM = c.graph.create<graph::SubOp>(c.graph.scalar(1.0, f32), m);
  Value chosen = c.graph.create<graph::AddOp>(c.graph.create<graph::MulOp>(m, a),
                                              c.graph.create<graph::MulOp>(notM, b));
  c.result(GraphBuilder::tensorType(chosen).getElementType() == element
               ? chosen
               : c.graph.cast(chosen, element));
}

void convertWhere(const NodeContext &c) {
  if (c.input(0).mask)
    return convertMaskedWhere(c);
  const HostTensor &condition = c.constantInput(0, "condition");
  Type element = c.floatElement();
  auto fillOf = [&](int i) -> std::optional<double> {
    std::optional<double> fill = scalarConstant(c.input(i));
    if (fill && (std::isinf(*fill) || *fill <= -1e30))
      return fill;
    return std::nullopt;
  };
  for (int side = 1; side <= 2; ++side) {
    std::optional<double> fill = fillOf(side);
    if (!fill || c.input(3 - side).isConstant())
      continue;
    // Elements that take the fill get it added; the others get 0.
    HostTensor bias = condition;
    bias.dtype = onnx::TensorProto::FLOAT;
    for (double &value : bias.values)
      value = (side == 1 ? value != 0 : value == 0) ? *fill : 0.0;
    Value x = c.tensor(3 - side, element);
    Value sum = c.graph.create<graph::AddOp>(x, c.graph.constant(bias, element));
    const std::vector<int64_t> shape =
        broadcastShapes(condition.shape, broadcastShapes(GraphBuilder::shapeOf(x),
                                                         GraphBuilder::shapeOf(c.input(side))));
    return c.result(c.graph.broadcast(sum, shape));
  }
  HostTensor keep = condition, drop = condition;
  keep.dtype = drop.dtype = onnx::TensorProto::FLOAT;
  for (size_t i = 0; i < keep.values.size(); ++i) {
    keep.values[i] = condition.values[i] != 0;
    drop.values[i] = condition.values[i] == 0;
  }
  // A constant branch is one constant term: its values where it is chosen, 0 elsewhere
  // (evaluated as Where(condition, branch, 0) on the host), so a masked fill with a finite fill
  // reads s * keep + fill, the form graph-raise-fused-ops knows.
  auto term = [&](int side) -> Value {
    const HostTensor &mask = side == 1 ? keep : drop;
    if (!c.input(side).isConstant())
      return c.graph.create<graph::MulOp>(c.tensor(side, element), c.graph.constant(mask, element));
    onnx::NodeProto where;
    where.set_op_type("Where");
    HostTensor zero;
    zero.values = {0.0};
    HostTensor chosen = foldNode(where, {&mask, &*c.input(side).constant, &zero}, c.opset)->at(0);
    chosen.dtype = onnx::TensorProto::FLOAT;
    return c.graph.constant(chosen, element);
  };
  c.result(c.graph.create<graph::AddOp>(term(1), term(2)));
}

/// Trilu of a computed value: the product with the constant 0/1 triangle.
void convertTrilu(const NodeContext &c) {
  Value x = c.tensor(0, c.floatElement());
  std::vector<int64_t> shape = GraphBuilder::shapeOf(x);
  if (shape.size() < 2)
    throw ImportError("Trilu of a tensor of rank " + std::to_string(shape.size()));
  const int64_t k = c.has(1) ? c.constantInput(1, "diagonal").integer(0) : 0;
  const bool upper = intAttribute(c.node, "upper", 1);
  HostTensor keep;
  const int64_t rows = shape[shape.size() - 2], columns = shape.back();
  keep.shape = {rows, columns};
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < columns; ++j)
      keep.values.push_back((upper ? j - i >= k : j - i <= k) ? 1.0 : 0.0);
  Type element = GraphBuilder::tensorType(x).getElementType();
  c.result(c.graph.create<graph::MulOp>(x, c.graph.constant(keep, element)));
}

/// |x| = relu(x) + relu(-x), whose gradient at 0 is 0 as torch's.
void convertAbs(const NodeContext &c) {
  Value x = c.tensor(0);
  Value positive = c.graph.create<graph::ReluOp>(x);
  Value negative = c.graph.create<graph::ReluOp>(c.graph.create<graph::NegOp>(x));
  c.result(c.graph.create<graph::AddOp>(positive, negative));
}

/// max(0, min(1, alpha x + beta)): PyTorch's hardsigmoid (alpha 1/6, beta 1/2) as
/// graph.hardsigmoid, other coefficients as relu(y) - relu(y - 1), y = alpha x + beta.
void convertHardSigmoid(const NodeContext &c) {
  const double alpha = floatAttribute(c.node, "alpha", 0.2);
  const double beta = floatAttribute(c.node, "beta", 0.5);
  Value x = c.tensor(0);
  if (near(alpha, 1.0 / 6.0) && near(beta, 0.5))
    return c.result(c.graph.create<graph::HardsigmoidOp>(x));
  Type element = GraphBuilder::tensorType(x).getElementType();
  Value scaled = c.graph.create<graph::MulOp>(x, c.graph.scalar(alpha, element));
  Value y = c.graph.create<graph::AddOp>(scaled, c.graph.scalar(beta, element));
  Value above = c.graph.create<graph::SubOp>(y, c.graph.scalar(1.0, element));
  c.result(c.graph.create<graph::SubOp>(c.graph.create<graph::ReluOp>(y),
                                        c.graph.create<graph::ReluOp>(above)));
}

void convertCast(const NodeContext &c) {
  const int32_t to = static_cast<int32_t>(intAttribute(c.node, "to", onnx::TensorProto::FLOAT));
  // A mask stays the 0 and 1 it is; a cast of it to a number gives those.
  if (c.input(0).mask && (to == onnx::TensorProto::BOOL || HostTensor::isFloatType(to)))
    return c.result(c.tensor(0));
  if (to == onnx::TensorProto::BOOL)
    throw ImportError("a Cast to bool of a tensor computed from the model's inputs; ampc holds "
                      "booleans only as masks that come from bool inputs");
  c.result(c.graph.cast(c.tensor(0), c.graph.elementType(to)));
}


void convertDropout(const NodeContext &c) {
  double ratio = floatAttribute(c.node, "ratio", 0.5);
  if (c.has(1))
    ratio = c.constantInput(1, "ratio").values.at(0);
  // Dropout is the identity unless the model was exported for training (training_mode true).
  bool training = c.has(2) && c.constantInput(2, "training mode").values.at(0) != 0;
  Value x = c.tensor(0);
  if (!training || ratio == 0)
    c.result(x);
  else
    c.result(c.graph.create<graph::DropoutOp>(x, c.graph.builder.getF64FloatAttr(ratio), nullptr));
  // torch.onnx names the mask output even when nothing reads it; reading it is an error.
  if (c.node.output_size() > 1 && !c.node.output(1).empty()) {
    c.outputs.resize(2);
    c.outputs[1].pending = Pending::DropoutMask;
  }
}

//===----------------------------------------------------------------------===//
// Linear algebra
//===----------------------------------------------------------------------===//

/// A matmul of operands of rank >= 1 (rank-1 operands are made matrices and the result
/// squeezed, as numpy.matmul does).
Value matmul(GraphBuilder &graph, Value a, Value b, bool transposeA = false,
             bool transposeB = false) {
  std::vector<int64_t> shapeA = GraphBuilder::shapeOf(a), shapeB = GraphBuilder::shapeOf(b);
  if (shapeA.empty() || shapeB.empty())
    throw ImportError("MatMul of a scalar");
  const bool vectorA = shapeA.size() == 1, vectorB = shapeB.size() == 1;
  if (vectorA)
    a = graph.reshape(a, {1, shapeA[0]});
  if (vectorB)
    b = graph.reshape(b, {shapeB[0], 1});
  OpBuilder &builder = graph.builder;
  Value product =
      graph.create<graph::MatmulOp>(a, b, transposeA ? builder.getUnitAttr() : nullptr,
                                    transposeB ? builder.getUnitAttr() : nullptr, nullptr);
  std::vector<int64_t> shape = GraphBuilder::shapeOf(product);
  if (vectorA)
    shape.erase(shape.end() - 2);
  if (vectorB)
    shape.pop_back();
  return graph.reshape(product, shape);
}

void convertMatMul(const NodeContext &c) {
  Type element = c.floatElement();
  c.result(matmul(c.graph, c.tensor(0, element), c.tensor(1, element)));
}

void convertGemm(const NodeContext &c) {
  Type element = c.floatElement();
  const double alpha = floatAttribute(c.node, "alpha", 1.0),
               beta = floatAttribute(c.node, "beta", 1.0);
  Value y = matmul(c.graph, c.tensor(0, element), c.tensor(1, element),
                   intAttribute(c.node, "transA", 0), intAttribute(c.node, "transB", 0));
  if (alpha != 1)
    y = c.graph.create<graph::MulOp>(y, c.graph.scalar(alpha, element));
  if (c.has(2)) {
    Value bias = c.tensor(2, element);
    if (beta != 1)
      bias = c.graph.create<graph::MulOp>(bias, c.graph.scalar(beta, element));
    y = c.graph.create<graph::AddOp>(y, bias);
  }
  c.result(y);
}

//===----------------------------------------------------------------------===//
// Data movement
//===----------------------------------------------------------------------===//

void convertReshape(const NodeContext &c) {
  Value x = c.tensor(0);
  c.result(c.graph.reshape(x, reshapeTarget(GraphBuilder::shapeOf(x),
                                            c.constantInput(1, "target shape").integers(),
                                            intAttribute(c.node, "allowzero", 0))));
}

void convertSqueezeLike(const NodeContext &c) {
  const std::string &op = c.node.op_type();
  Value x = c.tensor(0);
  std::vector<int64_t> shape = GraphBuilder::shapeOf(x);
  if (op == "Flatten") {
    const int64_t axis = normalizeAxis(intAttribute(c.node, "axis", 1), shape.size() + 1);
    int64_t outer = 1, inner = 1;
    for (size_t d = 0; d < shape.size(); ++d)
      (static_cast<int64_t>(d) < axis ? outer : inner) *= shape[d];
    return c.result(c.graph.reshape(x, {outer, inner}));
  }
  std::vector<int64_t> axes = c.opset >= 13 && c.has(1) ? c.constantInput(1, "axes").integers()
                                                        : intsAttribute(c.node, "axes");
  c.result(c.graph.reshape(x, op == "Unsqueeze" ? unsqueezeShape(shape, axes)
                                                : squeezeShape(shape, axes)));
}

void convertTranspose(const NodeContext &c) {
  Value x = c.tensor(0);
  std::vector<int64_t> permutation = intsAttribute(c.node, "perm");
  if (permutation.empty())
    for (int64_t d = GraphBuilder::tensorType(x).getRank() - 1; d >= 0; --d)
      permutation.push_back(d);
  c.result(c.graph.transpose(x, permutation));
}

void convertSlice(const NodeContext &c) {
  Value x = c.tensor(0);
  std::vector<int64_t> starts, ends, axes, steps;
  if (c.opset >= 10) {
    starts = c.constantInput(1, "starts").integers();
    ends = c.constantInput(2, "ends").integers();
    if (c.has(3))
      axes = c.constantInput(3, "axes").integers();
    if (c.has(4))
      steps = c.constantInput(4, "steps").integers();
  } else {
    starts = intsAttribute(c.node, "starts");
    ends = intsAttribute(c.node, "ends");
    axes = intsAttribute(c.node, "axes");
  }
  std::vector<int64_t> begin, sizes;
  for (const SliceRange &range : sliceRanges(GraphBuilder::shapeOf(x), starts, ends, axes, steps)) {
    if (range.step != 1 && range.size > 1)
      throw ImportError("Slice with step " + std::to_string(range.step) +
                        " (ampc slices with step 1)");
    begin.push_back(range.start);
    sizes.push_back(range.size);
  }
  c.result(c.graph.slice(x, begin, sizes));
}

void convertSplit(const NodeContext &c) {
  Value x = c.tensor(0);
  std::vector<int64_t> shape = GraphBuilder::shapeOf(x);
  const int64_t axis = normalizeAxis(intAttribute(c.node, "axis", 0), shape.size());
  std::vector<int64_t> given =
      c.has(1) ? c.constantInput(1, "split sizes").integers() : intsAttribute(c.node, "split");
  const int64_t pieces = intAttribute(c.node, "num_outputs", c.node.output_size());
  std::vector<int64_t> sizes = splitSizes(shape[axis], given, pieces);
  if (static_cast<int>(sizes.size()) != c.node.output_size())
    throw ImportError("Split into " + std::to_string(sizes.size()) + " pieces for " +
                      std::to_string(c.node.output_size()) + " outputs");
  std::vector<Type> types;
  for (int64_t size : sizes) {
    shape[axis] = size;
    types.push_back(RankedTensorType::get(shape, GraphBuilder::tensorType(x).getElementType()));
  }
  auto split = c.graph.builder.create<graph::SplitOp>(c.graph.loc, types, x,
                                                      c.graph.builder.getI64IntegerAttr(axis),
                                                      c.graph.builder.getDenseI64ArrayAttr(sizes));
  for (size_t i = 0; i < sizes.size(); ++i)
    c.result(split.getResult(i), i);
}

void convertConcat(const NodeContext &c) {
  Type element;
  for (ImportedValue *value : c.inputs)
    if (value && !value->isConstant())
      element = GraphBuilder::tensorType(c.graph.tensor(*value)).getElementType();
  std::vector<Value> pieces;
  int64_t rank = 0;
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    // Empty pieces (torch exports them for zero-length caches) add nothing.
    if (c.has(i) && GraphBuilder::shapeOf(c.input(i)) != std::vector<int64_t>{0}) {
      pieces.push_back(c.tensor(i, element));
      rank = GraphBuilder::tensorType(pieces.back()).getRank();
    }
  }
  const int64_t axis = normalizeAxis(intAttribute(c.node, "axis", 0), rank);
  if (pieces.size() == 1)
    return c.result(pieces[0]);
  c.result(c.graph.create<graph::ConcatOp>(pieces, c.graph.builder.getI64IntegerAttr(axis)));
}

void convertExpand(const NodeContext &c) {
  Value x = c.tensor(0);
  c.result(c.graph.broadcast(
      x, broadcastShapes(GraphBuilder::shapeOf(x), c.constantInput(1, "shape").integers())));
}

void convertGather(const NodeContext &c) {
  ImportedValue &data = c.input(0), &indices = c.input(1);
  std::vector<int64_t> shape = GraphBuilder::shapeOf(data);
  const int64_t rank = shape.size();
  const int64_t axis = normalizeAxis(intAttribute(c.node, "axis", 0), rank);
  if (indices.isConstant()) {
    // Constant indices: one slice when they are consecutive (positions 0..T-1), else slices of
    // the data joined; then reshaped to the gathered shape.
    Value x = c.tensor(0);
    std::vector<int64_t> picked = indices.constant->integers();
    for (int64_t &index : picked)
      if (index < 0)
        index += shape[axis];
    bool consecutive = !picked.empty();
    for (size_t i = 1; i < picked.size(); ++i)
      consecutive &= picked[i] == picked[i - 1] + 1;
    if (consecutive && picked[0] >= 0 && picked.back() < shape[axis]) {
      std::vector<int64_t> starts(rank, 0), sizes = shape;
      starts[axis] = picked[0];
      sizes[axis] = picked.size();
      std::vector<int64_t> result(shape.begin(), shape.begin() + axis);
      result.insert(result.end(), indices.constant->shape.begin(), indices.constant->shape.end());
      result.insert(result.end(), shape.begin() + axis + 1, shape.end());
      return c.result(c.graph.reshape(c.graph.slice(x, starts, sizes), result));
    }
    std::vector<Value> pieces;
    std::vector<int64_t> starts(rank, 0), sizes = shape;
    sizes[axis] = 1;
    for (int64_t index : indices.constant->integers()) {
      if (index < 0)
        index += shape[axis];
      if (index < 0 || index >= shape[axis])
        throw ImportError("gather index out of range");
      starts[axis] = index;
      pieces.push_back(c.graph.slice(x, starts, sizes));
    }
    Value joined =
        pieces.size() == 1
            ? pieces[0]
            : c.graph.create<graph::ConcatOp>(pieces, c.graph.builder.getI64IntegerAttr(axis));
    std::vector<int64_t> result(shape.begin(), shape.begin() + axis);
    result.insert(result.end(), indices.constant->shape.begin(), indices.constant->shape.end());
    result.insert(result.end(), shape.begin() + axis + 1, shape.end());
    return c.result(c.graph.reshape(joined, result));
  }
  if (axis != 0 || rank > 2)
    throw ImportError("Gather by computed indices is imported along axis 0 of a table of rank 1 "
                      "or 2 (an embedding lookup)");
  Value table = c.tensor(0, c.floatElement());
  if (rank == 1)
    table = c.graph.reshape(table, {shape[0], 1});
  Value rows = c.graph.create<graph::EmbeddingOp>(table, c.tensor(1));
  if (rank == 1)
    rows = c.graph.reshape(rows, GraphBuilder::shapeOf(indices));
  c.result(rows);
}

//===----------------------------------------------------------------------===//
// Reductions, normalisation, softmax, losses
//===----------------------------------------------------------------------===//

template <typename Op> void convertReduce(const NodeContext &c) {
  Value x = c.tensor(0, c.floatElement());
  const int64_t rank = GraphBuilder::tensorType(x).getRank();
  std::vector<int64_t> axes = intsAttribute(c.node, "axes");
  if (c.has(1))
    axes = c.constantInput(1, "axes").integers();
  if (axes.empty()) {
    if (intAttribute(c.node, "noop_with_empty_axes", 0))
      return c.result(x);
    axes.resize(rank);
    std::iota(axes.begin(), axes.end(), 0);
  }
  axes = canonicalAxes(std::move(axes), rank);
  const bool keep = intAttribute(c.node, "keepdims", 1);
  c.result(c.graph.create<Op>(x, c.graph.builder.getDenseI64ArrayAttr(axes),
                              keep ? c.graph.builder.getUnitAttr() : nullptr));
}

/// Moves \p axis of \p x last (for ops the dialect defines over the last axis); returns the
/// permutation used, empty when none was needed.
std::vector<int64_t> moveLast(GraphBuilder &graph, Value &x, int64_t axis) {
  const int64_t rank = GraphBuilder::tensorType(x).getRank();
  if (axis == rank - 1)
    return {};
  std::vector<int64_t> permutation;
  for (int64_t d = 0; d < rank; ++d)
    if (d != axis)
      permutation.push_back(d);
  permutation.push_back(axis);
  x = graph.transpose(x, permutation);
  return permutation;
}

Value restoreOrder(GraphBuilder &graph, Value x, const std::vector<int64_t> &permutation) {
  if (permutation.empty())
    return x;
  std::vector<int64_t> inverse(permutation.size());
  for (size_t i = 0; i < permutation.size(); ++i)
    inverse[permutation[i]] = i;
  return graph.transpose(x, inverse);
}

int64_t softmaxAxis(const NodeContext &c, int64_t rank) {
  const int64_t axis = normalizeAxis(intAttribute(c.node, "axis", c.opset >= 13 ? -1 : 1), rank);
  if (c.opset < 13 && axis != rank - 1)
    throw ImportError("Softmax before opset 13 over axis " + std::to_string(axis) +
                      " flattens the trailing axes; export with opset 13 or newer");
  return axis;
}

void convertSoftmax(const NodeContext &c) {
  Value x = c.tensor(0);
  const int64_t axis = softmaxAxis(c, GraphBuilder::tensorType(x).getRank());
  std::vector<int64_t> permutation = moveLast(c.graph, x, axis);
  Value y = c.graph.create<graph::SoftmaxOp>(x, nullptr);
  c.result(restoreOrder(c.graph, y, permutation));
}

void convertLogSoftmax(const NodeContext &c) {
  Value x = c.tensor(0);
  const int64_t axis = softmaxAxis(c, GraphBuilder::tensorType(x).getRank());
  if (axis != GraphBuilder::tensorType(x).getRank() - 1) {
    // Built now: the cross-entropy pattern wants classes last.
    std::vector<int64_t> permutation = moveLast(c.graph, x, axis);
    ImportedValue pending;
    pending.pending = Pending::LogSoftmax;
    pending.pendingInput = x;
    return c.result(restoreOrder(c.graph, c.graph.tensor(pending), permutation));
  }
  c.pending(Pending::LogSoftmax, x);
}

void convertLayerNormalization(const NodeContext &c) {
  Type element = c.floatElement();
  Value x = c.tensor(0, element);
  const int64_t rank = GraphBuilder::tensorType(x).getRank();
  if (normalizeAxis(intAttribute(c.node, "axis", -1), rank) != rank - 1)
    throw ImportError("LayerNormalization over more than the last axis");
  for (int i = 1; i < c.node.output_size(); ++i)
    if (!c.node.output(i).empty())
      throw ImportError("LayerNormalization's mean and inverse standard deviation outputs are "
                        "not supported");
  Value gamma = c.tensor(1, element);
  Value beta;
  if (c.has(2)) {
    beta = c.tensor(2, element);
  } else {
    HostTensor zeros;
    zeros.shape = {GraphBuilder::shapeOf(x).back()};
    zeros.values.assign(zeros.shape[0], 0.0);
    beta = c.graph.constant(zeros, element);
  }
  c.result(c.graph.create<graph::LayerNormOp>(
      x, gamma, beta, c.graph.builder.getF64FloatAttr(floatAttribute(c.node, "epsilon", 1e-5))));
}

/// SoftmaxCrossEntropyLoss(scores, labels) and NegativeLogLikelihoodLoss(LogSoftmax(scores),
/// labels): graph.cross_entropy of the scores with classes moved last.
void crossEntropy(const NodeContext &c, Value scores) {
  if (c.has(2))
    throw ImportError("class weights are not supported");
  for (int i = 1; i < c.node.output_size(); ++i)
    if (!c.node.output(i).empty())
      throw ImportError("the log-probability output is not supported");
  const std::string reduction = stringAttribute(c.node, "reduction", "mean");
  if (reduction != "mean" && reduction != "sum")
    throw ImportError("reduction '" + reduction + "' (ampc's losses are scalars: mean or sum)");
  const int64_t rank = GraphBuilder::tensorType(scores).getRank();
  if (rank < 2)
    throw ImportError("scores of rank " + std::to_string(rank) + " (expected [N, C, ...])");
  moveLast(c.graph, scores, 1);
  Value labels = c.tensor(1);
  if (!llvm::isa<IntegerType>(GraphBuilder::tensorType(labels).getElementType()))
    throw ImportError("labels must be integers");
  auto kind = reduction == "sum" ? graph::LossReduction::sum : graph::LossReduction::mean;
  c.result(c.graph.create<graph::CrossEntropyOp>(
      scores, labels, c.graph.builder.getI64IntegerAttr(intAttribute(c.node, "ignore_index", -100)),
      graph::LossReductionAttr::get(c.graph.builder.getContext(), kind)));
}

void convertSoftmaxCrossEntropyLoss(const NodeContext &c) {
  crossEntropy(c, c.tensor(0, c.floatElement()));
}

void convertNegativeLogLikelihoodLoss(const NodeContext &c) {
  ImportedValue &input = c.input(0);
  if (input.pending == Pending::LogSoftmax)
    return crossEntropy(c, input.pendingInput);
  // A LogSoftmax over axis 1 of [N, C, d...] was built with classes moved back; look through it.
  throw ImportError("NegativeLogLikelihoodLoss is imported when its input is a LogSoftmax over "
                    "the class axis (log_softmax followed by nll_loss, i.e. cross-entropy)");
}

/// Shape(x) and Size(x) of a value computed from the inputs: its static shape.
void convertShape(const NodeContext &c) {
  std::vector<int64_t> shape = GraphBuilder::shapeOf(c.input(0));
  HostTensor result;
  result.dtype = onnx::TensorProto::INT64;
  if (c.node.op_type() == "Size") {
    result.values = {static_cast<double>(
        std::accumulate(shape.begin(), shape.end(), int64_t(1), std::multiplies<int64_t>()))};
  } else {
    const int64_t rank = shape.size();
    int64_t start = intAttribute(c.node, "start", 0), end = intAttribute(c.node, "end", rank);
    start = std::clamp<int64_t>(start < 0 ? start + rank : start, 0, rank);
    end = std::clamp<int64_t>(end < 0 ? end + rank : end, 0, rank);
    for (int64_t d = start; d < end; ++d)
      result.values.push_back(shape[d]);
    result.shape = {static_cast<int64_t>(result.values.size())};
  }
  c.outputs.resize(1);
  c.outputs[0].constant = result;
}

/// Every converter: this file's, then the image operators'.
std::map<std::string, Converter> makeConverters() {
  std::map<std::string, Converter> table = {
      {"Add", convertAdd},
      {"Sub", binary<graph::SubOp>},
      {"Mul", convertMul},
      {"Div", convertDiv},
      {"Pow", convertPow},
      {"Sqrt", [](const NodeContext &c) { c.result(c.graph.create<graph::SqrtOp>(c.tensor(0))); }},
      {"Neg", [](const NodeContext &c) { c.result(c.graph.create<graph::NegOp>(c.tensor(0))); }},
      {"Tanh", [](const NodeContext &c) { c.result(c.graph.create<graph::TanhOp>(c.tensor(0))); }},
      {"Relu", [](const NodeContext &c) { c.result(c.graph.create<graph::ReluOp>(c.tensor(0))); }},
      {"HardSwish",
       [](const NodeContext &c) { c.result(c.graph.create<graph::HardswishOp>(c.tensor(0))); }},
      {"HardSigmoid", convertHardSigmoid},
      {"Softplus",
       [](const NodeContext &c) { c.result(c.graph.create<graph::SoftplusOp>(c.tensor(0))); }},
      {"Exp", [](const NodeContext &c) { c.result(c.graph.create<graph::ExpOp>(c.tensor(0))); }},
      {"Log", [](const NodeContext &c) { c.result(c.graph.create<graph::LogOp>(c.tensor(0))); }},
      {"Reciprocal", convertReciprocal},
      {"Erf", convertErf},
      {"Sigmoid", [](const NodeContext &c) { c.pending(Pending::Sigmoid, c.tensor(0)); }},
      {"Gelu",
       [](const NodeContext &c) {
         auto kind = stringAttribute(c.node, "approximate", "none") == "tanh"
                         ? graph::GeluApproximation::tanh
                         : graph::GeluApproximation::erf;
         c.result(c.graph.create<graph::GeluOp>(
             graph::GeluApproximationAttr::get(c.graph.builder.getContext(), kind), c.tensor(0)));
       }},
      {"Identity", [](const NodeContext &c) { c.outputs = {c.input(0)}; }},
      {"Where", convertWhere},
      {"Trilu", convertTrilu},
      {"Abs", convertAbs},
      {"Cast", convertCast},
      {"Dropout", convertDropout},
      {"MatMul", convertMatMul},
      {"Gemm", convertGemm},
      {"Reshape", convertReshape},
      {"Squeeze", convertSqueezeLike},
      {"Unsqueeze", convertSqueezeLike},
      {"Flatten", convertSqueezeLike},
      {"Transpose", convertTranspose},
      {"Slice", convertSlice},
      {"Split", convertSplit},
      {"Concat", convertConcat},
      {"Expand", convertExpand},
      {"Gather", convertGather},
      {"ReduceMean", convertReduce<graph::MeanOp>},
      {"ReduceSum", convertReduce<graph::SumOp>},
      {"ReduceMax", convertReduce<graph::MaxOp>},
      {"Softmax", convertSoftmax},
      {"LogSoftmax", convertLogSoftmax},
      {"LayerNormalization", convertLayerNormalization},
      {"SoftmaxCrossEntropyLoss", convertSoftmaxCrossEntropyLoss},
      {"NegativeLogLikelihoodLoss", convertNegativeLogLikelihoodLoss},
      {"Shape", convertShape},
      {"Size", convertShape},
  };
  addImageConverters(table); // OpTableImages.cpp
  return table;
}

const std::map<std::string, Converter> &converters() {
  static const std::map<std::string, Converter> table = makeConverters();
  return table;
}

} // namespace

bool isImportedOp(const std::string &opType) { return converters().count(opType); }

void convertNode(GraphBuilder &graph, const onnx::NodeProto &node,
                 const std::vector<ImportedValue *> &inputs, std::vector<ImportedValue> &outputs,
                 int64_t opset) {
  auto converter = converters().find(node.op_type());
  if (!node.domain().empty() && node.domain() != "ai.onnx")
    throw ImportError("operators of domain '" + node.domain() + "' are not supported");
  if (converter == converters().end())
    throw ImportError("unsupported operator " + node.op_type() +
                      " on values computed from the model's inputs or parameters");
  NodeContext context{graph, node, inputs, outputs, opset};
  converter->second(context);
}

} // namespace ampc::onnximport
