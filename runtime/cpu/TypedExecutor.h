//===- TypedExecutor.h - The CPU executor for one compute type --*- C++ -*-===//
//
// cpu::Executor (Executor.h) is a pimpl: its methods forward to an
// Executor::Impl, the precision-independent interface declared here, which
// TypedExecutor<T> implements for compute type T (float for Precision::F32,
// double for F64). TypedExecutor owns one storage slot per plan buffer and
// runs an instruction list over them: buffer access, parameter and input
// data, the instruction loop with its freeing of dead temporaries and its
// rounding of results to their dtypes are defined in this header; execute()
// and the forward instructions in Executor.cpp; the optimizer step, the
// loss-scale state, parameter copies, non-finite tracking and the training
// instructions (executeTraining) in ExecutorTraining.cpp, which instantiates
// the class for both compute types. Private to runtime/cpu.
//
//===----------------------------------------------------------------------===//

#ifndef AMPC_RUNTIME_CPU_TYPEDEXECUTOR_H
#define AMPC_RUNTIME_CPU_TYPEDEXECUTOR_H

#include "runtime/cpu/Executor.h"
#include "runtime/cpu/Kernels.h"
#include "runtime/cpu/ThreadPool.h"
#include "runtime/numerics/Elementwise.h"
#include "runtime/numerics/Float16.h"
#include "runtime/numerics/LossScale.h"
#include "runtime/numerics/Philox.h"
#include "runtime/plan/PlanAttrs.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <type_traits>
#include <unordered_map>

#include <string>
#include <vector>

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
  Impl(const plan::Plan &plan, Precision precision) : plan(plan), precision(precision) {}
  virtual ~Impl() = default;
  virtual void initializeParameters(uint64_t seed) = 0;
  virtual void randomizeInputs(uint64_t seed) = 0;
  virtual void setInput(const std::string &name, const void *data, size_t bytes) = 0;
  virtual std::vector<double> values(uint32_t buffer) const = 0;
  virtual void setValues(uint32_t buffer, const std::vector<double> &values) = 0;
  virtual double run(const RunOptions &options) = 0;
  virtual double runOptimizerStep(const RunOptions &options) = 0;
  virtual double learningRate() const = 0;
  virtual void resetState() = 0;
  virtual void setBufferValues(uint32_t buffer, const std::vector<double> &values) = 0;
  virtual LossScaleStatus lossScaleStatus() const = 0;
  virtual std::string firstNonFinite() const = 0;

  /// Bytes of temporaries live at once during the last list run (at their
  /// dtype's size), and their sum over that list.
  int64_t peakTemporaryBytes = 0;

  const plan::Plan plan;
  const Precision precision;
};

namespace detail {

/// Stream-id offset that separates input data from parameters of the same
/// name.
constexpr uint32_t kInputStreamSalt = 0x9e3779b9u;

/// Elements per parallel chunk for cheap per-element passes.
constexpr int64_t kElementGrain = 1 << 15;

/// The Philox stream of a parameter or input name (Executor.cpp).
uint32_t nameStream(const std::string &name);

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
    if constexpr (std::is_same_v<T, float>) {
      if (bf16)
        kernels::roundFloatsToBF16(data + begin, end - begin);
      else
        kernels::roundFloatsToF16(data + begin, end - begin);
    } else {
      for (int64_t i = begin; i < end; ++i)
        data[i] = bf16 ? numerics::roundToBF16(data[i]) : numerics::roundToF16(data[i]);
    }
  });
}

/// The window of a validated convolution or pooling instruction (a convolution's kernel is
/// \p convKernel, its weight's [KH, KW]).
inline plan::Window2d instructionWindow(const plan::Instruction &instruction,
                                        const std::vector<int64_t> &convKernel) {
  std::string error;
  std::optional<plan::Window2d> window = plan::window2dOf(instruction, convKernel, error);
  if (!window)
    throw plan::PlanError(error);
  return *window;
}

/// The elements of one image and channel of an [N, C, ...] tensor (0 when N or C is).
inline int64_t innerExtent(const Shape &shape) {
  return shape[0] * shape[1] == 0 ? 0 : plan::numElements(shape) / (shape[0] * shape[1]);
}

/// A clip instruction's bound \p key, or -inf / +inf (\p sign) when it has none.
template <typename T>
T clipBound(const plan::Instruction &instruction, const plan::AttrKey<double> &key, int sign) {
  if (plan::has(instruction, key))
    return static_cast<T>(plan::get(instruction, key));
  return sign * std::numeric_limits<T>::infinity();
}

/// Reads a little-endian unsigned integer (Executor.cpp).
uint64_t readLittleEndian(const uint8_t *bytes, size_t size);

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
    for (const plan::Constant &constant : plan.constants) {
      if (!plan::isSplat(plan, constant)) {
        decodeInto(constant.buffer, constant.bytes.data());
        continue;
      }
      // A splat: one element, repeated.
      Slot &slot = slots[constant.buffer];
      const Buffer &buffer = plan.buffers[constant.buffer];
      decodeInto(slot, buffer.dtype, 1, constant.bytes.data());
      const int64_t count = plan::numElements(buffer);
      if (plan::isIntegerDType(buffer.dtype))
        slot.integer.assign(static_cast<size_t>(count), slot.integer[0]);
      else
        slot.real.assign(static_cast<size_t>(count), slot.real[0]);
    }
    resetState();
  }

  void initializeParameters(uint64_t seed) override {
    for (const plan::Parameter &parameter : plan.parameters) {
      const Buffer &buffer = plan.buffers[parameter.buffer];
      std::vector<T> &data = slots[parameter.buffer].real;
      data.resize(plan::numElements(buffer));
      const uint32_t stream = nameStream(parameter.name);
      parallelFor(static_cast<int64_t>(data.size()), 1 << 12, [&](int64_t begin, int64_t end) {
        for (int64_t e = begin; e < end; ++e)
          data[e] = storedValue<T>(initialValue(parameter, seed, stream, e), buffer.dtype);
      });
      slots[parameter.buffer].ready = true;
    }
    for (const plan::ParameterCopy &copy : plan.parameterCopies)
      refreshCopy(copy.source);
  }

  void randomizeInputs(uint64_t seed) override {
    // Check first, so a failure leaves every input as it was.
    for (const plan::Input &input : plan.inputs)
      if (plan::isIntegerDType(plan.buffers[input.buffer].dtype) && input.bound == 0)
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
          numerics::PhiloxBlock out = numerics::philoxForElement(seed, 0, stream, e);
          const uint64_t bits = (static_cast<uint64_t>(out.word[1]) << 32) | out.word[0];
          slot.integer[e] = static_cast<int64_t>(bits % bound);
        }
      } else {
        // Data as if supplied with setInput: representable in the input's
        // dtype (f32 included), so F32 and F64 runs see identical inputs.
        slot.real.resize(count);
        for (int64_t e = 0; e < count; ++e) {
          const double z = numerics::standardNormal(seed, 0, stream, e);
          slot.real[e] =
              storedValue<T>(buffer.dtype == DType::F32 ? static_cast<float>(z) : z, buffer.dtype);
        }
      }
      slot.ready = true;
    }
  }

  void setInput(const std::string &name, const void *data, size_t bytes) override {
    auto it = inputIndex.find(name);
    if (it == inputIndex.end())
      throw ExecutionError("setInput: the plan has no input named '" + name + "'");
    const plan::Input &input = plan.inputs[it->second];
    const Buffer &buffer = plan.buffers[input.buffer];
    const size_t expected =
        static_cast<size_t>(plan::numElements(buffer)) * plan::dtypeBytes(buffer.dtype);
    if (bytes != expected)
      throw ExecutionError("setInput: input '" + name + "' (" + plan::dtypeName(buffer.dtype) +
                           " " + plan::shapeToString(buffer.shape) + ") needs " +
                           std::to_string(expected) + " bytes, got " + std::to_string(bytes));
    Slot candidate;
    decodeInto(candidate, buffer.dtype, plan::numElements(buffer),
               static_cast<const uint8_t *>(data));
    if (input.bound > 0)
      for (size_t i = 0; i < candidate.integer.size(); ++i)
        if (candidate.integer[i] < 0 || candidate.integer[i] >= input.bound)
          throw ExecutionError("setInput: input '" + name + "' has value " +
                               std::to_string(candidate.integer[i]) + " at index " +
                               std::to_string(i) + ", outside its range [0, " +
                               std::to_string(input.bound) + ")");
    slots[input.buffer] = std::move(candidate);
  }

  std::vector<double> values(uint32_t id) const override {
    if (id >= slots.size())
      throw ExecutionError("buffer " + std::to_string(id) + " is out of range (the plan has " +
                           std::to_string(slots.size()) + " buffers)");
    const Slot &slot = slots[id];
    if (!slot.ready)
      throw ExecutionError("buffer " + std::to_string(id) + " ('" + plan.buffers[id].name +
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
                           std::to_string(plan::numElements(buffer)) + " elements, got " +
                           std::to_string(values.size()) + " values");
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
    if (options.forwardOnly) {
      if (!forwardCount)
        forwardCount = plan::forwardInstructionCount(plan);
      runList(plan.instructions, microLastUse, options, "", false, forwardCount);
      return static_cast<double>(slots[plan.loss].real.at(0));
    }
    // The non-finite record covers the micro steps of one optimizer step.
    if (clearNonFinite) {
      nonFinite.clear();
      clearNonFinite = false;
    }
    runList(plan.instructions, microLastUse, options, "", plan.debugNonFinite);
    if (options.injectNonFinite && scaled())
      slots[plan.lossScaling.foundNonFinite].real.at(0) = T(1);
    return static_cast<double>(slots[plan.loss].real.at(0));
  }

  // The training step: defined in ExecutorTraining.cpp.
  double runOptimizerStep(const RunOptions &options) override;
  double learningRate() const override;
  void resetState() override;
  LossScaleStatus lossScaleStatus() const override;

  std::string firstNonFinite() const override { return nonFinite; }

  void setBufferValues(uint32_t id, const std::vector<double> &values) override {
    if (id >= slots.size())
      throw ExecutionError("setBufferValues: buffer " + std::to_string(id) +
                           " is out of range (the plan has " + std::to_string(slots.size()) +
                           " buffers)");
    const BufferRole role = plan.buffers[id].role;
    if (role != BufferRole::Parameter && role != BufferRole::State && role != BufferRole::Input)
      throw ExecutionError("setBufferValues: buffer " + std::to_string(id) + " ('" +
                           plan.buffers[id].name + "') is a " + plan::bufferRoleName(role) +
                           "; only parameter, state and input buffers can "
                           "be set");
    setValues(id, values);
  }

private:
  struct Slot {
    std::vector<T> real;
    std::vector<int64_t> integer;
    bool ready = false;
    bool empty() const { return real.empty() && integer.empty(); }
  };

  /// Whether the plan scales its loss.
  bool scaled() const { return plan.lossScaling.mode != plan::LossScaleMode::None; }

  void refreshCopy(uint32_t source);

  /// The initial value of element \p e of \p parameter, in double.
  static double initialValue(const plan::Parameter &parameter, uint64_t seed, uint32_t stream,
                             int64_t e) {
    switch (parameter.init) {
    case plan::InitKind::Zeros:
      return 0.0;
    case plan::InitKind::Ones:
      return 1.0;
    case plan::InitKind::Normal:
      return parameter.a + parameter.b * numerics::standardNormal(seed, 0, stream, e);
    case plan::InitKind::Uniform:
      return parameter.a + (parameter.b - parameter.a) * numerics::uniform01(seed, 0, stream, e);
    case plan::InitKind::Given:
      return parameter.values[e]; // the seed does not change given values
    }
    return 0.0;
  }

  /// Decodes \p count little-endian elements of \p dtype into \p slot.
  static void decodeInto(Slot &slot, DType dtype, int64_t count, const uint8_t *bytes) {
    const size_t width = plan::dtypeBytes(dtype);
    if (plan::isIntegerDType(dtype)) {
      slot.integer.resize(count);
      for (int64_t i = 0; i < count; ++i) {
        const uint64_t raw = readLittleEndian(bytes + i * width, width);
        slot.integer[i] = dtype == DType::I32 ? static_cast<int32_t>(static_cast<uint32_t>(raw))
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
    decodeInto(slots[id], plan.buffers[id].dtype, plan::numElements(plan.buffers[id]), bytes);
  }

  /// Index of the last instruction of \p list reading each buffer (-1:
  /// never read).
  std::vector<int64_t> lastUses(const std::vector<Instruction> &list) const {
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

  /// Bytes of buffer \p id at its dtype's size (what a device arena holds).
  int64_t storedBytes(uint32_t id) const {
    return plan::numElements(plan.buffers[id]) *
           static_cast<int64_t>(plan::dtypeBytes(plan.buffers[id].dtype));
  }

  /// A temporary freed once \p index has run: read last there, or never.
  bool diesAt(uint32_t id, size_t index, const std::vector<int64_t> &lastUse) const {
    return plan.buffers[id].role == BufferRole::Temporary && !isKept(id) &&
           lastUse[id] <= static_cast<int64_t>(index);
  }

  /// Frees temporaries whose last reader in its list was instruction
  /// \p index, and results nothing reads. Parameters and state are never
  /// freed.
  void releaseDead(const Instruction &instruction, size_t index,
                   const std::vector<int64_t> &lastUse) {
    for (const auto *ids : {&instruction.operands, &instruction.results})
      for (uint32_t id : *ids)
        if (diesAt(id, index, lastUse) && !slots[id].empty()) {
          liveTemporaryBytes -= storedBytes(id);
          recycle(slots[id].real);
          slots[id] = Slot();
        }
  }

  /// When temporaries are freed, an instruction that can work in place takes
  /// over the storage of an operand it reads last instead of allocating: a
  /// reshape (same elements) and cross_entropy_grad (its kernel reads each
  /// logit before writing that gradient). Returns the operand adopted.
  std::optional<uint32_t> adoptOperand(const Instruction &instruction, size_t index,
                                       const std::vector<int64_t> &lastUse) {
    if (instruction.op != OpCode::Reshape && instruction.op != OpCode::CrossEntropyGrad)
      return std::nullopt;
    uint32_t operand = instruction.operands[0];
    uint32_t result = instruction.results[0];
    if (!diesAt(operand, index, lastUse) || plan.buffers[result].role != BufferRole::Temporary ||
        plan.buffers[operand].dtype != plan.buffers[result].dtype ||
        plan::numElements(plan.buffers[operand]) != plan::numElements(plan.buffers[result]) ||
        slots[operand].empty() ||
        std::count(instruction.operands.begin(), instruction.operands.end(), operand) != 1)
      return std::nullopt;
    slots[result] = std::move(slots[operand]);
    slots[operand] = Slot();
    return operand;
  }

  void requireParameters() const {
    for (const plan::Parameter &parameter : plan.parameters)
      if (!slots[parameter.buffer].ready)
        throw ExecutionError("parameter '" + parameter.name +
                             "' has no values: call initializeParameters or "
                             "setParameterValues first");
  }

  void requireTrainingPlan(const char *what) const;

  /// Executes \p list in order. Its temporaries are invalidated first, so
  /// a stale value from an earlier run can never be read.
  /// With \p checkNonFinite, the first instruction whose float results hold
  /// an inf or NaN is remembered in nonFinite (if it is still empty).
  void runList(const std::vector<Instruction> &list, const std::vector<int64_t> &lastUse,
               const RunOptions &options, const char *listName, bool checkNonFinite,
               size_t end = std::numeric_limits<size_t>::max()) {
    end = std::min(end, list.size());
    for (const Instruction &instruction : list)
      for (uint32_t result : instruction.results)
        if (plan.buffers[result].role == BufferRole::Temporary)
          slots[result].ready = false;
    if (options.instructionSeconds)
      options.instructionSeconds->assign(list.size(), 0.0);
    liveTemporaryBytes = 0;
    peakTemporaryBytes = 0;
    for (size_t index = 0; index < end; ++index) {
      const Instruction &instruction = list[index];
      const auto start = std::chrono::steady_clock::now();
      std::optional<uint32_t> adopted;
      if (!options.keepTemporaries)
        adopted = adoptOperand(instruction, index, lastUse);
      for (uint32_t result : instruction.results)
        if (plan.buffers[result].role == BufferRole::Temporary &&
            !(adopted && result == instruction.results[0]))
          liveTemporaryBytes += storedBytes(result);
      peakTemporaryBytes = std::max(peakTemporaryBytes, liveTemporaryBytes);
      try {
        if (!(adopted && instruction.op == OpCode::Reshape)) {
          adoptedLogits = adopted.has_value();
          execute(instruction, options);
          adoptedLogits = false;
        }
      } catch (const kernels::KernelError &error) {
        throw ExecutionError(listName + plan::describeInstruction(instruction, index) + ": " +
                             error.what());
      }
      for (uint32_t result : instruction.results) {
        Slot &slot = slots[result];
        if (plan::isFloatDType(plan.buffers[result].dtype))
          roundToStorage(slot.real.data(), static_cast<int64_t>(slot.real.size()),
                         plan.buffers[result].dtype);
        slot.ready = true;
      }
      if (checkNonFinite && nonFinite.empty() && producesNonFinite(instruction))
        nonFinite = listName + plan::describeInstruction(instruction, index);
      if (!options.keepTemporaries)
        releaseDead(instruction, index, lastUse);
      if (options.instructionSeconds)
        (*options.instructionSeconds)[index] =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    }
  }

  bool producesNonFinite(const Instruction &instruction) const;

  /// setValues for an integer buffer: whole numbers in the dtype's range
  /// (and an input's bound), checked before anything is stored.
  void setIntegerValues(uint32_t id, const std::vector<double> &values) {
    const Buffer &buffer = plan.buffers[id];
    int64_t bound = 0;
    for (const plan::Input &input : plan.inputs)
      if (input.buffer == id)
        bound = input.bound;
    const double low = buffer.dtype == DType::I32 ? -2147483648.0 : -9223372036854775808.0;
    const double high = buffer.dtype == DType::I32 ? 2147483648.0 : 9223372036854775808.0;
    std::vector<int64_t> data(values.size());
    for (size_t i = 0; i < values.size(); ++i) {
      const double value = values[i];
      if (!(value >= low && value < high) || value != std::trunc(value) ||
          (bound > 0 && (value < 0 || value >= static_cast<double>(bound))))
        throw ExecutionError(
            "'" + buffer.name + "' (" + plan::dtypeName(buffer.dtype) + ") cannot hold value " +
            std::to_string(value) + " at index " + std::to_string(i) +
            (bound > 0 ? ": values must be whole numbers in [0, " + std::to_string(bound) + ")"
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
    const size_t count = plan::numElements(plan.buffers[instruction.results[i]]);
    if (data.empty()) {
      auto spare = spareReal.find(count);
      if (spare != spareReal.end() && !spare->second.empty()) {
        // Zeroed as a fresh vector would be: kernels may rely on it.
        data = std::move(spare->second.back());
        spare->second.pop_back();
        spareBytes -= data.capacity() * sizeof(T);
        std::fill(data.begin(), data.end(), T(0));
        return data.data();
      }
    }
    data.resize(count);
    return data.data();
  }

  /// Keeps a dead temporary's storage for the next result of its size, up to
  /// kSpareLimit bytes in all. Every micro step allocates the same sizes in
  /// the same order, and taking fresh pages from the system (which clears
  /// them) cost more than a tenth of a GPT step.
  void recycle(std::vector<T> &data) {
    const size_t bytes = data.capacity() * sizeof(T);
    if (data.empty() || spareBytes + bytes > kSpareLimit)
      return;
    spareBytes += bytes;
    spareReal[data.size()].push_back(std::move(data));
  }
  static constexpr size_t kSpareLimit = size_t(1) << 31;
  std::unordered_map<size_t, std::vector<std::vector<T>>> spareReal;
  size_t spareBytes = 0;
  /// In-place operand \p i's storage, for writing.
  T *mutableReal(uint32_t id) { return slots[id].real.data(); }

  void execute(const Instruction &instruction, const RunOptions &options);
  template <typename E>
  void executeLayout(const Instruction &instruction, std::vector<E> Slot::*storage);
  void executeCast(const Instruction &instruction);
  void executeTraining(const Instruction &instruction, const RunOptions &options);
  void copyForRounding(uint32_t source, uint32_t copy);

  std::vector<Slot> slots;
  /// Bytes of temporaries holding storage now (runList).
  int64_t liveTemporaryBytes = 0;
  /// cross_entropy_grad runs in place: its result holds the logits.
  bool adoptedLogits = false;
  /// Per list, the index of the last instruction reading each buffer (-1:
  /// never read).
  std::vector<int64_t> microLastUse, optimizerLastUse;
  std::map<std::string, size_t> parameterIndex, inputIndex;
  /// Per buffer, the id of its parameter copy (-1: none).
  std::vector<int64_t> copyOf;
  /// plan::forwardInstructionCount, computed on the first forward-only run.
  size_t forwardCount = 0;
  /// The loss scaler's report after the last optimizer step (enabled and
  /// scale are filled in by lossScaleStatus).
  LossScaleStatus status;
  /// describeInstruction of the first non-finite result since the last
  /// optimizer step ("" if none).
  std::string nonFinite;
  /// Clear nonFinite when the next micro step starts.
  bool clearNonFinite = true;
};

} // namespace detail
} // namespace ampc::cpu

#endif // AMPC_RUNTIME_CPU_TYPEDEXECUTOR_H
