//===- NumpyFile.h - Arrays from NumPy's .npy and .npz files -----*- C++ -*-===//
//
// What `--data FILE.npz` reads: NumPy's own formats, one line for a PyTorch user to write
// (np.savez("train.npz", x=images, labels=labels)). A .npy file holds one array: the magic
// "\x93NUMPY", a format version (1.0, 2.0 or 3.0), a little-endian header length, a Python dict
// literal {'descr': '<f4', 'fortran_order': False, 'shape': (60000, 1, 28, 28), } and the
// row-major data. A .npz archive is a zip of such files, one per array, named NAME.npy, stored
// (np.savez) or deflated (np.savez_compressed), with zip64 records (NumPy writes them for every
// member); it is read with Debian's minizip (linked statically, so the training executables need
// no further shared library).
//
// The bytes come from users: every length, count and shape is checked (no product wraps), and
// each problem is a DataError naming the file, the member and what is wrong.
//
//===----------------------------------------------------------------------===//

#ifndef AMPC_RUNTIME_TRAIN_NUMPYFILE_H
#define AMPC_RUNTIME_TRAIN_NUMPYFILE_H

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace ampc::train {

/// One array: little-endian, row-major elements of a numeric dtype.
struct NumpyArray {
  /// The .npz member's name without ".npy", or the .npy file's stem.
  std::string name;
  /// NumPy's dtype character: 'f' float, 'i' signed integer, 'u' unsigned integer, 'b' bool.
  char kind = 'f';
  /// Bytes per element: 2, 4 or 8 for floats; 1, 2, 4 or 8 for integers; 1 for bool.
  int itemSize = 4;
  std::vector<int64_t> shape;
  std::vector<uint8_t> data;

  /// Elements in the array (1 for a scalar).
  int64_t elements() const;
  /// The dtype as NumPy writes it: "float32", "int64", "uint8", ...
  std::string dtypeName() const;
  bool isFloat() const { return kind == 'f'; }
  /// Element \p i as a double (exact for every float and for integers below 2^53).
  double real(int64_t i) const;
  /// Element \p i of an integer or bool array.
  int64_t integer(int64_t i) const;
};

/// Parses one .npy image of \p size bytes; \p what names it in errors ("FILE" or "FILE, member
/// NAME"). Throws DataError.
NumpyArray parseNpy(const uint8_t *bytes, size_t size, const std::string &what);

/// The arrays of a .npy file (one, named after the file's stem) or a .npz archive (each member
/// NAME.npy, in archive order). Throws DataError for a file that cannot be read, is neither,
/// holds a member that is not a .npy image, or an array NumPy wrote in a layout ampc does not
/// read (Fortran order, big-endian, object or string dtypes).
std::vector<NumpyArray> readNumpyFile(const std::string &path);

/// Whether \p path names a NumPy file (".npz" or ".npy").
bool isNumpyPath(const std::string &path);

} // namespace ampc::train

#endif // AMPC_RUNTIME_TRAIN_NUMPYFILE_H
