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
//===----------------------------------------------------------------------===//

#include "runtime/cpu/Executor.h"
#include "runtime/cpu/Kernels.h"
#include "runtime/cpu/ThreadPool.h"
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

using plan::Buffer;
using plan::BufferRole;
using plan::DType;
using plan::Instruction;
using plan::OpCode;
using plan::Shape;

/// The precision-independent interface; TypedExecutor<T> implements it.
class Executor::Impl {
public:
  Impl(const plan::Plan &plan, Precision precision)
      : plan(plan), precision(precision) {}
  virtual ~Impl() = default;
  virtual void initializeParameters(uint64_t seed) = 0;
  virtual void randomizeInputs(uint64_t seed) = 0;
  virtual void setInput(const std::string &name, const void *data,
                        size_t bytes) = 0;
  virtual std::vector<double> values(uint32_t buffer) const = 0;
  virtual void setValues(uint32_t buffer,
                         const std::vector<double> &values) = 0;
  virtual double run(const RunOptions &options) = 0;
  virtual double runOptimizerStep(const RunOptions &options) = 0;
  virtual double learningRate() const = 0;
  virtual void resetState() = 0;
  virtual void setBufferValues(uint32_t buffer,
                               const std::vector<double> &values) = 0;
  virtual LossScaleStatus lossScaleStatus() const = 0;
  virtual std::string firstNonFinite() const = 0;

  const plan::Plan plan;
  const Precision precision;
};

namespace {

/// Stream-id offset that separates input data from parameters of the same
/// name.
constexpr uint32_t kInputStreamSalt = 0x9e3779b9u;

/// Elements per parallel chunk for cheap per-element passes.
constexpr int64_t kElementGrain = 1 << 15;

uint32_t nameStream(const std::string &name) {
  return numerics::fnv1a32(name.data(), name.size());
}

/// The value a number computed in double takes when stored in a buffer of
/// \p dtype by a backend computing in T: rounded once to bf16/f16; for f32,
/// converted to T (a float in F32 mode, kept as a double in F64 mode).
template <typename T> T storedValue(double value, DType dtype) {
  switch (dtype) {
  case DType::BF16:
    return static_cast<T>(numerics::roundToBF16(value));
  case DType::F16:
    return static_cast<T>(numerics::roundToF16(value));
  default:
    return static_cast<T>(value);
  }
}

/// Rounds kernel results (computed in T) to the buffer's storage dtype.
template <typename T> void roundToStorage(T *data, int64_t count, DType dtype) {
  if (dtype != DType::BF16 && dtype != DType::F16)
    return; // f32: already a float in F32 mode, kept as double in F64 mode
  const bool bf16 = dtype == DType::BF16;
  parallelFor(count, kElementGrain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i)
      data[i] =
          bf16 ? numerics::roundToBF16(data[i]) : numerics::roundToF16(data[i]);
  });
}

/// Reads a little-endian unsigned integer of \p size bytes.
uint64_t readLittleEndian(const uint8_t *bytes, size_t size) {
  uint64_t value = 0;
  for (size_t i = 0; i < size; ++i)
    value |= static_cast<uint64_t>(bytes[i]) << (8 * i);
  return value;
}

/// Converts a float to an integer dtype: truncation toward zero, saturating
/// at the dtype's range, NaN -> 0.
int64_t floatToInteger(double value, DType dtype) {
  if (value != value)
    return 0;
  const double low =
      dtype == DType::I32 ? -2147483648.0 : -9223372036854775808.0;
  const double high =
      dtype == DType::I32 ? 2147483647.0 : 9223372036854775807.0;
  if (value <= low)
    return static_cast<int64_t>(low);
  if (value >= high)
    return dtype == DType::I32 ? 2147483647
                               : std::numeric_limits<int64_t>::max();
  return static_cast<int64_t>(value); // truncates toward zero
}

/// Converts between integer dtypes: to i32 wraps modulo 2^32 (two's
/// complement), like C++ and PyTorch.
int64_t integerToInteger(int64_t value, DType dtype) {
  if (dtype == DType::I32)
    return static_cast<int32_t>(static_cast<uint32_t>(value));
  return value;
}

kernels::UnaryOp unaryOp(const Instruction &instruction) {
  switch (instruction.op) {
  case OpCode::Neg:
    return kernels::UnaryOp::Neg;
  case OpCode::Relu:
    return kernels::UnaryOp::Relu;
  case OpCode::Silu:
    return kernels::UnaryOp::Silu;
  case OpCode::Tanh:
    return kernels::UnaryOp::Tanh;
  case OpCode::Exp:
    return kernels::UnaryOp::Exp;
  case OpCode::Log:
    return kernels::UnaryOp::Log;
  case OpCode::Sqrt:
    return kernels::UnaryOp::Sqrt;
  case OpCode::Rsqrt:
    return kernels::UnaryOp::Rsqrt;
  default: // Gelu
    return plan::intAttr(instruction, "approximate")
               ? kernels::UnaryOp::GeluTanh
               : kernels::UnaryOp::GeluErf;
  }
}

kernels::BinaryOp binaryOp(OpCode op) {
  switch (op) {
  case OpCode::Add:
    return kernels::BinaryOp::Add;
  case OpCode::Sub:
    return kernels::BinaryOp::Sub;
  case OpCode::Mul:
    return kernels::BinaryOp::Mul;
  default:
    return kernels::BinaryOp::Div;
  }
}

/// The executor for compute type T (float or double).
template <typename T> class TypedExecutor final : public Executor::Impl {
public:
  TypedExecutor(const plan::Plan &source, Precision precision)
      : Impl(source, precision), slots(plan.buffers.size()),
        microLastUse(lastUses(plan.instructions)),
        optimizerLastUse(lastUses(plan.optimizerInstructions)) {
    for (size_t i = 0; i < plan.parameters.size(); ++i)
      parameterIndex[plan.parameters[i].name] = i;
    for (size_t i = 0; i < plan.inputs.size(); ++i)
      inputIndex[plan.inputs[i].name] = i;
    copyOf.assign(plan.buffers.size(), -1);
    for (const plan::ParameterCopy &copy : plan.parameterCopies)
      copyOf[copy.source] = copy.buffer;
    for (const plan::Constant &constant : plan.constants)
      decodeInto(constant.buffer, constant.bytes.data());
    resetState();
  }

  void initializeParameters(uint64_t seed) override {
    for (const plan::Parameter &parameter : plan.parameters) {
      const Buffer &buffer = plan.buffers[parameter.buffer];
      std::vector<T> &data = slots[parameter.buffer].real;
      data.resize(plan::numElements(buffer));
      const uint32_t stream = nameStream(parameter.name);
      parallelFor(static_cast<int64_t>(data.size()), 1 << 12,
                  [&](int64_t begin, int64_t end) {
                    for (int64_t e = begin; e < end; ++e)
                      data[e] = storedValue<T>(
                          initialValue(parameter, seed, stream, e),
                          buffer.dtype);
                  });
      slots[parameter.buffer].ready = true;
    }
    for (const plan::ParameterCopy &copy : plan.parameterCopies)
      refreshCopy(copy.source);
  }

  void randomizeInputs(uint64_t seed) override {
    // Check first, so a failure leaves every input as it was.
    for (const plan::Input &input : plan.inputs)
      if (plan::isIntegerDType(plan.buffers[input.buffer].dtype) &&
          input.bound == 0)
        throw ExecutionError("input '" + input.name +
                             "' is an integer input without a bound, so it "
                             "cannot be randomized: supply its data with "
                             "setInput");
    for (const plan::Input &input : plan.inputs) {
      const Buffer &buffer = plan.buffers[input.buffer];
      const int64_t count = plan::numElements(buffer);
      const uint32_t stream = nameStream(input.name) ^ kInputStreamSalt;
      Slot &slot = slots[input.buffer];
      if (plan::isIntegerDType(buffer.dtype)) {
        // 64 random bits modulo the bound: the bias is below bound / 2^64.
        slot.integer.resize(count);
        const uint64_t bound = static_cast<uint64_t>(input.bound);
        for (int64_t e = 0; e < count; ++e) {
          numerics::PhiloxBlock out =
              numerics::philoxForElement(seed, 0, stream, e);
          const uint64_t bits =
              (static_cast<uint64_t>(out.word[1]) << 32) | out.word[0];
          slot.integer[e] = static_cast<int64_t>(bits % bound);
        }
      } else {
        // Data as if supplied with setInput: representable in the input's
        // dtype (f32 included), so F32 and F64 runs see identical inputs.
        slot.real.resize(count);
        for (int64_t e = 0; e < count; ++e) {
          const double z = numerics::standardNormal(seed, 0, stream, e);
          slot.real[e] = storedValue<T>(
              buffer.dtype == DType::F32 ? static_cast<float>(z) : z,
              buffer.dtype);
        }
      }
      slot.ready = true;
    }
  }

  void setInput(const std::string &name, const void *data,
                size_t bytes) override {
    auto it = inputIndex.find(name);
    if (it == inputIndex.end())
      throw ExecutionError("setInput: the plan has no input named '" + name +
                           "'");
    const plan::Input &input = plan.inputs[it->second];
    const Buffer &buffer = plan.buffers[input.buffer];
    const size_t expected = static_cast<size_t>(plan::numElements(buffer)) *
                            plan::dtypeBytes(buffer.dtype);
    if (bytes != expected)
      throw ExecutionError(
          "setInput: input '" + name + "' (" + plan::dtypeName(buffer.dtype) +
          " " + plan::shapeToString(buffer.shape) + ") needs " +
          std::to_string(expected) + " bytes, got " + std::to_string(bytes));
    Slot candidate;
    decodeInto(candidate, buffer.dtype, plan::numElements(buffer),
               static_cast<const uint8_t *>(data));
    if (input.bound > 0)
      for (size_t i = 0; i < candidate.integer.size(); ++i)
        if (candidate.integer[i] < 0 || candidate.integer[i] >= input.bound)
          throw ExecutionError("setInput: input '" + name + "' has value " +
                               std::to_string(candidate.integer[i]) +
                               " at index " + std::to_string(i) +
                               ", outside its range [0, " +
                               std::to_string(input.bound) + ")");
    slots[input.buffer] = std::move(candidate);
  }

  std::vector<double> values(uint32_t id) const override {
    if (id >= slots.size())
      throw ExecutionError("buffer " + std::to_string(id) +
                           " is out of range (the plan has " +
                           std::to_string(slots.size()) + " buffers)");
    const Slot &slot = slots[id];
    if (!slot.ready)
      throw ExecutionError("buffer " + std::to_string(id) + " ('" +
                           plan.buffers[id].name +
                           "') holds no values: it is written by a run (or "
                           "was released after its last use)");
    if (plan::isIntegerDType(plan.buffers[id].dtype))
      return std::vector<double>(slot.integer.begin(), slot.integer.end());
    return std::vector<double>(slot.real.begin(), slot.real.end());
  }

  void setValues(uint32_t id, const std::vector<double> &values) override {
    const Buffer &buffer = plan.buffers[id];
    if (static_cast<int64_t>(values.size()) != plan::numElements(buffer))
      throw ExecutionError("'" + buffer.name + "' has " +
                           std::to_string(plan::numElements(buffer)) +
                           " elements, got " + std::to_string(values.size()) +
                           " values");
    if (plan::isIntegerDType(buffer.dtype))
      return setIntegerValues(id, values);
    std::vector<T> &data = slots[id].real;
    data.resize(values.size());
    for (size_t i = 0; i < values.size(); ++i)
      data[i] = storedValue<T>(values[i], buffer.dtype);
    slots[id].ready = true;
    if (copyOf[id] >= 0)
      refreshCopy(id);
  }

  double run(const RunOptions &options) override {
    requireParameters();
    for (const plan::Input &input : plan.inputs)
      if (!slots[input.buffer].ready)
        throw ExecutionError("input '" + input.name +
                             "' has no data: call setInput or "
                             "randomizeInputs first");
    // The non-finite record covers the micro steps of one optimizer step.
    if (clearNonFinite) {
      nonFinite.clear();
      clearNonFinite = false;
    }
    runList(plan.instructions, microLastUse, options, "",
            plan.debugNonFinite);
    if (options.injectNonFinite && scaled())
      slots[plan.lossScaling.foundNonFinite].real.at(0) = T(1);
    return static_cast<double>(slots[plan.loss].real.at(0));
  }

  double runOptimizerStep(const RunOptions &options) override {
    requireTrainingPlan("runOptimizerStep");
    requireParameters();
    runList(plan.optimizerInstructions, optimizerLastUse, options,
            "optimizer step ", false);
    clearNonFinite = true;
    return static_cast<double>(slots[plan.gradNorm].real.at(0));
  }

  double learningRate() const override {
    requireTrainingPlan("learningRate");
    return values(plan.learningRate).at(0);
  }

  void resetState() override {
    for (size_t id = 0; id < slots.size(); ++id) {
      if (plan.buffers[id].role != BufferRole::State)
        continue;
      slots[id].real.assign(plan::numElements(plan.buffers[id]), T(0));
      slots[id].ready = true;
    }
    if (scaled())
      slots[plan.lossScaling.scale].real[0] =
          static_cast<T>(plan.lossScaling.initialScale);
    status = LossScaleStatus();
    floorHits = 0;
  }

  LossScaleStatus lossScaleStatus() const override {
    LossScaleStatus result = status;
    result.enabled = scaled();
    result.scale =
        scaled() ? static_cast<double>(slots[plan.lossScaling.scale].real[0])
                 : 0.0;
    return result;
  }

  std::string firstNonFinite() const override { return nonFinite; }

  void setBufferValues(uint32_t id,
                       const std::vector<double> &values) override {
    if (id >= slots.size())
      throw ExecutionError("setBufferValues: buffer " + std::to_string(id) +
                           " is out of range (the plan has " +
                           std::to_string(slots.size()) + " buffers)");
    const BufferRole role = plan.buffers[id].role;
    if (role != BufferRole::Parameter && role != BufferRole::State &&
        role != BufferRole::Input)
      throw ExecutionError("setBufferValues: buffer " + std::to_string(id) +
                           " ('" + plan.buffers[id].name + "') is a " +
                           plan::bufferRoleName(role) +
                           "; only parameter, state and input buffers can "
                           "be set");
    setValues(id, values);
  }

private:
  struct Slot {
    std::vector<T> real;
    std::vector<int64_t> integer;
    bool ready = false;
  };

  /// Whether the plan scales its loss.
  bool scaled() const {
    return plan.lossScaling.mode != plan::LossScaleMode::None;
  }

  /// Sets the copy of parameter \p source to its values rounded to the
  /// copy's dtype (nearest even).
  void refreshCopy(uint32_t source) {
    const uint32_t id = static_cast<uint32_t>(copyOf[source]);
    const DType dtype = plan.buffers[id].dtype;
    const std::vector<T> &from = slots[source].real;
    std::vector<T> &to = slots[id].real;
    to.resize(from.size());
    for (size_t i = 0; i < from.size(); ++i)
      to[i] = storedValue<T>(static_cast<double>(from[i]), dtype);
    slots[id].ready = slots[source].ready;
  }

  /// The initial value of element \p e of \p parameter, in double.
  static double initialValue(const plan::Parameter &parameter, uint64_t seed,
                             uint32_t stream, int64_t e) {
    switch (parameter.init) {
    case plan::InitKind::Zeros:
      return 0.0;
    case plan::InitKind::Ones:
      return 1.0;
    case plan::InitKind::Normal:
      return parameter.a +
             parameter.b * numerics::standardNormal(seed, 0, stream, e);
    case plan::InitKind::Uniform:
      return parameter.a + (parameter.b - parameter.a) *
                               numerics::uniform01(seed, 0, stream, e);
    }
    return 0.0;
  }

  /// Decodes \p count little-endian elements of \p dtype into \p slot.
  static void decodeInto(Slot &slot, DType dtype, int64_t count,
                         const uint8_t *bytes) {
    const size_t width = plan::dtypeBytes(dtype);
    if (plan::isIntegerDType(dtype)) {
      slot.integer.resize(count);
      for (int64_t i = 0; i < count; ++i) {
        const uint64_t raw = readLittleEndian(bytes + i * width, width);
        slot.integer[i] = dtype == DType::I32
                              ? static_cast<int32_t>(static_cast<uint32_t>(raw))
                              : static_cast<int64_t>(raw);
      }
    } else {
      slot.real.resize(count);
      for (int64_t i = 0; i < count; ++i) {
        const uint64_t raw = readLittleEndian(bytes + i * width, width);
        float value;
        if (dtype == DType::F32)
          value = numerics::bitsToFloat(static_cast<uint32_t>(raw));
        else if (dtype == DType::BF16)
          value = numerics::bf16BitsToFloat(static_cast<uint16_t>(raw));
        else
          value = numerics::f16BitsToFloat(static_cast<uint16_t>(raw));
        slot.real[i] = static_cast<T>(value); // exact in both precisions
      }
    }
    slot.ready = true;
  }

  void decodeInto(uint32_t id, const uint8_t *bytes) {
    decodeInto(slots[id], plan.buffers[id].dtype,
               plan::numElements(plan.buffers[id]), bytes);
  }

  /// Index of the last instruction of \p list reading each buffer (-1:
  /// never read).
  std::vector<int64_t>
  lastUses(const std::vector<Instruction> &list) const {
    std::vector<int64_t> last(plan.buffers.size(), -1);
    for (size_t i = 0; i < list.size(); ++i)
      for (uint32_t operand : list[i].operands)
        last[operand] = static_cast<int64_t>(i);
    return last;
  }

  /// Whether a temporary must outlive its last reader: the loss, and the
  /// scalars a training runner logs after the optimizer step.
  bool isKept(uint32_t id) const {
    return id == plan.loss || (!plan.optimizerInstructions.empty() &&
                               (id == plan.gradNorm || id == plan.learningRate));
  }

  /// Frees temporaries whose last reader in its list was instruction
  /// \p index. Parameters and state are never freed.
  void releaseDeadOperands(const Instruction &instruction, size_t index,
                           const std::vector<int64_t> &lastUse) {
    for (uint32_t operand : instruction.operands) {
      if (lastUse[operand] != static_cast<int64_t>(index) || isKept(operand) ||
          plan.buffers[operand].role != BufferRole::Temporary)
        continue;
      slots[operand] = Slot();
    }
  }

  void requireParameters() const {
    for (const plan::Parameter &parameter : plan.parameters)
      if (!slots[parameter.buffer].ready)
        throw ExecutionError("parameter '" + parameter.name +
                             "' has no values: call initializeParameters or "
                             "setParameterValues first");
  }

  void requireTrainingPlan(const char *what) const {
    if (plan.optimizerInstructions.empty())
      throw plan::PlanError(std::string(what) + ": plan '" + plan.modelName +
                            "' is not a training plan (it has no optimizer "
                            "step)");
  }

  /// Executes \p list in order. Its temporaries are invalidated first, so
  /// a stale value from an earlier run can never be read.
  /// With \p checkNonFinite, the first instruction whose float results hold
  /// an inf or NaN is remembered in nonFinite (if it is still empty).
  void runList(const std::vector<Instruction> &list,
               const std::vector<int64_t> &lastUse, const RunOptions &options,
               const char *listName, bool checkNonFinite) {
    for (const Instruction &instruction : list)
      for (uint32_t result : instruction.results)
        if (plan.buffers[result].role == BufferRole::Temporary)
          slots[result].ready = false;
    if (options.instructionSeconds)
      options.instructionSeconds->assign(list.size(), 0.0);
    for (size_t index = 0; index < list.size(); ++index) {
      const Instruction &instruction = list[index];
      const auto start = std::chrono::steady_clock::now();
      try {
        execute(instruction, options);
      } catch (const kernels::KernelError &error) {
        throw ExecutionError(listName +
                             plan::describeInstruction(instruction, index) +
                             ": " + error.what());
      }
      for (uint32_t result : instruction.results) {
        Slot &slot = slots[result];
        if (plan::isFloatDType(plan.buffers[result].dtype))
          roundToStorage(slot.real.data(),
                         static_cast<int64_t>(slot.real.size()),
                         plan.buffers[result].dtype);
        slot.ready = true;
      }
      if (checkNonFinite && nonFinite.empty() &&
          producesNonFinite(instruction))
        nonFinite = listName + plan::describeInstruction(instruction, index);
      if (!options.keepTemporaries)
        releaseDeadOperands(instruction, index, lastUse);
      if (options.instructionSeconds)
        (*options.instructionSeconds)[index] =
            std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                          start)
                .count();
    }
  }

  /// Whether any float result of \p instruction holds an inf or NaN.
  bool producesNonFinite(const Instruction &instruction) const {
    for (uint32_t result : instruction.results) {
      if (!plan::isFloatDType(plan.buffers[result].dtype))
        continue;
      for (T value : slots[result].real)
        if (!std::isfinite(value))
          return true;
    }
    return false;
  }

  /// setValues for an integer buffer: whole numbers in the dtype's range
  /// (and an input's bound), checked before anything is stored.
  void setIntegerValues(uint32_t id, const std::vector<double> &values) {
    const Buffer &buffer = plan.buffers[id];
    int64_t bound = 0;
    for (const plan::Input &input : plan.inputs)
      if (input.buffer == id)
        bound = input.bound;
    const double low = buffer.dtype == DType::I32 ? -2147483648.0
                                                  : -9223372036854775808.0;
    const double high =
        buffer.dtype == DType::I32 ? 2147483648.0 : 9223372036854775808.0;
    std::vector<int64_t> data(values.size());
    for (size_t i = 0; i < values.size(); ++i) {
      const double value = values[i];
      if (!(value >= low && value < high) || value != std::trunc(value) ||
          (bound > 0 && (value < 0 || value >= static_cast<double>(bound))))
        throw ExecutionError(
            "'" + buffer.name + "' (" + plan::dtypeName(buffer.dtype) +
            ") cannot hold value " + std::to_string(value) + " at index " +
            std::to_string(i) +
            (bound > 0 ? ": values must be whole numbers in [0, " +
                             std::to_string(bound) + ")"
                       : ": values must be whole numbers in the dtype's "
                         "range"));
      data[i] = static_cast<int64_t>(value);
    }
    slots[id].integer = std::move(data);
    slots[id].ready = true;
  }

  const Shape &shapeOf(uint32_t id) const { return plan.buffers[id].shape; }
  const T *real(uint32_t id) const { return slots[id].real.data(); }
  const int64_t *integer(uint32_t id) const { return slots[id].integer.data(); }
  /// Sizes the storage of result \p i and returns it.
  T *realResult(const Instruction &instruction, size_t i = 0) {
    std::vector<T> &data = slots[instruction.results[i]].real;
    data.resize(plan::numElements(plan.buffers[instruction.results[i]]));
    return data.data();
  }
  /// In-place operand \p i's storage, for writing.
  T *mutableReal(uint32_t id) { return slots[id].real.data(); }

  void execute(const Instruction &instruction, const RunOptions &options);
  template <typename E>
  void executeLayout(const Instruction &instruction,
                     std::vector<E> Slot::*storage);
  void executeCast(const Instruction &instruction);
  void executeTraining(const Instruction &instruction,
                       const RunOptions &options);
  /// Copies parameter \p source into its copy \p copy unrounded: the copy
  /// is an instruction result, so runList rounds it to its dtype.
  void copyForRounding(uint32_t source, uint32_t copy) {
    const std::vector<T> &from = slots[source].real;
    slots[copy].real.assign(from.begin(), from.end());
  }

  std::vector<Slot> slots;
  /// Per list, the index of the last instruction reading each buffer (-1:
  /// never read).
  std::vector<int64_t> microLastUse, optimizerLastUse;
  std::map<std::string, size_t> parameterIndex, inputIndex;
  /// Per buffer, the id of its parameter copy (-1: none).
  std::vector<int64_t> copyOf;
  /// The loss scaler's report after the last optimizer step (enabled and
  /// scale are filled in by lossScaleStatus).
  LossScaleStatus status;
  /// Backoffs the floor stopped so far (LossScaleState::floorHits).
  int32_t floorHits = 0;
  /// describeInstruction of the first non-finite result since the last
  /// optimizer step ("" if none).
  std::string nonFinite;
  /// Clear nonFinite when the next micro step starts.
  bool clearNonFinite = true;
};

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
    kernels::transpose(in, shapeOf(source),
                       plan::intListAttr(instruction, "permutation"),
                       out.data());
    break;
  case OpCode::Reshape: // row-major order is unchanged
    std::copy(in, in + out.size(), out.data());
    break;
  case OpCode::Slice:
    kernels::slice(in, shapeOf(source),
                   plan::intListAttr(instruction, "starts"), out.data(),
                   outShape);
    break;
  case OpCode::Concat: {
    std::vector<const E *> parts;
    std::vector<Shape> partShapes;
    for (uint32_t operand : instruction.operands) {
      parts.push_back((slots[operand].*storage).data());
      partShapes.push_back(shapeOf(operand));
    }
    kernels::concat(parts, partShapes, plan::intAttr(instruction, "axis"),
                    out.data());
    break;
  }
  default: // Broadcast
    kernels::broadcast(in, shapeOf(source), out.data(), outShape);
    break;
  }
}

template <typename T>
void TypedExecutor<T>::executeCast(const Instruction &instruction) {
  const uint32_t resultId = instruction.results[0],
                 source = instruction.operands[0];
  const DType from = plan.buffers[source].dtype,
              to = plan.buffers[resultId].dtype;
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
void TypedExecutor<T>::execute(const Instruction &instruction,
                               const RunOptions &options) {
  const std::vector<uint32_t> &operands = instruction.operands;
  const uint32_t resultId = instruction.results[0];
  const Shape &outShape = shapeOf(resultId);
  switch (instruction.op) {
  case OpCode::Add:
  case OpCode::Sub:
  case OpCode::Mul:
  case OpCode::Div: {
    T *out = realResult(instruction);
    kernels::binary(binaryOp(instruction.op), real(operands[0]),
                    shapeOf(operands[0]), real(operands[1]),
                    shapeOf(operands[1]), out, outShape);
    return;
  }
  case OpCode::Neg:
  case OpCode::Relu:
  case OpCode::Silu:
  case OpCode::Tanh:
  case OpCode::Exp:
  case OpCode::Log:
  case OpCode::Sqrt:
  case OpCode::Rsqrt:
  case OpCode::Gelu: {
    T *out = realResult(instruction);
    kernels::unary(unaryOp(instruction), real(operands[0]), out,
                   plan::numElements(outShape));
    return;
  }
  case OpCode::MatMul: {
    T *out = realResult(instruction);
    kernels::matMul(real(operands[0]), shapeOf(operands[0]),
                    plan::intAttr(instruction, "transpose_a") != 0,
                    real(operands[1]), shapeOf(operands[1]),
                    plan::intAttr(instruction, "transpose_b") != 0, out);
    return;
  }
  case OpCode::Transpose:
  case OpCode::Reshape:
  case OpCode::Slice:
  case OpCode::Concat:
  case OpCode::Broadcast:
    if (plan::isIntegerDType(plan.buffers[resultId].dtype))
      executeLayout(instruction, &Slot::integer);
    else
      executeLayout(instruction, &Slot::real);
    return;
  case OpCode::Cast:
    executeCast(instruction);
    return;
  case OpCode::Sum:
  case OpCode::Mean:
  case OpCode::Max: {
    T *out = realResult(instruction);
    const kernels::ReduceOp op =
        instruction.op == OpCode::Sum    ? kernels::ReduceOp::Sum
        : instruction.op == OpCode::Mean ? kernels::ReduceOp::Mean
                                         : kernels::ReduceOp::Max;
    kernels::reduce(op, real(operands[0]), shapeOf(operands[0]),
                    plan::intListAttr(instruction, "axes"), out);
    return;
  }
  case OpCode::Embedding: {
    T *out = realResult(instruction);
    const Shape &table = shapeOf(operands[0]);
    kernels::embedding(real(operands[0]), table[0], table[1],
                       integer(operands[1]),
                       plan::numElements(shapeOf(operands[1])), out);
    return;
  }
  case OpCode::LayerNorm:
  case OpCode::RmsNorm: {
    T *out = realResult(instruction);
    const int64_t width = outShape.back();
    const int64_t rows = width == 0 ? 0 : plan::numElements(outShape) / width;
    const double epsilon = plan::realAttr(instruction, "epsilon");
    if (instruction.op == OpCode::LayerNorm)
      kernels::layerNorm(real(operands[0]), rows, width, real(operands[1]),
                         real(operands[2]), epsilon, out);
    else
      kernels::rmsNorm(real(operands[0]), rows, width, real(operands[1]),
                       epsilon, out);
    return;
  }
  case OpCode::Softmax: {
    T *out = realResult(instruction);
    kernels::softmax(real(operands[0]), shapeOf(operands[0]),
                     plan::intAttr(instruction, "causal") != 0, out);
    return;
  }
  case OpCode::Attention: {
    T *out = realResult(instruction);
    const Shape &q = shapeOf(operands[0]), &k = shapeOf(operands[1]),
                &v = shapeOf(operands[2]);
    const int64_t batch = plan::numElements(Shape(q.begin(), q.end() - 2));
    kernels::attention(real(operands[0]), real(operands[1]), real(operands[2]),
                       batch, q[q.size() - 2], k[k.size() - 2], q.back(),
                       v.back(), plan::realAttr(instruction, "scale"),
                       plan::intAttr(instruction, "causal") != 0, out);
    return;
  }
  case OpCode::Dropout: {
    T *out = realResult(instruction);
    const int64_t count = plan::numElements(outShape);
    const T *in = real(operands[0]);
    if (options.training)
      kernels::dropout(
          in, out, count, plan::realAttr(instruction, "p"), options.seed,
          options.step,
          static_cast<uint32_t>(plan::intAttr(instruction, "stream")));
    else // evaluation: identity
      std::copy(in, in + count, out);
    return;
  }
  case OpCode::CrossEntropy: {
    T *out = realResult(instruction);
    const Shape &logits = shapeOf(operands[0]);
    out[0] = kernels::crossEntropy(
        real(operands[0]), plan::numElements(shapeOf(operands[1])),
        logits.back(), integer(operands[1]),
        plan::intAttr(instruction, "ignore_index"),
        plan::intAttr(instruction, "reduction") == 1);
    return;
  }
  case OpCode::MseLoss: {
    T *out = realResult(instruction);
    out[0] = kernels::mseLoss(real(operands[0]), real(operands[1]),
                              plan::numElements(shapeOf(operands[0])));
    return;
  }
  case OpCode::ReluGrad:
  case OpCode::SiluGrad:
  case OpCode::GeluGrad:
  case OpCode::Pad:
  case OpCode::MaxGrad:
  case OpCode::EmbeddingGrad:
  case OpCode::LayerNormGrad:
  case OpCode::RmsNormGrad:
  case OpCode::SoftmaxGrad:
  case OpCode::AttentionGrad:
  case OpCode::CrossEntropyGrad:
  case OpCode::GradSeed:
  case OpCode::Accumulate:
  case OpCode::GlobalNorm:
  case OpCode::LrSchedule:
  case OpCode::AdamW:
  case OpCode::Sgd:
  case OpCode::UpdateLossScale:
    executeTraining(instruction, options);
    return;
  }
}

template <typename T>
void TypedExecutor<T>::executeTraining(const Instruction &instruction,
                                       const RunOptions &options) {
  const std::vector<uint32_t> &operands = instruction.operands;
  const Shape &outShape = shapeOf(instruction.results[0]);
  /// Rows and width of a tensor normalised over its last axis.
  auto rowsOf = [](const Shape &shape, int64_t width) {
    return width == 0 ? int64_t(0) : plan::numElements(shape) / width;
  };
  switch (instruction.op) {
  case OpCode::ReluGrad:
  case OpCode::SiluGrad:
  case OpCode::GeluGrad: {
    T *out = realResult(instruction);
    const kernels::UnaryGradOp op =
        instruction.op == OpCode::ReluGrad   ? kernels::UnaryGradOp::Relu
        : instruction.op == OpCode::SiluGrad ? kernels::UnaryGradOp::Silu
        : plan::intAttr(instruction, "approximate")
            ? kernels::UnaryGradOp::GeluTanh
            : kernels::UnaryGradOp::GeluErf;
    kernels::unaryGrad(op, real(operands[0]), real(operands[1]), out,
                       plan::numElements(outShape));
    return;
  }
  case OpCode::Pad: {
    const std::vector<int64_t> &low = plan::intListAttr(instruction, "low");
    if (plan::isIntegerDType(plan.buffers[operands[0]].dtype)) {
      std::vector<int64_t> &out = slots[instruction.results[0]].integer;
      out.resize(plan::numElements(outShape));
      kernels::pad(integer(operands[0]), shapeOf(operands[0]), low, out.data(),
                   outShape);
    } else {
      kernels::pad(real(operands[0]), shapeOf(operands[0]), low,
                   realResult(instruction), outShape);
    }
    return;
  }
  case OpCode::MaxGrad:
    kernels::maxGrad(real(operands[0]), shapeOf(operands[0]),
                     plan::intListAttr(instruction, "axes"), real(operands[1]),
                     realResult(instruction));
    return;
  case OpCode::EmbeddingGrad:
    kernels::embeddingGrad(integer(operands[0]),
                           plan::numElements(shapeOf(operands[0])),
                           real(operands[1]), outShape[0], outShape[1],
                           realResult(instruction));
    return;
  case OpCode::LayerNormGrad:
  case OpCode::RmsNormGrad: {
    const Shape &x = shapeOf(operands[0]);
    const int64_t width = x.back();
    const double epsilon = plan::realAttr(instruction, "epsilon");
    T *dx = realResult(instruction, 0), *dgamma = realResult(instruction, 1);
    if (instruction.op == OpCode::LayerNormGrad)
      kernels::layerNormGrad(real(operands[0]), rowsOf(x, width), width,
                             real(operands[1]), real(operands[2]), epsilon, dx,
                             dgamma, realResult(instruction, 2));
    else
      kernels::rmsNormGrad(real(operands[0]), rowsOf(x, width), width,
                           real(operands[1]), real(operands[2]), epsilon, dx,
                           dgamma);
    return;
  }
  case OpCode::SoftmaxGrad: {
    const Shape &y = shapeOf(operands[0]);
    kernels::softmaxGrad(real(operands[0]), real(operands[1]),
                         rowsOf(y, y.back()), y.back(),
                         realResult(instruction));
    return;
  }
  case OpCode::AttentionGrad: {
    const Shape &q = shapeOf(operands[0]), &k = shapeOf(operands[1]),
                &v = shapeOf(operands[2]);
    const int64_t batch = plan::numElements(Shape(q.begin(), q.end() - 2));
    kernels::attentionGrad(
        real(operands[0]), real(operands[1]), real(operands[2]),
        real(operands[3]), batch, q[q.size() - 2], k[k.size() - 2], q.back(),
        v.back(), plan::realAttr(instruction, "scale"),
        plan::intAttr(instruction, "causal") != 0, realResult(instruction, 0),
        realResult(instruction, 1), realResult(instruction, 2));
    return;
  }
  case OpCode::CrossEntropyGrad: {
    const Shape &logits = shapeOf(operands[0]);
    kernels::crossEntropyGrad(
        real(operands[0]), plan::numElements(shapeOf(operands[1])),
        logits.back(), integer(operands[1]),
        plan::intAttr(instruction, "ignore_index"),
        plan::intAttr(instruction, "reduction") == 1, real(operands[2])[0],
        realResult(instruction));
    return;
  }
  case OpCode::GradSeed: {
    // The loss scale (or 1) divided by the micro steps per optimizer step.
    const T scale = operands.empty() ? T(1) : real(operands[0])[0];
    realResult(instruction)[0] =
        scale / static_cast<T>(plan::intAttr(instruction, "accum_steps"));
    return;
  }
  case OpCode::Accumulate: {
    const int64_t count = plan::numElements(shapeOf(operands[0]));
    if (operands.size() == 2) {
      kernels::accumulate(mutableReal(operands[0]), real(operands[1]), count);
      return;
    }
    // (acc, g, scale, found): unscale, and flag a non-finite gradient.
    if (kernels::accumulateUnscaled(mutableReal(operands[0]), real(operands[1]),
                                    real(operands[2])[0], count))
      mutableReal(operands[3])[0] = T(1);
    return;
  }
  case OpCode::GlobalNorm: {
    double total = 0;
    for (uint32_t operand : operands)
      kernels::addSquares(real(operand), plan::numElements(shapeOf(operand)),
                          total);
    realResult(instruction)[0] = static_cast<T>(std::sqrt(total));
    return;
  }
  case OpCode::LrSchedule: {
    kernels::LrSchedule schedule;
    schedule.kind = plan::intAttr(instruction, "kind");
    schedule.lr = plan::realAttr(instruction, "lr");
    schedule.minLr = plan::realAttr(instruction, "min_lr");
    schedule.warmupSteps = plan::intAttr(instruction, "warmup_steps");
    schedule.decaySteps = plan::intAttr(instruction, "decay_steps");
    realResult(instruction)[0] = static_cast<T>(kernels::scheduledLearningRate(
        schedule, options.step, options.totalSteps));
    return;
  }
  case OpCode::AdamW: {
    kernels::AdamWConfig config;
    config.lr = static_cast<double>(real(operands[4])[0]);
    config.beta1 = plan::realAttr(instruction, "beta1");
    config.beta2 = plan::realAttr(instruction, "beta2");
    config.eps = plan::realAttr(instruction, "eps");
    config.weightDecay = plan::realAttr(instruction, "weight_decay");
    config.clip =
        kernels::clipCoefficient(plan::realAttr(instruction, "clip_norm"),
                                 static_cast<double>(real(operands[5])[0]));
    // (param, grad, m, v, lr, norm[, found, applied][, copy]).
    const size_t count = operands.size();
    const bool scaledStep = count >= 8;
    // torch counts only the steps it applies.
    config.t = scaledStep
                   ? static_cast<uint64_t>(real(operands[7])[0]) + 1
                   : options.step + 1;
    const int64_t elements = plan::numElements(shapeOf(operands[0]));
    if (scaledStep && real(operands[6])[0] != T(0))
      std::fill_n(mutableReal(operands[1]), elements, T(0)); // skipped
    else
      kernels::adamW(config, mutableReal(operands[0]), mutableReal(operands[1]),
                     mutableReal(operands[2]), mutableReal(operands[3]),
                     elements);
    if (count == 7 || count == 9)
      copyForRounding(operands[0], operands[count - 1]);
    return;
  }
  case OpCode::Sgd: {
    kernels::SgdConfig config;
    config.lr = static_cast<double>(real(operands[3])[0]);
    config.momentum = plan::realAttr(instruction, "momentum");
    config.weightDecay = plan::realAttr(instruction, "weight_decay");
    config.clip =
        kernels::clipCoefficient(plan::realAttr(instruction, "clip_norm"),
                                 static_cast<double>(real(operands[4])[0]));
    // (param, grad, buf, lr, norm[, found, applied][, copy]).
    const size_t count = operands.size();
    const int64_t elements = plan::numElements(shapeOf(operands[0]));
    if (count >= 7 && real(operands[5])[0] != T(0))
      std::fill_n(mutableReal(operands[1]), elements, T(0)); // skipped
    else
      kernels::sgd(config, mutableReal(operands[0]), mutableReal(operands[1]),
                   mutableReal(operands[2]), elements);
    if (count == 6 || count == 8)
      copyForRounding(operands[0], operands[count - 1]);
    return;
  }
  case OpCode::UpdateLossScale: {
    // (scale, growth tracker, found, applied steps), in place, in f32.
    T *scale = mutableReal(operands[0]), *tracker = mutableReal(operands[1]),
      *found = mutableReal(operands[2]), *applied = mutableReal(operands[3]);
    const bool overflow = found[0] != T(0);
    if (!overflow)
      applied[0] = static_cast<T>(static_cast<float>(applied[0]) + 1.0f);
    status.floorReachedNow = false;
    if (plan::intAttr(instruction, "dynamic")) {
      numerics::LossScaleConfig config;
      config.growthFactor =
          static_cast<float>(plan::realAttr(instruction, "growth_factor"));
      config.backoffFactor =
          static_cast<float>(plan::realAttr(instruction, "backoff_factor"));
      config.growthInterval =
          static_cast<int32_t>(plan::intAttr(instruction, "growth_interval"));
      config.minScale =
          static_cast<float>(plan::realAttr(instruction, "min_scale"));
      numerics::LossScaleState state{static_cast<float>(scale[0]),
                                     static_cast<int32_t>(tracker[0]),
                                     floorHits};
      const numerics::LossScaleUpdate update =
          numerics::updateLossScale(state, config, overflow);
      scale[0] = static_cast<T>(state.scale);
      tracker[0] = static_cast<T>(state.growthTracker);
      floorHits = state.floorHits;
      status.floorReachedNow = update.floorReached;
    }
    found[0] = T(0);
    status.lastStepSkipped = overflow;
    if (overflow)
      ++status.skippedSteps;
    return;
  }
  default:
    return;
  }
}

} // namespace

Executor::Executor(const plan::Plan &plan, Precision precision) {
  plan::validatePlan(plan);
  if (precision == Precision::F32)
    impl = std::make_unique<TypedExecutor<float>>(plan, precision);
  else
    impl = std::make_unique<TypedExecutor<double>>(plan, precision);
}

Executor::~Executor() = default;
Executor::Executor(Executor &&) noexcept = default;
Executor &Executor::operator=(Executor &&) noexcept = default;

void Executor::initializeParameters(uint64_t seed) {
  impl->initializeParameters(seed);
}

void Executor::randomizeInputs(uint64_t seed) { impl->randomizeInputs(seed); }

void Executor::setInput(const std::string &name, const void *data,
                        size_t bytes) {
  impl->setInput(name, data, bytes);
}

/// The buffer of parameter \p name; ExecutionError if there is none.
static uint32_t parameterBuffer(const plan::Plan &plan,
                                const std::string &name) {
  for (const plan::Parameter &parameter : plan.parameters)
    if (parameter.name == name)
      return parameter.buffer;
  throw ExecutionError("the plan has no parameter named '" + name + "'");
}

std::vector<double> Executor::parameterValues(const std::string &name) const {
  return impl->values(parameterBuffer(impl->plan, name));
}

void Executor::setParameterValues(const std::string &name,
                                  const std::vector<double> &values) {
  impl->setValues(parameterBuffer(impl->plan, name), values);
}

std::vector<double> Executor::bufferValues(uint32_t buffer) const {
  return impl->values(buffer);
}

void Executor::setBufferValues(uint32_t buffer,
                               const std::vector<double> &values) {
  impl->setBufferValues(buffer, values);
}

double Executor::run(const RunOptions &options) { return impl->run(options); }

double Executor::runOptimizerStep(const RunOptions &options) {
  return impl->runOptimizerStep(options);
}

double Executor::learningRate() const { return impl->learningRate(); }

void Executor::resetState() { impl->resetState(); }

LossScaleStatus Executor::lossScaleStatus() const {
  return impl->lossScaleStatus();
}

std::string Executor::firstNonFinite() const { return impl->firstNonFinite(); }

const plan::Plan &Executor::plan() const { return impl->plan; }

Precision Executor::precision() const { return impl->precision; }

} // namespace ampc::cpu
