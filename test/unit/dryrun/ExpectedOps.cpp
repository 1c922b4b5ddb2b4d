//===- ExpectedOps.cpp - What a plan says each device step runs ------------===//

#include "ExpectedOps.h"

#include "runtime/cuda/FlashAttentionLayout.h"

#include <cstring>
#include <stdexcept>
#include <variant>

namespace ampc::dryrun {

using plan::kNoBuffer;

namespace {

BoundArg bufferArg(const plan::Plan &plan, const std::string &name, uint32_t id) {
  BoundArg arg;
  arg.name = name;
  arg.buffer = id;
  arg.extent = bufferBytes(plan, id);
  arg.what = describeBuffer(plan, id);
  return arg;
}

BoundArg scratchArg(const std::string &name, uint64_t bytes) {
  BoundArg arg;
  arg.name = name;
  arg.extent = bytes;
  arg.what = std::to_string(bytes) + " bytes of scratch";
  return arg;
}

BoundArg valueArg(const std::string &name, uint32_t size, uint64_t value) {
  BoundArg arg;
  arg.kind = BoundArg::Value;
  arg.name = name;
  arg.size = size;
  arg.value = value;
  return arg;
}

/// A launch step's arguments: 8 bytes each (Executor.h, ResolvedArgument).
std::vector<BoundArg> launchArgs(const plan::Plan &plan, const plan::LaunchStep &launch) {
  std::vector<BoundArg> args;
  for (const plan::DeviceArgument &argument : launch.args) {
    switch (argument.kind) {
    case plan::ArgKind::Buffer:
      args.push_back(bufferArg(plan, argument.name, argument.buffer));
      break;
    case plan::ArgKind::Scratch:
      args.push_back(scratchArg(argument.name, argument.bytes));
      break;
    case plan::ArgKind::Table: {
      BoundArg arg;
      arg.name = argument.name;
      arg.extent = argument.table.entries.size() *
                   (argument.table.kind == plan::TableKind::Optimizer ? 88 : 24);
      arg.what = "a table of " + std::to_string(argument.table.entries.size()) + " entries (" +
                 std::to_string(arg.extent) + " bytes)";
      args.push_back(arg);
      break;
    }
    case plan::ArgKind::ErrorRecord: {
      BoundArg arg;
      arg.name = argument.name;
      arg.extent = sizeof(plan::DeviceErrorRecord);
      arg.what = "the error record";
      args.push_back(arg);
      break;
    }
    case plan::ArgKind::Int64:
      args.push_back(valueArg(argument.name, 8, static_cast<uint64_t>(argument.value)));
      break;
    case plan::ArgKind::RunScalars: {
      BoundArg arg;
      arg.kind = BoundArg::RunScalars;
      arg.name = argument.name;
      arg.extent = sizeof(plan::RunScalarBlock);
      arg.what = "the run scalars (24 bytes)";
      args.push_back(arg);
      break;
    }
    case plan::ArgKind::Seed:
    case plan::ArgKind::Step:
    case plan::ArgKind::TotalSteps:
      // Plan validation rejects them: a replayed graph would keep the captured value.
      throw std::runtime_error(std::string("argument '") + argument.name + "' passes the " +
                               plan::argKindName(argument.kind) + " by value");
    }
  }
  return args;
}

/// Operand \p id of an attention step where its layout puts it: the pointer at the layout's
/// byte offset, reaching the last element of its [batch, heads, rows, D] view.
BoundArg attentionOperandArg(const plan::Plan &plan, const plan::AttentionStep &step,
                             const std::string &name, uint32_t id,
                             const plan::AttentionLayout &layout, int64_t rows) {
  BoundArg arg = bufferArg(plan, name, id);
  const int64_t elements = (step.batch - 1) * layout.batchStride +
                           (step.heads - 1) * layout.headStride + (rows - 1) * layout.rowStride +
                           step.headDim;
  arg.offset = layout.offset;
  arg.extent = static_cast<uint64_t>(elements) * plan::dtypeBytes(plan.buffers.at(id).dtype);
  arg.what += " from byte " + std::to_string(layout.offset);
  return arg;
}

/// "heads 12, strides (batch, head, row) q (.., .., ..) k (..) ...": a recorded
/// ampc::flash::Layout.
std::string describeFlashLayout(const std::vector<uint64_t> &words) {
  if (words.size() * 8 != sizeof(cuda::FlashLayout))
    return std::to_string(words.size() * 8) + " bytes";
  cuda::FlashLayout layout;
  std::memcpy(&layout, words.data(), sizeof(layout));
  std::string text = "heads " + std::to_string(layout.heads) + ", strides (batch, head, row)";
  const std::pair<const char *, const cuda::FlashOperandStrides *> operands[] = {
      {"q", &layout.q}, {"k", &layout.k}, {"v", &layout.v}, {"o", &layout.o}, {"dO", &layout.dO}};
  for (const auto &[name, strides] : operands)
    text += std::string(" ") + name + " (" + std::to_string(strides->batch) + ", " +
            std::to_string(strides->head) + ", " + std::to_string(strides->row) + ")";
  return text;
}

/// The layout argument of every attention kernel (cuda::FlashLayout, passed by value).
BoundArg flashLayoutArg(const cuda::FlashLayout &layout) {
  BoundArg arg;
  arg.kind = BoundArg::Bytes;
  arg.name = "layout";
  arg.size = sizeof(layout);
  arg.align = alignof(cuda::FlashLayout);
  arg.words.resize(sizeof(layout) / 8);
  std::memcpy(arg.words.data(), &layout, sizeof(layout));
  arg.describeWords = describeFlashLayout;
  return arg;
}

/// The arguments Executor::Impl::runAttention passes to kernel \p part of
/// an attention step, with the C++ types it passes them as
/// (FlashAttention.cuh's entry points): pointers (each at its layout's byte
/// offset), then `int queries, int keys, float scale`, or for delta
/// `long long rows, int queries`, and last the layout (strides of the step's
/// layouts; o contiguous where the backward recomputes it into scratch).
std::vector<BoundArg> attentionArgs(const plan::Plan &plan, const plan::AttentionStep &step,
                                    int part) {
  const uint64_t slices = static_cast<uint64_t>(step.batch * step.heads);
  const uint64_t rows = slices * static_cast<uint64_t>(step.queries);
  const uint64_t outputBytes =
      rows * static_cast<uint64_t>(step.headDim) * plan::dtypeBytes(plan.buffers.at(step.q).dtype);
  const bool forward = step.pass == plan::AttentionPass::Forward;
  // o and lse: the forward's buffers (written by a forward, read by a backward that saved them),
  // else scratch.
  const BoundArg lse =
      step.lse != plan::kNoBuffer ? bufferArg(plan, "lse", step.lse) : scratchArg("lse", rows * 4);
  const BoundArg delta = scratchArg("delta", rows * 4);
  const bool scratchOutput = !forward && !step.readsSavedForward();
  const BoundArg output =
      scratchOutput ? scratchArg("o", outputBytes)
                    : attentionOperandArg(plan, step, "o", step.out, step.oLayout, step.queries);
  const BoundArg layout = flashLayoutArg(cuda::FlashLayout::of(step, scratchOutput));
  auto operand = [&](const char *name, uint32_t id, const plan::AttentionLayout &operandLayout,
                     int64_t operandRows) {
    return attentionOperandArg(plan, step, name, id, operandLayout, operandRows);
  };
  uint32_t scaleBits = 0;
  std::memcpy(&scaleBits, &step.scale, 4);
  const std::vector<BoundArg> scalars = {
      valueArg("queries", 4, static_cast<uint32_t>(step.queries)),
      valueArg("keys", 4, static_cast<uint32_t>(step.keys)), valueArg("scale", 4, scaleBits)};
  std::vector<BoundArg> args;
  if (part == 1)
    return {output,
            operand("dO", step.dOut, step.oLayout, step.queries),
            delta,
            valueArg("rows", 8, rows),
            valueArg("queries", 4, static_cast<uint32_t>(step.queries)),
            layout};
  args = {operand("q", step.q, step.qLayout, step.queries),
          operand("k", step.k, step.kLayout, step.keys),
          operand("v", step.v, step.vLayout, step.keys)};
  if (part == 0) {
    args.insert(args.end(), {output, lse});
  } else {
    args.insert(args.end(), {operand("dO", step.dOut, step.oLayout, step.queries), lse, delta});
    if (part == 2)
      args.push_back(operand("dq", step.dq, step.qLayout, step.queries));
    else
      args.insert(args.end(), {operand("dk", step.dk, step.kLayout, step.keys),
                               operand("dv", step.dv, step.vLayout, step.keys)});
  }
  args.insert(args.end(), scalars.begin(), scalars.end());
  args.push_back(layout);
  return args;
}

std::string describeInstructions(const std::vector<plan::Instruction> &list,
                                 const std::vector<uint32_t> &indices) {
  std::string text;
  for (uint32_t index : indices)
    text += (text.empty() ? "" : ", ") + (index < list.size()
                                              ? plan::describeInstruction(list[index], index)
                                              : "instruction " + std::to_string(index));
  return text.empty() ? "no instruction" : text;
}

} // namespace

uint64_t bufferBytes(const plan::Plan &plan, uint32_t id) {
  return static_cast<uint64_t>(plan::numElements(plan.buffers.at(id))) *
         plan::dtypeBytes(plan.buffers.at(id).dtype);
}

/// "buffer 12 'x' (bf16 [64, 128], 16384 bytes)".
std::string describeBuffer(const plan::Plan &plan, uint32_t id) {
  const plan::Buffer &buffer = plan.buffers.at(id);
  return "buffer " + std::to_string(id) + " '" + buffer.name + "' (" +
         plan::dtypeName(buffer.dtype) + " " + plan::shapeToString(buffer.shape) + ", " +
         std::to_string(bufferBytes(plan, id)) + " bytes)";
}

/// Every operation of one function, in order.
std::vector<ExpectedOp> expectedOps(const plan::Plan &plan, bool optimizer) {
  const plan::DeviceFunction &function =
      optimizer ? plan.device.optimizerStep : plan.device.microStep;
  const std::vector<plan::Instruction> &instructions =
      optimizer ? plan.optimizerInstructions : plan.instructions;
  const char *name = optimizer ? "optimizer_step" : "micro_step";
  std::vector<ExpectedOp> ops;
  for (uint32_t g = 0; g < function.groups.size(); ++g) {
    const plan::DeviceGroup &group = function.groups[g];
    const std::string computing = describeInstructions(instructions, group.instructions);
    for (uint32_t s = 0; s < group.steps.size(); ++s) {
      ExpectedOp op;
      op.optimizer = optimizer;
      op.group = g;
      op.step = s;
      auto where = [&](const std::string &what) {
        return std::string(name) + " group " + std::to_string(g) + " (" + group.kind + "), step " +
               std::to_string(s) + " (" + what + "), computing " + computing;
      };
      const plan::DeviceStep &step = group.steps[s];
      if (const auto *launch = std::get_if<plan::LaunchStep>(&step)) {
        op.launch = launch;
        op.kernel = plan.device.kernels.at(launch->kernel).entry;
        op.args = launchArgs(plan, *launch);
        op.where = where("launch of " + op.kernel);
        ops.push_back(op);
      } else if (const auto *matmul = std::get_if<plan::MatmulStep>(&step)) {
        op.kind = OpKind::Matmul;
        op.matmul = matmul;
        op.where = where("matmul");
        ops.push_back(op);
      } else if (const auto *memset = std::get_if<plan::MemsetStep>(&step)) {
        op.kind = OpKind::Memset;
        op.memsetBuffer = memset->buffer;
        op.where = where("memset of " + describeBuffer(plan, memset->buffer));
        ops.push_back(op);
      } else if (const auto *attention = std::get_if<plan::AttentionStep>(&step)) {
        static const char *const parts[] = {"forward", "delta", "dq", "dk/dv"};
        const uint32_t kernels[] = {attention->forwardKernel, attention->deltaKernel,
                                    attention->dqKernel, attention->dkdvKernel};
        // A forward runs part 0; a backward parts 1-3, after part 0 only when it recomputes the
        // forward (no saved o and lse).
        const int first = attention->readsSavedForward() ? 1 : 0;
        const int count = attention->pass == plan::AttentionPass::Forward ? 1 : 4;
        const uint32_t slices = static_cast<uint32_t>(attention->batch * attention->heads);
        const uint64_t rowsPerBlock = attention->blockRows;
        const uint64_t forwardRows = attention->forwardBlockRows;
        const uint64_t deltaRows = static_cast<uint64_t>(slices) * attention->queries;
        const uint32_t grids[4][2] = {
            {static_cast<uint32_t>((attention->queries + forwardRows - 1) / forwardRows), slices},
            {static_cast<uint32_t>((deltaRows + 3) / 4), 1},
            {static_cast<uint32_t>((attention->queries + rowsPerBlock - 1) / rowsPerBlock), slices},
            {static_cast<uint32_t>((attention->keys + rowsPerBlock - 1) / rowsPerBlock), slices}};
        for (int part = first; part < count; ++part) {
          op.part = part;
          op.grid[0] = grids[part][0];
          op.grid[1] = grids[part][1];
          op.grid[2] = 1;
          op.block[0] = 128;
          op.block[1] = op.block[2] = 1;
          op.kernel = plan.device.kernels.at(kernels[part]).entry;
          op.args = attentionArgs(plan, *attention, part);
          op.where = where(std::string("attention, its ") + parts[part] + " kernel " + op.kernel);
          ops.push_back(op);
        }
      }
    }
  }
  return ops;
}

/// "8@0, 8@8, 4@16".
std::string describeParams(const std::vector<KernelParam> &params) {
  std::string text;
  for (const KernelParam &param : params)
    text += (text.empty() ? "" : ", ") + std::to_string(param.size) + "@" +
            std::to_string(param.offset);
  return "[" + text + "]";
}

/// The parameter layout of \p args, each at its natural alignment.
std::vector<KernelParam> layoutOf(const std::vector<BoundArg> &args) {
  std::vector<KernelParam> params;
  uint32_t offset = 0;
  for (const BoundArg &arg : args) {
    const uint32_t align = arg.align ? arg.align : arg.size;
    offset = (offset + align - 1) / align * align;
    params.push_back({offset, arg.size});
    offset += arg.size;
  }
  return params;
}

} // namespace ampc::dryrun
