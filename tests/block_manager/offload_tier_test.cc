// The offload tier's own rules on small fake blocks: round trip, its LRU when full, pinning, a
// corrupt or truncated file read as misses, restart reuse keyed by the layout, and the files it
// refuses. (The tier inside the engine, on the real model: tests/local_engine/offload_test.cc.)
#include "local_engine/offload_tier.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <numeric>

namespace kvgate::engine {
namespace {

namespace fs = std::filesystem;

constexpr size_t kBytes = 10000;  // block bytes: not a page multiple on purpose

class OffloadTierTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("kvgate_tier_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    path_ = (dir_ / "kv.tier").string();
  }
  void TearDown() override { fs::remove_all(dir_); }

  OffloadTierOptions Options(int64_t slots, uint64_t layout = 42) const {
    return {.path = path_,
            .capacity_bytes = slots * OffloadTier::SlotBytes(kBytes),
            .block_bytes = kBytes,
            .layout_key = layout};
  }
  std::unique_ptr<OffloadTier> Open(int64_t slots, uint64_t layout = 42) {
    auto t = OffloadTier::Open(Options(slots, layout));
    EXPECT_TRUE(t.has_value()) << (t ? "" : t.error().ToString());
    return t ? std::move(*t) : nullptr;
  }
  // Block i: tokens i*100.., hash i+1, bytes a pattern of i.
  struct Block {
    std::vector<int32_t> tokens;
    std::vector<std::byte> bytes;
    TierKey key() const { return {hash, 0, tokens}; }
    uint64_t hash = 0;
  };
  static Block MakeBlock(int i) {
    Block b;
    b.tokens.resize(kBlockSize);
    std::iota(b.tokens.begin(), b.tokens.end(), i * 100);
    b.hash = static_cast<uint64_t>(i) + 1;
    b.bytes.resize(kBytes);
    for (size_t k = 0; k < kBytes; ++k)
      b.bytes[k] = static_cast<std::byte>((k * 7 + i * 31) & 0xff);
    return b;
  }
  static bool LoadsAs(OffloadTier& t, const Block& b) {
    std::vector<std::byte> out(kBytes);
    return t.Load(b.key(), out) && out == b.bytes;
  }
  std::string ReadFile() const {
    std::ifstream in(path_, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), {}};
  }
  void WriteFile(const std::string& bytes) const {
    std::ofstream(path_, std::ios::binary | std::ios::trunc) << bytes;
  }

  fs::path dir_;
  std::string path_;
};

TEST_F(OffloadTierTest, StoresAndLoadsBlocks) {
  auto tier = Open(4);
  ASSERT_TRUE(tier);
  const Block a = MakeBlock(1), b = MakeBlock(2);
  EXPECT_FALSE(tier->Contains(a.key()));
  tier->Store(a.key(), a.bytes);
  tier->Store(b.key(), b.bytes);
  EXPECT_TRUE(tier->Contains(a.key()));
  EXPECT_TRUE(LoadsAs(*tier, a));
  EXPECT_TRUE(LoadsAs(*tier, b));
  auto stats = tier->stats();
  EXPECT_EQ(stats.capacity_blocks, 4);
  EXPECT_EQ(stats.used_blocks, 2);
  EXPECT_EQ(stats.stored_blocks, 2u);
  EXPECT_EQ(stats.loaded_blocks, 2u);
  // Storing a held block again writes nothing.
  tier->Store(a.key(), a.bytes);
  EXPECT_EQ(tier->stats().stored_blocks, 2u);
}

TEST_F(OffloadTierTest, AHashCollisionIsAMiss) {
  auto tier = Open(4);
  ASSERT_TRUE(tier);
  const Block a = MakeBlock(1);
  tier->Store(a.key(), a.bytes);
  Block other = MakeBlock(5);
  other.hash = a.hash;  // same hash, other tokens
  std::vector<std::byte> out(kBytes);
  EXPECT_FALSE(tier->Contains(other.key()));
  EXPECT_FALSE(tier->Load(other.key(), out));
  TierKey salted = a.key();
  salted.salt = 9;  // another tenant's salt
  EXPECT_FALSE(tier->Contains(salted));
}

TEST_F(OffloadTierTest, EvictsItsLeastRecentlyUsedBlockWhenFull) {
  auto tier = Open(3);
  ASSERT_TRUE(tier);
  const Block a = MakeBlock(1), b = MakeBlock(2), c = MakeBlock(3), d = MakeBlock(4);
  tier->Store(a.key(), a.bytes);
  tier->Store(b.key(), b.bytes);
  tier->Store(c.key(), c.bytes);
  EXPECT_TRUE(LoadsAs(*tier, a));  // a is now the most recently used; b the least
  tier->Store(d.key(), d.bytes);
  EXPECT_FALSE(tier->Contains(b.key()));
  EXPECT_TRUE(LoadsAs(*tier, a));
  EXPECT_TRUE(LoadsAs(*tier, c));
  EXPECT_TRUE(LoadsAs(*tier, d));
  EXPECT_EQ(tier->stats().evictions, 1u);
  EXPECT_EQ(tier->stats().used_blocks, 3);
}

TEST_F(OffloadTierTest, PinnedBlocksAreNotEvicted) {
  auto tier = Open(2);
  ASSERT_TRUE(tier);
  const Block a = MakeBlock(1), b = MakeBlock(2), c = MakeBlock(3), d = MakeBlock(4);
  tier->Store(a.key(), a.bytes);
  tier->Store(b.key(), b.bytes);
  ASSERT_TRUE(tier->Pin(a.key()));  // a is the LRU... until pinned (and touched)
  tier->Store(c.key(), c.bytes);    // evicts b
  EXPECT_TRUE(tier->Contains(a.key()));
  EXPECT_FALSE(tier->Contains(b.key()));
  ASSERT_TRUE(tier->Pin(c.key()));
  tier->Store(d.key(), d.bytes);  // everything pinned: dropped
  EXPECT_FALSE(tier->Contains(d.key()));
  EXPECT_EQ(tier->stats().dropped_blocks, 1u);
  tier->UnpinAll();
  tier->Store(d.key(), d.bytes);  // a is the LRU again
  EXPECT_FALSE(tier->Contains(a.key()));
  EXPECT_TRUE(LoadsAs(*tier, c));
  EXPECT_TRUE(LoadsAs(*tier, d));
}

TEST_F(OffloadTierTest, AFlippedByteIsAMissNeverData) {
  auto tier = Open(4);
  ASSERT_TRUE(tier);
  const Block a = MakeBlock(1), b = MakeBlock(2);
  tier->Store(a.key(), a.bytes);
  tier->Store(b.key(), b.bytes);
  std::string file = ReadFile();
  // Flip one byte in the middle of a's bytes (found by content: the test does not know slots).
  const std::string pattern(reinterpret_cast<const char*>(a.bytes.data()), 64);
  const size_t at = file.find(pattern);
  ASSERT_NE(at, std::string::npos);
  file[at + kBytes / 2] ^= 0x01;
  WriteFile(file);
  EXPECT_FALSE(LoadsAs(*tier, a));
  EXPECT_FALSE(tier->Contains(a.key()));  // dropped
  EXPECT_TRUE(LoadsAs(*tier, b));
  EXPECT_EQ(tier->stats().corrupt_blocks, 1u);
  EXPECT_EQ(tier->stats().used_blocks, 1);
}

TEST_F(OffloadTierTest, AFlippedKeyByteIsAMiss) {
  auto tier = Open(4);
  ASSERT_TRUE(tier);
  const Block a = MakeBlock(1);
  tier->Store(a.key(), a.bytes);
  std::string file = ReadFile();
  // The first slot's header starts right after the 4 KiB file header; byte 40 is a token id.
  file[4096 + 40] ^= 0x01;
  WriteFile(file);
  EXPECT_FALSE(LoadsAs(*tier, a));
  EXPECT_EQ(tier->stats().corrupt_blocks, 1u);
}

TEST_F(OffloadTierTest, ATruncatedFileIsAMiss) {
  auto tier = Open(4);
  ASSERT_TRUE(tier);
  const Block a = MakeBlock(1), b = MakeBlock(2);
  tier->Store(a.key(), a.bytes);  // slot 0
  tier->Store(b.key(), b.bytes);  // slot 1
  fs::resize_file(path_, 4096 + OffloadTier::SlotBytes(kBytes) + 100);
  EXPECT_TRUE(LoadsAs(*tier, a));
  EXPECT_FALSE(LoadsAs(*tier, b));
  EXPECT_EQ(tier->stats().corrupt_blocks, 1u);
}

TEST_F(OffloadTierTest, ARestartReusesTheFileOfTheSameLayoutOnly) {
  const Block a = MakeBlock(1), b = MakeBlock(2), c = MakeBlock(3);
  {
    auto tier = Open(4);
    ASSERT_TRUE(tier);
    tier->Store(a.key(), a.bytes);
    tier->Store(b.key(), b.bytes);
    tier->Store(c.key(), c.bytes);
  }
  {
    auto tier = Open(4);
    ASSERT_TRUE(tier);
    EXPECT_EQ(tier->stats().reused_blocks, 3);
    // LRU order after a restart is store order: a is evicted first.
    const Block d = MakeBlock(4), e = MakeBlock(5);
    tier->Store(d.key(), d.bytes);
    tier->Store(e.key(), e.bytes);
    EXPECT_FALSE(tier->Contains(a.key()));
    EXPECT_TRUE(LoadsAs(*tier, b));
    EXPECT_TRUE(LoadsAs(*tier, c));
    EXPECT_TRUE(LoadsAs(*tier, e));
  }
  {
    auto other = Open(4, /*layout=*/43);  // another model or KV layout: starts empty
    ASSERT_TRUE(other);
    EXPECT_EQ(other->stats().reused_blocks, 0);
    EXPECT_FALSE(other->Contains(b.key()));
  }
  {
    auto tier = Open(4);  // and the other layout's file is of no use to the first either
    ASSERT_TRUE(tier);
    EXPECT_EQ(tier->stats().reused_blocks, 0);
  }
  {
    auto resized = Open(5);  // another slot count: starts empty
    ASSERT_TRUE(resized);
    EXPECT_EQ(resized->stats().reused_blocks, 0);
  }
}

TEST_F(OffloadTierTest, RefusesAFileThatIsNotATierFile) {
  WriteFile("my notes, not a KV tier");
  auto t = OffloadTier::Open(Options(4));
  ASSERT_FALSE(t.has_value());
  EXPECT_EQ(t.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(t.error().message.find("not a kvgate KV tier file"), std::string::npos);
  EXPECT_EQ(ReadFile(), "my notes, not a KV tier");  // untouched
}

TEST_F(OffloadTierTest, OneProcessPerFile) {
  auto first = Open(4);
  ASSERT_TRUE(first);
  auto second = OffloadTier::Open(Options(4));
  ASSERT_FALSE(second.has_value());
  EXPECT_EQ(second.error().code, ErrorCode::kUnavailable);
  EXPECT_NE(second.error().message.find("in use"), std::string::npos);
}

TEST_F(OffloadTierTest, RejectsACapacityBelowOneSlot) {
  OffloadTierOptions o = Options(1);
  o.capacity_bytes -= 1;
  auto t = OffloadTier::Open(o);
  ASSERT_FALSE(t.has_value());
  EXPECT_EQ(t.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(t.error().message.find("offload.bytes"), std::string::npos);
  o.path = (dir_ / "missing" / "kv.tier").string();
  o.capacity_bytes = OffloadTier::SlotBytes(kBytes);
  auto missing = OffloadTier::Open(o);
  ASSERT_FALSE(missing.has_value());
  EXPECT_EQ(missing.error().code, ErrorCode::kUnavailable);
}

}  // namespace
}  // namespace kvgate::engine
