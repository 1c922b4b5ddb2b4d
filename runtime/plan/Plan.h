//===- Plan.h - The execution plan shared by the compiler and the runtime -===//
//
// A plan is everything a backend needs to run a compiled model: the buffers
// (name, element type, static shape, role), how parameters are initialised,
// the model inputs, constant data, and a straight-line list of instructions,
// each reading operand buffers and writing its result buffers. A training plan
// adds a second list, the optimizer step, and persistent state buffers. It is
// the only contract between the compiler and the runtime; its binary encoding
// is documented byte by byte in docs/plan-format.md and versioned by
// kFormatVersion. Version 4 adds the device program (DeviceProgram.h): what
// the CUDA backend runs instead of the instructions; version 5 stores its
// kernel binaries zlib-compressed; version 6 the given initialiser (values
// embedded in the plan: a model imported with its trained or exported weights); version 7
// the rows per block of an attention step (the tensor-core kernels cover 64); version 8
// attention's optional row log-sum-exp result, attention_grad's optional saved (o, lse)
// operands, and the attention step's lse buffer (a backward with saved o and lse runs no
// forward kernel); version 9 where each attention operand lies in its buffer (offset and
// strides: q, k and v read in place from a packed projection); version 10 the matmul epilogue
// dgelu (a tanh gelu's gradient applied to the product, the gelu's input read as aux) and the
// attention step's forward rows per block (128 for the tensor-core forward at D <= 64);
// version 11 the activation opcodes 51-58 and attributes checked against PlanAttrs.def (an
// attribute the opcode does not declare is refused). From version 11 on, new opcodes are
// appended without a version change (the reader names an unknown one).
//
//===----------------------------------------------------------------------===//

#ifndef AMPC_RUNTIME_PLAN_PLAN_H
#define AMPC_RUNTIME_PLAN_PLAN_H

#include "runtime/plan/DeviceProgram.h"
#include "runtime/plan/OpCodes.h"

#include <cstddef>
#include <cstdint>
#include <iosfwd>
#include <map>
#include <stdexcept>
#include <string>
#include <variant>
#include <vector>

namespace ampc::plan {

/// The binary format version this runtime writes and reads.
inline constexpr uint32_t kFormatVersion = 12;

/// Element type of a buffer. The numeric values are the on-disk codes.
enum class DType : uint8_t { F32 = 0, BF16 = 1, F16 = 2, I32 = 3, I64 = 4 };

/// What a buffer holds and who fills it.
enum class BufferRole : uint8_t {
  Parameter = 0, ///< trainable weights, filled by initialisation
  Input = 1,     ///< model inputs, filled by the caller for each run
  Constant = 2,  ///< data embedded in the plan
  Temporary = 3, ///< written by exactly one instruction
  /// Persistent f32 training state (gradient accumulators, optimizer
  /// moments): zero when an executor is built, kept across runs, written only
  /// in place by accumulate, adamw, sgd and update_loss_scale.
  State = 4,
  /// The reduced-precision (bf16 or f16) copy of an f32 parameter that the
  /// micro step reads; refreshed (round to nearest even) from its source
  /// after initialisation, after setParameterValues and by adamw/sgd, so the
  /// conversion happens once per optimizer step. See Plan::parameterCopies.
  ParameterCopy = 5
};

/// A statically shaped tensor. A scalar has an empty shape.
struct Buffer {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  BufferRole role;
};

/// How a parameter's initial values are drawn, or (Given) where they come from.
enum class InitKind : uint8_t { Zeros = 0, Ones = 1, Normal = 2, Uniform = 3, Given = 4 };

/// A trainable parameter and its initialiser.
struct Parameter {
  std::string name;
  uint32_t buffer;
  InitKind init;
  double a = 0, b = 0; ///< Normal: mean, std; Uniform: low, high
  bool weightDecay = true;
  /// False for model state the optimizer never updates (a batch norm's running statistics):
  /// written in place by update_running_stats only.
  bool trained = true;
  /// Given: the initial values, one per element in row-major order (an
  /// imported model's weights); empty for every other kind.
  std::vector<float> values;
};

/// What an integer input feeds, so a training runner knows which data
/// stream to bind to it. The numeric values are the on-disk codes.
enum class InputUse : uint8_t {
  None = 0,    ///< anything else (or unknown)
  Indices = 1, ///< reaches an embedding's ids (token ids)
  Labels = 2   ///< reaches cross_entropy's labels (targets)
};

/// A model input, supplied by the caller.
struct Input {
  std::string name;
  uint32_t buffer;
  /// Integer inputs: valid values are [0, bound); 0 = unconstrained.
  int64_t bound = 0;
  InputUse use = InputUse::None;
};

/// Constant data for a buffer with role Constant.
struct Constant {
  uint32_t buffer;
  /// Little-endian, row-major, in the buffer's dtype: every element, or one element that every
  /// element repeats (a splat; see isSplat).
  std::vector<uint8_t> bytes;
};

/// Whether \p constant holds one element for a buffer of more (a splat constant).
bool isSplat(const Plan &plan, const Constant &constant);

/// A reduced-precision copy of a parameter: buffer (role ParameterCopy,
/// dtype BF16 or F16) holds source (a Parameter buffer of the same shape)
/// rounded to nearest even.
struct ParameterCopy {
  uint32_t buffer;
  uint32_t source;
};

/// How the loss is scaled. The numeric values are the on-disk codes.
enum class LossScaleMode : uint8_t { None = 0, Static = 1, Dynamic = 2 };

/// Loss scaling (GradScaler). When mode != None the five buffers are f32
/// scalar State buffers: the current scale, the count of consecutive finite
/// steps, a flag (0/1) set when any unscaled gradient was non-finite during
/// the current optimizer step, the number of optimizer steps actually
/// applied, and the number of backoffs the minimum scale stopped (kept there
/// by the device program's update_loss_scale kernel and the CPU executor; no
/// instruction names it as an operand). When an executor is
/// built and at resetState() the scale buffer holds initialScale and the
/// others 0.
struct LossScaling {
  LossScaleMode mode = LossScaleMode::None;
  float initialScale = 65536;
  float growthFactor = 2;
  float backoffFactor = 0.5;
  int64_t growthInterval = 2000;
  float minScale = 0;
  uint32_t scale = 0, growthTracker = 0, foundNonFinite = 0, appliedSteps = 0;
  uint32_t floorHits = 0;
};

/// An attribute value: an integer, a real, or a list of integers.
using AttrValue = std::variant<int64_t, double, std::vector<int64_t>>;

/// One operation: reads `operands`, writes `results` (exactly one, except
/// layernorm_grad (3), rmsnorm_grad (2), attention_grad (3) and the in-place
/// accumulate (1, or 2 with unscaling), adamw (4, or 5 with a parameter copy),
/// sgd (3, or 4 with a copy) and update_loss_scale (4), whose results alias
/// operands).
struct Instruction {
  OpCode op;
  std::vector<uint32_t> operands;
  std::vector<uint32_t> results;
  /// By name, as stored; read and written through the typed keys of
  /// PlanAttrs.h (plan::get(instruction, plan::attr::causal)).
  std::map<std::string, AttrValue> attrs;
  /// "file:line:col" of the source op, for diagnostics.
  std::string location;
};

/// A compiled model.
struct Plan {
  std::string modelName;
  std::vector<Buffer> buffers;
  std::vector<Parameter> parameters;
  std::vector<Input> inputs;
  std::vector<Constant> constants;
  /// The forward pass; in a training plan, the micro step (forward,
  /// backward and gradient accumulation).
  std::vector<Instruction> instructions;
  /// The scalar float buffer holding the loss.
  uint32_t loss = 0;
  /// The optimizer step, run once per accumulationSteps micro steps. Empty
  /// in a forward-only plan: a plan is a training plan iff this is non-empty.
  std::vector<Instruction> optimizerInstructions;
  /// Micro steps per optimizer step (>= 1).
  int64_t accumulationSteps = 1;
  /// Scalar f32 buffers the optimizer step writes, read for logging
  /// (meaningful only in a training plan).
  uint32_t gradNorm = 0, learningRate = 0;
  /// Free text describing the optimizer and schedule, for logs.
  std::string trainingSummary;
  /// Reduced-precision copies of parameters (mixed precision).
  std::vector<ParameterCopy> parameterCopies;
  /// Loss scaling (mode None: none).
  LossScaling lossScaling;
  /// When true, the CPU executor checks the float results of every micro-step
  /// instruction and remembers the first one that produced a non-finite value
  /// during the current optimizer step (Executor::firstNonFinite).
  bool debugNonFinite = false;
  /// How to run the plan on a GPU; empty when it was compiled without the
  /// CUDA toolkit (the runtime then reports that the plan has no GPU code).
  DeviceProgram device;
};

/// The loss-scale mode's name ("none", "static", "dynamic").
const char *lossScaleModeName(LossScaleMode mode);
/// The dtype's name ("f32", "bf16", "f16", "i32", "i64").
const char *dtypeName(DType dtype);
/// Bytes per element of \p dtype.
size_t dtypeBytes(DType dtype);
/// Number of elements of \p buffer (1 for a scalar).
int64_t numElements(const Buffer &buffer);

/// Number of elements of a tensor of \p shape (1 for a scalar).
int64_t numElements(const std::vector<int64_t> &shape);
/// True for F32, BF16 and F16.
bool isFloatDType(DType dtype);
/// True for I32 and I64.
bool isIntegerDType(DType dtype);
/// The role's name ("parameter", "input", "constant", "temporary",
/// "state", "parameter_copy").
const char *bufferRoleName(BufferRole role);
/// The initialiser's name ("zeros", "ones", "normal", "uniform", "given").
const char *initKindName(InitKind init);
/// The input use's name ("none", "indices", "labels").
const char *inputUseName(InputUse use);
/// The index of the buffer called \p name; PlanError if there is none.
uint32_t findBuffer(const Plan &plan, const std::string &name);
/// A shape as text: "[2, 3]", "[]" for a scalar.
std::string shapeToString(const std::vector<int64_t> &shape);
/// How diagnostics name an instruction: "instruction 3 (matmul at
/// model.mlir:4:7)".
std::string describeInstruction(const Instruction &instruction, size_t index);

/// Any problem reading, writing or validating a plan. what() is one line.
class PlanError : public std::runtime_error {
public:
  using runtime_error::runtime_error;
};

/// Writes \p plan in the binary format to \p out. Throws PlanError if the
/// stream fails.
void writePlan(const Plan &plan, std::ostream &out);
/// Reads a binary plan from \p in and validates it (validatePlan). Throws
/// PlanError with a one-line cause on any malformed input.
Plan readPlan(std::istream &in);
/// Writes \p plan to `path.tmp`, checks that every byte reached the file, and
/// renames it over \p path, so a failed save (full disk, bad directory) leaves
/// any existing file untouched. Throws PlanError naming the path.
void savePlan(const Plan &plan, const std::string &path);
/// Reads and validates the plan at \p path. Throws PlanError naming the path
/// if it is missing, unreadable or malformed.
Plan loadPlan(const std::string &path);
/// Checks everything a backend relies on (see docs/plan-format.md,
/// "Validation"). Throws PlanError naming the offending instruction, its
/// opcode and location.
void validatePlan(const Plan &plan);
/// The device program's part of validatePlan (run by it): kernels, arenas,
/// views, step arguments and the coverage of the instructions.
void validateDeviceProgram(const Plan &plan);

/// The one-line message for an error a kernel recorded while running the
/// micro step (\p optimizerStep false) or the optimizer step, worded as the
/// CPU backend words the same failure ("instruction 12 (cross_entropy at
/// m.mlir:4:7): label 300 at row 5 is outside the classes [0, 256) ...").
std::string describeDeviceError(const Plan &plan, bool optimizerStep,
                                const DeviceErrorRecord &record);

/// The length of the prefix of plan.instructions that computes the loss:
/// every instruction up to and including the one that writes plan.loss. In
/// a training plan it is the forward pass of the micro step, which a
/// validation loss runs alone (cpu::RunOptions::forwardOnly). PlanError when
/// no instruction writes the loss or one in the prefix writes a Parameter or
/// State buffer (running it alone would change the training state), other
/// than update_running_stats, which does nothing outside training.
size_t forwardInstructionCount(const Plan &plan);

} // namespace ampc::plan

#endif // AMPC_RUNTIME_PLAN_PLAN_H
