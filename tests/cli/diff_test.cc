// adctl diff's pure half: the spec diff on canonical specs, the latest metrics of a Job, and
// both renderings.
#include "cli/diff.h"

#include <gtest/gtest.h>

#include <string>

namespace adctl::cli {
namespace {

const std::string kTiny =
    "name: t\n"
    "model: {preset: tiny}\n"
    "data: {kind: synthetic, num_samples: 16, frames: 4, height: 8, width: 8}\n"
    "train: {max_steps: 6, batch_size: 1, lr: 0.0001}\n";

std::string WithLr(const std::string& lr) {
  std::string spec = kTiny;
  spec.replace(spec.find("lr: 0.0001"), 10, "lr: " + lr);
  return spec;
}

TEST(DiffSpecsTest, SpecsDifferingInTrainLrGiveExactlyThatRow) {
  auto diff = DiffSpecs(kTiny, WithLr("0.0002"));
  ASSERT_TRUE(diff.ok()) << diff.status().ToString();
  ASSERT_EQ(diff->size(), 1u);
  EXPECT_EQ((*diff)[0].path, "train.lr");
  EXPECT_EQ((*diff)[0].a, "0.0001");
  EXPECT_EQ((*diff)[0].b, "0.0002");
}

// The canonical spec is compared, not the text: another spelling of the same values (a flow
// mapping written as a block, 1e-4 for 0.0001, a default written out) is no difference.
TEST(DiffSpecsTest, TheSameSpecWrittenDifferentlyHasNoDifference) {
  const std::string block =
      "name: t\n"
      "model:\n  preset: tiny\n"
      "data:\n  kind: synthetic\n  num_samples: 16\n  frames: 4\n  height: 8\n  width: 8\n"
      "train:\n  max_steps: 6\n  batch_size: 1\n  lr: 1e-4\n  grad_accum: 1\n";
  auto diff = DiffSpecs(kTiny, block);
  ASSERT_TRUE(diff.ok()) << diff.status().ToString();
  EXPECT_TRUE(diff->empty()) << (*diff)[0].path;
}

TEST(DiffSpecsTest, RowsFollowTheCanonicalOrderAndShowListsAndUnsetFields) {
  const std::string b =
      "name: u\n"
      "model: {preset: tiny}\n"
      "data: {kind: synthetic, num_samples: 16, frames: 4, height: 8, width: 8}\n"
      "train: {max_steps: 6, batch_size: 1, lr: 0.0001, betas: [0.9, 0.99]}\n"
      "resources: {launcher: local}\n";
  auto diff = DiffSpecs(kTiny, b);
  ASSERT_TRUE(diff.ok()) << diff.status().ToString();
  ASSERT_EQ(diff->size(), 3u);
  EXPECT_EQ((*diff)[0].path, "name");
  EXPECT_EQ((*diff)[0].a, "t");
  EXPECT_EQ((*diff)[0].b, "u");
  EXPECT_EQ((*diff)[1].path, "train.betas");
  EXPECT_EQ((*diff)[1].a, "[0.9, 0.999]");
  EXPECT_EQ((*diff)[1].b, "[0.9, 0.99]");
  // The canonical YAML leaves an unset launcher out.
  EXPECT_EQ((*diff)[2].path, "resources.launcher");
  EXPECT_EQ((*diff)[2].a, "(unset)");
  EXPECT_EQ((*diff)[2].b, "local");
}

TEST(DiffSpecsTest, ASpecThatDoesNotParseIsNamed) {
  auto diff = DiffSpecs(kTiny, kTiny + "trian: {lr: 1}\n");
  ASSERT_FALSE(diff.ok());
  EXPECT_EQ(diff.status().message().rfind("spec B: ", 0), 0u) << diff.status().message();
  EXPECT_NE(diff.status().message().find("trian"), std::string::npos) << diff.status().message();
}

v1::Job JobAt(const std::string& id, int64_t step, double loss) {
  v1::Job job;
  job.set_id(id);
  job.set_name("t");
  job.set_state(v1::JOB_STATE_SUCCEEDED);
  job.mutable_progress()->set_step(step);
  job.mutable_progress()->set_total_steps(6);
  job.mutable_progress()->set_loss(loss);
  job.mutable_progress()->set_clips_per_second(2.5);
  return job;
}

TEST(DiffRenderTest, TableAndJsonShowTheDiffAndTheLatestMetricsSideBySide) {
  auto diff = DiffSpecs(kTiny, WithLr("0.0002"));
  ASSERT_TRUE(diff.ok());
  const LatestMetrics a = LatestMetricsOf(JobAt("j-a", 6, 0.125));
  const LatestMetrics b = LatestMetricsOf(JobAt("j-b", 0, 0));
  EXPECT_EQ(a.state, "SUCCEEDED");
  ASSERT_TRUE(a.loss.has_value());
  EXPECT_FALSE(b.loss.has_value());  // no step yet: no loss, not 0
  EXPECT_FALSE(a.eval_loss.has_value());

  const std::string table = RenderDiffTable(*diff, a, b);
  EXPECT_NE(table.find("FIELD     j-a (t)  j-b (t)"), std::string::npos) << table;
  EXPECT_NE(table.find("train.lr  0.0001   0.0002"), std::string::npos) << table;
  EXPECT_NE(table.find("step"), std::string::npos) << table;
  EXPECT_NE(table.find("0.1250"), std::string::npos) << table;
  EXPECT_EQ(table.find("eval loss"), std::string::npos) << table;  // no job has one

  const nlohmann::json json = DiffToJson(*diff, a, b);
  EXPECT_EQ(json["jobs"], nlohmann::json({"j-a", "j-b"}));
  ASSERT_EQ(json["spec_diff"].size(), 1u);
  EXPECT_EQ(json["spec_diff"][0]["field"], "train.lr");
  EXPECT_EQ(json["spec_diff"][0]["a"], "0.0001");
  EXPECT_EQ(json["metrics"][0]["step"], 6);
  EXPECT_EQ(json["metrics"][0]["loss"], 0.125);
  EXPECT_TRUE(json["metrics"][1]["loss"].is_null());
  EXPECT_TRUE(json["metrics"][0]["eval_loss"].is_null());
}

}  // namespace
}  // namespace adctl::cli
