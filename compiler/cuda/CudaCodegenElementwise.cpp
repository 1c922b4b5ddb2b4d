//===- CudaCodegenElementwise.cpp - Elementwise and copy kernels ----------===//
//
// The loop skeletons of the elementwise, accumulate and embedding groups (one iteration space
// around the element evaluator, vectorised where it can be) and of the copy groups (gathers
// through transpose, slice, pad, concat, split, broadcast and reshape).
//
//===----------------------------------------------------------------------===//

#include "compiler/cuda/KernelGenerator.h"

#include <algorithm>
#include <sstream>
#include <stdexcept>

using namespace mlir;
using namespace ampc::graph;

namespace ampc {
namespace cudagen {

//===----------------------------------------------------------------------===//
// Elementwise and accumulate: one iteration space
//===----------------------------------------------------------------------===//

/// Emits the kernel of an elementwise, accumulate or embedding group: one grid-stride loop over
/// the group's iteration space in which every output (and every gradient accumulator) is
/// computed at index i from the inputs at i, in f32. When every operand is a dense float
/// tensor of the space's size, a vectorised loop over 16-byte packs runs first and a scalar
/// loop takes the remainder. The header's math is chosen here from `kind`.
void Generator::elementwiseKernel(const std::string &kind, const std::string &) {
  // The iteration space: the largest value of the group. An accumulate has no SSA result (it
  // updates state), so its gradient's shape counts too; everything smaller is a broadcast
  // operand, read by its broadcast strides.
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
      // acc[i] += g[i], or acc[i] += g[i] / scale under loss scaling. In the vectorised loop the
      // accumulator is read-modify-written through its pack pa_<acc>, element k.
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
  // (Emitting registers the kernel's parameters as a side effect, so the vectorised body emitted
  // later reuses the same arguments.)
  Scope scalar;
  scalar.indent = "    ";
  emitBody(writer, scalar);
  // The accumulators (f32 state bound by name) and, for an unscaling accumulate, the scaler's
  // current scale and its non-finite flag.
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
  // Dropout masks are keyed by (seed, step, stream, element), as on the CPU backend.
  if (writer.usesRandom) {
    writer.runScalar("seed");
    writer.runScalar("step");
  }
  writer.scalarParam("n", "i64", "elements");

  // 16-byte accesses when every operand is read element for element.
  // Only element-for-element float operands can be packed: a smaller (broadcast) operand, an
  // integer operand (embedding ids) or a read at another index (recorded by the scalar pass)
  // keeps the scalar loop. The width is 16 bytes over the widest element: 4 with any f32
  // operand, 8 for bf16/f16 only. Pack p starts at byte 16 * p of a 256-byte-aligned arena slice,
  // so the packed accesses are aligned.
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
  // The scale is read once per thread; nonFinite collects this thread's verdict over its elements.
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
    // Pack loads of the inputs the vector body reads, uninitialised output packs, and the
    // accumulator packs (read-modify-write); the unrolled loop then works on element k of each.
    body << "  // Vectorised loop: " << width << " elements per thread and operand, each operand "
         << "read or\n  // written as one access of " << width << " x its element size (16 bytes "
         << "for the widest);\n  // the tail below takes the n % " << width << " left.\n"
         << "  const long long packs = n / " << width << ";\n"
         << "  for (long long p = first; p < packs; p += stride) {\n";
    for (const KernelParam &param : writer.params) {
      std::string pack = "Pack<" + elementC(param.elementType) + ", " + std::to_string(width) + ">";
      if (param.role == Role::Input && vector.packsRead.count(param.name))
        body << "    const " << pack << " pk_" << param.name << " = reinterpret_cast<const " << pack
             << " *>(" << param.name << ")[p];\n";
      else if (param.role == Role::Output)
        body << "    " << pack << " po_" << param.name << ";\n";
      else if (param.role == Role::State && !param.shape.empty())
        body << "    " << pack << " pa_" << param.name << " = reinterpret_cast<" << pack << " *>("
             << param.name << ")[p];\n";
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
    // The scalar loop resumes after the last whole pack: the n % width elements left.
    tailStart = "packs * " + std::to_string(width) + " + first";
  }
  body << (vectorise ? "  // Scalar tail.\n" : "  // Grid-stride loop over the elements.\n")
       << "  for (long long i = " << tailStart << "; i < n; i += stride) {\n"
       << scalar.text.str() << "  }\n";
  // __syncthreads_or reduces the threads' flags over the block, so one thread per block writes
  // the flag. Every thread reaches it (it follows the loops), as the barrier requires.
  if (!foundPtr.empty())
    body << raiseNonFiniteFlag(foundPtr);

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
          std::string(accumulators.empty() ? "" : ", read-modify-writes the f32 accumulator") + ".";
  KernelLaunch launch;
  launch.space = KernelLaunch::Space::Elements;
  launch.elements = count;
  launch.vectorWidth = vectorise ? width : 1;
  std::string stem;
  for (Operation *op : group->ops) {
    // The kernel's name lists the computing ops (reshape and broadcast only re-index), each once,
    // stopping past about 40 characters; the hash suffix keeps names distinct.
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

namespace {

/// Emits statements declaring `name` (of C type `type`) as element `index` of `value`, walking
/// the data-movement ops of the group back to an external value; values keep their bits.
///
/// The walk goes from an output back through each data-movement op, rewriting the flat index
/// in the op's output into the flat index in its input (compiled-in constants); the first
/// value from outside the group is loaded raw, so no conversion ever happens.
///
/// With \p width > 1, `name` is a Pack<type, width> and receives elements index .. index +
/// width - 1, which packable() has shown to be consecutive in the external value: one 16-byte
/// load.
void gatherElement(KernelWriter &writer, Value value, const std::string &index,
                   const std::string &name, const std::string &type, Scope &scope,
                   int64_t width = 1) {
  Operation *op = value.getDefiningOp();
  if (!writer.inGroup(op)) {
    if (width > 1)
      scope.line(name + " = *reinterpret_cast<const Pack<" + type + ", " + std::to_string(width) +
                 "> *>(&" + writer.rawLoad(value, index) + ");");
    else
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
  // The row-major flat index of coordinates `c` in `shape` (the inverse of `coordinates`).
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
  // A reshape keeps the row-major order: same flat index. A broadcast maps to the input's index
  // by dropping the coordinates of broadcast dimensions.
  if (auto reshape = llvm::dyn_cast<ReshapeOp>(op))
    return gatherElement(writer, reshape.getInput(), index, name, type, scope, width);
  if (auto broadcast = llvm::dyn_cast<BroadcastOp>(op))
    return gatherElement(writer, broadcast.getInput(),
                         broadcastIndex(index, shapeOf(broadcast.getInput()), out), name, type,
                         scope, width);
  if (auto transpose = llvm::dyn_cast<TransposeOp>(op)) {
    // out[c] = in[c'] with c'[perm[d]] = c[d]
    std::vector<std::string> c = coordinates(stem);
    Shape inShape = shapeOf(transpose.getInput());
    std::vector<std::string> inCoords(c.size());
    for (size_t d = 0; d < c.size(); ++d)
      inCoords[transpose.getPermutation()[d]] = c[d];
    return gatherElement(writer, transpose.getInput(), linear(inCoords, inShape), name, type, scope,
                         width);
  }
  // in[c + starts]: the slice's extent is its result's shape, so no bound check is needed.
  if (auto slice = llvm::dyn_cast<SliceOp>(op)) {
    std::vector<std::string> c = coordinates(stem);
    for (size_t d = 0; d < c.size(); ++d)
      if (slice.getStarts()[d] != 0)
        c[d] = "(" + c[d] + " + " + std::to_string(slice.getStarts()[d]) + "ll)";
    return gatherElement(writer, slice.getInput(), linear(c, shapeOf(slice.getInput())), name, type,
                         scope, width);
  }
  // Piece k of a split is a slice starting at the sum of the earlier pieces' sizes on the axis.
  if (auto split = llvm::dyn_cast<SplitOp>(op)) {
    const unsigned piece = llvm::cast<OpResult>(value).getResultNumber();
    int64_t offset = 0;
    for (unsigned k = 0; k < piece; ++k)
      offset += split.getSizes()[k];
    std::vector<std::string> c = coordinates(stem);
    const int64_t axis = split.getAxis();
    if (offset)
      c[axis] = "(" + c[axis] + " + " + std::to_string(offset) + "ll)";
    return gatherElement(writer, split.getInput(), linear(c, shapeOf(split.getInput())), name, type,
                         scope, width);
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
      return gatherElement(writer, pad.getInput(), linear(c, inShape), name, type, scope, width);
    // Emitted as if/else: the input is only read at coordinates inside it.
    scope.line("if (" + inside + ") {");
    scope.indent += "  ";
    gatherElement(writer, pad.getInput(), linear(c, inShape), name, type, scope, width);
    scope.indent.resize(scope.indent.size() - 2);
    scope.line("} else {");
    scope.line("  " + name + " = fromFloat<" + type + ">(0.0f);");
    scope.line("}");
    return;
  }
  // out[c] = input k at c - offset_k on the axis, where k is the input whose range
  // [offset_k, offset_k + size_k) holds c[axis]: an if / else-if chain, the last input taking
  // the rest without a test.
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
      gatherElement(writer, inputs[k], linear(pc, partShape), name, type, scope, width);
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

/// Whether elements i .. i + width - 1 of \p value, for every i that is a multiple of width,
/// come from consecutive elements of one group-external value starting at a multiple of width,
/// so that a copy can move them as one aligned 16-byte pack: on the way back every shape's
/// innermost dimension is a multiple of width, and no op reorders, offsets or broadcasts the
/// innermost dimension except by whole packs (a pad never qualifies).
bool packable(const KernelWriter &writer, Value value, int64_t width) {
  const Shape out = shapeOf(value);
  if (out.empty() || out.back() % width != 0)
    return false;
  Operation *op = value.getDefiningOp();
  if (!writer.inGroup(op))
    return true;
  const size_t last = out.size() - 1;
  if (auto reshape = llvm::dyn_cast<ReshapeOp>(op))
    return packable(writer, reshape.getInput(), width);
  if (auto broadcast = llvm::dyn_cast<BroadcastOp>(op)) {
    const Shape in = shapeOf(broadcast.getInput());
    return !in.empty() && in.back() == out.back() && packable(writer, broadcast.getInput(), width);
  }
  if (auto transpose = llvm::dyn_cast<TransposeOp>(op))
    return transpose.getPermutation()[last] == static_cast<int64_t>(last) &&
           packable(writer, transpose.getInput(), width);
  if (auto slice = llvm::dyn_cast<SliceOp>(op))
    return slice.getStarts()[last] % width == 0 && packable(writer, slice.getInput(), width);
  if (auto split = llvm::dyn_cast<SplitOp>(op)) {
    if (split.getAxis() == static_cast<int64_t>(last))
      for (int64_t size : split.getSizes())
        if (size % width != 0)
          return false;
    return packable(writer, split.getInput(), width);
  }
  if (auto concat = llvm::dyn_cast<ConcatOp>(op)) {
    for (Value input : concat.getInputs())
      if ((concat.getAxis() == static_cast<int64_t>(last) && shapeOf(input).back() % width != 0) ||
          !packable(writer, input, width))
        return false;
    return true;
  }
  return false;
}

} // namespace

/// Emits the kernel of a copy group (data movement only): one grid-stride loop over the
/// largest output; each output gathers its element `i` through the chain of transposes,
/// slices, pads, concats and broadcasts back to the group's inputs, copying bits unchanged.
void Generator::copyKernel() {
  KernelWriter writer(opIndex, members);
  std::vector<Value> outputs = groupOutputs(writer);
  int64_t space = 0;
  for (Value output : outputs)
    space = std::max(space, numElements(shapeOf(output)));
  // 16-byte packs when every output's element is the same size and each pack of it comes from
  // one pack of an input (a transpose or split that keeps the innermost dimension, as the
  // attention head layouts do): one load and one store per pack instead of one per element.
  int64_t elementBytes = 0;
  bool vectorise = !outputs.empty();
  for (Value output : outputs) {
    const int64_t bytes = elementOf(output).getIntOrFloatBitWidth() / 8;
    vectorise = vectorise && bytes > 0 && (elementBytes == 0 || bytes == elementBytes);
    elementBytes = bytes;
  }
  const int64_t width = vectorise ? 16 / elementBytes : 1;
  for (Value output : outputs)
    vectorise = vectorise && width > 1 && numElements(shapeOf(output)) % width == 0 &&
                packable(writer, output, width);
  std::ostringstream body;
  if (vectorise) {
    body << "  const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;\n"
         << "  for (long long p = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; "
            "p < n / "
         << width << "ll;\n       p += stride) {\n"
         << "    const long long i = p * " << width << "ll;\n";
    for (Value output : outputs) {
      Scope scope;
      scope.indent = "      ";
      const std::string type = cType(elementOf(output));
      const std::string pack = "Pack<" + type + ", " + std::to_string(width) + ">";
      std::string value = writer.temp("v");
      scope.line(pack + " " + value + ";");
      gatherElement(writer, output, "i", value, type, scope, width);
      std::string param = writer.tensorParam(output, Role::Output);
      const int64_t count = numElements(shapeOf(output));
      body << "    if (i < " << count << "ll) {\n"
           << scope.text.str() << "      *reinterpret_cast<" << pack << " *>(&" << param
           << "[i]) = " << value << ";\n    }\n";
    }
    body << "  }\n";
  } else {
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
      // Outputs smaller than the space are guarded: one loop serves outputs of different sizes.
      body << "    if (i < " << count << "ll) {\n"
           << scope.text.str() << "      " << param << "[i] = " << value << ";\n    }\n";
    }
    body << "  }\n";
  }
  writer.scalarParam("n", "i64", "elements");
  KernelLaunch launch;
  launch.elements = space;
  launch.vectorWidth = static_cast<int>(width);
  std::string stem;
  for (Operation *op : group->ops) {
    std::string name = op->getName().stripDialect().str();
    if (name != "reshape" && stem.find(name) == std::string::npos)
      stem += (stem.empty() ? "" : "_") + name;
  }
  finish(writer, "copy", stem,
         std::string("out[i] = the element of the input that the data-movement chain maps to i "
                     "(bits\ncopied unchanged). Memory: one read and one write per output ") +
             (vectorise ? "element, in 16-byte packs." : "element."),
         body.str(), launch);
}

} // namespace cudagen
} // namespace ampc
