#include "common/kube/rest_watch.h"

#include "absl/strings/str_cat.h"
#include "common/base/log.h"
#include "common/kube/watch_decoder.h"

namespace phalanx::kube {

RestWatchStream::RestWatchStream(web::http::http_response response,
                                 pplx::cancellation_token_source cancel, std::string what)
    : response_(std::move(response)), cancel_(std::move(cancel)), what_(std::move(what)) {
  reader_ = std::thread([this] { ReadLoop(); });
}

RestWatchStream::~RestWatchStream() {
  cancel_.cancel();
  // Closing the body wakes a reader blocked on it even if the cancellation raced the read.
  try {
    response_.body().streambuf().close(std::ios_base::in).wait();
  } catch (...) {
  }
  if (reader_.joinable()) reader_.join();
}

void RestWatchStream::ReadLoop() {
  WatchDecoder decoder;
  absl::Status end = absl::UnavailableError(absl::StrCat(what_, ": watch stream ended"));
  try {
    concurrency::streams::streambuf<uint8_t> body = response_.body().streambuf();
    uint8_t buffer[16384];
    while (true) {
      // Ask only for what is buffered (or one byte when nothing is): a larger request would
      // wait for that many bytes, holding back events that already arrived.
      const size_t available = static_cast<size_t>(std::max<std::streamsize>(body.in_avail(), 0));
      const size_t n = body.getn(buffer, std::clamp<size_t>(available, 1, sizeof(buffer))).get();
      if (n == 0) {
        if (decoder.pending_bytes() > 0) {
          end = absl::UnavailableError(
              absl::StrCat(what_, ": watch stream ended inside an event (truncated)"));
        }
        break;
      }
      std::vector<WatchDecoder::Item> items =
          decoder.Feed(std::string_view(reinterpret_cast<const char*>(buffer), n));
      bool stop = false;
      absl::MutexLock lock(&mu_);
      for (WatchDecoder::Item& item : items) {
        if (item.status.ok()) {
          events_.push_back(std::move(item.event));
        } else if (absl::IsInvalidArgument(item.status)) {
          // Garbage from the server: skipped, the stream goes on.
          PHX_LOG(WARNING) << what_ << ": skipping a malformed watch event: " << item.status;
        } else {
          end = item.status;  // in-stream ERROR (410 Expired → OutOfRange: relist)
          stop = true;
          break;
        }
      }
      if (stop) break;
    }
  } catch (const std::exception& e) {
    end = absl::UnavailableError(absl::StrCat(what_, ": watch stream broke: ", e.what()));
  }
  absl::MutexLock lock(&mu_);
  end_ = end;
}

absl::StatusOr<std::optional<WatchEventData>> RestWatchStream::Next(absl::Duration max_wait) {
  absl::MutexLock lock(&mu_);
  auto ready = [this]()
                   ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !events_.empty() || !end_.ok(); };
  mu_.AwaitWithTimeout(absl::Condition(&ready), max_wait);
  if (!events_.empty()) {
    WatchEventData event = std::move(events_.front());
    events_.pop_front();
    return std::optional<WatchEventData>(std::move(event));
  }
  if (!end_.ok()) return end_;
  return std::optional<WatchEventData>();
}

}  // namespace phalanx::kube
