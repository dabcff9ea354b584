#include "common/fs_util.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

namespace adctl {
namespace {

Status Errno(const std::string& what, const std::string& path) {
  return Internal(what + " " + path + ": " + std::strerror(errno));
}

Status RemoveBelow(const std::string& dir, int64_t* removed) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return Errno("cannot open directory", dir);
  DIR* d = ::fdopendir(fd);
  if (d == nullptr) {
    Status st = Errno("cannot list", dir);
    ::close(fd);
    return st;
  }
  std::vector<std::string> subdirs;
  Status st = Status::Ok();
  errno = 0;
  while (dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    struct stat s;
    if (::fstatat(fd, name.c_str(), &s, AT_SYMLINK_NOFOLLOW) != 0) {
      if (errno == ENOENT) continue;  // removed meanwhile
      st = Errno("cannot stat", dir + "/" + name);
      break;
    }
    if (S_ISDIR(s.st_mode)) {
      subdirs.push_back(name);
    } else if (::unlinkat(fd, name.c_str(), 0) == 0) {
      ++*removed;
    } else if (errno != ENOENT) {
      st = Errno("cannot remove", dir + "/" + name);
      break;
    }
    errno = 0;
  }
  if (st.ok() && errno != 0) st = Errno("cannot list", dir);
  ::closedir(d);  // closes fd
  if (!st.ok()) return st;
  for (const std::string& name : subdirs) {
    const std::string sub = dir + "/" + name;
    ADCTL_RETURN_IF_ERROR(RemoveBelow(sub, removed));
    if (::rmdir(sub.c_str()) != 0 && errno != ENOENT) return Errno("cannot remove", sub);
    ++*removed;
  }
  return Status::Ok();
}

}  // namespace

Result<int64_t> RemoveTree(const std::string& path) {
  struct stat s;
  if (::lstat(path.c_str(), &s) != 0) {
    if (errno == ENOENT) return int64_t{0};
    return Errno("cannot stat", path);
  }
  if (!S_ISDIR(s.st_mode)) {
    if (::unlink(path.c_str()) != 0 && errno != ENOENT) return Errno("cannot remove", path);
    return int64_t{1};
  }
  int64_t removed = 0;
  ADCTL_RETURN_IF_ERROR(RemoveBelow(path, &removed));
  if (::rmdir(path.c_str()) != 0 && errno != ENOENT) return Errno("cannot remove", path);
  return removed + 1;
}

Status MakePrivateDirectories(const std::string& path) {
  if (path.empty()) return InvalidArgument("MakePrivateDirectories: empty path");
  size_t end = 0;
  while (end != std::string::npos) {
    end = path.find('/', end + 1);
    const std::string prefix = path.substr(0, end);
    if (prefix.empty() || prefix == "/") continue;
    if (::mkdir(prefix.c_str(), 0700) == 0 || errno == EEXIST) continue;
    return Errno("cannot create", prefix);
  }
  struct stat s;
  if (::stat(path.c_str(), &s) != 0 || !S_ISDIR(s.st_mode)) {
    return Internal("cannot create " + path + ": a file of that name is in the way");
  }
  return Status::Ok();
}

std::string ReadFileText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

Status WriteFileText(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  if (!out) return Internal(path + ": write failed");
  return Status::Ok();
}

Status WriteFileAtomically(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Errno("cannot create", tmp);
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const Status failed = Errno("cannot write", tmp);
      ::close(fd);
      return failed;
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) {
    const Status failed = Errno("cannot fsync", tmp);
    ::close(fd);
    return failed;
  }
  if (::close(fd) != 0) return Errno("cannot close", tmp);
  if (::rename(tmp.c_str(), path.c_str()) != 0) return Errno("cannot rename " + tmp + " to", path);
  return Status::Ok();
}

}  // namespace adctl
