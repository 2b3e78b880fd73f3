// Task host: one bench process that runs `count` coordination tasks as threads, each with its
// own client and TCP connection (as separate ranks would have). It connects them, passes a
// rendezvous barrier and `barriers` more, printing one line per pass, then keeps every
// session alive until SIGTERM. Peer failures are printed as they are told.
//   PASS task=<id> barrier=<n> t_us=<unix micros>     (n = -1 for the rendezvous)
//   TOLD task=<id> peer=<id> t_us=<unix micros>
//   ERROR task=<id> <message>
#pragma once

#include <string>

#include "common/base/incarnation.h"
#include "runtime/client/coordinator_credentials.h"

namespace phalanx::bench {

// Also the swarm host's (swarm_host.h).
struct TaskHostOptions {
  std::string address;
  std::string token;
  int first = 0;
  int count = 1;
  int num_tasks = 1;
  int barriers = 0;
  base::Incarnation incarnation = 0;  // every task's
  client::CoordinatorTls tls;         // the coordinator's CA and name; none: cleartext
};

int RunTaskHost(const TaskHostOptions& options);

}  // namespace phalanx::bench
