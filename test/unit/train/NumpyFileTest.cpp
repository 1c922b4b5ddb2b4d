//===- NumpyFileTest.cpp - .npy parsing and batches of arrays --------------===//
//
// .npy images written here byte by byte (versions 1 and 2, each dtype family), the malformed
// ones a user's file may hold (each a one-line DataError), and the batches of a model's inputs
// drawn from arrays: disjoint rows within an epoch, a fresh order per epoch, a pure function of
// (seed, micro step). NumPy's own .npz archives are read in test/Onnx/torch-train-arrays.test.
//
//===----------------------------------------------------------------------===//

#include "runtime/train/Data.h"
#include "runtime/train/NumpyFile.h"
#include "test/unit/runtime/PlanTestUtils.h"

#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <set>

using namespace ampc;
using namespace ampc::test;
using train::DataError;
using train::NumpyArray;

namespace {

/// A .npy image: format version \p major, header dict \p dict, then \p data.
std::vector<uint8_t> npy(const std::string &dict, const std::vector<uint8_t> &data,
                         int major = 1) {
  std::vector<uint8_t> bytes = {0x93, 'N', 'U', 'M', 'P', 'Y', uint8_t(major), 0};
  std::string header = dict;
  const size_t prefix = major == 1 ? 10 : 12;
  while ((prefix + header.size() + 1) % 64 != 0)
    header += ' ';
  header += '\n';
  bytes.push_back(uint8_t(header.size()));
  bytes.push_back(uint8_t(header.size() >> 8));
  if (major > 1) {
    bytes.push_back(0);
    bytes.push_back(0);
  }
  bytes.insert(bytes.end(), header.begin(), header.end());
  bytes.insert(bytes.end(), data.begin(), data.end());
  return bytes;
}

template <typename T> std::vector<uint8_t> raw(const std::vector<T> &values) {
  std::vector<uint8_t> bytes(values.size() * sizeof(T));
  std::memcpy(bytes.data(), values.data(), bytes.size());
  return bytes;
}

NumpyArray parse(const std::vector<uint8_t> &bytes) {
  return train::parseNpy(bytes.data(), bytes.size(), "test.npy");
}

void expectError(const std::vector<uint8_t> &bytes, const std::string &fragment) {
  try {
    parse(bytes);
    ADD_FAILURE() << "expected a DataError mentioning: " << fragment;
  } catch (const DataError &error) {
    EXPECT_NE(std::string(error.what()).find(fragment), std::string::npos) << error.what();
    EXPECT_EQ(std::string(error.what()).find('\n'), std::string::npos) << error.what();
  }
}

TEST(NumpyFile, ReadsEachDtypeFamily) {
  NumpyArray f =
      parse(npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }",
                raw<float>({1, 2, 3, 4, 5, 6.5f})));
  EXPECT_EQ(f.shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(f.dtypeName(), "float32");
  EXPECT_EQ(f.real(5), 6.5);

  NumpyArray i = parse(npy("{'descr': '<i2', 'fortran_order': False, 'shape': (3,), }",
                           raw<int16_t>({-7, 0, 300}), 2));
  EXPECT_EQ(i.dtypeName(), "int16");
  EXPECT_EQ(i.integer(0), -7);
  EXPECT_EQ(i.integer(2), 300);

  NumpyArray u = parse(npy("{'descr': '|u1', 'fortran_order': False, 'shape': (2,), }",
                           raw<uint8_t>({255, 1})));
  EXPECT_EQ(u.integer(0), 255);
  EXPECT_EQ(u.real(0), 255.0);

  // float16 1.5 is 0x3e00; a scalar has the empty shape.
  NumpyArray h =
      parse(npy("{'descr': '<f2', 'fortran_order': False, 'shape': (), }", raw<uint16_t>({0x3e00})));
  EXPECT_TRUE(h.shape.empty());
  EXPECT_EQ(h.real(0), 1.5);
}

TEST(NumpyFile, MalformedImagesAreOneLineErrors) {
  expectError({1, 2, 3}, "no \\x93NUMPY magic");
  expectError(npy("{'descr': '>f4', 'fortran_order': False, 'shape': (1,), }", raw<float>({1})),
              "big-endian");
  expectError(npy("{'descr': '<f4', 'fortran_order': True, 'shape': (1,), }", raw<float>({1})),
              "Fortran order");
  expectError(npy("{'descr': '<U8', 'fortran_order': False, 'shape': (1,), }", raw<float>({1})),
              "not one ampc reads");
  expectError(npy("{'descr': '|O', 'fortran_order': False, 'shape': (1,), }", raw<float>({1})),
              "not a numeric array");
  expectError(npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }",
                  raw<float>({1, 2, 3})),
              "needs 24 bytes of data, the file has 12");
  // A shape whose element count wraps 64 bits is refused, not wrapped.
  expectError(npy("{'descr': '<f4', 'fortran_order': False, "
                  "'shape': (4611686018427387904, 256), }",
                  raw<float>({1})),
              "overflows");
  std::vector<uint8_t> truncated =
      npy("{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }", raw<float>({1}));
  truncated.resize(20);
  expectError(truncated, "header is truncated");
}

/// A plan with inputs x f32 [2, 3] and labels i64 [2] (bound 5), summed as its loss.
plan::Plan twoInputs() {
  PlanBuilder b;
  const uint32_t x = b.input("x", DType::F32, {2, 3});
  b.input("labels", DType::I64, {2}, 5);
  b.plan.inputs[1].use = plan::InputUse::Labels;
  b.plan.loss = b.op(OpCode::Sum, {x}, DType::F32, {}, {{"axes", Shape{0, 1}}, {"keepdims", int64_t(0)}});
  return b.plan;
}

/// Writes a .npy file of \p rows rows: x row r = (r, r, r), or labels r % 5.
std::string writeNpy(const std::string &name, const std::vector<uint8_t> &bytes) {
  const std::string path = ::testing::TempDir() + "/" + name + ".npy";
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char *>(bytes.data()),
                                              std::streamsize(bytes.size()));
  return path;
}

TEST(ArrayBatches, OneInputFromANpyFileVisitsEveryRowOncePerEpoch) {
  // A one-input model reads a .npy file named after its input: 7 rows, micro-batches of 2, so
  // 3 per epoch and one row left out of each.
  PlanBuilder b;
  const uint32_t x = b.input("x", DType::F32, {2, 3});
  b.plan.loss = b.op(OpCode::Sum, {x}, DType::F32, {}, {{"axes", Shape{0, 1}}, {"keepdims", int64_t(0)}});
  std::vector<float> values;
  for (int r = 0; r < 7; ++r)
    values.insert(values.end(), {float(r), float(r), float(r)});
  const std::string path =
      writeNpy("x", npy("{'descr': '<f4', 'fortran_order': False, 'shape': (7, 3), }", raw(values)));
  auto source = train::makeArrayBatches(b.plan, path, 11);
  auto rowsOf = [&](uint64_t step) {
    std::vector<float> data(6);
    std::memcpy(data.data(), source->batch(step)[0].bytes.data(), 24);
    EXPECT_EQ(data[0], data[2]);
    return std::vector<int>{int(data[0]), int(data[3])};
  };
  for (uint64_t epoch = 0; epoch < 2; ++epoch) {
    std::set<int> seen;
    for (uint64_t k = 0; k < 3; ++k)
      for (int row : rowsOf(epoch * 3 + k))
        EXPECT_TRUE(seen.insert(row).second) << "row " << row << " twice in epoch " << epoch;
    EXPECT_EQ(seen.size(), 6u);
  }
  // A pure function of (seed, micro step); another seed, another order.
  EXPECT_EQ(rowsOf(4), rowsOf(4));
  auto other = train::makeArrayBatches(b.plan, path, 12);
  bool differs = false;
  for (uint64_t step = 0; step < 3; ++step)
    differs |= other->batch(step)[0].bytes != source->batch(step)[0].bytes;
  EXPECT_TRUE(differs);
  // Without shuffling (validation) the rows come in file order.
  auto ordered = train::makeArrayBatches(b.plan, path, 11, /*shuffle=*/false);
  std::vector<float> first(6);
  std::memcpy(first.data(), ordered->batch(1)[0].bytes.data(), 24);
  EXPECT_EQ(first[0], 2);
  EXPECT_EQ(first[3], 3);
}

TEST(ArrayBatches, ArraysThatDoNotFitAreNamed) {
  const plan::Plan plan = twoInputs();
  // A .npy holds one array: a two-input model finds the second missing.
  const std::string x = writeNpy(
      "x", npy("{'descr': '<f4', 'fortran_order': False, 'shape': (4, 3), }",
               raw<float>(std::vector<float>(12, 1))));
  try {
    train::makeArrayBatches(plan, x, 0);
    ADD_FAILURE() << "a missing array was accepted";
  } catch (const DataError &error) {
    EXPECT_NE(std::string(error.what()).find("no array for input 'labels' (the file's arrays: x)"),
              std::string::npos)
        << error.what();
  }
  const std::string missing = ::testing::TempDir() + "/absent.npz";
  EXPECT_THROW(train::makeArrayBatches(plan, missing, 0), DataError);
}

} // namespace
