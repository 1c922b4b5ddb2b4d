//===- FlashAttentionNvrtcTest.cpp - Flash attention kernels compile ------===//
//
// Compiles every entry point of runtime/cuda/device/FlashAttention.cuh (and the
// tensor-core ones of FlashAttentionMma.cuh for bf16 and f16) with
// NVRTC for sm_80 and sm_90 (cubin) and compute_90 (PTX), and checks what
// can be checked without a GPU: each entry is in the PTX with 128 threads as
// its launch bound and no local-memory stack, and in each cubin every entry's
// registers and static shared memory fit an sm_80 multiprocessor for a
// 128-thread block (<= 255 registers, 128 x registers <= 64K, <= 48 KB of
// static shared memory). Local memory is checked in the PTX (no
// __local_depot): the EIATTR_FRAME_SIZE records of NVRTC's cubins did not
// agree with ptxas's report for some kernels, so they are not used. One translation unit per
// element type holds all four head dims, and the three targets compile in parallel.
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/Nvrtc.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <future>
#include <map>
#include <string>
#include <vector>

using namespace ampc::cuda;

namespace {

constexpr int kHeadDims[] = {16, 32, 64, 128};
constexpr int kThreads = 128;

struct ElementType {
  const char *name;    // in the entry-point names
  const char *element; // the ampc::flash element struct
  bool tensorCores;    // FlashAttentionMma.cuh's kernels instead of the fp32-FMA ones
  const char *label;   // the test's name
};
constexpr ElementType kElementTypes[] = {{"bf16", "Bf16", false, "bf16"},
                                         {"f16", "F16", false, "f16"},
                                         {"f32", "F32", false, "f32"},
                                         {"bf16", "Bf16", true, "bf16_mma"},
                                         {"f16", "F16", true, "f16_mma"}};

/// A translation unit with the entry points of every head dim of \p type.
std::string sourceFor(const ElementType &type) {
  std::string source = type.tensorCores
                           ? "#include \"runtime/cuda/device/FlashAttentionMma.cuh\"\n"
                           : "#include \"runtime/cuda/device/FlashAttention.cuh\"\n";
  const std::string macro = type.tensorCores ? "AMPC_FLASH_ATTENTION_MMA_ENTRY_POINTS("
                                             : "AMPC_FLASH_ATTENTION_ENTRY_POINTS(";
  for (int headDim : kHeadDims)
    source += macro + type.name + ", ampc::flash::" + type.element + ", " +
              std::to_string(headDim) + ")\n";
  return source;
}

/// The names of the entry points sourceFor(type) defines.
std::vector<std::string> entryPoints(const ElementType &type) {
  std::vector<std::string> names;
  for (int headDim : kHeadDims) {
    const std::string suffix = std::string(type.name) + "_d" + std::to_string(headDim);
    names.push_back("ampc_flash_attention_bwd_delta_" + suffix);
    for (const char *causal : {"", "_causal"}) {
      names.push_back("ampc_flash_attention_fwd_" + suffix + causal);
      names.push_back("ampc_flash_attention_bwd_dq_" + suffix + causal);
      names.push_back("ampc_flash_attention_bwd_dkdv_" + suffix + causal);
    }
  }
  return names;
}

std::vector<std::string> options() {
  std::vector<std::string> result = cudaIncludeOptions();
  result.push_back("-I" AMPC_REPO_ROOT);
  return result;
}

/// Per-kernel resources read from a cubin: registers from the
/// EIATTR_REGCOUNT (0x2f) records of the
/// ".nv.info" section (each names its kernel by symbol index), static shared
/// memory from the size of ".nv.shared.<kernel>" (absent when none).
struct KernelResources {
  int registers = -1;
  uint64_t sharedBytes = 0;
};

template <typename T> T readAt(const std::vector<char> &bytes, uint64_t at) {
  T value{};
  if (at + sizeof(T) <= bytes.size())
    std::memcpy(&value, bytes.data() + at, sizeof(T));
  return value;
}

std::string readName(const std::vector<char> &bytes, uint64_t at) {
  if (at >= bytes.size())
    return "";
  return std::string(bytes.data() + at, strnlen(bytes.data() + at, bytes.size() - at));
}

std::map<std::string, KernelResources> readResources(const std::vector<char> &cubin) {
  std::map<std::string, KernelResources> kernels;
  if (cubin.size() < 64 || cubin[4] != 2) // ELFCLASS64, little-endian
    return kernels;
  struct Section {
    std::string name;
    uint64_t offset, size;
    uint32_t link;
  };
  const auto sectionOffset = readAt<uint64_t>(cubin, 0x28);
  const auto entrySize = readAt<uint16_t>(cubin, 0x3a);
  const auto sectionCount = readAt<uint16_t>(cubin, 0x3c);
  const auto namesIndex = readAt<uint16_t>(cubin, 0x3e);
  auto header = [&](unsigned index) {
    return sectionOffset + static_cast<uint64_t>(index) * entrySize;
  };
  const auto namesOffset = readAt<uint64_t>(cubin, header(namesIndex) + 24);
  std::vector<Section> sections;
  for (unsigned i = 0; i < sectionCount; ++i) {
    const uint64_t at = header(i);
    sections.push_back({readName(cubin, namesOffset + readAt<uint32_t>(cubin, at)),
                        readAt<uint64_t>(cubin, at + 24), readAt<uint64_t>(cubin, at + 32),
                        readAt<uint32_t>(cubin, at + 40)});
  }
  // Symbol index -> name, from .symtab and the string table it links to.
  std::map<uint32_t, std::string> symbols;
  for (const Section &section : sections) {
    if (section.name != ".symtab" || section.link >= sections.size())
      continue;
    const uint64_t strings = sections[section.link].offset;
    for (uint64_t i = 0; i * 24 < section.size; ++i)
      symbols[static_cast<uint32_t>(i)] =
          readName(cubin, strings + readAt<uint32_t>(cubin, section.offset + i * 24));
  }
  const std::string shared = ".nv.shared.";
  for (const Section &section : sections) {
    if (section.name.compare(0, shared.size(), shared) == 0)
      kernels[section.name.substr(shared.size())].sharedBytes = section.size;
    if (section.name != ".nv.info")
      continue;
    // Records: format byte, attribute byte, then by format: none, 1 byte,
    // 2 bytes, or a 2-byte size and that many bytes.
    uint64_t at = section.offset;
    const uint64_t end = section.offset + section.size;
    while (at + 2 <= end) {
      const auto format = static_cast<uint8_t>(cubin[at]);
      const auto attribute = static_cast<uint8_t>(cubin[at + 1]);
      if (format == 4) {
        const auto size = readAt<uint16_t>(cubin, at + 2);
        if (size == 8 && attribute == 0x2f)
          kernels[symbols[readAt<uint32_t>(cubin, at + 4)]].registers =
              static_cast<int>(readAt<uint32_t>(cubin, at + 8));
        at += 4 + size;
      } else {
        at += format == 3 ? 4 : format == 2 ? 3 : 2;
      }
    }
  }
  return kernels;
}

void checkCubin(const std::vector<char> &cubin, const ElementType &type, const std::string &arch) {
  ASSERT_GT(cubin.size(), 4u) << arch;
  ASSERT_EQ(std::string(cubin.data(), 4), "\x7f"
                                          "ELF")
      << arch;
  const std::map<std::string, KernelResources> kernels = readResources(cubin);
  for (const std::string &entry : entryPoints(type)) {
    auto found = kernels.find(entry);
    ASSERT_NE(found, kernels.end()) << entry << " missing from " << arch;
    const KernelResources &used = found->second;
    EXPECT_GT(used.registers, 0) << entry << " " << arch;
    EXPECT_LE(used.registers, 255) << entry << " " << arch;
    EXPECT_LE(used.registers * kThreads, 65536) << entry << " " << arch;
    EXPECT_LE(used.sharedBytes, 48u * 1024u) << entry << " " << arch;
  }
}

void checkPtx(const std::string &ptx, const ElementType &type) {
  for (const std::string &entry : entryPoints(type)) {
    const size_t at = ptx.find(".entry " + entry + "(");
    ASSERT_NE(at, std::string::npos) << entry << " missing from the PTX";
    // The directives sit between the parameter list and the body's '{'.
    const size_t body = ptx.find('{', at);
    const std::string head = ptx.substr(at, body - at);
    EXPECT_NE(head.find(".maxntid 128, 1, 1"), std::string::npos) << head;
  }
  // A register array indexed at run time would land in local memory.
  EXPECT_EQ(ptx.find("__local_depot"), std::string::npos);
  EXPECT_EQ(ptx.find(".local"), std::string::npos);
}

class FlashAttentionNvrtc : public ::testing::TestWithParam<ElementType> {};

TEST_P(FlashAttentionNvrtc, CompilesForSm80Sm90AndPtx) {
  const ElementType type = GetParam();
  const std::string source = sourceFor(type);
  const std::string name = std::string("flash_attention_") + type.label + ".cu";
  const std::vector<std::string> flags = options();
  // Three independent NVRTC programs; NVRTC is safe to call from threads.
  auto sm80 =
      std::async(std::launch::async, [&] { return compileToCubin(source, name, "sm_80", flags); });
  auto sm90 =
      std::async(std::launch::async, [&] { return compileToCubin(source, name, "sm_90", flags); });
  const std::string ptx = compileToPtx(source, name, "compute_90", flags);
  checkPtx(ptx, type);
  checkCubin(sm80.get(), type, "sm_80");
  checkCubin(sm90.get(), type, "sm_90");
}

INSTANTIATE_TEST_SUITE_P(ElementTypes, FlashAttentionNvrtc, ::testing::ValuesIn(kElementTypes),
                         [](const ::testing::TestParamInfo<ElementType> &info) {
                           return std::string(info.param.label);
                         });

} // namespace
