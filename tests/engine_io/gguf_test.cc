#include "local_engine/gguf.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>

#include "tests/engine_io/gguf_builder.h"

namespace kvgate::engine {
namespace {

using testing::ByteWriter;
using testing::GgufBuilder;

constexpr uint32_t kF32 = 0, kQ4_1 = 3, kQ8_0 = 8;

std::string ModelPath() {
  return std::string(KVGATE_SOURCE_DIR) + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
}

// A small but complete file: metadata of every type, nested arrays and three tensors.
GgufBuilder ValidBuilder() {
  GgufBuilder b;
  b.KvStr("general.architecture", "llama");
  b.Kv("u8", 0, ByteWriter().U8(200));
  b.Kv("i8", 1, ByteWriter().U8(0xFF));
  b.Kv("u16", 2, ByteWriter().U8(0x34).U8(0x12));
  b.Kv("i16", 3, ByteWriter().U8(0xFE).U8(0xFF));
  b.KvU32("u32", 4000000000u);
  b.Kv("i32", 5, ByteWriter().I32(-7));
  b.KvF32("f32", 0.5f);
  b.Kv("bool", 7, ByteWriter().U8(1));
  b.Kv("u64", 10, ByteWriter().U64(1ull << 40));
  b.Kv("i64", 11, ByteWriter().U64(static_cast<uint64_t>(-5)));
  double d = 2.25;
  b.Kv("f64", 12, ByteWriter().Raw(&d, 8));
  b.KvStrArray("tokens", {"a", "bc", ""});
  // [[1, 2], []] as an array of arrays of u32.
  b.Kv("nested", 9, ByteWriter().U32(9).U64(2).U32(4).U64(2).U32(1).U32(2).U32(4).U64(0));
  b.Tensor("norm.weight", {64}, kF32, 256);
  b.Tensor("w.q8", {64, 2}, kQ8_0, 4 * 34);
  b.Tensor("w.q41", {32, 3}, kQ4_1, 3 * 20);
  return b;
}

Result<std::unique_ptr<GgufFile>> Parse(const std::vector<uint8_t>& bytes) {
  return GgufFile::FromBytes(bytes, "test.gguf");
}

// Expects kCorruptData with the file name and `problem` in the message.
void ExpectCorrupt(const std::vector<uint8_t>& bytes, std::string_view problem) {
  auto r = Parse(bytes);
  ASSERT_FALSE(r.has_value()) << "accepted a file that should fail with: " << problem;
  EXPECT_EQ(r.error().code, ErrorCode::kCorruptData);
  EXPECT_TRUE(r.error().message.starts_with("test.gguf: ")) << r.error().message;
  EXPECT_NE(r.error().message.find(problem), std::string::npos)
      << "message '" << r.error().message << "' lacks '" << problem << "'";
}

TEST(GgufTest, ParsesEveryValueTypeAndTensor) {
  const auto bytes = ValidBuilder().Build();
  auto r = Parse(bytes);
  ASSERT_TRUE(r.has_value()) << r.error().message;
  const GgufFile& f = **r;
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.alignment(), 32u);
  EXPECT_EQ(f.GetString("general.architecture"), "llama");
  EXPECT_EQ(f.GetInt("u8"), 200);
  EXPECT_EQ(f.GetInt("i8"), -1);
  EXPECT_EQ(f.GetInt("u16"), 0x1234);
  EXPECT_EQ(f.GetInt("i16"), -2);
  EXPECT_EQ(f.GetInt("u32"), 4000000000ll);
  EXPECT_EQ(f.GetInt("i32"), -7);
  EXPECT_EQ(f.GetFloat("f32"), 0.5);
  EXPECT_EQ(f.GetBool("bool"), true);
  EXPECT_EQ(f.GetInt("u64"), 1ll << 40);
  EXPECT_EQ(f.GetInt("i64"), -5);
  EXPECT_EQ(f.GetFloat("f64"), 2.25);
  EXPECT_EQ(f.GetFloat("u32"), 4e9);  // integers widen to float on request
  EXPECT_EQ(f.GetInt("f32"), std::nullopt);
  EXPECT_EQ(f.GetString("u32"), std::nullopt);
  EXPECT_EQ(f.Find("missing"), nullptr);
  EXPECT_EQ(f.Find("i32")->type, 5u);

  const GgufArray* tokens = f.GetArray("tokens");
  ASSERT_NE(tokens, nullptr);
  ASSERT_EQ(tokens->size(), 3u);
  EXPECT_EQ(std::get<std::string>((*tokens)[1].v), "bc");
  EXPECT_EQ(std::get<std::string>((*tokens)[2].v), "");
  const GgufArray* nested = f.GetArray("nested");
  ASSERT_NE(nested, nullptr);
  ASSERT_EQ(nested->size(), 2u);
  const auto& inner = std::get<GgufArray>((*nested)[0].v);
  ASSERT_EQ(inner.size(), 2u);
  EXPECT_EQ(std::get<uint64_t>(inner[1].v), 2u);
  EXPECT_TRUE(std::get<GgufArray>((*nested)[1].v).empty());
  EXPECT_EQ(f.GetArray("u8"), nullptr);
  EXPECT_EQ(f.metadata().size(), 14u);

  ASSERT_EQ(f.tensors().size(), 3u);
  const GgufTensor* q8 = f.FindTensor("w.q8");
  ASSERT_NE(q8, nullptr);
  EXPECT_EQ(q8->type, GgmlType::kQ8_0);
  EXPECT_EQ(q8->dims, (std::vector<uint64_t>{64, 2}));
  EXPECT_EQ(q8->n_elements, 128u);
  EXPECT_EQ(q8->n_bytes, 136u);
  EXPECT_EQ(q8->offset, 256u);
  EXPECT_EQ(q8->data, bytes.data() + f.data_offset() + 256);
  EXPECT_EQ(f.data_offset() % 32, 0u);
  // The builder fills data byte i with i*7+3.
  EXPECT_EQ(q8->data[0], static_cast<uint8_t>(256 * 7 + 3));
  EXPECT_EQ(f.FindTensor("w.q41")->n_bytes, 60u);
  EXPECT_EQ(f.FindTensor("absent"), nullptr);
}

TEST(GgufTest, TypeTable) {
  EXPECT_EQ(GgmlBlockElements(14), 256u);
  EXPECT_EQ(GgmlBlockBytes(14), 210u);
  EXPECT_EQ(GgmlBlockBytes(2), 18u);
  EXPECT_EQ(GgmlBlockBytes(30), 2u);
  EXPECT_EQ(GgmlBlockBytes(1), 2u);
  EXPECT_EQ(GgmlBlockElements(12), std::nullopt);  // Q4_K: not supported
  EXPECT_EQ(GgmlTypeName(GgmlType::kQ4_1), "Q4_1");
  EXPECT_EQ(GgmlTypeName(GgmlType::kBF16), "BF16");
}

TEST(GgufTest, HonoursCustomAlignment) {
  GgufBuilder b;
  b.alignment = 64;
  b.KvU32("general.alignment", 64);
  b.Tensor("a", {8}, kF32, 32);
  b.Tensor("b", {8}, kF32, 32);
  auto r = Parse(b.Build());
  ASSERT_TRUE(r.has_value()) << r.error().message;
  EXPECT_EQ((*r)->alignment(), 64u);
  EXPECT_EQ((*r)->data_offset() % 64, 0u);
  EXPECT_EQ((*r)->FindTensor("b")->offset, 64u);
}

TEST(GgufTest, EmptyFileWithNoTensorsIsValid) {
  GgufBuilder b;
  auto r = Parse(b.Build());
  ASSERT_TRUE(r.has_value()) << r.error().message;
  EXPECT_TRUE((*r)->tensors().empty());
}

TEST(GgufTest, RejectsBadMagic) {
  auto b = ValidBuilder();
  b.magic = 0x46554748;
  ExpectCorrupt(b.Build(), "bad magic");
  ExpectCorrupt({'G', 'G'}, "file ends inside magic");
  ExpectCorrupt({}, "file ends inside magic");
}

TEST(GgufTest, RejectsUnsupportedVersion) {
  auto b = ValidBuilder();
  b.version = 1;
  ExpectCorrupt(b.Build(), "unsupported GGUF version 1");
  b.version = 4;
  ExpectCorrupt(b.Build(), "unsupported GGUF version 4");
}

TEST(GgufTest, RejectsLyingCountsWithoutAllocating) {
  auto b = ValidBuilder();
  b.kv_count_override = int64_t{1} << 60;
  ExpectCorrupt(b.Build(), "cannot fit");
  b = ValidBuilder();
  b.tensor_count_override = int64_t{1} << 60;
  ExpectCorrupt(b.Build(), "cannot fit");
  b = ValidBuilder();
  b.kv_count_override = 100;  // plausible but more entries than present
  ExpectCorrupt(b.Build(), "cannot fit");
  GgufBuilder a;
  a.Kv("big", 9, ByteWriter().U32(0).U64(uint64_t{1} << 60));
  ExpectCorrupt(a.Build(), "array of 1152921504606846976 elements cannot fit");
  GgufBuilder s;
  s.Kv("strs", 9, ByteWriter().U32(8).U64(uint64_t{1} << 59));
  ExpectCorrupt(s.Build(), "cannot fit");
}

TEST(GgufTest, RejectsStringPastEnd) {
  GgufBuilder b;
  b.Kv("s", 8, ByteWriter().U64(1000).Raw("abc", 3));
  ExpectCorrupt(b.Build(), "metadata string has length 1000");
  GgufBuilder k;
  k.kvs.push_back(ByteWriter().U64(~uint64_t{0}).Raw("key", 3).bytes);
  ExpectCorrupt(k.Build(), "metadata key has length 18446744073709551615");
  GgufBuilder t;
  t.tensors.push_back({std::string(5, 'x'), {8}, kF32, 32, -1});
  auto bytes = t.Build();
  // Overwrite the tensor name length (right after the 24-byte header).
  const uint64_t huge = 1ull << 62;
  std::memcpy(bytes.data() + 24, &huge, 8);
  ExpectCorrupt(bytes, "tensor name has length");
}

TEST(GgufTest, RejectsDeepNesting) {
  ByteWriter w;
  for (int i = 0; i < 20; ++i) w.U32(9).U64(1);
  w.U32(4).U64(0);
  GgufBuilder b;
  b.Kv("deep", 9, w);
  ExpectCorrupt(b.Build(), "nested deeper");
}

TEST(GgufTest, RejectsUnknownValueTypes) {
  GgufBuilder b;
  b.Kv("x", 13, ByteWriter().U32(0));
  ExpectCorrupt(b.Build(), "unknown value type 13");
  GgufBuilder a;
  a.Kv("x", 9, ByteWriter().U32(99).U64(1).U32(0));
  ExpectCorrupt(a.Build(), "unknown array element type 99");
  GgufBuilder c;
  c.Kv("flag", 7, ByteWriter().U8(2));
  ExpectCorrupt(c.Build(), "bool byte is 2");
}

TEST(GgufTest, RejectsDuplicates) {
  auto b = ValidBuilder();
  b.KvU32("u32", 1);
  ExpectCorrupt(b.Build(), "duplicate metadata key 'u32'");
  b = ValidBuilder();
  b.Tensor("w.q8", {32}, kF32, 128);
  ExpectCorrupt(b.Build(), "duplicate tensor 'w.q8'");
}

TEST(GgufTest, RejectsBadDimensions) {
  GgufBuilder b;
  b.Tensor("t", {}, kF32, 4);
  ExpectCorrupt(b.Build(), "tensor 't' has 0 dimensions");
  b = GgufBuilder();
  b.Tensor("t", {1, 1, 1, 1, 1}, kF32, 4);
  ExpectCorrupt(b.Build(), "tensor 't' has 5 dimensions");
  b = GgufBuilder();
  b.Tensor("t", {4, 0}, kF32, 0);
  ExpectCorrupt(b.Build(), "zero dimension");
  b = GgufBuilder();
  b.Tensor("t", {1ull << 32, 1ull << 32, 1ull << 32}, kF32, 4);
  ExpectCorrupt(b.Build(), "element count overflows");
  b = GgufBuilder();
  b.Tensor("t", {1ull << 40, 1ull << 23}, kF32, 4);
  ExpectCorrupt(b.Build(), "element count overflows");
  b = GgufBuilder();
  b.Tensor("t", {48}, kQ4_1, 40);
  ExpectCorrupt(b.Build(), "not a multiple of the Q4_1 block of 32");
}

TEST(GgufTest, RejectsUnknownTensorType) {
  GgufBuilder b;
  b.Tensor("t", {32}, 12, 144);  // Q4_K exists in ggml but kvgate does not support it
  ExpectCorrupt(b.Build(), "tensor 't' has unsupported type 12");
  b = GgufBuilder();
  b.Tensor("t", {32}, 0xFFFFFFFFu, 144);
  ExpectCorrupt(b.Build(), "unsupported type 4294967295");
}

TEST(GgufTest, RejectsMisalignedOffset) {
  GgufBuilder b;
  b.Tensor("t", {8}, kF32, 32, 4);
  ExpectCorrupt(b.Build(), "offset 4 is not a multiple of the alignment 32");
  GgufBuilder a;
  a.KvU32("general.alignment", 48);
  ExpectCorrupt(a.Build(), "general.alignment must be a u32 power of two");
  GgufBuilder z;
  z.KvStr("general.alignment", "32");
  ExpectCorrupt(z.Build(), "general.alignment");
}

TEST(GgufTest, RejectsDataPastEnd) {
  auto b = ValidBuilder();
  b.truncate_data_by = 1;
  ExpectCorrupt(b.Build(), "runs past the end of the file");
  GgufBuilder h;
  h.Tensor("t", {8}, kF32, 32);
  auto far = h.Build();
  // The offset field follows the 24-byte header, name (8 + 1), n_dims (4), one dim (8), type (4).
  const uint64_t far_offset = uint64_t{1} << 62;
  std::memcpy(far.data() + 49, &far_offset, 8);
  ExpectCorrupt(far, "runs past the end of the file");
  // The header itself ends in the middle of the alignment padding before the data.
  GgufBuilder p;
  p.Tensor("t", {8}, kF32, 32);
  auto bytes = p.Build();
  bytes.resize(bytes.size() - 32 - 1);
  ExpectCorrupt(bytes, "past the end");
}

TEST(GgufTest, RejectsOverlappingTensors) {
  GgufBuilder b;
  b.Tensor("a", {16}, kF32, 64, 0);
  b.Tensor("b", {16}, kF32, 64, 32);
  ExpectCorrupt(b.Build(), "tensors 'a' and 'b' overlap");
}

// Flips, overwrites and truncates bytes of a valid file at every position: the parser must return
// (ok or kCorruptData) without crashing, and whatever it accepts must be self-consistent.
TEST(GgufTest, SurvivesMutationsAtEveryPosition) {
  const auto valid = ValidBuilder().Build();
  ASSERT_TRUE(Parse(valid).has_value());
  size_t accepted = 0, rejected = 0;
  auto check = [&](const std::vector<uint8_t>& bytes) {
    auto r = Parse(bytes);
    if (!r) {
      ASSERT_EQ(r.error().code, ErrorCode::kCorruptData) << r.error().message;
      ++rejected;
      return;
    }
    ++accepted;
    for (const GgufTensor& t : (*r)->tensors()) {
      ASSERT_GE(t.data, bytes.data());
      ASSERT_LE(t.data + t.n_bytes, bytes.data() + bytes.size());
    }
  };
  const uint8_t patterns[] = {0x00, 0xFF, 0x80, 0x7F, 0x01, 0x20};
  for (size_t pos = 0; pos < valid.size(); ++pos) {
    for (int bit = 0; bit < 8; ++bit) {
      auto m = valid;
      m[pos] ^= static_cast<uint8_t>(1u << bit);
      check(m);
    }
    for (uint8_t p : patterns) {
      auto m = valid;
      m[pos] = p;
      check(m);
    }
    check(std::vector<uint8_t>(valid.begin(), valid.begin() + static_cast<ptrdiff_t>(pos)));
  }
  // Random multi-byte damage, fixed seed so failures reproduce.
  std::mt19937 rng(1234);
  for (int i = 0; i < 20000; ++i) {
    auto m = valid;
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits; ++e) m[rng() % m.size()] = static_cast<uint8_t>(rng());
    check(m);
  }
  EXPECT_GT(rejected, 1000u);
  EXPECT_GT(accepted, 100u);  // flips inside tensor data or string payloads stay valid
}

TEST(GgufTest, OpenReportsMissingFile) {
  auto r = GgufFile::Open("/nonexistent/dir/model.gguf");
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, ErrorCode::kNotFound);
  EXPECT_NE(r.error().message.find("/nonexistent/dir/model.gguf"), std::string::npos);
}

TEST(GgufTest, OpenMapsFileAndRejectsCorruptOnDisk) {
  const auto dir = std::filesystem::temp_directory_path();
  const std::string good = (dir / ("kvgate_gguf_good_" + std::to_string(::getpid()))).string();
  const std::string bad = (dir / ("kvgate_gguf_bad_" + std::to_string(::getpid()))).string();
  auto bytes = ValidBuilder().Build();
  std::ofstream(good, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()),
             static_cast<std::streamsize>(bytes.size()));
  bytes[0] = 'X';
  std::ofstream(bad, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()),
             static_cast<std::streamsize>(bytes.size()));
  auto ok = GgufFile::Open(good);
  ASSERT_TRUE(ok.has_value()) << ok.error().message;
  EXPECT_EQ((*ok)->path(), good);
  EXPECT_EQ((*ok)->FindTensor("w.q41")->data[0], static_cast<uint8_t>((256 + 160) * 7 + 3));
  auto ko = GgufFile::Open(bad);
  ASSERT_FALSE(ko.has_value());
  EXPECT_EQ(ko.error().code, ErrorCode::kCorruptData);
  EXPECT_TRUE(ko.error().message.starts_with(bad + ": bad magic")) << ko.error().message;
  std::filesystem::remove(good);
  std::filesystem::remove(bad);
}

TEST(GgufTest, RealModelMatchesEngineDoc) {
  if (!std::filesystem::exists(ModelPath())) GTEST_SKIP() << "model not fetched: " << ModelPath();
  auto r = GgufFile::Open(ModelPath());
  ASSERT_TRUE(r.has_value()) << r.error().message;
  const GgufFile& f = **r;
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.GetString("general.architecture"), "llama");
  EXPECT_EQ(f.GetInt("llama.block_count"), 30);
  EXPECT_EQ(f.GetInt("llama.embedding_length"), 576);
  EXPECT_EQ(f.GetInt("llama.feed_forward_length"), 1536);
  EXPECT_EQ(f.GetInt("llama.attention.head_count"), 9);
  EXPECT_EQ(f.GetInt("llama.attention.head_count_kv"), 3);
  EXPECT_EQ(f.GetInt("llama.rope.dimension_count"), 64);
  EXPECT_NEAR(*f.GetFloat("llama.rope.freq_base"), 100000.0, 1e-6);
  EXPECT_NEAR(*f.GetFloat("llama.attention.layer_norm_rms_epsilon"), 1e-5, 1e-9);
  EXPECT_EQ(f.GetString("tokenizer.ggml.model"), "gpt2");
  EXPECT_EQ(f.GetString("tokenizer.ggml.pre"), "smollm");
  ASSERT_NE(f.GetArray("tokenizer.ggml.tokens"), nullptr);
  EXPECT_EQ(f.GetArray("tokenizer.ggml.tokens")->size(), 49152u);
  EXPECT_EQ(f.tensors().size(), 2u + 30u * 9u);
  EXPECT_EQ(f.FindTensor("output.weight"), nullptr);  // tied embeddings
  const GgufTensor* emb = f.FindTensor("token_embd.weight");
  ASSERT_NE(emb, nullptr);
  EXPECT_EQ(emb->type, GgmlType::kQ8_0);
  EXPECT_EQ(emb->dims, (std::vector<uint64_t>{576, 49152}));
  for (const GgufTensor& t : f.tensors()) {
    if (t.name.ends_with("norm.weight")) {
      EXPECT_EQ(t.type, GgmlType::kF32) << t.name;
      EXPECT_EQ(t.dims.size(), 1u) << t.name;
    } else if (t.name != "token_embd.weight") {
      EXPECT_EQ(t.type, GgmlType::kQ4_1) << t.name;
      EXPECT_EQ(t.dims.size(), 2u) << t.name;
    }
  }
  EXPECT_EQ(f.FindTensor("blk.29.ffn_down.weight")->dims, (std::vector<uint64_t>{1536, 576}));
  EXPECT_EQ(f.FindTensor("blk.0.attn_k.weight")->dims, (std::vector<uint64_t>{576, 192}));
}

}  // namespace
}  // namespace kvgate::engine
