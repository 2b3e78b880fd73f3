#include "bench/swarm_host.h"

#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "bench/loopback_socket.h"
#include "bench/measure_util.h"
#include "bench/write_line.h"
#include "runtime/coordination/bearer.h"
#include "runtime/coordination/peer_batch_codec.h"
#include "runtime/coordination/wire_format.h"
#include "runtime/proto/coordination.pb.h"

namespace phalanx::bench {
namespace {

namespace pb = ::phalanx::coord::v1;

constexpr int64_t kBarrierTimeoutMs = 120'000;  // a round that takes longer is an error
constexpr size_t kMaxFrameBytes = 16 << 20;

// SIGTERM and SIGINT as a readable descriptor, so the one poll loop also waits for the stop.
int StopSignalFd() {
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGTERM);
  sigaddset(&stop, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);
  return signalfd(-1, &stop, SFD_CLOEXEC | SFD_NONBLOCK);
}

// The sessions of one host: what each task is waiting for, and the bytes in and out.
class Swarm {
 public:
  Swarm(const TaskHostOptions& options, int fd)
      : options_(options), fd_(fd), passed_(std::max(options.barriers + 1, 0), 0) {
    tasks_.resize(options.count);
    for (int k = 0; k < options.count; ++k) tasks_[k].task_id = options.first + k;
  }

  // Until a stop signal (0) or an error (1).
  int Run(int stop_fd) {
    out_.append(coord::kWireMagicView);
    // Each task's hello and open in one burst, in stream order, as WireSessionStream::Open
    // sends them with open_at_once.
    for (int k = 0; k < options_.count; ++k) {
      pb::WireHello hello;
      hello.set_authorization(coord::BearerCredential(options_.token));
      pb::TaskRef& ref = *hello.mutable_register_()->mutable_task();
      ref.set_task_id(tasks_[k].task_id);
      ref.set_incarnation(base::IncarnationToWire(options_.incarnation));
      hello.mutable_register_()->set_job("bench");
      coord::AppendFrame(hello, StreamOf(k), out_);
      pb::SessionRequest open;
      *open.mutable_open() = ref;
      coord::AppendFrame(open, StreamOf(k), out_);
    }
    next_heartbeat_ = absl::Now() + heartbeat_interval_;
    while (true) {
      pollfd fds[2] = {{fd_, static_cast<short>(POLLIN | (out_.size() > out_at_ ? POLLOUT : 0)), 0},
                       {stop_fd, POLLIN, 0}};
      const int wait_ms =
          std::max<int64_t>(0, absl::ToInt64Milliseconds(next_heartbeat_ - absl::Now()) + 1);
      if (poll(fds, 2, wait_ms) < 0 && errno != EINTR) {
        Fail(absl::StrCat("poll: ", std::strerror(errno)));
        return 1;
      }
      if (fds[1].revents & POLLIN) return 0;
      if ((fds[0].revents & (POLLIN | POLLHUP | POLLERR)) && !ReadAvailable()) return 1;
      if (absl::Now() >= next_heartbeat_) SendHeartbeats();
      if (!WriteAvailable()) return 1;
    }
  }

 private:
  struct Task {
    int task_id = 0;
    bool opened = false;
  };

  static uint32_t StreamOf(int k) { return static_cast<uint32_t>(k + 1); }

  // Reports the error; false, for the caller to return.
  bool Fail(const std::string& why) {
    WriteLine(absl::StrCat("ERROR tasks=", options_.first, "..",
                           options_.first + options_.count - 1, " ", why));
    return false;
  }

  // Reads what the socket holds and handles every whole frame; false on an error (reported).
  bool ReadAvailable() {
    char buffer[256 << 10];
    while (true) {
      const ssize_t n = recv(fd_, buffer, sizeof(buffer), MSG_DONTWAIT);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      if (n <= 0)
        return Fail(n == 0 ? "the coordinator closed the connection" : std::strerror(errno));
      in_.append(buffer, n);
    }
    size_t at = 0;
    if (!magic_seen_) {
      if (in_.size() < coord::kWireMagicView.size()) return true;
      if (std::string_view(in_).substr(0, 4) != coord::kWireMagicView) {
        return Fail("the coordinator answered with another wire magic");
      }
      magic_seen_ = true;
      at = coord::kWireMagicView.size();
    }
    coord::Frame frame;
    while (true) {
      const coord::FrameCut cut =
          coord::CutFrame(std::string_view(in_).substr(at), kMaxFrameBytes, &frame);
      if (cut == coord::FrameCut::kNeedMore) break;
      if (cut == coord::FrameCut::kTooBig) return Fail("a frame over 16 MiB");
      at += frame.consumed;
      pb::WireServerFrame message;
      if (!message.ParseFromArray(frame.payload.data(), static_cast<int>(frame.payload.size()))) {
        return Fail("an unparsable frame");
      }
      if (frame.stream == coord::kWireConnectionStream) {
        if (!OnPeerBatch(message)) return false;
        continue;
      }
      if (frame.stream > tasks_.size()) continue;
      if (message.kind_case() == pb::WireServerFrame::kPeerBatchRef) {
        if (!OnPeerBatchRef(message.peer_batch_ref())) return false;
        continue;
      }
      if (!OnFrame(frame.stream - 1, message)) return false;
    }
    in_.erase(0, at);
    return true;
  }

  bool OnFrame(int k, const pb::WireServerFrame& frame) {
    Task& task = tasks_[k];
    if (frame.has_end()) {
      return Fail(absl::StrCat("task ", task.task_id, "'s session ended: ", frame.end().code(), " ",
                               frame.end().message()));
    }
    if (frame.has_registered()) {
      const int64_t ms = frame.registered().heartbeat_interval_ms();
      if (ms > 0) heartbeat_interval_ = absl::Milliseconds(ms);
      return true;
    }
    if (!frame.has_event()) return true;
    const pb::SessionEvent& event = frame.event();
    if (event.has_opened() && !task.opened) {
      task.opened = true;
      if (++opened_ == options_.count) {
        WriteLine(absl::StrCat("OPENED tasks=", options_.count, " t_us=", NowMicros()));
      }
      if (options_.barriers >= 0) CallBarrier(k, -1);
    } else if (event.has_call_result()) {
      const pb::CallResult& result = event.call_result();
      const int b = static_cast<int>(result.call_id()) - 2;  // call ids are barrier + 2
      if (result.code() != 0) {
        return Fail(absl::StrCat("task ", task.task_id, " barrier ", b, ": ", result.code(), " ",
                                 result.message()));
      }
      if (b + 1 >= 0 && b + 1 < static_cast<int>(passed_.size()) &&
          ++passed_[b + 1] == options_.count) {
        WriteLine(
            absl::StrCat("ROUND barrier=", b, " tasks=", options_.count, " t_us=", NowMicros()));
      }
      if (b + 1 < options_.barriers) CallBarrier(k, b + 1);
    } else if (event.has_task_changed() && event.task_changed().state() == pb::TASK_STATE_FAILED) {
      Told(event.task_changed().task_id());
    }
    return true;
  }

  // A peer batch defined on the connection: its failed tasks, kept as the client keeps batches.
  bool OnPeerBatch(const pb::WireServerFrame& frame) {
    if (!frame.has_peer_batch()) return true;
    absl::StatusOr<std::vector<coord::SessionEvent>> events =
        coord::DecodePeerBatch(frame.peer_batch());
    if (!events.ok()) return Fail(events.status().ToString());
    std::vector<int> failed;
    for (const coord::SessionEvent& event : *events) {
      const auto* info = std::get_if<coord::TaskInfo>(&event);
      if (info != nullptr && info->state == coord::TaskState::kFailed) {
        failed.push_back(info->task_id);
      }
    }
    peer_batches_.Define(frame.peer_batch().id(), std::move(failed));
    return true;
  }

  // A task heard a peer batch.
  bool OnPeerBatchRef(uint64_t id) {
    const std::vector<int>* failed = peer_batches_.Find(id);
    if (failed != nullptr) {
      for (int peer : *failed) Told(peer);
      return true;
    }
    return Fail(absl::StrCat("the coordinator named peer batch ", id, ", which it did not send"));
  }

  // One more task heard that `peer` failed.
  void Told(int peer) {
    if (++told_[peer] == opened_) {
      WriteLine(absl::StrCat("TOLD peer=", peer, " tasks=", opened_, " t_us=", NowMicros()));
    }
  }

  void CallBarrier(int k, int b) {
    pb::SessionRequest request;
    pb::SessionCall& call = *request.mutable_call();
    call.set_call_id(static_cast<uint64_t>(b + 2));
    pb::BarrierRequest& barrier = *call.mutable_barrier();
    barrier.mutable_task()->set_task_id(tasks_[k].task_id);
    barrier.mutable_task()->set_incarnation(base::IncarnationToWire(options_.incarnation));
    barrier.set_barrier_id(absl::StrCat("b", b));
    barrier.set_timeout_ms(kBarrierTimeoutMs);
    coord::AppendFrame(request, StreamOf(k), out_);
  }

  void SendHeartbeats() {
    pb::SessionRequest request;
    request.mutable_heartbeat()->set_sent_unix_micros(NowMicros());
    for (int k = 0; k < options_.count; ++k) {
      if (tasks_[k].opened) coord::AppendFrame(request, StreamOf(k), out_);
    }
    next_heartbeat_ = absl::Now() + heartbeat_interval_;
  }

  // Writes what the socket takes now; false on an error (reported).
  bool WriteAvailable() {
    while (out_at_ < out_.size()) {
      const ssize_t n =
          send(fd_, out_.data() + out_at_, out_.size() - out_at_, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
      if (n < 0) return Fail(absl::StrCat("send: ", std::strerror(errno)));
      out_at_ += n;
    }
    out_.clear();
    out_at_ = 0;
    return true;
  }

  const TaskHostOptions& options_;
  const int fd_;
  std::vector<Task> tasks_;             // index k is stream k + 1
  std::vector<int> passed_;             // barrier b + 1 → tasks that passed it
  absl::flat_hash_map<int, int> told_;  // failed peer → tasks told so far
  // The peer batches defined on the connection: their failed tasks.
  coord::PeerBatchWindow<std::vector<int>> peer_batches_;
  int opened_ = 0;
  bool magic_seen_ = false;
  std::string in_;
  std::string out_;
  size_t out_at_ = 0;  // out_[0, out_at_) is sent
  absl::Duration heartbeat_interval_ = absl::Seconds(1);
  absl::Time next_heartbeat_;
};

}  // namespace

int RunSwarmHost(const TaskHostOptions& options) {
  const int stop_fd = StopSignalFd();
  absl::StatusOr<int> fd = DialTcp(options.address);
  if (!fd.ok()) {
    WriteLine(absl::StrCat("ERROR ", fd.status().ToString()));
    return 1;
  }
  Swarm swarm(options, *fd);
  const int rc = swarm.Run(stop_fd);
  close(*fd);
  close(stop_fd);
  return rc;
}

int RunReferenceSwarmHost(const TaskHostOptions& options) {
  absl::StatusOr<int> fd = DialTcp(options.address);
  if (!fd.ok()) {
    WriteLine(absl::StrCat("ERROR ", fd.status().ToString()));
    return 1;
  }
  const std::string arrivals(options.count, 'a');
  std::vector<char> buffer(64 << 10);
  int rc = 0;
  for (int b = -1; b < options.barriers && rc == 0; ++b) {
    if (!SendAll(*fd, arrivals.data(), arrivals.size())) {
      WriteLine(absl::StrCat("ERROR barrier ", b, ": send failed"));
      rc = 1;
      break;
    }
    for (int64_t released = 0; released < options.count;) {
      const ssize_t n = recv(*fd, buffer.data(), buffer.size(), 0);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        WriteLine(absl::StrCat("ERROR barrier ", b, ": the reference server went away"));
        rc = 1;
        break;
      }
      released += n;
    }
    if (rc == 0) {
      WriteLine(absl::StrCat("ROUND barrier=", b, " tasks=", options.count, " t_us=", NowMicros()));
    }
  }
  close(*fd);
  return rc;
}

}  // namespace phalanx::bench
