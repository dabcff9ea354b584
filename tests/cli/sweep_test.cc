// adctl submit --sweep (issue 31 item 2): the values parsed, their cartesian product in order,
// a group id that a submission id fixes, and the group's one-line summary.
#include "cli/sweep.h"

#include <gtest/gtest.h>

namespace adctl::cli {
namespace {

TEST(SweepTest, TheProductOfTheValuesFirstAxisSlowest) {
  auto lr = ParseSweep("train.lr=1e-4,5e-5");
  auto rank = ParseSweep("model.lora.rank=16,32,64");
  ASSERT_TRUE(lr.ok() && rank.ok());
  EXPECT_EQ(lr->path, "train.lr");
  EXPECT_EQ(lr->values, (std::vector<std::string>{"1e-4", "5e-5"}));
  auto points = SweepPoints({*lr, *rank});
  ASSERT_TRUE(points.ok());
  ASSERT_EQ(points->size(), 6u);
  EXPECT_EQ((*points)[0], (std::vector<std::string>{"train.lr=1e-4", "model.lora.rank=16"}));
  EXPECT_EQ((*points)[2], (std::vector<std::string>{"train.lr=1e-4", "model.lora.rank=64"}));
  EXPECT_EQ((*points)[3], (std::vector<std::string>{"train.lr=5e-5", "model.lora.rank=16"}));
}

TEST(SweepTest, MistakesAreNamed) {
  EXPECT_NE(ParseSweep("train.lr").status().message().find("expected path=v1,v2"),
            std::string::npos);
  EXPECT_NE(ParseSweep("train.lr=1e-4,,2e-4").status().message().find("an empty value"),
            std::string::npos);
  auto lr = ParseSweep("train.lr=1,2");
  EXPECT_NE(SweepPoints({*lr, *lr}).status().message().find("given twice"), std::string::npos);
  SweepAxis wide{"train.seed", {}};
  for (int i = 0; i < 17; ++i) wide.values.push_back(std::to_string(i));
  SweepAxis other = wide;
  other.path = "data.seed";
  EXPECT_NE(SweepPoints({wide, other}).status().message().find("more than 256 jobs"),
            std::string::npos);
}

TEST(SweepTest, ASubmissionIdFixesTheGroup) {
  EXPECT_EQ(SweepGroup("ci-42"), SweepGroup("ci-42"));
  EXPECT_NE(SweepGroup("ci-42"), SweepGroup("ci-43"));
  EXPECT_EQ(SweepGroup("ci-42").size(), 12u);
  EXPECT_NE(SweepGroup(""), SweepGroup("")) << "random without one";
}

TEST(SweepTest, TheSummaryCountsStatesAndNamesTheBestEvalLoss) {
  std::vector<adctl::v1::Job> jobs(3);
  jobs[0].set_id("j-1");
  jobs[0].set_state(adctl::v1::JOB_STATE_SUCCEEDED);
  jobs[0].mutable_progress()->set_eval_loss(0.25);
  (*jobs[0].mutable_labels())["train.lr"] = "1e-4";
  (*jobs[0].mutable_labels())["group"] = "g-1";
  jobs[1].set_id("j-2");
  jobs[1].set_state(adctl::v1::JOB_STATE_SUCCEEDED);
  jobs[1].mutable_progress()->set_eval_loss(0.125);
  (*jobs[1].mutable_labels())["train.lr"] = "5e-5";
  (*jobs[1].mutable_labels())["group"] = "g-1";
  jobs[2].set_id("j-3");
  jobs[2].set_state(adctl::v1::JOB_STATE_RUNNING);
  EXPECT_EQ(GroupSummary("g-1", jobs),
            "group g-1: 3 job(s): 1 RUNNING, 2 SUCCEEDED; best eval loss 0.125: j-2 "
            "(train.lr=5e-5)");
}

}  // namespace
}  // namespace adctl::cli
