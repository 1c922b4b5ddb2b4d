//===- Checkpoint.cpp - Training checkpoints: format, files and directories ===//
//
// The encoding of docs/checkpoint-format.md, atomic file writes and the
// step-NNNNNN.ckpt naming of checkpoint directories (Checkpoint.h).
//
//===----------------------------------------------------------------------===//

#include "runtime/train/Checkpoint.h"

#include "runtime/plan/FileIO.h"

#include <zlib.h>

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>

namespace ampc::train {

using files::joinPath;

namespace {

constexpr char kMagic[8] = {'A', 'M', 'P', 'C', 'C', 'K', 'P', 'T'};
constexpr char kEndMarker[4] = {'D', 'O', 'N', 'E'};
constexpr size_t kHeaderBytes = 16; // magic, version, section count
constexpr size_t kTrailerBytes = 8; // CRC-32, end marker
constexpr const char *kMetaSection = "meta";

void putU32(std::string &out, uint32_t value) {
  for (int i = 0; i < 4; ++i)
    out.push_back(static_cast<char>((value >> (8 * i)) & 0xff));
}

void putU64(std::string &out, uint64_t value) {
  for (int i = 0; i < 8; ++i)
    out.push_back(static_cast<char>((value >> (8 * i)) & 0xff));
}

uint64_t getLE(const std::string &bytes, size_t at, size_t size) {
  uint64_t value = 0;
  for (size_t i = 0; i < size; ++i)
    value |= static_cast<uint64_t>(static_cast<unsigned char>(bytes[at + i])) << (8 * i);
  return value;
}

/// Bounds-checked reads from the table.
class Reader {
public:
  Reader(const std::string &bytes, size_t at, size_t end, const std::string &file)
      : bytes(bytes), at(at), end(end), file(file) {}

  uint64_t take(size_t size) {
    need(size);
    const uint64_t value = getLE(bytes, at, size);
    at += size;
    return value;
  }
  std::string takeString(size_t size) {
    need(size);
    std::string text = bytes.substr(at, size);
    at += size;
    return text;
  }
  size_t position() const { return at; }

private:
  void need(size_t size) {
    if (size > end - at)
      throw CheckpointError("checkpoint " + file +
                            ": corrupt section table (it runs past the end of the data)");
  }

  const std::string &bytes;
  size_t at, end;
  const std::string &file;
};

std::string hex32(uint32_t value) {
  char buffer[16];
  std::snprintf(buffer, sizeof(buffer), "%08x", value);
  return buffer;
}

size_t elementBytes(SectionType type) {
  return type == SectionType::Text ? 1 : (type == SectionType::F32 ? 4 : 8);
}

} // namespace

const CheckpointSection *Checkpoint::find(const std::string &name) const {
  for (const CheckpointSection &section : sections)
    if (section.name == name)
      return &section;
  return nullptr;
}

const std::string &Checkpoint::value(const std::string &key, const std::string &file) const {
  const auto found = meta.find(key);
  if (found == meta.end())
    throw CheckpointError("checkpoint " + file + ": its metadata has no '" + key + "'");
  return found->second;
}

std::string Checkpoint::valueOr(const std::string &key, const std::string &fallback) const {
  const auto found = meta.find(key);
  return found == meta.end() ? fallback : found->second;
}

uint32_t crc32Of(const std::string &bytes) {
  uLong crc = ::crc32(0L, Z_NULL, 0);
  size_t at = 0;
  while (at < bytes.size()) {
    const size_t chunk = std::min<size_t>(bytes.size() - at, 1u << 30);
    crc =
        ::crc32(crc, reinterpret_cast<const Bytef *>(bytes.data() + at), static_cast<uInt>(chunk));
    at += chunk;
  }
  return static_cast<uint32_t>(crc);
}

std::string encodeCheckpoint(const Checkpoint &checkpoint) {
  CheckpointSection meta;
  meta.name = kMetaSection;
  meta.type = SectionType::Text;
  for (const auto &[key, value] : checkpoint.meta)
    meta.bytes += key + " " + value + "\n";
  std::vector<const CheckpointSection *> sections = {&meta};
  for (const CheckpointSection &section : checkpoint.sections)
    sections.push_back(&section);

  std::string table;
  size_t tableBytes = 0;
  for (const CheckpointSection *section : sections)
    tableBytes += 4 + section->name.size() + 1 + 4 + 8 * section->shape.size() + 16;
  uint64_t offset = kHeaderBytes + tableBytes;
  for (const CheckpointSection *section : sections) {
    putU32(table, static_cast<uint32_t>(section->name.size()));
    table += section->name;
    table.push_back(static_cast<char>(section->type));
    putU32(table, static_cast<uint32_t>(section->shape.size()));
    for (int64_t dim : section->shape)
      putU64(table, static_cast<uint64_t>(dim));
    putU64(table, offset);
    putU64(table, section->bytes.size());
    offset += section->bytes.size();
  }
  std::string out(kMagic, sizeof(kMagic));
  putU32(out, kCheckpointVersion);
  putU32(out, static_cast<uint32_t>(sections.size()));
  out += table;
  for (const CheckpointSection *section : sections)
    out += section->bytes;
  putU32(out, crc32Of(out));
  out.append(kEndMarker, sizeof(kEndMarker));
  return out;
}

Checkpoint decodeCheckpoint(const std::string &bytes, const std::string &file) {
  const std::string where = "checkpoint " + file + ": ";
  if (bytes.size() < kHeaderBytes)
    throw CheckpointError(where + "truncated (" + std::to_string(bytes.size()) +
                          " bytes, shorter than the " + std::to_string(kHeaderBytes) +
                          "-byte header)");
  if (bytes.compare(0, sizeof(kMagic), kMagic, sizeof(kMagic)) != 0)
    throw CheckpointError(where + "not an ampc checkpoint (it does not start with AMPCCKPT)");
  const uint32_t version = static_cast<uint32_t>(getLE(bytes, 8, 4));
  if (version != kCheckpointVersion)
    throw CheckpointError(where + "format version " + std::to_string(version) +
                          "; this runner reads version " + std::to_string(kCheckpointVersion));
  if (bytes.size() < kHeaderBytes + kTrailerBytes ||
      bytes.compare(bytes.size() - sizeof(kEndMarker), sizeof(kEndMarker), kEndMarker,
                    sizeof(kEndMarker)) != 0)
    throw CheckpointError(where + "truncated (" + std::to_string(bytes.size()) +
                          " bytes and no end marker): the write did not complete");
  const size_t body = bytes.size() - kTrailerBytes;
  const uint32_t stored = static_cast<uint32_t>(getLE(bytes, body, 4));
  const uint32_t computed = crc32Of(bytes.substr(0, body));
  if (stored != computed)
    throw CheckpointError(where + "checksum mismatch (stored CRC-32 " + hex32(stored) +
                          ", computed " + hex32(computed) + "): the file is corrupt");

  const uint32_t count = static_cast<uint32_t>(getLE(bytes, 12, 4));
  Reader table(bytes, kHeaderBytes, body, file);
  Checkpoint checkpoint;
  bool sawMeta = false;
  // The sections' bytes are copied out of the file: together they may not be larger than it
  // (the writer stores each once), or a table naming one range many times would allocate many
  // times the file's size.
  uint64_t sectionBytes = 0;
  for (uint32_t i = 0; i < count; ++i) {
    CheckpointSection section;
    section.name = table.takeString(table.take(4));
    const uint8_t type = static_cast<uint8_t>(table.take(1));
    if (type > static_cast<uint8_t>(SectionType::I64))
      throw CheckpointError(where + "section '" + section.name + "' has unknown type " +
                            std::to_string(type));
    section.type = static_cast<SectionType>(type);
    const uint32_t rank = static_cast<uint32_t>(table.take(4));
    if (rank > 16)
      throw CheckpointError(where + "section '" + section.name + "' has rank " +
                            std::to_string(rank));
    uint64_t elements = 1;
    for (uint32_t d = 0; d < rank; ++d) {
      const int64_t dim = static_cast<int64_t>(table.take(8));
      if (dim < 0 || (dim > 0 && elements > (uint64_t(1) << 48) / static_cast<uint64_t>(dim)))
        throw CheckpointError(where + "section '" + section.name + "' has a bad shape");
      section.shape.push_back(dim);
      elements *= static_cast<uint64_t>(dim);
    }
    const uint64_t offset = table.take(8), size = table.take(8);
    if (offset > body || size > body - offset)
      throw CheckpointError(where + "section '" + section.name +
                            "' lies outside the file (corrupt table)");
    sectionBytes += size;
    if (sectionBytes > body)
      throw CheckpointError(where + "its sections hold more bytes than the file (" +
                            std::to_string(sectionBytes) + " up to section '" + section.name +
                            "', " + std::to_string(body) + " in the file): corrupt table");
    if (section.type != SectionType::Text && size != elements * elementBytes(section.type))
      throw CheckpointError(where + "section '" + section.name + "' holds " + std::to_string(size) +
                            " bytes for " + std::to_string(elements) + " elements");
    section.bytes = bytes.substr(offset, size);
    if (section.name == kMetaSection && section.type == SectionType::Text) {
      sawMeta = true;
      std::istringstream lines(section.bytes);
      std::string line;
      while (std::getline(lines, line)) {
        const size_t space = line.find(' ');
        if (space == std::string::npos)
          throw CheckpointError(where + "malformed metadata line '" + line + "'");
        checkpoint.meta[line.substr(0, space)] = line.substr(space + 1);
      }
      continue;
    }
    checkpoint.sections.push_back(std::move(section));
  }
  if (!sawMeta)
    throw CheckpointError(where + "it has no metadata section");
  return checkpoint;
}

std::string checkpointFileName(uint64_t step) {
  char buffer[48];
  std::snprintf(buffer, sizeof(buffer), "step-%06llu.ckpt", static_cast<unsigned long long>(step));
  return buffer;
}

namespace {

/// The step of a file named step-N.ckpt (N decimal digits), or -1.
int64_t stepOfName(const std::string &name) {
  const std::string prefix = "step-", suffix = ".ckpt";
  if (name.size() <= prefix.size() + suffix.size() || name.compare(0, prefix.size(), prefix) ||
      name.compare(name.size() - suffix.size(), suffix.size(), suffix))
    return -1;
  const std::string digits =
      name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
  if (digits.size() > 18 ||
      !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return -1;
  return std::stoll(digits);
}

std::vector<std::string> directoryEntries(const std::string &directory) {
  std::vector<std::string> names;
  DIR *dir = ::opendir(directory.c_str());
  if (!dir)
    return names;
  while (const dirent *entry = ::readdir(dir))
    names.push_back(entry->d_name);
  ::closedir(dir);
  return names;
}

} // namespace

std::vector<std::pair<uint64_t, std::string>> listCheckpoints(const std::string &directory) {
  std::vector<std::pair<uint64_t, std::string>> found;
  for (const std::string &name : directoryEntries(directory)) {
    const int64_t step = stepOfName(name);
    if (step >= 0)
      found.emplace_back(static_cast<uint64_t>(step), joinPath(directory, name));
  }
  std::sort(found.begin(), found.end(), [](const auto &a, const auto &b) { return a > b; });
  return found;
}

void writeFileAtomically(const std::string &directory, const std::string &name,
                         const std::string &bytes) {
  try {
    files::writeFileAtomically(files::joinPath(directory, name), bytes, "checkpoint");
  } catch (const files::FileError &error) {
    throw CheckpointError(error.what());
  }
}

std::string readWholeFile(const std::string &path) {
  try {
    return files::readWholeFile(path, "checkpoint");
  } catch (const files::FileError &error) {
    throw CheckpointError(error.what());
  }
}

void pruneCheckpoints(const std::string &directory, uint64_t keep, uint64_t upTo) {
  uint64_t kept = 0;
  for (const auto &[step, path] : listCheckpoints(directory)) // newest first
    if (step <= upTo && ++kept > keep)
      ::unlink(path.c_str());
  // Temporary files of writes that never finished (a crash or a kill).
  const std::string mine = std::to_string(::getpid());
  for (const std::string &name : directoryEntries(directory)) {
    const size_t tmp = name.find(".ckpt.tmp-");
    if (name.rfind(".step-", 0) == 0 && tmp != std::string::npos && name.substr(tmp + 10) != mine)
      ::unlink(joinPath(directory, name).c_str());
  }
}

std::string planHash(const plan::Plan &plan) {
  std::ostringstream encoded;
  plan::writePlan(plan, encoded);
  const std::string bytes = encoded.str();
  uint64_t hash = 0xcbf29ce484222325ull;
  for (char c : bytes) {
    hash ^= static_cast<unsigned char>(c);
    hash *= 0x100000001b3ull;
  }
  char buffer[24];
  std::snprintf(buffer, sizeof(buffer), "%016llx", static_cast<unsigned long long>(hash));
  return buffer;
}

} // namespace ampc::train
