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

std::string CacheBucketDir(int64_t width, int64_t height, int64_t frames) {
  return "buckets/" + std::to_string(frames) + "x" + std::to_string(height) + "x" +
         std::to_string(width);
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
    if (j.contains("buckets")) {
      for (const auto& b : j.at("buckets")) {
        CacheBucketEntry e;
        e.dir = b.at("dir").get<std::string>();
        e.width = b.at("width").get<int64_t>();
        e.height = b.at("height").get<int64_t>();
        e.frames = b.at("frames").get<int64_t>();
        e.clips = b.at("clips").get<int64_t>();
        if (e.dir.empty() || e.dir.front() == '/' || e.dir.find("..") != std::string::npos) {
          return InvalidArgument(path.string() + ": bucket directory '" + e.dir +
                                 "' is not inside the cache");
        }
        index.buckets.push_back(std::move(e));
      }
    }
  } catch (const std::exception& e) {
    return InvalidArgument(path.string() +
                           ": malformed cache index: " + JsonErrorWithoutContent(e));
  }
  return index;
}

Status WriteLatentCacheIndex(const std::string& dir, const LatentCacheIndex& index) {
  nlohmann::json shards = nlohmann::json::array();
  for (const auto& s : index.shards) shards.push_back({{"file", s.file}, {"clips", s.clips}});
  nlohmann::json j = {{"format", "adctl-latent-cache"},
                      {"version", 1},
                      {"settings_hash", index.settings_hash},
                      {"settings", index.settings},
                      {"scaling_factor", index.scaling_factor},
                      {"clips", index.clips},
                      {"skipped", index.skipped},
                      {"shards", shards}};
  if (!index.buckets.empty()) {
    nlohmann::json buckets = nlohmann::json::array();
    for (const auto& b : index.buckets) {
      buckets.push_back({{"dir", b.dir},
                         {"width", b.width},
                         {"height", b.height},
                         {"frames", b.frames},
                         {"clips", b.clips}});
    }
    j["buckets"] = std::move(buckets);
  }
  return WriteFileAtomically((fs::path(dir) / kCacheIndexFile).string(), j.dump(2) + "\n");
}

}  // namespace adctl
