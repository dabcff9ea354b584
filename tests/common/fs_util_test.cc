#include "common/fs_util.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>

#include "tests/testing/temp_dir.h"

namespace adctl {
namespace {

namespace fs = std::filesystem;

class RemoveTreeTest : public ::testing::Test {
 protected:
  static void Touch(const fs::path& p) { std::ofstream(p) << "x"; }
  const TempDir tmp_;
  const fs::path root_{tmp_.path()};
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

namespace adctl {
namespace {

// A job's custom checkpoint or cache folder is its owner's alone, as the data directory is.
TEST(MakePrivateDirectoriesTest, CreatesMissingFoldersOwnerOnlyAndKeepsExistingOnes) {
  const TempDir tmp;
  const std::string& root = tmp.path();
  ::chmod(root.c_str(), 0755);
  ASSERT_TRUE(MakePrivateDirectories(root + "/a/b/c").ok());
  for (const std::string& made : {root + "/a", root + "/a/b", root + "/a/b/c"}) {
    struct stat s;
    ASSERT_EQ(::stat(made.c_str(), &s), 0) << made;
    EXPECT_EQ(s.st_mode & 0777, 0700u) << made;
  }
  struct stat existing;
  ASSERT_EQ(::stat(root.c_str(), &existing), 0);
  EXPECT_EQ(existing.st_mode & 0777, 0755u) << "an existing folder keeps its mode";
  EXPECT_TRUE(MakePrivateDirectories(root + "/a/b/c").ok()) << "already there";
  std::ofstream(root + "/file") << "x";
  Status blocked = MakePrivateDirectories(root + "/file/sub");
  EXPECT_FALSE(blocked.ok());
  EXPECT_NE(blocked.message().find(root + "/file"), std::string::npos) << blocked.message();
}

}  // namespace
}  // namespace adctl
