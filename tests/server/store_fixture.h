// The store tests' fixture: a Store on <temp dir>/adctl.db (path_, for tests that open the file
// themselves), and a job record to insert. Shared by store_test.cc (jobs, schema, migrations)
// and store_records_test.cc (what ranks report).
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <utility>

#include "common/clock.h"
#include "server/store/store.h"
#include "tests/testing/temp_dir.h"

namespace adctl {

class StoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto store = Store::Open(path_);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    store_ = std::move(store.value());
  }

  JobRecord NewJob(const std::string& id, const std::string& submission_id = "") {
    JobRecord j;
    j.id = id;
    j.name = "t";
    j.submission_id = submission_id;
    j.spec_yaml = "name: t\n";
    j.token = "secret";
    j.job_dir = dir_ + "/jobs/" + id;
    j.gpus = 2;
    j.max_restarts = 1;
    j.submitted_at = NowSeconds();
    return j;
  }

  int CountEvents(const std::string& id) {
    auto events = store_->ListEvents(id, 0);
    EXPECT_TRUE(events.ok());
    return static_cast<int>(events->size());
  }

  const TempDir tmp_;  // first: removed after the store is closed
  const std::string dir_ = tmp_.path();
  const std::string path_ = tmp_.file("adctl.db");
  std::unique_ptr<Store> store_;
};

}  // namespace adctl
