#include "dataplane/relay/codec/encoder.h"

#include <bit>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace heddle::relay {
namespace {

std::vector<float> Decode(const SignEncoder& enc) {
  std::vector<float> out(enc.elements());
  for (size_t j = 0; j < out.size(); ++j) {
    const bool neg = (enc.signs()[j / 64] >> (j % 64)) & 1;
    const float m = enc.magnitudes()[j / enc.chunk_size()];
    out[j] = neg ? -m : m;
  }
  return out;
}

TEST(SignEncoderTest, CreateValidates) {
  EXPECT_FALSE(SignEncoder::Create(100, {.chunk_size = 100}).ok());
  EXPECT_FALSE(SignEncoder::Create(100, {.chunk_size = 0}).ok());
  EXPECT_FALSE(SignEncoder::Create(100, {.chunk_size = 32}).ok());
  EXPECT_FALSE(SignEncoder::Create(kMaxFrameElements + 1).ok());
  absl::StatusOr<SignEncoder> e = SignEncoder::Create(100, {.chunk_size = 64});
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->signs().size(), 2u);
  EXPECT_EQ(e->magnitudes().size(), 2u);
  EXPECT_EQ(e->error().size(), 100u);
}

TEST(SignEncoderTest, ErrorFeedbackKeepsWhatWasNotSent) {
  std::mt19937_64 rng(1);
  std::normal_distribution<float> g(0.0f, 1.0f);
  const size_t n = 1000;
  absl::StatusOr<SignEncoder> enc = SignEncoder::Create(n, {.chunk_size = 128});
  ASSERT_TRUE(enc.ok());
  std::vector<float> prev_e(n, 0.0f);
  for (int round = 0; round < 5; ++round) {
    std::vector<float> x(n);
    for (float& v : x) v = g(rng);
    ASSERT_EQ(enc->Encode(DType::kFloat32, x.data()), 0u);
    const std::vector<float> sent = Decode(*enc);
    for (size_t c = 0; c < enc->magnitudes().size(); ++c) {
      double s = 0;
      const size_t end = std::min(n, (c + 1) * 128);
      for (size_t j = c * 128; j < end; ++j) s += std::fabs(x[j] + prev_e[j]);
      EXPECT_NEAR(enc->magnitudes()[c], s / (end - c * 128), 1e-5);
    }
    for (size_t j = 0; j < n; ++j) {
      const float v = x[j] + prev_e[j];
      ASSERT_EQ(sent[j] < 0, v < 0) << j;
      ASSERT_EQ(enc->error()[j], v - sent[j]) << j;  // e = v - m·sign(v), exactly
    }
    prev_e.assign(enc->error().begin(), enc->error().end());
  }
}

// EF-SGD's point: the sum of what was sent tracks the sum of the inputs, off by the residual
// only, which stays bounded; plain scaled signs drift without bound on a skewed tensor (here
// x[0] = 1 is sent as m = mean|x| ≈ 0.033 every round).
TEST(SignEncoderTest, ErrorFeedbackTracksTheRunningSum) {
  const size_t n = 64;
  std::vector<float> x(n, 0.01f);
  x[0] = 1.0f;
  x[1] = -0.5f;
  for (bool ef : {true, false}) {
    absl::StatusOr<SignEncoder> enc =
        SignEncoder::Create(n, {.chunk_size = 64, .error_feedback = ef});
    ASSERT_TRUE(enc.ok());
    std::vector<double> sent_sum(n, 0.0), x_sum(n, 0.0);
    double drift_at_500 = 0, drift_at_5000 = 0;
    for (int round = 1; round <= 5000; ++round) {
      ASSERT_EQ(enc->Encode(DType::kFloat32, x.data()), 0u);
      const std::vector<float> sent = Decode(*enc);
      double worst = 0;
      for (size_t j = 0; j < n; ++j) {
        sent_sum[j] += sent[j];
        x_sum[j] += x[j];
        worst = std::max(worst, std::fabs(sent_sum[j] - x_sum[j]));
      }
      if (round == 500) drift_at_500 = worst;
      if (round == 5000) drift_at_5000 = worst;
    }
    if (ef) {
      // What was not sent is exactly what e holds (up to fp32 rounding of e itself).
      for (size_t j = 0; j < n; ++j) {
        EXPECT_NEAR(sent_sum[j] + enc->error()[j], x_sum[j], 0.05) << j;
      }
      // Bounded: ten times the rounds, not ten times the drift; below d·max|x|.
      EXPECT_LT(drift_at_5000, 1.5 * drift_at_500 + 1.0);
      EXPECT_LT(drift_at_5000, 64.0);
    } else {
      EXPECT_GT(drift_at_500, 400.0);
      EXPECT_GT(drift_at_5000, 9 * drift_at_500);
      EXPECT_EQ(enc->error()[0], 0.0f);
    }
    std::printf("error feedback %s: drift %.3f after 500 rounds, %.3f after 5000\n",
                ef ? "on" : "off", drift_at_500, drift_at_5000);
  }
}

TEST(SignEncoderTest, HalfPrecisionInputsEncodeAsTheirFloatValues) {
  std::mt19937_64 rng(2);
  const size_t n = 777;
  std::vector<uint16_t> bf(n), hf(n);
  std::vector<float> bf_f(n), hf_f(n);
  for (size_t j = 0; j < n; ++j) {
    bf[j] = static_cast<uint16_t>(
        std::bit_cast<uint32_t>(std::ldexp(float(rng() % 2000) - 1000, -10)) >> 16);
    hf[j] = static_cast<uint16_t>((rng() & 0x83FF) | ((1 + rng() % 29) << 10));
    bf_f[j] = BFloat16ToFloat(bf[j]);
    hf_f[j] = Float16ToFloat(hf[j]);
  }
  for (auto [d, half, as_float] :
       {std::tuple{DType::kBFloat16, &bf, &bf_f}, std::tuple{DType::kFloat16, &hf, &hf_f}}) {
    absl::StatusOr<SignEncoder> a = SignEncoder::Create(n, {.chunk_size = 256});
    absl::StatusOr<SignEncoder> b = SignEncoder::Create(n, {.chunk_size = 256});
    ASSERT_TRUE(a.ok() && b.ok());
    for (int round = 0; round < 3; ++round) {
      a->Encode(d, half->data());
      b->Encode(DType::kFloat32, as_float->data());
      ASSERT_TRUE(std::equal(a->signs().begin(), a->signs().end(), b->signs().begin()));
      ASSERT_EQ(0, std::memcmp(a->magnitudes().data(), b->magnitudes().data(),
                               4 * a->magnitudes().size()));
      ASSERT_EQ(0, std::memcmp(a->error().data(), b->error().data(), 4 * n));
    }
  }
}

TEST(SignEncoderTest, NonFiniteInputIsReportedAndNotSent) {
  const size_t n = 256;
  absl::StatusOr<SignEncoder> enc = SignEncoder::Create(n, {.chunk_size = 128});
  ASSERT_TRUE(enc.ok());
  std::vector<float> x(n, 0.5f);
  ASSERT_EQ(enc->Encode(DType::kFloat32, x.data()), 0u);
  const std::vector<float> e1(enc->error().begin(), enc->error().end());
  x[200] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(enc->Encode(DType::kFloat32, x.data()), 1u);
  EXPECT_EQ(enc->error()[200], e1[200]);  // the bad chunk keeps its residual
  std::vector<uint8_t> buf(enc->FrameBytes());
  absl::Status s = enc->WriteFrame({.token_count = 1}, buf);
  EXPECT_THAT(s.message(), testing::HasSubstr("chunk 1"));
  enc->ResetError();
  for (float e : enc->error()) ASSERT_EQ(e, 0.0f);
}

TEST(SignEncoderTest, WritesAFrameThatParsesBack) {
  std::mt19937_64 rng(3);
  const size_t n = 5000;
  std::vector<float> x(n);
  for (float& v : x) v = static_cast<float>(static_cast<int>(rng() % 200) - 100);
  absl::StatusOr<SignEncoder> enc = SignEncoder::Create(n);
  ASSERT_TRUE(enc.ok());
  ASSERT_EQ(enc->Encode(DType::kFloat32, x.data()), 0u);
  std::vector<uint8_t> buf(enc->FrameBytes());
  ASSERT_TRUE(enc->WriteFrame({.round_id = 9,
                               .sender_id = 4,
                               .tensor_id = 2,
                               .inner_steps = 50,
                               .token_count = 4096 * 50},
                              buf)
                  .ok());
  absl::StatusOr<FrameView> f = ParseFrame(buf);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->header().tensor_elements, n);
  EXPECT_EQ(f->header().element_count, n);
  EXPECT_EQ(f->header().chunk_size, kDefaultChunkSize);
  EXPECT_EQ(f->header().round_id, 9u);
  EXPECT_EQ(f->header().inner_steps, 50u);
  std::vector<float> dense(n);
  ASSERT_TRUE(DecodeFrame(*f, dense));
  EXPECT_EQ(dense, Decode(*enc));
  // 5000 fp32 values in 20000 bytes against a 2 chunk frame: 64 + 8 + 632 + 4.
  EXPECT_EQ(buf.size(), 708u);
}

}  // namespace
}  // namespace heddle::relay
