// A temporary directory for one test (or one suite, or one test program), removed with
// RemoveTree when the TempDir is destroyed; kept when ADCTL_TEST_KEEP is set (for debugging).
//
// Declare it before the members that use the directory (a store, a supervisor, a server), so
// that it is destroyed after them.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <string>

#include "common/fs_util.h"

namespace adctl {

class TempDir {
 public:
  // A new directory under ::testing::TempDir() ($TEST_TMPDIR, else $TMPDIR, else /tmp/). When it
  // cannot be made the test fails.
  TempDir() : TempDir(::testing::TempDir()) {}
  // The same under `parent`: where the path must stay short (a Unix socket inside it) or in a
  // folder other accounts can reach.
  explicit TempDir(const std::string& parent) : TempDir(parent, nullptr) {}
  // For a caller that skips or throws instead of failing the test: nullptr when the directory
  // cannot be made, and why in *error.
  static std::unique_ptr<TempDir> TryMake(const std::string& parent, std::string* error) {
    std::unique_ptr<TempDir> dir(new TempDir(parent, error));
    if (!dir->made_) dir.reset();
    return dir;
  }
  ~TempDir() {
    if (made_ && getenv("ADCTL_TEST_KEEP") == nullptr) (void)RemoveTree(path_);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  TempDir(const std::string& parent, std::string* error) {
    std::string pattern = parent;
    if (pattern.empty() || pattern.back() != '/') pattern += '/';
    pattern += "adctl-test-XXXXXX";
    made_ = mkdtemp(pattern.data()) != nullptr;
    const int mkdtemp_errno = errno;
    path_ = pattern;
    if (made_) return;
    const std::string why = "mkdtemp " + pattern + ": " + std::strerror(mkdtemp_errno);
    if (error != nullptr) {
      *error = why;
    } else {
      ADD_FAILURE() << why;
    }
  }

  std::string path_;
  bool made_ = false;
};

}  // namespace adctl
