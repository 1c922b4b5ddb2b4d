//===- DeviceProgramCodec.h - Encoding of the device program ----*- C++ -*-===//
//
// The codec of the DEVP section of a plan file (docs/plan-format.md, "The
// device program"): the device modules (compressed with zlib), the kernels
// they export, and the micro-step and optimizer-step functions. writePlan and
// readPlan (PlanIO.cpp) frame the section and call these; decoding checks the
// encoding, validatePlan the decoded program's meaning.
//
//===----------------------------------------------------------------------===//

#ifndef AMPC_RUNTIME_PLAN_DEVICEPROGRAMCODEC_H
#define AMPC_RUNTIME_PLAN_DEVICEPROGRAMCODEC_H

#include "runtime/plan/ByteCodec.h"
#include "runtime/plan/Plan.h"

namespace ampc::plan::detail {

/// Encodes the device program (DEVP): modules, kernels, then the micro-step
/// and optimizer-step functions.
void encodeDevice(const Plan &plan, ByteWriter &out);

/// Decodes the device program (DEVP) written by encodeDevice.
void decodeDevice(ByteReader &in, Plan &plan);

} // namespace ampc::plan::detail

#endif // AMPC_RUNTIME_PLAN_DEVICEPROGRAMCODEC_H
