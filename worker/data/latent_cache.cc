#include "worker/data/latent_cache.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/fs_util.h"
#include "common/json_errors.h"

namespace adctl {

namespace fs = std::filesystem;

std::string CacheShardName(int64_t shard) {
  char name[64];
  std::snprintf(name, sizeof(name), "%s/shard-%05lld.safetensors", kCacheShardDir,
                static_cast<long long>(shard));
  return name;
}

Result<LatentCacheIndex> ReadLatentCacheIndex(const std::string& dir) {
  const fs::path path = fs::path(dir) / kCacheIndexFile;
  std::ifstream in(path);
  if (!in) return NotFound(path.string() + ": no cache index");
  std::stringstream text;
  text << in.rdbuf();
  LatentCacheIndex index;
  try {
    const auto j = nlohmann::json::parse(text.str());
    if (j.value("format", std::string()) != "adctl-latent-cache") {
      return InvalidArgument(path.string() + ": not an adctl latent cache index");
    }
    index.settings_hash = j.at("settings_hash").get<std::string>();
    index.settings = j.at("settings");
    index.scaling_factor = j.at("scaling_factor").get<double>();
    for (const auto& s : j.at("shards")) {
      index.shards.push_back({s.at("file").get<std::string>(), s.at("clips").get<int64_t>()});
    }
    index.clips = j.at("clips").get<int64_t>();
    index.skipped = j.at("skipped").get<std::map<std::string, int64_t>>();
    for (const auto& [reason, n] : index.skipped) index.skipped_total += n;
  } catch (const std::exception& e) {
    return InvalidArgument(path.string() +
                           ": malformed cache index: " + JsonErrorWithoutContent(e));
  }
  return index;
}

Status WriteLatentCacheIndex(const std::string& dir, const LatentCacheIndex& index) {
  nlohmann::json shards = nlohmann::json::array();
  for (const auto& s : index.shards) shards.push_back({{"file", s.file}, {"clips", s.clips}});
  const nlohmann::json j = {{"format", "adctl-latent-cache"},
                            {"version", 1},
                            {"settings_hash", index.settings_hash},
                            {"settings", index.settings},
                            {"scaling_factor", index.scaling_factor},
                            {"clips", index.clips},
                            {"skipped", index.skipped},
                            {"shards", shards}};
  return WriteFileAtomically((fs::path(dir) / kCacheIndexFile).string(), j.dump(2) + "\n");
}

}  // namespace adctl
