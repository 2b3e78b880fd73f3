// Swarm host: one bench process that runs `count` coordination tasks on ONE thread, speaking the
// session wire (wire_format.h, ADR 0005) itself: one connection, one stream per task, each
// task's hello, open, heartbeats and barrier calls as frames. It exists because the task host
// (task_host.h: a thread and a client per task) runs out of threads long before the
// coordinator runs out of anything (16,384 tasks: EAGAIN at ~2,048 threads a process), so
// only a host that holds tasks as state, not threads, can load one coordinator with
// 16,384 sessions on this machine. It measures the coordinator, not the client library: the
// frames are the ones WireSessionStream sends (hello and open in one write, heartbeats at the
// interval the registration names, barriers as session calls), and the scale bench runs both
// hosts at 1,024 and 4,096 tasks so the two can be compared.
//
// Output (one line per host and event, not per task: 16,384 tasks would flood the pipe):
//   OPENED tasks=<n> t_us=<unix micros when the last of its sessions opened>
//   ROUND barrier=<b> tasks=<n> t_us=<unix micros when its last task passed b>  (b=-1: rendezvous)
//   TOLD peer=<id> tasks=<n> t_us=<unix micros when the last of its tasks heard peer failed>
//   ERROR <message>
// With barriers < 0 the tasks only open their sessions. Either way the host then keeps every
// session alive (heartbeats) until SIGTERM or SIGINT; a broken connection is an ERROR.
#pragma once

#include "bench/task_host.h"

namespace phalanx::bench {

// The host process's body (--role=swarm). 0 after SIGTERM with every task served, 1 on an error.
int RunSwarmHost(const TaskHostOptions& options);

// The reference barrier (barrier_reference.h) from a swarm host: `count` tasks' arrivals as
// bytes on one connection from one thread, no task threads (--role=reference_swarm). Prints
// ROUND lines as above and exits after the last barrier.
int RunReferenceSwarmHost(const TaskHostOptions& options);

}  // namespace phalanx::bench
