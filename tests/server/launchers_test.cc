// The launcher registry: a spec's resources.launcher resolved to the launcher adctld runs (the
// default for an unset one), each launcher's own checks of the spec's resources, and a refusal
// naming what is missing and how to enable it. Real launchers, nothing launched.
#include "server/launcher/launchers.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <CLI/CLI.hpp>

#include "server/launcher/slurm_launcher.h"
#include "tests/testing/temp_dir.h"

namespace adctl {
namespace {

using ::testing::HasSubstr;

TEST(LaunchersTest, AnUnsetLauncherIsTheDefaultAndEachKindFindsItsOwn) {
  LocalLauncher local;
  SlurmLauncher slurm(SlurmOptions{});
  Launchers launchers{&local, &slurm};
  EXPECT_EQ(launchers.default_kind(), LauncherKind::kLocal);
  EXPECT_EQ(launchers.Find(LauncherKind::kDefault), &local);
  EXPECT_EQ(launchers.Find(LauncherKind::kSlurm), &slurm);
  EXPECT_TRUE(launchers.OnAdctldDevices(LauncherKind::kLocal));
  EXPECT_FALSE(launchers.OnAdctldDevices(LauncherKind::kSlurm));
  EXPECT_EQ(launchers.Names(), "local, slurm");

  launchers.SetDefault(LauncherKind::kSlurm);
  ResourceSpec unset;
  auto chosen = launchers.ForSpec(unset);
  ASSERT_TRUE(chosen.ok()) << chosen.status().ToString();
  EXPECT_EQ(*chosen, &slurm);
  EXPECT_EQ((*chosen)->name(), "slurm");
}

TEST(LaunchersTest, AKindAdctldDoesNotRunIsRefusedWithHowToEnableIt) {
  LocalLauncher local;
  Launchers launchers{&local};
  launchers.AddUnavailable(LauncherKind::kSlurm, "start adctld with --slurm");
  ResourceSpec r;
  r.launcher = LauncherKind::kSlurm;
  auto chosen = launchers.ForSpec(r);
  ASSERT_FALSE(chosen.ok());
  EXPECT_EQ(chosen.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(chosen.status().message(),
              HasSubstr("resources.launcher: slurm, but this adctld has no slurm launcher (it "
                        "has: local); start adctld with --slurm"));
  EXPECT_EQ(launchers.Find(LauncherKind::kSlurm), nullptr);
  EXPECT_FALSE(launchers.OnAdctldDevices(LauncherKind::kSlurm));

  // The default itself missing names it as the default.
  launchers.SetDefault(LauncherKind::kSlurm);
  EXPECT_THAT(launchers.ForSpec(ResourceSpec{}).status().message(),
              HasSubstr("resources.launcher: slurm (adctld's default), but"));
}

TEST(LaunchersTest, EachLauncherChecksTheResourcesItCannotHonour) {
  LocalLauncher local;
  SlurmLauncher slurm(SlurmOptions{});
  Launchers launchers{&local, &slurm};

  ResourceSpec two_nodes;  // adctld's default is local
  two_nodes.nodes = 2;
  two_nodes.gpus = 2;
  EXPECT_THAT(launchers.ForSpec(two_nodes).status().message(),
              HasSubstr("resources.nodes / resources.gpus_per_node: multi-node jobs need a "
                        "cluster launcher"));
  two_nodes.launcher = LauncherKind::kSlurm;
  EXPECT_TRUE(launchers.ForSpec(two_nodes).ok());

  ResourceSpec preemptible;
  preemptible.preemptible = true;
  EXPECT_TRUE(launchers.ForSpec(preemptible).ok());
  launchers.SetDefault(LauncherKind::kSlurm);  // the same spec, now under Slurm
  EXPECT_THAT(launchers.ForSpec(preemptible).status().message(),
              HasSubstr("resources.preemptible: applies to jobs on adctld's own devices"));
}

TEST(LaunchersTest, TheSlurmLauncherAsksTheClusterForTheSpecsShape) {
  SlurmOptions o;
  o.gpus = false;
  o.cpus_per_task = 4;
  SlurmLauncher slurm(o);
  ResourceSpec r;
  r.launcher = LauncherKind::kSlurm;
  r.gpus = 8;
  r.nodes = 2;
  r.slurm_partition = "h200";
  r.slurm_extra_args = {"--exclusive"};
  const ClusterResources c = slurm.Cluster(r, 90);
  EXPECT_EQ(c.nodes, 2);
  EXPECT_EQ(c.tasks_per_node, 4);
  EXPECT_FALSE(c.gpus);
  EXPECT_EQ(c.cpus_per_task, 4);
  EXPECT_EQ(c.partition, "h200");
  EXPECT_EQ(c.extra_args, std::vector<std::string>{"--exclusive"});
  EXPECT_EQ(c.grace_seconds, 90);
  EXPECT_EQ(slurm.ClusterJobNoun(), "Slurm job");
}

// adctld's launcher flags as main() parses them: every plugin's flags on one command line.
struct PluginFlags {
  std::vector<std::unique_ptr<LauncherPlugin>> plugins = LauncherPlugins();
  CLI::App app;
  PluginFlags() {
    for (const auto& plugin : plugins) plugin->AddFlags(&app);
  }
  void Parse(std::vector<std::string> args) {
    args.insert(args.begin(), "adctld");
    std::vector<const char*> argv;
    for (const auto& a : args) argv.push_back(a.c_str());
    app.parse(static_cast<int>(argv.size()), argv.data());
  }
};

TEST(LauncherPluginsTest, OnlyTheLaunchersTurnedOnStartAndTheOthersSayHow) {
  PluginFlags flags;
  ASSERT_GE(flags.plugins.size(), 2u);
  EXPECT_EQ(flags.plugins[0]->kind(), LauncherKind::kLocal);  // always on, first
  flags.Parse({});
  Launchers launchers;
  auto started = StartLaunchers(flags.plugins, LauncherKind::kLocal, {"/usr/bin/true"}, &launchers);
  ASSERT_TRUE(started.ok()) << started.status().ToString();
  ASSERT_EQ(started->size(), 1u);
  EXPECT_EQ(launchers.Names(), "local");
  EXPECT_EQ(launchers.Find(LauncherKind::kDefault), (*started)[0].get());
  ResourceSpec r;
  r.launcher = LauncherKind::kSlurm;
  EXPECT_THAT(launchers.ForSpec(r).status().message(),
              HasSubstr("this adctld has no slurm launcher (it has: local); start adctld with "
                        "--slurm, or a `slurm:` section in its --config file"));
}

TEST(LauncherPluginsTest, ALauncherThatCannotWorkFailsTheStartNamingItsFlag) {
  const TempDir tmp;  // no sbatch or squeue in it
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"--slurm", "--slurm-bin-dir", tmp.path()},
        // Naming slurm adctld's default turns it on without --slurm.
        std::vector<std::string>{"--slurm-bin-dir", tmp.path()}}) {
    PluginFlags flags;
    flags.Parse(args);
    const LauncherKind default_kind =
        args[0] == "--slurm" ? LauncherKind::kLocal : LauncherKind::kSlurm;
    Launchers launchers;
    auto started = StartLaunchers(flags.plugins, default_kind, {"/usr/bin/true"}, &launchers);
    ASSERT_FALSE(started.ok());
    EXPECT_THAT(started.status().message(), HasSubstr("--slurm: "));
    EXPECT_THAT(started.status().message(), HasSubstr("is slurmctld up"));
  }
}

}  // namespace
}  // namespace adctl
