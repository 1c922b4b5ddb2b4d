//===- PlanIO.cpp - Binary encoding of plans (docs/plan-format.md) --------===//
//
// The writer serialises into memory and writes once; the reader loads the
// whole stream and decodes it with bounds checks on every field, so a
// truncated or corrupted file produces a one-line PlanError instead of a
// crash or an absurd allocation. Integers and IEEE doubles are little-endian
// regardless of the host. This file holds the file layout (header, section
// table, required sections) and the host sections; the device-program section
// (DEVP) is in DeviceProgramCodec.cpp, and the byte writer and reader both use
// are in ByteCodec.h.
//
//===----------------------------------------------------------------------===//

#include "runtime/plan/ByteCodec.h"
#include "runtime/plan/DeviceProgramCodec.h"
#include "runtime/plan/Plan.h"

#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <set>

namespace ampc::plan {
namespace {

using detail::ByteReader;
using detail::ByteWriter;
using detail::decodeDevice;
using detail::decodeEnum;
using detail::encodeDevice;

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
    // Flags: 1 = weight decay, 2 = untrained (model state).
    out.u8((parameter.weightDecay ? 1 : 0) | (parameter.trained ? 0 : 2));
    out.f64(parameter.a);
    out.f64(parameter.b);
    // Given: the values follow, as a u64 count of f32.
    if (parameter.init == InitKind::Given) {
      out.u64(parameter.values.size());
      for (float value : parameter.values)
        out.f32(value);
    }
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
void encodeInstructionList(const std::vector<Instruction> &instructions, ByteWriter &out) {
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

/// Appends one section: tag, flags, payload length, payload.
void appendSection(ByteWriter &file, const char *tag, uint32_t flags,
                   void (*encode)(const Plan &, ByteWriter &), const Plan &plan) {
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
    parameter.init = decodeEnum<InitKind>(in, in.u8("init"), 5, "init kind");
    uint8_t flags = in.u8("parameter flags");
    if (flags > 2)
      in.fail("bad parameter flags " + std::to_string(flags) +
              " (1: weight decay, 2: untrained, not both)");
    parameter.weightDecay = flags == 1;
    parameter.trained = flags != 2;
    parameter.a = in.f64("init argument a");
    parameter.b = in.f64("init argument b");
    if (parameter.init == InitKind::Given) {
      uint64_t count = in.u64("given value count");
      if (count > in.remaining() / 4)
        in.fail("parameter '" + parameter.name + "' has " + std::to_string(count) +
                " given values but the section is shorter");
      parameter.values.resize(count);
      for (float &value : parameter.values)
        value = in.f32("given value");
    }
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

void decodeInstructionList(ByteReader &in, std::vector<Instruction> &instructions) {
  uint32_t count = in.count("instruction count", 18);
  instructions.resize(count);
  for (Instruction &instruction : instructions) {
    // Opcodes are appended without a format version change (docs/plan-format.md), so a code
    // past the table is an opcode of a newer compiler.
    const uint16_t op = in.u16("opcode");
    if (op >= kNumOpCodes)
      in.fail("bad opcode code " + std::to_string(op) + ": this runtime knows opcodes 0 to " +
              std::to_string(kNumOpCodes - 1) +
              "; the plan was written by a newer ampc, so recompile the model with this one");
    instruction.op = static_cast<OpCode>(op);
    instruction.operands.resize(in.count("operand count", 4));
    for (uint32_t &operand : instruction.operands)
      operand = in.u32("operand");
    instruction.results.resize(in.count("result count", 4));
    for (uint32_t &result : instruction.results)
      result = in.u32("result");
    uint32_t attrCount = in.count("attribute count", 5);
    for (uint32_t i = 0; i < attrCount; ++i) {
      std::string name = in.string("attribute name");
      auto kind = decodeEnum<AttrKind>(in, in.u8("attribute kind"), 3, "attribute kind");
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
  scaling.mode = decodeEnum<LossScaleMode>(in, in.u8("loss scale mode"), 3, "loss scale mode");
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
  if (file.size() < sizeof kMagic || std::memcmp(file.data(), kMagic, sizeof kMagic) != 0) {
    if (file.size() < sizeof kMagic && std::memcmp(file.data(), kMagic, file.size()) == 0)
      throw PlanError("plan truncated: " + std::to_string(file.size()) +
                      " bytes, shorter than the 16-byte header");
    throw PlanError("not an ampc plan: the first 8 bytes are not \"AMPCPLAN\"");
  }
  ByteReader header(file.data(), 0, file.size(), "header");
  header.skip(sizeof kMagic);
  uint32_t version = header.u32("format version");
  if (version != kFormatVersion)
    throw PlanError("plan format version " + std::to_string(version) +
                    ", this runtime reads version " + std::to_string(kFormatVersion) +
                    ": recompile the model with a matching ampc");
  uint32_t sectionCount = header.u32("section count");

  Plan plan;
  std::set<std::string> seen;
  size_t offset = kHeaderBytes;
  for (uint32_t index = 0; index < sectionCount; ++index) {
    if (file.size() - offset < kSectionHeaderBytes)
      throw PlanError("plan truncated: section " + std::to_string(index) + " of " +
                      std::to_string(sectionCount) + " needs a 16-byte header at offset " +
                      std::to_string(offset) + ", only " + std::to_string(file.size() - offset) +
                      " left");
    ByteReader sectionHeader(file.data(), offset, file.size(),
                             "section " + std::to_string(index) + " header");
    sectionHeader.skip(4);
    const uint8_t *tagBytes = file.data() + offset;
    std::string tag = printableTag(tagBytes);
    uint32_t flags = sectionHeader.u32("section flags");
    uint64_t length = sectionHeader.u64("section length");
    offset += kSectionHeaderBytes;
    if (length > file.size() - offset)
      throw PlanError("plan truncated: section '" + tag + "' declares " + std::to_string(length) +
                      " bytes at offset " + std::to_string(offset) + ", only " +
                      std::to_string(file.size() - offset) + " left");
    if (!seen.insert(tag).second)
      throw PlanError("malformed plan: section '" + tag + "' appears twice");

    const SectionDecoder *decoder = nullptr;
    for (const SectionDecoder &known : kSections)
      if (std::memcmp(known.tag, tagBytes, 4) == 0)
        decoder = &known;
    if (decoder) {
      ByteReader payload(file.data(), offset, offset + length, "section '" + tag + "'");
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
      throw PlanError(std::string("plan truncated or incomplete: section '") + known.tag +
                      "' is missing");
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
  appendSection(file, kInstructionsTag, kSectionRequired, encodeInstructions, plan);
  appendSection(file, kOptimizerTag, kSectionRequired, encodeOptimizer, plan);
  appendSection(file, kPrecisionTag, kSectionRequired, encodePrecision, plan);
  appendSection(file, kDeviceTag, kSectionRequired, encodeDevice, plan);
  out.write(reinterpret_cast<const char *>(file.bytes.data()),
            static_cast<std::streamsize>(file.bytes.size()));
  if (!out)
    throw PlanError("cannot write plan: the output stream failed");
}

Plan readPlan(std::istream &in) {
  std::vector<uint8_t> file{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
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
      throw PlanError("cannot save plan to '" + path + "': cannot create '" + temporary + "'");
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
    throw PlanError("cannot save plan to '" + path + "': cannot rename '" + temporary +
                    "' over it");
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
