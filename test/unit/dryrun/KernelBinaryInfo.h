//===- KernelBinaryInfo.h - Kernel facts from NVRTC output ----------------===//
//
// What a GPU knows about a kernel it launches comes from the binary, not from
// the source that produced it: the recording driver reads the same facts out
// of the cubin (or PTX) the runtime loads, so the dry run checks launches
// against what NVRTC actually emitted.
//
// A cubin is an ELF file. Per kernel it holds
//  * `.nv.info.<kernel>`: attribute records (format byte, attribute byte,
//    then a value); EIATTR_KPARAM_INFO (0x17) gives each parameter's ordinal,
//    byte offset and size (bits 18..31 of its flags word),
//    EIATTR_MAX_THREADS (0x05) the __launch_bounds__ block size;
//  * `.nv.info`: EIATTR_REGCOUNT (0x2f), the registers per thread of each
//    function symbol;
//  * `.nv.shared.<kernel>`: its static shared memory. sm_90 cubins lay the
//    1 KiB CUDA reserves per block for the system at the start of every
//    kernel's section (they then have a `.nv.shared.reserved.0` section);
//    that reservation is not the kernel's and is taken off.
// Entry points are the FUNC symbols with the CUDA entry flag (0x10) in
// st_other. PTX gives each `.entry`'s parameter list (`.param .u64 name`,
// `.param .align 8 .b8 name[16]`) and `.maxntid`; registers and shared
// memory are decided by the JIT, so they are unknown there.
//
//===----------------------------------------------------------------------===//

#ifndef AMPC_TEST_UNIT_DRYRUN_KERNELBINARYINFO_H
#define AMPC_TEST_UNIT_DRYRUN_KERNELBINARYINFO_H

#include "RecordingTrace.h"

#include <cstddef>
#include <string>
#include <vector>

namespace ampc::dryrun {

/// True if \p image starts with the ELF magic.
bool isElf(const void *image, size_t bytes);

/// The bytes of the ELF image at \p image, from its header and section
/// table (cuModuleLoadDataEx is handed no size).
size_t elfImageBytes(const void *image);

/// The entry points of a cubin ("sm_<arch>" from its ELF flags); throws
/// std::runtime_error for a file that is not a 64-bit little-endian ELF or
/// whose tables run past its end.
std::vector<KernelInfo> readCubinKernels(const void *image, size_t bytes);

/// The entry points of PTX text (binary "compute_<target>").
std::vector<KernelInfo> readPtxKernels(const std::string &ptx);

} // namespace ampc::dryrun

#endif // AMPC_TEST_UNIT_DRYRUN_KERNELBINARYINFO_H
