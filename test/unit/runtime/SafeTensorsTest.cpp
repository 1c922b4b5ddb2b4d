//===- SafeTensorsTest.cpp - The safetensors reader and writer ------------===//
//
// Round trips through encode/decode and files, the byte layout against a
// file written by hand to the format's definition, and every way a file can
// be malformed: each is an Error naming the file and the cause.
//
//===----------------------------------------------------------------------===//

#include "runtime/plan/SafeTensors.h"
#include "runtime/plan/FileIO.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>

namespace ampc::safetensors {
namespace {

std::string u64(uint64_t value) {
  std::string out;
  for (int i = 0; i < 8; ++i)
    out.push_back(static_cast<char>((value >> (8 * i)) & 0xff));
  return out;
}

/// A file of \p header (JSON) and \p data, as the format defines it.
std::string handMade(const std::string &header, const std::string &data) {
  return u64(header.size()) + header + data;
}

std::string errorOf(const std::string &bytes) {
  try {
    decode(bytes, "w.safetensors");
  } catch (const Error &error) {
    return error.what();
  }
  return "";
}

TEST(SafeTensors, EncodeDecodeRoundTrip) {
  File file;
  file.metadata["format"] = "pt";
  file.tensors.push_back(fromFloats("w", {2, 3}, {1, -2, 3.5f, 0, 1e-3f, 7}));
  file.tensors.push_back(fromFloats("b", {3}, {0.25f, 1, -1}, "BF16"));
  file.tensors.push_back(fromFloats("s", {}, {2.5f}, "F16"));
  const std::string bytes = encode(file);
  // The header is padded to 8 bytes and the data follows it.
  const uint64_t headerBytes = static_cast<unsigned char>(bytes[0]);
  EXPECT_EQ(headerBytes % 8, 0u);
  EXPECT_EQ(bytes.size(), 8 + headerBytes + 24 + 6 + 2);

  File back = decode(bytes, "mem");
  EXPECT_EQ(back.metadata.at("format"), "pt");
  ASSERT_EQ(back.tensors.size(), 3u);
  EXPECT_EQ(back.tensors[0].name, "w");
  EXPECT_EQ(back.tensors[1].name, "b");
  EXPECT_EQ(back.tensors[2].name, "s");
  EXPECT_EQ(back.find("w")->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(toFloats(*back.find("w")), (std::vector<float>{1, -2, 3.5f, 0, 1e-3f, 7}));
  EXPECT_EQ(back.find("b")->dtype, "BF16");
  EXPECT_EQ(toFloats(*back.find("b")), (std::vector<float>{0.25f, 1, -1}));
  EXPECT_TRUE(back.find("s")->shape.empty());
  EXPECT_EQ(toFloats(*back.find("s")), std::vector<float>{2.5f});
  EXPECT_EQ(back.find("missing"), nullptr);
}

TEST(SafeTensors, ReadsAFileWrittenToTheDefinition) {
  // F64 [2] = {1.5, -2}, I64 [1] = {7}, in the reverse of header order.
  double f64[2] = {1.5, -2};
  int64_t i64 = 7;
  std::string data(reinterpret_cast<const char *>(&i64), 8);
  data.append(reinterpret_cast<const char *>(f64), 16);
  const std::string header = R"({"x":{"dtype":"F64","shape":[2],"data_offsets":[8,24]},)"
                             R"("n":{"dtype":"I64","shape":[1],"data_offsets":[0,8]}})";
  File file = decode(handMade(header, data), "mem");
  ASSERT_EQ(file.tensors.size(), 2u);
  EXPECT_EQ(file.tensors[0].name, "n"); // data order
  EXPECT_EQ(toFloats(*file.find("x")), (std::vector<float>{1.5f, -2}));
  try {
    toFloats(*file.find("n"));
    FAIL() << "I64 is not floating point";
  } catch (const Error &error) {
    EXPECT_STREQ(error.what(), "tensor 'n' is I64, not floating point (F32, BF16, F16 or F64)");
  }
}

TEST(SafeTensors, NarrowTypesRoundToNearestEven) {
  // 1 + 2^-8 is halfway between two bf16 values: it rounds to even (1).
  Tensor t = fromFloats("x", {2}, {1.00390625f, 1.01171875f}, "BF16");
  EXPECT_EQ(toFloats(t), (std::vector<float>{1.0f, 1.015625f}));
  Tensor h = fromFloats("x", {1}, {65520.f}, "F16"); // rounds up to infinity
  EXPECT_TRUE(std::isinf(toFloats(h)[0]));
  EXPECT_THROW(fromFloats("x", {1}, {1}, "I32"), Error);
}

TEST(SafeTensors, MalformedFilesAreErrorsNamingTheCause) {
  EXPECT_EQ(
      errorOf("abc"),
      "w.safetensors: not a safetensors file: 3 bytes, shorter than the 8-byte header length");
  EXPECT_EQ(errorOf(u64(1000) + "{}"), "w.safetensors: not a safetensors file: its header length "
                                       "1000 exceeds the file's 10 bytes");
  EXPECT_NE(errorOf(handMade("{\"a\":", "")).find("its header is not JSON"), std::string::npos);
  EXPECT_EQ(errorOf(handMade("[1]", "")),
            "w.safetensors: not a safetensors file: its header is not a JSON object");
  EXPECT_EQ(errorOf(handMade(R"({"a":{"dtype":"F32","shape":[2]}})", "")),
            "w.safetensors: tensor 'a' has no \"data_offsets\"");
  EXPECT_EQ(errorOf(handMade(R"({"a":{"dtype":"Q4","shape":[2],"data_offsets":[0,8]}})",
                             std::string(8, '\0'))),
            "w.safetensors: tensor 'a' has the unknown dtype 'Q4'");
  EXPECT_EQ(errorOf(handMade(R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})",
                             std::string(8, '\0'))),
            "w.safetensors: tensor 'a': a dimension is not a non-negative integer");
  EXPECT_EQ(errorOf(handMade(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})",
                             std::string(8, '\0'))),
            "w.safetensors: tensor 'a' has data_offsets [0, 16] outside the 8 data bytes (a "
            "truncated file?)");
  EXPECT_EQ(errorOf(handMade(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})",
                             std::string(8, '\0'))),
            "w.safetensors: tensor 'a' has 8 bytes for shape [3] of F32 (12 expected)");
  EXPECT_EQ(errorOf(handMade(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                             R"("b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                             std::string(8, '\0'))),
            "w.safetensors: two tensors' data_offsets overlap");
  EXPECT_EQ(errorOf(handMade(R"({"__metadata__":{"k":1}})", "")),
            "w.safetensors: metadata 'k' is not a string");
}

TEST(SafeTensors, EntriesNamingTheSameBytesAreRefusedBeforeCopying) {
  // 10,000 entries naming the same 1 MiB would copy 10 GiB out of the file: the ranges are
  // checked, and refused as overlapping, before any byte is copied.
  std::string header = "{";
  for (int i = 0; i < 10000; ++i)
    header += (i ? ",\"t" : "\"t") + std::to_string(i) +
              R"(":{"dtype":"U8","shape":[1048576],"data_offsets":[0,1048576]})";
  header += "}";
  EXPECT_EQ(errorOf(handMade(header, std::string(1 << 20, '\0'))),
            "w.safetensors: two tensors' data_offsets overlap");
}

TEST(SafeTensors, HeadersOfManyEntriesDecode) {
  // 100,000 empty tensors: a header parsed with ordered_json's linear key lookups took minutes.
  std::string header = "{";
  for (int i = 0; i < 100000; ++i)
    header += (i ? ",\"t" : "\"t") + std::to_string(i) +
              R"(":{"dtype":"F32","shape":[0],"data_offsets":[0,0]})";
  header += "}";
  const File file = decode(handMade(header, ""), "w.safetensors");
  EXPECT_EQ(file.tensors.size(), 100000u);
}

TEST(SafeTensors, EveryTruncationIsAnError) {
  File file;
  file.tensors.push_back(fromFloats("w", {4}, {1, 2, 3, 4}));
  const std::string bytes = encode(file);
  for (size_t size = 0; size < bytes.size(); ++size)
    EXPECT_NE(errorOf(bytes.substr(0, size)), "") << size << " bytes";
}

TEST(SafeTensors, FilesAreWrittenAtomically) {
  char pattern[] = "/tmp/ampc-safetensors-XXXXXX";
  ASSERT_NE(::mkdtemp(pattern), nullptr);
  const std::string path = std::string(pattern) + "/w.safetensors";
  File file;
  file.tensors.push_back(fromFloats("w", {2}, {1, 2}));
  writeFile(path, file);
  EXPECT_EQ(toFloats(*readFile(path).find("w")), (std::vector<float>{1, 2}));

  // A failed write leaves the earlier file as it was, and no temporary file.
  File other;
  other.tensors.push_back(fromFloats("w", {2}, {5, 6}));
  ::setenv(files::kInjectWriteErrorVariable, "ENOSPC", 1);
  try {
    writeFile(path, other);
    ADD_FAILURE() << "the injected error was not raised";
  } catch (const Error &error) {
    EXPECT_EQ(std::string(error.what()),
              "cannot write weights file " + path + ": write: No space left on device");
  }
  ::unsetenv(files::kInjectWriteErrorVariable);
  EXPECT_EQ(toFloats(*readFile(path).find("w")), (std::vector<float>{1, 2}));
  EXPECT_EQ(std::system(("test $(ls -A " + std::string(pattern) + " | wc -l) = 1").c_str()), 0);

  try {
    readFile(std::string(pattern) + "/none.safetensors");
    ADD_FAILURE() << "a missing file was read";
  } catch (const Error &error) {
    EXPECT_EQ(std::string(error.what()), "cannot read weights file " + std::string(pattern) +
                                             "/none.safetensors: No such file or directory");
  }
  std::system(("rm -rf " + std::string(pattern)).c_str());
}

} // namespace
} // namespace ampc::safetensors
