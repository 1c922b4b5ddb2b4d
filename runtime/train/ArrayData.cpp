//===- ArrayData.cpp - Batches of a model's inputs from NumPy arrays -------===//
//
// --data FILE.npz: one array per model input, named as the input, whose first dimension is
// the rows and whose other dimensions are the input's (the input's first is the micro-batch).
// Every array is checked against its input once, when the file is loaded; then each epoch
// visits the rows in an order drawn from (seed, epoch) and micro step m takes the next micro-
// batch of them (an epoch's last, partial micro-batch is dropped). A batch is a pure function
// of (seed, micro step), so data parallel ranks, which run distinct global micro steps, read
// disjoint rows, and a resumed run reads what the uninterrupted one would have.
//
//===----------------------------------------------------------------------===//

#include "runtime/train/Data.h"
#include "runtime/train/NumpyFile.h"

#include "runtime/numerics/Philox.h"

#include <algorithm>
#include <cstring>
#include <mutex>
#include <numeric>

namespace ampc::train {

namespace {

const uint32_t kOrderStream = numerics::fnv1a32("ampc.train.rows", 15);

/// One model input and the array that feeds it.
struct Feed {
  plan::Input input;
  plan::DType dtype;
  NumpyArray array;
  /// Elements of one row.
  int64_t rowElements = 1;
};

std::string listNames(const std::vector<std::string> &names) {
  std::string text;
  for (size_t i = 0; i < names.size(); ++i)
    text += (i ? ", " : "") + names[i];
  return text;
}

std::string shapeText(const std::vector<int64_t> &shape) { return plan::shapeToString(shape); }

/// Checks that \p array can feed \p input (its rows of the input's shape after the batch
/// dimension, a dtype that converts, values an index or label input accepts).
void checkFeed(const plan::Plan &plan, const plan::Input &input, const NumpyArray &array,
               const std::string &path) {
  const plan::Buffer &buffer = plan.buffers[input.buffer];
  const std::string what = path + ": array '" + array.name + "' (" + array.dtypeName() + " " +
                           shapeText(array.shape) + ") for input '" + input.name + "' (" +
                           plan::dtypeName(buffer.dtype) + " " + shapeText(buffer.shape) + ")";
  if (buffer.shape.empty() || buffer.shape[0] < 1)
    throw DataError(what + ": the input has no batch dimension to take rows along");
  if (array.shape.size() != buffer.shape.size() ||
      !std::equal(buffer.shape.begin() + 1, buffer.shape.end(), array.shape.begin() + 1))
    throw DataError(what + ": each row must have the input's shape after its batch dimension, " +
                    shapeText(std::vector<int64_t>(buffer.shape.begin() + 1, buffer.shape.end())));
  if (array.shape[0] < buffer.shape[0])
    throw DataError(what + ": " + std::to_string(array.shape[0]) + " rows, fewer than one " +
                    "micro-batch of " + std::to_string(buffer.shape[0]));
  if (!plan::isIntegerDType(buffer.dtype))
    return;
  if (array.isFloat())
    throw DataError(what + ": an integer input takes an integer array; convert it with "
                           "astype(np.int64)");
  const int64_t count = array.elements();
  const int64_t limit = buffer.dtype == plan::DType::I32 ? int64_t(INT32_MAX) : INT64_MAX;
  for (int64_t i = 0; i < count; ++i) {
    const int64_t value = array.integer(i);
    if (array.kind == 'u' && array.itemSize == 8 && value < 0)
      throw DataError(what + ": element " + std::to_string(i) + " exceeds int64");
    // Ids index a table; a label may be negative (an ignore_index) but not past the classes.
    const bool bad = (input.bound > 0 && value >= input.bound) ||
                     (input.use == plan::InputUse::Indices && value < 0) || value > limit ||
                     value < -limit - 1;
    if (bad)
      throw DataError(what + ": element " + std::to_string(i) + " is " + std::to_string(value) +
                      (input.bound > 0 ? ", outside [0, " + std::to_string(input.bound) + ")"
                                       : ", outside the input's dtype"));
  }
}

class ArrayBatches : public BatchSource {
public:
  ArrayBatches(const plan::Plan &plan, const std::string &path, uint64_t seed, bool shuffle)
      : path(path), seed(seed), shuffle(shuffle) {
    std::vector<NumpyArray> arrays = readNumpyFile(path);
    std::vector<std::string> inputNames, arrayNames;
    for (const plan::Input &input : plan.inputs)
      inputNames.push_back(input.name);
    for (const NumpyArray &array : arrays)
      arrayNames.push_back(array.name);
    for (const NumpyArray &array : arrays)
      if (std::find(inputNames.begin(), inputNames.end(), array.name) == inputNames.end())
        throw DataError(path + ": array '" + array.name + "' names no input of the model (its "
                               "inputs: " + listNames(inputNames) + ")");
    for (const plan::Input &input : plan.inputs) {
      auto found = std::find_if(arrays.begin(), arrays.end(),
                                [&](const NumpyArray &array) { return array.name == input.name; });
      if (found == arrays.end())
        throw DataError(path + ": no array for input '" + input.name + "' (the file's arrays: " +
                        listNames(arrayNames) + "); np.savez(path, " + input.name + "=...)");
      checkFeed(plan, input, *found, path);
      Feed feed{input, plan.buffers[input.buffer].dtype, std::move(*found)};
      const std::vector<int64_t> &shape = plan.buffers[input.buffer].shape;
      feed.rowElements = std::accumulate(shape.begin() + 1, shape.end(), int64_t(1),
                                         std::multiplies<int64_t>());
      feeds.push_back(std::move(feed));
    }
    if (feeds.empty())
      throw DataError(path + ": the model has no inputs to feed");
    rows = feeds.front().array.shape[0];
    microBatch = plan.buffers[feeds.front().input.buffer].shape[0];
    for (const Feed &feed : feeds) {
      if (feed.array.shape[0] != rows)
        throw DataError(path + ": array '" + feed.array.name + "' has " +
                        std::to_string(feed.array.shape[0]) + " rows, array '" +
                        feeds.front().array.name + "' " + std::to_string(rows) +
                        "; every array needs one row per example");
      if (plan.buffers[feed.input.buffer].shape[0] != microBatch)
        throw DataError(path + ": input '" + feed.input.name + "' has a micro-batch of " +
                        std::to_string(plan.buffers[feed.input.buffer].shape[0]) +
                        ", input '" + feeds.front().input.name + "' " + std::to_string(microBatch) +
                        "; rows are taken for every input alike");
    }
    batchesPerEpoch = rows / microBatch;
  }

  std::vector<InputData> batch(uint64_t microStep) const override {
    const uint64_t epoch = microStep / uint64_t(batchesPerEpoch);
    const int64_t first = int64_t(microStep % uint64_t(batchesPerEpoch)) * microBatch;
    std::vector<int64_t> picked(static_cast<size_t>(microBatch));
    {
      std::lock_guard<std::mutex> lock(orderMutex);
      const std::vector<int64_t> &order = orderOf(epoch);
      std::copy(order.begin() + first, order.begin() + first + microBatch, picked.begin());
    }
    std::vector<InputData> out;
    for (const Feed &feed : feeds) {
      InputData data{feed.input.name, {}};
      // The picked rows' elements, read by \p element (integer or real).
      auto gather = [&](auto element) {
        std::vector<decltype(element(int64_t(0)))> values;
        values.reserve(size_t(microBatch * feed.rowElements));
        for (int64_t row : picked)
          for (int64_t e = 0; e < feed.rowElements; ++e)
            values.push_back(element(row * feed.rowElements + e));
        return values;
      };
      if (plan::isIntegerDType(feed.dtype)) {
        data.bytes = encodeIntegers(
            feed.dtype, gather([&](int64_t i) { return feed.array.integer(i); }));
      } else if (feed.dtype == plan::DType::F32 && feed.array.kind == 'f' &&
                 feed.array.itemSize == 4) {
        // The common case: f32 rows copied as they are.
        data.bytes.resize(size_t(microBatch * feed.rowElements) * 4);
        for (size_t r = 0; r < picked.size(); ++r)
          std::memcpy(data.bytes.data() + r * feed.rowElements * 4,
                      feed.array.data.data() + picked[r] * feed.rowElements * 4,
                      size_t(feed.rowElements) * 4);
      } else {
        data.bytes =
            encodeReals(feed.dtype, gather([&](int64_t i) { return feed.array.real(i); }));
      }
      out.push_back(std::move(data));
    }
    return out;
  }

  std::string describe() const override {
    return path + " (" + withCommas(rows) + " rows of " + std::to_string(feeds.size()) +
           " array" + (feeds.size() == 1 ? "" : "s") + ", " + withCommas(batchesPerEpoch) +
           (batchesPerEpoch == 1 ? " micro-batch" : " micro-batches") + " per epoch" +
           (shuffle ? ", shuffled each epoch" : ", in order") + ")";
  }

private:
  /// The row order of \p epoch: a Fisher-Yates shuffle drawn from (seed, epoch), or the file's.
  const std::vector<int64_t> &orderOf(uint64_t epoch) const {
    if (order.empty() || orderEpoch != epoch) {
      order.resize(static_cast<size_t>(rows));
      std::iota(order.begin(), order.end(), int64_t(0));
      if (shuffle)
        for (int64_t i = rows - 1; i > 0; --i) {
          numerics::PhiloxBlock bits =
              numerics::philoxForElement(seed, epoch, kOrderStream, uint64_t(i));
          const uint64_t random = (uint64_t(bits.word[1]) << 32) | bits.word[0];
          std::swap(order[size_t(i)], order[size_t(random % uint64_t(i + 1))]);
        }
      orderEpoch = epoch;
    }
    return order;
  }

  std::string path;
  uint64_t seed;
  bool shuffle;
  std::vector<Feed> feeds;
  int64_t rows = 0, microBatch = 0, batchesPerEpoch = 0;
  mutable std::mutex orderMutex;
  mutable std::vector<int64_t> order;
  mutable uint64_t orderEpoch = 0;
};

} // namespace

std::unique_ptr<BatchSource> makeArrayBatches(const plan::Plan &plan, const std::string &path,
                                              uint64_t seed, bool shuffle) {
  return std::make_unique<ArrayBatches>(plan, path, seed, shuffle);
}

} // namespace ampc::train
