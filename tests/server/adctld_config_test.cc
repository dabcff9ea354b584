// adctld's YAML configuration file (server/config/adctld_config.h): keys are flag names, maps
// nest them, lists repeat them, the command line overrides the file, unknown keys are errors.
#include "server/config/adctld_config.h"

#include <gtest/gtest.h>

#include <fstream>

#include "tests/testing/temp_dir.h"

namespace adctl {
namespace {

struct Flags {
  std::string listen = "127.0.0.1:50051";
  std::string launcher = "local";
  bool slurm = false;
  std::string partition;
  std::vector<std::string> extra;
  std::vector<std::string> env;
};

// Parses `args` with a config file holding `yaml`, as adctld's main() does.
int Parse(const std::string& yaml, std::vector<std::string> args, Flags* f, std::string* error) {
  const TempDir tmp;
  const std::string config = tmp.file("adctld.yaml");
  std::ofstream(config) << yaml;
  CLI::App app;
  app.config_formatter(std::make_shared<YamlConfig>(std::vector<std::string>{"slurm"}));
  app.set_config("--config");
  app.allow_config_extras(CLI::config_extras_mode::error);
  app.add_option("--listen", f->listen);
  app.add_option("--launcher", f->launcher);
  app.add_flag("--slurm", f->slurm);
  app.add_option("--slurm-partition", f->partition);
  app.add_option("--slurm-extra-arg", f->extra);
  app.add_option("--worker-env", f->env);
  args.insert(args.begin(), {"adctld", "--config", config});
  std::vector<const char*> argv;
  for (auto& a : args) argv.push_back(a.c_str());
  int rc = 0;
  try {
    app.parse(static_cast<int>(argv.size()), argv.data());
  } catch (const CLI::ParseError& e) {
    *error = e.what();
    rc = 1;
  }
  return rc;
}

TEST(AdctldConfigTest, NestedKeysListsAndOverrides) {
  Flags f;
  std::string error;
  ASSERT_EQ(Parse("listen: 0.0.0.0:7000\nlauncher: slurm\nslurm:\n  partition: gpu\n"
                  "  extra-arg: [--exclusive, --mem=0]\nworker-env: {NCCL_DEBUG: WARN}\n",
                  {"--listen", "0.0.0.0:7001"}, &f, &error),
            0)
      << error;
  EXPECT_EQ(f.listen, "0.0.0.0:7001");  // the command line wins
  EXPECT_EQ(f.launcher, "slurm");
  EXPECT_TRUE(f.slurm);  // a slurm: section enables the launcher
  EXPECT_EQ(f.partition, "gpu");
  EXPECT_EQ(f.extra, (std::vector<std::string>{"--exclusive", "--mem=0"}));
  EXPECT_EQ(f.env, (std::vector<std::string>{"NCCL_DEBUG=WARN"}));
}

TEST(AdctldConfigTest, FlagsAndErrors) {
  Flags f;
  std::string error;
  ASSERT_EQ(Parse("slurm: true\n", {}, &f, &error), 0) << error;
  // `slurm: true` is the --slurm flag alone.
  EXPECT_TRUE(f.slurm);
  EXPECT_EQ(Parse("slurm: {partitoin: gpu}\n", {}, &f, &error), 1);
  EXPECT_NE(error.find("slurm-partitoin"), std::string::npos) << error;
  EXPECT_EQ(Parse("listen: [unclosed\n", {}, &f, &error), 1);
  EXPECT_NE(error.find("not valid YAML"), std::string::npos) << error;
}

}  // namespace
}  // namespace adctl
