#include "common/fs_util.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace adctl {
namespace {

namespace fs = std::filesystem;

class RemoveTreeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::path(::testing::TempDir()) / ("remove-tree-" + std::to_string(::getpid()));
    fs::create_directories(root_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(root_, ec);
  }
  static void Touch(const fs::path& p) { std::ofstream(p) << "x"; }
  fs::path root_;
};

TEST_F(RemoveTreeTest, RemovesANestedTreeAndCountsEntries) {
  const fs::path tree = root_ / "step-00000004";
  fs::create_directories(tree / "motion_adapter" / "deep");
  Touch(tree / "manifest.json");
  Touch(tree / "motion_adapter" / "config.json");
  Touch(tree / "motion_adapter" / "deep" / "a.bin");
  auto removed = RemoveTree(tree.string());
  ASSERT_TRUE(removed.ok()) << removed.status().ToString();
  EXPECT_EQ(*removed, 6);  // 3 files, 3 directories
  EXPECT_FALSE(fs::exists(tree));
  EXPECT_TRUE(fs::exists(root_));
}

TEST_F(RemoveTreeTest, MissingPathIsNotAnError) {
  auto removed = RemoveTree((root_ / "nothing-here").string());
  ASSERT_TRUE(removed.ok());
  EXPECT_EQ(*removed, 0);
}

TEST_F(RemoveTreeTest, RemovesSymlinksWithoutFollowingThem) {
  const fs::path keep = root_ / "keep";
  fs::create_directories(keep);
  Touch(keep / "precious");
  const fs::path tree = root_ / "tree";
  fs::create_directories(tree);
  fs::create_directory_symlink(keep, tree / "link-to-dir");
  fs::create_symlink(keep / "precious", tree / "link-to-file");
  ASSERT_TRUE(RemoveTree(tree.string()).ok());
  EXPECT_FALSE(fs::exists(tree));
  EXPECT_TRUE(fs::exists(keep / "precious"));
}

TEST_F(RemoveTreeTest, APlainFileIsRemoved) {
  Touch(root_ / "file");
  auto removed = RemoveTree((root_ / "file").string());
  ASSERT_TRUE(removed.ok());
  EXPECT_EQ(*removed, 1);
  EXPECT_FALSE(fs::exists(root_ / "file"));
}

TEST_F(RemoveTreeTest, AnEntryThatCannotBeRemovedIsAnErrorNamingIt) {
  // procfs refuses every unlink, for root too, so this runs (and removes nothing) anywhere.
  auto removed = RemoveTree("/proc/self/fdinfo");
  ASSERT_FALSE(removed.ok());
  EXPECT_NE(removed.status().message().find("cannot remove /proc/self/fdinfo/"), std::string::npos)
      << removed.status().ToString();
  EXPECT_TRUE(fs::exists("/proc/self/fdinfo/0"));
}

}  // namespace
}  // namespace adctl
