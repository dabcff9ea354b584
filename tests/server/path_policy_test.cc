// What a job may name: inputs absolute and under --read-root, outputs absolute, outside
// adctld's job folders and data directory and under --write-root; symlinks resolved first.
#include "server/supervisor/path_policy.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>

#include "tests/testing/temp_dir.h"

namespace adctl {
namespace {

using ::testing::HasSubstr;
namespace fs = std::filesystem;

class PathPolicyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    data_ = dir_ + "/data";
    for (const char* d : {"/data/jobs/j-other/checkpoints", "/models/sd15", "/out", "/secret"}) {
      fs::create_directories(dir_ + d);
    }
  }
  std::string Check(const JobSpec& spec, const PathRoots& roots = {}) {
    return CheckSpecPaths(spec, data_, roots).message();
  }
  TempDir tmp_;
  const std::string dir_ = tmp_.path();
  std::string data_;
};

TEST_F(PathPolicyTest, OutputsStayOutOfOtherJobsAndAdctldsOwnFiles) {
  JobSpec spec;
  EXPECT_EQ(Check(spec), "");  // empty: the job's own folder
  spec.checkpoint.dir = dir_ + "/out/ckpt";
  EXPECT_EQ(Check(spec), "");
  // Another job's checkpoints, the data directory or a folder above it: refused.
  spec.checkpoint.dir = data_ + "/jobs/j-other/checkpoints";
  EXPECT_THAT(Check(spec), HasSubstr("checkpoint.dir: '" + spec.checkpoint.dir +
                                     "' is inside adctld's job folders"));
  spec.checkpoint.dir = dir_;
  EXPECT_THAT(Check(spec), HasSubstr("over its data directory"));
  // Through a symlink or `..` it is the same place.
  fs::create_directory_symlink(data_ + "/jobs/j-other", dir_ + "/out/link");
  spec.checkpoint.dir = dir_ + "/out/link/checkpoints";
  EXPECT_THAT(Check(spec), HasSubstr("inside adctld's job folders"));
  spec.checkpoint.dir = dir_ + "/out/../data/jobs/j-other/new";
  EXPECT_THAT(Check(spec), HasSubstr("inside adctld's job folders"));
  // Relative paths would land wherever adctld runs.
  spec.checkpoint.dir = "ckpt";
  EXPECT_THAT(Check(spec), HasSubstr("checkpoint.dir: 'ckpt' must be an absolute path"));
  // With --write-root only there.
  spec.checkpoint.dir = "";
  spec.preprocess.output = dir_ + "/secret/cache";
  PathRoots roots;
  roots.write = {dir_ + "/out"};
  EXPECT_THAT(Check(spec, roots), HasSubstr("preprocess.output: '" + spec.preprocess.output +
                                            "' is outside the folders adctld may write"));
  spec.preprocess.output = dir_ + "/out/cache";
  EXPECT_EQ(Check(spec, roots), "");
}

TEST_F(PathPolicyTest, InputsAreAbsoluteAndUnderTheReadRoots) {
  JobSpec spec;
  spec.model.pretrained = dir_ + "/models/sd15";
  spec.model.motion_module_file = "/etc/shadow";
  EXPECT_EQ(Check(spec), "");  // no --read-root: anywhere adctld can read
  PathRoots roots;
  roots.read = {dir_ + "/models"};
  EXPECT_THAT(Check(spec, roots),
              HasSubstr("model.motion_module_file: '/etc/shadow' is outside the folders adctld "
                        "may read (--read-root: " +
                        dir_ + "/models)"));
  spec.model.motion_module_file = "";
  // Another job's output (a preprocess cache) is readable.
  spec.data.path = data_ + "/jobs/j-other/cache";
  EXPECT_EQ(Check(spec, roots), "");
  fs::create_directory_symlink(dir_ + "/secret", dir_ + "/models/escape");
  spec.data.path = dir_ + "/models/escape/x";
  EXPECT_THAT(Check(spec, roots), HasSubstr("data.path: '" + spec.data.path + "' is outside"));
  spec.data.path = "models/sd15";
  EXPECT_THAT(Check(spec, roots), HasSubstr("data.path: 'models/sd15' must be an absolute path"));
  // Every cache of a mix is an input like data.path.
  spec.data.path = "";
  spec.data.sources = {{dir_ + "/models/a", 3, 0}, {dir_ + "/secret/b", 1, 0}};
  EXPECT_THAT(Check(spec, roots),
              HasSubstr("data.sources[1].path: '" + dir_ + "/secret/b' is outside"));
  spec.data.sources[1].path = "b";
  EXPECT_THAT(Check(spec, roots), HasSubstr("data.sources[1].path: 'b' must be an absolute path"));
}

}  // namespace
}  // namespace adctl
