// Newton-Schulz against a double-precision reference: the quintic iteration written as plain
// loops over doubles, sharing nothing with the code under test. "standard" and "gram" are the same
// polynomial in G G^T, so one reference holds both, in whatever dtype they compute on this machine
// (fp16 or fp32 for gram, bf16 for standard), to that dtype's accuracy; one iteration fewer (the
// planted mutation the Muon conformance cases also catch) is far outside it.
#include "optim/newton_schulz.h"

#include <ATen/ops/randn.h>
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace zerotrain::optim {
namespace {

using Matrix = std::vector<std::vector<double>>;

Matrix Multiply(const Matrix& a, const Matrix& b) {
  Matrix c(a.size(), std::vector<double>(b[0].size(), 0.0));
  for (size_t i = 0; i < a.size(); ++i)
    for (size_t k = 0; k < b.size(); ++k)
      for (size_t j = 0; j < b[0].size(); ++j) c[i][j] += a[i][k] * b[k][j];
  return c;
}

Matrix Transposed(const Matrix& a) {
  Matrix t(a[0].size(), std::vector<double>(a.size()));
  for (size_t i = 0; i < a.size(); ++i)
    for (size_t j = 0; j < a[0].size(); ++j) t[j][i] = a[i][j];
  return t;
}

// X / (|X|_F + 1e-7), then X <- a X + (b A + c A A) X with A = X X^T, on the wide orientation.
Matrix Reference(Matrix x, int steps) {
  const bool tall = x.size() > x[0].size();
  if (tall) x = Transposed(x);
  double norm = 0;
  for (const auto& row : x)
    for (double v : row) norm += v * v;
  norm = std::sqrt(norm) + 1e-7;
  for (auto& row : x)
    for (double& v : row) v /= norm;
  const double a = 3.4445, b = -4.7750, c = 2.0315;
  for (int s = 0; s < steps; ++s) {
    const Matrix m = Multiply(x, Transposed(x));
    Matrix poly = Multiply(m, m);
    for (size_t i = 0; i < m.size(); ++i)
      for (size_t j = 0; j < m.size(); ++j) poly[i][j] = b * m[i][j] + c * poly[i][j];
    const Matrix px = Multiply(poly, x);
    for (size_t i = 0; i < x.size(); ++i)
      for (size_t j = 0; j < x[0].size(); ++j) x[i][j] = a * x[i][j] + px[i][j];
  }
  return tall ? Transposed(x) : x;
}

// |got - want|_F / |want|_F.
double RelativeError(const at::Tensor& got, const Matrix& want) {
  const at::Tensor g = got.to(at::kDouble).contiguous();
  const double* p = g.data_ptr<double>();
  double diff = 0, norm = 0;
  for (size_t i = 0; i < want.size(); ++i)
    for (size_t j = 0; j < want[0].size(); ++j) {
      const double d = p[i * want[0].size() + j] - want[i][j];
      diff += d * d;
      norm += want[i][j] * want[i][j];
    }
  return std::sqrt(diff / norm);
}

Matrix ToMatrix(const at::Tensor& t) {
  const at::Tensor d = t.to(at::kDouble).contiguous();
  Matrix m(t.size(0), std::vector<double>(t.size(1)));
  for (int64_t i = 0; i < t.size(0); ++i)
    for (int64_t j = 0; j < t.size(1); ++j) m[i][j] = d.data_ptr<double>()[i * t.size(1) + j];
  return m;
}

// Half-precision products round each step; bf16 keeps 8 bits, fp16 11.
double Tolerance(at::ScalarType t) {
  return t == at::kBFloat16 ? 4e-2 : t == at::kHalf ? 8e-3 : 1e-5;
}

TEST(NewtonSchulzTest, BothMethodsFollowTheDoublePrecisionIteration) {
  at::manual_seed(5);
  for (NsMethod method : {NsMethod::kGram, NsMethod::kStandard}) {
    const at::ScalarType dtype = NsComputeDtype(method, at::kCPU);
    for (auto [rows, cols] : std::vector<std::pair<int64_t, int64_t>>{
             {16, 16}, {12, 40}, {40, 12}, {64, 256}, {5, 7}}) {
      SCOPED_TRACE(testing::Message() << NsMethodName(method) << " " << rows << "x" << cols);
      const at::Tensor g = at::randn({rows, cols});
      const at::Tensor got = Orthogonalize(g, method);
      EXPECT_EQ(got.scalar_type(), dtype);
      ASSERT_EQ(got.sizes(), g.sizes());
      const Matrix want = Reference(ToMatrix(g), 5);
      EXPECT_LT(RelativeError(got, want), Tolerance(dtype));
      // The mutation: one iteration fewer lands about 0.3 away, five times bf16's tolerance.
      EXPECT_GT(RelativeError(Orthogonalize(g, method, 4), want), 5 * Tolerance(at::kBFloat16));
    }
  }
}

TEST(NewtonSchulzTest, MuonUpdateScalesTallMatricesAndKeepsTheDtype) {
  at::manual_seed(6);
  const at::Tensor tall = at::randn({48, 12});
  const at::Tensor o = MuonUpdate(tall, NsMethod::kGram);
  EXPECT_EQ(o.scalar_type(), at::kFloat);
  const at::Tensor plain = Orthogonalize(tall, NsMethod::kGram).to(at::kFloat);
  EXPECT_LT(RelativeError(o, ToMatrix(plain.mul(2.0))), 1e-3);  // sqrt(48 / 12)
  const at::Tensor wide = at::randn({12, 48});
  EXPECT_LT(RelativeError(MuonUpdate(wide, NsMethod::kGram),
                          ToMatrix(Orthogonalize(wide, NsMethod::kGram).to(at::kFloat))),
            1e-6);
}

TEST(NewtonSchulzTest, MethodNames) {
  EXPECT_EQ(*ParseNsMethod("gram"), NsMethod::kGram);
  EXPECT_EQ(*ParseNsMethod("standard"), NsMethod::kStandard);
  EXPECT_EQ(ParseNsMethod("polar").status().message(),
            "ns_method \"polar\": expected \"gram\" or \"standard\"");
}

}  // namespace
}  // namespace zerotrain::optim
