//===- LossKernels.cpp - Cross-entropy and mean squared error -------------===//
//
// Per-row terms are computed in the compute type T; the sum over rows is
// accumulated in double in row order (whatever the thread count) so the mean
// over tens of thousands of tokens does not drift, then rounded to T.
//
//===----------------------------------------------------------------------===//

#include "runtime/cpu/Kernels.h"
#include "runtime/cpu/RowStatistics.h"
#include "runtime/cpu/ThreadPool.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

namespace ampc::cpu::kernels {

int64_t countLabelledRows(const int64_t *labels, int64_t rows, int64_t classes,
                          int64_t ignoreIndex) {
  // Check every label first, in order, so the error names the first bad row.
  int64_t counted = 0;
  for (int64_t r = 0; r < rows; ++r) {
    if (labels[r] == ignoreIndex)
      continue;
    if (labels[r] < 0 || labels[r] >= classes)
      throw KernelError("label " + std::to_string(labels[r]) + " at row " + std::to_string(r) +
                        " is outside the classes [0, " + std::to_string(classes) +
                        ") and is not ignore_index " + std::to_string(ignoreIndex));
    ++counted;
  }
  return counted;
}

template <typename T>
T crossEntropy(const T *logits, int64_t rows, int64_t classes, const int64_t *labels,
               int64_t ignoreIndex, bool sum) {
  const int64_t counted = countLabelledRows(labels, rows, classes, ignoreIndex);
  // loss_r = logsumexp(x_r) - x_r[label_r], with the row maximum subtracted
  // inside the exponentials for stability.
  std::vector<double> rowLoss(rows, 0.0);
  parallelFor(rows, rowGrain(classes), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      if (labels[r] == ignoreIndex)
        continue;
      const T *row = logits + r * classes;
      const T maximum = rowMaximum(row, classes);
      T total = 0;
      for (int64_t c = 0; c < classes; ++c)
        total += std::exp(row[c] - maximum);
      const T logSumExp = maximum + std::log(total);
      rowLoss[r] = static_cast<double>(logSumExp - row[labels[r]]);
    }
  });
  double total = 0;
  for (int64_t r = 0; r < rows; ++r)
    total += rowLoss[r];
  if (sum)
    return static_cast<T>(total);
  // With every row ignored the mean is 0/0 = NaN, as in PyTorch.
  return static_cast<T>(counted == 0 ? std::numeric_limits<double>::quiet_NaN()
                                     : total / static_cast<double>(counted));
}

template <typename T> T mseLoss(const T *pred, const T *target, int64_t count) {
  // mean((pred - target)^2): each square in T, the sum in double.
  double total = 0;
  for (int64_t i = 0; i < count; ++i) {
    const T difference = pred[i] - target[i];
    total += static_cast<double>(difference * difference);
  }
  return static_cast<T>(total / static_cast<double>(count));
}

template float crossEntropy<float>(const float *, int64_t, int64_t, const int64_t *, int64_t, bool);
template double crossEntropy<double>(const double *, int64_t, int64_t, const int64_t *, int64_t,
                                     bool);
template float mseLoss<float>(const float *, const float *, int64_t);
template double mseLoss<double>(const double *, const double *, int64_t);

} // namespace ampc::cpu::kernels
