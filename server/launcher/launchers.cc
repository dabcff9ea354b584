#include "server/launcher/launchers.h"

#include <utility>

namespace adctl {

Launchers::Launchers(std::initializer_list<Launcher*> launchers) {
  for (Launcher* l : launchers) Add(l);
  if (launchers.size() > 0) default_ = (*launchers.begin())->kind();
}

void Launchers::Add(Launcher* launcher) {
  launchers_[launcher->kind()] = launcher;
  unavailable_.erase(launcher->kind());
}

void Launchers::AddUnavailable(LauncherKind kind, std::string how_to_enable) {
  if (!launchers_.count(kind)) unavailable_[kind] = std::move(how_to_enable);
}

LauncherKind Launchers::Resolve(LauncherKind kind) const {
  return kind == LauncherKind::kDefault ? default_ : kind;
}

Launcher* Launchers::Find(LauncherKind kind) const {
  auto it = launchers_.find(Resolve(kind));
  return it == launchers_.end() ? nullptr : it->second;
}

Result<Launcher*> Launchers::ForSpec(const ResourceSpec& resources) const {
  const LauncherKind kind = Resolve(resources.launcher);
  Launcher* launcher = Find(kind);
  if (launcher == nullptr) {
    return InvalidArgument(
        "resources.launcher: " + Name(kind) +
        (resources.launcher == LauncherKind::kDefault ? " (adctld's default)" : "") + ", but " +
        WhyMissing(kind));
  }
  ADCTL_RETURN_IF_ERROR(launcher->CheckResources(resources));
  return launcher;
}

std::string Launchers::WhyMissing(LauncherKind kind) const {
  auto hint = unavailable_.find(kind);
  return "this adctld has no " + Name(kind) + " launcher (it has: " + Names() + ")" +
         (hint == unavailable_.end() ? "" : "; " + hint->second);
}

bool Launchers::OnAdctldDevices(LauncherKind kind) const {
  Launcher* launcher = Find(kind);
  return launcher != nullptr && launcher->OnAdctldDevices();
}

std::vector<Launcher*> Launchers::All() const {
  std::vector<Launcher*> all;
  for (const auto& [kind, launcher] : launchers_) all.push_back(launcher);
  return all;
}

std::string Launchers::Names() const {
  std::string names;
  for (const auto& [kind, launcher] : launchers_) {
    names += (names.empty() ? "" : ", ") + Name(kind);
  }
  return names.empty() ? "none" : names;
}

// ---- The plugins: one line per kind; each is defined in its launcher's file.

std::unique_ptr<LauncherPlugin> LocalLauncherPlugin();
std::unique_ptr<LauncherPlugin> SlurmLauncherPlugin();

std::vector<std::unique_ptr<LauncherPlugin>> LauncherPlugins() {
  std::vector<std::unique_ptr<LauncherPlugin>> plugins;
  for (auto* make : {LocalLauncherPlugin, SlurmLauncherPlugin}) plugins.push_back(make());
  return plugins;
}

Result<std::vector<std::unique_ptr<Launcher>>> StartLaunchers(
    const std::vector<std::unique_ptr<LauncherPlugin>>& plugins, LauncherKind default_kind,
    const LauncherHost& host, Launchers* launchers) {
  std::vector<std::unique_ptr<Launcher>> started;
  for (const auto& plugin : plugins) {
    if (!plugin->Enabled() && plugin->kind() != default_kind) {
      launchers->AddUnavailable(plugin->kind(), "start adctld with " + plugin->EnableFlag() +
                                                    ", or a `" + plugin->name() +
                                                    ":` section in its --config file");
      continue;
    }
    auto launcher = plugin->Start(host);
    if (!launcher.ok()) return launcher.status();
    launchers->Add(launcher->get());
    started.push_back(std::move(launcher).value());
  }
  launchers->SetDefault(default_kind);
  return started;
}

}  // namespace adctl
