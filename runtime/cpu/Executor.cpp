//===- Executor.cpp - The CPU reference backend ---------------------------===//
//
// The executor owns one storage slot per plan buffer: a vector of the compute
// type for float buffers, of int64 for integer ones. Instructions dispatch to
// the kernels in runtime/cpu/*Kernels.cpp; after each one its results are
// rounded to their buffers' dtypes, which is the only place a value is
// rounded to a storage format. A training plan has two instruction lists,
// run separately: the micro step (run) and the optimizer step
// (runOptimizerStep); State buffers persist across both and are updated in
// place. Mixed precision: parameter copies are refreshed whenever their
// source parameter changes; the loss-scaling state lives in four State
// buffers that accumulate, adamw/sgd and update_loss_scale read and write.
//
// The executor is TypedExecutor<T> (TypedExecutor.h) behind Executor's pimpl.
// This file holds its forward instructions and the public Executor methods;
// the training instructions (gradients, optimizers, loss scaling) and the
// optimizer step are in ExecutorTraining.cpp.
//
//===----------------------------------------------------------------------===//

#include "runtime/cpu/Executor.h"
#include "runtime/cpu/Kernels.h"
#include "runtime/cpu/ThreadPool.h"
#include "runtime/cpu/TypedExecutor.h"
#include "runtime/numerics/Float16.h"
#include "runtime/numerics/LossScale.h"
#include "runtime/numerics/Philox.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <map>
#include <type_traits>

namespace ampc::cpu {

namespace detail {

uint32_t nameStream(const std::string &name) { return numerics::fnv1a32(name.data(), name.size()); }

/// Reads a little-endian unsigned integer of \p size bytes.
uint64_t readLittleEndian(const uint8_t *bytes, size_t size) {
  uint64_t value = 0;
  for (size_t i = 0; i < size; ++i)
    value |= static_cast<uint64_t>(bytes[i]) << (8 * i);
  return value;
}

namespace {

/// Converts a float to an integer dtype: truncation toward zero, saturating
/// at the dtype's range, NaN -> 0.
int64_t floatToInteger(double value, DType dtype) {
  if (value != value)
    return 0;
  const double low = dtype == DType::I32 ? -2147483648.0 : -9223372036854775808.0;
  const double high = dtype == DType::I32 ? 2147483647.0 : 9223372036854775807.0;
  if (value <= low)
    return static_cast<int64_t>(low);
  if (value >= high)
    return dtype == DType::I32 ? 2147483647 : std::numeric_limits<int64_t>::max();
  return static_cast<int64_t>(value); // truncates toward zero
}

/// Converts between integer dtypes: to i32 wraps modulo 2^32 (two's
/// complement), like C++ and PyTorch.
int64_t integerToInteger(int64_t value, DType dtype) {
  if (dtype == DType::I32)
    return static_cast<int32_t>(static_cast<uint32_t>(value));
  return value;
}

} // namespace

template <typename T>
template <typename E>
void TypedExecutor<T>::executeLayout(const Instruction &instruction,
                                     std::vector<E> Slot::*storage) {
  const uint32_t resultId = instruction.results[0];
  std::vector<E> &out = slots[resultId].*storage;
  out.resize(plan::numElements(plan.buffers[resultId]));
  const Shape &outShape = shapeOf(resultId);
  const uint32_t source = instruction.operands[0];
  const E *in = (slots[source].*storage).data();
  switch (instruction.op) {
  case OpCode::Transpose:
    kernels::transpose(in, shapeOf(source), plan::get(instruction, plan::attr::permutation),
                       out.data());
    break;
  case OpCode::Reshape: // row-major order is unchanged
    std::copy(in, in + out.size(), out.data());
    break;
  case OpCode::Slice:
    kernels::slice(in, shapeOf(source), plan::get(instruction, plan::attr::starts), out.data(),
                   outShape);
    break;
  case OpCode::Concat: {
    std::vector<const E *> parts;
    std::vector<Shape> partShapes;
    for (uint32_t operand : instruction.operands) {
      parts.push_back((slots[operand].*storage).data());
      partShapes.push_back(shapeOf(operand));
    }
    kernels::concat(parts, partShapes, plan::get(instruction, plan::attr::axis), out.data());
    break;
  }
  default: // Broadcast
    kernels::broadcast(in, shapeOf(source), out.data(), outShape);
    break;
  }
}

template <typename T> void TypedExecutor<T>::executeCast(const Instruction &instruction) {
  const uint32_t resultId = instruction.results[0], source = instruction.operands[0];
  const DType from = plan.buffers[source].dtype, to = plan.buffers[resultId].dtype;
  const int64_t count = plan::numElements(plan.buffers[resultId]);
  Slot &out = slots[resultId];
  if (plan::isFloatDType(to)) {
    T *data = realResult(instruction);
    if (plan::isFloatDType(from)) {
      // The executor rounds to the result dtype afterwards.
      std::copy(real(source), real(source) + count, data);
    } else {
      // Integers round once, from double, to the result dtype.
      const int64_t *in = integer(source);
      for (int64_t i = 0; i < count; ++i)
        data[i] = storedValue<T>(static_cast<double>(in[i]), to);
    }
    return;
  }
  out.integer.resize(count);
  if (plan::isFloatDType(from)) {
    const T *in = real(source);
    for (int64_t i = 0; i < count; ++i)
      out.integer[i] = floatToInteger(static_cast<double>(in[i]), to);
  } else {
    const int64_t *in = integer(source);
    for (int64_t i = 0; i < count; ++i)
      out.integer[i] = integerToInteger(in[i], to);
  }
}

template <typename T>
void TypedExecutor<T>::execute(const Instruction &instruction, const RunOptions &options) {
  const std::vector<uint32_t> &operands = instruction.operands;
  const uint32_t resultId = instruction.results[0];
  const Shape &outShape = shapeOf(resultId);
  // The elementwise and reduction kernels are selected by an enumerator named
  // as the opcode (Kernels.h), so OpCodes.def generates their cases.
  auto binary = [&](kernels::BinaryOp op) {
    T *out = realResult(instruction);
    kernels::binary(op, real(operands[0]), shapeOf(operands[0]), real(operands[1]),
                    shapeOf(operands[1]), out, outShape);
  };
  auto unary = [&](kernels::UnaryOp op) {
    T *out = realResult(instruction);
    kernels::unary(op, real(operands[0]), out, plan::numElements(outShape));
  };
  auto reduce = [&](kernels::ReduceOp op) {
    T *out = realResult(instruction);
    kernels::reduce(op, real(operands[0]), shapeOf(operands[0]),
                    plan::get(instruction, plan::attr::axes), out);
  };
  switch (instruction.op) {
#define AMPC_BINARY_OP(Name, ...)                                                                  \
  case OpCode::Name:                                                                               \
    return binary(kernels::BinaryOp::Name);
#include "runtime/plan/OpCodes.def"
#define AMPC_UNARY_OP(Name, ...)                                                                   \
  case OpCode::Name:                                                                               \
    return unary(kernels::UnaryOp::Name);
#include "runtime/plan/OpCodes.def"
  case OpCode::Gelu:
    return unary(plan::get(instruction, plan::attr::approximate) ? kernels::UnaryOp::GeluTanh
                                                                 : kernels::UnaryOp::GeluErf);
#define AMPC_REDUCTION_OP(Name, ...)                                                               \
  case OpCode::Name:                                                                               \
    return reduce(kernels::ReduceOp::Name);
#include "runtime/plan/OpCodes.def"
  case OpCode::MatMul: {
    T *out = realResult(instruction);
    kernels::matMul(real(operands[0]), shapeOf(operands[0]),
                    plan::get(instruction, plan::attr::transposeA) != 0, real(operands[1]),
                    shapeOf(operands[1]), plan::get(instruction, plan::attr::transposeB) != 0, out);
    return;
  }
#define AMPC_LAYOUT_OP(Name, ...) case OpCode::Name:
#include "runtime/plan/OpCodes.def"
    if (plan::isIntegerDType(plan.buffers[resultId].dtype))
      executeLayout(instruction, &Slot::integer);
    else
      executeLayout(instruction, &Slot::real);
    return;
  case OpCode::Cast:
    executeCast(instruction);
    return;
  case OpCode::Embedding: {
    T *out = realResult(instruction);
    const Shape &table = shapeOf(operands[0]);
    kernels::embedding(real(operands[0]), table[0], table[1], integer(operands[1]),
                       plan::numElements(shapeOf(operands[1])), out);
    return;
  }
  case OpCode::LayerNorm:
  case OpCode::RmsNorm: {
    T *out = realResult(instruction);
    const int64_t width = outShape.back();
    const int64_t rows = width == 0 ? 0 : plan::numElements(outShape) / width;
    const double epsilon = plan::get(instruction, plan::attr::epsilon);
    if (instruction.op == OpCode::LayerNorm)
      kernels::layerNorm(real(operands[0]), rows, width, real(operands[1]), real(operands[2]),
                         epsilon, out);
    else
      kernels::rmsNorm(real(operands[0]), rows, width, real(operands[1]), epsilon, out);
    return;
  }
  case OpCode::Softmax: {
    T *out = realResult(instruction);
    kernels::softmax(real(operands[0]), shapeOf(operands[0]),
                     plan::get(instruction, plan::attr::causal) != 0, out);
    return;
  }
  case OpCode::Attention: {
    T *out = realResult(instruction);
    const Shape &q = shapeOf(operands[0]), &k = shapeOf(operands[1]), &v = shapeOf(operands[2]);
    const int64_t batch = plan::numElements(Shape(q.begin(), q.end() - 2));
    kernels::attention(real(operands[0]), real(operands[1]), real(operands[2]), batch,
                       q[q.size() - 2], k[k.size() - 2], q.back(), v.back(),
                       plan::get(instruction, plan::attr::scale),
                       plan::get(instruction, plan::attr::causal) != 0, out,
                       instruction.results.size() == 2 ? realResult(instruction, 1) : nullptr);
    return;
  }
  case OpCode::QkvAttention: {
    const Shape &qkv = shapeOf(operands[0]);
    const int64_t heads = plan::get(instruction, plan::attr::heads);
    kernels::qkvAttention(real(operands[0]), plan::numElements(Shape(qkv.begin(), qkv.end() - 2)),
                          qkv[qkv.size() - 2], heads, qkv.back() / (3 * heads),
                          plan::get(instruction, plan::attr::scale),
                          plan::get(instruction, plan::attr::causal) != 0, realResult(instruction),
                          instruction.results.size() == 2 ? realResult(instruction, 1) : nullptr);
    return;
  }
  case OpCode::Dropout: {
    T *out = realResult(instruction);
    const int64_t count = plan::numElements(outShape);
    const T *in = real(operands[0]);
    if (options.training)
      kernels::dropout(in, out, count, plan::get(instruction, plan::attr::p), options.seed,
                       options.step,
                       static_cast<uint32_t>(plan::get(instruction, plan::attr::stream)));
    else // evaluation: identity
      std::copy(in, in + count, out);
    return;
  }
  case OpCode::CrossEntropy: {
    T *out = realResult(instruction);
    const Shape &logits = shapeOf(operands[0]);
    out[0] = kernels::crossEntropy(real(operands[0]), plan::numElements(shapeOf(operands[1])),
                                   logits.back(), integer(operands[1]),
                                   plan::get(instruction, plan::attr::ignoreIndex),
                                   plan::get(instruction, plan::attr::reduction) == 1);
    return;
  }
  case OpCode::MseLoss: {
    T *out = realResult(instruction);
    out[0] = kernels::mseLoss(real(operands[0]), real(operands[1]),
                              plan::numElements(shapeOf(operands[0])));
    return;
  }
  case OpCode::Clip: {
    const T lo = clipBound<T>(instruction, plan::attr::lower, -1),
            hi = clipBound<T>(instruction, plan::attr::upper, 1);
    const T *in = real(operands[0]);
    T *out = realResult(instruction);
    for (int64_t e = 0, count = plan::numElements(outShape); e < count; ++e)
      out[e] = numerics::ops::Clip::apply(in[e], lo, hi);
    return;
  }
  case OpCode::BatchNorm: {
    const Shape &x = shapeOf(operands[0]);
    kernels::batchNorm(real(operands[0]), x[0], x[1], innerExtent(x),
                       real(operands[1]), real(operands[2]), real(operands[3]),
                       real(operands[4]), plan::get(instruction, plan::attr::epsilon),
                       options.training, realResult(instruction));
    return;
  }
  case OpCode::Conv2d: {
    const Shape &w = shapeOf(operands[1]);
    kernels::conv2d(real(operands[0]), shapeOf(operands[0]), real(operands[1]), w,
                    instructionWindow(instruction, {w[2], w[3]}),
                    plan::get(instruction, plan::attr::groups), realResult(instruction), outShape);
    return;
  }
  case OpCode::MaxPool2d:
    kernels::maxPool2d(real(operands[0]), shapeOf(operands[0]), instructionWindow(instruction, {}),
                       realResult(instruction), outShape);
    return;
  case OpCode::AvgPool2d:
    kernels::avgPool2d(real(operands[0]), shapeOf(operands[0]), instructionWindow(instruction, {}),
                       plan::get(instruction, plan::attr::countIncludePad) != 0,
                       realResult(instruction), outShape);
    return;
  // The gradient, optimizer and loss-scaling ops (ExecutorTraining.cpp).
#define AMPC_TRAINING_OP(Name, ...) case OpCode::Name:
#define AMPC_IN_PLACE_OP(Name, ...) case OpCode::Name:
#include "runtime/plan/OpCodes.def"
    executeTraining(instruction, options);
    return;
  }
}

// run() and runOptimizerStep() reach execute() through runList, in both files.
template void TypedExecutor<float>::execute(const Instruction &, const RunOptions &);
template void TypedExecutor<double>::execute(const Instruction &, const RunOptions &);

} // namespace detail

Executor::Executor(const plan::Plan &plan, Precision precision) {
  plan::validatePlan(plan);
  if (precision == Precision::F32)
    impl = std::make_unique<detail::TypedExecutor<float>>(plan, precision);
  else
    impl = std::make_unique<detail::TypedExecutor<double>>(plan, precision);
}

Executor::~Executor() = default;
Executor::Executor(Executor &&) noexcept = default;
Executor &Executor::operator=(Executor &&) noexcept = default;

void Executor::initializeParameters(uint64_t seed) { impl->initializeParameters(seed); }

void Executor::randomizeInputs(uint64_t seed) { impl->randomizeInputs(seed); }

void Executor::setInput(const std::string &name, const void *data, size_t bytes) {
  impl->setInput(name, data, bytes);
}

/// The buffer of parameter \p name; ExecutionError if there is none.
static uint32_t parameterBuffer(const plan::Plan &plan, const std::string &name) {
  for (const plan::Parameter &parameter : plan.parameters)
    if (parameter.name == name)
      return parameter.buffer;
  throw ExecutionError("the plan has no parameter named '" + name + "'");
}

std::vector<double> Executor::parameterValues(const std::string &name) const {
  return impl->values(parameterBuffer(impl->plan, name));
}

void Executor::setParameterValues(const std::string &name, const std::vector<double> &values) {
  impl->setValues(parameterBuffer(impl->plan, name), values);
}

std::vector<double> Executor::bufferValues(uint32_t buffer) const { return impl->values(buffer); }

void Executor::setBufferValues(uint32_t buffer, const std::vector<double> &values) {
  impl->setBufferValues(buffer, values);
}

double Executor::run(const RunOptions &options) { return impl->run(options); }

double Executor::runOptimizerStep(const RunOptions &options) {
  return impl->runOptimizerStep(options);
}

double Executor::learningRate() const { return impl->learningRate(); }

void Executor::resetState() { impl->resetState(); }

LossScaleStatus Executor::lossScaleStatus() const { return impl->lossScaleStatus(); }

std::string Executor::firstNonFinite() const { return impl->firstNonFinite(); }

int64_t Executor::peakTemporaryBytes() const { return impl->peakTemporaryBytes; }

const plan::Plan &Executor::plan() const { return impl->plan; }

Precision Executor::precision() const { return impl->precision; }

} // namespace ampc::cpu