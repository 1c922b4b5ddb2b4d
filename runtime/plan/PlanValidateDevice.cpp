//===- PlanValidateDevice.cpp - Checks of the device program --------------===//
//
// What the CUDA backend relies on when it runs a plan's device program
// without re-checking anything: kernels it can load, arena placements inside
// their arena and aligned, views of real storage, step arguments that name
// buffers the function can reach with the right sizes, every instruction
// computed by exactly one step group (views, reshapes of stored data, by
// none),
// every buffer a step reads written by an earlier step or persistent, and no
// two placed buffers that are live at the same time sharing bytes. Each
// failure is one line naming the function, the group and the step (see
// docs/plan-format.md, "Validation").
//
//===----------------------------------------------------------------------===//

#include "runtime/plan/Plan.h"
#include "runtime/plan/ValidationDiagnostics.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

namespace ampc::plan {
namespace {

using detail::describeBuffer;
using detail::fail;

/// Bytes of a buffer's data.
uint64_t bufferBytes(const Buffer &buffer) {
  return static_cast<uint64_t>(numElements(buffer)) * dtypeBytes(buffer.dtype);
}

/// Checks one function of the device program against its instruction list.
class FunctionChecker {
public:
  FunctionChecker(const Plan &plan, const DeviceFunction &function,
                  const std::vector<Instruction> &list, bool optimizer)
      : plan(plan), function(function), list(list), optimizer(optimizer),
        name(optimizer ? "optimizer step" : "micro step"),
        state(plan.buffers.size(), State::Unreachable), root(plan.buffers.size()),
        producer(plan.buffers.size(), -1) {}

  void check();

private:
  enum class State { Unreachable, Persistent, Placed, View };

  [[noreturn]] void failFunction(const std::string &message) const {
    fail("device program, " + name + ": " + message);
  }
  [[noreturn]] void failStep(const std::string &message) const {
    fail("device program, " + name + " group " + std::to_string(groupIndex) + " (" +
         function.groups[groupIndex].kind + ") step " + std::to_string(stepIndex) + " (" +
         deviceStepName(function.groups[groupIndex].steps[stepIndex]) + "): " + message);
  }

  void checkPlacements();
  void checkViews();
  void checkCoverage();
  void checkStep(const DeviceStep &step);
  void checkLaunch(const LaunchStep &launch);
  void checkMatmul(const MatmulStep &matmul);
  void checkAttention(const AttentionStep &attention);
  void checkAttentionLayout(const AttentionStep &attention, const AttentionLayout &layout,
                            uint32_t id, int64_t rows, const char *name);
  void checkLiveness();

  /// Checks that \p id names a buffer this function can reach and records
  /// the access (reads must follow a write; writes make it readable).
  void use(uint32_t id, Access access, const std::string &what);
  /// Like use() for an optional buffer field (kNoBuffer: absent).
  void useOptional(uint32_t id, Access access, const std::string &what) {
    if (id != kNoBuffer)
      use(id, access, what);
  }
  void scratch(uint64_t offset, uint64_t bytes, const std::string &what) const {
    if (offset % kDeviceAlignment != 0)
      failStep(what + " at scratch offset " + std::to_string(offset) + " is not " +
               std::to_string(kDeviceAlignment) + "-byte aligned");
    if (offset > function.scratchBytes || bytes > function.scratchBytes - offset)
      failStep(what + " (" + std::to_string(bytes) + " bytes at offset " + std::to_string(offset) +
               ") runs past the scratch region of " + std::to_string(function.scratchBytes) +
               " bytes");
  }
  const Buffer &buffer(uint32_t id) const { return plan.buffers[id]; }
  std::string describe(uint32_t id) const { return describeBuffer(plan, id); }

  const Plan &plan;
  const DeviceFunction &function;
  const std::vector<Instruction> &list;
  bool optimizer;
  std::string name;
  std::vector<State> state;
  /// Views: the buffer holding their data.
  std::vector<uint32_t> root;
  /// The instruction of this list writing each temporary (-1: none).
  std::vector<int> producer;
  /// Dataflow: whether a buffer holds data at the current step.
  std::vector<bool> ready;
  /// Liveness of placed buffers in group indices (first write, last read).
  std::vector<int64_t> firstWrite, lastRead;
  /// In-place reuse: buffer -> the buffer whose bytes it takes over.
  std::map<uint32_t, uint32_t> reuses;
  size_t groupIndex = 0, stepIndex = 0;
};

void FunctionChecker::check() {
  const size_t count = plan.buffers.size();
  for (uint32_t id = 0; id < count; ++id)
    if (buffer(id).role != BufferRole::Temporary)
      state[id] = State::Persistent;
  for (size_t i = 0; i < list.size(); ++i)
    if (!isInPlace(list[i].op))
      for (uint32_t result : list[i].results)
        if (result < count)
          producer[result] = static_cast<int>(i);
  checkPlacements();
  checkViews();
  checkCoverage();

  ready.assign(count, false);
  for (uint32_t id = 0; id < count; ++id)
    ready[id] = state[id] == State::Persistent;
  firstWrite.assign(count, -1);
  lastRead.assign(count, -1);
  for (groupIndex = 0; groupIndex < function.groups.size(); ++groupIndex) {
    const DeviceGroup &group = function.groups[groupIndex];
    for (stepIndex = 0; stepIndex < group.steps.size(); ++stepIndex)
      checkStep(group.steps[stepIndex]);
  }
  // What the function hands back must have been computed.
  std::vector<std::pair<uint32_t, const char *>> results;
  if (optimizer) {
    results = {{plan.gradNorm, "grad norm"}, {plan.learningRate, "learning rate"}};
  } else {
    results = {{plan.loss, "loss"}};
  }
  for (auto [id, what] : results) {
    const uint32_t data = state[id] == State::View ? root[id] : id;
    if (!ready[data])
      failFunction(std::string("the ") + what + " " + describe(id) + " is never written by a step");
    if (state[data] == State::Placed)
      lastRead[data] = static_cast<int64_t>(function.groups.size());
  }
  checkLiveness();
}

void FunctionChecker::checkPlacements() {
  for (size_t i = 0; i < function.placements.size(); ++i) {
    const ArenaPlacement &placement = function.placements[i];
    const uint32_t id = placement.buffer;
    const std::string what = "placement " + std::to_string(i);
    if (id >= plan.buffers.size())
      failFunction(what + ": buffer " + std::to_string(id) + " is out of range (the plan has " +
                   std::to_string(plan.buffers.size()) + " buffers)");
    if (buffer(id).role != BufferRole::Temporary || producer[id] < 0)
      failFunction(what + ": " + describe(id) + " is not a temporary of the " + name);
    if (state[id] != State::Unreachable)
      failFunction(what + ": " + describe(id) + " is placed twice");
    if (placement.offset % kDeviceAlignment != 0)
      failFunction(what + ": " + describe(id) + " at arena offset " +
                   std::to_string(placement.offset) + " is not " +
                   std::to_string(kDeviceAlignment) + "-byte aligned");
    const uint64_t bytes = bufferBytes(buffer(id));
    if (placement.offset > function.arenaBytes || bytes > function.arenaBytes - placement.offset)
      failFunction(what + ": " + describe(id) + " (" + std::to_string(bytes) + " bytes at offset " +
                   std::to_string(placement.offset) + ") runs past the arena of " +
                   std::to_string(function.arenaBytes) + " bytes");
    state[id] = State::Placed;
  }
  // In-place reuse: the same bytes, taken over from another placed buffer.
  std::vector<bool> reused(plan.buffers.size(), false);
  for (size_t i = 0; i < function.placements.size(); ++i) {
    const ArenaPlacement &placement = function.placements[i];
    if (placement.reuses == kNoBuffer)
      continue;
    const std::string what =
        "placement " + std::to_string(i) + ": " + describe(placement.buffer) + " reuses ";
    const uint32_t other = placement.reuses;
    if (other >= plan.buffers.size() || other == placement.buffer || state[other] != State::Placed)
      failFunction(what + "buffer " + std::to_string(other) +
                   ", which is not another placed buffer");
    const auto source = std::find_if(function.placements.begin(), function.placements.end(),
                                     [&](const ArenaPlacement &p) { return p.buffer == other; });
    if (source->offset != placement.offset ||
        bufferBytes(buffer(other)) != bufferBytes(buffer(placement.buffer)))
      failFunction(what + describe(other) + " but does not have its offset and size");
    if (reused[other])
      failFunction(what + describe(other) + ", which another buffer reuses too");
    reused[other] = true;
    reuses.emplace(placement.buffer, other);
  }
}

void FunctionChecker::checkViews() {
  for (size_t i = 0; i < function.views.size(); ++i) {
    const BufferView &view = function.views[i];
    const std::string what = "view " + std::to_string(i);
    for (uint32_t id : {view.buffer, view.source})
      if (id >= plan.buffers.size())
        failFunction(what + ": buffer " + std::to_string(id) + " is out of range (the plan has " +
                     std::to_string(plan.buffers.size()) + " buffers)");
    const uint32_t id = view.buffer;
    if (state[id] != State::Unreachable)
      failFunction(what + ": " + describe(id) + " is already placed or a view");
    // A view is a reshape's result; following the reshapes back must reach
    // the source, which holds real storage.
    uint32_t walk = id;
    while (producer[walk] >= 0 && list[producer[walk]].op == OpCode::Reshape && walk != view.source)
      walk = list[producer[walk]].operands[0];
    if (producer[id] < 0 || list[producer[id]].op != OpCode::Reshape || walk != view.source)
      failFunction(what + ": " + describe(id) + " is not a chain of reshapes of " +
                   describe(view.source));
    if (state[view.source] != State::Placed && state[view.source] != State::Persistent)
      failFunction(what + ": its source " + describe(view.source) +
                   " is neither placed in the arena nor persistent");
    state[id] = State::View;
    root[id] = view.source;
  }
}

void FunctionChecker::checkCoverage() {
  std::vector<int> coveredBy(list.size(), -1);
  for (size_t g = 0; g < function.groups.size(); ++g) {
    const DeviceGroup &group = function.groups[g];
    const std::string what = "group " + std::to_string(g) + " (" + group.kind + ")";
    if (group.steps.empty())
      failFunction(what + " has no steps");
    for (size_t i = 0; i < group.instructions.size(); ++i) {
      const uint32_t index = group.instructions[i];
      if (index >= list.size())
        failFunction(what + " covers instruction " + std::to_string(index) +
                     ", out of range (the " + name + " has " + std::to_string(list.size()) + ")");
      if (i > 0 && index <= group.instructions[i - 1])
        failFunction(what + ": its instructions must be listed in increasing "
                            "order");
      if (list[index].op == OpCode::Reshape && state[list[index].results[0]] == State::View)
        failFunction(what + " covers " + describeInstruction(list[index], index) +
                     ", a view, which runs as no step");
      if (coveredBy[index] >= 0)
        failFunction(describeInstruction(list[index], index) + " is covered by groups " +
                     std::to_string(coveredBy[index]) + " and " + std::to_string(g));
      coveredBy[index] = static_cast<int>(g);
    }
  }
  for (size_t index = 0; index < list.size(); ++index) {
    const Instruction &instruction = list[index];
    const bool view =
        instruction.op == OpCode::Reshape && state[instruction.results[0]] == State::View;
    if (!view && coveredBy[index] < 0)
      failFunction(describeInstruction(instruction, index) + " is computed by no step group" +
                   (instruction.op == OpCode::Reshape ? " and is no view" : ""));
  }
}

void FunctionChecker::use(uint32_t id, Access access, const std::string &what) {
  if (id >= plan.buffers.size())
    failStep(what + ": buffer " + std::to_string(id) + " is out of range (the plan has " +
             std::to_string(plan.buffers.size()) + " buffers)");
  if (static_cast<uint8_t>(access) > 2)
    failStep(what + ": unknown access code");
  if (state[id] == State::Unreachable)
    failStep(what + ": " + describe(id) + " is a temporary the " + name +
             " does not place (not in its arena, not a view)");
  const uint32_t data = state[id] == State::View ? root[id] : id;
  if (access != Access::Read) {
    const BufferRole role = buffer(data).role;
    if (role == BufferRole::Input || role == BufferRole::Constant)
      failStep(what + ": writes " + describe(id) + ", which has role " + bufferRoleName(role));
  }
  if (access != Access::Write && !ready[data])
    failStep(what + ": reads " + describe(id) + " before any step of the " + name + " writes it");
  const int64_t group = static_cast<int64_t>(groupIndex);
  if (state[data] == State::Placed) {
    if (access != Access::Read && firstWrite[data] < 0)
      firstWrite[data] = group;
    lastRead[data] = std::max(lastRead[data], group);
  }
  if (access != Access::Read)
    ready[data] = true;
}

void FunctionChecker::checkStep(const DeviceStep &step) {
  if (const auto *launch = std::get_if<LaunchStep>(&step))
    return checkLaunch(*launch);
  if (const auto *matmul = std::get_if<MatmulStep>(&step))
    return checkMatmul(*matmul);
  if (const auto *attention = std::get_if<AttentionStep>(&step))
    return checkAttention(*attention);
  use(std::get<MemsetStep>(step).buffer, Access::Write, "the zeroed buffer");
}

void FunctionChecker::checkLaunch(const LaunchStep &launch) {
  if (launch.kernel >= plan.device.kernels.size())
    failStep("kernel " + std::to_string(launch.kernel) + " is out of range (the program has " +
             std::to_string(plan.device.kernels.size()) + " kernels)");
  uint64_t threads = 1;
  for (int d = 0; d < 3; ++d) {
    if (launch.grid[d] == 0 || launch.block[d] == 0)
      failStep("grid and block sizes must be at least 1");
    threads *= launch.block[d];
  }
  if (threads > 1024)
    failStep("a block of " + std::to_string(threads) + " threads exceeds CUDA's 1024");
  if (launch.grid[0] > 0x7fffffffu || launch.grid[1] > 65535 || launch.grid[2] > 65535)
    failStep("the grid exceeds CUDA's limits");
  if (static_cast<uint8_t>(launch.space) > 4)
    failStep("unknown launch space");
  for (const DeviceArgument &arg : launch.args) {
    const std::string what = "argument '" + arg.name + "'";
    switch (arg.kind) {
    case ArgKind::Buffer:
      use(arg.buffer, arg.access, what);
      break;
    case ArgKind::Scratch:
      if (arg.value < 0)
        failStep(what + ": negative scratch offset");
      scratch(static_cast<uint64_t>(arg.value), arg.bytes, what);
      break;
    case ArgKind::Table: {
      if (static_cast<uint8_t>(arg.table.kind) > 1)
        failStep(what + ": unknown table kind");
      if (arg.table.entries.empty())
        failStep(what + ": an empty table");
      int64_t previousBlock = -1;
      for (size_t e = 0; e < arg.table.entries.size(); ++e) {
        const TableEntry &entry = arg.table.entries[e];
        const std::string where = what + " entry " + std::to_string(e);
        if (entry.firstBlock <= previousBlock)
          failStep(where + ": first blocks must increase");
        previousBlock = entry.firstBlock;
        if (arg.table.kind == TableKind::Norm) {
          use(entry.grad, Access::Read, where + " data");
          if (buffer(entry.grad).dtype != DType::F32 ||
              entry.elements != numElements(buffer(entry.grad)))
            failStep(where + ": " + describe(entry.grad) + " must be f32 with the entry's " +
                     std::to_string(entry.elements) + " elements");
          continue;
        }
        use(entry.param, Access::ReadWrite, where + " param");
        use(entry.grad, Access::ReadWrite, where + " grad");
        use(entry.firstMoment, Access::ReadWrite, where + " first moment");
        useOptional(entry.secondMoment, Access::ReadWrite, where + " second moment");
        useOptional(entry.copy, Access::Write, where + " copy");
        for (uint32_t id : {entry.param, entry.grad, entry.firstMoment, entry.secondMoment})
          if (id != kNoBuffer &&
              (buffer(id).dtype != DType::F32 || numElements(buffer(id)) != entry.elements))
            failStep(where + ": " + describe(id) +
                     " must be f32 with the "
                     "entry's " +
                     std::to_string(entry.elements) + " elements");
        if (buffer(entry.param).role != BufferRole::Parameter)
          failStep(where + ": " + describe(entry.param) + " is not a parameter");
        if (entry.copy != kNoBuffer && (buffer(entry.copy).role != BufferRole::ParameterCopy ||
                                        numElements(buffer(entry.copy)) != entry.elements))
          failStep(where + ": " + describe(entry.copy) +
                   " is not a parameter copy of the entry's size");
      }
      break;
    }
    case ArgKind::Int64:
    case ArgKind::ErrorRecord:
    case ArgKind::RunScalars:
      break;
    // A graph replays the values it captured: the run's scalars are read
    // from the run-scalar block, never passed by value.
    case ArgKind::Seed:
    case ArgKind::Step:
    case ArgKind::TotalSteps:
      failStep(what + ": argument kind " + argKindName(arg.kind) +
               " passes a per-run value by value; kernels read it through a run_scalars "
               "argument (recompile the model)");
    default:
      failStep(what + ": unknown argument kind");
    }
  }
}

void FunctionChecker::checkMatmul(const MatmulStep &matmul) {
  for (int64_t size : {matmul.m, matmul.n, matmul.k, matmul.batch})
    if (size < 1 || size > (int64_t(1) << 40))
      failStep("m, n, k and batch must be in [1, 2^40]");
  if (static_cast<uint8_t>(matmul.epilogue) > 5)
    failStep("unknown epilogue");
  if (!std::isfinite(matmul.alpha) || !std::isfinite(matmul.beta))
    failStep("alpha and beta must be finite");
  if ((matmul.beta != 0) != (matmul.c != kNoBuffer))
    failStep("beta must be non-zero exactly when there is a C operand");
  use(matmul.a, Access::Read, "A");
  use(matmul.b, Access::Read, "B");
  // cuBLASLt reads C (a residual, or D itself) and the aux matrix with D's layout and type.
  const size_t buffers = plan.buffers.size();
  for (auto [id, what] : {std::pair<uint32_t, const char *>{matmul.c, "C"}, {matmul.aux, "aux"}})
    if (id != kNoBuffer && id < buffers && matmul.d < buffers &&
        buffer(id).dtype != buffer(matmul.d).dtype)
      failStep(std::string(what) + " " + describe(id) + " must have D's dtype " +
               dtypeName(buffer(matmul.d).dtype));
  useOptional(matmul.c, Access::Read, "C");
  const bool biasWritten = matmul.epilogue == Epilogue::BGradB;
  const bool needsBias = matmul.epilogue != Epilogue::None && matmul.epilogue != Epilogue::DGelu;
  if (needsBias != (matmul.bias != kNoBuffer))
    failStep(std::string("epilogue ") + epilogueName(matmul.epilogue) +
             (needsBias ? " needs" : " takes no") + " bias buffer");
  if (!biasWritten)
    useOptional(matmul.bias, Access::Read, "bias");
  const bool auxRead = matmul.epilogue == Epilogue::DGelu;
  if ((matmul.epilogue == Epilogue::GeluAuxBias || auxRead) != (matmul.aux != kNoBuffer))
    failStep("an aux buffer goes with epilogues gelu_aux_bias and dgelu, and only with them");
  if (auxRead && matmul.aux == matmul.d)
    failStep("dgelu reads its aux matrix while it writes D: they must be different buffers");
  if (auxRead)
    use(matmul.aux, Access::Read, "aux");
  use(matmul.d, Access::Write, "D");
  if (biasWritten)
    use(matmul.bias, Access::Write, "bias");
  if (!auxRead)
    useOptional(matmul.aux, Access::Write, "aux");

  // Sizes: every operand holds exactly its matrices.
  auto check = [&](uint32_t id, int64_t rows, int64_t columns, int64_t stride, const char *what) {
    const int64_t matrix = rows * columns;
    if (matmul.batch > 1 && stride != 0 && stride != matrix)
      failStep(std::string(what) + "'s batch stride " + std::to_string(stride) + " must be 0 or " +
               std::to_string(matrix));
    const int64_t expected = (matmul.batch > 1 && stride != 0 ? matmul.batch : 1) * matrix;
    if (numElements(buffer(id)) != expected)
      failStep(std::string(what) + " " + describe(id) + " must hold " + std::to_string(expected) +
               " elements (" + std::to_string(matmul.batch > 1 && stride != 0 ? matmul.batch : 1) +
               " x " + std::to_string(rows) + " x " + std::to_string(columns) + ")");
  };
  check(matmul.a, matmul.m, matmul.k, matmul.strideA, "A");
  check(matmul.b, matmul.k, matmul.n, matmul.strideB, "B");
  if (matmul.batch > 1 && matmul.strideD != matmul.m * matmul.n)
    failStep("D's batch stride must be m * n = " + std::to_string(matmul.m * matmul.n));
  check(matmul.d, matmul.m, matmul.n, matmul.strideD, "D");
  const int64_t outputs = numElements(buffer(matmul.d));
  for (auto [id, what] : {std::pair<uint32_t, const char *>{matmul.c, "C"}, {matmul.aux, "aux"}})
    if (id != kNoBuffer && numElements(buffer(id)) != outputs)
      failStep(std::string(what) + " " + describe(id) + " must have D's " +
               std::to_string(outputs) + " elements");
  if (matmul.bias != kNoBuffer && numElements(buffer(matmul.bias)) != matmul.n)
    failStep("bias " + describe(matmul.bias) + " must have n = " + std::to_string(matmul.n) +
             " elements");
  const DType input = buffer(matmul.a).dtype;
  if (!isFloatDType(input) || buffer(matmul.b).dtype != input)
    failStep("A and B must have one float dtype");
  for (uint32_t id : {matmul.d, matmul.c, matmul.bias, matmul.aux})
    if (id != kNoBuffer && !isFloatDType(buffer(id).dtype))
      failStep(describe(id) + " must have a float dtype");

}

void FunctionChecker::checkAttentionLayout(const AttentionStep &attention,
                                           const AttentionLayout &layout, uint32_t id,
                                           int64_t rows, const char *name) {
  const std::string what = std::string(name) + " (" + describe(id) + ")";
  const int64_t elementBytes = static_cast<int64_t>(dtypeBytes(buffer(id).dtype));
  // The kernels move rows in 16-byte pieces: every row starts 16-byte aligned.
  const int64_t align = 16 / elementBytes;
  if (layout.offset % 16 != 0)
    failStep(what + " starts at byte " + std::to_string(layout.offset) +
             ", not a multiple of 16");
  if (layout.rowStride < attention.headDim || layout.batchStride < 0 || layout.headStride < 0 ||
      layout.rowStride % align != 0 || layout.headStride % align != 0 ||
      layout.batchStride % align != 0)
    failStep(what + " has strides (" + std::to_string(layout.batchStride) + ", " +
             std::to_string(layout.headStride) + ", " + std::to_string(layout.rowStride) +
             "): they must be multiples of 16 bytes, the row stride at least the head dim");
  // The last element any (b, h, t, d) reaches must lie in the buffer.
  const int64_t last = static_cast<int64_t>(layout.offset) / elementBytes +
                       (attention.batch - 1) * layout.batchStride +
                       (attention.heads - 1) * layout.headStride + (rows - 1) * layout.rowStride +
                       attention.headDim;
  if (last > numElements(buffer(id)))
    failStep(what + " reaches element " + std::to_string(last) + " of a buffer of " +
             std::to_string(numElements(buffer(id))) +
             " (batch x heads x rows x head dim by its layout)");
}

void FunctionChecker::checkAttention(const AttentionStep &attention) {
  if (static_cast<uint8_t>(attention.pass) > 1)
    failStep("unknown attention pass");
  const bool backward = attention.pass == AttentionPass::Backward;
  for (int64_t size : {attention.batch, attention.heads, attention.queries, attention.keys})
    if (size < 1 || size > (int64_t(1) << 31))
      failStep("batch, heads, queries and keys must be in [1, 2^31]");
  if (attention.headDim != 16 && attention.headDim != 32 && attention.headDim != 64 &&
      attention.headDim != 128)
    failStep("head dim " + std::to_string(attention.headDim) +
             " is not one the flash kernels have (16, 32, 64, 128)");
  if (!std::isfinite(attention.scale))
    failStep("the scale must be finite");
  if (attention.blockRows != 32 && attention.blockRows != 64)
    failStep("block rows " + std::to_string(attention.blockRows) +
             " is not one the flash kernels have (32, 64)");
  // The forward kernels: the fp32 ones 32 rows (as their dq and dk/dv), the tensor-core ones
  // 128 at head dims up to 64 and 64 at 128.
  const uint32_t forwardRows = attention.blockRows == 32 ? 32 : attention.headDim <= 64 ? 128 : 64;
  if (attention.forwardBlockRows != forwardRows)
    failStep("forward block rows " + std::to_string(attention.forwardBlockRows) +
             " is not the forward kernel's (" + std::to_string(forwardRows) + " at block rows " +
             std::to_string(attention.blockRows) + " and head dim " +
             std::to_string(attention.headDim) + ")");
  const uint32_t kernels[] = {attention.forwardKernel, attention.deltaKernel, attention.dqKernel,
                              attention.dkdvKernel};
  if (backward && (attention.out == kNoBuffer) != (attention.lse == kNoBuffer))
    failStep("a backward step reads both the saved o and lse, or neither");
  const bool saved = attention.readsSavedForward();
  for (int i = 0; i < 4; ++i) {
    const bool needed = backward ? i > 0 || !saved : i == 0;
    if (needed && kernels[i] >= plan.device.kernels.size())
      failStep("kernel " + std::to_string(kernels[i]) + " is out of range (the program has " +
               std::to_string(plan.device.kernels.size()) + " kernels)");
    if (!needed && kernels[i] != kNoKernel)
      failStep(backward ? "a backward step with a saved o and lse runs no forward kernel"
                        : "a forward step names backward kernels");
  }
  const int64_t slices = attention.batch * attention.heads;
  const int64_t queryElements = slices * attention.queries * attention.headDim;
  use(attention.q, Access::Read, "q");
  use(attention.k, Access::Read, "k");
  use(attention.v, Access::Read, "v");
  struct Operand {
    uint32_t id;
    const AttentionLayout *layout;
    int64_t rows;
    const char *name;
  };
  std::vector<Operand> operands = {{attention.q, &attention.qLayout, attention.queries, "q"},
                                   {attention.k, &attention.kLayout, attention.keys, "k"},
                                   {attention.v, &attention.vLayout, attention.keys, "v"}};
  if (backward) {
    if (saved) {
      use(attention.out, Access::Read, "o");
      use(attention.lse, Access::Read, "lse");
      operands.push_back({attention.out, &attention.oLayout, attention.queries, "o"});
    }
    use(attention.dOut, Access::Read, "dO");
    // dq, dk and dv may be windows of one buffer (the gradient of a packed projection): each
    // kernel writes its own elements.
    std::vector<uint32_t> written;
    for (uint32_t id : {attention.dq, attention.dk, attention.dv})
      if (std::find(written.begin(), written.end(), id) == written.end()) {
        use(id, Access::Write, id == attention.dq ? "dq" : id == attention.dk ? "dk" : "dv");
        written.push_back(id);
      }
    operands.insert(operands.end(),
                    {{attention.dOut, &attention.oLayout, attention.queries, "dO"},
                     {attention.dq, &attention.qLayout, attention.queries, "dq"},
                     {attention.dk, &attention.kLayout, attention.keys, "dk"},
                     {attention.dv, &attention.vLayout, attention.keys, "dv"}});
  } else {
    for (uint32_t id : {attention.dOut, attention.dq, attention.dk, attention.dv})
      if (id != kNoBuffer)
        failStep("a forward step has no gradient buffers");
    use(attention.out, Access::Write, "o");
    operands.push_back({attention.out, &attention.oLayout, attention.queries, "o"});
    if (attention.lse != kNoBuffer)
      use(attention.lse, Access::Write, "lse");
  }
  const DType dtype = buffer(attention.q).dtype;
  for (const Operand &operand : operands) {
    if (buffer(operand.id).dtype != dtype || !isFloatDType(dtype))
      failStep(describe(operand.id) + " must have q's float dtype");
    checkAttentionLayout(attention, *operand.layout, operand.id, operand.rows, operand.name);
  }
  const uint64_t rows = static_cast<uint64_t>(slices * attention.queries);
  if (attention.lse != kNoBuffer) {
    if (numElements(buffer(attention.lse)) != static_cast<int64_t>(rows) ||
        buffer(attention.lse).dtype != DType::F32)
      failStep(describe(attention.lse) + " (lse) must be f32 with " + std::to_string(rows) +
               " elements (batch x heads x rows)");
  } else {
    scratch(attention.lseOffset, rows * 4, "the row log-sum-exp");
  }
  if (backward && !saved)
    scratch(attention.outOffset, static_cast<uint64_t>(queryElements) * dtypeBytes(dtype),
            "the recomputed output");
  if (backward)
    scratch(attention.deltaOffset, rows * 4, "delta");
}

void FunctionChecker::checkLiveness() {
  struct Interval {
    uint32_t buffer;
    int64_t first, last;
    uint64_t begin, end;
  };
  std::vector<Interval> intervals;
  for (const ArenaPlacement &placement : function.placements) {
    const uint32_t id = placement.buffer;
    if (firstWrite[id] < 0)
      failFunction(describe(id) + " is placed in the arena but no step writes it");
    intervals.push_back({id, firstWrite[id], std::max(lastRead[id], firstWrite[id]),
                         placement.offset, placement.offset + bufferBytes(buffer(id))});
  }
  // Sweep by first use: an interval can only collide with those still live.
  std::sort(intervals.begin(), intervals.end(),
            [](const Interval &a, const Interval &b) { return a.first < b.first; });
  for (size_t i = 0; i < intervals.size(); ++i)
    for (size_t j = i + 1; j < intervals.size() && intervals[j].first <= intervals[i].last; ++j) {
      const Interval &a = intervals[i], &b = intervals[j];
      // A buffer written in place over one read for the last time by the same group.
      auto inPlace = [&](const Interval &over, const Interval &source) {
        auto it = reuses.find(over.buffer);
        return it != reuses.end() && it->second == source.buffer &&
               lastRead[source.buffer] == firstWrite[over.buffer];
      };
      if (inPlace(a, b) || inPlace(b, a))
        continue;
      if (a.begin < b.end && b.begin < a.end && a.end > a.begin && b.end > b.begin)
        failFunction(describe(a.buffer) + " and " + describe(b.buffer) +
                     " share arena bytes while both are live (groups " + std::to_string(a.first) +
                     "-" + std::to_string(a.last) + " and " + std::to_string(b.first) + "-" +
                     std::to_string(b.last) + ")");
    }
}

/// An empty function: nothing placed, nothing run.
bool isEmpty(const DeviceFunction &function) {
  return function.arenaBytes == 0 && function.scratchBytes == 0 && function.placements.empty() &&
         function.views.empty() && function.groups.empty();
}

} // namespace

void validateDeviceProgram(const Plan &plan) {
  const DeviceProgram &device = plan.device;
  if (device.empty())
    return;
  for (size_t i = 0; i < device.modules.size(); ++i) {
    const DeviceModule &module = device.modules[i];
    const std::string what =
        "device program: module " + std::to_string(i) + " '" + module.name + "'";
    if (module.name.empty())
      fail("device program: module " + std::to_string(i) + " has no name");
    if (module.cubinSm80.empty() && module.cubinSm90.empty() && module.ptx.empty())
      fail(what + " has neither a cubin nor PTX");
    for (const std::vector<uint8_t> *cubin : {&module.cubinSm80, &module.cubinSm90})
      if (!cubin->empty() && (cubin->size() < 4 || (*cubin)[0] != 0x7f || (*cubin)[1] != 'E' ||
                              (*cubin)[2] != 'L' || (*cubin)[3] != 'F'))
        fail(what + " has a cubin that is not an ELF file");
  }
  for (size_t i = 0; i < device.kernels.size(); ++i) {
    const DeviceKernel &kernel = device.kernels[i];
    const std::string what =
        "device program: kernel " + std::to_string(i) + " '" + kernel.entry + "'";
    if (kernel.entry.empty())
      fail("device program: kernel " + std::to_string(i) + " has no entry name");
    if (kernel.module >= device.modules.size())
      fail(what + ": module " + std::to_string(kernel.module) +
           " is out of range (the program has " + std::to_string(device.modules.size()) +
           " modules)");
    const std::string &ptx = device.modules[kernel.module].ptx;
    if (!ptx.empty() && ptx.find(".entry " + kernel.entry + "(") == std::string::npos)
      fail(what + ": the PTX of module '" + device.modules[kernel.module].name +
           "' has no such entry");
  }
  FunctionChecker(plan, device.microStep, plan.instructions, false).check();
  if (plan.optimizerInstructions.empty()) {
    if (!isEmpty(device.optimizerStep))
      fail("device program: it has an optimizer step, but the plan has none");
  } else {
    FunctionChecker(plan, device.optimizerStep, plan.optimizerInstructions, true).check();
  }
}

} // namespace ampc::plan
