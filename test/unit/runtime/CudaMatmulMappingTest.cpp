//===- CudaMatmulMappingTest.cpp - Row-major matmuls as cuBLASLt problems -===//
//
// toColumnMajor() turns the plan's row-major matmul into the column-major
// problem cuBLASLt runs. These tests execute that problem with a reference
// implementation of cuBLASLt's documented semantics (column-major storage,
// op() per transpose flag, leading dimensions, strided batches, bias over
// the rows of D, BGRADA/BGRADB as sums over k of op(A)/op(B), GELU aux =
// the pre-activation, DGELU = the product times the GELU's derivative at
// aux) on the very buffers the row-major matrices occupy,
// and compare with the row-major definition, for every transpose pair,
// padded rows, batches (packed and broadcast) and each epilogue. Inputs are
// small integers, so both sides are exact and must agree exactly. Also
// checked: which descriptions are refused, and how a matmul is described
// in errors.
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/CublasLt.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

namespace {

using namespace ampc::cuda;
using ampc::plan::DType;

double geluTanh(double x) {
  const double c = std::sqrt(2.0 / M_PI);
  return 0.5 * x * (1.0 + std::tanh(c * (x + 0.044715 * x * x * x)));
}

/// The derivative of geluTanh.
double geluTanhDerivative(double x) {
  const double c = std::sqrt(2.0 / M_PI);
  const double t = std::tanh(c * (x + 0.044715 * x * x * x));
  return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * c * (1.0 + 3.0 * 0.044715 * x * x);
}

/// Buffers of one problem, in the row-major layout the plan gives them.
struct Buffers {
  std::vector<double> a, b, d, bias, aux;
};

/// Element strides as the plan would resolve them.
int64_t resolvedLd(int64_t ld, int64_t cols) { return ld == 0 ? cols : ld; }

/// D, bias and aux by the row-major definition.
Buffers rowMajorReference(const MatmulDesc &desc, const Buffers &in) {
  Buffers out = in;
  const int64_t aCols = desc.transposeA ? desc.m : desc.k;
  const int64_t aRows = desc.transposeA ? desc.k : desc.m;
  const int64_t bCols = desc.transposeB ? desc.k : desc.n;
  const int64_t bRows = desc.transposeB ? desc.n : desc.k;
  const int64_t lda = resolvedLd(desc.lda, aCols);
  const int64_t ldb = resolvedLd(desc.ldb, bCols);
  const int64_t ldd = resolvedLd(desc.ldd, desc.n);
  const int64_t strideA = desc.batchStrideA < 0 ? aRows * lda : desc.batchStrideA;
  const int64_t strideB = desc.batchStrideB < 0 ? bRows * ldb : desc.batchStrideB;
  const int64_t strideD = desc.batchStrideD < 0 ? desc.m * ldd : desc.batchStrideD;
  const int64_t auxLd = resolvedLd(desc.auxLd, desc.n);
  const int64_t auxStride = desc.auxBatchStride < 0 ? desc.m * auxLd : desc.auxBatchStride;
  auto opA = [&](int64_t batch, int64_t row, int64_t l) {
    return in.a[batch * strideA + (desc.transposeA ? l * lda + row : row * lda + l)];
  };
  auto opB = [&](int64_t batch, int64_t l, int64_t col) {
    return in.b[batch * strideB + (desc.transposeB ? col * ldb + l : l * ldb + col)];
  };
  for (int64_t p = 0; p < desc.batchCount; ++p)
    for (int64_t i = 0; i < desc.m; ++i)
      for (int64_t j = 0; j < desc.n; ++j) {
        double sum = 0;
        for (int64_t l = 0; l < desc.k; ++l)
          sum += opA(p, i, l) * opB(p, l, j);
        double &d = out.d[p * strideD + i * ldd + j];
        double value = 2.0 * sum + 3.0 * d; // alpha 2, beta 3
        switch (desc.epilogue) {
        case MatmulEpilogue::Bias:
          value += in.bias[j];
          break;
        case MatmulEpilogue::GeluBias:
          value = geluTanh(value + in.bias[j]);
          break;
        case MatmulEpilogue::GeluAuxBias:
          out.aux[p * auxStride + i * auxLd + j] = value + in.bias[j];
          value = geluTanh(value + in.bias[j]);
          break;
        case MatmulEpilogue::GeluGrad:
          value *= geluTanhDerivative(in.aux[p * auxStride + i * auxLd + j]);
          break;
        default:
          break;
        }
        d = value;
      }
  if (desc.epilogue == MatmulEpilogue::BiasGradientB)
    for (int64_t j = 0; j < desc.n; ++j) {
      out.bias[j] = 0;
      for (int64_t l = 0; l < desc.k; ++l)
        out.bias[j] += opB(0, l, j);
    }
  if (desc.epilogue == MatmulEpilogue::BiasGradientA)
    for (int64_t i = 0; i < desc.m; ++i) {
      out.bias[i] = 0;
      for (int64_t l = 0; l < desc.k; ++l)
        out.bias[i] += opA(0, i, l);
    }
  return out;
}

/// cuBLASLt's semantics on column-major buffers: D = alpha op(A) op(B) +
/// beta C, with the epilogue, where \p aBuffer / \p bBuffer are what is
/// passed as cuBLASLt's A and B.
void columnMajorGemm(const ColumnMajorGemm &g, const std::vector<double> &aBuffer,
                     const std::vector<double> &bBuffer, std::vector<double> &d,
                     std::vector<double> &bias, std::vector<double> &aux) {
  // The stored shapes must be what op() expects.
  ASSERT_EQ(g.a.rows, static_cast<uint64_t>(g.transA ? g.k : g.m));
  ASSERT_EQ(g.a.cols, static_cast<uint64_t>(g.transA ? g.m : g.k));
  ASSERT_EQ(g.b.rows, static_cast<uint64_t>(g.transB ? g.n : g.k));
  ASSERT_EQ(g.b.cols, static_cast<uint64_t>(g.transB ? g.k : g.n));
  ASSERT_EQ(g.d.rows, static_cast<uint64_t>(g.m));
  ASSERT_EQ(g.d.cols, static_cast<uint64_t>(g.n));
  ASSERT_GE(g.a.ld, static_cast<int64_t>(g.a.rows));
  ASSERT_GE(g.b.ld, static_cast<int64_t>(g.b.rows));
  ASSERT_GE(g.d.ld, static_cast<int64_t>(g.d.rows));
  auto opA = [&](int64_t p, int64_t i, int64_t l) {
    return aBuffer[p * g.a.batchStride + (g.transA ? i * g.a.ld + l : l * g.a.ld + i)];
  };
  auto opB = [&](int64_t p, int64_t l, int64_t j) {
    return bBuffer[p * g.b.batchStride + (g.transB ? l * g.b.ld + j : j * g.b.ld + l)];
  };
  for (int64_t p = 0; p < g.batchCount; ++p)
    for (int64_t j = 0; j < g.n; ++j)
      for (int64_t i = 0; i < g.m; ++i) {
        double sum = 0;
        for (int64_t l = 0; l < g.k; ++l)
          sum += opA(p, i, l) * opB(p, l, j);
        double &out = d[p * g.d.batchStride + j * g.d.ld + i];
        double value = 2.0 * sum + 3.0 * out;
        // Bias vectors run along the rows of D and broadcast over columns.
        if (g.epilogue == CUBLASLT_EPILOGUE_BIAS)
          value += bias[i];
        if (g.epilogue == CUBLASLT_EPILOGUE_GELU_BIAS)
          value = geluTanh(value + bias[i]);
        if (g.epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS) {
          aux[p * g.auxBatchStride + j * g.auxLd + i] = value + bias[i];
          value = geluTanh(value + bias[i]);
        }
        if (g.epilogue == CUBLASLT_EPILOGUE_DGELU)
          value *= geluTanhDerivative(aux[p * g.auxBatchStride + j * g.auxLd + i]);
        out = value;
      }
  if (g.epilogue == CUBLASLT_EPILOGUE_BGRADA) {
    ASSERT_EQ(g.biasLength, g.m);
    for (int64_t i = 0; i < g.m; ++i) {
      bias[i] = 0;
      for (int64_t l = 0; l < g.k; ++l)
        bias[i] += opA(0, i, l);
    }
  }
  if (g.epilogue == CUBLASLT_EPILOGUE_BGRADB) {
    ASSERT_EQ(g.biasLength, g.n);
    for (int64_t j = 0; j < g.n; ++j) {
      bias[j] = 0;
      for (int64_t l = 0; l < g.k; ++l)
        bias[j] += opB(0, l, j);
    }
  }
}

/// Integers in [-4, 4], from a fixed recurrence.
std::vector<double> integers(size_t count, unsigned seed) {
  std::vector<double> values(count);
  unsigned state = seed * 2654435761u + 1;
  for (double &value : values) {
    state = state * 1103515245u + 12345u;
    value = static_cast<double>(static_cast<int>((state >> 16) % 9) - 4);
  }
  return values;
}

struct Case {
  bool transposeA, transposeB;
  int64_t batch;
  bool padded;     // row strides larger than the rows
  bool broadcastB; // batch stride 0 for B
  MatmulEpilogue epilogue;
};

std::string caseName(const ::testing::TestParamInfo<Case> &info) {
  const Case &c = info.param;
  std::string name = std::string(c.transposeA ? "At" : "A") + (c.transposeB ? "Bt" : "B") +
                     "_batch" + std::to_string(c.batch);
  if (c.padded)
    name += "_padded";
  if (c.broadcastB)
    name += "_broadcastB";
  return name + "_" + epilogueName(c.epilogue);
}

/// Names the case in test listings (ctest shows this) instead of its bytes.
void PrintTo(const Case &c, std::ostream *out) {
  *out << caseName(::testing::TestParamInfo<Case>(c, 0));
}

class CudaMatmulMapping : public ::testing::TestWithParam<Case> {};

TEST_P(CudaMatmulMapping, ColumnMajorProblemComputesTheRowMajorMatmul) {
  const Case c = GetParam();
  MatmulDesc desc;
  desc.m = 5;
  desc.n = 16; // the aux row stride must be a multiple of 8
  desc.k = 3;
  desc.transposeA = c.transposeA;
  desc.transposeB = c.transposeB;
  desc.inputType = DType::F32;
  desc.outputType = DType::F32;
  desc.batchCount = c.batch;
  desc.epilogue = c.epilogue;
  const int64_t aRows = c.transposeA ? desc.k : desc.m;
  const int64_t aCols = c.transposeA ? desc.m : desc.k;
  const int64_t bRows = c.transposeB ? desc.n : desc.k;
  const int64_t bCols = c.transposeB ? desc.k : desc.n;
  if (c.padded) {
    desc.lda = aCols + 2;
    desc.ldb = bCols + 3;
    desc.ldd = desc.n + 1;
    desc.auxLd = desc.n + 8;
  }
  if (c.broadcastB)
    desc.batchStrideB = 0;
  ASSERT_EQ(matmulDescProblem(desc), "");

  const int64_t lda = resolvedLd(desc.lda, aCols);
  const int64_t ldb = resolvedLd(desc.ldb, bCols);
  const int64_t ldd = resolvedLd(desc.ldd, desc.n);
  const int64_t auxLd = resolvedLd(desc.auxLd, desc.n);
  Buffers in;
  in.a = integers(aRows * lda * c.batch, 1);
  in.b = integers(bRows * ldb * (c.broadcastB ? 1 : c.batch), 2);
  in.d = integers(desc.m * ldd * c.batch, 3);
  in.bias = integers(std::max(desc.m, desc.n), 4);
  // DGELU reads aux (the GELU's input); GELU_AUX writes it.
  if (c.epilogue == MatmulEpilogue::GeluGrad)
    in.aux = integers(desc.m * auxLd * c.batch, 5);
  else
    in.aux.assign(desc.m * auxLd * c.batch, 0.0);
  const Buffers expected = rowMajorReference(desc, in);

  const ColumnMajorGemm gemm = toColumnMajor(desc);
  Buffers actual = in;
  // cuBLASLt's A is our B, its B our A.
  columnMajorGemm(gemm, in.b, in.a, actual.d, actual.bias, actual.aux);
  if (HasFatalFailure())
    return;
  EXPECT_EQ(actual.d, expected.d);
  EXPECT_EQ(actual.bias, expected.bias);
  EXPECT_EQ(actual.aux, expected.aux);
}

std::vector<Case> allCases() {
  std::vector<Case> cases;
  const MatmulEpilogue epilogues[] = {MatmulEpilogue::None,          MatmulEpilogue::Bias,
                                      MatmulEpilogue::GeluBias,      MatmulEpilogue::GeluAuxBias,
                                      MatmulEpilogue::BiasGradientB, MatmulEpilogue::BiasGradientA,
                                      MatmulEpilogue::GeluGrad};
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (MatmulEpilogue epilogue : epilogues) {
        const bool gradient =
            epilogue == MatmulEpilogue::BiasGradientA || epilogue == MatmulEpilogue::BiasGradientB;
        cases.push_back({ta, tb, 1, false, false, epilogue});
        cases.push_back({ta, tb, 1, true, false, epilogue});
        if (!gradient) {
          cases.push_back({ta, tb, 3, false, false, epilogue});
          cases.push_back({ta, tb, 3, true, true, epilogue});
        }
      }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Cases, CudaMatmulMapping, ::testing::ValuesIn(allCases()), caseName);

TEST(CudaMatmulMappingShape, SwapsOperandsAndDimensions) {
  MatmulDesc desc;
  desc.m = 1024;
  desc.n = 3072;
  desc.k = 768;
  const ColumnMajorGemm gemm = toColumnMajor(desc);
  EXPECT_EQ(gemm.m, 3072);
  EXPECT_EQ(gemm.n, 1024);
  EXPECT_EQ(gemm.k, 768);
  EXPECT_FALSE(gemm.transA);
  EXPECT_FALSE(gemm.transB);
  // cuBLASLt's A: our B [768, 3072] row-major = [3072, 768] column-major.
  EXPECT_EQ(gemm.a.rows, 3072u);
  EXPECT_EQ(gemm.a.cols, 768u);
  EXPECT_EQ(gemm.a.ld, 3072);
  // cuBLASLt's B: our A [1024, 768] row-major = [768, 1024] column-major.
  EXPECT_EQ(gemm.b.rows, 768u);
  EXPECT_EQ(gemm.b.cols, 1024u);
  EXPECT_EQ(gemm.b.ld, 768);
  EXPECT_EQ(gemm.d.rows, 3072u);
  EXPECT_EQ(gemm.d.cols, 1024u);
  EXPECT_EQ(gemm.d.ld, 3072);
  EXPECT_EQ(gemm.epilogue, CUBLASLT_EPILOGUE_DEFAULT);

  // The weight gradient dW[in, out] = x^T dy with the bias gradient of dy.
  desc.transposeA = true;
  desc.epilogue = MatmulEpilogue::BiasGradientB;
  const ColumnMajorGemm gradient = toColumnMajor(desc);
  EXPECT_FALSE(gradient.transA);
  EXPECT_TRUE(gradient.transB);
  EXPECT_EQ(gradient.epilogue, CUBLASLT_EPILOGUE_BGRADA);
  EXPECT_EQ(gradient.biasLength, 3072);
}

TEST(CudaMatmulMappingShape, EpiloguesMapToCublasLtEpilogues) {
  MatmulDesc desc;
  desc.m = 8;
  desc.n = 24;
  desc.k = 4;
  const std::pair<MatmulEpilogue, cublasLtEpilogue_t> expected[] = {
      {MatmulEpilogue::None, CUBLASLT_EPILOGUE_DEFAULT},
      {MatmulEpilogue::Bias, CUBLASLT_EPILOGUE_BIAS},
      {MatmulEpilogue::GeluBias, CUBLASLT_EPILOGUE_GELU_BIAS},
      {MatmulEpilogue::GeluAuxBias, CUBLASLT_EPILOGUE_GELU_AUX_BIAS},
      {MatmulEpilogue::BiasGradientB, CUBLASLT_EPILOGUE_BGRADA},
      {MatmulEpilogue::BiasGradientA, CUBLASLT_EPILOGUE_BGRADB},
      {MatmulEpilogue::GeluGrad, CUBLASLT_EPILOGUE_DGELU}};
  for (const auto &[ours, theirs] : expected) {
    desc.epilogue = ours;
    EXPECT_EQ(toColumnMajor(desc).epilogue, theirs) << epilogueName(ours);
  }
}

TEST(CudaMatmulDesc, RefusesWhatCublasLtCannotRun) {
  MatmulDesc desc;
  desc.m = 8;
  desc.n = 12;
  desc.k = 16;
  EXPECT_EQ(matmulDescProblem(desc), "");

  MatmulDesc bad = desc;
  bad.k = 0;
  EXPECT_EQ(matmulDescProblem(bad), "m, n and k must be positive");
  bad = desc;
  bad.inputType = DType::F32;
  bad.outputType = DType::BF16;
  EXPECT_EQ(matmulDescProblem(bad),
            "cuBLASLt has no f32 x f32 -> bf16 matmul with fp32 accumulation "
            "(outputs are f32 or the input type)");
  bad = desc;
  bad.inputType = DType::BF16;
  bad.outputType = DType::F16;
  EXPECT_EQ(matmulDescProblem(bad),
            "cuBLASLt has no bf16 x bf16 -> f16 matmul with fp32 accumulation "
            "(outputs are f32 or the input type)");
  bad = desc;
  bad.inputType = DType::I32;
  EXPECT_EQ(matmulDescProblem(bad), "cuBLASLt matmuls take f32, bf16 or f16 operands");
  bad = desc;
  bad.transposeA = true;
  bad.lda = 7; // A is stored [16, 8]
  EXPECT_EQ(matmulDescProblem(bad), "lda 7 is less than A's 8 columns");
  bad = desc;
  bad.epilogue = MatmulEpilogue::GeluAuxBias; // aux row stride 12
  EXPECT_EQ(matmulDescProblem(bad),
            "the GELU aux matrix's row stride 12 must be a multiple of 8 and "
            "at least n = 12 (pad it with auxLd)");
  bad.auxLd = 16;
  EXPECT_EQ(matmulDescProblem(bad), "");
  bad = desc;
  bad.epilogue = MatmulEpilogue::GeluGrad; // DGELU reads an aux matrix laid out the same way
  EXPECT_EQ(matmulDescProblem(bad),
            "the GELU aux matrix's row stride 12 must be a multiple of 8 and "
            "at least n = 12 (pad it with auxLd)");
  bad = desc;
  bad.batchCount = 2;
  bad.epilogue = MatmulEpilogue::BiasGradientB;
  EXPECT_EQ(matmulDescProblem(bad), "the bias-gradient epilogues take a single (unbatched) matmul");
  bad = desc;
  bad.batchCount = 2;
  bad.batchStrideD = 0;
  EXPECT_EQ(matmulDescProblem(bad), "D's batch stride 0 makes the outputs of different batches "
                                    "overlap (each needs 96 elements)");

  // Every supported type pair.
  for (DType in : {DType::BF16, DType::F16, DType::F32})
    for (DType out : {DType::BF16, DType::F16, DType::F32}) {
      MatmulDesc pair = desc;
      pair.inputType = in;
      pair.outputType = out;
      const bool supported = out == DType::F32 || out == in;
      EXPECT_EQ(matmulDescProblem(pair).empty(), supported)
          << ampc::plan::dtypeName(in) << " -> " << ampc::plan::dtypeName(out);
    }
}

TEST(CudaMatmulDesc, DescribesTheShapeInErrors) {
  MatmulDesc desc;
  desc.m = 1024;
  desc.n = 3072;
  desc.k = 768;
  desc.transposeB = true;
  desc.epilogue = MatmulEpilogue::GeluBias;
  EXPECT_EQ(describeMatmul(desc), "matmul m=1024 n=3072 k=768 bf16 x bf16 -> "
                                  "bf16, B transposed, epilogue gelu_bias");
  desc.batchCount = 12;
  desc.transposeA = true;
  desc.outputType = DType::F32;
  desc.epilogue = MatmulEpilogue::None;
  EXPECT_EQ(describeMatmul(desc), "matmul m=1024 n=3072 k=768 batch=12 bf16 "
                                  "x bf16 -> f32, A and B transposed");
}

TEST(CudaMatmulDesc, PointerAlignmentIsTheLargestPowerOfTwoUpTo256) {
  EXPECT_EQ(pointerAlignment(0x7f0000000000ull), 256u);
  EXPECT_EQ(pointerAlignment(0x7f0000000080ull), 128u);
  EXPECT_EQ(pointerAlignment(0x7f0000000002ull), 2u);
  EXPECT_EQ(pointerAlignment(0x7f0000000001ull), 1u);
}

TEST(CudaMatmulDesc, FastestCandidateIsTheEarliestSmallestTimeThatRan) {
  EXPECT_EQ(fastestCandidate({0.30, 0.20, 0.25}), 1u);
  // Equal times keep the heuristic's order.
  EXPECT_EQ(fastestCandidate({0.20, 0.20, 0.25}), 0u);
  EXPECT_EQ(fastestCandidate({0.30, 0.25, 0.25}), 1u);
  // A negative time is a candidate that failed to run.
  EXPECT_EQ(fastestCandidate({-1.0, 0.40, 0.35}), 2u);
  EXPECT_EQ(fastestCandidate({0.50, -1.0, 0.60}), 0u);
  EXPECT_EQ(fastestCandidate({-1.0, -1.0}), 0u);
  EXPECT_EQ(fastestCandidate({}), 0u);
  EXPECT_STREQ(matmulSelectionName(MatmulSelection::Timed), "timed");
  EXPECT_STREQ(matmulSelectionName(MatmulSelection::Heuristic), "heuristic");
}

TEST(CudaMatmulDesc, DataTypes) {
  EXPECT_EQ(cudaDataTypeOf(DType::BF16), CUDA_R_16BF);
  EXPECT_EQ(cudaDataTypeOf(DType::F16), CUDA_R_16F);
  EXPECT_EQ(cudaDataTypeOf(DType::F32), CUDA_R_32F);
}

} // namespace
