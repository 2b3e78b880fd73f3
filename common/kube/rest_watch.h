// RestWatchStream: the WatchStream of RestClient. A reader thread pulls the chunked response body,
// decodes it (WatchDecoder) and queues events; Next() waits on the queue with the caller's bound.
// Destruction cancels the HTTP request and joins the reader. Thread-safe.
#pragma once

#include <cpprest/http_client.h>

#include <deque>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "common/kube/client.h"

namespace phalanx::kube {

class RestWatchStream final : public WatchStream {
 public:
  RestWatchStream(web::http::http_response response, pplx::cancellation_token_source cancel,
                  std::string what);
  ~RestWatchStream() override;

  absl::StatusOr<std::optional<WatchEventData>> Next(absl::Duration max_wait) override;

 private:
  void ReadLoop();

  web::http::http_response response_;
  pplx::cancellation_token_source cancel_;
  const std::string what_;
  absl::Mutex mu_;
  std::deque<WatchEventData> events_ ABSL_GUARDED_BY(mu_);
  absl::Status end_ ABSL_GUARDED_BY(mu_);  // set (not OK) once the stream is over
  std::thread reader_;
};

}  // namespace phalanx::kube
