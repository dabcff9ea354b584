#include "worker/dist/directory_kv_store.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "tests/dist/multiprocess.h"

namespace adctl {
namespace {

using std::chrono::milliseconds;

TEST(DirectoryKeyValueStoreTest, SetThenGetReturnsTheValueAndOverwriteReplacesIt) {
  auto store = MakeDirectoryKeyValueStore(test::MakeTempDir("kv") + "/not/yet/there");
  ASSERT_TRUE(store->Set("gloo/mesh/0", std::string("a\0b", 3)).ok());
  Result<std::string> got = store->Get("gloo/mesh/0", milliseconds(0));
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(*got, std::string("a\0b", 3));
  ASSERT_TRUE(store->Set("gloo/mesh/0", "second").ok());
  EXPECT_EQ(*store->Get("gloo/mesh/0", milliseconds(0)), "second");
}

TEST(DirectoryKeyValueStoreTest, KeysThatDifferOnlyInPunctuationStayApart) {
  auto store = MakeDirectoryKeyValueStore(test::MakeTempDir("kv"));
  ASSERT_TRUE(store->Set("a/b", "slash").ok());
  ASSERT_TRUE(store->Set("a%2Fb", "literal").ok());
  ASSERT_TRUE(store->Set("..", "dots").ok());
  EXPECT_EQ(*store->Get("a/b", milliseconds(0)), "slash");
  EXPECT_EQ(*store->Get("a%2Fb", milliseconds(0)), "literal");
  EXPECT_EQ(*store->Get("..", milliseconds(0)), "dots");
}

TEST(DirectoryKeyValueStoreTest, GetOfAMissingKeyTimesOutNamingTheKey) {
  auto store = MakeDirectoryKeyValueStore(test::MakeTempDir("kv"));
  const auto start = std::chrono::steady_clock::now();
  Result<std::string> got = store->Get("nccl/unique_id", milliseconds(200));
  const auto waited = std::chrono::steady_clock::now() - start;
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(got.status().message().find("nccl/unique_id"), std::string::npos);
  EXPECT_GE(waited, milliseconds(200));
  EXPECT_LT(waited, milliseconds(2000));
}

TEST(DirectoryKeyValueStoreTest, GetWaitsForAValueSetLaterByAnotherWriter) {
  const std::string dir = test::MakeTempDir("kv");
  auto reader = MakeDirectoryKeyValueStore(dir);
  std::thread writer([dir] {
    std::this_thread::sleep_for(milliseconds(100));
    ASSERT_TRUE(MakeDirectoryKeyValueStore(dir)->Set("late", std::string(1 << 20, 'x')).ok());
  });
  Result<std::string> got = reader->Get("late", milliseconds(5000));
  writer.join();
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->size(), size_t{1} << 20);  // whole value: the rename is atomic
}

}  // namespace
}  // namespace adctl
