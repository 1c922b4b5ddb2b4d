//===- DeviceProgramCodec.cpp - Binary encoding of the device program -----===//
//
// The DEVP section of plan format version 5 (docs/plan-format.md): the
// device modules (cubins and PTX), the kernels they export, and for the
// micro-step and optimizer-step functions their arena placements, buffer
// views and step groups with their launch, matmul, attention and memset
// steps. Decoding checks every enum code and flag and bounds every count;
// validatePlan checks the decoded program's meaning afterwards.
//
//===----------------------------------------------------------------------===//

#include "runtime/plan/DeviceProgramCodec.h"
#include "runtime/plan/ByteCodec.h"

#include <zlib.h>

#include <variant>

namespace ampc::plan::detail {
namespace {

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
      for (uint32_t id :
           {entry.param, entry.grad, entry.firstMoment, entry.secondMoment, entry.copy})
        out.u32(id);
      out.i64(entry.elements);
      out.i64(entry.firstBlock);
      for (float value :
           {entry.beta1, entry.beta2, entry.eps, entry.weightDecay, entry.clipNorm, entry.momentum})
        out.f32(value);
    }
    break;
  case ArgKind::Seed:
  case ArgKind::Step:
  case ArgKind::TotalSteps:
  case ArgKind::ErrorRecord:
  case ArgKind::RunScalars:
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
    for (uint32_t id : {matmul->a, matmul->b, matmul->d, matmul->c, matmul->bias, matmul->aux})
      out.u32(id);
    out.u8(matmul->transA ? 1 : 0);
    out.u8(matmul->transB ? 1 : 0);
    for (int64_t value : {matmul->m, matmul->n, matmul->k, matmul->batch, matmul->strideA,
                          matmul->strideB, matmul->strideD})
      out.i64(value);
    out.u8(matmul->computeType);
    out.u8(static_cast<uint8_t>(matmul->epilogue));
    out.f32(matmul->alpha);
    out.f32(matmul->beta);
  } else if (const auto *attention = std::get_if<AttentionStep>(&step)) {
    out.u8(static_cast<uint8_t>(attention->pass));
    for (uint32_t id : {attention->q, attention->k, attention->v, attention->out, attention->dOut,
                        attention->dq, attention->dk, attention->dv, attention->lse})
      out.u32(id);
    for (int64_t value : {attention->batch, attention->heads, attention->queries, attention->keys,
                          attention->headDim})
      out.i64(value);
    out.u8(attention->causal ? 1 : 0);
    out.f32(attention->scale);
    for (uint32_t kernel : {attention->forwardKernel, attention->deltaKernel, attention->dqKernel,
                            attention->dkdvKernel})
      out.u32(kernel);
    out.u64(attention->lseOffset);
    out.u64(attention->outOffset);
    out.u64(attention->deltaOffset);
    out.u32(attention->blockRows);
    out.u32(attention->forwardBlockRows);
    for (const AttentionLayout *layout :
         {&attention->qLayout, &attention->kLayout, &attention->vLayout, &attention->oLayout}) {
      out.u64(layout->offset);
      for (int64_t stride : {layout->batchStride, layout->headStride, layout->rowStride})
        out.i64(stride);
    }
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

} // namespace

void encodeDevice(const Plan &plan, ByteWriter &out) {
  const DeviceProgram &device = plan.device;
  out.count(device.modules.size());
  if (!device.modules.empty()) {
    // The module records, zlib-compressed as one stream: cubins shrink about
    // 3x and PTX about 8x, which is most of a training executable's size.
    ByteWriter records;
    for (const DeviceModule &module : device.modules) {
      records.string(module.name);
      encodeBytes(module.cubinSm80, records);
      encodeBytes(module.cubinSm90, records);
      records.string(module.ptx);
    }
    const std::vector<uint8_t> &raw = records.bytes;
    uLongf packedSize = compressBound(raw.size());
    std::vector<uint8_t> packed(packedSize);
    if (compress2(packed.data(), &packedSize, raw.data(), raw.size(), Z_BEST_COMPRESSION) != Z_OK)
      throw PlanError("cannot compress the device modules (" + std::to_string(raw.size()) +
                      " bytes)");
    out.count(raw.size());
    out.count(packedSize);
    out.raw(packed.data(), packedSize);
  }
  out.count(device.kernels.size());
  for (const DeviceKernel &kernel : device.kernels) {
    out.u32(kernel.module);
    out.string(kernel.entry);
  }
  encodeDeviceFunction(device.microStep, out);
  encodeDeviceFunction(device.optimizerStep, out);
}

namespace {

template <typename T> T decodeFlag(ByteReader &in, const char *what) {
  uint8_t flag = in.u8(what);
  if (flag > 1)
    in.fail(std::string("bad ") + what + " " + std::to_string(flag));
  return static_cast<T>(flag);
}

void decodeArgument(ByteReader &in, DeviceArgument &arg) {
  arg.kind = decodeEnum<ArgKind>(in, in.u8("argument kind"), 9, "argument kind");
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
    arg.table.kind = decodeEnum<TableKind>(in, in.u8("table kind"), 2, "table kind");
    arg.table.entries.resize(in.count("table entry count", 60));
    for (TableEntry &entry : arg.table.entries) {
      for (uint32_t *id :
           {&entry.param, &entry.grad, &entry.firstMoment, &entry.secondMoment, &entry.copy})
        *id = in.u32("table entry buffer");
      entry.elements = in.i64("table entry elements");
      entry.firstBlock = in.i64("table entry first block");
      for (float *value : {&entry.beta1, &entry.beta2, &entry.eps, &entry.weightDecay,
                           &entry.clipNorm, &entry.momentum})
        *value = in.f32("table entry hyper-parameter");
    }
    break;
  }
  case ArgKind::Seed:
  case ArgKind::Step:
  case ArgKind::TotalSteps:
  case ArgKind::ErrorRecord:
  case ArgKind::RunScalars:
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
    launch.space = decodeEnum<LaunchSpace>(in, in.u8("launch space"), 5, "launch space");
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
    for (uint32_t *id : {&matmul.a, &matmul.b, &matmul.d, &matmul.c, &matmul.bias, &matmul.aux})
      *id = in.u32("matmul buffer");
    matmul.transA = decodeFlag<bool>(in, "transpose flag");
    matmul.transB = decodeFlag<bool>(in, "transpose flag");
    for (int64_t *value : {&matmul.m, &matmul.n, &matmul.k, &matmul.batch, &matmul.strideA,
                           &matmul.strideB, &matmul.strideD})
      *value = in.i64("matmul size");
    matmul.computeType = in.u8("compute type");
    if (matmul.computeType != 0)
      in.fail("bad compute type code " + std::to_string(matmul.computeType));
    matmul.epilogue = decodeEnum<Epilogue>(in, in.u8("epilogue"), 6, "matmul epilogue");
    matmul.alpha = in.f32("alpha");
    matmul.beta = in.f32("beta");
    return matmul;
  }
  case StepKind::Attention: {
    AttentionStep attention;
    attention.pass = decodeEnum<AttentionPass>(in, in.u8("attention pass"), 2, "attention pass");
    for (uint32_t *id : {&attention.q, &attention.k, &attention.v, &attention.out, &attention.dOut,
                         &attention.dq, &attention.dk, &attention.dv, &attention.lse})
      *id = in.u32("attention buffer");
    for (int64_t *value : {&attention.batch, &attention.heads, &attention.queries, &attention.keys,
                           &attention.headDim})
      *value = in.i64("attention size");
    attention.causal = decodeFlag<bool>(in, "causal flag");
    attention.scale = in.f32("attention scale");
    for (uint32_t *kernel : {&attention.forwardKernel, &attention.deltaKernel, &attention.dqKernel,
                             &attention.dkdvKernel})
      *kernel = in.u32("attention kernel");
    attention.lseOffset = in.u64("lse offset");
    attention.outOffset = in.u64("output offset");
    attention.deltaOffset = in.u64("delta offset");
    attention.blockRows = in.u32("attention block rows");
    attention.forwardBlockRows = in.u32("attention forward block rows");
    for (AttentionLayout *layout :
         {&attention.qLayout, &attention.kLayout, &attention.vLayout, &attention.oLayout}) {
      layout->offset = in.u64("attention operand offset");
      for (int64_t *stride : {&layout->batchStride, &layout->headStride, &layout->rowStride})
        *stride = in.i64("attention operand stride");
    }
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

} // namespace

void decodeDevice(ByteReader &in, Plan &plan) {
  DeviceProgram &device = plan.device;
  const uint32_t modules = in.u32("module count");
  if (modules > 0) {
    const uint32_t rawSize = in.u32("module records size");
    const uint32_t packedSize = in.u32("compressed module records size");
    std::vector<uint8_t> packed;
    in.bytesInto(packed, packedSize, "compressed module records");
    // Each record takes at least 16 bytes (a name and three sizes).
    if (modules > rawSize / 16)
      in.fail("module count " + std::to_string(modules) + " needs at least " +
              std::to_string(16ull * modules) +
              " bytes of records, but they "
              "hold " +
              std::to_string(rawSize));
    // Deflate expands at most 1032-fold: a larger size is corrupt, and allocating it would let
    // a few bytes of plan claim 4 GiB of memory.
    if (rawSize / 1032 > packedSize)
      in.fail("the module records' size " + std::to_string(rawSize) +
              " is more than zlib inflates " + std::to_string(packedSize) + " bytes to");
    std::vector<uint8_t> raw(rawSize);
    uLongf inflated = rawSize;
    const int status = uncompress(raw.data(), &inflated, packed.data(), packedSize);
    if (status != Z_OK || inflated != rawSize)
      in.fail("the compressed module records do not inflate to their " + std::to_string(rawSize) +
              " bytes (zlib: " +
              (status == Z_OK ? std::string("size ") + std::to_string(inflated)
                              : std::string(zError(status))) +
              ")");
    ByteReader records(raw.data(), 0, raw.size(), "DEVP module records");
    device.modules.resize(modules);
    for (DeviceModule &module : device.modules) {
      module.name = records.string("module name");
      records.bytesInto(module.cubinSm80, records.u32("sm_80 cubin size"), "sm_80 cubin");
      records.bytesInto(module.cubinSm90, records.u32("sm_90 cubin size"), "sm_90 cubin");
      module.ptx = records.string("PTX");
    }
    if (records.remaining() != 0)
      records.fail(std::to_string(records.remaining()) + " bytes after the last module");
  }
  device.kernels.resize(in.count("kernel count", 8));
  for (DeviceKernel &kernel : device.kernels) {
    kernel.module = in.u32("kernel module");
    kernel.entry = in.string("kernel entry");
  }
  decodeDeviceFunction(in, device.microStep);
  decodeDeviceFunction(in, device.optimizerStep);
}

} // namespace ampc::plan::detail
