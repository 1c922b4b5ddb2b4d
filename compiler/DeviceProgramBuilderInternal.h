//===- DeviceProgramBuilderInternal.h - device program builder internals -*- C++ -*-===//
//
// What the files of the device program builder share: the alignment and size helpers, a fused
// group and a step group's scratch, and the Builder whose member functions are split between
// DeviceProgramBuilder.cpp (walking each function's fused groups in their scheduled order,
// placing the arena, turning reshapes into views) and DeviceProgramSteps.cpp (translating one
// fused group into device steps: launches, matmuls, attention calls, memsets). Internal to
// compiler/DeviceProgram*.cpp.
//
//===--------------------------------------------------------------------------===//

#ifndef AMPC_COMPILER_DEVICEPROGRAMBUILDERINTERNAL_H
#define AMPC_COMPILER_DEVICEPROGRAMBUILDERINTERNAL_H

#include "compiler/CudaCodegen.h"
#include "compiler/DeviceProgramBuilder.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace ampc {
namespace deviceprogram {

using namespace mlir;
using namespace ampc::graph;

constexpr uint64_t kAlignment = plan::kDeviceAlignment;
/// Grid-stride kernels need no more blocks than this (x dimension).
constexpr int64_t kMaxGridStrideBlocks = 65535;

inline uint64_t alignUp(uint64_t bytes) { return (bytes + kAlignment - 1) / kAlignment * kAlignment; }

inline uint64_t bufferBytes(const plan::Buffer &buffer) {
  return static_cast<uint64_t>(plan::numElements(buffer)) * plan::dtypeBytes(buffer.dtype);
}

inline std::vector<int64_t> shapeOf(Value value) {
  auto type = llvm::cast<RankedTensorType>(value.getType());
  return std::vector<int64_t>(type.getShape().begin(), type.getShape().end());
}

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

class Builder {
public:
  Builder(ModelOp model, const plan::Plan &plan, const PlanProvenance &provenance)
      : model(model), plan(plan), provenance(provenance) {}

  DeviceProgramSources run();

private:
  void buildFunction(func::FuncOp function, const std::vector<plan::Instruction> &list,
                     plan::DeviceFunction &out, bool optimizer);
  void buildGroup(const FusedGroup &group, plan::DeviceGroup &out, GroupScratch &scratch);
  plan::LaunchStep launchStep(const GeneratedKernel &kernel, GroupScratch &scratch);
  plan::MatmulStep matmulStep(const FusedGroup &group);
  plan::AttentionStep attentionStep(Operation *op, GroupScratch &scratch);
  void placeArena(func::FuncOp function, const std::vector<plan::Instruction> &list,
                  plan::DeviceFunction &out);

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
  Operation *opNumber(const std::string &text, const GeneratedKernel &kernel) const;
  uint32_t symbolBuffer(const std::string &name, const std::string &context) const {
    auto it = persistentByName.find(name);
    if (it == persistentByName.end())
      throw std::runtime_error("device program: " + context + " names @" + name +
                               ", which is no buffer of the plan");
    return it->second;
  }
  uint32_t internGenerated(const GeneratedKernel &kernel);
  uint32_t internFlash(const std::string &dtype, int64_t headDim, const std::string &entry);

  ModelOp model;
  const plan::Plan &plan;
  const PlanProvenance &provenance;
  DeviceProgramSources result;
  std::map<std::string, uint32_t> persistentByName;
  /// Generated kernels by their full source.
  std::map<std::string, uint32_t> kernelBySource;
  /// Flash-attention kernels by (module, entry point).
  std::map<std::pair<uint32_t, std::string>, uint32_t> flashKernelByEntry;
  /// Flash modules by (dtype, head dim), and the entries each needs.
  std::map<std::pair<std::string, int64_t>, uint32_t> flashModules;
  std::map<uint32_t, std::pair<std::pair<std::string, int64_t>, std::vector<std::string>>>
      flashEntries;
  std::map<std::pair<std::string, int64_t>, std::vector<const GeneratedKernel *>> kernelsOfGroup;
  std::vector<GeneratedKernel> kernels;

  // The function being built.
  mutable func::FuncOp function;
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

#endif // AMPC_COMPILER_DEVICEPROGRAMBUILDERINTERNAL_H
