//===- DryRunChecker.cpp - A recorded CUDA run against its plan -----------===//

#include "DryRunChecker.h"
#include "AllocationTable.h"
#include "ExpectedOps.h"

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
