//===- DeviceProgram.cpp - Names of device programs and the buffers their steps touch -===//

#include "runtime/plan/Plan.h"
#include "runtime/plan/PlanAttrs.h"

#include <algorithm>

namespace ampc::plan {

const char *accessName(Access access) {
  switch (access) {
  case Access::Read:
    return "read";
  case Access::Write:
    return "write";
  case Access::ReadWrite:
    return "read-write";
  }
  return "unknown";
}

const char *argKindName(ArgKind kind) {
  switch (kind) {
  case ArgKind::Buffer:
    return "buffer";
  case ArgKind::Int64:
    return "int64";
  case ArgKind::Seed:
    return "seed";
  case ArgKind::Step:
    return "step";
  case ArgKind::TotalSteps:
    return "total_steps";
  case ArgKind::Scratch:
    return "scratch";
  case ArgKind::Table:
    return "table";
  case ArgKind::ErrorRecord:
    return "error_record";
  case ArgKind::RunScalars:
    return "run_scalars";
  }
  return "unknown";
}

const char *epilogueName(Epilogue epilogue) {
  switch (epilogue) {
  case Epilogue::None:
    return "none";
  case Epilogue::Bias:
    return "bias";
  case Epilogue::GeluTanhBias:
    return "gelu_tanh_bias";
  case Epilogue::GeluAuxBias:
    return "gelu_aux_bias";
  case Epilogue::BGradB:
    return "bgrad";
  case Epilogue::DGelu:
    return "dgelu";
  }
  return "unknown";
}

std::vector<std::pair<uint32_t, Access>> tableBufferUses(const DeviceTable &table) {
  std::vector<std::pair<uint32_t, Access>> uses;
  auto add = [&](uint32_t id, Access access) {
    if (id != kNoBuffer)
      uses.emplace_back(id, access);
  };
  for (const TableEntry &entry : table.entries) {
    if (table.kind == TableKind::Norm) {
      add(entry.grad, Access::Read);
      continue;
    }
    add(entry.param, Access::ReadWrite);
    add(entry.grad, Access::ReadWrite);
    add(entry.firstMoment, Access::ReadWrite);
    add(entry.secondMoment, Access::ReadWrite);
    add(entry.copy, Access::Write);
  }
  return uses;
}

namespace {
/// Appends \p id to \p ids unless it is kNoBuffer or already there.
void addUnique(std::vector<uint32_t> &ids, uint32_t id) {
  if (id != kNoBuffer && std::find(ids.begin(), ids.end(), id) == ids.end())
    ids.push_back(id);
}
} // namespace

std::vector<uint32_t> writtenBuffers(const DeviceGroup &group) {
  std::vector<uint32_t> ids;
  for (const DeviceStep &step : group.steps) {
    if (const auto *launch = std::get_if<LaunchStep>(&step)) {
      for (const DeviceArgument &argument : launch->args) {
        if (argument.kind == ArgKind::Buffer && argument.access != Access::Read)
          addUnique(ids, argument.buffer);
        if (argument.kind == ArgKind::Table)
          for (const auto &[id, access] : tableBufferUses(argument.table))
            if (access != Access::Read)
              addUnique(ids, id);
      }
    } else if (const auto *matmul = std::get_if<MatmulStep>(&step)) {
      addUnique(ids, matmul->d);
      if (matmul->epilogue != Epilogue::DGelu)
        addUnique(ids, matmul->aux);
      if (matmul->epilogue == Epilogue::BGradB)
        addUnique(ids, matmul->bias);
    } else if (const auto *attention = std::get_if<AttentionStep>(&step)) {
      if (attention->pass == AttentionPass::Forward) {
        addUnique(ids, attention->out);
        addUnique(ids, attention->lse);
      }
      addUnique(ids, attention->dq);
      addUnique(ids, attention->dk);
      addUnique(ids, attention->dv);
    } else if (const auto *memset = std::get_if<MemsetStep>(&step)) {
      addUnique(ids, memset->buffer);
    }
  }
  return ids;
}

std::vector<uint32_t> readBuffers(const DeviceGroup &group) {
  std::vector<uint32_t> ids;
  for (const DeviceStep &step : group.steps) {
    if (const auto *launch = std::get_if<LaunchStep>(&step)) {
      for (const DeviceArgument &argument : launch->args) {
        if (argument.kind == ArgKind::Buffer && argument.access != Access::Write)
          addUnique(ids, argument.buffer);
        if (argument.kind == ArgKind::Table)
          for (const auto &[id, access] : tableBufferUses(argument.table))
            if (access != Access::Write)
              addUnique(ids, id);
      }
    } else if (const auto *matmul = std::get_if<MatmulStep>(&step)) {
      addUnique(ids, matmul->a);
      addUnique(ids, matmul->b);
      if (matmul->c != matmul->d)
        addUnique(ids, matmul->c);
      if (matmul->epilogue != Epilogue::BGradB)
        addUnique(ids, matmul->bias);
      if (matmul->epilogue == Epilogue::DGelu)
        addUnique(ids, matmul->aux);
    } else if (const auto *attention = std::get_if<AttentionStep>(&step)) {
      addUnique(ids, attention->q);
      addUnique(ids, attention->k);
      addUnique(ids, attention->v);
      addUnique(ids, attention->dOut);
      if (attention->pass == AttentionPass::Backward) {
        addUnique(ids, attention->out);
        addUnique(ids, attention->lse);
      }
    }
  }
  return ids;
}

const char *deviceStepName(const DeviceStep &step) {
  static const char *names[] = {"launch", "matmul", "attention", "memset"};
  return names[step.index()];
}

std::string describeDeviceError(const Plan &plan, bool optimizerStep,
                                const DeviceErrorRecord &record) {
  const std::vector<Instruction> &list =
      optimizerStep ? plan.optimizerInstructions : plan.instructions;
  std::string where = optimizerStep ? "optimizer step " : "";
  if (record.instruction < list.size())
    where += describeInstruction(list[record.instruction], record.instruction);
  else
    where += "instruction " + std::to_string(record.instruction);
  const std::string value = std::to_string(record.value);
  const std::string index = std::to_string(record.index);
  const std::string bound = std::to_string(record.bound);
  // The CPU backend's wording (runtime/cpu/LossKernels.cpp, LayoutKernels.cpp).
  switch (record.code) {
  case kDeviceErrorLabel: {
    std::string ignore = "?";
    if (record.instruction < list.size() && has(list[record.instruction], attr::ignoreIndex))
      ignore = std::to_string(get(list[record.instruction], attr::ignoreIndex));
    return where + ": label " + value + " at row " + index + " is outside the classes [0, " +
           bound + ") and is not ignore_index " + ignore;
  }
  case kDeviceErrorEmbeddingId:
    return where + ": id " + value + " at index " + index + " is outside the table's rows [0, " +
           bound + ")";
  default:
    return where + ": device error code " + std::to_string(record.code);
  }
}

size_t forwardGroupCount(const Plan &plan) {
  const std::vector<DeviceGroup> &groups = plan.device.microStep.groups;
  for (size_t index = 0; index < groups.size(); ++index) {
    const std::vector<uint32_t> written = writtenBuffers(groups[index]);
    for (uint32_t buffer : written) {
      const BufferRole role = plan.buffers.at(buffer).role;
      if (role == BufferRole::Parameter || role == BufferRole::State)
        throw PlanError("micro-step group " + std::to_string(index) + " writes the " +
                        bufferRoleName(role) + " buffer '" + plan.buffers[buffer].name +
                        "' before the loss is computed: the forward pass cannot run alone");
    }
    if (std::find(written.begin(), written.end(), plan.loss) != written.end())
      return index + 1;
  }
  throw PlanError("no micro-step group writes the loss '" + plan.buffers.at(plan.loss).name + "'");
}

} // namespace ampc::plan
