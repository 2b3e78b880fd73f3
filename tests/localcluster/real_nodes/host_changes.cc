#include "tests/localcluster/real_nodes/host_changes.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "common/process/subprocess.h"
#include "tests/localcluster/envtest_assets.h"
#include "tests/localcluster/real_nodes/node_config.h"
#include "tests/localcluster/text_files.h"

namespace phalanx::localcluster {
namespace {
namespace fs = std::filesystem;  // in the unnamed namespace, as its unity-batch siblings have it
}  // namespace

std::optional<std::vector<std::string>> RunSystemTool(const std::vector<std::string>& argv,
                                                      absl::Duration timeout) {
  process::SubprocessOptions o;
  o.argv = argv;
  o.argv[0] = FindTool(argv[0]);
  o.stderr_path = "/dev/null";
  if (o.argv[0].empty()) return std::nullopt;
  absl::StatusOr<std::unique_ptr<process::Subprocess>> p = process::Subprocess::Start(o);
  if (!p.ok()) return std::nullopt;
  if (!(*p)->Wait(timeout).has_value()) return std::nullopt;
  if ((*p)->ExitCode() != 0) return std::nullopt;
  return (*p)->Lines();
}

namespace {

// Splits an `iptables -S` rule into arguments, honouring double quotes and the backslash
// escapes inside them (the CNI plugins' comments: "name: \"phalanx-node-0\" id: \"...\"").
std::vector<std::string> SplitRule(const std::string& rule) {
  std::vector<std::string> out;
  std::string current;
  bool quoted = false, any = false;
  for (size_t i = 0; i < rule.size(); ++i) {
    const char c = rule[i];
    if (quoted && c == '\\' && i + 1 < rule.size()) {
      current += rule[++i];
    } else if (c == '"') {
      quoted = !quoted;
      any = true;
    } else if (c == ' ' && !quoted) {
      if (any) out.push_back(current);
      current.clear();
      any = false;
    } else {
      current += c;
      any = true;
    }
  }
  if (any) out.push_back(current);
  return out;
}

bool IsOurChain(const std::string& chain) {
  return absl::StartsWith(chain, "KUBE-") || absl::StartsWith(chain, "CNI-");
}

// Processes whose command line names `marker` (never this process).
std::vector<pid_t> ProcessesNaming(const std::string& marker) {
  std::vector<pid_t> out;
  DIR* proc = opendir("/proc");
  if (proc == nullptr) return out;
  while (dirent* e = readdir(proc)) {
    int pid = 0;
    if (!absl::SimpleAtoi(e->d_name, &pid) || pid == getpid()) continue;
    std::string cmdline = ReadTextFile(absl::StrCat("/proc/", pid, "/cmdline"));
    std::replace(cmdline.begin(), cmdline.end(), '\0', ' ');
    if (absl::StrContains(cmdline, marker)) out.push_back(pid);
  }
  closedir(proc);
  return out;
}

// Our cgroups (every node's root) in every hierarchy.
std::vector<std::string> NodeCgroups() {
  std::vector<std::string> out;
  std::error_code ec;
  for (const std::string& h : CgroupHierarchies()) {
    for (const auto& entry : fs::directory_iterator(h, ec)) {
      if (entry.is_directory(ec) &&
          absl::StartsWith(entry.path().filename().string(), kCgroupPrefix)) {
        out.push_back(entry.path().string());
      }
    }
  }
  return out;
}

std::vector<std::string> CgroupTree(const std::string& root) {
  std::vector<std::string> out = {root};
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(root, ec); !ec && it != fs::end(it);
       it.increment(ec)) {
    if (it->is_directory(ec)) out.push_back(it->path().string());
  }
  return out;
}

std::vector<std::string> NodeBridgesAndVeths() {
  std::vector<std::string> veths, bridges;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator("/sys/class/net", ec)) {
    const std::string name = entry.path().filename().string();
    if (absl::StartsWith(name, kBridgePrefix)) {
      bridges.push_back(name);
      continue;
    }
    const fs::path master = entry.path() / "master";
    if (fs::is_symlink(master, ec) &&
        absl::StartsWith(fs::read_symlink(master, ec).filename().string(), kBridgePrefix)) {
      veths.push_back(name);
    }
  }
  veths.insert(veths.end(), bridges.begin(), bridges.end());  // ports before their bridge
  return veths;
}

std::vector<std::string> MountsUnder(const std::string& dir) {
  std::vector<std::string> out;
  std::ifstream in("/proc/self/mounts");
  std::string line;
  while (std::getline(in, line)) {
    std::vector<std::string> fields = absl::StrSplit(line, ' ');
    if (fields.size() > 1 && absl::StartsWith(fields[1], dir + "/")) out.push_back(fields[1]);
  }
  std::sort(out.rbegin(), out.rend());  // deepest first
  return out;
}

std::vector<std::string> OurIptablesChains(const std::string& table) {
  std::vector<std::string> out;
  std::optional<std::vector<std::string>> rules = RunSystemTool({"iptables", "-t", table, "-S"});
  if (!rules.has_value()) return out;
  for (const std::string& rule : *rules) {
    std::vector<std::string> args = SplitRule(rule);
    if (args.size() == 2 && args[0] == "-N" && IsOurChain(args[1])) out.push_back(args[1]);
  }
  return out;
}

constexpr const char* kTables[] = {"nat", "filter", "mangle"};

}  // namespace

std::vector<std::string> CgroupHierarchies() {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator("/sys/fs/cgroup", ec)) {
    if (fs::exists(entry.path() / "cgroup.procs", ec)) out.push_back(entry.path().string());
  }
  if (out.empty() && fs::exists("/sys/fs/cgroup/cgroup.procs", ec)) {
    out.push_back("/sys/fs/cgroup");  // pure cgroup v2
  }
  return out;
}

const std::vector<std::string>& SysctlsNodesChange() {
  static const std::vector<std::string> kSysctls = {"net/ipv4/ip_forward", "vm/overcommit_memory",
                                                    "kernel/panic", "kernel/panic_on_oops"};
  return kSysctls;
}

std::string FormatHostRecord(const HostRecord& record) {
  std::string out = absl::StrCat("owner ", record.owner, "\nwork_dir ", record.work_dir, "\n");
  for (const auto& [key, value] : record.sysctls)
    absl::StrAppend(&out, "sysctl ", key, " ", value, "\n");
  for (const std::string& dir : record.created_dirs)
    absl::StrAppend(&out, "created_dir ", dir, "\n");
  return out;
}

absl::StatusOr<HostRecord> ParseHostRecord(const std::string& text) {
  HostRecord record;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    std::vector<std::string> f = absl::StrSplit(line, ' ');
    if (f.size() == 2 && f[0] == "owner" && absl::SimpleAtoi(f[1], &record.owner)) continue;
    if (f.size() == 2 && f[0] == "work_dir" && absl::StartsWith(f[1], "/")) {
      record.work_dir = f[1];
    } else if (f.size() == 3 && f[0] == "sysctl") {
      record.sysctls[f[1]] = f[2];
    } else if (f.size() == 2 && f[0] == "created_dir") {
      record.created_dirs.push_back(f[1]);
    } else {
      return absl::InvalidArgumentError(absl::StrCat("bad host record line \"", line, "\""));
    }
  }
  if (record.work_dir.empty()) return absl::InvalidArgumentError("host record without work_dir");
  return record;
}

absl::StatusOr<std::unique_ptr<HostLock>> HostLock::Acquire(const std::string& state_dir,
                                                            absl::Duration wait) {
  std::error_code ec;
  fs::create_directories(state_dir, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot create ", state_dir, ": ", ec.message()));
  const std::string lock_path = state_dir + "/real-nodes.lock";
  const int fd = open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return absl::InternalError(absl::StrCat("cannot open ", lock_path));
  const absl::Time deadline = absl::Now() + wait;
  while (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    if (absl::Now() >= deadline) {
      std::string holder = ReadTextFile(lock_path);
      close(fd);
      return absl::FailedPreconditionError(absl::StrCat(
          "another real-node local cluster runs on this machine (pid ",
          std::string(absl::StripAsciiWhitespace(holder)),
          "): one at a time, as their pod subnets, bridges and iptables chains are per machine"));
    }
    // A bounded wait for a holder that is finishing (flock has no timeout of its own).
    absl::SleepFor(absl::Milliseconds(100));
  }
  const std::string pid = absl::StrCat(getpid(), "\n");
  if (ftruncate(fd, 0) != 0 || pwrite(fd, pid.data(), pid.size(), 0) < 0) {
    close(fd);
    return absl::InternalError(absl::StrCat("cannot write ", lock_path));
  }
  return std::unique_ptr<HostLock>(new HostLock(fd, state_dir + "/real-nodes.record"));
}

HostLock::~HostLock() { close(fd_); }

absl::StatusOr<HostRecord> HostLock::Leftover() const {
  std::error_code ec;
  if (!fs::exists(record_path_, ec)) return absl::NotFoundError("no record");
  return ParseHostRecord(ReadTextFile(record_path_));
}

absl::Status HostLock::Save(const HostRecord& record) const {
  const std::string tmp = record_path_ + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << FormatHostRecord(record);
    if (!out.good()) return absl::InternalError(absl::StrCat("cannot write ", tmp));
  }
  if (std::rename(tmp.c_str(), record_path_.c_str()) != 0) {
    return absl::InternalError(absl::StrCat("cannot write ", record_path_));
  }
  return absl::OkStatus();
}

void HostLock::Forget() const { unlink(record_path_.c_str()); }

std::vector<std::string> UndoHostChanges(const HostRecord& record) {
  std::vector<std::string> problems;
  const std::string marker = record.work_dir + "/nodes/";
  // Frozen containers (stop-pod) cannot die until thawed.
  for (const std::string& root : NodeCgroups()) {
    for (const std::string& group : CgroupTree(root)) {
      if (fs::exists(group + "/freezer.state")) std::ofstream(group + "/freezer.state") << "THAWED";
    }
  }
  // Processes, until none is left: a dying containerd may still have been starting a shim.
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (true) {
    std::vector<pid_t> pids = ProcessesNaming(marker);
    for (const std::string& root : NodeCgroups()) {
      for (const std::string& group : CgroupTree(root)) {
        for (absl::string_view line : absl::StrSplit(ReadTextFile(group + "/cgroup.procs"), '\n')) {
          int pid = 0;
          if (absl::SimpleAtoi(line, &pid) && pid != getpid()) pids.push_back(pid);
        }
      }
    }
    if (pids.empty()) break;
    for (pid_t pid : pids) kill(pid, SIGKILL);
    if (absl::Now() > deadline) {
      problems.push_back(absl::StrCat(pids.size(), " processes of the nodes would not die"));
      break;
    }
    // Bounded wait for SIGKILLed processes to be gone (a clean-up path, not a loop on state).
    absl::SleepFor(absl::Milliseconds(100));
  }
  for (const std::string& mount : MountsUnder(record.work_dir)) {
    if (umount2(mount.c_str(), MNT_DETACH) != 0 && errno != EINVAL && errno != ENOENT) {
      problems.push_back(absl::StrCat("cannot unmount ", mount, ": ", strerror(errno)));
    }
  }
  // A cgroup whose last process just died can take a moment to become removable.
  for (const std::string& root : NodeCgroups()) {
    std::vector<std::string> tree = CgroupTree(root);
    std::sort(tree.rbegin(), tree.rend());  // children first
    for (const std::string& group : tree) {
      const absl::Time until = absl::Now() + absl::Seconds(5);
      while (rmdir(group.c_str()) != 0 && errno == EBUSY && absl::Now() < until) {
        absl::SleepFor(absl::Milliseconds(50));
      }
      std::error_code ec;
      if (fs::exists(group, ec)) problems.push_back("cannot remove cgroup " + group);
    }
  }
  for (const std::string& link : NodeBridgesAndVeths()) {
    if (!RunSystemTool({"ip", "link", "del", link}).has_value()) {
      std::error_code ec;
      if (fs::exists("/sys/class/net/" + link, ec))
        problems.push_back("cannot delete link " + link);
    }
  }
  for (const char* table : kTables) {
    std::optional<std::vector<std::string>> rules = RunSystemTool({"iptables", "-t", table, "-S"});
    if (!rules.has_value()) continue;
    // Jumps from the built-in chains into ours first, then our chains (flushed, then deleted).
    for (const std::string& rule : *rules) {
      std::vector<std::string> args = SplitRule(rule);
      if (args.size() < 2 || args[0] != "-A" || IsOurChain(args[1])) continue;
      auto jump = std::find(args.begin(), args.end(), "-j");
      if (jump == args.end() || jump + 1 == args.end() || !IsOurChain(*(jump + 1))) continue;
      std::vector<std::string> argv = {"iptables", "-t", table, "-D"};
      argv.insert(argv.end(), args.begin() + 1, args.end());
      if (!RunSystemTool(argv).has_value())
        problems.push_back(absl::StrCat("cannot delete rule ", rule));
    }
    const std::vector<std::string> chains = OurIptablesChains(table);
    for (const std::string& chain : chains) RunSystemTool({"iptables", "-t", table, "-F", chain});
    for (const std::string& chain : chains) {
      if (!RunSystemTool({"iptables", "-t", table, "-X", chain}).has_value()) {
        problems.push_back(absl::StrCat("cannot delete iptables chain ", table, "/", chain));
      }
    }
  }
  for (const auto& [key, value] : record.sysctls) {
    std::ofstream out("/proc/sys/" + key);
    out << value;
    if (!out.good()) problems.push_back(absl::StrCat("cannot restore sysctl ", key, "=", value));
  }
  for (const std::string& dir : record.created_dirs) rmdir(dir.c_str());
  return problems;
}

std::vector<std::string> FindHostLeftovers(const std::string& work_dir) {
  std::vector<std::string> out;
  for (pid_t pid : ProcessesNaming(work_dir + "/nodes/")) {
    std::string cmdline = ReadTextFile(absl::StrCat("/proc/", pid, "/cmdline"));
    std::replace(cmdline.begin(), cmdline.end(), '\0', ' ');
    out.push_back(absl::StrCat("process ", pid, ": ", cmdline.substr(0, 120)));
  }
  for (const std::string& m : MountsUnder(work_dir)) out.push_back("mount " + m);
  for (const std::string& c : NodeCgroups()) out.push_back("cgroup " + c);
  for (const std::string& l : NodeBridgesAndVeths()) out.push_back("link " + l);
  for (const char* table : kTables) {
    for (const std::string& chain : OurIptablesChains(table)) {
      out.push_back(absl::StrCat("iptables chain ", table, "/", chain));
    }
  }
  return out;
}

int RunJanitor(const std::string& state_dir, pid_t owner) {
  const int pidfd = static_cast<int>(syscall(SYS_pidfd_open, owner, 0));
  if (pidfd >= 0) {
    pollfd p{pidfd, POLLIN, 0};
    while (poll(&p, 1, -1) < 0 && errno == EINTR) {
    }
    close(pidfd);
  } else if (errno != ESRCH) {
    return 1;  // cannot watch it: the next start sweeps instead
  }
  // A new harness that already holds the lock has undone the record itself.
  absl::StatusOr<std::unique_ptr<HostLock>> lock = HostLock::Acquire(state_dir);
  if (!lock.ok()) return 0;
  absl::StatusOr<HostRecord> record = (*lock)->Leftover();
  if (!record.ok() || record->owner != owner) return 0;
  for (const std::string& problem : UndoHostChanges(*record)) {
    fprintf(stderr, "phalanx-localcluster janitor: %s\n", problem.c_str());
  }
  (*lock)->Forget();
  return 0;
}

}  // namespace phalanx::localcluster
