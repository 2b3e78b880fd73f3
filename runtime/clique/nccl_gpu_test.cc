// Needs a GPU, its driver and NCCL (CTest label `gpu`); skips with the reason otherwise.
#include <dlfcn.h>

#include <cstdio>
#include <memory>

#include "common/base/clock.h"
#include "common/testing/eventually.h"
#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/clique/clique_manager.h"
#include "runtime/clique/in_memory_unique_id_exchange.h"
#include "runtime/clique/nccl_loader.h"
#include "runtime/clique/nccl_self_test.h"

namespace phalanx::clique {
namespace {

using ::phalanx::testing::Eventually;
using ::phalanx::testing::IsOk;

// An empty string when a GPU is usable, else why not.
std::string WhyNoGpu() {
  void* cudart = nullptr;
  for (const std::string& path : NcclLoader::DefaultCudartPaths()) {
    cudart = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (cudart != nullptr) break;
  }
  if (cudart == nullptr) return "no GPU: libcudart cannot be loaded";
  auto get_count = reinterpret_cast<int (*)(int*)>(dlsym(cudart, "cudaGetDeviceCount"));
  auto error_string = reinterpret_cast<const char* (*)(int)>(dlsym(cudart, "cudaGetErrorString"));
  if (get_count == nullptr) return "no GPU: libcudart lacks cudaGetDeviceCount";
  int count = 0;
  if (int err = get_count(&count); err != 0) {
    return std::string("no GPU: cudaGetDeviceCount failed: ") +
           (error_string != nullptr ? error_string(err) : std::to_string(err));
  }
  if (count == 0) return "no GPU: cudaGetDeviceCount found 0 devices";
  return "";
}

TEST(NcclGpuTest, OneGpuClique_Forms_ThenAborts) {
  if (std::string why = WhyNoGpu(); !why.empty()) GTEST_SKIP() << why;
  auto loader = NcclLoader::Create();
  if (!loader.ok()) GTEST_SKIP() << "no NCCL: " << loader.status();
  NcclApi& nccl = **loader;

  auto id = nccl.GetUniqueId();
  ASSERT_THAT(id, IsOk());
  auto comm = nccl.CommInitRank(/*nranks=*/1, *id, /*rank=*/0, /*cuda_device=*/0);
  ASSERT_THAT(comm, IsOk());
  absl::StatusOr<CommProgress> progress;
  ASSERT_TRUE(Eventually(
      [&] {
        progress = nccl.CommGetAsyncError(*comm);
        return !progress.ok() || *progress == CommProgress::kReady;
      },
      absl::Seconds(60)));
  ASSERT_THAT(progress, IsOk());
  EXPECT_THAT(nccl.CommAbort(*comm), IsOk());
}

// The clique's whole life on a real device, through the manager: formed (Ready), aborted when its
// own task restarts (not re-formed under the old key), formed again for the next incarnation (a
// new unique id, a new communicator), released. Prints the time of each.
TEST(NcclGpuTest, OneGpuClique_AbortedForARestart_FormsAgainAtTheNextIncarnation) {
  if (std::string why = WhyNoGpu(); !why.empty()) GTEST_SKIP() << why;
  auto loader = NcclLoader::Create();
  if (!loader.ok()) GTEST_SKIP() << "no NCCL: " << loader.status();
  InMemoryUniqueIdExchange exchange;
  base::Clock& clock = base::RealClock::Get();
  CliqueManager manager(**loader, exchange, clock, {});
  auto form = [&](base::Incarnation incarnation, double* ms) -> absl::StatusOr<CliqueId> {
    auto key = CliqueKey::Create("gpu-test", {{0, incarnation, {0}}});
    if (!key.ok()) return key.status();
    const absl::Time start = absl::Now();
    auto id = manager.Acquire(*key, 0, clock.Now() + absl::Seconds(60), /*cuda_device=*/0);
    if (!id.ok()) return id.status();
    if (!Eventually(
            [&] {
              manager.Poll(clock.Now());
              return manager.Get(*id)->state != CliqueState::kForming;
            },
            absl::Seconds(90))) {
      return absl::DeadlineExceededError("the clique is still forming after 90 s");
    }
    *ms = absl::ToDoubleMilliseconds(absl::Now() - start);
    if (manager.Get(*id)->state != CliqueState::kReady) return manager.Get(*id)->status;
    return id;
  };
  double first_ms = 0, again_ms = 0;
  absl::StatusOr<CliqueId> first = form(0, &first_ms);
  ASSERT_THAT(first, IsOk());
  const absl::Time abort_start = absl::Now();
  manager.OnMembershipChange({{{0, 1}}});
  const double abort_ms = absl::ToDoubleMilliseconds(absl::Now() - abort_start);
  ASSERT_EQ(manager.Get(*first)->state, CliqueState::kFailed);
  EXPECT_THAT(manager.Release(*first), IsOk());
  absl::StatusOr<CliqueId> again = form(1, &again_ms);
  ASSERT_THAT(again, IsOk());
  EXPECT_NE(*again, *first);
  EXPECT_EQ(manager.counters().aborts, 1);
  EXPECT_THAT(manager.Release(*again), IsOk());
  std::printf(
      "clique on 1 GPU: init %.1f ms, abort %.1f ms, re-init at the next incarnation "
      "%.1f ms\n",
      first_ms, abort_ms, again_ms);
}

TEST(NcclGpuTest, AllReduceOverEveryLocalGpu_IsCorrect) {
  if (std::string why = WhyNoGpu(); !why.empty()) GTEST_SKIP() << why;
  absl::StatusOr<AllReduceCheck> check = RunLocalAllReduce(size_t{16} << 20, 5);
  ASSERT_THAT(check, IsOk());
  EXPECT_TRUE(check->correct);
  EXPECT_GE(check->devices, 1);
  std::printf("all-reduce over %d GPU(s): init %.1f ms, %.3f ms per 16 MiB, busbw %.1f GB/s\n",
              check->devices, check->init_ms, check->allreduce_ms, check->busbw_gbps);
}

// A rank whose peer never joins: the init stays pending, and abort ends it without hanging.
TEST(NcclGpuTest, AbortWhileAPeerNeverJoins_EndsThePendingInit) {
  if (std::string why = WhyNoGpu(); !why.empty()) GTEST_SKIP() << why;
  auto loader = NcclLoader::Create();
  if (!loader.ok()) GTEST_SKIP() << "no NCCL: " << loader.status();
  NcclApi& nccl = **loader;
  auto id = nccl.GetUniqueId();
  ASSERT_THAT(id, IsOk());
  auto comm = nccl.CommInitRank(/*nranks=*/2, *id, /*rank=*/0, /*cuda_device=*/0);
  ASSERT_THAT(comm, IsOk());
  auto progress = nccl.CommGetAsyncError(*comm);
  ASSERT_THAT(progress, IsOk());
  EXPECT_EQ(*progress, CommProgress::kInProgress);  // rank 1 never comes
  const absl::Time start = absl::Now();
  EXPECT_THAT(nccl.CommAbort(*comm), IsOk());
  std::printf("abort of a pending 2-rank init: %.1f ms\n",
              absl::ToDoubleMilliseconds(absl::Now() - start));
}

}  // namespace
}  // namespace phalanx::clique
