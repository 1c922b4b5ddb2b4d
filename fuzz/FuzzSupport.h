//===- FuzzSupport.h - What the fuzz targets share -------------*- C++ -*-===//
//
// Readers that only take a path (the model loader, the ONNX importer, minizip, the token
// file's mmap) are given the fuzz input as a file in one scratch directory per process, created
// on first use, reused for every input and removed when the process exits.
//
//===----------------------------------------------------------------------===//

#ifndef AMPC_FUZZ_FUZZSUPPORT_H
#define AMPC_FUZZ_FUZZSUPPORT_H

#include <cstddef>
#include <cstdint>
#include <string>

namespace ampc::fuzz {

/// This process's scratch directory ("/tmp/ampc-fuzz-XXXXXX", under $TMPDIR when set).
const std::string &scratchDirectory();

/// Writes \p size bytes of \p data to scratchDirectory()/\p name, replacing the file, and
/// returns its path. Aborts if the file cannot be written: a fuzz run without its input file
/// would test nothing.
std::string writeScratchFile(const std::string &name, const uint8_t *data, size_t size);

} // namespace ampc::fuzz

#endif // AMPC_FUZZ_FUZZSUPPORT_H
