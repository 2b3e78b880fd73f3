// The C ABI against an in-process coordinator on 127.0.0.1: what a Python (ctypes) caller sees.
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <thread>

#include "common/testing/eventually.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/client/phalanx_c.h"
#include "runtime/client/test_coordinator.h"

namespace phalanx::client {
namespace {

using ::phalanx::client::testing::Coordinator;
using ::phalanx::client::testing::kToken;
using ::testing::HasSubstr;

phalanx_client* Connected(int port, int task, int num_tasks) {
  phalanx_client* client = nullptr;
  const std::string address = "127.0.0.1:" + std::to_string(port);
  EXPECT_EQ(phalanx_client_create(address.c_str(), "test", task, num_tasks, 0, kToken, &client),
            PHALANX_OK)
      << phalanx_last_error();
  EXPECT_EQ(phalanx_connect(client, 20000), PHALANX_OK) << phalanx_last_error();
  return client;
}

TEST(CApi, KeyValueRoundTrip_AndErrorsCarryMessages) {
  Coordinator coordinator(1);
  phalanx_client* c = Connected(coordinator.port(), 0, 1);
  EXPECT_EQ(phalanx_task_id(c), 0);
  EXPECT_EQ(phalanx_num_tasks(c), 1);
  EXPECT_EQ(phalanx_incarnation(c), 0u);

  const char bytes[] = {'a', '\0', 'b'};
  ASSERT_EQ(phalanx_kv_set(c, "dir/k", bytes, sizeof(bytes), 0), PHALANX_OK);
  EXPECT_EQ(phalanx_kv_set(c, "dir/k", bytes, sizeof(bytes), 0), PHALANX_ALREADY_EXISTS);
  EXPECT_THAT(phalanx_last_error(), HasSubstr("exists"));

  void* value = nullptr;
  size_t len = 0;
  ASSERT_EQ(phalanx_kv_get(c, "dir/k", 1000, &value, &len), PHALANX_OK);
  ASSERT_EQ(len, sizeof(bytes));
  EXPECT_EQ(std::memcmp(value, bytes, len), 0);
  phalanx_free(value);
  EXPECT_EQ(phalanx_kv_try_get(c, "dir/missing", &value, &len), PHALANX_NOT_FOUND);

  phalanx_kv_entry* entries = nullptr;
  size_t count = 0;
  ASSERT_EQ(phalanx_kv_dir(c, "dir", &entries, &count), PHALANX_OK);
  ASSERT_EQ(count, 1u);
  EXPECT_STREQ(entries[0].key, "dir/k");
  phalanx_kv_entries_free(entries, count);

  int deleted = 0;
  EXPECT_EQ(phalanx_kv_delete(c, "dir", &deleted), PHALANX_OK);
  EXPECT_EQ(deleted, 1);
  EXPECT_EQ(phalanx_kv_set(c, "bad key", "v", 1, 1), PHALANX_INVALID_ARGUMENT);
  EXPECT_EQ(phalanx_kv_get(nullptr, "k", 1, &value, &len), PHALANX_INVALID_ARGUMENT);
  EXPECT_THAT(phalanx_last_error(), HasSubstr("required"));
  EXPECT_EQ(phalanx_shutdown(c, 10000), PHALANX_OK);
  phalanx_client_destroy(c);
}

TEST(CApi, ReportRolledBack_CountsEachRecoveryOnceOnTheCoordinator) {
  Coordinator coordinator(2);
  phalanx_client* a = Connected(coordinator.port(), 0, 2);
  phalanx_client* b = Connected(coordinator.port(), 1, 2);
  EXPECT_EQ(phalanx_report_rolled_back(a, "e1", 2.5), PHALANX_OK) << phalanx_last_error();
  EXPECT_EQ(phalanx_report_rolled_back(b, "e1", 3.0), PHALANX_OK) << phalanx_last_error();
  EXPECT_DOUBLE_EQ(coordinator.service().Snapshot().rolled_back_seconds, 3.0);
  EXPECT_EQ(phalanx_report_rolled_back(a, "e2", -1), PHALANX_INVALID_ARGUMENT);
  EXPECT_EQ(phalanx_report_rolled_back(a, "", 1), PHALANX_INVALID_ARGUMENT);
  phalanx_client_destroy(a);
  phalanx_client_destroy(b);
}

TEST(CApi, Incarnations_KeepEveryValueUpTo2To63Minus1AndRefuseLarger) {
  // No coordinator is needed: creating a client does not connect.
  for (phalanx_incarnation_t inc : {phalanx_incarnation_t{1} << 31, phalanx_incarnation_t{1} << 32,
                                    (phalanx_incarnation_t{1} << 63) - 1}) {
    phalanx_client* c = nullptr;
    ASSERT_EQ(phalanx_client_create("127.0.0.1:1", "test", 0, 1, inc, kToken, &c), PHALANX_OK)
        << phalanx_last_error();
    EXPECT_EQ(phalanx_incarnation(c), inc);  // never narrowed on the way through
    phalanx_client_destroy(c);
  }
  phalanx_client* c = nullptr;
  EXPECT_EQ(phalanx_client_create("127.0.0.1:1", "test", 0, 1, phalanx_incarnation_t{1} << 63,
                                  kToken, &c),
            PHALANX_INVALID_ARGUMENT);
  EXPECT_THAT(phalanx_last_error(), HasSubstr("incarnation"));
}

// A fork()ed child has the client's memory but not its session thread: every call there fails
// at once with FailedPrecondition (it once waited out its timeout for a write the parent's
// session applied), destroying it there returns at once, and the parent keeps its session.
TEST(CApi, AForkedChild_GetsFailedPreconditionAtOnce_AndTheParentKeepsItsSession) {
  Coordinator coordinator(1);
  phalanx_client* c = Connected(coordinator.port(), 0, 1);
  int pipe_fds[2];
  ASSERT_EQ(pipe(pipe_fds), 0);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {  // the child: only async-signal-safe-enough calls, then _exit
    const int set = phalanx_kv_set(c, "from-child", "x", 1, 0);
    const int barrier = phalanx_barrier(c, "b", 60000, nullptr, 0);
    phalanx_client_destroy(c);  // must not wait for the parent's threads
    const int codes[2] = {set, barrier};
    (void)!write(pipe_fds[1], codes, sizeof(codes));
    _exit(0);
  }
  close(pipe_fds[1]);
  int codes[2] = {-1, -1};
  EXPECT_EQ(read(pipe_fds[0], codes, sizeof(codes)), static_cast<ssize_t>(sizeof(codes)));
  close(pipe_fds[0]);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_EQ(codes[0], PHALANX_FAILED_PRECONDITION);
  EXPECT_EQ(codes[1], PHALANX_FAILED_PRECONDITION);
  void* value = nullptr;
  size_t len = 0;
  EXPECT_EQ(phalanx_kv_try_get(c, "from-child", &value, &len), PHALANX_NOT_FOUND);
  EXPECT_EQ(phalanx_kv_set(c, "from-parent", "y", 1, 0), PHALANX_OK) << phalanx_last_error();
  phalanx_client_destroy(c);
}

TEST(CApi, KvAddAndCompareSet_ThroughTheCoordinator) {
  Coordinator coordinator(1);
  phalanx_client* c = Connected(coordinator.port(), 0, 1);
  int64_t value = 0;
  ASSERT_EQ(phalanx_kv_add(c, "n", 5, &value), PHALANX_OK) << phalanx_last_error();
  EXPECT_EQ(value, 5);
  ASSERT_EQ(phalanx_kv_add(c, "n", -2, &value), PHALANX_OK) << phalanx_last_error();
  EXPECT_EQ(value, 3);
  ASSERT_EQ(phalanx_kv_set(c, "s", "x", 1, 0), PHALANX_OK);
  EXPECT_EQ(phalanx_kv_add(c, "s", 1, &value), PHALANX_FAILED_PRECONDITION);
  EXPECT_EQ(phalanx_kv_add(c, "n", 1, nullptr), PHALANX_INVALID_ARGUMENT);

  int swapped = -1, present = -1;
  void* got = nullptr;
  size_t len = 0;
  // expected NULL: only if absent.
  ASSERT_EQ(phalanx_kv_compare_set(c, "k", nullptr, 0, "a", 1, &swapped, &present, &got, &len),
            PHALANX_OK)
      << phalanx_last_error();
  EXPECT_EQ(swapped, 1);
  ASSERT_EQ(present, 1);
  EXPECT_EQ(std::string(static_cast<char*>(got), len), "a");
  phalanx_free(got);
  // An empty expected value is a value: no match with "a".
  ASSERT_EQ(phalanx_kv_compare_set(c, "k", "", 0, "b", 1, &swapped, &present, &got, &len),
            PHALANX_OK);
  EXPECT_EQ(swapped, 0);
  EXPECT_EQ(std::string(static_cast<char*>(got), len), "a");
  phalanx_free(got);
  ASSERT_EQ(phalanx_kv_compare_set(c, "gone", "a", 1, "b", 1, &swapped, &present, &got, &len),
            PHALANX_OK);
  EXPECT_EQ(swapped, 0);
  EXPECT_EQ(present, 0);
  EXPECT_EQ(got, nullptr);
  phalanx_client_destroy(c);
}

TEST(CApi, CreateFromEnv_MissingVariables_IsInvalidArgument) {
  unsetenv("PHALANX_COORDINATOR");
  phalanx_client* c = reinterpret_cast<phalanx_client*>(0x1);
  EXPECT_EQ(phalanx_client_create_from_env(&c), PHALANX_INVALID_ARGUMENT);
  EXPECT_EQ(c, nullptr);
  EXPECT_THAT(phalanx_last_error(), HasSubstr("PHALANX_COORDINATOR"));
}

struct PeerLog {
  int failed_task = -1;
};

void OnPeer(void* user, int task_id, uint64_t, int state, const char*) {
  if (state == PHALANX_TASK_FAILED) static_cast<PeerLog*>(user)->failed_task = task_id;
}

TEST(CApi, BarrierAliveTasksPeerCallbackAndSyncPoint) {
  Coordinator coordinator(2);
  phalanx_client* a = Connected(coordinator.port(), 0, 2);
  phalanx_client* b = Connected(coordinator.port(), 1, 2);

  int barrier_b = -1;
  std::thread other([&] { barrier_b = phalanx_barrier(b, "start", 20000, nullptr, 0); });
  EXPECT_EQ(phalanx_barrier(a, "start", 20000, nullptr, 0), PHALANX_OK);
  other.join();
  EXPECT_EQ(barrier_b, PHALANX_OK);

  int ids[4];
  uint64_t incs[4];
  size_t count = 0;
  size_t count_b = 0;
  std::thread alive_b([&] {
    int ids_b[4];
    phalanx_alive_tasks(b, nullptr, 0, 20000, ids_b, nullptr, 4, &count_b);
  });
  ASSERT_EQ(phalanx_alive_tasks(a, nullptr, 0, 20000, ids, incs, 4, &count), PHALANX_OK);
  alive_b.join();
  EXPECT_EQ(count, 2u);
  EXPECT_EQ(count_b, 2u);

  int reached = -1;
  ASSERT_EQ(phalanx_reached_sync_point(a, 0, &reached), PHALANX_OK);
  EXPECT_EQ(reached, 0);

  PeerLog log;
  phalanx_set_peer_change_callback(a, OnPeer, &log);
  phalanx_client_destroy(b);
  ASSERT_TRUE(
      phalanx::testing::Eventually([&] { return log.failed_task == 1; }, absl::Seconds(20)));
  phalanx_set_peer_change_callback(a, nullptr, nullptr);
  phalanx_client_destroy(a);
}

}  // namespace
}  // namespace phalanx::client
