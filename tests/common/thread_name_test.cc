#include "common/thread_name.h"

#include <gtest/gtest.h>
#include <pthread.h>

#include <string>
#include <thread>

namespace kvgate {
namespace {

std::string NameSeenByThread(std::string_view requested) {
  std::string seen;
  std::thread t([&] {
    NameThisThread(requested);
    char name[16] = {};
    pthread_getname_np(pthread_self(), name, sizeof name);
    seen = name;
  });
  t.join();
  return seen;
}

TEST(ThreadNameTest, NamesTheCallingThread) { EXPECT_EQ(NameSeenByThread("http-3"), "http-3"); }

TEST(ThreadNameTest, LongNamesAreCutAtFifteenBytes) {
  // Linux refuses a name of 16 bytes or more (ERANGE); kvgate keeps its first 15 instead.
  EXPECT_EQ(NameSeenByThread("engine-smollm2-135m-instruct"), "engine-smollm2-");
}

}  // namespace
}  // namespace kvgate
