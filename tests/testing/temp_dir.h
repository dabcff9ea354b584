// A temporary directory for one test, removed (with RemoveTree) when the test ends.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <string>

#include "common/fs_util.h"

namespace adctl {

class TempDir {
 public:
  TempDir() {
    std::string pattern = ::testing::TempDir() + "adctl-test-XXXXXX";
    char* made = mkdtemp(pattern.data());
    EXPECT_NE(made, nullptr) << "mkdtemp " << pattern;
    path_ = pattern;
  }
  ~TempDir() { (void)RemoveTree(path_); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

}  // namespace adctl
