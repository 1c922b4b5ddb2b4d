//===- DryRunChecker.cpp - A recorded CUDA run against its plan -----------===//

#include "DryRunChecker.h"
#include "AllocationTable.h"

#include "runtime/cuda/FlashAttentionLayout.h"

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <stdexcept>

namespace ampc::dryrun {

namespace {

using plan::kNoBuffer;

//===----------------------------------------------------------------------===//
// What the plan says each device step does
//===----------------------------------------------------------------------===//

enum class OpKind { Launch, Matmul, Memset };

/// One kernel argument as the plan (or, for flash attention, the runtime)
/// binds it.
struct BoundArg {
  enum Kind { Pointer, Value, RunScalars, Bytes } kind = Pointer;
  std::string name;
  uint32_t size = 8;  ///< bytes passed
  uint32_t align = 0; ///< the parameter's alignment (0: its size)
  /// Pointer: the bytes the kernel may touch from the pointer, the buffer
  /// (if any), the pointer's byte offset into it, and how to name it.
  uint64_t extent = 0;
  uint32_t buffer = kNoBuffer;
  uint64_t offset = 0;
  std::string what;
  /// Value: the expected bits (zero-extended).
  uint64_t value = 0;
  /// Bytes: a struct passed by value, as the recorded 8-byte words
  /// (Event::wideArgs), and how to read them for a message.
  std::vector<uint64_t> words;
  std::string (*describeWords)(const std::vector<uint64_t> &) = nullptr;
};

/// One operation the device must run for a step.
struct ExpectedOp {
  bool optimizer = false;
  uint32_t group = 0, step = 0;
  /// -1: the step itself; 0..3: an attention step's forward, delta, dq or
  /// dk/dv kernel.
  int part = -1;
  OpKind kind = OpKind::Launch;
  std::string kernel; ///< a launch's entry point
  std::vector<BoundArg> args;
  const plan::LaunchStep *launch = nullptr;
  /// An attention kernel's grid and block, as Executor::Impl::runAttention must launch it.
  uint32_t grid[3] = {0, 0, 0}, block[3] = {0, 0, 0};
  const plan::MatmulStep *matmul = nullptr;
  uint32_t memsetBuffer = kNoBuffer;
  /// Where it is, for messages (see DryRunViolation::where).
  std::string where;
};

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

//===----------------------------------------------------------------------===//
// Replaying the trace
//===----------------------------------------------------------------------===//

/// One run of a function in the training loop.
struct Run {
  bool optimizer = false;
  bool forward = false; ///< the micro step's forward groups alone
  uint64_t step = 0;    ///< RunOptions::step
  uint64_t ordinal = 0, count = 0;
};

struct Cursor {
  size_t run = 0, op = 0;
};

class Checker {
public:
  Checker(const plan::Plan &plan, const DryRunSchedule &schedule) : plan(plan), schedule(schedule) {
    micro = expectedOps(plan, false);
    optimizer = expectedOps(plan, true);
    const uint64_t accumulation =
        static_cast<uint64_t>(std::max<int64_t>(1, plan.accumulationSteps));
    for (uint64_t s = 0; s < schedule.steps; ++s) {
      for (uint64_t i = 0; i < accumulation; ++i)
        runs.push_back({false, false, s * accumulation + i, s * accumulation + i,
                        schedule.steps * accumulation});
      runs.push_back({true, false, s, s, schedule.steps});
      if (schedule.evalEvery && ((s + 1) % schedule.evalEvery == 0 || s + 1 == schedule.steps))
        for (uint64_t i = 0; i < schedule.evalBatches; ++i)
          runs.push_back({false, true, i, i, schedule.evalBatches});
    }
    if (schedule.evalEvery) {
      const size_t groups = plan::forwardGroupCount(plan);
      for (const ExpectedOp &op : micro)
        if (op.group < groups)
          forward.push_back(op);
    }
    for (const plan::DeviceFunction *f : {&plan.device.microStep, &plan.device.optimizerStep})
      for (const plan::BufferView &view : f->views)
        viewSource[view.buffer] = view.source;
  }

  DryRunReport check(const std::vector<Event> &trace);

private:
  const std::vector<ExpectedOp> &opsOf(const Run &run) const {
    return run.optimizer ? optimizer : run.forward ? forward : micro;
  }
  std::string describeRun(const Run &run, Origin origin) const {
    return std::string(run.optimizer ? "optimizer_step"
                       : run.forward ? "forward-only micro_step"
                                     : "micro_step") +
           " run " + std::to_string(run.ordinal + 1) + " of " + std::to_string(run.count) + ", " +
           originName(origin);
  }
  size_t findStart(const std::vector<Event> &trace) const;
  /// Matches \p event at \p cursor; false (and a violation) when it is not
  /// the next operation.
  bool match(const Event &event, Cursor &cursor);
  void checkOp(const Event &event, const ExpectedOp &op, const Run &run);
  void checkLaunch(const Event &event, const ExpectedOp &op, const Run &run);
  void checkMatmul(const Event &event, const ExpectedOp &op);
  void checkTimedMatmul(const Event &event, bool settingUp);
  /// The run scalars at \p address (one address for every launch) hold
  /// \p run's seed, step and total steps, as the recorded uploads left them.
  void checkRunScalars(const std::string &what, uint64_t address, const Run &run);
  /// Pointer \p address of \p what with \p bytes, and its binding.
  void checkPointer(const std::string &what, uint64_t address, uint64_t bytes, uint32_t buffer,
                    uint64_t offset = 0);
  void add(const std::string &check, const std::string &message, const std::string &where);
  void add(const std::string &check, const std::string &message) {
    add(check, message, currentWhere);
  }

  const plan::Plan &plan;
  DryRunSchedule schedule;
  std::vector<ExpectedOp> micro, optimizer, forward;
  std::vector<Run> runs;
  std::map<uint32_t, uint32_t> viewSource;

  DryRunReport report;
  std::map<std::string, size_t> seen; ///< violation key -> index
  AllocationTable allocations;
  std::map<uint64_t, KernelInfo> kernels;
  /// Each buffer's address and where it was first bound.
  std::map<uint32_t, std::pair<uint64_t, std::string>> bound;
  /// The run-scalar block's address and where it was first bound.
  std::pair<uint64_t, std::string> runScalarsBound;
  /// Device memory as the recorded small host-to-device copies left it, by
  /// 8-byte word (RecordingTrace.h); memsets and device copies over a word
  /// forget it.
  std::map<uint64_t, uint64_t> deviceWords;
  std::string currentWhere = "before the first device step";
  std::string currentRun;
  uint64_t lastOpCall = ~0ull;
  bool broken = false;
};

void Checker::add(const std::string &check, const std::string &message, const std::string &where) {
  const std::string key = check + '\n' + message + '\n' + where;
  auto found = seen.find(key);
  if (found != seen.end()) {
    ++report.violations[found->second].times;
    return;
  }
  seen[key] = report.violations.size();
  DryRunViolation violation;
  violation.check = check;
  violation.message = message;
  violation.where = where;
  violation.firstRun = currentRun;
  report.violations.push_back(violation);
}

size_t Checker::findStart(const std::vector<Event> &trace) const {
  // The first launch or matmul begins the first micro step, unless the
  // micro step begins with memsets: those are the memsets just before it.
  size_t first = trace.size();
  for (size_t i = 0; i < trace.size(); ++i)
    if ((trace[i].kind == EventKind::Launch || trace[i].kind == EventKind::Matmul) &&
        trace[i].origin == Origin::Eager && !isTimedMatmul(trace[i])) {
      first = i;
      break;
    }
  size_t leading = 0;
  while (leading < micro.size() && micro[leading].kind == OpKind::Memset)
    ++leading;
  size_t start = first;
  for (size_t i = first; leading > 0 && i-- > 0;)
    if (trace[i].kind == EventKind::Memset) {
      start = i;
      --leading;
    }
  return start;
}

bool Checker::match(const Event &event, Cursor &cursor) {
  const char *kind = eventKindName(event.kind);
  if (cursor.run >= runs.size()) {
    add("sequence",
        std::string("the device ran a ") + kind + (event.name.empty() ? "" : " of " + event.name) +
            " after the last of the " + std::to_string(runs.size()) + " function runs",
        "after the last device step");
    return false;
  }
  const Run &run = runs[cursor.run];
  const ExpectedOp &op = opsOf(run)[cursor.op];
  const OpKind got = event.kind == EventKind::Launch   ? OpKind::Launch
                     : event.kind == EventKind::Matmul ? OpKind::Matmul
                                                       : OpKind::Memset;
  currentWhere = op.where;
  currentRun = describeRun(run, event.origin);
  if (got != op.kind || (got == OpKind::Launch && event.name != op.kernel)) {
    add("sequence", std::string("the device ran a ") + kind +
                        (event.name.empty() ? "" : " of " + event.name) +
                        " where the plan has this step; the rest of the "
                        "trace is not matched");
    return false;
  }
  return true;
}

/// \p address points \p offset bytes into \p buffer (if any) and the kernel may touch
/// \p bytes from it.
void Checker::checkPointer(const std::string &what, uint64_t address, uint64_t bytes,
                           uint32_t buffer, uint64_t offset) {
  Check check = "";
  const std::string problem = allocations.rangeProblem(address, bytes, check);
  if (!problem.empty())
    add(check, what + ": " + problem);
  if (buffer == kNoBuffer)
    return;
  auto source = viewSource.find(buffer);
  const uint32_t storage = source == viewSource.end() ? buffer : source->second;
  // The buffer's own address: every binding of it must agree.
  const uint64_t start = address - offset;
  auto [first, inserted] = bound.emplace(storage, std::make_pair(start, currentWhere));
  if (!inserted && first->second.first != start)
    add("binding", what + " is at " + hexAddress(address) +
                       (offset ? " (byte " + std::to_string(offset) + " of a buffer at " +
                                     hexAddress(start) + ")"
                               : std::string()) +
                       ", but the buffer is at " + hexAddress(first->second.first) + " in " +
                       first->second.second);
}

void Checker::checkLaunch(const Event &event, const ExpectedOp &op, const Run &run) {
  ++report.launches;
  auto kernel = kernels.find(event.function);
  if (kernel == kernels.end()) {
    add("signature",
        "kernel '" + event.name + "' was launched without being looked up in a module");
    return;
  }
  // The signature, as the binary has it.
  const std::vector<KernelParam> expected = layoutOf(op.args);
  const std::vector<KernelParam> &actual = kernel->second.params;
  bool same = expected.size() == actual.size();
  for (size_t i = 0; same && i < actual.size(); ++i)
    same = expected[i].size == actual[i].size && expected[i].offset == actual[i].offset;
  if (!same) {
    std::string names;
    for (const BoundArg &arg : op.args)
      names += (names.empty() ? "" : ", ") + arg.name;
    add("signature", "kernel '" + event.name + "' (" + kernel->second.binary + ") takes " +
                         std::to_string(actual.size()) + " parameters " + describeParams(actual) +
                         " but is bound " + std::to_string(expected.size()) + " arguments " +
                         describeParams(expected) + " (" + names + ")");
    return; // the values were read with the binary's sizes
  }
  if (op.launch || op.part >= 0) {
    bool shape = true;
    for (int i = 0; i < 3; ++i)
      shape = shape && event.grid[i] == (op.launch ? op.launch->grid[i] : op.grid[i]) &&
              event.block[i] == (op.launch ? op.launch->block[i] : op.block[i]);
    if (!shape)
      add("launch-shape", "kernel '" + event.name + "' was launched with grid " +
                              std::to_string(event.grid[0]) + "x" + std::to_string(event.grid[1]) +
                              "x" + std::to_string(event.grid[2]) + " and block " +
                              std::to_string(event.block[0]) + "x" +
                              std::to_string(event.block[1]) + "x" +
                              std::to_string(event.block[2]) + ", not the plan's");
  }
  size_t wide = 0; // the next word of event.wideArgs
  for (size_t i = 0; i < op.args.size(); ++i) {
    const BoundArg &arg = op.args[i];
    const uint64_t value = event.args[i];
    const std::string what =
        "argument " + std::to_string(i) + " '" + arg.name + "' of kernel '" + event.name + "'";
    switch (arg.kind) {
    case BoundArg::Pointer:
      checkPointer(what + " (" + arg.what + ")", value, arg.extent, arg.buffer, arg.offset);
      break;
    case BoundArg::Bytes: {
      const size_t count = arg.words.size(), end = event.wideArgs.size();
      const std::vector<uint64_t> words(
          event.wideArgs.begin() + static_cast<std::ptrdiff_t>(std::min(wide, end)),
          event.wideArgs.begin() + static_cast<std::ptrdiff_t>(std::min(wide + count, end)));
      wide += count;
      if (words != arg.words)
        add("binding", what + " holds " + arg.describeWords(words) + ", but the plan binds " +
                           arg.describeWords(arg.words));
      break;
    }
    case BoundArg::Value:
      if (value != arg.value)
        add("binding", what + " is " + std::to_string(value) + ", but the plan binds " +
                           std::to_string(arg.value));
      break;
    case BoundArg::RunScalars:
      checkPointer(what + " (" + arg.what + ")", value, arg.extent, kNoBuffer);
      checkRunScalars(what, value, run);
      break;
    }
  }
}

void Checker::checkRunScalars(const std::string &what, uint64_t address, const Run &run) {
  if (runScalarsBound.second.empty())
    runScalarsBound = {address, currentWhere};
  else if (runScalarsBound.first != address)
    add("binding", what + " (the run scalars) is " + hexAddress(address) +
                       ", but the run scalars are at " + hexAddress(runScalarsBound.first) +
                       " in " + runScalarsBound.second);
  // What the kernel reads when it runs: the words the last uploads wrote.
  const char *names[] = {"seed", "step", "total steps"};
  const uint64_t wanted[] = {schedule.seed, run.step, schedule.steps};
  for (int i = 0; i < 3; ++i) {
    auto word = deviceWords.find(address + 8 * i);
    if (word == deviceWords.end())
      add("binding", what + " points to run scalars whose " + names[i] +
                         " no recorded host-to-device copy wrote");
    else if (word->second != wanted[i])
      add("binding", what + " points to run scalars holding " + names[i] + " " +
                         std::to_string(word->second) + " in a run where it is " +
                         std::to_string(wanted[i]));
  }
}

void Checker::checkMatmul(const Event &event, const ExpectedOp &op) {
  ++report.matmuls;
  const plan::MatmulStep &step = *op.matmul;
  const MatmulCall &call = event.matmul;
  // cuBLASLt computes D^T = op(B)^T op(A)^T: its A is our B, its B our A
  // (CublasLt.h), so its D is n x m.
  if (call.d.rows != static_cast<uint64_t>(step.n) ||
      call.d.cols != static_cast<uint64_t>(step.m) || call.d.batch != step.batch)
    add("cublaslt-layout",
        "cuBLASLt's D is " + std::to_string(call.d.rows) + "x" + std::to_string(call.d.cols) +
            " (batch " + std::to_string(call.d.batch) +
            "), not the plan's n x m = " + std::to_string(step.n) + "x" + std::to_string(step.m) +
            " (batch " + std::to_string(step.batch) + ")");
  if (call.alpha != step.alpha || call.beta != step.beta)
    add("matmul-scale", "cuBLASLt ran with alpha " + std::to_string(call.alpha) + " and beta " +
                            std::to_string(call.beta) + ", the plan has " +
                            std::to_string(step.alpha) + " and " + std::to_string(step.beta));
  if (step.c != kNoBuffer && step.c == step.d) {
    ++report.accumulatingMatmuls;
    const MatrixLayout &c = call.c, &d = call.d;
    if (call.pointerC != call.pointerD || c.type != d.type || c.rows != d.rows ||
        c.cols != d.cols || c.ld != d.ld || c.batch != d.batch || c.batchStride != d.batchStride)
      add("matmul-scale", "the matmul accumulates into D (" + describeBuffer(plan, step.d) +
                              "), but cuBLASLt's C is not D: another address or layout");
  }
  struct Operand {
    const char *name;
    uint32_t buffer;
    uint64_t pointer;
    const MatrixLayout *layout;
  };
  const Operand operands[] = {
      {"A", step.a, call.pointerB, &call.b},   {"B", step.b, call.pointerA, &call.a},
      {"C", step.c, call.pointerC, &call.c},   {"D", step.d, call.pointerD, &call.d},
      {"bias", step.bias, call.bias, nullptr}, {"aux", step.aux, call.aux, nullptr}};
  for (const Operand &operand : operands) {
    if (operand.buffer == kNoBuffer)
      continue;
    const uint64_t bytes = bufferBytes(plan, operand.buffer);
    const std::string what = std::string("matmul operand ") + operand.name + " (" +
                             describeBuffer(plan, operand.buffer) + ")";
    checkPointer(what, operand.pointer, bytes, operand.buffer);
    if (operand.layout && layoutBytes(*operand.layout) > bytes)
      add("cublaslt-layout",
          what + ": its cuBLASLt layout (" + std::to_string(operand.layout->rows) + "x" +
              std::to_string(operand.layout->cols) + ", ld " + std::to_string(operand.layout->ld) +
              ", batch " + std::to_string(operand.layout->batch) + ") spans " +
              std::to_string(layoutBytes(*operand.layout)) + " bytes, more than the buffer");
  }
}

/// A run of a cuBLASLt candidate being timed (Matmul::prepare, on a stream other than the
/// device's): it must happen while the executor is built, before any step (it overwrites its
/// outputs), run rather than be captured, and touch only allocated memory.
void Checker::checkTimedMatmul(const Event &event, bool settingUp) {
  ++report.timedMatmuls;
  const std::string what = "a matmul timed on stream " + std::to_string(event.stream);
  if (!settingUp)
    add("matmul-timing", what + " ran after the steps began, overwriting values they hold");
  if (event.origin != Origin::Eager)
    add("matmul-timing", what + " was captured into a graph instead of being run and timed");
  const MatmulCall &call = event.matmul;
  const std::pair<uint64_t, const MatrixLayout *> operands[] = {{call.pointerA, &call.a},
                                                                {call.pointerB, &call.b},
                                                                {call.pointerC, &call.c},
                                                                {call.pointerD, &call.d}};
  for (const auto &[pointer, layout] : operands) {
    Check check = "";
    const std::string problem = allocations.rangeProblem(pointer, layoutBytes(*layout), check);
    if (!problem.empty())
      add(check, what + ": " + problem);
  }
}

void Checker::checkOp(const Event &event, const ExpectedOp &op, const Run &run) {
  switch (op.kind) {
  case OpKind::Launch:
    checkLaunch(event, op, run);
    break;
  case OpKind::Matmul:
    checkMatmul(event, op);
    break;
  case OpKind::Memset: {
    ++report.memsets;
    const uint64_t bytes = bufferBytes(plan, op.memsetBuffer);
    const std::string what = "memset of " + describeBuffer(plan, op.memsetBuffer);
    checkPointer(what, event.address, bytes, op.memsetBuffer);
    if (event.bytes != bytes)
      add("extent", what + " sets " + std::to_string(event.bytes) + " bytes");
    break;
  }
  }
}

DryRunReport Checker::check(const std::vector<Event> &trace) {
  const size_t start = findStart(trace);
  Cursor cursor, captureCursor;
  bool capturing = false;
  std::string captureWhere;
  for (size_t i = 0; i < trace.size(); ++i) {
    const Event &event = trace[i];
    // Device memory the run scalars' check reads: what executed copies and
    // memsets left (captured ones execute when replayed).
    if ((event.kind == EventKind::Memcpy && event.what != "dtoh") ||
        event.kind == EventKind::Memset) {
      if (event.origin != Origin::Captured) {
        const uint64_t first = event.address - event.address % 8;
        for (auto word = deviceWords.lower_bound(first);
             word != deviceWords.end() && word->first < event.address + event.bytes;)
          word = deviceWords.erase(word);
        if (event.kind == EventKind::Memcpy && event.what == "htod" && event.address % 8 == 0)
          for (size_t w = 0; w < event.args.size() && 8 * w < event.bytes; ++w)
            if (8 * (w + 1) <= event.bytes)
              deviceWords[event.address + 8 * w] = event.args[w];
      }
    }
    switch (event.kind) {
    case EventKind::Alloc:
      allocations.add(event.address, event.bytes, event.call);
      break;
    case EventKind::Free:
      allocations.free(event.address, event.call);
      break;
    case EventKind::Kernel:
      kernels[event.function] = event.kernel;
      break;
    case EventKind::Memcpy:
      if (event.what == "dtoh")
        ++report.metricReads;
      break;
    case EventKind::CaptureBegin:
      capturing = true;
      captureCursor = cursor;
      captureWhere = "while capturing CUDA graph " + std::to_string(event.graph) + ", at its start";
      if (i >= start && cursor.run < runs.size()) {
        const Run &run = runs[cursor.run];
        captureWhere += ", before " + opsOf(run)[cursor.op].where;
        currentRun = describeRun(run, Origin::Captured);
      }
      break;
    case EventKind::CaptureEnd:
      capturing = false;
      if (event.what == "ok")
        ++report.graphsCaptured;
      else
        add("capture",
            "the capture of CUDA graph " + std::to_string(event.graph) +
                " was invalidated: its steps run launch by launch",
            captureWhere);
      break;
    case EventKind::GraphLaunch:
      ++report.graphReplays;
      break;
    case EventKind::Violation:
      add(event.what, event.text,
          event.call == lastOpCall ? currentWhere
          : capturing              ? captureWhere
                                   : "outside the plan's device steps, after " + currentWhere);
      break;
    case EventKind::Launch:
    case EventKind::Matmul:
    case EventKind::Memset: {
      lastOpCall = event.call;
      if (isTimedMatmul(event)) {
        checkTimedMatmul(event, i < start);
        break;
      }
      if (i < start) {
        currentWhere = "outside the plan's device steps (setting up)";
        break;
      }
      if (broken)
        break;
      Cursor &at = event.origin == Origin::Captured ? captureCursor : cursor;
      if (!match(event, at)) {
        broken = true;
        break;
      }
      const Run &run = runs[at.run];
      if (event.origin == Origin::Captured)
        captureWhere =
            "while capturing CUDA graph " + std::to_string(event.graph) + ", after " + currentWhere;
      else {
        if (event.origin == Origin::Replayed)
          ++report.replayedSteps;
        checkOp(event, opsOf(run)[at.op], run);
      }
      if (++at.op == opsOf(run).size()) {
        at.op = 0;
        ++at.run;
        if (event.origin != Origin::Captured)
          ++report.functionRuns;
      }
      break;
    }
    default:
      break;
    }
  }
  if (!broken && cursor.run < runs.size()) {
    const Run &run = runs[cursor.run];
    add("sequence",
        "the trace ends with " + std::to_string(runs.size() - cursor.run) + " of " +
            std::to_string(runs.size()) + " function runs not (fully) run, the next being " +
            describeRun(run, Origin::Eager) + " at " + opsOf(run)[cursor.op].where,
        "at the end of the trace");
  }
  return std::move(report);
}

} // namespace

bool isTimedMatmul(const Event &event) {
  return event.kind == EventKind::Matmul && event.stream > 1;
}

std::string DryRunViolation::text() const {
  std::string line = check + ": " + message + " at " + where;
  if (!firstRun.empty() || times > 1)
    line += " [" + firstRun +
            (times > 1 ? (firstRun.empty() ? "" : "; ") + std::to_string(times) + " times" : "") +
            "]";
  return line;
}

std::string DryRunReport::summary() const {
  std::string text =
      "function runs " + std::to_string(functionRuns) + ", launches " + std::to_string(launches) +
      ", matmuls " + std::to_string(matmuls) + " (" + std::to_string(accumulatingMatmuls) +
      " accumulating; " + std::to_string(timedMatmuls) + " runs timing algorithms)" + ", memsets " +
      std::to_string(memsets) + ", graphs captured " + std::to_string(graphsCaptured) +
      ", graph replays " + std::to_string(graphReplays) + " (" + std::to_string(replayedSteps) +
      " device operations), device-to-host copies " + std::to_string(metricReads) +
      ", violations " + std::to_string(violations.size());
  for (const DryRunViolation &violation : violations)
    text += "\n  " + violation.text();
  return text;
}

std::vector<DryRunViolation> DryRunReport::of(const std::string &check) const {
  std::vector<DryRunViolation> found;
  for (const DryRunViolation &violation : violations)
    if (violation.check == check)
      found.push_back(violation);
  return found;
}

DryRunReport checkDryRun(const plan::Plan &plan, const std::vector<Event> &trace,
                         const DryRunSchedule &schedule) {
  return Checker(plan, schedule).check(trace);
}

} // namespace ampc::dryrun
