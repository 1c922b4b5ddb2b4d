//===- KernelBinaryInfo.cpp - Kernel facts from NVRTC output --------------===//

#include "KernelBinaryInfo.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <sstream>
#include <stdexcept>

namespace ampc::dryrun {

namespace {

// .nv.info attribute records: the value's format and the attributes read.
constexpr uint8_t kFormatNoValue = 0x01, kFormatByte = 0x02, kFormatHalf = 0x03,
                  kFormatSized = 0x04;
constexpr uint8_t kAttrMaxThreads = 0x05, kAttrKParamInfo = 0x17, kAttrRegCount = 0x2f;
/// st_other flag of a CUDA entry function.
constexpr uint8_t kCudaEntry = 0x10;
/// The shared memory CUDA reserves per block (sm_80 and later).
constexpr uint32_t kReservedShared = 1024;

/// Bounds-checked little-endian reads from the image.
class Image {
public:
  Image(const void *data, size_t bytes) : data(static_cast<const uint8_t *>(data)), bytes(bytes) {}
  template <typename T> T read(uint64_t offset) const {
    if (offset > bytes || sizeof(T) > bytes - offset)
      throw std::runtime_error("cubin: a table runs past the end of the file");
    T value;
    std::memcpy(&value, data + offset, sizeof(T));
    return value;
  }
  std::string string(uint64_t offset) const {
    if (offset >= bytes)
      throw std::runtime_error("cubin: a name lies past the end of the file");
    const char *begin = reinterpret_cast<const char *>(data + offset);
    return std::string(begin, strnlen(begin, bytes - offset));
  }

private:
  const uint8_t *data;
  size_t bytes;
};

struct Section {
  std::string name;
  uint32_t type = 0;
  uint64_t offset = 0, size = 0;
  uint32_t link = 0;
};

/// Calls \p visit(attribute, valueOffset, valueBytes) for each record of an
/// .nv.info section.
template <typename Visit>
void forEachAttribute(const Image &image, const Section &section, Visit visit) {
  uint64_t at = section.offset;
  const uint64_t end = section.offset + section.size;
  while (at + 4 <= end) {
    const uint8_t format = image.read<uint8_t>(at);
    const uint8_t attribute = image.read<uint8_t>(at + 1);
    if (format == kFormatSized) {
      const uint16_t size = image.read<uint16_t>(at + 2);
      visit(attribute, at + 4, size);
      at += 4 + size;
    } else if (format == kFormatNoValue || format == kFormatByte || format == kFormatHalf) {
      visit(attribute, at + 2, 2);
      at += 4;
    } else {
      throw std::runtime_error("cubin: unknown .nv.info record format " + std::to_string(format));
    }
  }
}

bool startsWith(const std::string &text, const char *prefix) { return text.rfind(prefix, 0) == 0; }

} // namespace

bool isElf(const void *image, size_t bytes) {
  return bytes >= 4 && std::memcmp(image,
                                   "\x7f"
                                   "ELF",
                                   4) == 0;
}

size_t elfImageBytes(const void *image) {
  const uint8_t *data = static_cast<const uint8_t *>(image);
  auto read = [&](auto &value, uint64_t offset) {
    std::memcpy(&value, data + offset, sizeof value);
  };
  uint64_t sectionTable = 0;
  uint16_t entrySize = 0, count = 0;
  read(sectionTable, 0x28);
  read(entrySize, 0x3a);
  read(count, 0x3c);
  uint64_t end = sectionTable + uint64_t(entrySize) * count;
  for (uint16_t i = 0; i < count; ++i) {
    const uint64_t at = sectionTable + uint64_t(i) * entrySize;
    uint32_t type = 0;
    uint64_t offset = 0, size = 0;
    read(type, at + 4);
    read(offset, at + 24);
    read(size, at + 32);
    if (type != 8 /* SHT_NOBITS */)
      end = std::max(end, offset + size);
  }
  return static_cast<size_t>(end);
}

std::vector<KernelInfo> readCubinKernels(const void *data, size_t bytes) {
  const Image image(data, bytes);
  if (!isElf(data, bytes) || image.read<uint8_t>(4) != 2 || image.read<uint8_t>(5) != 1)
    throw std::runtime_error("cubin: not a 64-bit little-endian ELF file");
  const uint32_t flags = image.read<uint32_t>(0x30);
  const std::string binary = "sm_" + std::to_string((flags >> 8) & 0xff);
  const uint64_t sectionTable = image.read<uint64_t>(0x28);
  const uint16_t entrySize = image.read<uint16_t>(0x3a);
  const uint16_t count = image.read<uint16_t>(0x3c);
  const uint16_t namesIndex = image.read<uint16_t>(0x3e);

  std::vector<Section> sections(count);
  for (uint16_t i = 0; i < count; ++i) {
    const uint64_t at = sectionTable + uint64_t(i) * entrySize;
    sections[i].type = image.read<uint32_t>(at + 4);
    sections[i].offset = image.read<uint64_t>(at + 24);
    sections[i].size = image.read<uint64_t>(at + 32);
    sections[i].link = image.read<uint32_t>(at + 40);
  }
  if (namesIndex >= count)
    throw std::runtime_error("cubin: no section name table");
  for (uint16_t i = 0; i < count; ++i)
    sections[i].name = image.string(sections[namesIndex].offset +
                                    image.read<uint32_t>(sectionTable + uint64_t(i) * entrySize));

  // Symbols: names by index (REGCOUNT names functions by symbol index) and
  // the entry points.
  std::vector<std::string> symbolNames;
  std::vector<std::string> entries;
  for (const Section &section : sections) {
    if (section.type != 2 /* SHT_SYMTAB */)
      continue;
    const Section &names = sections.at(section.link);
    for (uint64_t at = section.offset; at + 24 <= section.offset + section.size; at += 24) {
      const std::string name = image.string(names.offset + image.read<uint32_t>(at));
      symbolNames.push_back(name);
      const uint8_t info = image.read<uint8_t>(at + 4);
      const uint8_t other = image.read<uint8_t>(at + 5);
      if ((info & 0xf) == 2 /* STT_FUNC */ && (other & kCudaEntry))
        entries.push_back(name);
    }
  }

  std::map<std::string, int> registers;
  bool reservesShared = false;
  std::map<std::string, uint64_t> shared;
  for (const Section &section : sections) {
    if (section.name == ".nv.info")
      forEachAttribute(image, section, [&](uint8_t attribute, uint64_t at, uint16_t size) {
        if (attribute != kAttrRegCount || size < 8)
          return;
        const uint32_t symbol = image.read<uint32_t>(at);
        if (symbol < symbolNames.size())
          registers[symbolNames[symbol]] = static_cast<int>(image.read<uint32_t>(at + 4));
      });
    if (section.name == ".nv.shared.reserved.0")
      reservesShared = true;
    else if (startsWith(section.name, ".nv.shared."))
      shared[section.name.substr(11)] = section.size;
  }

  std::vector<KernelInfo> kernels;
  for (const std::string &entry : entries) {
    KernelInfo kernel;
    kernel.name = entry;
    kernel.binary = binary;
    auto regs = registers.find(entry);
    kernel.registers = regs == registers.end() ? -1 : regs->second;
    auto found = shared.find(entry);
    if (found != shared.end()) {
      const uint64_t reserved = reservesShared ? kReservedShared : 0;
      kernel.staticShared =
          static_cast<uint32_t>(found->second > reserved ? found->second - reserved : 0);
    }
    std::map<uint32_t, KernelParam> byOrdinal;
    for (const Section &section : sections) {
      if (section.name != ".nv.info." + entry)
        continue;
      forEachAttribute(image, section, [&](uint8_t attribute, uint64_t at, uint16_t size) {
        if (attribute == kAttrKParamInfo && size >= 12) {
          KernelParam param;
          const uint16_t ordinal = image.read<uint16_t>(at + 4);
          param.offset = image.read<uint16_t>(at + 6);
          param.size = image.read<uint32_t>(at + 8) >> 18;
          byOrdinal[ordinal] = param;
        } else if (attribute == kAttrMaxThreads && size >= 12) {
          kernel.maxThreads = image.read<uint32_t>(at) * image.read<uint32_t>(at + 4) *
                              image.read<uint32_t>(at + 8);
        }
      });
    }
    for (uint32_t ordinal = 0; ordinal < byOrdinal.size(); ++ordinal) {
      auto param = byOrdinal.find(ordinal);
      if (param == byOrdinal.end())
        throw std::runtime_error("cubin: kernel '" + entry + "' skips parameter " +
                                 std::to_string(ordinal));
      kernel.params.push_back(param->second);
    }
    kernels.push_back(std::move(kernel));
  }
  return kernels;
}

std::vector<KernelInfo> readPtxKernels(const std::string &ptx) {
  std::vector<KernelInfo> kernels;
  std::string target = "compute_?";
  const size_t targetAt = ptx.find(".target sm_");
  if (targetAt != std::string::npos)
    target =
        "compute_" + ptx.substr(targetAt + 11,
                                ptx.find_first_not_of("0123456789", targetAt + 11) - targetAt - 11);
  size_t at = 0;
  while ((at = ptx.find(".entry ", at)) != std::string::npos) {
    KernelInfo kernel;
    kernel.binary = target;
    const size_t nameBegin = at + 7;
    const size_t open = ptx.find('(', nameBegin);
    const size_t close = ptx.find(')', open);
    if (open == std::string::npos || close == std::string::npos)
      break;
    kernel.name = ptx.substr(nameBegin, open - nameBegin);
    kernel.name.erase(kernel.name.find_last_not_of(" \t\n") + 1);
    // Parameters: ".param .u64 name" (8 bytes) or ".param .align A .b8
    // name[N]" (N bytes), laid out at their natural alignment.
    std::istringstream list(ptx.substr(open + 1, close - open - 1));
    uint32_t offset = 0;
    for (std::string item; std::getline(list, item, ',');) {
      KernelParam param;
      uint32_t alignment = 0;
      const size_t align = item.find(".align ");
      const size_t bracket = item.find('[');
      if (align != std::string::npos && bracket != std::string::npos) {
        alignment = static_cast<uint32_t>(std::stoul(item.substr(align + 7)));
        param.size = static_cast<uint32_t>(std::stoul(item.substr(bracket + 1)));
      } else {
        for (const char *bits : {"64", "32", "16", "8"})
          for (const char *kind : {".u", ".s", ".b", ".f"})
            if (!param.size && item.find(std::string(kind) + bits + " ") != std::string::npos)
              param.size = static_cast<uint32_t>(std::stoul(bits)) / 8;
        alignment = param.size;
      }
      if (alignment)
        offset = (offset + alignment - 1) / alignment * alignment;
      param.offset = offset;
      offset += param.size;
      kernel.params.push_back(param);
    }
    // Directives between the parameter list and the body.
    const size_t body = ptx.find('{', close);
    const std::string directives = ptx.substr(close, body - close);
    const size_t maxntid = directives.find(".maxntid");
    if (maxntid != std::string::npos) {
      std::istringstream dims(directives.substr(maxntid + 8));
      kernel.maxThreads = 1;
      for (std::string dim; std::getline(dims, dim, ',');) {
        kernel.maxThreads *= static_cast<uint32_t>(std::stoul(dim));
        if (dim.find('\n') != std::string::npos)
          break;
      }
    }
    kernels.push_back(std::move(kernel));
    at = close;
  }
  return kernels;
}

} // namespace ampc::dryrun
