//===- ShapeFolding.cpp - evaluate ONNX nodes on import-time constants ---===//
//
// Straightforward reference semantics of the ONNX operators, on small host tensors held as
// double. Elementwise ops broadcast; results keep ONNX's result types (Equal gives BOOL, Shape
// INT64, Cast the requested type, float results rounded to float32 when the type is FLOAT).
//
//===----------------------------------------------------------------------===//

#include "compiler/onnx/ShapeFolding.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>

namespace ampc::onnximport {

namespace {

std::string shapeText(const std::vector<int64_t> &shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + "]";
}

std::vector<int64_t> stridesOf(const std::vector<int64_t> &shape) {
  std::vector<int64_t> strides(shape.size(), 1);
  for (int64_t i = static_cast<int64_t>(shape.size()) - 2; i >= 0; --i)
    strides[i] = strides[i + 1] * shape[i + 1];
  return strides;
}

/// Element \p index (row-major in \p shape) of \p tensor broadcast to \p shape.
double broadcastAt(const HostTensor &tensor, const std::vector<int64_t> &shape, int64_t index) {
  if (tensor.values.size() == 1)
    return tensor.values[0];
  const size_t offset = shape.size() - tensor.shape.size();
  int64_t source = 0, stride = 1;
  for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
    const int64_t coordinate = index % shape[d];
    index /= shape[d];
    if (d >= static_cast<int64_t>(offset)) {
      const int64_t extent = tensor.shape[d - offset];
      source += (extent == 1 ? 0 : coordinate) * stride;
      stride *= extent;
    }
  }
  return tensor.values[source];
}

/// Rounds values to the precision of \p dtype (float32 for FLOAT, integers truncated).
void roundTo(HostTensor &tensor) {
  for (double &value : tensor.values) {
    if (tensor.dtype == onnx::TensorProto::FLOAT)
      value = static_cast<float>(value);
    else if (tensor.dtype == onnx::TensorProto::BOOL)
      value = value != 0;
    else if (!tensor.isFloat() && std::isfinite(value))
      value = std::trunc(value);
  }
}

/// Import-time constants are masks, shapes and ids: a larger one means a malformed file.
constexpr int64_t kMaxFoldedElements = int64_t(1) << 26;

void checkFoldedSize(const std::vector<int64_t> &shape) {
  int64_t count = 1;
  for (int64_t dim : shape) {
    if (dim < 0 || (dim && count > kMaxFoldedElements / dim))
      throw ImportError("an import-time constant of shape " + shapeText(shape) +
                        " is too large (at most 2^26 elements)");
    count *= dim;
  }
}

HostTensor elementwise(const std::vector<const HostTensor *> &operands, int32_t dtype,
                       const std::function<double(const std::vector<double> &)> &f) {
  std::vector<int64_t> shape = operands[0]->shape;
  for (size_t i = 1; i < operands.size(); ++i)
    shape = broadcastShapes(shape, operands[i]->shape);
  checkFoldedSize(shape);
  HostTensor result;
  result.dtype = dtype;
  result.shape = shape;
  result.values.resize(result.numElements());
  std::vector<double> arguments(operands.size());
  for (int64_t e = 0; e < result.numElements(); ++e) {
    for (size_t i = 0; i < operands.size(); ++i)
      arguments[i] = broadcastAt(*operands[i], shape, e);
    result.values[e] = f(arguments);
  }
  roundTo(result);
  return result;
}

HostTensor withShape(const HostTensor &tensor, std::vector<int64_t> shape) {
  HostTensor result = tensor;
  result.shape = std::move(shape);
  return result;
}

HostTensor int64Vector(const std::vector<int64_t> &values) {
  HostTensor result;
  result.dtype = onnx::TensorProto::INT64;
  result.shape = {static_cast<int64_t>(values.size())};
  result.values.assign(values.begin(), values.end());
  return result;
}

/// Transposes \p tensor by \p permutation.
HostTensor transpose(const HostTensor &tensor, const std::vector<int64_t> &permutation) {
  HostTensor result;
  result.dtype = tensor.dtype;
  for (int64_t axis : permutation)
    result.shape.push_back(tensor.shape[axis]);
  result.values.resize(tensor.values.size());
  const std::vector<int64_t> sourceStrides = stridesOf(tensor.shape);
  for (int64_t e = 0; e < result.numElements(); ++e) {
    int64_t rest = e, source = 0;
    for (int64_t d = static_cast<int64_t>(result.shape.size()) - 1; d >= 0; --d) {
      source += (rest % result.shape[d]) * sourceStrides[permutation[d]];
      rest /= result.shape[d];
    }
    result.values[e] = tensor.values[source];
  }
  return result;
}

/// The elements of \p tensor in the box \p ranges.
HostTensor slice(const HostTensor &tensor, const std::vector<SliceRange> &ranges) {
  HostTensor result;
  result.dtype = tensor.dtype;
  for (const SliceRange &range : ranges)
    result.shape.push_back(range.size);
  result.values.resize(result.numElements());
  const std::vector<int64_t> strides = stridesOf(tensor.shape);
  for (int64_t e = 0; e < result.numElements(); ++e) {
    int64_t rest = e, source = 0;
    for (int64_t d = static_cast<int64_t>(result.shape.size()) - 1; d >= 0; --d) {
      source += (ranges[d].start + (rest % result.shape[d]) * ranges[d].step) * strides[d];
      rest /= result.shape[d];
    }
    result.values[e] = tensor.values[source];
  }
  return result;
}

/// Reduction axes from the `axes` attribute or (newer opsets) the second input.
std::vector<int64_t> reduceAxes(const onnx::NodeProto &node,
                                const std::vector<const HostTensor *> &inputs, int64_t rank) {
  std::vector<int64_t> axes = intsAttribute(node, "axes");
  if (inputs.size() > 1 && inputs[1])
    axes = inputs[1]->integers();
  if (axes.empty() && !intAttribute(node, "noop_with_empty_axes", 0)) {
    axes.resize(rank);
    std::iota(axes.begin(), axes.end(), 0);
  }
  return canonicalAxes(std::move(axes), rank);
}

} // namespace

std::vector<int64_t> canonicalAxes(std::vector<int64_t> axes, int64_t rank) {
  for (int64_t &axis : axes)
    axis = normalizeAxis(axis, rank);
  std::sort(axes.begin(), axes.end());
  axes.erase(std::unique(axes.begin(), axes.end()), axes.end());
  return axes;
}

std::vector<int64_t> broadcastShapes(const std::vector<int64_t> &a, const std::vector<int64_t> &b) {
  std::vector<int64_t> result(std::max(a.size(), b.size()));
  for (size_t i = 0; i < result.size(); ++i) {
    const int64_t x = i < a.size() ? a[a.size() - 1 - i] : 1;
    const int64_t y = i < b.size() ? b[b.size() - 1 - i] : 1;
    if (x != y && x != 1 && y != 1)
      throw ImportError("shapes " + shapeText(a) + " and " + shapeText(b) + " do not broadcast");
    result[result.size() - 1 - i] = x == 1 ? y : x;
  }
  return result;
}

int64_t normalizeAxis(int64_t axis, int64_t rank) {
  if (axis < -rank || axis >= rank)
    throw ImportError("axis " + std::to_string(axis) + " is out of range for rank " +
                      std::to_string(rank));
  return axis < 0 ? axis + rank : axis;
}

std::vector<int64_t> reshapeTarget(const std::vector<int64_t> &input,
                                   const std::vector<int64_t> &requested, bool allowZero) {
  std::vector<int64_t> shape = requested;
  // The extents come from the file: a product past int64 is an error, not a wrapped count.
  auto times = [&](int64_t a, int64_t b) {
    int64_t product;
    if (__builtin_mul_overflow(a, b, &product))
      throw ImportError("cannot reshape " + shapeText(input) + " to " + shapeText(requested) +
                        ": an element count overflows 64 bits");
    return product;
  };
  int64_t known = 1, inferred = -1, total = 1;
  for (int64_t dim : input)
    total = times(total, dim);
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == 0 && !allowZero) {
      if (i >= input.size())
        throw ImportError("reshape copies dimension " + std::to_string(i) + " (0) of a rank-" +
                          std::to_string(input.size()) + " input");
      shape[i] = input[i];
    }
    if (shape[i] == -1) {
      if (inferred >= 0)
        throw ImportError("reshape target " + shapeText(requested) + " has two -1 dimensions");
      inferred = i;
    } else if (shape[i] < 0) {
      throw ImportError("reshape target " + shapeText(requested) + " has a negative dimension");
    } else {
      known = times(known, shape[i]);
    }
  }
  if (inferred >= 0) {
    if (known == 0 || total % known)
      throw ImportError("cannot reshape " + shapeText(input) + " to " + shapeText(requested));
    shape[inferred] = total / known;
  }
  int64_t count = 1;
  for (int64_t dim : shape)
    count = times(count, dim);
  if (count != total)
    throw ImportError("cannot reshape " + shapeText(input) + " (" + std::to_string(total) +
                      " elements) to " + shapeText(shape));
  return shape;
}

std::vector<int64_t> unsqueezeShape(const std::vector<int64_t> &input, std::vector<int64_t> axes) {
  const int64_t rank = static_cast<int64_t>(input.size() + axes.size());
  for (int64_t &axis : axes)
    axis = normalizeAxis(axis, rank);
  std::sort(axes.begin(), axes.end());
  std::vector<int64_t> shape;
  size_t next = 0;
  for (int64_t d = 0; d < rank; ++d) {
    if (std::binary_search(axes.begin(), axes.end(), d))
      shape.push_back(1);
    else if (next < input.size())
      shape.push_back(input[next++]);
    else
      throw ImportError("unsqueeze axes repeat");
  }
  return shape;
}

std::vector<int64_t> squeezeShape(const std::vector<int64_t> &input, std::vector<int64_t> axes) {
  const int64_t rank = static_cast<int64_t>(input.size());
  for (int64_t &axis : axes) {
    axis = normalizeAxis(axis, rank);
    if (input[axis] != 1)
      throw ImportError("squeeze of dimension " + std::to_string(axis) + " of " + shapeText(input) +
                        ", which is not 1");
  }
  std::vector<int64_t> shape;
  for (int64_t d = 0; d < rank; ++d) {
    bool squeezed =
        axes.empty() ? input[d] == 1 : std::find(axes.begin(), axes.end(), d) != axes.end();
    if (!squeezed)
      shape.push_back(input[d]);
  }
  return shape;
}

std::vector<SliceRange> sliceRanges(const std::vector<int64_t> &shape,
                                    const std::vector<int64_t> &starts,
                                    const std::vector<int64_t> &ends, std::vector<int64_t> axes,
                                    std::vector<int64_t> steps) {
  const int64_t rank = static_cast<int64_t>(shape.size());
  if (axes.empty()) {
    axes.resize(starts.size());
    std::iota(axes.begin(), axes.end(), 0);
  }
  if (steps.empty())
    steps.assign(starts.size(), 1);
  if (starts.size() != ends.size() || axes.size() != starts.size() || steps.size() != starts.size())
    throw ImportError("slice starts, ends, axes and steps differ in length");
  std::vector<SliceRange> ranges(rank);
  for (int64_t d = 0; d < rank; ++d)
    ranges[d] = {0, shape[d], 1};
  for (size_t i = 0; i < starts.size(); ++i) {
    const int64_t axis = normalizeAxis(axes[i], rank), extent = shape[axis], step = steps[i];
    if (step == 0)
      throw ImportError("slice step 0");
    auto clamp = [&](int64_t value, int64_t low, int64_t high) {
      if (value < 0)
        value = value <= -extent ? -extent : value, value += extent;
      return std::clamp(value, low, high);
    };
    int64_t start, end;
    if (step > 0) {
      start = clamp(starts[i], 0, extent);
      end = clamp(ends[i], 0, extent);
    } else {
      start = clamp(starts[i], 0, extent - 1);
      end = ends[i] < -extent ? -1 : clamp(ends[i], -1, extent - 1);
    }
    int64_t size = step > 0 ? (end - start + step - 1) / step : (start - end - step - 1) / -step;
    ranges[axis] = {start, std::max<int64_t>(size, 0), step};
  }
  return ranges;
}

std::vector<int64_t> splitSizes(int64_t extent, const std::vector<int64_t> &given, int64_t pieces) {
  if (!given.empty()) {
    int64_t total = 0;
    for (int64_t size : given)
      total += size;
    if (total != extent)
      throw ImportError("split sizes add up to " + std::to_string(total) + ", not the axis's " +
                        std::to_string(extent));
    return given;
  }
  if (pieces <= 0)
    throw ImportError("split into " + std::to_string(pieces) + " pieces");
  const int64_t size = (extent + pieces - 1) / pieces;
  std::vector<int64_t> sizes;
  for (int64_t left = extent; left > 0; left -= size)
    sizes.push_back(std::min(size, left));
  if (static_cast<int64_t>(sizes.size()) != pieces)
    throw ImportError("cannot split " + std::to_string(extent) + " into " + std::to_string(pieces) +
                      " pieces");
  return sizes;
}

std::optional<std::vector<HostTensor>> foldNode(const onnx::NodeProto &node,
                                                const std::vector<const HostTensor *> &inputs,
                                                int64_t opset) {
  const std::string &op = node.op_type();
  auto input = [&](size_t i) -> const HostTensor & {
    if (i >= inputs.size() || !inputs[i])
      throw ImportError("input " + std::to_string(i) + " is missing");
    return *inputs[i];
  };
  auto has = [&](size_t i) { return i < inputs.size() && inputs[i]; };
  using Args = const std::vector<double> &;
  auto unary = [&](std::function<double(double)> f) {
    return std::vector<HostTensor>{
        elementwise({&input(0)}, input(0).dtype, [&](Args a) { return f(a[0]); })};
  };
  auto binary = [&](std::function<double(double, double)> f, int32_t dtype) {
    return std::vector<HostTensor>{
        elementwise({&input(0), &input(1)}, dtype, [&](Args a) { return f(a[0], a[1]); })};
  };
  const int32_t BOOL = onnx::TensorProto::BOOL;

  if (op == "Identity")
    return std::vector<HostTensor>{input(0)};
  if (op == "Shape" || op == "Size") {
    const std::vector<int64_t> &shape = input(0).shape;
    HostTensor result;
    result.dtype = onnx::TensorProto::INT64;
    if (op == "Size")
      return std::vector<HostTensor>{
          (result.values = {static_cast<double>(input(0).numElements())}, result)};
    const int64_t rank = shape.size();
    int64_t start = intAttribute(node, "start", 0), end = intAttribute(node, "end", rank);
    start = std::clamp<int64_t>(start < 0 ? start + rank : start, 0, rank);
    end = std::clamp<int64_t>(end < 0 ? end + rank : end, 0, rank);
    for (int64_t d = start; d < end; ++d)
      result.values.push_back(shape[d]);
    result.shape = {static_cast<int64_t>(result.values.size())};
    return std::vector<HostTensor>{result};
  }
  if (op == "Constant") {
    HostTensor result;
    if (const onnx::AttributeProto *value = findAttribute(node, "value")) {
      OnnxFile none;
      if (value->t().data_location() == onnx::TensorProto::EXTERNAL)
        throw ImportError("a Constant with external data");
      return std::vector<HostTensor>{decodeTensor(none, value->t(), "the constant")};
    }
    if (const onnx::AttributeProto *value = findAttribute(node, "value_float")) {
      result.values = {value->f()};
    } else if (const onnx::AttributeProto *value = findAttribute(node, "value_int")) {
      result.dtype = onnx::TensorProto::INT64;
      result.values = {static_cast<double>(value->i())};
    } else if (const onnx::AttributeProto *value = findAttribute(node, "value_floats")) {
      result.values.assign(value->floats().begin(), value->floats().end());
      result.shape = {value->floats_size()};
    } else if (const onnx::AttributeProto *value = findAttribute(node, "value_ints")) {
      result.dtype = onnx::TensorProto::INT64;
      result.values.assign(value->ints().begin(), value->ints().end());
      result.shape = {value->ints_size()};
    } else {
      throw ImportError("a Constant without a value ampc reads (value, value_float, value_int, "
                        "value_floats, value_ints)");
    }
    return std::vector<HostTensor>{result};
  }
  if (op == "Add")
    return binary(std::plus<double>(), input(0).dtype);
  if (op == "Sub")
    return binary(std::minus<double>(), input(0).dtype);
  if (op == "Mul")
    return binary(std::multiplies<double>(), input(0).dtype);
  if (op == "Div") {
    const bool integer = !input(0).isFloat();
    return binary(
        [integer](double a, double b) {
          if (integer && b == 0)
            throw ImportError("integer division by zero");
          return integer ? std::trunc(a / b) : a / b;
        },
        input(0).dtype);
  }
  if (op == "Mod")
    return binary([](double a, double b) { return b == 0 ? 0.0 : a - b * std::floor(a / b); },
                  input(0).dtype);
  if (op == "Pow")
    return binary([](double a, double b) { return std::pow(a, b); }, input(0).dtype);
  if (op == "Min" || op == "Max") {
    HostTensor result = input(0);
    for (size_t i = 1; i < inputs.size(); ++i)
      result = elementwise({&result, &input(i)}, result.dtype, [&](Args a) {
        return op == "Min" ? std::min(a[0], a[1]) : std::max(a[0], a[1]);
      });
    return std::vector<HostTensor>{result};
  }
  if (op == "Equal")
    return binary([](double a, double b) { return double(a == b); }, BOOL);
  if (op == "Less")
    return binary([](double a, double b) { return double(a < b); }, BOOL);
  if (op == "LessOrEqual")
    return binary([](double a, double b) { return double(a <= b); }, BOOL);
  if (op == "Greater")
    return binary([](double a, double b) { return double(a > b); }, BOOL);
  if (op == "GreaterOrEqual")
    return binary([](double a, double b) { return double(a >= b); }, BOOL);
  if (op == "And")
    return binary([](double a, double b) { return double(a && b); }, BOOL);
  if (op == "Or")
    return binary([](double a, double b) { return double(a || b); }, BOOL);
  if (op == "Xor")
    return binary([](double a, double b) { return double((a != 0) != (b != 0)); }, BOOL);
  if (op == "Not")
    return std::vector<HostTensor>{
        elementwise({&input(0)}, BOOL, [](Args a) { return double(a[0] == 0); })};
  if (op == "Neg")
    return unary([](double x) { return -x; });
  if (op == "Abs")
    return unary([](double x) { return std::fabs(x); });
  if (op == "Sqrt")
    return unary([](double x) { return std::sqrt(x); });
  if (op == "Reciprocal")
    return unary([](double x) { return 1 / x; });
  if (op == "Exp")
    return unary([](double x) { return std::exp(x); });
  if (op == "Log")
    return unary([](double x) { return std::log(x); });
  if (op == "Tanh")
    return unary([](double x) { return std::tanh(x); });
  if (op == "Erf")
    return unary([](double x) { return std::erf(x); });
  if (op == "Sin")
    return unary([](double x) { return std::sin(x); });
  if (op == "Cos")
    return unary([](double x) { return std::cos(x); });
  if (op == "MatMul") {
    // Rotary tables and the like: [.., M, K] x [.., K, N] with broadcast batch dimensions, in
    // double; vectors are promoted to matrices as numpy does.
    HostTensor a = input(0), b = input(1);
    const bool vectorA = a.shape.size() == 1, vectorB = b.shape.size() == 1;
    if (vectorA)
      a.shape.insert(a.shape.begin(), 1);
    if (vectorB)
      b.shape.push_back(1);
    if (a.shape.size() < 2 || b.shape.size() < 2 || a.shape.back() != b.shape[b.shape.size() - 2])
      throw ImportError("matmul of " + shapeText(input(0).shape) + " and " +
                        shapeText(input(1).shape));
    const int64_t m = a.shape[a.shape.size() - 2], k = a.shape.back(), n = b.shape.back();
    std::vector<int64_t> batchA(a.shape.begin(), a.shape.end() - 2),
        batchB(b.shape.begin(), b.shape.end() - 2);
    std::vector<int64_t> batch = broadcastShapes(batchA, batchB), shape = batch;
    shape.push_back(m);
    shape.push_back(n);
    checkFoldedSize(shape);
    HostTensor result;
    result.dtype = a.dtype;
    result.shape = shape;
    result.values.assign(result.numElements(), 0.0);
    HostTensor batchIndex;
    batchIndex.shape = batch;
    const int64_t batches = batchIndex.numElements();
    // The offset of batch element e in a tensor of batch shape \p own (broadcast).
    auto offset = [&](const std::vector<int64_t> &own, int64_t e) {
      int64_t source = 0, stride = 1;
      for (int64_t d = static_cast<int64_t>(batch.size()) - 1, rest = e; d >= 0; --d) {
        const int64_t coordinate = rest % batch[d];
        rest /= batch[d];
        const int64_t ownDim = d - static_cast<int64_t>(batch.size() - own.size());
        if (ownDim >= 0) {
          source += (own[ownDim] == 1 ? 0 : coordinate) * stride;
          stride *= own[ownDim];
        }
      }
      return source;
    };
    for (int64_t e = 0; e < batches; ++e) {
      const double *lhs = a.values.data() + offset(batchA, e) * m * k;
      const double *rhs = b.values.data() + offset(batchB, e) * k * n;
      double *out = result.values.data() + e * m * n;
      for (int64_t i = 0; i < m; ++i)
        for (int64_t p = 0; p < k; ++p)
          for (int64_t j = 0; j < n; ++j)
            out[i * n + j] += lhs[i * k + p] * rhs[p * n + j];
    }
    if (vectorA)
      result.shape.erase(result.shape.end() - 2);
    if (vectorB)
      result.shape.pop_back();
    roundTo(result);
    return std::vector<HostTensor>{result};
  }
  if (op == "Sigmoid")
    return unary([](double x) { return 1 / (1 + std::exp(-x)); });
  if (op == "Relu")
    return unary([](double x) { return std::max(x, 0.0); });
  if (op == "Floor")
    return unary([](double x) { return std::floor(x); });
  if (op == "Ceil")
    return unary([](double x) { return std::ceil(x); });
  if (op == "Where")
    return std::vector<HostTensor>{elementwise({&input(0), &input(1), &input(2)}, input(1).dtype,
                                               [](Args a) { return a[0] ? a[1] : a[2]; })};
  if (op == "Cast") {
    HostTensor result = input(0);
    result.dtype = static_cast<int32_t>(intAttribute(node, "to", onnx::TensorProto::FLOAT));
    if (!result.isFloat())
      for (double &value : result.values)
        if (!std::isfinite(value))
          throw ImportError("cast of a non-finite value to " + dtypeName(result.dtype));
    roundTo(result);
    return std::vector<HostTensor>{result};
  }
  if (op == "Reshape") {
    const bool allowZero = intAttribute(node, "allowzero", 0);
    return std::vector<HostTensor>{
        withShape(input(0), reshapeTarget(input(0).shape, input(1).integers(), allowZero))};
  }
  if (op == "Flatten") {
    const int64_t rank = input(0).shape.size();
    const int64_t axis = normalizeAxis(intAttribute(node, "axis", 1), rank + 1);
    int64_t outer = 1;
    for (int64_t d = 0; d < axis; ++d)
      outer *= input(0).shape[d];
    return std::vector<HostTensor>{
        withShape(input(0), {outer, outer ? input(0).numElements() / outer : 0})};
  }
  if (op == "Unsqueeze" || op == "Squeeze") {
    std::vector<int64_t> axes =
        opset >= 13 && has(1) ? input(1).integers() : intsAttribute(node, "axes");
    return std::vector<HostTensor>{withShape(input(0), op == "Unsqueeze"
                                                           ? unsqueezeShape(input(0).shape, axes)
                                                           : squeezeShape(input(0).shape, axes))};
  }
  if (op == "Transpose") {
    std::vector<int64_t> permutation = intsAttribute(node, "perm");
    const int64_t rank = input(0).shape.size();
    if (permutation.empty())
      for (int64_t d = rank - 1; d >= 0; --d)
        permutation.push_back(d);
    std::vector<int64_t> sorted = permutation;
    std::sort(sorted.begin(), sorted.end());
    for (int64_t d = 0; d < static_cast<int64_t>(sorted.size()); ++d)
      if (sorted[d] != d || static_cast<int64_t>(sorted.size()) != rank)
        throw ImportError("transpose permutation is not a permutation of the " +
                          std::to_string(rank) + " dimensions");
    return std::vector<HostTensor>{transpose(input(0), permutation)};
  }
  if (op == "Slice") {
    std::vector<int64_t> starts, ends, axes, steps;
    if (opset >= 10) {
      starts = input(1).integers();
      ends = input(2).integers();
      if (has(3))
        axes = input(3).integers();
      if (has(4))
        steps = input(4).integers();
    } else {
      starts = intsAttribute(node, "starts");
      ends = intsAttribute(node, "ends");
      axes = intsAttribute(node, "axes");
    }
    return std::vector<HostTensor>{
        slice(input(0), sliceRanges(input(0).shape, starts, ends, axes, steps))};
  }
  if (op == "Concat") {
    HostTensor result = input(0);
    const int64_t rank = result.shape.size();
    const int64_t axis = normalizeAxis(intAttribute(node, "axis", 0), rank);
    for (size_t i = 1; i < inputs.size(); ++i) {
      const HostTensor &next = input(i);
      if (static_cast<int64_t>(next.shape.size()) != rank)
        throw ImportError("concat of tensors of different ranks");
      for (int64_t d = 0; d < rank; ++d)
        if (d != axis && next.shape[d] != result.shape[d])
          throw ImportError("concat of " + shapeText(result.shape) + " and " +
                            shapeText(next.shape) + " along axis " + std::to_string(axis));
      // Concatenate block by block: outer = product of dims before axis.
      int64_t outer = 1;
      for (int64_t d = 0; d < axis; ++d)
        outer *= result.shape[d];
      const int64_t a = outer ? result.numElements() / outer : 0;
      const int64_t b = outer ? next.numElements() / outer : 0;
      std::vector<double> values;
      for (int64_t o = 0; o < outer; ++o) {
        values.insert(values.end(), result.values.begin() + o * a,
                      result.values.begin() + (o + 1) * a);
        values.insert(values.end(), next.values.begin() + o * b, next.values.begin() + (o + 1) * b);
      }
      result.values = std::move(values);
      result.shape[axis] += next.shape[axis];
    }
    return std::vector<HostTensor>{result};
  }
  if (op == "Gather") {
    const HostTensor &data = input(0), &indices = input(1);
    const int64_t rank = data.shape.size();
    const int64_t axis = normalizeAxis(intAttribute(node, "axis", 0), rank);
    HostTensor result;
    result.dtype = data.dtype;
    result.shape.assign(data.shape.begin(), data.shape.begin() + axis);
    result.shape.insert(result.shape.end(), indices.shape.begin(), indices.shape.end());
    result.shape.insert(result.shape.end(), data.shape.begin() + axis + 1, data.shape.end());
    int64_t outer = 1, inner = 1;
    for (int64_t d = 0; d < axis; ++d)
      outer *= data.shape[d];
    for (int64_t d = axis + 1; d < rank; ++d)
      inner *= data.shape[d];
    const int64_t extent = data.shape[axis];
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t i = 0; i < indices.numElements(); ++i) {
        int64_t index = indices.integer(i);
        if (index < 0)
          index += extent;
        if (index < 0 || index >= extent)
          throw ImportError("gather index " + std::to_string(indices.integer(i)) +
                            " is out of range for an axis of " + std::to_string(extent));
        for (int64_t k = 0; k < inner; ++k)
          result.values.push_back(data.values[(o * extent + index) * inner + k]);
      }
    return std::vector<HostTensor>{result};
  }
  if (op == "Expand") {
    const std::vector<int64_t> shape = broadcastShapes(input(0).shape, input(1).integers());
    HostTensor ones;
    ones.shape = shape;
    ones.values.assign(ones.numElements(), 0.0);
    return std::vector<HostTensor>{
        elementwise({&input(0), &ones}, input(0).dtype, [](Args a) { return a[0]; })};
  }
  if (op == "Tile") {
    const HostTensor &data = input(0);
    const std::vector<int64_t> repeats = input(1).integers();
    HostTensor result;
    result.dtype = data.dtype;
    for (size_t d = 0; d < data.shape.size(); ++d)
      result.shape.push_back(data.shape[d] * repeats.at(d));
    checkFoldedSize(result.shape);
    result.values.resize(result.numElements());
    const std::vector<int64_t> strides = stridesOf(data.shape);
    for (int64_t e = 0; e < result.numElements(); ++e) {
      int64_t rest = e, source = 0;
      for (int64_t d = static_cast<int64_t>(result.shape.size()) - 1; d >= 0; --d) {
        source += ((rest % result.shape[d]) % data.shape[d]) * strides[d];
        rest /= result.shape[d];
      }
      result.values[e] = data.values[source];
    }
    return std::vector<HostTensor>{result};
  }
  if (op == "Range") {
    const double start = input(0).values.at(0), limit = input(1).values.at(0),
                 delta = input(2).values.at(0);
    if (delta == 0)
      throw ImportError("range with delta 0");
    HostTensor result;
    result.dtype = input(0).dtype;
    const double steps = std::ceil((limit - start) / delta);
    if (!(steps <= static_cast<double>(kMaxFoldedElements)))
      throw ImportError("range of " + std::to_string(steps) + " elements");
    const int64_t count = std::max<int64_t>(0, static_cast<int64_t>(steps));
    if (count > kMaxFoldedElements)
      throw ImportError("range of " + std::to_string(count) + " elements");
    result.shape = {count};
    for (int64_t i = 0; i < count; ++i)
      result.values.push_back(start + i * delta);
    return std::vector<HostTensor>{result};
  }
  if (op == "ConstantOfShape") {
    HostTensor result;
    result.shape = input(0).integers();
    checkFoldedSize(result.shape);
    double value = 0;
    if (const onnx::AttributeProto *attribute = findAttribute(node, "value")) {
      OnnxFile none;
      HostTensor fill = decodeTensor(none, attribute->t(), "the value attribute");
      result.dtype = fill.dtype;
      value = fill.values.at(0);
    }
    result.values.assign(result.numElements(), value);
    return std::vector<HostTensor>{result};
  }
  if (op == "Trilu") {
    HostTensor result = input(0);
    const int64_t k = has(1) ? input(1).integer(0) : 0;
    const bool upper = intAttribute(node, "upper", 1);
    const int64_t rank = result.shape.size();
    if (rank < 2)
      throw ImportError("trilu of a tensor of rank < 2");
    const int64_t rows = result.shape[rank - 2], columns = result.shape[rank - 1];
    for (int64_t e = 0; e < result.numElements(); ++e) {
      const int64_t j = e % columns, i = (e / columns) % rows;
      const bool keep = upper ? j - i >= k : j - i <= k;
      if (!keep)
        result.values[e] = 0;
    }
    return std::vector<HostTensor>{result};
  }
  if (op == "ReduceSum" || op == "ReduceMean" || op == "ReduceMax" || op == "ReduceMin" ||
      op == "ReduceProd") {
    const HostTensor &data = input(0);
    const int64_t rank = data.shape.size();
    // ReduceSum reads axes from its input since opset 13, the others since opset 18.
    std::vector<const HostTensor *> axesInputs = inputs;
    const std::vector<int64_t> axes = reduceAxes(node, axesInputs, rank);
    const bool keep = intAttribute(node, "keepdims", 1);
    HostTensor result;
    result.dtype = data.dtype;
    std::vector<int64_t> kept = data.shape;
    for (int64_t axis : axes)
      kept[axis] = 1;
    for (int64_t d = 0; d < rank; ++d)
      if (keep || !std::binary_search(axes.begin(), axes.end(), d))
        result.shape.push_back(kept[d]);
    const std::vector<int64_t> keptStrides = stridesOf(kept);
    const int64_t outputs =
        std::accumulate(kept.begin(), kept.end(), int64_t(1), std::multiplies<int64_t>());
    std::vector<double> accumulator(outputs, op == "ReduceMax"    ? -INFINITY
                                             : op == "ReduceMin"  ? INFINITY
                                             : op == "ReduceProd" ? 1.0
                                                                  : 0.0);
    for (int64_t e = 0; e < data.numElements(); ++e) {
      int64_t rest = e, target = 0;
      for (int64_t d = rank - 1; d >= 0; --d) {
        const int64_t coordinate = rest % data.shape[d];
        rest /= data.shape[d];
        target += (kept[d] == 1 ? 0 : coordinate) * keptStrides[d];
      }
      double &slot = accumulator[target];
      const double value = data.values[e];
      if (op == "ReduceMax")
        slot = std::max(slot, value);
      else if (op == "ReduceMin")
        slot = std::min(slot, value);
      else if (op == "ReduceProd")
        slot *= value;
      else
        slot += value;
    }
    if (op == "ReduceMean" && outputs)
      for (double &value : accumulator)
        value /= data.numElements() / outputs;
    result.values = std::move(accumulator);
    roundTo(result);
    return std::vector<HostTensor>{result};
  }
  if (op == "Split") {
    const HostTensor &data = input(0);
    const int64_t rank = data.shape.size();
    const int64_t axis = normalizeAxis(intAttribute(node, "axis", 0), rank);
    std::vector<int64_t> given = has(1) ? input(1).integers() : intsAttribute(node, "split");
    const int64_t pieces = intAttribute(node, "num_outputs", node.output_size());
    std::vector<HostTensor> results;
    int64_t start = 0;
    for (int64_t size : splitSizes(data.shape[axis], given, pieces)) {
      std::vector<SliceRange> ranges;
      for (int64_t d = 0; d < rank; ++d)
        ranges.push_back(d == axis ? SliceRange{start, size, 1} : SliceRange{0, data.shape[d], 1});
      results.push_back(slice(data, ranges));
      start += size;
    }
    return results;
  }
  return std::nullopt;
}

} // namespace ampc::onnximport
