// The local launcher with real processes (/bin/sh, /bin/sleep): process groups, exit files,
// SIGTERM/SIGKILL and no orphans.
#include "server/launcher/launcher.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <thread>

#include "server/launcher/process.h"
#include "tests/testing/temp_dir.h"

namespace adctl {
namespace {

class LauncherTest : public ::testing::Test {
 protected:
  RankLaunch Shell(const std::string& script) {
    RankLaunch l;
    l.executable = "/bin/sh";
    l.argv = {"sh", "-c", script};
    l.env = {{"PATH", "/usr/bin:/bin"}, {"RANK", "3"}};
    l.log_path = dir_ + "/logs/rank.log";
    l.exit_path = dir_ + "/logs/rank.exit";
    return l;
  }
  // Waits for the shepherd (our child) and returns its wait status.
  int Reap(pid_t pid) {
    int status = 0;
    EXPECT_EQ(waitpid(pid, &status, 0), pid);
    return status;
  }
  bool WaitGone(pid_t pgid, int ms = 5000) {
    for (int i = 0; i < ms / 20; ++i) {
      if (!ProcessGroupExists(pgid)) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }
  std::string ReadFile(const std::string& path) {
    std::ifstream in(path);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  }
  TempDir tmp_;  // first: removed after everything that uses it
  const std::string dir_ = tmp_.path();
  LocalLauncher launcher_;
};

TEST_F(LauncherTest, ExitCodeEnvAndLogReachTheirFiles) {
  auto r = launcher_.Launch(Shell("echo rank=$RANK; echo oops >&2; exit 3"));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_GT(r->start_time, 0u);
  int status = Reap(r->pgid);
  EXPECT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 3);
  auto exit = ReadExitFile(dir_ + "/logs/rank.exit");
  ASSERT_TRUE(exit.ok());
  EXPECT_EQ(exit->exit_code, 3);
  EXPECT_EQ(exit->signal, 0);
  EXPECT_EQ(ReadFile(dir_ + "/logs/rank.log"), "rank=3\noops\n");
}

TEST_F(LauncherTest, RunsInItsOwnProcessGroupAndSigtermReachesTheWorker) {
  auto r = launcher_.Launch(Shell("exec sleep 30"));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(getpgid(r->pgid), r->pgid);
  EXPECT_NE(getpgid(r->pgid), getpgrp());
  EXPECT_TRUE(ProcessAlive(r->pgid, r->start_time));
  EXPECT_FALSE(ProcessAlive(r->pgid, r->start_time + 1));  // pid reuse guard
  ASSERT_TRUE(launcher_.Signal(r->pgid, SIGTERM).ok());
  int status = Reap(r->pgid);
  EXPECT_EQ(WEXITSTATUS(status), 128 + SIGTERM);  // the shepherd survived to report it
  auto exit = ReadExitFile(dir_ + "/logs/rank.exit");
  ASSERT_TRUE(exit.ok());
  EXPECT_EQ(exit->signal, SIGTERM);
  EXPECT_TRUE(WaitGone(r->pgid));
}

TEST_F(LauncherTest, SigkillOfTheGroupLeavesNoOrphan) {
  // A worker that ignores SIGTERM and has a child of its own.
  auto r = launcher_.Launch(Shell("trap '' TERM; sleep 30 & sleep 30; wait"));
  ASSERT_TRUE(r.ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  ASSERT_TRUE(launcher_.Signal(r->pgid, SIGTERM).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_TRUE(ProcessGroupExists(r->pgid));  // SIGTERM ignored
  ASSERT_TRUE(launcher_.Signal(r->pgid, SIGKILL).ok());
  int status = Reap(r->pgid);
  EXPECT_TRUE(WIFSIGNALED(status));
  EXPECT_TRUE(WaitGone(r->pgid));
  // Signalling a group that is gone is not an error.
  EXPECT_TRUE(launcher_.Signal(r->pgid, SIGKILL).ok());
}

TEST_F(LauncherTest, WorkerKilledByASignalIsReported) {
  auto r = launcher_.Launch(Shell("kill -9 $$"));
  ASSERT_TRUE(r.ok());
  Reap(r->pgid);
  auto exit = ReadExitFile(dir_ + "/logs/rank.exit");
  ASSERT_TRUE(exit.ok());
  EXPECT_EQ(exit->signal, SIGKILL);
  EXPECT_EQ(exit->ToString(), "killed by signal 9 (Killed)");
}

TEST_F(LauncherTest, MissingBinaryIsAClearError) {
  RankLaunch l = Shell("true");
  l.executable = dir_ + "/no-such-adworker";
  auto r = launcher_.Launch(l);
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_NE(r.status().message().find("no-such-adworker"), std::string::npos);
  EXPECT_EQ(ResolveWorkerBinary(dir_ + "/nope").status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(ResolveWorkerBinary("/bin/sh").ok());
}

}  // namespace
}  // namespace adctl
