// Gloo communicator: real processes, real TCP on 127.0.0.1, rendezvous through a directory store.
#include "worker/dist/communicator.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <thread>

#include "common/worker_contract.h"
#include "tests/dist/multiprocess.h"
#include "worker/dist/directory_kv_store.h"

namespace adctl {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

#define RANK_CHECK(condition)                                                                    \
  do {                                                                                           \
    if (!(condition)) {                                                                          \
      std::fprintf(stderr, "rank %d: check failed at %s:%d: %s\n", env.rank, __FILE__, __LINE__, \
                   #condition);                                                                  \
      return 10;                                                                                 \
    }                                                                                            \
  } while (0)

std::unique_ptr<Communicator> Connect(const test::RankEnv& env, milliseconds rendezvous,
                                      milliseconds operation = std::chrono::minutes(1)) {
  auto store = MakeDirectoryKeyValueStore(env.dir + "/kv");
  auto comm =
      MakeCommunicator("gloo", store.get(), env.rank, env.world_size, rendezvous, operation);
  if (!comm.ok()) {
    std::fprintf(stderr, "rank %d: %s\n", env.rank, comm.status().ToString().c_str());
    return nullptr;
  }
  return std::move(comm).value();
}

ADCTL_RANK_ROLE(collectives) {
  auto comm = Connect(env, seconds(30));
  RANK_CHECK(comm != nullptr);
  const int n = env.world_size;
  const double rank_sum = n * (n - 1) / 2.0;  // 0 + 1 + ... + (n-1)
  RANK_CHECK(comm->rank() == env.rank && comm->world_size() == n);

  // Several all-reduces in flight at once, of every dtype, waited for out of order.
  auto f32 = torch::full({1000}, env.rank + 1.0, torch::kFloat);
  auto f64 = torch::arange(10, torch::kDouble) * env.rank;
  auto bf16 = torch::full({17}, 0.5 * (env.rank + 1), torch::kBFloat16);
  auto i64 = torch::full({3}, int64_t{1} << 40, torch::kLong);
  auto big = torch::arange(3'000'000, torch::kFloat) * (env.rank + 1);
  std::vector<std::shared_ptr<Work>> works;
  for (auto* t : {&f32, &f64, &bf16, &i64, &big}) works.push_back(comm->AllReduceSumAsync(*t));
  for (auto it = works.rbegin(); it != works.rend(); ++it) (*it)->Wait();
  RANK_CHECK(torch::equal(f32, torch::full({1000}, rank_sum + n, torch::kFloat)));
  RANK_CHECK(torch::equal(f64, torch::arange(10, torch::kDouble) * rank_sum));
  RANK_CHECK(torch::equal(bf16, torch::full({17}, 0.5 * (rank_sum + n), torch::kBFloat16)));
  RANK_CHECK(torch::equal(i64, torch::full({3}, n * (int64_t{1} << 40), torch::kLong)));
  RANK_CHECK(torch::allclose(big, torch::arange(3'000'000, torch::kFloat) * (rank_sum + n)));

  // The mean (what the gradient buckets use).
  auto mean = torch::full({64}, 2.0 * (env.rank + 1), torch::kFloat);
  comm->AllReduceAsync(mean, ReduceOp::kMean)->Wait();
  RANK_CHECK(torch::allclose(mean, torch::full({64}, 2.0 * (rank_sum + n) / n, torch::kFloat)));

  // Broadcast from the last rank, then from rank 0.
  const int root = n - 1;
  auto values =
      env.rank == root ? torch::arange(100, torch::kInt) : torch::zeros({100}, torch::kInt);
  comm->Broadcast(values, root);
  RANK_CHECK(torch::equal(values, torch::arange(100, torch::kInt)));
  auto halves = torch::full({5}, static_cast<float>(env.rank), torch::kHalf);
  comm->Broadcast(halves, 0);
  RANK_CHECK(torch::equal(halves, torch::zeros({5}, torch::kHalf)));

  // Barrier: nobody leaves before the last rank, which comes 300 ms late, arrived.
  if (env.rank == n - 1) std::this_thread::sleep_for(milliseconds(300));
  const auto before = std::chrono::steady_clock::now();
  comm->Barrier();
  if (env.rank != n - 1) RANK_CHECK(std::chrono::steady_clock::now() - before >= milliseconds(250));

  RANK_CHECK(AllReduceMean(comm.get(), env.rank) == rank_sum / n);
  return 0;
}

TEST(GlooCommunicatorTest, TwoRanksAllReduceBroadcastAndBarrier) {
  const auto outcomes = test::RunRanks("collectives", 2, test::MakeTempDir("gloo"), seconds(60));
  for (const auto& o : outcomes) EXPECT_EQ(o.exit_code, 0) << test::Describe(outcomes);
}

TEST(GlooCommunicatorTest, ThreeRanksAllReduceBroadcastAndBarrier) {
  const auto outcomes = test::RunRanks("collectives", 3, test::MakeTempDir("gloo"), seconds(60));
  for (const auto& o : outcomes) EXPECT_EQ(o.exit_code, 0) << test::Describe(outcomes);
}

// Rank(s) started without their peers: rendezvous must fail by its deadline, naming the absent.
ADCTL_RANK_ROLE(rendezvous_alone) {
  auto store = MakeDirectoryKeyValueStore(env.dir + "/kv");
  auto comm = MakeCommunicator("gloo", store.get(), env.rank, env.world_size, milliseconds(1500));
  if (comm.ok()) return 10;
  test::WriteFile(env.dir + "/status-" + std::to_string(env.rank), comm.status().ToString());
  return comm.status().code() == StatusCode::kDeadlineExceeded ? 0 : 11;
}

TEST(GlooCommunicatorTest, RendezvousTimesOutNamingTheRankThatNeverCame) {
  const std::string dir = test::MakeTempDir("gloo");
  const auto outcomes = test::RunRanks("rendezvous_alone", 2, dir, seconds(20), /*ranks=*/{0});
  ASSERT_EQ(outcomes[0].exit_code, 0) << test::Describe(outcomes);
  EXPECT_LT(outcomes[0].seconds, 10) << "the rendezvous timeout is 1.5 s";
  EXPECT_EQ(test::ReadFile(dir + "/status-0"),
            "DEADLINE_EXCEEDED: gloo rendezvous: rank 1 of 2 did not arrive within 1.5 s (this "
            "is rank 0)");
}

TEST(GlooCommunicatorTest, RendezvousTimeoutNamesEveryMissingRank) {
  const std::string dir = test::MakeTempDir("gloo");
  const auto outcomes = test::RunRanks("rendezvous_alone", 4, dir, seconds(20), /*ranks=*/{0, 2});
  for (const auto& o : outcomes) ASSERT_EQ(o.exit_code, 0) << test::Describe(outcomes);
  EXPECT_NE(test::ReadFile(dir + "/status-2").find("ranks 1, 3 of 4 did not arrive"),
            std::string::npos)
      << test::ReadFile(dir + "/status-2");
}

// Rank 1 dies (SIGKILL) while rank 0 is inside an all-reduce waiting for it.
ADCTL_RANK_ROLE(peer_dies) {
  auto comm = Connect(env, seconds(30), /*operation=*/seconds(5));
  RANK_CHECK(comm != nullptr);
  auto t = torch::ones({1 << 16});
  comm->AllReduceSumAsync(t)->Wait();  // the first all-reduce succeeds
  RANK_CHECK(t[0].item<float>() == 2);
  if (env.rank == 1) {
    std::this_thread::sleep_for(milliseconds(300));
    ::raise(SIGKILL);
  }
  const auto start = std::chrono::steady_clock::now();
  try {
    comm->AllReduceSumAsync(t)->Wait();
  } catch (const CommunicationError& e) {
    const double waited =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    test::WriteFile(env.dir + "/error-0", e.what());
    std::fprintf(stderr, "rank 0: all-reduce failed after %.2f s: %s\n", waited, e.what());
    // Later collectives fail at once with the same cause instead of hanging.
    try {
      comm->Barrier();
    } catch (const CommunicationError& later) {
      test::WriteFile(env.dir + "/later-0", later.what());
    }
    return kExitTransient;
  }
  return 12;  // the all-reduce with a dead peer "succeeded"
}

TEST(GlooCommunicatorTest, ARankDyingMidAllReduceFailsThePeerWithinTheTimeout) {
  const std::string dir = test::MakeTempDir("gloo");
  const auto outcomes = test::RunRanks("peer_dies", 2, dir, seconds(30));
  EXPECT_EQ(outcomes[1].signal, SIGKILL) << test::Describe(outcomes);
  ASSERT_EQ(outcomes[0].exit_code, kExitTransient) << test::Describe(outcomes);
  EXPECT_LT(outcomes[0].seconds, 15) << test::Describe(outcomes);
  const std::string error = test::ReadFile(dir + "/error-0");
  EXPECT_NE(error.find("gloo all-reduce failed on rank 0 of 2"), std::string::npos) << error;
  EXPECT_NE(test::ReadFile(dir + "/later-0").find("failed earlier"), std::string::npos);
}

TEST(CommunicatorTest, OneGlooRankWorksAlone) {
  auto store = MakeDirectoryKeyValueStore(test::MakeTempDir("gloo"));
  auto comm = MakeCommunicator("gloo", store.get(), 0, 1, seconds(5));
  ASSERT_TRUE(comm.ok()) << comm.status().ToString();
  auto t = torch::arange(5, torch::kFloat);
  (*comm)->AllReduceSumAsync(t)->Wait();
  EXPECT_TRUE(torch::equal(t, torch::arange(5, torch::kFloat)));
  (*comm)->Broadcast(t, 0);
  (*comm)->Barrier();
  EXPECT_EQ(AllReduceMean(comm->get(), 3.5), 3.5);
  EXPECT_THROW((*comm)->AllReduceSumAsync(torch::ones({4, 4}).t()), std::invalid_argument);
  EXPECT_THROW((*comm)->AllReduceAsync(torch::ones({4}, torch::kLong), ReduceOp::kMean),
               std::invalid_argument);
}

TEST(CommunicatorTest, BadArgumentsAreInvalidArgument) {
  auto store = MakeDirectoryKeyValueStore(test::MakeTempDir("gloo"));
  auto unknown = MakeCommunicator("mpi", store.get(), 0, 1, seconds(1));
  EXPECT_EQ(unknown.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(unknown.status().message().find("'mpi'"), std::string::npos);
  EXPECT_EQ(MakeCommunicator("gloo", store.get(), 2, 2, seconds(1)).status().code(),
            StatusCode::kInvalidArgument);
#if !defined(ADCTL_WITH_NCCL)
  auto nccl = MakeCommunicator("nccl", store.get(), 0, 1, seconds(1));
  EXPECT_EQ(nccl.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(nccl.status().message().find("CUDA"), std::string::npos);
#endif
}

}  // namespace
}  // namespace adctl
