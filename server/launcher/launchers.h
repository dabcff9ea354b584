// The launchers an adctld runs, by the spec's resources.launcher (LauncherKind).
//
// Each kind of launcher comes as a `LauncherPlugin`, defined in its launcher's own file (the
// local one in local_launcher.cc, Slurm's in slurm_launcher.cc) and listed once, in
// LauncherPlugins() (launchers.cc): its adctld flags, the flag that turns it on, and how it
// starts. adctld adds every plugin's flags, then StartLaunchers() starts those turned on (and
// the default, --launcher) into the `Launchers` registry; a kind it knows of but does not run
// (Slurm without --slurm) is registered as unavailable with how to turn it on, so that a job
// naming it is refused with that hint. The rest of the coordinator asks the registry, never a
// launcher by name. A third launcher is its own file (its Launcher and its plugin), one line in
// LauncherPlugins(), and its LauncherKind value and name (common/job_spec.h, job_spec_enums.cc).
#pragma once

#include <initializer_list>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/job_spec.h"
#include "common/status.h"
#include "server/launcher/launcher.h"

namespace CLI {
class App;
}  // namespace CLI

namespace adctl {

class Launchers {
 public:
  Launchers() = default;
  // The given launchers (not owned), the first the default.
  Launchers(std::initializer_list<Launcher*> launchers);

  // Registers `launcher` (not owned; it outlives the registry's users) under its kind.
  void Add(Launcher* launcher);
  // A kind adctld knows but does not run; `how_to_enable` ends the refusal of a job naming it.
  void AddUnavailable(LauncherKind kind, std::string how_to_enable);
  // The launcher of specs whose resources.launcher is unset (it must be registered).
  void SetDefault(LauncherKind kind) { default_ = kind; }
  LauncherKind default_kind() const { return default_; }

  // `kind` with kDefault resolved to the default.
  LauncherKind Resolve(LauncherKind kind) const;
  // The registered launcher of `kind` (kDefault: the default); null when there is none.
  Launcher* Find(LauncherKind kind) const;
  // The launcher a spec's resources ask for, their checks passed; an error naming the field
  // (resources.launcher, or the one the launcher refuses) otherwise.
  Result<Launcher*> ForSpec(const ResourceSpec& resources) const;
  // "this adctld has no slurm launcher (it has: local); start adctld with --slurm, ...".
  std::string WhyMissing(LauncherKind kind) const;
  // Whether `kind`'s ranks run on adctld's own devices (false when it is not registered).
  bool OnAdctldDevices(LauncherKind kind) const;
  // "local, slurm": the registered kinds, for messages.
  std::string Names() const;
  // Every registered launcher.
  std::vector<Launcher*> All() const;

 private:
  std::map<LauncherKind, Launcher*> launchers_;
  std::map<LauncherKind, std::string> unavailable_;  // kind → how to enable it
  LauncherKind default_ = LauncherKind::kLocal;
};

// What a plugin may need of the adctld that starts it.
struct LauncherHost {
  std::string adctld_binary;  // the running adctld, absolute (ranks' shepherd on other nodes)
};

// One kind of launcher, as adctld's flags configure it and its start creates it.
class LauncherPlugin {
 public:
  virtual ~LauncherPlugin() = default;
  virtual LauncherKind kind() const = 0;
  std::string name() const { return Name(kind()); }
  // Registers its flags on adctld's command line ("--slurm-partition"; in adctld.yaml a
  // `slurm:` section holds them without the prefix).
  virtual void AddFlags(CLI::App* app) { (void)app; }
  // Whether a flag turns it on (else it is always on). That flag is EnableFlag().
  virtual bool HasEnableFlag() const { return false; }
  // `--<name>` ("--slurm"; a `<name>:` section of adctld.yaml sets it too); "" when always on.
  std::string EnableFlag() const { return HasEnableFlag() ? "--" + name() : ""; }
  // Whether the flags turned it on.
  virtual bool Enabled() const { return true; }
  // Creates the launcher from its flags and checks it can work (Slurm answers); an error,
  // naming the flag, fails adctld's start.
  virtual Result<std::unique_ptr<Launcher>> Start(const LauncherHost& host) = 0;
};

// Every kind adctld knows, in the order --help and messages list them (the first always on).
std::vector<std::unique_ptr<LauncherPlugin>> LauncherPlugins();

// Starts each plugin turned on, and `default_kind`'s whatever its flags, into `launchers` (its
// default `default_kind`), the others as unavailable with how to turn them on. The launchers
// started, which `launchers` points to; the first plugin's error otherwise.
Result<std::vector<std::unique_ptr<Launcher>>> StartLaunchers(
    const std::vector<std::unique_ptr<LauncherPlugin>>& plugins, LauncherKind default_kind,
    const LauncherHost& host, Launchers* launchers);

}  // namespace adctl
