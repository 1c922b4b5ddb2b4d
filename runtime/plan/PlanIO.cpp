//===- PlanIO.cpp - Binary encoding of plans (docs/plan-format.md) --------===//
//
// The writer serialises into memory and writes once; the reader loads the
// whole stream and decodes it with bounds checks on every field, so a
// truncated or corrupted file produces a one-line PlanError instead of a
// crash or an absurd allocation. Integers and IEEE doubles are little-endian
// regardless of the host.
//
//===----------------------------------------------------------------------===//

#include "runtime/plan/Plan.h"

#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <set>

namespace ampc::plan {
namespace {

constexpr char kMagic[8] = {'A', 'M', 'P', 'C', 'P', 'L', 'A', 'N'};
constexpr size_t kHeaderBytes = 16;
constexpr size_t kSectionHeaderBytes = 16;
/// Section flag: a reader that does not know this section must reject the
/// plan rather than skip it.
constexpr uint32_t kSectionRequired = 1;

/// Section tags of format version 4, as their four ASCII bytes.
constexpr char kModelTag[5] = "MODL";
constexpr char kBuffersTag[5] = "BUFS";
constexpr char kParametersTag[5] = "PARM";
constexpr char kInputsTag[5] = "INPT";
constexpr char kConstantsTag[5] = "CNST";
constexpr char kInstructionsTag[5] = "INST";
constexpr char kOptimizerTag[5] = "OPTI";
constexpr char kPrecisionTag[5] = "PREC";
constexpr char kDeviceTag[5] = "DEVP";

/// Attribute value kinds on disk.
enum class AttrKind : uint8_t { Int = 0, Real = 1, IntList = 2 };

//===----------------------------------------------------------------------===//
// Writing
//===----------------------------------------------------------------------===//

/// Appends little-endian fields to a byte vector.
class ByteWriter {
public:
  void u8(uint8_t value) { bytes.push_back(value); }
  void u16(uint16_t value) { fixed(value, 2); }
  void u32(uint32_t value) { fixed(value, 4); }
  void u64(uint64_t value) { fixed(value, 8); }
  void i64(int64_t value) { fixed(static_cast<uint64_t>(value), 8); }
  void f32(float value) {
    uint32_t bits;
    std::memcpy(&bits, &value, sizeof bits);
    u32(bits);
  }
  void f64(double value) {
    uint64_t bits;
    std::memcpy(&bits, &value, sizeof bits);
    u64(bits);
  }
  void raw(const void *data, size_t size) {
    const auto *begin = static_cast<const uint8_t *>(data);
    bytes.insert(bytes.end(), begin, begin + size);
  }
  /// A u32 byte count, then the bytes.
  void string(const std::string &text) {
    u32(checkedCount(text.size(), "string"));
    raw(text.data(), text.size());
  }
  /// A u32 element count for a list of \p count elements.
  void count(size_t count) { u32(checkedCount(count, "list")); }

  std::vector<uint8_t> bytes;

private:
  void fixed(uint64_t value, int size) {
    for (int i = 0; i < size; ++i)
      bytes.push_back(static_cast<uint8_t>(value >> (8 * i)));
  }
  static uint32_t checkedCount(size_t count, const char *what) {
    if (count > UINT32_MAX)
      throw PlanError(std::string("cannot write plan: a ") + what + " of " +
                      std::to_string(count) +
                      " elements exceeds the format's 32-bit count");
    return static_cast<uint32_t>(count);
  }
};

void encodeModel(const Plan &plan, ByteWriter &out) {
  out.string(plan.modelName);
  out.u32(plan.loss);
  out.i64(plan.accumulationSteps);
  out.u32(plan.gradNorm);
  out.u32(plan.learningRate);
  out.string(plan.trainingSummary);
}

void encodeBuffers(const Plan &plan, ByteWriter &out) {
  out.count(plan.buffers.size());
  for (const Buffer &buffer : plan.buffers) {
    out.string(buffer.name);
    out.u8(static_cast<uint8_t>(buffer.dtype));
    out.u8(static_cast<uint8_t>(buffer.role));
    out.count(buffer.shape.size());
    for (int64_t dim : buffer.shape)
      out.i64(dim);
  }
}

void encodeParameters(const Plan &plan, ByteWriter &out) {
  out.count(plan.parameters.size());
  for (const Parameter &parameter : plan.parameters) {
    out.string(parameter.name);
    out.u32(parameter.buffer);
    out.u8(static_cast<uint8_t>(parameter.init));
    out.u8(parameter.weightDecay ? 1 : 0);
    out.f64(parameter.a);
    out.f64(parameter.b);
  }
}

void encodeInputs(const Plan &plan, ByteWriter &out) {
  out.count(plan.inputs.size());
  for (const Input &input : plan.inputs) {
    out.string(input.name);
    out.u32(input.buffer);
    out.i64(input.bound);
    out.u8(static_cast<uint8_t>(input.use));
  }
}

void encodeConstants(const Plan &plan, ByteWriter &out) {
  out.count(plan.constants.size());
  for (const Constant &constant : plan.constants) {
    out.u32(constant.buffer);
    out.u64(constant.bytes.size());
    out.raw(constant.bytes.data(), constant.bytes.size());
  }
}

/// An instruction list (INST and OPTI share the encoding).
void encodeInstructionList(const std::vector<Instruction> &instructions,
                           ByteWriter &out) {
  out.count(instructions.size());
  for (const Instruction &instruction : instructions) {
    out.u16(static_cast<uint16_t>(instruction.op));
    out.count(instruction.operands.size());
    for (uint32_t operand : instruction.operands)
      out.u32(operand);
    out.count(instruction.results.size());
    for (uint32_t result : instruction.results)
      out.u32(result);
    // std::map iterates in name order, so the encoding is deterministic.
    out.count(instruction.attrs.size());
    for (const auto &[name, value] : instruction.attrs) {
      out.string(name);
      if (const auto *integer = std::get_if<int64_t>(&value)) {
        out.u8(static_cast<uint8_t>(AttrKind::Int));
        out.i64(*integer);
      } else if (const auto *real = std::get_if<double>(&value)) {
        out.u8(static_cast<uint8_t>(AttrKind::Real));
        out.f64(*real);
      } else {
        const auto &list = std::get<std::vector<int64_t>>(value);
        out.u8(static_cast<uint8_t>(AttrKind::IntList));
        out.count(list.size());
        for (int64_t element : list)
          out.i64(element);
      }
    }
    out.string(instruction.location);
  }
}

void encodeInstructions(const Plan &plan, ByteWriter &out) {
  encodeInstructionList(plan.instructions, out);
}

void encodeOptimizer(const Plan &plan, ByteWriter &out) {
  encodeInstructionList(plan.optimizerInstructions, out);
}

/// Mixed precision: parameter copies, loss scaling, the non-finite check.
void encodePrecision(const Plan &plan, ByteWriter &out) {
  out.count(plan.parameterCopies.size());
  for (const ParameterCopy &copy : plan.parameterCopies) {
    out.u32(copy.buffer);
    out.u32(copy.source);
  }
  const LossScaling &scaling = plan.lossScaling;
  out.u8(static_cast<uint8_t>(scaling.mode));
  out.f32(scaling.initialScale);
  out.f32(scaling.growthFactor);
  out.f32(scaling.backoffFactor);
  out.i64(scaling.growthInterval);
  out.f32(scaling.minScale);
  out.u32(scaling.scale);
  out.u32(scaling.growthTracker);
  out.u32(scaling.foundNonFinite);
  out.u32(scaling.appliedSteps);
  out.u32(scaling.floorHits);
  out.u8(plan.debugNonFinite ? 1 : 0);
}

//===----------------------------------------------------------------------===//
// The device program (DEVP)
//===----------------------------------------------------------------------===//

/// Step kinds on disk, in DeviceStep's variant order.
enum class StepKind : uint8_t { Launch = 0, Matmul = 1, Attention = 2, Memset = 3 };

void encodeBytes(const std::vector<uint8_t> &bytes, ByteWriter &out) {
  out.count(bytes.size());
  out.raw(bytes.data(), bytes.size());
}

void encodeArgument(const DeviceArgument &arg, ByteWriter &out) {
  out.u8(static_cast<uint8_t>(arg.kind));
  out.string(arg.name);
  switch (arg.kind) {
  case ArgKind::Buffer:
    out.u32(arg.buffer);
    out.u8(static_cast<uint8_t>(arg.access));
    break;
  case ArgKind::Int64:
    out.i64(arg.value);
    break;
  case ArgKind::Scratch:
    out.i64(arg.value);
    out.u64(arg.bytes);
    out.u8(static_cast<uint8_t>(arg.access));
    break;
  case ArgKind::Table:
    out.u8(static_cast<uint8_t>(arg.table.kind));
    out.count(arg.table.entries.size());
    for (const TableEntry &entry : arg.table.entries) {
      for (uint32_t id : {entry.param, entry.grad, entry.firstMoment,
                          entry.secondMoment, entry.copy})
        out.u32(id);
      out.i64(entry.elements);
      out.i64(entry.firstBlock);
      for (float value : {entry.beta1, entry.beta2, entry.eps,
                          entry.weightDecay, entry.clipNorm, entry.momentum})
        out.f32(value);
    }
    break;
  case ArgKind::Seed:
  case ArgKind::Step:
  case ArgKind::TotalSteps:
  case ArgKind::ErrorRecord:
    break;
  }
}

void encodeStep(const DeviceStep &step, ByteWriter &out) {
  out.u8(static_cast<uint8_t>(step.index()));
  if (const auto *launch = std::get_if<LaunchStep>(&step)) {
    out.u32(launch->kernel);
    for (uint32_t size : launch->grid)
      out.u32(size);
    for (uint32_t size : launch->block)
      out.u32(size);
    out.u8(static_cast<uint8_t>(launch->space));
    out.i64(launch->elements);
    out.i64(launch->rows);
    out.i64(launch->rowLength);
    out.u32(launch->vectorWidth);
    out.count(launch->args.size());
    for (const DeviceArgument &arg : launch->args)
      encodeArgument(arg, out);
  } else if (const auto *matmul = std::get_if<MatmulStep>(&step)) {
    for (uint32_t id :
         {matmul->a, matmul->b, matmul->d, matmul->c, matmul->bias, matmul->aux})
      out.u32(id);
    out.u8(matmul->transA ? 1 : 0);
    out.u8(matmul->transB ? 1 : 0);
    for (int64_t value : {matmul->m, matmul->n, matmul->k, matmul->batch,
                          matmul->strideA, matmul->strideB, matmul->strideD})
      out.i64(value);
    out.u8(matmul->computeType);
    out.u8(static_cast<uint8_t>(matmul->epilogue));
    out.f32(matmul->alpha);
    out.f32(matmul->beta);
  } else if (const auto *attention = std::get_if<AttentionStep>(&step)) {
    out.u8(static_cast<uint8_t>(attention->pass));
    for (uint32_t id : {attention->q, attention->k, attention->v, attention->out,
                        attention->dOut, attention->dq, attention->dk, attention->dv})
      out.u32(id);
    for (int64_t value : {attention->batch, attention->heads, attention->queries,
                          attention->keys, attention->headDim})
      out.i64(value);
    out.u8(attention->causal ? 1 : 0);
    out.f32(attention->scale);
    for (uint32_t kernel : {attention->forwardKernel, attention->deltaKernel,
                            attention->dqKernel, attention->dkdvKernel})
      out.u32(kernel);
    out.u64(attention->lseOffset);
    out.u64(attention->outOffset);
    out.u64(attention->deltaOffset);
  } else {
    out.u32(std::get<MemsetStep>(step).buffer);
  }
}

void encodeDeviceFunction(const DeviceFunction &function, ByteWriter &out) {
  out.u64(function.arenaBytes);
  out.u64(function.scratchBytes);
  out.count(function.placements.size());
  for (const ArenaPlacement &placement : function.placements) {
    out.u32(placement.buffer);
    out.u64(placement.offset);
    out.u32(placement.reuses);
  }
  out.count(function.views.size());
  for (const BufferView &view : function.views) {
    out.u32(view.buffer);
    out.u32(view.source);
  }
  out.count(function.groups.size());
  for (const DeviceGroup &group : function.groups) {
    out.string(group.kind);
    out.count(group.instructions.size());
    for (uint32_t index : group.instructions)
      out.u32(index);
    out.count(group.steps.size());
    for (const DeviceStep &step : group.steps)
      encodeStep(step, out);
  }
}

void encodeDevice(const Plan &plan, ByteWriter &out) {
  const DeviceProgram &device = plan.device;
  out.count(device.modules.size());
  for (const DeviceModule &module : device.modules) {
    out.string(module.name);
    encodeBytes(module.cubinSm80, out);
    encodeBytes(module.cubinSm90, out);
    out.string(module.ptx);
  }
  out.count(device.kernels.size());
  for (const DeviceKernel &kernel : device.kernels) {
    out.u32(kernel.module);
    out.string(kernel.entry);
  }
  encodeDeviceFunction(device.microStep, out);
  encodeDeviceFunction(device.optimizerStep, out);
}

/// Appends one section: tag, flags, payload length, payload.
void appendSection(ByteWriter &file, const char *tag, uint32_t flags,
                   void (*encode)(const Plan &, ByteWriter &),
                   const Plan &plan) {
  ByteWriter payload;
  encode(plan, payload);
  file.raw(tag, 4);
  file.u32(flags);
  file.u64(payload.bytes.size());
  file.raw(payload.bytes.data(), payload.bytes.size());
}

//===----------------------------------------------------------------------===//
// Reading
//===----------------------------------------------------------------------===//

/// Decodes little-endian fields from [begin, end) of the file, with a bounds
/// check on every read; `context` names what is being read for diagnostics.
class ByteReader {
public:
  ByteReader(const uint8_t *file, size_t begin, size_t end, std::string context)
      : file(file), offset(begin), end(end), context(std::move(context)) {}

  uint8_t u8(const char *what) { return static_cast<uint8_t>(fixed(1, what)); }
  uint16_t u16(const char *what) {
    return static_cast<uint16_t>(fixed(2, what));
  }
  uint32_t u32(const char *what) {
    return static_cast<uint32_t>(fixed(4, what));
  }
  uint64_t u64(const char *what) { return fixed(8, what); }
  int64_t i64(const char *what) { return static_cast<int64_t>(fixed(8, what)); }
  float f32(const char *what) {
    uint32_t bits = static_cast<uint32_t>(fixed(4, what));
    float value;
    std::memcpy(&value, &bits, sizeof value);
    return value;
  }
  double f64(const char *what) {
    uint64_t bits = fixed(8, what);
    double value;
    std::memcpy(&value, &bits, sizeof value);
    return value;
  }
  std::string string(const char *what) {
    uint32_t size = u32(what);
    need(size, what);
    std::string text(reinterpret_cast<const char *>(file + offset), size);
    offset += size;
    return text;
  }
  /// A u32 element count, checked against the bytes left: each element
  /// occupies at least \p minElementBytes, so a corrupted count fails here
  /// instead of allocating gigabytes.
  uint32_t count(const char *what, size_t minElementBytes) {
    uint32_t count = u32(what);
    if (minElementBytes && count > remaining() / minElementBytes)
      fail(std::string(what) + " " + std::to_string(count) +
           " needs at least " + std::to_string(count * minElementBytes) +
           " bytes, but only " + std::to_string(remaining()) + " remain");
    return count;
  }
  void bytesInto(std::vector<uint8_t> &bytes, uint64_t size, const char *what) {
    need(size, what);
    bytes.assign(file + offset, file + offset + size);
    offset += size;
  }
  size_t remaining() const { return end - offset; }
  size_t position() const { return offset; }
  void skip(size_t size) { offset += size; }

  [[noreturn]] void fail(const std::string &message) const {
    throw PlanError("malformed plan: " + context + ": " + message);
  }

private:
  void need(uint64_t size, const char *what) const {
    if (size > remaining())
      throw PlanError("plan truncated: " + context + ": " + what + " needs " +
                      std::to_string(size) + " bytes at offset " +
                      std::to_string(offset) + ", only " +
                      std::to_string(remaining()) + " left");
  }
  uint64_t fixed(int size, const char *what) {
    need(size, what);
    uint64_t value = 0;
    for (int i = 0; i < size; ++i)
      value |= static_cast<uint64_t>(file[offset + i]) << (8 * i);
    offset += size;
    return value;
  }

  const uint8_t *file;
  size_t offset;
  size_t end;
  std::string context;
};

template <typename Enum>
Enum decodeEnum(ByteReader &in, uint64_t code, uint64_t limit,
                const char *what) {
  if (code >= limit)
    in.fail(std::string("bad ") + what + " code " + std::to_string(code));
  return static_cast<Enum>(code);
}

void decodeModel(ByteReader &in, Plan &plan) {
  plan.modelName = in.string("model name");
  plan.loss = in.u32("loss buffer");
  plan.accumulationSteps = in.i64("accumulation steps");
  plan.gradNorm = in.u32("grad norm buffer");
  plan.learningRate = in.u32("learning rate buffer");
  plan.trainingSummary = in.string("training summary");
}

void decodeBuffers(ByteReader &in, Plan &plan) {
  uint32_t count = in.count("buffer count", 10);
  plan.buffers.resize(count);
  for (Buffer &buffer : plan.buffers) {
    buffer.name = in.string("buffer name");
    buffer.dtype = decodeEnum<DType>(in, in.u8("dtype"), 5, "dtype");
    buffer.role = decodeEnum<BufferRole>(in, in.u8("role"), 6, "buffer role");
    uint32_t rank = in.count("buffer rank", 8);
    buffer.shape.resize(rank);
    for (int64_t &dim : buffer.shape)
      dim = in.i64("dimension");
  }
}

void decodeParameters(ByteReader &in, Plan &plan) {
  uint32_t count = in.count("parameter count", 26);
  plan.parameters.resize(count);
  for (Parameter &parameter : plan.parameters) {
    parameter.name = in.string("parameter name");
    parameter.buffer = in.u32("parameter buffer");
    parameter.init = decodeEnum<InitKind>(in, in.u8("init"), 4, "init kind");
    uint8_t decay = in.u8("weight decay flag");
    if (decay > 1)
      in.fail("bad weight decay flag " + std::to_string(decay));
    parameter.weightDecay = decay == 1;
    parameter.a = in.f64("init argument a");
    parameter.b = in.f64("init argument b");
  }
}

void decodeInputs(ByteReader &in, Plan &plan) {
  uint32_t count = in.count("input count", 17);
  plan.inputs.resize(count);
  for (Input &input : plan.inputs) {
    input.name = in.string("input name");
    input.buffer = in.u32("input buffer");
    input.bound = in.i64("input bound");
    input.use = decodeEnum<InputUse>(in, in.u8("input use"), 3, "input use");
  }
}

void decodeConstants(ByteReader &in, Plan &plan) {
  uint32_t count = in.count("constant count", 12);
  plan.constants.resize(count);
  for (Constant &constant : plan.constants) {
    constant.buffer = in.u32("constant buffer");
    uint64_t size = in.u64("constant byte count");
    in.bytesInto(constant.bytes, size, "constant data");
  }
}

void decodeInstructionList(ByteReader &in,
                           std::vector<Instruction> &instructions) {
  uint32_t count = in.count("instruction count", 18);
  instructions.resize(count);
  for (Instruction &instruction : instructions) {
    instruction.op =
        decodeEnum<OpCode>(in, in.u16("opcode"), kNumOpCodes, "opcode");
    instruction.operands.resize(in.count("operand count", 4));
    for (uint32_t &operand : instruction.operands)
      operand = in.u32("operand");
    instruction.results.resize(in.count("result count", 4));
    for (uint32_t &result : instruction.results)
      result = in.u32("result");
    uint32_t attrCount = in.count("attribute count", 5);
    for (uint32_t i = 0; i < attrCount; ++i) {
      std::string name = in.string("attribute name");
      auto kind = decodeEnum<AttrKind>(in, in.u8("attribute kind"), 3,
                                       "attribute kind");
      AttrValue value;
      if (kind == AttrKind::Int) {
        value = in.i64("integer attribute");
      } else if (kind == AttrKind::Real) {
        value = in.f64("real attribute");
      } else {
        std::vector<int64_t> list(in.count("attribute list length", 8));
        for (int64_t &element : list)
          element = in.i64("attribute list element");
        value = std::move(list);
      }
      if (!instruction.attrs.emplace(name, std::move(value)).second)
        in.fail("attribute '" + name + "' appears twice");
    }
    instruction.location = in.string("location");
  }
}

void decodeInstructions(ByteReader &in, Plan &plan) {
  decodeInstructionList(in, plan.instructions);
}

void decodeOptimizer(ByteReader &in, Plan &plan) {
  decodeInstructionList(in, plan.optimizerInstructions);
}

void decodePrecision(ByteReader &in, Plan &plan) {
  uint32_t count = in.count("parameter copy count", 8);
  plan.parameterCopies.resize(count);
  for (ParameterCopy &copy : plan.parameterCopies) {
    copy.buffer = in.u32("parameter copy buffer");
    copy.source = in.u32("parameter copy source");
  }
  LossScaling &scaling = plan.lossScaling;
  scaling.mode = decodeEnum<LossScaleMode>(in, in.u8("loss scale mode"), 3,
                                           "loss scale mode");
  scaling.initialScale = in.f32("initial loss scale");
  scaling.growthFactor = in.f32("loss scale growth factor");
  scaling.backoffFactor = in.f32("loss scale backoff factor");
  scaling.growthInterval = in.i64("loss scale growth interval");
  scaling.minScale = in.f32("minimum loss scale");
  scaling.scale = in.u32("loss scale buffer");
  scaling.growthTracker = in.u32("growth tracker buffer");
  scaling.foundNonFinite = in.u32("found non-finite buffer");
  scaling.appliedSteps = in.u32("applied steps buffer");
  scaling.floorHits = in.u32("floor hits buffer");
  uint8_t debug = in.u8("debug non-finite flag");
  if (debug > 1)
    in.fail("bad debug non-finite flag " + std::to_string(debug));
  plan.debugNonFinite = debug == 1;
}

template <typename T>
T decodeFlag(ByteReader &in, const char *what) {
  uint8_t flag = in.u8(what);
  if (flag > 1)
    in.fail(std::string("bad ") + what + " " + std::to_string(flag));
  return static_cast<T>(flag);
}

void decodeArgument(ByteReader &in, DeviceArgument &arg) {
  arg.kind = decodeEnum<ArgKind>(in, in.u8("argument kind"), 8, "argument kind");
  arg.name = in.string("argument name");
  switch (arg.kind) {
  case ArgKind::Buffer:
    arg.buffer = in.u32("argument buffer");
    arg.access = decodeEnum<Access>(in, in.u8("access"), 3, "access");
    break;
  case ArgKind::Int64:
    arg.value = in.i64("argument value");
    break;
  case ArgKind::Scratch:
    arg.value = in.i64("scratch offset");
    arg.bytes = in.u64("scratch bytes");
    arg.access = decodeEnum<Access>(in, in.u8("access"), 3, "access");
    break;
  case ArgKind::Table: {
    arg.table.kind =
        decodeEnum<TableKind>(in, in.u8("table kind"), 2, "table kind");
    arg.table.entries.resize(in.count("table entry count", 60));
    for (TableEntry &entry : arg.table.entries) {
      for (uint32_t *id : {&entry.param, &entry.grad, &entry.firstMoment,
                           &entry.secondMoment, &entry.copy})
        *id = in.u32("table entry buffer");
      entry.elements = in.i64("table entry elements");
      entry.firstBlock = in.i64("table entry first block");
      for (float *value : {&entry.beta1, &entry.beta2, &entry.eps,
                           &entry.weightDecay, &entry.clipNorm, &entry.momentum})
        *value = in.f32("table entry hyper-parameter");
    }
    break;
  }
  case ArgKind::Seed:
  case ArgKind::Step:
  case ArgKind::TotalSteps:
  case ArgKind::ErrorRecord:
    break;
  }
}

DeviceStep decodeStep(ByteReader &in) {
  auto kind = decodeEnum<StepKind>(in, in.u8("step kind"), 4, "device step kind");
  switch (kind) {
  case StepKind::Launch: {
    LaunchStep launch;
    launch.kernel = in.u32("kernel index");
    for (uint32_t &size : launch.grid)
      size = in.u32("grid size");
    for (uint32_t &size : launch.block)
      size = in.u32("block size");
    launch.space =
        decodeEnum<LaunchSpace>(in, in.u8("launch space"), 5, "launch space");
    launch.elements = in.i64("launch elements");
    launch.rows = in.i64("launch rows");
    launch.rowLength = in.i64("launch row length");
    launch.vectorWidth = in.u32("vector width");
    launch.args.resize(in.count("argument count", 5));
    for (DeviceArgument &arg : launch.args)
      decodeArgument(in, arg);
    return launch;
  }
  case StepKind::Matmul: {
    MatmulStep matmul;
    for (uint32_t *id : {&matmul.a, &matmul.b, &matmul.d, &matmul.c,
                         &matmul.bias, &matmul.aux})
      *id = in.u32("matmul buffer");
    matmul.transA = decodeFlag<bool>(in, "transpose flag");
    matmul.transB = decodeFlag<bool>(in, "transpose flag");
    for (int64_t *value : {&matmul.m, &matmul.n, &matmul.k, &matmul.batch,
                           &matmul.strideA, &matmul.strideB, &matmul.strideD})
      *value = in.i64("matmul size");
    matmul.computeType = in.u8("compute type");
    if (matmul.computeType != 0)
      in.fail("bad compute type code " + std::to_string(matmul.computeType));
    matmul.epilogue =
        decodeEnum<Epilogue>(in, in.u8("epilogue"), 5, "matmul epilogue");
    matmul.alpha = in.f32("alpha");
    matmul.beta = in.f32("beta");
    return matmul;
  }
  case StepKind::Attention: {
    AttentionStep attention;
    attention.pass =
        decodeEnum<AttentionPass>(in, in.u8("attention pass"), 2, "attention pass");
    for (uint32_t *id : {&attention.q, &attention.k, &attention.v,
                         &attention.out, &attention.dOut, &attention.dq,
                         &attention.dk, &attention.dv})
      *id = in.u32("attention buffer");
    for (int64_t *value : {&attention.batch, &attention.heads, &attention.queries,
                           &attention.keys, &attention.headDim})
      *value = in.i64("attention size");
    attention.causal = decodeFlag<bool>(in, "causal flag");
    attention.scale = in.f32("attention scale");
    for (uint32_t *kernel : {&attention.forwardKernel, &attention.deltaKernel,
                             &attention.dqKernel, &attention.dkdvKernel})
      *kernel = in.u32("attention kernel");
    attention.lseOffset = in.u64("lse offset");
    attention.outOffset = in.u64("output offset");
    attention.deltaOffset = in.u64("delta offset");
    return attention;
  }
  case StepKind::Memset:
    break;
  }
  MemsetStep memset;
  memset.buffer = in.u32("memset buffer");
  return memset;
}

void decodeDeviceFunction(ByteReader &in, DeviceFunction &function) {
  function.arenaBytes = in.u64("arena bytes");
  function.scratchBytes = in.u64("scratch bytes");
  function.placements.resize(in.count("placement count", 16));
  for (ArenaPlacement &placement : function.placements) {
    placement.buffer = in.u32("placed buffer");
    placement.offset = in.u64("arena offset");
    placement.reuses = in.u32("reused buffer");
  }
  function.views.resize(in.count("view count", 8));
  for (BufferView &view : function.views) {
    view.buffer = in.u32("view buffer");
    view.source = in.u32("view source");
  }
  function.groups.resize(in.count("group count", 12));
  for (DeviceGroup &group : function.groups) {
    group.kind = in.string("group kind");
    group.instructions.resize(in.count("covered instruction count", 4));
    for (uint32_t &index : group.instructions)
      index = in.u32("covered instruction");
    uint32_t steps = in.count("step count", 5);
    group.steps.reserve(steps);
    for (uint32_t i = 0; i < steps; ++i)
      group.steps.push_back(decodeStep(in));
  }
}

void decodeDevice(ByteReader &in, Plan &plan) {
  DeviceProgram &device = plan.device;
  device.modules.resize(in.count("module count", 16));
  for (DeviceModule &module : device.modules) {
    module.name = in.string("module name");
    in.bytesInto(module.cubinSm80, in.u32("sm_80 cubin size"), "sm_80 cubin");
    in.bytesInto(module.cubinSm90, in.u32("sm_90 cubin size"), "sm_90 cubin");
    module.ptx = in.string("PTX");
  }
  device.kernels.resize(in.count("kernel count", 8));
  for (DeviceKernel &kernel : device.kernels) {
    kernel.module = in.u32("kernel module");
    kernel.entry = in.string("kernel entry");
  }
  decodeDeviceFunction(in, device.microStep);
  decodeDeviceFunction(in, device.optimizerStep);
}

/// One known section: its tag and decoder.
struct SectionDecoder {
  const char *tag;
  void (*decode)(ByteReader &, Plan &);
};

constexpr SectionDecoder kSections[] = {
    {kModelTag, decodeModel},           {kBuffersTag, decodeBuffers},
    {kParametersTag, decodeParameters}, {kInputsTag, decodeInputs},
    {kConstantsTag, decodeConstants},   {kInstructionsTag, decodeInstructions},
    {kOptimizerTag, decodeOptimizer},   {kPrecisionTag, decodePrecision},
    {kDeviceTag, decodeDevice},
};

/// A printable form of a four-byte tag for diagnostics.
std::string printableTag(const uint8_t *tag) {
  std::string text;
  for (int i = 0; i < 4; ++i) {
    if (tag[i] >= 0x20 && tag[i] < 0x7f) {
      text += static_cast<char>(tag[i]);
    } else {
      char escaped[8];
      std::snprintf(escaped, sizeof escaped, "\\x%02x", tag[i]);
      text += escaped;
    }
  }
  return text;
}

Plan decodePlan(const std::vector<uint8_t> &file) {
  if (file.empty())
    throw PlanError("not an ampc plan: the input is empty");
  if (file.size() < sizeof kMagic ||
      std::memcmp(file.data(), kMagic, sizeof kMagic) != 0) {
    if (file.size() < sizeof kMagic &&
        std::memcmp(file.data(), kMagic, file.size()) == 0)
      throw PlanError("plan truncated: " + std::to_string(file.size()) +
                      " bytes, shorter than the 16-byte header");
    throw PlanError("not an ampc plan: the first 8 bytes are not \"AMPCPLAN\"");
  }
  ByteReader header(file.data(), 0, file.size(), "header");
  header.skip(sizeof kMagic);
  uint32_t version = header.u32("format version");
  if (version != kFormatVersion)
    throw PlanError("plan format version " + std::to_string(version) +
                    ", this runtime reads version " +
                    std::to_string(kFormatVersion) +
                    ": recompile the model with a matching ampc");
  uint32_t sectionCount = header.u32("section count");

  Plan plan;
  std::set<std::string> seen;
  size_t offset = kHeaderBytes;
  for (uint32_t index = 0; index < sectionCount; ++index) {
    if (file.size() - offset < kSectionHeaderBytes)
      throw PlanError("plan truncated: section " + std::to_string(index) +
                      " of " + std::to_string(sectionCount) +
                      " needs a 16-byte header at offset " +
                      std::to_string(offset) + ", only " +
                      std::to_string(file.size() - offset) + " left");
    ByteReader sectionHeader(file.data(), offset, file.size(),
                             "section " + std::to_string(index) + " header");
    sectionHeader.skip(4);
    const uint8_t *tagBytes = file.data() + offset;
    std::string tag = printableTag(tagBytes);
    uint32_t flags = sectionHeader.u32("section flags");
    uint64_t length = sectionHeader.u64("section length");
    offset += kSectionHeaderBytes;
    if (length > file.size() - offset)
      throw PlanError("plan truncated: section '" + tag + "' declares " +
                      std::to_string(length) + " bytes at offset " +
                      std::to_string(offset) + ", only " +
                      std::to_string(file.size() - offset) + " left");
    if (!seen.insert(tag).second)
      throw PlanError("malformed plan: section '" + tag + "' appears twice");

    const SectionDecoder *decoder = nullptr;
    for (const SectionDecoder &known : kSections)
      if (std::memcmp(known.tag, tagBytes, 4) == 0)
        decoder = &known;
    if (decoder) {
      ByteReader payload(file.data(), offset, offset + length,
                         "section '" + tag + "'");
      decoder->decode(payload, plan);
      if (payload.remaining() != 0)
        payload.fail(std::to_string(payload.remaining()) +
                     " unread bytes at the end of the section");
    } else if (flags & kSectionRequired) {
      throw PlanError("plan needs section '" + tag +
                      "', which this runtime does not understand: use an "
                      "ampc runtime that matches the compiler");
    }
    // An unknown optional section is skipped: later format revisions may add
    // data that this runtime does not need.
    offset += length;
  }
  if (offset != file.size())
    throw PlanError("malformed plan: " + std::to_string(file.size() - offset) +
                    " bytes after the last section");
  for (const SectionDecoder &known : kSections)
    if (!seen.count(known.tag))
      throw PlanError(std::string("plan truncated or incomplete: section '") +
                      known.tag + "' is missing");
  return plan;
}

} // namespace

void writePlan(const Plan &plan, std::ostream &out) {
  ByteWriter file;
  file.raw(kMagic, sizeof kMagic);
  file.u32(kFormatVersion);
  file.u32(static_cast<uint32_t>(std::size(kSections)));
  appendSection(file, kModelTag, kSectionRequired, encodeModel, plan);
  appendSection(file, kBuffersTag, kSectionRequired, encodeBuffers, plan);
  appendSection(file, kParametersTag, kSectionRequired, encodeParameters, plan);
  appendSection(file, kInputsTag, kSectionRequired, encodeInputs, plan);
  appendSection(file, kConstantsTag, kSectionRequired, encodeConstants, plan);
  appendSection(file, kInstructionsTag, kSectionRequired, encodeInstructions,
                plan);
  appendSection(file, kOptimizerTag, kSectionRequired, encodeOptimizer, plan);
  appendSection(file, kPrecisionTag, kSectionRequired, encodePrecision, plan);
  appendSection(file, kDeviceTag, kSectionRequired, encodeDevice, plan);
  out.write(reinterpret_cast<const char *>(file.bytes.data()),
            static_cast<std::streamsize>(file.bytes.size()));
  if (!out)
    throw PlanError("cannot write plan: the output stream failed");
}

Plan readPlan(std::istream &in) {
  std::vector<uint8_t> file{std::istreambuf_iterator<char>(in),
                            std::istreambuf_iterator<char>()};
  if (in.bad())
    throw PlanError("cannot read plan: the input stream failed");
  Plan plan = decodePlan(file);
  validatePlan(plan);
  return plan;
}

void savePlan(const Plan &plan, const std::string &path) {
  const std::string temporary = path + ".tmp";
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    if (!out)
      throw PlanError("cannot save plan to '" + path + "': cannot create '" +
                      temporary + "'");
    bool written = true;
    try {
      writePlan(plan, out);
      out.flush();
      out.close();
      // A full disk or a quota shows up here, when the buffered bytes are
      // flushed, not at the write call.
      written = !out.fail();
    } catch (const PlanError &) {
      written = false;
    }
    if (!written) {
      out.close();
      std::remove(temporary.c_str());
      throw PlanError("cannot save plan to '" + path +
                      "': writing failed (disk full?); the existing file, if "
                      "any, is unchanged");
    }
  }
  if (std::rename(temporary.c_str(), path.c_str()) != 0) {
    std::remove(temporary.c_str());
    throw PlanError("cannot save plan to '" + path + "': cannot rename '" +
                    temporary + "' over it");
  }
}

Plan loadPlan(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw PlanError("cannot open plan '" + path +
                    "': no such file or it is "
                    "not readable");
  try {
    return readPlan(in);
  } catch (const PlanError &error) {
    throw PlanError("plan '" + path + "': " + error.what());
  }
}

} // namespace ampc::plan
