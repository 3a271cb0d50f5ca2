// Threads and responses under gateway keys (thread_scope.h, response_threads.h): a key's thread id
// and a key's responses are its own; without keys nothing changes.
#include "gateway/thread_scope.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

#include "gateway/response_threads.h"

namespace kvgate::gateway {
namespace {

TEST(ThreadScopeTest, WithoutKeysTheIdIsStoredAsSent) {
  EXPECT_EQ(StoredThreadId("t1", "", ""), "t1");
  EXPECT_EQ(StoredThreadId("key_abc:t1", "", ""), "key_abc:t1");
  EXPECT_EQ(StoredThreadId("", "key_a", "key_b"), "");
}

TEST(ThreadScopeTest, TheOwnerKeepsTheIdAnotherKeyGetsItsOwnThread) {
  EXPECT_EQ(StoredThreadId("t1", "key_a", "key_a"), "t1");
  EXPECT_EQ(StoredThreadId("t1", "key_b", "key_a"), "key_b:t1");
  EXPECT_EQ(StoredThreadId("t1", "key_b", ""), "key_b:t1");  // an owner not known: not joined
}

TEST(ThreadScopeTest, StoredIdsAreOneToOneWithKeyAndClientId) {
  // A client that names its thread like another key's scoped one never lands in it, even as the
  // first to use that name.
  EXPECT_TRUE(IsScopedThreadId("key_b:t1"));
  EXPECT_FALSE(IsScopedThreadId("t1"));
  EXPECT_FALSE(IsScopedThreadId("key_b"));
  EXPECT_FALSE(IsScopedThreadId("team:key_b"));
  EXPECT_EQ(StoredThreadId("key_b:t1", "key_c", "key_c"), "key_c:key_b:t1");
  EXPECT_EQ(StoredThreadId("key_b:t1", "key_b", "key_b"), "key_b:key_b:t1");
  // Scoped names of distinct (key, id) pairs are distinct, and none is a name a client's id is
  // stored under plainly.
  const char* keys[] = {"key_a", "key_b", "key_c"};
  const char* ids[] = {"t1", "key_b:t1", "key_a:key_b:t1", "a:b", "key_"};
  std::set<std::string> names;
  for (const char* key : keys) {
    for (const char* id : ids) names.insert(StoredThreadId(id, key, "key_nobody"));
  }
  EXPECT_EQ(names.size(), std::size(keys) * std::size(ids));
  for (const char* id : ids) {
    if (IsScopedThreadId(id)) continue;
    EXPECT_EQ(names.count(id), 0u) << id << " would be both a plain and a scoped name";
  }
}

TEST(ThreadScopeTest, TheFirstClaimOwnsAndOwnersAreForgottenOldestFirst) {
  ThreadOwners owners(2);
  EXPECT_EQ(owners.Find("t1"), std::nullopt);
  EXPECT_EQ(owners.Claim("t1", "key_a"), "key_a");
  EXPECT_EQ(owners.Claim("t1", "key_b"), "key_a");  // taken
  EXPECT_EQ(owners.Find("t1"), "key_a");
  EXPECT_EQ(owners.Claim("t2", "key_b"), "key_b");
  EXPECT_EQ(owners.Claim("t3", "key_b"), "key_b");  // forgets t1
  EXPECT_EQ(owners.Find("t1"), std::nullopt);
  EXPECT_EQ(owners.Find("t2"), "key_b");
}

TEST(ThreadScopeTest, AConversationIsFoundOnlyByItsOwnKey) {
  ResponseThreads threads;
  threads.Remember("resp_a", "t1", "key_a");
  threads.RememberConversation("resp_a", "[1]", "key_a");
  EXPECT_EQ(threads.KeyOf("resp_a"), "key_a");
  EXPECT_EQ(threads.KeyOf("resp_x"), std::nullopt);
  EXPECT_EQ(threads.FindConversation("resp_a", "key_a"), "[1]");
  EXPECT_EQ(threads.FindConversation("resp_a", "key_b"), std::nullopt);  // as for an unknown id
  EXPECT_EQ(threads.FindConversation("resp_a"), std::nullopt);
  // Made without keys: no key's, so any may continue it (a gateway that turned keys on).
  threads.RememberConversation("resp_old", "[0]");
  EXPECT_EQ(threads.FindConversation("resp_old", "key_b"), "[0]");
}

}  // namespace
}  // namespace kvgate::gateway
