// The store: opening, the schema and its migrations, jobs, labels, transitions and their events.
// What ranks report (ranks, metrics, checkpoints, samples, KV) is store_records_test.cc; the
// statement helpers are statement_test.cc.
#include "server/store/store.h"

#include <gtest/gtest.h>
#include <sqlite3.h>
#include <sys/stat.h>

#include <map>
#include <set>
#include <string>
#include <type_traits>

#include "tests/server/store_fixture.h"

namespace adctl {
namespace {

// JobProgress's metric members are copied from a metric point by name: every name of the list
// is a metric's, and ProgressOf copies each value.
TEST(JobProgressTest, EveryProgressMetricIsAMetricValueOfTheSameName) {
  MetricValues m;
  double next = 1;
  ForEachMetricValue(
      m, [&](const char*, auto& v) { v = static_cast<std::decay_t<decltype(v)>>(next++); });
  m.time = 99.5;
  const JobProgress p = ProgressOf(m);
  int listed = 0;
  ForEachProgressMetric(p, [&](const char* name, const auto& v) {
    ++listed;
    const auto metric = MetricValueByName(m, name);
    ASSERT_TRUE(metric.has_value()) << name << " is not a metric value";
    EXPECT_EQ(static_cast<double>(v), *metric) << name;
  });
  EXPECT_EQ(listed, 7);
  EXPECT_EQ(p.updated_at, 99.5);
}

TEST_F(StoreTest, OpensWithWalForeignKeysAndLatestSchema) {
  EXPECT_EQ(store_->schema_version(), 16);
  struct stat st {};
  ASSERT_EQ(stat(path_.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u) << "the database is the owner's alone";
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path_.c_str(), &db), SQLITE_OK);
  sqlite3_stmt* stmt = nullptr;
  ASSERT_EQ(sqlite3_prepare_v2(db, "PRAGMA journal_mode", -1, &stmt, nullptr), SQLITE_OK);
  ASSERT_EQ(sqlite3_step(stmt), SQLITE_ROW);
  EXPECT_STREQ(reinterpret_cast<const char*>(sqlite3_column_text(stmt, 0)), "wal");
  sqlite3_finalize(stmt);
  sqlite3_close(db);
  // Foreign keys: a rank for an attempt that does not exist is refused.
  RankRecord r;
  r.job_id = "nope";
  r.attempt = 1;
  EXPECT_FALSE(store_->UpsertRank(r).ok());
}

TEST_F(StoreTest, KeepsTheSpecFieldsTheCoordinatorNeeds) {
  JobRecord j = NewJob("j-spec");
  j.hang_timeout_seconds = 90;
  j.checkpoint_dir = "/ckpt/here";
  ASSERT_TRUE(store_->InsertJob(j).ok());
  auto job = store_->GetJob("j-spec");
  ASSERT_TRUE(job.ok());
  EXPECT_EQ(job->hang_timeout_seconds, 90);
  EXPECT_EQ(job->checkpoint_dir, "/ckpt/here");
}

TEST_F(StoreTest, MigratesADatabaseOfTheFirstSchema) {
  store_.reset();
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path_.c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db,
                         "DROP TABLE samples; ALTER TABLE metrics DROP COLUMN mfu_ratio; "
                         "ALTER TABLE metrics DROP COLUMN gpu_utilization; "
                         "ALTER TABLE metrics DROP COLUMN gpu_memory_used_bytes; "
                         "ALTER TABLE metrics DROP COLUMN gpu_memory_total_bytes; "
                         "ALTER TABLE metrics DROP COLUMN gpu_power_watts; "
                         "ALTER TABLE metrics DROP COLUMN gpu_temperature_celsius; "
                         "ALTER TABLE metrics DROP COLUMN gpu_sm_clock_hertz; "
                         "ALTER TABLE jobs DROP COLUMN mfu_ratio; "
                         "ALTER TABLE jobs DROP COLUMN checkpoint_dir; "
                         "ALTER TABLE jobs DROP COLUMN hang_timeout_seconds; "
                         "ALTER TABLE attempts DROP COLUMN token_sha256; "
                         "ALTER TABLE jobs DROP COLUMN rendezvous_timeout_seconds; "
                         "ALTER TABLE jobs DROP COLUMN launcher; "
                         "ALTER TABLE attempts DROP COLUMN cluster_job; "
                         "ALTER TABLE checkpoints DROP COLUMN stall_seconds; "
                         "ALTER TABLE metrics DROP COLUMN videos_skipped_missing; "
                         "ALTER TABLE metrics DROP COLUMN videos_skipped_unreadable; "
                         "ALTER TABLE metrics DROP COLUMN videos_skipped_zero_frames; "
                         "ALTER TABLE metrics DROP COLUMN videos_skipped_truncated; "
                         "ALTER TABLE metrics DROP COLUMN videos_skipped_too_short; "
                         "ALTER TABLE jobs DROP COLUMN submitted_by; "
                         "DROP TABLE checkpoint_pins; "
                         "ALTER TABLE metrics DROP COLUMN eval_loss; "
                         "ALTER TABLE metrics DROP COLUMN eval_by_timestep; "
                         "ALTER TABLE jobs DROP COLUMN learning_rate; "
                         "ALTER TABLE jobs DROP COLUMN eval_loss; "
                         "ALTER TABLE jobs DROP COLUMN eval_step; "
                         "ALTER TABLE jobs DROP COLUMN validation_seconds; "
                         "ALTER TABLE jobs DROP COLUMN after_jobs; "
                         "ALTER TABLE jobs DROP COLUMN after_any; "
                         "ALTER TABLE jobs DROP COLUMN labels; "
                         "ALTER TABLE jobs DROP COLUMN preempted_by; "
                         "PRAGMA user_version=1;",
                         nullptr, nullptr, nullptr),
            SQLITE_OK)
      << sqlite3_errmsg(db);
  sqlite3_close(db);
  auto reopened = Store::Open(path_);
  ASSERT_TRUE(reopened.ok()) << reopened.status().ToString();
  store_ = std::move(reopened.value());
  EXPECT_EQ(store_->schema_version(), 16);
  ASSERT_TRUE(store_->InsertJob(NewJob("j-old")).ok());
  EXPECT_EQ(store_->GetJob("j-old")->hang_timeout_seconds, 0);
  EXPECT_EQ(store_->GetJob("j-old")->launcher, LauncherKind::kLocal);
  EXPECT_EQ(store_->GetJob("j-old")->cluster_job, "");
  EXPECT_TRUE(store_->GetJob("j-old")->after.empty());  // migration 15
  auto chained = NewJob("j-next");
  chained.after = {"j-old", "j-other"};
  chained.after_any = true;
  ASSERT_TRUE(store_->InsertJob(chained).ok());
  EXPECT_EQ(store_->GetJob("j-next")->after, (std::vector<std::string>{"j-old", "j-other"}));
  EXPECT_TRUE(store_->GetJob("j-next")->after_any);
  SampleRecord sample;
  sample.job_id = "j-old";
  sample.step = 2;
  EXPECT_TRUE(store_->AddSamples({sample}).ok());  // migration 3 made the samples table
  CheckpointRecord checkpoint;
  checkpoint.job_id = "j-old";
  checkpoint.step = 2;
  checkpoint.stall_seconds = 0.5;
  ASSERT_TRUE(store_->AddCheckpoint(checkpoint).ok());
  EXPECT_EQ(store_->ListCheckpoints("j-old")->at(0).stall_seconds, 0.5);  // migration 9
}

// The metric columns follow from ForEachMetricValue, not from migrations: a metrics table that
// lacks some (a database from before a metric was added) gains them at open, its rows reading
// the member's default, and new rows round-trip every value.
TEST_F(StoreTest, MetricColumnsTheTableLacksAreAddedAtOpenWithTheirDefaults) {
  const auto values_of = [](const MetricValues& m) {
    std::map<std::string, double> out;
    ForEachMetricValue(
        m, [&](const char* name, const auto& v) { out[name] = static_cast<double>(v); });
    return out;
  };
  // A point with a distinct value in each column: 10, 11, ... (step, the first, is 10).
  const auto point = [](int64_t first) {
    MetricRecord m;
    m.job_id = "j-m";
    m.attempt = 1;
    int64_t next = first;
    ForEachMetricValue(
        m, [&](const char*, auto& v) { v = static_cast<std::decay_t<decltype(v)>>(next++); });
    return m;
  };
  ASSERT_TRUE(store_->InsertJob(NewJob("j-m")).ok());
  ASSERT_TRUE(store_->AddMetrics({point(10)}).ok());
  const int version = store_->schema_version();
  store_.reset();
  // Every list column goes but step (the table's UNIQUE key needs it); the row stays.
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path_.c_str(), &db), SQLITE_OK);
  const MetricValues defaults;
  ForEachMetricValue(defaults, [&](const char* name, const auto&) {
    if (std::string(name) == "step") return;
    const std::string drop = std::string("ALTER TABLE metrics DROP COLUMN ") + name;
    EXPECT_EQ(sqlite3_exec(db, drop.c_str(), nullptr, nullptr, nullptr), SQLITE_OK)
        << drop << ": " << sqlite3_errmsg(db);
  });
  sqlite3_close(db);

  auto reopened = Store::Open(path_);
  ASSERT_TRUE(reopened.ok()) << reopened.status().ToString();
  store_ = std::move(reopened.value());
  EXPECT_EQ(store_->schema_version(), version) << "no migration: the columns follow the list";
  // Each column is back, typed by its member, NOT NULL.
  ASSERT_EQ(sqlite3_open(path_.c_str(), &db), SQLITE_OK);
  std::map<std::string, std::pair<std::string, int>> declared;  // name → (type, notnull)
  sqlite3_stmt* stmt = nullptr;
  ASSERT_EQ(sqlite3_prepare_v2(db, "PRAGMA table_info(metrics)", -1, &stmt, nullptr), SQLITE_OK);
  while (sqlite3_step(stmt) == SQLITE_ROW) {
    declared[reinterpret_cast<const char*>(sqlite3_column_text(stmt, 1))] = {
        reinterpret_cast<const char*>(sqlite3_column_text(stmt, 2)), sqlite3_column_int(stmt, 3)};
  }
  sqlite3_finalize(stmt);
  sqlite3_close(db);
  ForEachMetricValue(defaults, [&](const char* name, const auto& v) {
    const std::string type = std::is_integral_v<std::decay_t<decltype(v)>> ? "INTEGER" : "REAL";
    EXPECT_EQ(declared[name], std::make_pair(type, 1)) << name;
  });
  // The old row: its step, and each re-added column's default (eval_loss -1, ...).
  auto points = store_->ListMetrics("j-m", 0);
  ASSERT_TRUE(points.ok()) << points.status().ToString();
  ASSERT_EQ(points->size(), 1u);
  MetricValues want = defaults;
  want.step = 10;
  EXPECT_EQ(values_of(points->at(0)), values_of(want));
  // A new row round-trips every value, then and after another open (which adds nothing).
  ASSERT_TRUE(store_->AddMetrics({point(100)}).ok());
  for (int open = 0; open < 2; ++open) {
    points = store_->ListMetrics("j-m", 0);
    ASSERT_TRUE(points.ok()) << points.status().ToString();
    ASSERT_EQ(points->size(), 2u);
    EXPECT_EQ(values_of(points->at(1)), values_of(point(100)));
    store_.reset();
    reopened = Store::Open(path_);
    ASSERT_TRUE(reopened.ok()) << reopened.status().ToString();
    store_ = std::move(reopened.value());
  }
}

// Labels (migration 15): kept as given, and a listing keeps only the jobs with every label asked
// for (and the submitter asked for); a key that is not a plain name is refused.
TEST_F(StoreTest, LabelsRoundTripAndSelectJobs) {
  auto a = NewJob("j-a");
  a.labels = {{"sweep", "lr"}, {"team", "motion"}};
  ASSERT_TRUE(store_->InsertJob(a, "alice").ok());
  auto b = NewJob("j-b");
  b.labels = {{"sweep", "lr"}};
  ASSERT_TRUE(store_->InsertJob(b, "bob").ok());
  ASSERT_TRUE(store_->InsertJob(NewJob("j-c"), "alice").ok());
  EXPECT_EQ(store_->GetJob("j-a")->labels, a.labels);
  EXPECT_TRUE(store_->GetJob("j-c")->labels.empty());
  auto ids = [&](const JobSelector& selector) {
    std::vector<std::string> out;
    auto jobs = store_->ListJobs({}, 0, 0, selector);
    EXPECT_TRUE(jobs.ok()) << jobs.status().ToString();
    for (const JobRecord& j : *jobs) out.push_back(j.id);
    return out;
  };
  EXPECT_EQ(ids({{{"sweep", "lr"}}, ""}), (std::vector<std::string>{"j-b", "j-a"}));
  EXPECT_EQ(ids({{{"sweep", "lr"}, {"team", "motion"}}, ""}), (std::vector<std::string>{"j-a"}));
  EXPECT_EQ(ids({{{"sweep", "rank"}}, ""}), (std::vector<std::string>{}));
  EXPECT_EQ(ids({{}, "alice"}), (std::vector<std::string>{"j-c", "j-a"}));
  EXPECT_EQ(ids({{{"sweep", "lr"}}, "alice"}), (std::vector<std::string>{"j-a"}));
  auto bad = store_->ListJobs({}, 0, 0, {{{"sw\"eep", "x"}}, ""});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("labels: key 'sw\"eep' must be"), std::string::npos);
  EXPECT_FALSE(CheckLabels({{"k", std::string(300, 'v')}}, "labels").ok());
}

TEST_F(StoreTest, InsertGetAndUnknownId) {
  ASSERT_TRUE(store_->InsertJob(NewJob("j-1")).ok());
  auto job = store_->GetJob("j-1");
  ASSERT_TRUE(job.ok());
  EXPECT_EQ(job->state, JobState::kQueued);
  EXPECT_EQ(job->gpus, 2);
  EXPECT_EQ(CountEvents("j-1"), 1);
  auto missing = store_->GetJob("j-404");
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("j-404"), std::string::npos);
}

TEST_F(StoreTest, SubmissionIdIsUnique) {
  ASSERT_TRUE(store_->InsertJob(NewJob("j-1", "ci-42")).ok());
  EXPECT_FALSE(store_->InsertJob(NewJob("j-2", "ci-42")).ok());
  ASSERT_TRUE(store_->InsertJob(NewJob("j-3")).ok());  // no id: no constraint
  ASSERT_TRUE(store_->InsertJob(NewJob("j-4")).ok());
  auto found = store_->FindJobBySubmissionId("ci-42");
  ASSERT_TRUE(found.ok());
  ASSERT_TRUE(found->has_value());
  EXPECT_EQ((*found)->id, "j-1");
}

TEST_F(StoreTest, TransitionWritesStateAndEventTogether) {
  ASSERT_TRUE(store_->InsertJob(NewJob("j-1")).ok());
  TransitionChanges c;
  c.attempt = 1;
  c.devices = std::vector<std::string>{"cpu0", "cpu1"};
  c.started_at = 5.0;
  auto job = store_->Transition("j-1", JobState::kQueued, JobState::kStarting, "launching", c);
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ(job->attempt, 1);
  auto attempt = store_->GetAttempt("j-1", 1);
  ASSERT_TRUE(attempt.ok());
  EXPECT_EQ(attempt->world_size, 2);
  EXPECT_EQ(attempt->devices.size(), 2u);
  auto events = store_->ListEvents("j-1", 0);
  ASSERT_TRUE(events.ok());
  ASSERT_EQ(events->size(), 2u);
  EXPECT_EQ(events->back().kind, "transition");
  EXPECT_EQ(events->back().from_state, JobState::kQueued);
  EXPECT_EQ(events->back().to_state, JobState::kStarting);

  // Illegal move: nothing changes, no event row.
  auto bad = store_->Transition("j-1", std::nullopt, JobState::kPaused, "x");
  EXPECT_EQ(bad.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(CountEvents("j-1"), 2);
  EXPECT_EQ(store_->GetJob("j-1")->state, JobState::kStarting);

  // Stale expectation: refused.
  auto stale = store_->Transition("j-1", JobState::kQueued, JobState::kRunning, "x");
  EXPECT_EQ(stale.status().code(), StatusCode::kFailedPrecondition);

  TransitionChanges end;
  end.end_attempt_reason = "rank 0 exited with code 0";
  auto done = store_->Transition("j-1", JobState::kStarting, JobState::kSucceeded, "done", end);
  ASSERT_TRUE(done.ok());
  EXPECT_GT(done->finished_at, 0);
  EXPECT_EQ(store_->GetAttempt("j-1", 1)->end_reason, "rank 0 exited with code 0");
}

// Preemption (issue 31 item 4): who preempted a job survives a reopen (adctld restarted while it
// paused) until its next start clears it; a priority change rewrites the spec with an event.
TEST_F(StoreTest, PreemptedByAndPriorityChangesAreKept) {
  ASSERT_TRUE(store_->InsertJob(NewJob("j-1")).ok());
  TransitionChanges start;
  start.attempt = 1;
  ASSERT_TRUE(store_->Transition("j-1", JobState::kQueued, JobState::kStarting, "go", start).ok());
  TransitionChanges preempt;
  preempt.preempted_by = "j-9";
  ASSERT_TRUE(
      store_->Transition("j-1", JobState::kStarting, JobState::kPausing, "preempted", preempt)
          .ok());
  store_.reset();
  store_ = std::move(Store::Open(path_).value());
  EXPECT_EQ(store_->GetJob("j-1")->preempted_by, "j-9");
  ASSERT_TRUE(store_->Transition("j-1", std::nullopt, JobState::kPaused, "paused").ok());
  ASSERT_TRUE(store_->Transition("j-1", std::nullopt, JobState::kQueued, "back").ok());
  EXPECT_EQ(store_->GetJob("j-1")->preempted_by, "j-9") << "kept while it waits again";
  TransitionChanges again;
  again.attempt = 2;
  again.preempted_by = std::string();
  ASSERT_TRUE(store_->Transition("j-1", std::nullopt, JobState::kStarting, "go", again).ok());
  EXPECT_EQ(store_->GetJob("j-1")->preempted_by, "");

  auto set = store_->SetPriority("j-1", 7, "name: t\nresources: {priority: 7}\n", "0 -> 7");
  ASSERT_TRUE(set.ok()) << set.status().ToString();
  EXPECT_EQ(store_->GetJob("j-1")->priority, 7);
  EXPECT_NE(store_->GetJob("j-1")->spec_yaml.find("priority: 7"), std::string::npos);
  auto events = store_->ListEvents("j-1", 0);
  ASSERT_TRUE(events.ok());
  EXPECT_EQ(events->back().kind, "priority");
  EXPECT_EQ(events->back().message, "0 -> 7");
  ASSERT_TRUE(store_->Transition("j-1", std::nullopt, JobState::kCancelling, "c").ok());
  ASSERT_TRUE(store_->Transition("j-1", std::nullopt, JobState::kCancelled, "c").ok());
  EXPECT_EQ(store_->SetPriority("j-1", 1, "x", "y").status().code(),
            StatusCode::kFailedPrecondition);
  EXPECT_EQ(store_->SetPriority("j-404", 1, "x", "y").status().code(), StatusCode::kNotFound);
}

TEST_F(StoreTest, ListFiltersAndPages) {
  for (int i = 1; i <= 5; ++i)
    ASSERT_TRUE(store_->InsertJob(NewJob("j-" + std::to_string(i))).ok());
  ASSERT_TRUE(store_->Transition("j-2", std::nullopt, JobState::kCancelled, "c").ok());
  auto queued = store_->ListJobs({JobState::kQueued}, 0);
  ASSERT_TRUE(queued.ok());
  EXPECT_EQ(queued->size(), 4u);
  auto page1 = store_->ListJobs({}, 2);
  ASSERT_TRUE(page1.ok());
  ASSERT_EQ(page1->size(), 2u);
  EXPECT_EQ((*page1)[0].id, "j-5");
  auto page2 = store_->ListJobs({}, 2, (*page1)[1].seq);
  ASSERT_TRUE(page2.ok());
  ASSERT_EQ(page2->size(), 2u);
  EXPECT_EQ((*page2)[0].id, "j-3");
  auto active = store_->ListActiveJobs();
  ASSERT_TRUE(active.ok());
  EXPECT_EQ(active->size(), 4u);
  EXPECT_EQ(active->front().id, "j-1");
}

// Every JobRecord and AttemptRecord field reads back from its own column.
TEST_F(StoreTest, EveryJobFieldReadsBackFromItsColumn) {
  ASSERT_TRUE(store_->InsertJob(NewJob("j-0")).ok());
  JobRecord j = NewJob("j-all", "sub-1");
  j.priority = 3;
  j.max_restarts = 4;
  j.grace_seconds = 45;
  j.hang_timeout_seconds = 90;
  j.rendezvous_timeout_seconds = 30;
  j.checkpoint_dir = "/ckpt";
  j.message = "queued";
  j.progress.total_steps = 100;
  j.launcher = LauncherKind::kSlurm;
  j.after = {"j-0"};
  j.after_any = true;
  j.labels = {{"team", "motion"}};
  ASSERT_TRUE(store_->InsertJob(j, "alice").ok());
  TransitionChanges start;
  start.attempt = 1;
  start.attempt_token_sha256 = "abc123";
  start.devices = std::vector<std::string>{"cuda:0", "cuda:1", "cuda:2"};
  start.restarts = 2;
  start.gpus = 3;
  start.spec_yaml = "name: t2\n";
  start.started_at = 11.5;
  start.preempted_by = "j-9";
  ASSERT_TRUE(
      store_->Transition("j-all", JobState::kQueued, JobState::kStarting, "go", start).ok());
  ASSERT_TRUE(store_->SetAttemptClusterJob("j-all", 1, "4242").ok());
  MetricRecord m;
  m.job_id = "j-all";
  m.attempt = 1;
  m.step = 7;
  m.total_steps = 100;
  m.time = 12.25;
  m.loss = 0.5;
  m.learning_rate = 1e-4;
  m.clips_per_second = 3.5;
  m.step_seconds = 0.75;
  m.mfu_ratio = 0.4;
  m.eval_loss = 0.25;
  ASSERT_TRUE(store_->AddMetrics({m}).ok());
  CheckpointRecord ck;
  ck.job_id = "j-all";
  ck.attempt = 1;
  ck.step = 6;
  ASSERT_TRUE(store_->AddCheckpoint(ck).ok());
  SampleRecord grid;
  grid.job_id = "j-all";
  grid.step = 6;
  grid.index = -1;
  grid.render_seconds = 8;
  ASSERT_TRUE(store_->AddSamples({grid}).ok());

  auto got = store_->GetJob("j-all");
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->id, "j-all");
  EXPECT_EQ(got->seq, 2);
  EXPECT_EQ(got->name, "t");
  EXPECT_EQ(got->submission_id, "sub-1");
  EXPECT_EQ(got->spec_yaml, "name: t2\n");
  EXPECT_EQ(got->token, "secret");
  EXPECT_EQ(got->job_dir, j.job_dir);
  EXPECT_EQ(got->state, JobState::kStarting);
  EXPECT_EQ(got->gpus, 3);
  EXPECT_EQ(got->priority, 3);
  EXPECT_EQ(got->attempt, 1);
  EXPECT_EQ(got->restarts, 2);
  EXPECT_EQ(got->max_restarts, 4);
  EXPECT_EQ(got->grace_seconds, 45);
  EXPECT_EQ(got->hang_timeout_seconds, 90);
  EXPECT_EQ(got->rendezvous_timeout_seconds, 30);
  EXPECT_EQ(got->checkpoint_dir, "/ckpt");
  EXPECT_EQ(got->submitted_at, j.submitted_at);
  EXPECT_EQ(got->started_at, 11.5);
  EXPECT_EQ(got->finished_at, 0);
  EXPECT_EQ(got->message, "go");
  EXPECT_EQ(got->devices, (std::vector<std::string>{"cuda:0", "cuda:1", "cuda:2"}));
  EXPECT_EQ(got->progress.step, 7);
  EXPECT_EQ(got->progress.total_steps, 100);
  EXPECT_EQ(got->progress.loss, 0.5);
  EXPECT_EQ(got->progress.clips_per_second, 3.5);
  EXPECT_EQ(got->progress.step_seconds, 0.75);
  EXPECT_EQ(got->progress.last_checkpoint_step, 6);
  EXPECT_EQ(got->progress.updated_at, 12.25);
  EXPECT_EQ(got->progress.mfu_ratio, 0.4);
  EXPECT_EQ(got->progress.learning_rate, 1e-4);
  EXPECT_EQ(got->progress.eval_loss, 0.25);
  EXPECT_EQ(got->progress.eval_step, 7);
  EXPECT_EQ(got->progress.validation_seconds, 8);
  EXPECT_EQ(got->launcher, LauncherKind::kSlurm);
  EXPECT_EQ(got->cluster_job, "4242");
  EXPECT_EQ(got->submitted_by, "alice");
  EXPECT_EQ(got->after, (std::vector<std::string>{"j-0"}));
  EXPECT_TRUE(got->after_any);
  EXPECT_EQ(got->labels, j.labels);
  EXPECT_EQ(got->preempted_by, "j-9");
  auto by_submission = store_->FindJobBySubmissionId("sub-1");
  ASSERT_TRUE(by_submission.ok());
  ASSERT_TRUE(by_submission->has_value());
  EXPECT_EQ((*by_submission)->cluster_job, "4242");

  auto attempt = store_->GetAttempt("j-all", 1);
  ASSERT_TRUE(attempt.ok()) << attempt.status().ToString();
  EXPECT_EQ(attempt->world_size, 3);
  EXPECT_EQ(attempt->devices, got->devices);
  EXPECT_GT(attempt->started_at, 0);
  EXPECT_EQ(attempt->ended_at, 0);
  EXPECT_EQ(attempt->token_sha256, "abc123");
  EXPECT_EQ(attempt->cluster_job, "4242");
  EXPECT_EQ(store_->GetAttempt("j-all", 2).status().code(), StatusCode::kNotFound);
}

TEST_F(StoreTest, SurvivesReopen) {
  ASSERT_TRUE(store_->InsertJob(NewJob("j-1")).ok());
  ASSERT_TRUE(store_->Transition("j-1", std::nullopt, JobState::kPaused, "p").ok());
  store_.reset();
  auto reopened = Store::Open(path_);
  ASSERT_TRUE(reopened.ok());
  EXPECT_EQ(reopened.value()->GetJob("j-1")->state, JobState::kPaused);
  EXPECT_EQ(reopened.value()->ListEvents("j-1", 0)->size(), 2u);
}

}  // namespace
}  // namespace adctl
