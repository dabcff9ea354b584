#include "worker/dist/directory_kv_store.h"

#include <unistd.h>

#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>
#include <thread>

namespace adctl {
namespace {

// Keys may hold '/', ':' and other characters a file name cannot; keep [A-Za-z0-9._-] and write
// every other byte as %XX, so distinct keys stay distinct files.
std::string EncodeKey(const std::string& key) {
  static const char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : key) {
    if (std::isalnum(c) || c == '.' || c == '_' || c == '-') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  if (out.empty() || out[0] == '.') out = "%" + out;  // never hidden, never "." or ".."
  return out;
}

class DirectoryKeyValueStore final : public KeyValueStore {
 public:
  explicit DirectoryKeyValueStore(std::string dir) : dir_(std::move(dir)) {}

  Status Set(const std::string& key, const std::string& value) override {
    std::error_code ec;
    std::filesystem::create_directories(dir_, ec);
    if (ec) return Unavailable("rendezvous store: cannot create " + dir_ + ": " + ec.message());
    const std::string final_path = dir_ + "/" + EncodeKey(key);
    // Temporary names start with '.', which EncodeKey never produces: no clash with keys.
    const std::string temp_path = dir_ + "/.tmp." + std::to_string(::getpid()) + "." +
                                  std::to_string(next_temp_.fetch_add(1)) + "." + EncodeKey(key);
    {
      std::ofstream out(temp_path, std::ios::binary | std::ios::trunc);
      out.write(value.data(), static_cast<std::streamsize>(value.size()));
      out.flush();
      if (!out) return Unavailable("rendezvous store: cannot write " + temp_path);
    }
    if (std::rename(temp_path.c_str(), final_path.c_str()) != 0) {
      const std::string reason = std::strerror(errno);
      std::remove(temp_path.c_str());
      return Unavailable("rendezvous store: cannot rename into " + final_path + ": " + reason);
    }
    return Status::Ok();
  }

  Result<std::string> Get(const std::string& key, std::chrono::milliseconds timeout) override {
    const std::string path = dir_ + "/" + EncodeKey(key);
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    auto pause = std::chrono::milliseconds(1);
    while (true) {
      std::ifstream in(path, std::ios::binary);
      if (in) {
        std::ostringstream contents;
        contents << in.rdbuf();
        return contents.str();
      }
      const auto now = std::chrono::steady_clock::now();
      if (now >= deadline) {
        return Status(StatusCode::kDeadlineExceeded,
                      "rendezvous store: key '" + key + "' not set within " +
                          std::to_string(timeout.count()) + " ms (directory " + dir_ + ")");
      }
      std::this_thread::sleep_for(
          std::min<std::chrono::steady_clock::duration>(pause, deadline - now));
      pause = std::min(pause * 2, std::chrono::milliseconds(20));
    }
  }

 private:
  const std::string dir_;
  std::atomic<uint64_t> next_temp_{0};
};

}  // namespace

std::unique_ptr<KeyValueStore> MakeDirectoryKeyValueStore(const std::string& dir) {
  return std::make_unique<DirectoryKeyValueStore>(dir);
}

}  // namespace adctl
