// The launchers an adctld runs, by the spec's resources.launcher (LauncherKind).
//
// adctld registers each launcher it runs once, at start-up (server/main.cc), and names the
// default for specs that name none (--launcher). A kind it knows of but does not run (Slurm
// without --slurm) is registered as unavailable with how to enable it, so that a job naming it
// is refused with that hint. The rest of the coordinator asks the registry, never a launcher by
// name: a third launcher is its own file plus its registration in main.cc (and its kind in
// common/job_spec's LauncherKind table).
#pragma once

#include <initializer_list>
#include <map>
#include <string>
#include <vector>

#include "common/job_spec.h"
#include "common/status.h"
#include "server/launcher/launcher.h"

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

}  // namespace adctl
