//===- DeviceProgramBuilderImpl.h - The device program builder's state ---*- C++ -*-===//
//
// Private to compiler/cuda/DeviceProgram*.cpp: the Builder that turns a model's fused IR into
// the plan's device program, and its helpers. DeviceProgramSteps.cpp translates one fused group
// into device steps (launches with their bound arguments, matmuls, attention, memsets);
// DeviceProgramBuilder.cpp walks the functions, places the arena and views, and writes the
// flash-attention modules' source.
//
//===--------------------------------------------------------------------------===//

#ifndef AMPC_COMPILER_CUDA_DEVICEPROGRAMBUILDERIMPL_H
#define AMPC_COMPILER_CUDA_DEVICEPROGRAMBUILDERIMPL_H

#include "compiler/cuda/DeviceProgramBuilder.h"
#include "compiler/cuda/CudaCodegen.h"
#include "compiler/support/Format.h"
#include "passes/ArenaValues.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/SymbolTable.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace ampc {
namespace deviceprogram {

// The MLIR and graph names the builder's declarations use (using-declarations, not directives:
// a file that includes this header sees only these).
namespace func = mlir::func;
using graph::ModelOp;
using mlir::Operation;
using mlir::RankedTensorType;
using mlir::Type;
using mlir::Value;

/// Alignment of every arena and scratch slice (256 bytes): enough for the kernels' 16-byte
/// packs and for cuBLASLt's preferred operand alignment.
constexpr uint64_t kAlignment = plan::kDeviceAlignment;
/// Grid-stride kernels need no more blocks than this (x dimension).
constexpr int64_t kMaxGridStrideBlocks = 65535;

/// \p bytes rounded up to the next multiple of kAlignment.
inline uint64_t alignUp(uint64_t bytes) {
  return (bytes + kAlignment - 1) / kAlignment * kAlignment;
}

/// The size of a plan buffer's dense row-major storage.
inline uint64_t bufferBytes(const plan::Buffer &buffer) {
  return static_cast<uint64_t>(plan::numElements(buffer)) * plan::dtypeBytes(buffer.dtype);
}

/// The static shape of a ranked tensor value.
inline std::vector<int64_t> shapeOf(Value value) {
  auto type = llvm::cast<RankedTensorType>(value.getType());
  return std::vector<int64_t>(type.getShape().begin(), type.getShape().end());
}

/// The product of dims[begin, end): the element count of a run of dimensions (1 if empty).
inline int64_t product(const std::vector<int64_t> &dims, size_t begin, size_t end) {
  int64_t result = 1;
  for (size_t i = begin; i < end; ++i)
    result *= dims[i];
  return result;
}

/// "bf16", "f16", "f32" for the flash kernels' element types.
inline std::string floatName(Type type) {
  if (type.isBF16())
    return "bf16";
  if (type.isF16())
    return "f16";
  if (type.isF32())
    return "f32";
  return "";
}

/// "micro_step group 18 (matmul_epilogue)", for messages.
inline std::string describeGroup(func::FuncOp function, int64_t id, const std::string &kind) {
  return function.getName().str() + " group " + std::to_string(id) + " (" + kind + ")";
}

/// One fused group of a function, its ops in program order.
struct FusedGroup {
  int64_t id = 0;
  std::string kind;
  std::vector<Operation *> ops;
};

/// Scratch memory of one step group: each name (a kernel's "rowStats", an attention's lse) gets
/// one aligned slice, shared by the group's steps that use the name.
struct GroupScratch {
  std::map<std::string, uint64_t> offsets;
  uint64_t bytes = 0;

  uint64_t slice(const std::string &name, uint64_t size) {
    auto [it, inserted] = offsets.try_emplace(name, bytes);
    if (inserted)
      bytes += alignUp(std::max<uint64_t>(size, 1));
    return it->second;
  }
};

/// Builds the device program of one model: for each step function, the step groups in the
/// fusion schedule's order, each with its launches, matmuls, attention calls and memsets and
/// their arguments bound to plan buffers; then the arena placements and the views. Kernels and
/// modules are interned so that equal code is compiled and stored once.
class Builder {
public:
  Builder(ModelOp model, const plan::Plan &plan, const PlanProvenance &provenance)
      : model(model), plan(plan), provenance(provenance) {}

  /// Builds the micro step, then the optimizer step, then the flash modules' sources.
  DeviceProgramSources run();

private:
  /// Builds one step function (the micro step or the optimizer step) into \p out.
  void buildFunction(func::FuncOp function, const std::vector<plan::Instruction> &list,
                     plan::DeviceFunction &out, bool optimizer);
  /// Appends the device steps of one fused group.
  void buildGroup(const FusedGroup &group, plan::DeviceGroup &out, GroupScratch &scratch);
  /// A generated kernel's launch: grid, block and every argument bound.
  plan::LaunchStep launchStep(const GeneratedKernel &kernel, GroupScratch &scratch);
  /// The cuBLASLt call of a matmul group, with its bias / gelu epilogue.
  plan::MatmulStep matmulStep(const FusedGroup &group);
  /// The flash-attention kernels and scratch of an attention or attention_grad op.
  plan::AttentionStep attentionStep(Operation *op, GroupScratch &scratch);
  /// The arena placements of the temporaries the function's steps write.
  void placeArena(func::FuncOp function, const std::vector<plan::Instruction> &list,
                  plan::DeviceFunction &out);

  /// The plan buffer the emitter gave an SSA value of the function being built.
  uint32_t bufferOf(Value value) const {
    auto it = provenance.bufferOf.find(value);
    if (it == provenance.bufferOf.end())
      throw std::runtime_error("device program: a value of " + function.getName().str() +
                               " has no plan buffer");
    return it->second;
  }
  /// The plan buffer a kernel argument's binding names ("@symbol", "%N", "%N#k").
  uint32_t bindingBuffer(const std::string &binding, const GeneratedKernel &kernel) const;
  /// The plan index of the first instruction of op number N ("instruction %N").
  int64_t bindingInstruction(const std::string &binding, const GeneratedKernel &kernel) const;
  /// Op N of the function being built, for a binding "%N" or "%N#k".
  Operation *opNumber(const std::string &text, const GeneratedKernel &kernel) const;
  /// The persistent buffer (parameter, input, state, copy) of a model symbol.
  uint32_t symbolBuffer(const std::string &name, const std::string &context) const {
    auto it = persistentByName.find(name);
    if (it == persistentByName.end())
      throw std::runtime_error("device program: " + context + " names @" + name +
                               ", which is no buffer of the plan");
    return it->second;
  }
  /// The program's kernel index for a generated kernel, adding its module the first time.
  uint32_t internGenerated(const GeneratedKernel &kernel);
  /// The kernel index of a flash-attention entry point, in its (dtype, head dim) module.
  uint32_t internFlash(const std::string &dtype, int64_t headDim, const std::string &entry);

  ModelOp model;
  const plan::Plan &plan;
  const PlanProvenance &provenance;
  DeviceProgramSources result;
  /// Every buffer that is not a temporary, by its symbol name.
  std::map<std::string, uint32_t> persistentByName;
  /// Generated kernels by their full source.
  std::map<std::string, uint32_t> kernelBySource;
  /// Flash-attention kernels by (module, entry point).
  std::map<std::pair<uint32_t, std::string>, uint32_t> flashKernelByEntry;
  /// Flash modules by (dtype, head dim), and the entries each needs.
  std::map<std::pair<std::string, int64_t>, uint32_t> flashModules;
  std::map<uint32_t, std::pair<std::pair<std::string, int64_t>, std::vector<std::string>>>
      flashEntries;
  /// The generated kernels of each (function name, group id), in launch order; they point
  /// into `kernels`, which is filled once and never resized after.
  std::map<std::pair<std::string, int64_t>, std::vector<const GeneratedKernel *>> kernelsOfGroup;
  std::vector<GeneratedKernel> kernels;

  // The function being built.
  mutable func::FuncOp function;
  /// The function's ops in order: op N is what a kernel binding "%N" names.
  std::vector<Operation *> opsByIndex;
  /// The index its next step group gets.
  int64_t groupIndex = 0;
  /// Kernel outputs that may overwrite an input in place: (group, output, input).
  struct InPlace {
    int64_t group;
    uint32_t output, input;
  };
  std::vector<InPlace> inPlace;
};

} // namespace deviceprogram
} // namespace ampc

#endif // AMPC_COMPILER_CUDA_DEVICEPROGRAMBUILDERIMPL_H
