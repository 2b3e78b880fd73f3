#include "node_agent/socket_dir.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace phalanx::agent {

absl::StatusOr<SocketDirOwner> ParseSocketDirOwner(absl::string_view spec) {
  const std::vector<absl::string_view> parts = absl::StrSplit(spec, ':');
  uint32_t uid = 0;
  uint32_t gid = 0;
  if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &uid) || !absl::SimpleAtoi(parts[1], &gid)) {
    return absl::InvalidArgumentError(
        absl::StrCat("owner '", spec, "' is not UID:GID (e.g. 65532:65532)"));
  }
  return SocketDirOwner{static_cast<uid_t>(uid), static_cast<gid_t>(gid)};
}

absl::Status PrepareSocketDir(const std::string& dir, SocketDirOwner owner) {
  auto failed = [&](const char* call) {
    return absl::PermissionDeniedError(absl::StrCat(call, "(", dir, "): ", std::strerror(errno)));
  };
  if (mkdir(dir.c_str(), 0750) != 0 && errno != EEXIST) return failed("mkdir");
  struct stat st {};
  if (lstat(dir.c_str(), &st) != 0) return failed("lstat");
  // A link planted in the host folder's place must not hand its target to the agent's user.
  if (!S_ISDIR(st.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat(dir, " is not a folder"));
  }
  // Already handed over (the pod restarted, or the DaemonSet was updated): nothing to do. The
  // init container holds CAP_CHOWN only, so it could not chmod a folder it no longer owns.
  if (st.st_uid == owner.uid && st.st_gid == owner.gid && (st.st_mode & 07777) == 0750) {
    return absl::OkStatus();
  }
  // Otherwise take it back first (CAP_CHOWN), so that the chmod is the owner's own, then set
  // the mode while it is ours (nobody else can write it meanwhile), then hand it over.
  if (st.st_uid != geteuid() && lchown(dir.c_str(), geteuid(), -1) != 0) return failed("chown");
  if (chmod(dir.c_str(), 0750) != 0) return failed("chmod");
  if (lchown(dir.c_str(), owner.uid, owner.gid) != 0) return failed("chown");
  return absl::OkStatus();
}

}  // namespace phalanx::agent
