/* The Phalanx runtime client as a C ABI, for Python (ctypes) and other languages.
 *
 * Every function returning int returns PHALANX_OK (0) or one of the status codes below (the
 * same numbers as absl/gRPC status codes); on failure phalanx_last_error() describes it (a
 * thread-local string valid until the next call on the same thread).
 * A phalanx_client is thread-safe; callbacks run on the client's session thread.
 */
#ifndef PHALANX_C_H_
#define PHALANX_C_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define PHALANX_API __attribute__((visibility("default")))

enum {
  PHALANX_OK = 0,
  PHALANX_CANCELLED = 1,
  PHALANX_UNKNOWN = 2,
  PHALANX_INVALID_ARGUMENT = 3,
  PHALANX_DEADLINE_EXCEEDED = 4,
  PHALANX_NOT_FOUND = 5,
  PHALANX_ALREADY_EXISTS = 6,
  PHALANX_PERMISSION_DENIED = 7,
  PHALANX_RESOURCE_EXHAUSTED = 8,
  PHALANX_FAILED_PRECONDITION = 9,
  PHALANX_ABORTED = 10,
  PHALANX_OUT_OF_RANGE = 11,
  PHALANX_UNIMPLEMENTED = 12,
  PHALANX_INTERNAL = 13,
  PHALANX_UNAVAILABLE = 14,
  PHALANX_DATA_LOSS = 15,
  PHALANX_UNAUTHENTICATED = 16
};

/* Task states, as passed to the peer-change callback. */
enum {
  PHALANX_TASK_UNREGISTERED = 0,
  PHALANX_TASK_CONNECTED = 1,
  PHALANX_TASK_FAILED = 2,
  PHALANX_TASK_SHUTDOWN = 3
};

typedef struct phalanx_client phalanx_client;

/* A task's incarnation: 0 for its first process, +1 per restart. Unsigned as the coordination
 * protocol carries it; valid values are 0 to 2^63 - 1 (the C++ side keeps it signed, see
 * common/base/incarnation.h), and a larger one is refused with PHALANX_INVALID_ARGUMENT. */
typedef uint64_t phalanx_incarnation_t;

/* A peer failed or restarted. `reason` is valid only during the call. */
typedef void (*phalanx_peer_change_fn)(void* user, int task_id, phalanx_incarnation_t incarnation,
                                       int state, const char* reason);
/* A preemption round opened; `deadline_unix_ms` is 0 when unknown. */
typedef void (*phalanx_preemption_fn)(void* user, uint64_t round, int64_t deadline_unix_ms,
                                      const char* reason);
/* The same, with the tasks the round names as about to be preempted (none: unknown or the whole
   job). `reason` and `affected_tasks` are valid only during the call. */
typedef void (*phalanx_preemption2_fn)(void* user, uint64_t round, int64_t deadline_unix_ms,
                                       const char* reason, const int* affected_tasks,
                                       size_t num_affected);

/* The session came back after a break. `coordinator_restarted` is 1 when the coordinator is a
   new one (it lost its key-value data, barriers and rounds: re-publish and re-run recovery), 0
   when the same coordinator answered again. */
typedef void (*phalanx_reconnect_fn)(void* user, int coordinator_restarted);

typedef struct {
  char* key;
  void* value;
  size_t value_len;
} phalanx_kv_entry;

PHALANX_API const char* phalanx_last_error(void);
/* The last failure's facts on this thread, as JSON with the fields of coordination.proto's
   ErrorDetails ("reason": "PEER_FAILED" with "failed_tasks": [{"task_id": 1, "incarnation":
   "2"}] and "failure_reason"; "BARRIER_TIMED_OUT" with "barrier_id" and "missing_task_ids";
   "ALIVE_TASKS_TIMED_OUT" with "missing_task_ids"), or "" when it has none. Read these, not
   phalanx_last_error()'s words, which may change. Valid like phalanx_last_error(). */
PHALANX_API const char* phalanx_last_error_details(void);
/* Frees memory the library returned (values from kv_get / kv_try_get). */
PHALANX_API void phalanx_free(void* p);

/* From the PHALANX_* environment variables the operator injects. */
PHALANX_API int phalanx_client_create_from_env(phalanx_client** out);
/* A spare (spec.spares; PHALANX_SPARE set, no PHALANX_TASK_ID): blocks until the coordinator
   gives this process a failed task, then returns the task, its incarnation and the task's
   credential (NUL-terminated, in `credential` of `capacity` bytes; 256 is enough). The caller
   then creates its client with them (or sets PHALANX_TASK_ID, PHALANX_INCARNATION and
   PHALANX_TOKEN and calls phalanx_client_create_from_env). `unreachable_timeout_ms` bounds how
   long the coordinator may be unreachable in a row; the wait for a task itself has no bound. */
PHALANX_API int phalanx_await_assignment(int64_t unreachable_timeout_ms, int* task_id,
                                         phalanx_incarnation_t* incarnation, char* credential,
                                         size_t capacity);
PHALANX_API int phalanx_client_create(const char* coordinator, const char* job, int task_id,
                                      int num_tasks, phalanx_incarnation_t incarnation,
                                      const char* token, phalanx_client** out);
/* Stops the session (a peer sees this task's session break unless it shut down first). */
PHALANX_API void phalanx_client_destroy(phalanx_client* client);

/* Set callbacks before phalanx_connect. NULL clears. */
PHALANX_API void phalanx_set_peer_change_callback(phalanx_client* client, phalanx_peer_change_fn fn,
                                                  void* user);
PHALANX_API void phalanx_set_preemption_callback(phalanx_client* client, phalanx_preemption_fn fn,
                                                 void* user);
/* Replaces the callback above with one that also gets the affected tasks. */
PHALANX_API void phalanx_set_preemption_callback2(phalanx_client* client, phalanx_preemption2_fn fn,
                                                  void* user);

/* Called on the session thread after each reconnect; keep it short (no blocking calls). */
PHALANX_API void phalanx_set_reconnect_callback(phalanx_client* client, phalanx_reconnect_fn fn,
                                                void* user);

PHALANX_API int phalanx_task_id(const phalanx_client* client);
PHALANX_API int phalanx_num_tasks(const phalanx_client* client);
PHALANX_API phalanx_incarnation_t phalanx_incarnation(const phalanx_client* client);

PHALANX_API int phalanx_connect(phalanx_client* client, int64_t timeout_ms);
/* After a call returned PHALANX_UNAVAILABLE (the coordinator stopped, moved or restarted): waits
 * until the client has re-registered this task (same incarnation) and its session is open again,
 * then the call can be retried. PHALANX_DEADLINE_EXCEEDED when not back within timeout_ms,
 * PHALANX_ABORTED when this incarnation can no longer take part. */
PHALANX_API int phalanx_wait_until_connected(phalanx_client* client, int64_t timeout_ms);
/* 1 while the task is registered and its session is open, else 0. */
PHALANX_API int phalanx_connected(const phalanx_client* client);
/* tasks == NULL / num_tasks == 0: every task. */
PHALANX_API int phalanx_barrier(phalanx_client* client, const char* id, int64_t timeout_ms,
                                const int* tasks, size_t num_tasks);
PHALANX_API int phalanx_cancel_barrier(phalanx_client* client, const char* id);

PHALANX_API int phalanx_kv_set(phalanx_client* client, const char* key, const void* value,
                               size_t value_len, int allow_overwrite);
/* As phalanx_kv_set, but returns once the set is sent on the task's session, without waiting
 * for the coordinator's answer (as torch's TCPStore set does). This client's later session calls
 * (phalanx_kv_get, phalanx_kv_set_nowait, phalanx_barrier) are handled after it, so a get of the
 * key sees it; other calls may overtake it. A failure of such a set (AlreadyExists, a quota, the
 * session ending before the answer) is returned by the next phalanx_kv_set_nowait or by
 * phalanx_kv_wait_sets. Without a session it waits, as phalanx_kv_set. */
PHALANX_API int phalanx_kv_set_nowait(phalanx_client* client, const char* key, const void* value,
                                      size_t value_len, int allow_overwrite);
/* Waits up to timeout_ms for every set sent by phalanx_kv_set_nowait to be answered; returns the
 * first failure among them (then forgotten), DEADLINE_EXCEEDED if some is still unanswered. */
PHALANX_API int phalanx_kv_wait_sets(phalanx_client* client, int64_t timeout_ms);
/* *value is malloc'ed (free with phalanx_free); it is NUL-terminated for convenience. */
PHALANX_API int phalanx_kv_get(phalanx_client* client, const char* key, int64_t timeout_ms,
                               void** value, size_t* value_len);
PHALANX_API int phalanx_kv_try_get(phalanx_client* client, const char* key, void** value,
                                   size_t* value_len);
/* Every entry under `directory`, in key order, fetched page by page from the coordinator.
 * *entries is freed with phalanx_kv_entries_free. */
PHALANX_API int phalanx_kv_dir(phalanx_client* client, const char* directory,
                               phalanx_kv_entry** entries, size_t* count);
PHALANX_API void phalanx_kv_entries_free(phalanx_kv_entry* entries, size_t count);
PHALANX_API int phalanx_kv_delete(phalanx_client* client, const char* key, int* deleted);
/* Atomic counter: the value under `key` is a decimal integer (absent: 0); stores value + delta
 * and writes it to *value. PHALANX_FAILED_PRECONDITION when the value is not an integer. */
PHALANX_API int phalanx_kv_add(phalanx_client* client, const char* key, int64_t delta,
                               int64_t* value);
/* Stores `desired` when `key` holds `expected` (expected NULL: when `key` is absent). *swapped
 * says whether it did; *present whether `key` exists afterwards, and then *value (malloc'ed,
 * NUL-terminated, free with phalanx_free) is what it holds, else NULL. */
PHALANX_API int phalanx_kv_compare_set(phalanx_client* client, const char* key,
                                       const void* expected, size_t expected_len,
                                       const void* desired, size_t desired_len, int* swapped,
                                       int* present, void** value, size_t* value_len);

PHALANX_API int phalanx_report_error(phalanx_client* client, const char* message);
/* After resuming from a checkpoint: the wall time (seconds) this task had spent on the steps it
 * now runs again. Every task of one recovery passes the same `recovery` name (e.g. its epoch);
 * the coordinator counts each recovery once and the operator books it as lost goodput. */
PHALANX_API int phalanx_report_rolled_back(phalanx_client* client, const char* recovery,
                                           double seconds);
/* This task completed a training step: call it after every step. Only the first call after a
 * registration reaches the coordinator (the rest are a flag check); the operator books the time
 * before the job's first step, and a regroup after a failure, as not productive. */
PHALANX_API int phalanx_report_stepping(phalanx_client* client);
/* Writes up to `capacity` alive tasks; *count is how many there are. */
PHALANX_API int phalanx_alive_tasks(phalanx_client* client, const int* tasks, size_t num_tasks,
                                    int64_t timeout_ms, int* task_ids,
                                    phalanx_incarnation_t* incarnations, size_t capacity,
                                    size_t* count);
PHALANX_API int phalanx_notify_preemption(phalanx_client* client, const char* reason,
                                          int64_t deadline_unix_ms, const int* tasks,
                                          size_t num_tasks, uint64_t* round);
/* *reached is 1 exactly at the agreed checkpoint step of an open preemption round. */
PHALANX_API int phalanx_reached_sync_point(phalanx_client* client, int64_t step, int* reached);
PHALANX_API int phalanx_shutdown(phalanx_client* client, int64_t timeout_ms);
/* This task leaves on its own (no shutdown barrier): a departure, not a failure. Its peers'
   barriers and gets do not fail for it; the session ends. `reason` may be NULL. */
PHALANX_API int phalanx_leave(phalanx_client* client, const char* reason, int64_t timeout_ms);

#ifdef __cplusplus
}
#endif

#endif /* PHALANX_C_H_ */
