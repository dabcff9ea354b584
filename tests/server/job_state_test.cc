// The transition table over all pairs: the expected matrix is written out here independently of
// server/store/job_state.cc, so a change to either shows up as a diff in review.
#include "server/store/job_state.h"

#include <gtest/gtest.h>

#include <map>
#include <set>
#include <utility>

namespace adctl {
namespace {

using S = JobState;

const std::map<S, std::set<S>>& ExpectedTable() {
  static const auto* table = new std::map<S, std::set<S>>{
      {S::kQueued, {S::kStarting, S::kPaused, S::kCancelled, S::kFailed}},
      {S::kStarting,
       {S::kRunning, S::kSucceeded, S::kFailed, S::kRestarting, S::kCancelling, S::kPausing}},
      {S::kRunning, {S::kSucceeded, S::kFailed, S::kRestarting, S::kCancelling, S::kPausing}},
      {S::kRestarting, {S::kStarting, S::kFailed, S::kCancelling, S::kCancelled, S::kPaused}},
      {S::kCancelling, {S::kCancelled, S::kSucceeded}},
      {S::kPausing, {S::kPaused, S::kSucceeded, S::kCancelling, S::kFailed}},
      {S::kPaused, {S::kQueued, S::kCancelled}},
      {S::kSucceeded, {}},
      {S::kFailed, {}},
      {S::kCancelled, {}},
  };
  return *table;
}

TEST(JobStateTest, TransitionTableOverAllPairs) {
  int allowed = 0;
  for (S from : kAllJobStates) {
    for (S to : kAllJobStates) {
      const bool expected = ExpectedTable().at(from).count(to) > 0;
      Status st = CheckTransition(from, to);
      EXPECT_EQ(st.ok(), expected) << JobStateName(from) << " -> " << JobStateName(to);
      if (!st.ok()) {
        EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition);
        EXPECT_NE(st.message().find(JobStateName(from)), std::string::npos) << st.message();
        EXPECT_NE(st.message().find(JobStateName(to)), std::string::npos) << st.message();
      }
      allowed += st.ok();
    }
  }
  EXPECT_EQ(allowed, 28);
}

TEST(JobStateTest, TerminalStatesHaveNoExitAndNoLiveAttempt) {
  for (S s : kAllJobStates) {
    if (IsTerminal(s)) {
      EXPECT_TRUE(ExpectedTable().at(s).empty()) << JobStateName(s);
      EXPECT_FALSE(HasLiveAttempt(s)) << JobStateName(s);
    }
  }
  EXPECT_FALSE(IsTerminal(S::kPaused));
  EXPECT_FALSE(HasLiveAttempt(S::kPaused));
  EXPECT_FALSE(HasLiveAttempt(S::kQueued));
}

TEST(JobStateTest, EveryNonTerminalStateCanEnd) {
  // From each non-terminal state some path reaches a terminal state (no trap states).
  for (S start : kAllJobStates) {
    std::set<S> seen{start};
    std::vector<S> frontier{start};
    bool reaches_terminal = IsTerminal(start);
    while (!frontier.empty() && !reaches_terminal) {
      S s = frontier.back();
      frontier.pop_back();
      for (S to : kAllJobStates) {
        if (CheckTransition(s, to).ok() && seen.insert(to).second) {
          reaches_terminal |= IsTerminal(to);
          frontier.push_back(to);
        }
      }
    }
    EXPECT_TRUE(reaches_terminal) << JobStateName(start);
  }
}

TEST(JobStateTest, NamesRoundTrip) {
  for (S s : kAllJobStates) {
    auto parsed = JobStateFromName(JobStateName(s));
    ASSERT_TRUE(parsed.has_value());
    EXPECT_EQ(*parsed, s);
  }
  EXPECT_EQ(JobStateFromName("running"), S::kRunning);
  EXPECT_EQ(JobStateFromName("JOB_STATE_RUNNING"), S::kRunning);
  EXPECT_EQ(JobStateFromName("job_state_paused"), S::kPaused);
  EXPECT_FALSE(JobStateFromName("JOB_STATE_").has_value());
  EXPECT_FALSE(JobStateFromName("bogus").has_value());
}

}  // namespace
}  // namespace adctl
