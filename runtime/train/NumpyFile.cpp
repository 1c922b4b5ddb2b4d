//===- NumpyFile.cpp - Arrays from NumPy's .npy and .npz files -------------===//

#include "runtime/train/NumpyFile.h"

#include "runtime/numerics/Float16.h"
#include "runtime/train/Data.h"

#include <unzip.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>
#include <new>

namespace ampc::train {

namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicSize = 6;

/// The value of \p key in the header dict literal, as written (up to the next top-level comma
/// or the closing brace), or empty when absent.
std::string headerField(const std::string &header, const std::string &key) {
  for (const char quote : {'\'', '"'}) {
    const std::string quoted = std::string(1, quote) + key + quote;
    size_t at = header.find(quoted);
    if (at == std::string::npos)
      continue;
    at = header.find(':', at + quoted.size());
    if (at == std::string::npos)
      return "";
    ++at;
    int depth = 0;
    size_t end = at;
    for (; end < header.size(); ++end) {
      const char c = header[end];
      if (c == '(' || c == '[')
        ++depth;
      else if (c == ')' || c == ']')
        --depth;
      else if ((c == ',' || c == '}') && depth <= 0)
        break;
    }
    std::string value = header.substr(at, end - at);
    const size_t first = value.find_first_not_of(" \t\n");
    const size_t last = value.find_last_not_of(" \t\n");
    return first == std::string::npos ? "" : value.substr(first, last - first + 1);
  }
  return "";
}

/// The extents of a shape tuple literal "(60000, 1, 28, 28)", "(5,)" or "()".
std::vector<int64_t> parseShape(const std::string &text, const std::string &what) {
  if (text.size() < 2 || text.front() != '(' || text.back() != ')')
    throw DataError(what + ": the .npy header's shape '" + text + "' is not a tuple");
  std::vector<int64_t> shape;
  size_t at = 1;
  while (at < text.size() - 1) {
    while (at < text.size() - 1 && (text[at] == ' ' || text[at] == ','))
      ++at;
    if (at >= text.size() - 1)
      break;
    if (!std::isdigit(static_cast<unsigned char>(text[at])))
      throw DataError(what + ": the .npy header's shape '" + text + "' holds a non-integer");
    int64_t extent = 0;
    while (at < text.size() - 1 && std::isdigit(static_cast<unsigned char>(text[at]))) {
      const int digit = text[at++] - '0';
      if (extent > (std::numeric_limits<int64_t>::max() - digit) / 10)
        throw DataError(what + ": the .npy header's shape '" + text + "' overflows");
      extent = extent * 10 + digit;
    }
    shape.push_back(extent);
  }
  return shape;
}

/// Reads the whole current member of \p zip, of \p size bytes.
std::vector<uint8_t> readMember(unzFile zip, uint64_t size, const std::string &what) {
  std::vector<uint8_t> bytes;
  try {
    bytes.resize(static_cast<size_t>(size));
  } catch (const std::bad_alloc &) {
    throw DataError(what + ": " + std::to_string(size) + " bytes do not fit in memory");
  } catch (const std::length_error &) {
    throw DataError(what + ": " + std::to_string(size) + " bytes do not fit in memory");
  }
  if (unzOpenCurrentFile(zip) != UNZ_OK)
    throw DataError(what + ": cannot open the member (a compression zlib does not inflate?)");
  size_t done = 0;
  while (done < bytes.size()) {
    const unsigned chunk =
        static_cast<unsigned>(std::min<size_t>(bytes.size() - done, size_t(1) << 30));
    const int read = unzReadCurrentFile(zip, bytes.data() + done, chunk);
    if (read <= 0) {
      unzCloseCurrentFile(zip);
      throw DataError(what + ": the member is truncated or corrupt (read " +
                      std::to_string(done) + " of " + std::to_string(size) + " bytes)");
    }
    done += static_cast<size_t>(read);
  }
  // Nothing may follow the declared size, and the data must match its CRC.
  uint8_t extra;
  const bool longer = unzReadCurrentFile(zip, &extra, 1) > 0;
  const int closed = unzCloseCurrentFile(zip);
  if (longer || closed != UNZ_OK)
    throw DataError(what + (closed == UNZ_CRCERROR ? ": the member fails its CRC check"
                                                   : ": the member is longer than its size"));
  return bytes;
}

bool endsWith(const std::string &text, const std::string &suffix) {
  return text.size() >= suffix.size() &&
         text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

} // namespace

int64_t NumpyArray::elements() const {
  int64_t count = 1;
  for (int64_t extent : shape)
    count *= extent;
  return count;
}

std::string NumpyArray::dtypeName() const {
  if (kind == 'b')
    return "bool";
  const std::string base = kind == 'f' ? "float" : kind == 'i' ? "int" : "uint";
  return base + std::to_string(itemSize * 8);
}

double NumpyArray::real(int64_t i) const {
  const uint8_t *at = data.data() + i * itemSize;
  if (kind != 'f')
    return static_cast<double>(integer(i));
  if (itemSize == 2) {
    uint16_t bits;
    std::memcpy(&bits, at, 2);
    return numerics::f16BitsToFloat(bits);
  }
  if (itemSize == 4) {
    float value;
    std::memcpy(&value, at, 4);
    return value;
  }
  double value;
  std::memcpy(&value, at, 8);
  return value;
}

int64_t NumpyArray::integer(int64_t i) const {
  const uint8_t *at = data.data() + i * itemSize;
  uint64_t bits = 0;
  std::memcpy(&bits, at, static_cast<size_t>(itemSize)); // little-endian host
  if (kind == 'i' && itemSize < 8 && (bits >> (itemSize * 8 - 1)) & 1)
    bits |= ~uint64_t(0) << (itemSize * 8); // sign-extend
  return static_cast<int64_t>(bits);
}

NumpyArray parseNpy(const uint8_t *bytes, size_t size, const std::string &what) {
  if (size < kMagicSize + 4 || std::memcmp(bytes, kMagic, kMagicSize) != 0)
    throw DataError(what + ": not a .npy array (no \\x93NUMPY magic)");
  const int major = bytes[6];
  if (major < 1 || major > 3)
    throw DataError(what + ": .npy format version " + std::to_string(major) + "." +
                    std::to_string(bytes[7]) + " (ampc reads 1.0 to 3.0)");
  size_t headerSize, at;
  if (major == 1) {
    headerSize = bytes[8] | (size_t(bytes[9]) << 8);
    at = 10;
  } else {
    if (size < 12)
      throw DataError(what + ": the .npy header is truncated");
    headerSize = bytes[8] | (size_t(bytes[9]) << 8) | (size_t(bytes[10]) << 16) |
                 (size_t(bytes[11]) << 24);
    at = 12;
  }
  if (headerSize > size - at)
    throw DataError(what + ": the .npy header is truncated");
  const std::string header(reinterpret_cast<const char *>(bytes + at), headerSize);
  at += headerSize;

  NumpyArray array;
  std::string descr = headerField(header, "descr");
  if (descr.size() < 2 || (descr.front() != '\'' && descr.front() != '"') ||
      descr.back() != descr.front())
    throw DataError(what + ": the .npy header has no dtype ('descr')");
  descr = descr.substr(1, descr.size() - 2);
  // '<f4', '|u1', '<i8', '|b1', ...: byte order, kind, item size.
  if (descr.size() < 3 || !std::isdigit(static_cast<unsigned char>(descr[2])))
    throw DataError(what + ": dtype '" + descr + "' is not a numeric array (ampc reads bool, "
                                                 "integer and float arrays)");
  if (descr[0] == '>')
    throw DataError(what + ": dtype '" + descr + "' is big-endian; save the array with "
                                                 "astype('<" + descr.substr(1) + "')");
  array.kind = descr[1];
  array.itemSize = std::atoi(descr.c_str() + 2);
  const bool known = (array.kind == 'f' && (array.itemSize == 2 || array.itemSize == 4 ||
                                            array.itemSize == 8)) ||
                     ((array.kind == 'i' || array.kind == 'u') &&
                      (array.itemSize == 1 || array.itemSize == 2 || array.itemSize == 4 ||
                       array.itemSize == 8)) ||
                     (array.kind == 'b' && array.itemSize == 1);
  if (!known || (descr[0] != '<' && descr[0] != '|' && descr[0] != '='))
    throw DataError(what + ": dtype '" + descr + "' is not one ampc reads (bool, int8 to "
                                                 "int64, uint8 to uint64, float16 to float64)");
  const std::string fortran = headerField(header, "fortran_order");
  if (fortran == "True")
    throw DataError(what + ": the array is in Fortran order; save np.ascontiguousarray(a)");
  if (fortran != "False")
    throw DataError(what + ": the .npy header has no 'fortran_order'");
  array.shape = parseShape(headerField(header, "shape"), what);

  // The element count and byte size, checked: a header's shape is untrusted.
  uint64_t count = 1;
  for (int64_t extent : array.shape) {
    if (extent != 0 && count > std::numeric_limits<uint64_t>::max() / uint64_t(extent))
      throw DataError(what + ": its shape overflows a 64-bit element count");
    count *= uint64_t(extent);
  }
  const size_t available = size - at;
  if (count > available / uint64_t(array.itemSize) ||
      count * uint64_t(array.itemSize) != available)
    throw DataError(what + ": its shape " + [&] {
      std::string text = "(";
      for (size_t i = 0; i < array.shape.size(); ++i)
        text += (i ? ", " : "") + std::to_string(array.shape[i]);
      return text + ")";
    }() + " of " + array.dtypeName() + " needs " +
                    (count > available ? std::string("more") : std::to_string(count * array.itemSize)) +
                    " bytes of data, the file has " + std::to_string(available));
  array.data.assign(bytes + at, bytes + size);
  return array;
}

bool isNumpyPath(const std::string &path) {
  return endsWith(path, ".npz") || endsWith(path, ".npy");
}

std::vector<NumpyArray> readNumpyFile(const std::string &path) {
  if (endsWith(path, ".npy")) {
    std::ifstream file(path, std::ios::binary);
    if (!file)
      throw DataError("cannot read data file " + path + ": " + std::strerror(errno));
    std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(file)), {});
    NumpyArray array = parseNpy(bytes.data(), bytes.size(), path);
    std::string stem = path.substr(path.find_last_of('/') + 1);
    array.name = stem.substr(0, stem.size() - 4);
    return {std::move(array)};
  }
  uint64_t archiveBytes;
  {
    std::ifstream probe(path, std::ios::binary | std::ios::ate);
    if (!probe)
      throw DataError("cannot read data file " + path + ": " + std::strerror(errno));
    archiveBytes = static_cast<uint64_t>(std::max<std::streamoff>(probe.tellg(), 0));
  }
  unzFile zip = unzOpen64(path.c_str());
  if (!zip)
    throw DataError(path + ": not a .npz archive (the zip directory cannot be read; is the file "
                           "truncated?)");
  std::vector<NumpyArray> arrays;
  try {
    for (int status = unzGoToFirstFile(zip); status != UNZ_END_OF_LIST_OF_FILE;
         status = unzGoToNextFile(zip)) {
      if (status != UNZ_OK)
        throw DataError(path + ": the .npz archive's directory is corrupt");
      unz_file_info64 info;
      char name[512];
      if (unzGetCurrentFileInfo64(zip, &info, name, sizeof(name), nullptr, 0, nullptr, 0) !=
          UNZ_OK)
        throw DataError(path + ": the .npz archive's directory is corrupt");
      // minizip leaves a name that fills the buffer unterminated.
      if (info.size_filename >= sizeof(name))
        throw DataError(path + ": a member's name is " + std::to_string(info.size_filename) +
                        " bytes long; array names are shorter");
      const std::string member(name, info.size_filename);
      const std::string what = path + ", member " + member;
      if (!endsWith(member, ".npy"))
        throw DataError(what + ": not a .npy array (a .npz archive holds NAME.npy members)");
      // The declared size is the archive's claim: a stored member is as large as it is stored,
      // and deflate expands at most 1032-fold, so nothing is allocated on a claim alone. The
      // compressed size is a claim too: it must fit in the archive.
      const bool stored = info.compression_method == 0;
      if (info.compressed_size > archiveBytes)
        throw DataError(what + ": its compressed size (" + std::to_string(info.compressed_size) +
                        " bytes) is larger than the archive (" + std::to_string(archiveBytes) +
                        " bytes); the archive is corrupt");
      if ((stored && info.uncompressed_size != info.compressed_size) ||
          (!stored && info.uncompressed_size / 1032 > info.compressed_size + 1))
        throw DataError(what + ": its declared size (" + std::to_string(info.uncompressed_size) +
                        " bytes) does not fit its compressed size (" +
                        std::to_string(info.compressed_size) + "); the archive is corrupt");
      std::vector<uint8_t> bytes = readMember(zip, info.uncompressed_size, what);
      NumpyArray array = parseNpy(bytes.data(), bytes.size(), what);
      array.name = member.substr(0, member.size() - 4);
      arrays.push_back(std::move(array));
    }
  } catch (...) {
    unzClose(zip);
    throw;
  }
  unzClose(zip);
  if (arrays.empty())
    throw DataError(path + ": the .npz archive holds no arrays");
  return arrays;
}

} // namespace ampc::train
