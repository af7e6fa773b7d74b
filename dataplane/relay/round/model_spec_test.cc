#include "dataplane/relay/round/model_spec.h"

#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace heddle::relay {
namespace {

using ::testing::HasSubstr;

TEST(ModelSpecTest, SlicesCoverEveryTensorInOrder) {
  ModelSpec spec{.tensors = {{.id = 0, .name = "a", .elements = 10000},
                             {.id = 3, .name = "b", .elements = 4096, .dtype = DType::kBFloat16},
                             {.id = 7, .name = "c", .elements = 1}},
                 .chunk_size = 1024,
                 .slice_elements = 4096};
  ASSERT_TRUE(ValidateModelSpec(spec).ok());
  std::vector<SliceRef> s = Slices(spec);
  ASSERT_EQ(s.size(), 5u);
  EXPECT_EQ(s[0].offset, 0u);
  EXPECT_EQ(s[1].offset, 4096u);
  EXPECT_EQ(s[2].offset, 8192u);
  EXPECT_EQ(s[2].count, 10000u - 8192u);
  EXPECT_EQ(s[3].tensor_id, 3u);
  EXPECT_EQ(s[3].dtype, DType::kBFloat16);
  EXPECT_EQ(s[3].count, 4096u);
  EXPECT_EQ(s[4].tensor_id, 7u);
  EXPECT_EQ(s[4].count, 1u);
  for (uint32_t i = 0; i < s.size(); ++i) EXPECT_EQ(s[i].index, i);
  EXPECT_EQ(TotalElements(spec), 14097u);
}

TEST(ModelSpecTest, RefusesBadSpecsNamingTheField) {
  ModelSpec good{.tensors = {{.id = 0, .name = "a", .elements = 64}}, .chunk_size = 64,
                 .slice_elements = 128};
  ASSERT_TRUE(ValidateModelSpec(good).ok());
  ModelSpec s = good;
  s.tensors.clear();
  EXPECT_THAT(ValidateModelSpec(s).message(), HasSubstr("no tensors"));
  s = good;
  s.chunk_size = 100;
  EXPECT_THAT(ValidateModelSpec(s).message(), HasSubstr("chunk_size 100"));
  s = good;
  s.slice_elements = 96;
  EXPECT_THAT(ValidateModelSpec(s).message(), HasSubstr("slice_elements 96"));
  s = good;
  s.tensors.push_back({.id = 0, .name = "b", .elements = 1});
  EXPECT_THAT(ValidateModelSpec(s).message(), HasSubstr("increasing"));
  s = good;
  s.tensors.push_back({.id = 1, .name = "a", .elements = 1});
  EXPECT_THAT(ValidateModelSpec(s).message(), HasSubstr("used twice"));
  s = good;
  s.tensors[0].elements = 0;
  EXPECT_THAT(ValidateModelSpec(s).message(), HasSubstr("elements 0"));
  s = good;
  s.tensors[0].name = "with space";
  EXPECT_THAT(ValidateModelSpec(s).message(), HasSubstr("printable"));
  s = good;
  s.tensors[0].elements = uint64_t{1} << 40;  // 2^33 slices of 128
  EXPECT_THAT(ValidateModelSpec(s).message(), HasSubstr("slices"));
}

TEST(ModelSpecTest, DigestChangesWithEveryField) {
  ModelSpec a{.tensors = {{.id = 0, .name = "a", .elements = 64}}, .chunk_size = 64,
              .slice_elements = 128};
  uint64_t d = SpecDigest(a);
  EXPECT_EQ(SpecDigest(a), d);
  ModelSpec b = a;
  b.chunk_size = 128;
  EXPECT_NE(SpecDigest(b), d);
  b = a;
  b.slice_elements = 192;
  EXPECT_NE(SpecDigest(b), d);
  b = a;
  b.tensors[0].name = "b";
  EXPECT_NE(SpecDigest(b), d);
  b = a;
  b.tensors[0].elements = 65;
  EXPECT_NE(SpecDigest(b), d);
  b = a;
  b.tensors[0].dtype = DType::kFloat16;
  EXPECT_NE(SpecDigest(b), d);
  b = a;
  b.tensors[0].id = 1;
  EXPECT_NE(SpecDigest(b), d);
}

TEST(ModelSpecTest, FramesAreCheckedAgainstTheirSlice) {
  ModelSpec spec{.tensors = {{.id = 2, .name = "w", .elements = 200}}, .chunk_size = 64,
                 .slice_elements = 128};
  std::vector<SliceRef> s = Slices(spec);
  ASSERT_EQ(s.size(), 2u);
  FrameHeader h = SliceHeader(spec, s[1], 5, 9);
  h.token_count = 10;
  std::vector<float> mags(FrameChunks(h.element_count, h.chunk_size), 1.0f);
  std::vector<uint64_t> signs(FrameWords(h.element_count), 0);
  auto bytes = BuildFrame(h, mags, signs);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  auto f = ParseFrame(*bytes);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_TRUE(CheckFrameForSlice(*f, spec, s[1], 5, 9).ok());
  EXPECT_EQ(CheckFrameForSlice(*f, spec, s[1], 6, 9).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(CheckFrameForSlice(*f, spec, s[1], 5, 8).message(), HasSubstr("sender id"));
  EXPECT_THAT(CheckFrameForSlice(*f, spec, s[0], 5, 9).message(), HasSubstr("element offset"));
}

TEST(ModelSpecTest, ParsesYaml) {
  auto spec = ModelSpecFromString(R"(
chunk_size: 1024
slice_elements: 4096
tensors:
  - {name: embed, elements: 5000, dtype: bf16}
  - {name: head, id: 9, elements: 7}
)");
  ASSERT_TRUE(spec.ok()) << spec.status();
  ASSERT_EQ(spec->tensors.size(), 2u);
  EXPECT_EQ(spec->tensors[0].dtype, DType::kBFloat16);
  EXPECT_EQ(spec->tensors[1].id, 9u);
  EXPECT_EQ(Slices(*spec).size(), 3u);

  auto syn = ModelSpecFromString("synthetic: {tensors: 3, elements: 1000, dtype: fp16}");
  ASSERT_TRUE(syn.ok()) << syn.status();
  EXPECT_EQ(syn->tensors.size(), 3u);
  EXPECT_EQ(TotalElements(*syn), 3000u);

  EXPECT_THAT(ModelSpecFromString("tensors: [{name: a, elements: -1}]").status().message(),
              HasSubstr("elements"));
  EXPECT_THAT(ModelSpecFromString("tensors: [{name: a, elements: 1, size: 2}]").status().message(),
              HasSubstr("unknown key \"size\""));
  EXPECT_THAT(ModelSpecFromString("tensors: [{name: a, elements: 1, dtype: int8}]")
                  .status()
                  .message(),
              HasSubstr("int8"));
  EXPECT_FALSE(ModelSpecFromString("{{{").ok());
  EXPECT_THAT(ModelSpecFromString("bogus: 1").status().message(), HasSubstr("unknown key"));
}

}  // namespace
}  // namespace heddle::relay
