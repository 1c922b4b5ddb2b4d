//===- DeviceProgramCompare.h - field-by-field equality of device programs --===//
//
// For round-trip tests: every field of a DeviceProgram compared, so a field the
// writer or the reader forgets shows up (comparing two encodings would not
// notice a field neither of them writes). Header-only; shared by the plan and
// the compiler tests.
//
//===----------------------------------------------------------------------===//

#ifndef AMPC_TEST_UNIT_RUNTIME_DEVICEPROGRAMCOMPARE_H
#define AMPC_TEST_UNIT_RUNTIME_DEVICEPROGRAMCOMPARE_H

#include "runtime/plan/Plan.h"

#include <gtest/gtest.h>

#include <string>
#include <tuple>

namespace ampc::test {

inline auto deviceFields(const plan::TableEntry &e) {
  return std::make_tuple(e.param, e.grad, e.firstMoment, e.secondMoment, e.copy, e.elements,
                         e.firstBlock, e.beta1, e.beta2, e.eps, e.weightDecay, e.clipNorm,
                         e.momentum);
}

inline bool sameArgument(const plan::DeviceArgument &a, const plan::DeviceArgument &b) {
  if (std::make_tuple(a.kind, a.name, a.buffer, a.access, a.value, a.bytes, a.table.kind,
                      a.table.entries.size()) != std::make_tuple(b.kind, b.name, b.buffer, b.access,
                                                                 b.value, b.bytes, b.table.kind,
                                                                 b.table.entries.size()))
    return false;
  for (size_t i = 0; i < a.table.entries.size(); ++i)
    if (deviceFields(a.table.entries[i]) != deviceFields(b.table.entries[i]))
      return false;
  return true;
}

inline bool sameStep(const plan::DeviceStep &x, const plan::DeviceStep &y) {
  if (x.index() != y.index())
    return false;
  if (const auto *a = std::get_if<plan::LaunchStep>(&x)) {
    const auto &b = std::get<plan::LaunchStep>(y);
    if (std::make_tuple(a->kernel, a->grid[0], a->grid[1], a->grid[2], a->block[0], a->block[1],
                        a->block[2], a->space, a->elements, a->rows, a->rowLength, a->vectorWidth,
                        a->args.size()) !=
        std::make_tuple(b.kernel, b.grid[0], b.grid[1], b.grid[2], b.block[0], b.block[1],
                        b.block[2], b.space, b.elements, b.rows, b.rowLength, b.vectorWidth,
                        b.args.size()))
      return false;
    for (size_t i = 0; i < a->args.size(); ++i)
      if (!sameArgument(a->args[i], b.args[i]))
        return false;
    return true;
  }
  if (const auto *a = std::get_if<plan::MatmulStep>(&x)) {
    const auto &b = std::get<plan::MatmulStep>(y);
    return std::make_tuple(a->a, a->b, a->d, a->c, a->bias, a->aux, a->transA, a->transB, a->m,
                           a->n, a->k, a->batch, a->strideA, a->strideB, a->strideD, a->computeType,
                           a->epilogue, a->alpha, a->beta) ==
           std::make_tuple(b.a, b.b, b.d, b.c, b.bias, b.aux, b.transA, b.transB, b.m, b.n, b.k,
                           b.batch, b.strideA, b.strideB, b.strideD, b.computeType, b.epilogue,
                           b.alpha, b.beta);
  }
  if (const auto *a = std::get_if<plan::AttentionStep>(&x)) {
    const auto &b = std::get<plan::AttentionStep>(y);
    return std::make_tuple(a->pass, a->q, a->k, a->v, a->out, a->dOut, a->dq, a->dk, a->dv,
                           a->lse, a->batch, a->heads, a->queries, a->keys, a->headDim, a->causal, a->scale,
                           a->forwardKernel, a->deltaKernel, a->dqKernel, a->dkdvKernel,
                           a->lseOffset, a->outOffset, a->deltaOffset, a->blockRows,
                           a->forwardBlockRows) ==
           std::make_tuple(b.pass, b.q, b.k, b.v, b.out, b.dOut, b.dq, b.dk, b.dv, b.lse, b.batch,
                           b.heads, b.queries, b.keys, b.headDim, b.causal, b.scale,
                           b.forwardKernel, b.deltaKernel, b.dqKernel, b.dkdvKernel, b.lseOffset,
                           b.outOffset, b.deltaOffset, b.blockRows, b.forwardBlockRows);
  }
  return std::get<plan::MemsetStep>(x).buffer == std::get<plan::MemsetStep>(y).buffer;
}

inline ::testing::AssertionResult sameFunction(const plan::DeviceFunction &a,
                                               const plan::DeviceFunction &b, const char *name) {
  auto failure = [&](const std::string &what) {
    return ::testing::AssertionFailure() << name << ": " << what << " differ";
  };
  if (a.arenaBytes != b.arenaBytes || a.scratchBytes != b.scratchBytes)
    return failure("arena or scratch sizes");
  if (a.placements.size() != b.placements.size())
    return failure("placement counts");
  for (size_t i = 0; i < a.placements.size(); ++i)
    if (a.placements[i].buffer != b.placements[i].buffer ||
        a.placements[i].offset != b.placements[i].offset ||
        a.placements[i].reuses != b.placements[i].reuses)
      return failure("placement " + std::to_string(i));
  if (a.views.size() != b.views.size())
    return failure("view counts");
  for (size_t i = 0; i < a.views.size(); ++i)
    if (a.views[i].buffer != b.views[i].buffer || a.views[i].source != b.views[i].source)
      return failure("view " + std::to_string(i));
  if (a.groups.size() != b.groups.size())
    return failure("group counts");
  for (size_t g = 0; g < a.groups.size(); ++g) {
    const plan::DeviceGroup &x = a.groups[g], &y = b.groups[g];
    if (x.kind != y.kind || x.instructions != y.instructions || x.steps.size() != y.steps.size())
      return failure("group " + std::to_string(g));
    for (size_t s = 0; s < x.steps.size(); ++s)
      if (!sameStep(x.steps[s], y.steps[s]))
        return failure("group " + std::to_string(g) + " step " + std::to_string(s));
  }
  return ::testing::AssertionSuccess();
}

/// Success when every field of \p a and \p b is equal.
inline ::testing::AssertionResult expectSameDeviceProgram(const plan::DeviceProgram &a,
                                                          const plan::DeviceProgram &b) {
  if (a.modules.size() != b.modules.size() || a.kernels.size() != b.kernels.size())
    return ::testing::AssertionFailure() << "module or kernel counts differ";
  for (size_t i = 0; i < a.modules.size(); ++i)
    if (a.modules[i].name != b.modules[i].name ||
        a.modules[i].cubinSm80 != b.modules[i].cubinSm80 ||
        a.modules[i].cubinSm90 != b.modules[i].cubinSm90 || a.modules[i].ptx != b.modules[i].ptx)
      return ::testing::AssertionFailure() << "module " << i << " differs";
  for (size_t i = 0; i < a.kernels.size(); ++i)
    if (a.kernels[i].module != b.kernels[i].module || a.kernels[i].entry != b.kernels[i].entry)
      return ::testing::AssertionFailure() << "kernel " << i << " differs";
  ::testing::AssertionResult micro = sameFunction(a.microStep, b.microStep, "micro step");
  if (!micro)
    return micro;
  return sameFunction(a.optimizerStep, b.optimizerStep, "optimizer step");
}

} // namespace ampc::test

#endif // AMPC_TEST_UNIT_RUNTIME_DEVICEPROGRAMCOMPARE_H
