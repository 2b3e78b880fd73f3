// CoalescingWriter: the bytes one session-wire connection owes its peer, and the rule for who
// sends them. Both ends of the wire use it (the coordinator's WireSessionServer, the client's
// WireConnection); it does no I/O and takes no lock: its owner holds its own lock around every
// call and does the sending.
//
// Coalescing: many threads write frames (one per task answered or event pushed); whoever finds
// nobody sending sends everything queued so far in one system call. While *corked* nothing is
// sent: an end that is handing out a batch of incoming frames corks, because the callers that
// batch wakes answer at once (a barrier's release wakes every task of a process, and each sends
// its next call), and uncorking sends all their frames together.
//
//   ShouldSend() = something queued, not corked, nobody sending, not broken
//
//   Append ──▶ queued ──ShouldSend──▶ the caller sends (Unsent+Sent, or Claim..Release)
//                │ ▲                            │ appends meanwhile queue behind it
//           Cork │ │ Uncork                     ▼
//                ▼ │                     more queued? the same caller sends again
//              held back                 Break (any time): queue dropped, appends ignored
//
// Two ways to send, for the two ends' threading:
// - under the owner's lock, non-blocking (the server's event loop): Unsent(), then Sent(n) for
//   what the socket took;
// - outside the lock, blocking (the client): Claim() moves the queued bytes out and marks a
//   send in progress; Release() ends it. Appends meanwhile queue behind it.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace phalanx::coord {

class CoalescingWriter {
 public:
  // Queues `bytes` (dropped once broken). True when the caller should now send.
  bool Append(std::string_view bytes) {
    if (broken_) return false;
    buffer_.append(bytes);
    return ShouldSend();
  }

  void Cork() { corked_ = true; }
  // True when the caller should now send what was held back.
  bool Uncork() {
    corked_ = false;
    return ShouldSend();
  }
  bool corked() const { return corked_; }

  // Something is queued, nothing holds it back and nobody is sending it.
  bool ShouldSend() const { return !corked_ && !sending_ && !broken_ && sent_ < buffer_.size(); }

  // Sending under the owner's lock: the bytes not sent yet, then how many the socket took.
  std::string_view Unsent() const { return std::string_view(buffer_).substr(sent_); }
  void Sent(size_t n) {
    sent_ += n;
    if (sent_ >= buffer_.size()) {
      buffer_.clear();
      sent_ = 0;
    }
  }

  // Sending outside the owner's lock: takes everything queued and marks a send in progress
  // (ShouldSend is false until Release).
  std::string Claim() {
    sending_ = true;
    std::string out = sent_ == 0 ? std::move(buffer_) : buffer_.substr(sent_);
    buffer_.clear();
    sent_ = 0;
    return out;
  }
  void Release() { sending_ = false; }

  // The connection is broken: everything queued is dropped and later appends too.
  void Break() {
    broken_ = true;
    buffer_.clear();
    sent_ = 0;
  }
  bool broken() const { return broken_; }

  size_t unsent_bytes() const { return buffer_.size() - sent_; }

 private:
  std::string buffer_;
  size_t sent_ = 0;  // bytes at the front of buffer_ already sent
  bool corked_ = false;
  bool sending_ = false;
  bool broken_ = false;
};

}  // namespace phalanx::coord
