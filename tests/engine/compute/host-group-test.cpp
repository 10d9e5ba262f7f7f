// HostGroup: the spec from flags and each launcher's environment, with every error naming what to
// fix; and the group itself over loopback TCP, its processes played by threads (and, once, by
// forked processes): rounds in rank order with payloads from 0 bytes to 64 MiB, a process that
// leaves or aborts ending every other's round, join and round timeouts naming who is missing, and
// processes that disagree refused. Waits are bounded by generous timeouts, never timed.
#include "compute/host-group.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <functional>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "loopback-port.h"
#include "test-data.h"

namespace spillway::compute {
namespace {

using Env = std::map<std::string, std::string>;

// Long enough for a loaded sanitizer build; no test waits this long when it passes.
constexpr double kTimeoutS = 60 * testing::kTimeScale;

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// Seconds as the messages write them ("1", "0.5").
std::string seconds(double s) {
  std::ostringstream out;
  out << s;
  return out.str();
}

// ---------------------------------------------------------------------------------------------
// The spec
// ---------------------------------------------------------------------------------------------

Result<ProcessGroupSpec> from_env(const Env& env) {
  return process_group_spec(-1, -1, "", env);
}

TEST(ProcessGroupSpec, NothingSetIsOneProcess) {
  auto spec = from_env({{"HOME", "/home/x"}});
  ASSERT_TRUE(spec.ok()) << spec.status().to_string();
  EXPECT_EQ(spec->rank, 0);
  EXPECT_EQ(spec->processes, 1);
  EXPECT_EQ(spec->rendezvous, "");
  EXPECT_FALSE(spec->multi());
  EXPECT_FALSE(spec->source.empty());
}

TEST(ProcessGroupSpec, Flags) {
  auto spec = process_group_spec(1, 3, "node01:29500", {});
  ASSERT_TRUE(spec.ok()) << spec.status().to_string();
  EXPECT_EQ(spec->rank, 1);
  EXPECT_EQ(spec->processes, 3);
  EXPECT_EQ(spec->rendezvous, "node01:29500");
  EXPECT_EQ(spec->source, "--rank/--processes");
  EXPECT_TRUE(spec->multi());
}

TEST(ProcessGroupSpec, FlagsWinOverTheEnvironment) {
  const Env env = {
      {"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "4"}, {"SPILLWAY_RENDEZVOUS", "envhost:1234"}};
  auto spec = process_group_spec(2, 3, "", env);
  ASSERT_TRUE(spec.ok()) << spec.status().to_string();
  EXPECT_EQ(spec->rank, 2);
  EXPECT_EQ(spec->processes, 3);
  EXPECT_EQ(spec->rendezvous, "envhost:1234") << "the address may come from the environment";
  spec = process_group_spec(2, 3, "flaghost:99", env);
  ASSERT_TRUE(spec.ok()) << spec.status().to_string();
  EXPECT_EQ(spec->rendezvous, "flaghost:99");
  // The flag's address also wins under a launcher.
  spec = process_group_spec(-1, -1, "flaghost:99", env);
  ASSERT_TRUE(spec.ok()) << spec.status().to_string();
  EXPECT_EQ(spec->rank, 0);
  EXPECT_EQ(spec->processes, 4);
  EXPECT_EQ(spec->rendezvous, "flaghost:99");
}

TEST(ProcessGroupSpec, FlagErrors) {
  auto spec = process_group_spec(1, -1, "h:1", {});
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(spec.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_TRUE(contains(spec.status().message(), "--rank 1 needs --processes"))
      << spec.status().message();

  spec = process_group_spec(-1, 2, "h:1", {});
  ASSERT_FALSE(spec.ok());
  EXPECT_TRUE(contains(spec.status().message(), "--processes 2 needs --rank"))
      << spec.status().message();

  spec = process_group_spec(-1, 1, "", {});
  ASSERT_TRUE(spec.ok()) << "--processes 1 alone is rank 0 of 1: " << spec.status().to_string();
  EXPECT_EQ(spec->rank, 0);
  EXPECT_EQ(spec->rendezvous, "") << "one process needs no address";

  spec = process_group_spec(0, 0, "", {});
  ASSERT_FALSE(spec.ok());
  EXPECT_TRUE(contains(spec.status().message(), "--processes is 0")) << spec.status().message();

  spec = process_group_spec(2, 2, "h:1", {});
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(spec.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_TRUE(
      contains(spec.status().message(), "--rank is 2 but --processes is 2: a rank is 0 .. 1"))
      << spec.status().message();

  spec = process_group_spec(0, 2, "", {});
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(spec.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_TRUE(contains(spec.status().message(), "--processes is 2 but no rendezvous address"))
      << spec.status().message();
  EXPECT_TRUE(contains(spec.status().message(), "SPILLWAY_RENDEZVOUS=host:port"))
      << spec.status().message();
}

struct LauncherCase {
  Env env;
  int rank;
  int processes;
  std::string rendezvous;
  std::string source;
};

TEST(ProcessGroupSpec, EveryLauncher) {
  const std::vector<LauncherCase> cases = {
      {{{"SPILLWAY_RANK", "1"}, {"SPILLWAY_PROCESSES", "2"}, {"SPILLWAY_RENDEZVOUS", "a:1"}},
       1,
       2,
       "a:1",
       "SPILLWAY_RANK"},
      {{{"SLURM_PROCID", "3"},
        {"SLURM_NTASKS", "4"},
        {"MASTER_ADDR", "n0"},
        {"MASTER_PORT", "29500"}},
       3,
       4,
       "n0:29500",
       "Slurm (SLURM_PROCID)"},
      {{{"OMPI_COMM_WORLD_RANK", "0"},
        {"OMPI_COMM_WORLD_SIZE", "2"},
        {"SPILLWAY_RENDEZVOUS", "b:2"}},
       0,
       2,
       "b:2",
       "Open MPI (OMPI_COMM_WORLD_RANK)"},
      {{{"PMI_RANK", "1"}, {"PMI_SIZE", "3"}, {"SPILLWAY_RENDEZVOUS", "c:3"}},
       1,
       3,
       "c:3",
       "MPICH (PMI_RANK)"},
      {{{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "10.0.0.1"}, {"MASTER_PORT", "29400"}},
       1,
       2,
       "10.0.0.1:29400",
       "torchrun (RANK)"},
      // SPILLWAY_RENDEZVOUS wins over MASTER_ADDR:MASTER_PORT.
      {{{"RANK", "0"},
        {"WORLD_SIZE", "2"},
        {"MASTER_ADDR", "m"},
        {"MASTER_PORT", "1"},
        {"SPILLWAY_RENDEZVOUS", "s:2"}},
       0,
       2,
       "s:2",
       "torchrun (RANK)"},
      // The nearest launcher wins: torchrun inside a Slurm allocation.
      {{{"SLURM_PROCID", "0"},
        {"SLURM_NTASKS", "1"},
        {"RANK", "1"},
        {"WORLD_SIZE", "2"},
        {"SPILLWAY_RENDEZVOUS", "d:4"}},
       1,
       2,
       "d:4",
       "torchrun (RANK)"},
      // mpirun inside a Slurm allocation.
      {{{"SLURM_PROCID", "0"},
        {"SLURM_NTASKS", "8"},
        {"OMPI_COMM_WORLD_RANK", "5"},
        {"OMPI_COMM_WORLD_SIZE", "6"},
        {"SPILLWAY_RENDEZVOUS", "e:5"}},
       5,
       6,
       "e:5",
       "Open MPI (OMPI_COMM_WORLD_RANK)"},
      // Spillway's own variables win over every launcher's.
      {{{"SPILLWAY_RANK", "0"},
        {"SPILLWAY_PROCESSES", "2"},
        {"SLURM_PROCID", "1"},
        {"SLURM_NTASKS", "2"},
        {"SPILLWAY_RENDEZVOUS", "f:6"}},
       0,
       2,
       "f:6",
       "SPILLWAY_RANK"},
      // One task: one process, no address needed.
      {{{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"}}, 0, 1, "", "Slurm (SLURM_PROCID)"},
      {{{"SPILLWAY_PROCESSES", "1"}}, 0, 1, "", "SPILLWAY_RANK"},
      // One process in a Slurm batch script that asked for several tasks, by SPILLWAY_PROCESSES.
      {{{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "4"}, {"SPILLWAY_PROCESSES", "1"}},
       0,
       1,
       "",
       "SPILLWAY_RANK"},
      // An empty variable is unset.
      {{{"SPILLWAY_RANK", ""},
        {"SPILLWAY_PROCESSES", ""},
        {"SLURM_PROCID", "1"},
        {"SLURM_NTASKS", "2"},
        {"SPILLWAY_RENDEZVOUS", ""},
        {"MASTER_ADDR", "m"},
        {"MASTER_PORT", "9"}},
       1,
       2,
       "m:9",
       "Slurm (SLURM_PROCID)"},
      // Addresses: IPv6 in brackets, a bare IPv6 MASTER_ADDR, spaces around numbers.
      {{{"SPILLWAY_RANK", " 1 "},
        {"SPILLWAY_PROCESSES", "2"},
        {"SPILLWAY_RENDEZVOUS", "[::1]:29500"}},
       1,
       2,
       "[::1]:29500",
       "SPILLWAY_RANK"},
      {{{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "fd00::1"}, {"MASTER_PORT", "7"}},
       0,
       2,
       "[fd00::1]:7",
       "torchrun (RANK)"},
  };
  for (const LauncherCase& c : cases) {
    std::string said;
    for (const auto& [k, v] : c.env) said += k + "=" + v + " ";
    auto spec = from_env(c.env);
    ASSERT_TRUE(spec.ok()) << said << spec.status().to_string();
    EXPECT_EQ(spec->rank, c.rank) << said;
    EXPECT_EQ(spec->processes, c.processes) << said;
    EXPECT_EQ(spec->rendezvous, c.rendezvous) << said;
    EXPECT_EQ(spec->source, c.source) << said;
  }
}

struct ErrorCase {
  Env env;
  std::vector<std::string> message_parts;
};

TEST(ProcessGroupSpec, EnvironmentErrorsNameTheVariable) {
  const std::vector<ErrorCase> cases = {
      {{{"SLURM_PROCID", "1"}}, {"SLURM_PROCID is set but SLURM_NTASKS is not"}},
      {{{"SPILLWAY_PROCESSES", "2"}, {"SPILLWAY_RENDEZVOUS", "a:1"}},
       {"SPILLWAY_PROCESSES is set but SPILLWAY_RANK is not", "0 .. 1"}},
      {{{"PMI_RANK", "x"}, {"PMI_SIZE", "2"}, {"SPILLWAY_RENDEZVOUS", "a:1"}},
       {"PMI_RANK is 'x', not a rank"}},
      {{{"RANK", "0"}, {"WORLD_SIZE", "two"}}, {"WORLD_SIZE is 'two', not a number"}},
      {{{"RANK", "0"}, {"WORLD_SIZE", "0"}}, {"WORLD_SIZE is 0"}},
      {{{"OMPI_COMM_WORLD_RANK", "2"},
        {"OMPI_COMM_WORLD_SIZE", "2"},
        {"SPILLWAY_RENDEZVOUS", "a:1"}},
       {"OMPI_COMM_WORLD_RANK is 2 but OMPI_COMM_WORLD_SIZE is 2: a rank is 0 .. 1"}},
      {{{"SLURM_PROCID", "-1"}, {"SLURM_NTASKS", "2"}, {"SPILLWAY_RENDEZVOUS", "a:1"}},
       {"SLURM_PROCID is -1"}},
      {{{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}},
       {"SLURM_NTASKS is 2 but no rendezvous address", "SPILLWAY_RENDEZVOUS=host:port",
        "MASTER_ADDR and MASTER_PORT", "with srun", "SPILLWAY_PROCESSES=1"}},
      {{{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "n0"}},
       {"MASTER_ADDR is set but MASTER_PORT is not"}},
      {{{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "1"}},
       {"MASTER_PORT is set but MASTER_ADDR is not"}},
      {{{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "n0"}, {"MASTER_PORT", "http"}},
       {"MASTER_ADDR:MASTER_PORT is 'n0:http'", "1 .. 65535"}},
      {{{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"SPILLWAY_RENDEZVOUS", "node01"}},
       {"SPILLWAY_RENDEZVOUS is 'node01', with no port", "host:port"}},
      {{{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"SPILLWAY_RENDEZVOUS", ":29500"}}, {"with no host"}},
      {{{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"SPILLWAY_RENDEZVOUS", "n:70000"}}, {"1 .. 65535"}},
      {{{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"SPILLWAY_RENDEZVOUS", "n:"}}, {"1 .. 65535"}},
      {{{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"SPILLWAY_RENDEZVOUS", "::1:29500"}},
       {"put an IPv6 address in brackets"}},
      {{{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"SPILLWAY_RENDEZVOUS", "[::1]29500"}},
       {"SPILLWAY_RENDEZVOUS is '[::1]29500'"}},
  };
  for (const ErrorCase& c : cases) {
    std::string said;
    for (const auto& [k, v] : c.env) said += k + "=" + v + " ";
    auto spec = from_env(c.env);
    ASSERT_FALSE(spec.ok()) << said;
    EXPECT_EQ(spec.status().code(), ErrorCode::kInvalidArgument) << said;
    for (const std::string& part : c.message_parts)
      EXPECT_TRUE(contains(spec.status().message(), part))
          << said << "\n  message: " << spec.status().message() << "\n  expected: " << part;
  }
}

TEST(ProcessGroupSpec, EnvironmentReadsTheProcesssOwn) {
  ASSERT_EQ(setenv("SPILLWAY_HOST_GROUP_TEST", "a=b", 1), 0);
  const Env env = environment();
  unsetenv("SPILLWAY_HOST_GROUP_TEST");
  auto it = env.find("SPILLWAY_HOST_GROUP_TEST");
  ASSERT_NE(it, env.end());
  EXPECT_EQ(it->second, "a=b") << "split at the first '='";
}

// ---------------------------------------------------------------------------------------------
// The group
// ---------------------------------------------------------------------------------------------

ProcessGroupSpec spec_of(int rank, int processes, const std::string& rendezvous) {
  ProcessGroupSpec spec;
  spec.rank = rank;
  spec.processes = processes;
  spec.rendezvous = rendezvous;
  spec.source = "the test";
  return spec;
}

using Joined = Result<std::unique_ptr<HostGroup>>;

// Joins `specs` concurrently, one thread each, as the machines of a run would.
std::vector<Joined> join_all(const std::vector<ProcessGroupSpec>& specs,
                             double timeout_s = kTimeoutS) {
  std::vector<std::optional<Joined>> joined(specs.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < specs.size(); ++i)
    threads.emplace_back([&joined, &specs, i, timeout_s] {
      joined[i].emplace(HostGroup::join(specs[i], timeout_s));
    });
  for (std::thread& t : threads) t.join();
  std::vector<Joined> out;
  for (auto& j : joined) out.push_back(std::move(*j));
  return out;
}

std::vector<std::unique_ptr<HostGroup>> group_of(int n, const std::string& rendezvous) {
  std::vector<ProcessGroupSpec> specs;
  for (int r = 0; r < n; ++r) specs.push_back(spec_of(r, n, rendezvous));
  std::vector<std::unique_ptr<HostGroup>> group;
  for (Joined& j : join_all(specs)) {
    EXPECT_TRUE(j.ok()) << j.status().to_string();
    if (!j.ok()) return {};
    group.push_back(std::move(j).value());
  }
  return group;
}

using Gathered = Result<std::vector<std::string>>;

// One round on every member at once: member r sends payload(r).
std::vector<Gathered> round_all(const std::vector<std::unique_ptr<HostGroup>>& group,
                                const std::function<std::string(int)>& payload,
                                double timeout_s = kTimeoutS) {
  std::vector<std::optional<Gathered>> got(group.size());
  std::vector<std::thread> threads;
  for (size_t r = 0; r < group.size(); ++r)
    threads.emplace_back([&, r] {
      const std::string mine = payload(static_cast<int>(r));
      got[r].emplace(group[r]->all_gather(mine, timeout_s));
    });
  for (std::thread& t : threads) t.join();
  std::vector<Gathered> out;
  for (auto& g : got) out.push_back(std::move(*g));
  return out;
}

// A payload that tells rank, round and offset apart.
std::string pattern(int rank, int round, size_t bytes) {
  std::string s(bytes, '\0');
  for (size_t i = 0; i < bytes; ++i) s[i] = static_cast<char>(rank * 31 + round * 7 + i * 13);
  return s;
}

TEST(HostGroup, GroupOfOneNeedsNoAddress) {
  auto joined = HostGroup::join(spec_of(0, 1, ""), kTimeoutS);
  ASSERT_TRUE(joined.ok()) << joined.status().to_string();
  HostGroup& g = **joined;
  EXPECT_EQ(g.process(), 0);
  EXPECT_EQ(g.processes(), 1);
  for (const std::string& mine : {std::string(), std::string("loss=1.5")}) {
    auto all = g.all_gather(mine, 1);
    ASSERT_TRUE(all.ok()) << all.status().to_string();
    EXPECT_EQ(*all, std::vector<std::string>{mine});
  }
  g.abort();
  auto all = g.all_gather("x", 1);
  ASSERT_FALSE(all.ok());
  EXPECT_EQ(all.status().code(), ErrorCode::kIo);
  EXPECT_TRUE(contains(all.status().message(), "aborted")) << all.status().message();
}

TEST(HostGroup, BadSpecIsRefused) {
  auto joined = HostGroup::join(spec_of(3, 3, "127.0.0.1:1"), kTimeoutS);
  ASSERT_FALSE(joined.ok());
  EXPECT_EQ(joined.status().code(), ErrorCode::kInvalidArgument);
  joined = HostGroup::join(spec_of(0, 2, "no-port"), kTimeoutS);
  ASSERT_FALSE(joined.ok());
  EXPECT_EQ(joined.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_TRUE(contains(joined.status().message(), "no port")) << joined.status().message();
}

TEST(HostGroup, ThreeProcessesGatherInRankOrder) {
  auto group = group_of(3, testing::loopback_address());
  ASSERT_EQ(group.size(), 3u);
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(group[r]->process(), r);
    EXPECT_EQ(group[r]->processes(), 3);
  }
  // Sizes differ between ranks and rounds, 0 bytes included; some round's sizes are all 0.
  auto bytes = [](int rank, int round) -> size_t {
    if (round % 7 == 3) return 0;
    return static_cast<size_t>((rank * 977 + round * 4099) % 70001) * (rank == round % 3 ? 0 : 1);
  };
  for (int round = 0; round < 40; ++round) {
    auto got = round_all(group, [&](int r) { return pattern(r, round, bytes(r, round)); });
    for (int r = 0; r < 3; ++r) {
      ASSERT_TRUE(got[r].ok()) << "round " << round << ", process " << r << ": "
                               << got[r].status().to_string();
      ASSERT_EQ(got[r]->size(), 3u);
      for (int from = 0; from < 3; ++from)
        ASSERT_EQ((*got[r])[from], pattern(from, round, bytes(from, round)))
            << "round " << round << ", process " << r << "'s copy of process " << from << "'s";
    }
  }
}

TEST(HostGroup, LargePayloads) {
  auto group = group_of(3, testing::loopback_address());
  ASSERT_EQ(group.size(), 3u);
  constexpr size_t kLarge = size_t{64} << 20;
  const std::vector<size_t> bytes = {1, kLarge + 3, 0};
  for (int round = 0; round < 2; ++round) {
    auto got = round_all(group, [&](int r) { return pattern(r, round, bytes[r]); });
    for (int r = 0; r < 3; ++r) {
      ASSERT_TRUE(got[r].ok()) << got[r].status().to_string();
      ASSERT_EQ(got[r]->size(), 3u);
      for (int from = 0; from < 3; ++from) {
        ASSERT_EQ((*got[r])[from].size(), bytes[from]);
        ASSERT_TRUE((*got[r])[from] == pattern(from, round, bytes[from]))
            << "process " << r << "'s copy of process " << from << "'s payload differs";
      }
    }
  }
}

// Member `leaver` is destroyed between rounds: the others' next round fails naming it.
void expect_leaving_ends_the_round(int leaver) {
  SCOPED_TRACE("process " + std::to_string(leaver) + " leaves");
  auto group = group_of(3, testing::loopback_address());
  ASSERT_EQ(group.size(), 3u);
  auto got = round_all(group, [](int r) { return std::to_string(r); });
  for (auto& g : got) ASSERT_TRUE(g.ok()) << g.status().to_string();

  group[leaver].reset();
  std::vector<std::optional<Gathered>> after(3);
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r) {
    if (r == leaver) continue;
    threads.emplace_back([&, r] { after[r].emplace(group[r]->all_gather("next", kTimeoutS)); });
  }
  for (std::thread& t : threads) t.join();
  for (int r = 0; r < 3; ++r) {
    if (r == leaver) continue;
    ASSERT_FALSE(after[r]->ok()) << "process " << r;
    EXPECT_EQ(after[r]->status().code(), ErrorCode::kIo);
    EXPECT_TRUE(contains(after[r]->status().message(),
                         "process " + std::to_string(leaver) + " left the group"))
        << "process " << r << ": " << after[r]->status().message();
    // Later rounds fail alike, at once.
    auto again = group[r]->all_gather("again", kTimeoutS);
    ASSERT_FALSE(again.ok());
    EXPECT_EQ(again.status().message(), after[r]->status().message());
  }
}

TEST(HostGroup, MemberThatLeavesEndsTheOthersNextRound) {
  expect_leaving_ends_the_round(2);
}

TEST(HostGroup, RankZeroThatLeavesEndsTheOthersNextRound) {
  expect_leaving_ends_the_round(0);
}

TEST(HostGroup, MemberThatLeavesMidRoundEndsIt) {
  auto group = group_of(3, testing::loopback_address());
  ASSERT_EQ(group.size(), 3u);
  // Processes 0 and 1 wait in a round with no time limit; process 2 leaves instead of sending
  // (before or after they started waiting: either way their round must end).
  std::optional<Gathered> zero, one;
  std::thread t0([&] { zero.emplace(group[0]->all_gather("0", 0)); });
  std::thread t1([&] { one.emplace(group[1]->all_gather("1", 0)); });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  group[2].reset();
  t0.join();
  t1.join();
  for (const auto* got : {&*zero, &*one}) {
    ASSERT_FALSE(got->ok());
    EXPECT_EQ(got->status().code(), ErrorCode::kIo);
    EXPECT_TRUE(contains(got->status().message(), "process 2 left the group (connection closed)"))
        << got->status().message();
  }
}

// check() answers without a round: ok while the group stands, and once a member left the error
// its next round would return, on every other member, which then fails its rounds alike.
TEST(HostGroup, CheckSeesAMemberLeaveWithoutARound) {
  auto group = group_of(3, testing::loopback_address());
  ASSERT_EQ(group.size(), 3u);
  for (auto& g : group) EXPECT_TRUE(g->check().ok());
  group[2].reset();
  for (int p : {0, 1}) {
    Status seen;
    // The server's error frame reaches each member a moment after the close.
    for (int i = 0; i < 1000 && seen.ok(); ++i) {
      seen = group[p]->check();
      if (seen.ok()) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    EXPECT_EQ(seen.code(), ErrorCode::kIo) << "process " << p;
    EXPECT_TRUE(contains(seen.message(), "process 2 left the group (connection closed)"))
        << seen.message();
    auto next = group[p]->all_gather("y", 60);
    ASSERT_FALSE(next.ok());
    EXPECT_EQ(next.status().message(), seen.message());
  }
}

// Process `aborter` aborts from another thread while it and one other process sit in all_gather
// (the third never sends): both rounds end, and so does the third's next.
void expect_abort_unblocks(int aborter) {
  SCOPED_TRACE("process " + std::to_string(aborter) + " aborts");
  auto group = group_of(3, testing::loopback_address());
  ASSERT_EQ(group.size(), 3u);
  const int waiter = aborter == 0 ? 1 : 0;
  std::optional<Gathered> aborted_round, waiting_round;
  std::thread a([&] { aborted_round.emplace(group[aborter]->all_gather("a", 0)); });
  std::thread w([&] { waiting_round.emplace(group[waiter]->all_gather("w", 0)); });
  // Whether abort() comes before or during the round, the round must end.
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  std::thread([&] { group[aborter]->abort(); }).join();
  a.join();
  w.join();
  ASSERT_FALSE(aborted_round->ok());
  EXPECT_EQ(aborted_round->status().code(), ErrorCode::kIo);
  EXPECT_TRUE(contains(aborted_round->status().message(), "aborted"))
      << aborted_round->status().message();
  ASSERT_FALSE(waiting_round->ok());
  EXPECT_EQ(waiting_round->status().code(), ErrorCode::kIo);
  EXPECT_TRUE(contains(waiting_round->status().message(),
                       "process " + std::to_string(aborter) + " left the group"))
      << waiting_round->status().message();
  const int third = 3 - aborter - waiter;
  auto late = group[third]->all_gather("t", kTimeoutS);
  ASSERT_FALSE(late.ok());
  EXPECT_TRUE(contains(late.status().message(), "process " + std::to_string(aborter) + " left"))
      << late.status().message();
  group[aborter]->abort();  // idempotent
}

TEST(HostGroup, AbortUnblocksAllGather) {
  expect_abort_unblocks(1);
}

TEST(HostGroup, AbortOnRankZeroUnblocksAllGather) {
  expect_abort_unblocks(0);
}

TEST(HostGroup, JoinTimesOutNamingTheMissing) {
  const std::string address = testing::loopback_address();
  // Long enough for process 1 to join in a loaded sanitizer build; process 2 never comes.
  const double limit = 1 * testing::kTimeScale;
  auto joined = join_all({spec_of(0, 3, address), spec_of(1, 3, address)}, limit);
  for (int r = 0; r < 2; ++r) {
    ASSERT_FALSE(joined[r].ok()) << "process " << r;
    EXPECT_EQ(joined[r].status().code(), ErrorCode::kIo);
    const std::string& m = joined[r].status().message();
    EXPECT_TRUE(contains(m, "did not form within " + seconds(limit) + " s")) << m;
    EXPECT_TRUE(contains(m, "process 2 did not join")) << m;
    EXPECT_TRUE(contains(m, address)) << m;
  }
  // Processes 1 and 2 never come.
  joined = join_all({spec_of(0, 3, testing::loopback_address())}, 0.5);
  ASSERT_FALSE(joined[0].ok());
  EXPECT_TRUE(contains(joined[0].status().message(), "processes 1, 2 did not join"))
      << joined[0].status().message();
}

TEST(HostGroup, JoinWithoutProcessZeroTimesOut) {
  const std::string address = testing::loopback_address();
  auto joined = HostGroup::join(spec_of(1, 2, address), 0.5);
  ASSERT_FALSE(joined.ok());
  EXPECT_EQ(joined.status().code(), ErrorCode::kIo);
  const std::string& m = joined.status().message();
  EXPECT_TRUE(contains(m, "process 1 could not reach process 0's rendezvous server at " + address))
      << m;
  EXPECT_TRUE(contains(m, "within 0.5 s")) << m;
}

TEST(HostGroup, ProcessesStartSecondsApart) {
  // Process 1 starts first and retries until process 0 listens.
  const std::string address = testing::loopback_address();
  std::optional<Joined> one;
  std::thread t([&] { one.emplace(HostGroup::join(spec_of(1, 2, address), kTimeoutS)); });
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  auto zero = HostGroup::join(spec_of(0, 2, address), kTimeoutS);
  t.join();
  ASSERT_TRUE(zero.ok()) << zero.status().to_string();
  ASSERT_TRUE(one->ok()) << one->status().to_string();
}

TEST(HostGroup, DuplicateRankIsRefused) {
  const std::string address = testing::loopback_address();
  auto joined = join_all({spec_of(0, 3, address), spec_of(1, 3, address), spec_of(1, 3, address)});
  for (int i = 0; i < 3; ++i) {
    ASSERT_FALSE(joined[i].ok()) << "member " << i;
    EXPECT_EQ(joined[i].status().code(), ErrorCode::kInvalidArgument);
    EXPECT_TRUE(contains(joined[i].status().message(), "two processes claim rank 1"))
        << joined[i].status().message();
    EXPECT_TRUE(contains(joined[i].status().message(), "the test"))
        << "names where the ranks came from: " << joined[i].status().message();
  }
}

TEST(HostGroup, DifferentProcessCountsAreRefused) {
  const std::string address = testing::loopback_address();
  auto joined = join_all({spec_of(0, 2, address), spec_of(1, 3, address)});
  for (int i = 0; i < 2; ++i) {
    ASSERT_FALSE(joined[i].ok()) << "member " << i;
    EXPECT_EQ(joined[i].status().code(), ErrorCode::kInvalidArgument);
    EXPECT_TRUE(
        contains(joined[i].status().message(),
                 "process 1 (at 127.0.0.1) was started for 3 processes and process 0 for 2"))
        << joined[i].status().message();
  }
}

TEST(HostGroup, LateProcessIsTurnedAwayAndTheGroupGoesOn) {
  const std::string address = testing::loopback_address();
  auto group = group_of(2, address);
  ASSERT_EQ(group.size(), 2u);
  auto late = HostGroup::join(spec_of(1, 2, address), kTimeoutS);
  ASSERT_FALSE(late.ok());
  EXPECT_EQ(late.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_TRUE(contains(late.status().message(), "had formed")) << late.status().message();
  auto got = round_all(group, [](int r) { return std::string(1, static_cast<char>('a' + r)); });
  for (auto& g : got) {
    ASSERT_TRUE(g.ok()) << g.status().to_string();
    EXPECT_EQ(*g, (std::vector<std::string>{"a", "b"}));
  }
}

// A raw TCP connection to `port` on loopback, retried while nothing listens yet.
int connect_raw(int port) {
  for (int attempt = 0; attempt < 6000; ++attempt) {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(static_cast<uint16_t>(port));
    if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) return fd;
    ::close(fd);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return -1;
}

int port_of(const std::string& address) {
  return std::stoi(address.substr(address.rfind(':') + 1));
}

TEST(HostGroup, OtherProtocolVersionIsRefused) {
  const std::string address = testing::loopback_address();
  std::optional<Joined> zero;
  std::thread t([&] { zero.emplace(HostGroup::join(spec_of(0, 2, address), kTimeoutS)); });
  const int fd = connect_raw(port_of(address));
  if (fd < 0) t.join();  // before the assertion returns (process 0 gives up at its timeout)
  ASSERT_GE(fd, 0);
  // A hello as process 1 of 2 would send it, from a Spillway that speaks version 99.
  char hello[36] = {'S', 'P', 'W', 'Y', 'G', 'R', 'P', '\0', 99, 0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0};
  ASSERT_EQ(::send(fd, hello, sizeof hello, MSG_NOSIGNAL), static_cast<ssize_t>(sizeof hello));
  // It gets an error frame (type 3) with the message, too.
  std::string got;
  char buf[4096];
  for (ssize_t n; (n = ::recv(fd, buf, sizeof buf, 0)) > 0;) got.append(buf, n);
  ::close(fd);
  t.join();
  ASSERT_FALSE(zero->ok());
  EXPECT_EQ(zero->status().code(), ErrorCode::kInvalidArgument);
  const std::string& m = zero->status().message();
  EXPECT_TRUE(contains(m, "process 1 (at 127.0.0.1) speaks version 99")) << m;
  EXPECT_TRUE(contains(m, "run the same Spillway on every machine")) << m;
  ASSERT_GE(got.size(), 16u);
  EXPECT_EQ(got[0], 3);
  EXPECT_EQ(got.substr(16), m);
}

TEST(HostGroup, StrayClientIsIgnored) {
  const std::string address = testing::loopback_address();
  std::optional<Joined> zero;
  std::thread t([&] { zero.emplace(HostGroup::join(spec_of(0, 2, address), kTimeoutS)); });
  // Something that is not a Spillway process connects and sends an HTTP request.
  const int stray = connect_raw(port_of(address));
  if (stray < 0) t.join();  // before the assertion returns (process 0 gives up at its timeout)
  ASSERT_GE(stray, 0);
  const char request[] = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
  ASSERT_EQ(::send(stray, request, sizeof request - 1, MSG_NOSIGNAL),
            static_cast<ssize_t>(sizeof request - 1));
  auto one = HostGroup::join(spec_of(1, 2, address), kTimeoutS);
  t.join();
  ::close(stray);
  ASSERT_TRUE(zero->ok()) << zero->status().to_string();
  ASSERT_TRUE(one.ok()) << one.status().to_string();
  std::vector<std::unique_ptr<HostGroup>> group;
  group.push_back(std::move(*zero).value());
  group.push_back(std::move(one).value());
  auto got = round_all(group, [](int r) { return std::to_string(r * 10); });
  for (auto& g : got) {
    ASSERT_TRUE(g.ok()) << g.status().to_string();
    EXPECT_EQ(*g, (std::vector<std::string>{"0", "10"}));
  }
}

TEST(HostGroup, RoundTimeoutNamesTheSilent) {
  auto group = group_of(3, testing::loopback_address());
  ASSERT_EQ(group.size(), 3u);
  // Process 2 does not send this round.
  std::optional<Gathered> zero, one;
  // Process 0's limit, long enough for process 1 to send in a loaded sanitizer build.
  const double limit = 1 * testing::kTimeScale;
  std::thread t0([&] { zero.emplace(group[0]->all_gather("0", limit)); });
  std::thread t1([&] { one.emplace(group[1]->all_gather("1", kTimeoutS)); });
  t0.join();
  t1.join();
  for (const auto* got : {&*zero, &*one}) {
    ASSERT_FALSE(got->ok());
    EXPECT_EQ(got->status().code(), ErrorCode::kIo);
    EXPECT_TRUE(contains(got->status().message(),
                         "process 2 did not send within " + seconds(limit) + " s (round 1"))
        << got->status().message();
  }
  auto late = group[2]->all_gather("2", kTimeoutS);
  ASSERT_FALSE(late.ok());
  EXPECT_TRUE(contains(late.status().message(), "process 2 did not send"))
      << late.status().message();
}

TEST(HostGroup, HostNameAddress) {
  auto group = group_of(2, "localhost:" + std::to_string(testing::free_loopback_port()));
  ASSERT_EQ(group.size(), 2u);
  auto got = round_all(group, [](int r) { return std::string(r + 1, 'x'); });
  for (auto& g : got) {
    ASSERT_TRUE(g.ok()) << g.status().to_string();
    EXPECT_EQ(*g, (std::vector<std::string>{"x", "xx"}));
  }
}

TEST(HostGroup, Ipv6Address) {
  const int probe = ::socket(AF_INET6, SOCK_STREAM, 0);
  sockaddr_in6 a{};
  a.sin6_family = AF_INET6;
  a.sin6_addr = in6addr_loopback;
  const bool have_v6 = probe >= 0 && ::bind(probe, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  socklen_t len = sizeof a;
  const bool named = have_v6 && ::getsockname(probe, reinterpret_cast<sockaddr*>(&a), &len) == 0;
  if (probe >= 0) ::close(probe);
  if (!named) GTEST_SKIP() << "this machine has no IPv6 loopback";
  auto group = group_of(2, "[::1]:" + std::to_string(ntohs(a.sin6_port)));
  ASSERT_EQ(group.size(), 2u);
  auto got = round_all(group, [](int r) { return std::to_string(r); });
  for (auto& g : got) {
    ASSERT_TRUE(g.ok()) << g.status().to_string();
    EXPECT_EQ(*g, (std::vector<std::string>{"0", "1"}));
  }
}

TEST(HostGroup, PortInUseIsRefused) {
  const int holder = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  ASSERT_EQ(::bind(holder, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(::listen(holder, 1), 0);
  socklen_t len = sizeof a;
  ASSERT_EQ(::getsockname(holder, reinterpret_cast<sockaddr*>(&a), &len), 0);
  const std::string address = "127.0.0.1:" + std::to_string(ntohs(a.sin_port));
  auto joined = HostGroup::join(spec_of(0, 2, address), kTimeoutS);
  ::close(holder);
  ASSERT_FALSE(joined.ok());
  EXPECT_EQ(joined.status().code(), ErrorCode::kIo);
  EXPECT_TRUE(contains(joined.status().message(), "pick another port"))
      << joined.status().message();
}

// Real processes: a forked child is process 1. It gathers, then (second run) is killed with
// SIGKILL, as a machine's worker that crashes: process 0's next round names it.
TEST(HostGroup, ForkedProcesses) {
  const std::string address = testing::loopback_address();
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // The child: only _exit, never return into gtest.
    auto joined = HostGroup::join(spec_of(1, 2, address), kTimeoutS);
    if (!joined.ok()) _exit(10);
    for (int round = 0; round < 5; ++round) {
      auto all = (*joined)->all_gather(pattern(1, round, 1000 + round), kTimeoutS);
      if (!all.ok()) _exit(11);
      if (all->size() != 2 || (*all)[0] != pattern(0, round, 2000) ||
          (*all)[1] != pattern(1, round, 1000 + round))
        _exit(12);
    }
    ::pause();  // until killed
    _exit(13);
  }
  // A failed assertion must not leave the child behind.
  struct Reaper {
    pid_t pid;
    ~Reaper() {
      if (pid > 0) {
        ::kill(pid, SIGKILL);
        ::waitpid(pid, nullptr, 0);
      }
    }
  } reaper{child};
  auto joined = HostGroup::join(spec_of(0, 2, address), kTimeoutS);
  ASSERT_TRUE(joined.ok()) << joined.status().to_string();
  for (int round = 0; round < 5; ++round) {
    auto all = (*joined)->all_gather(pattern(0, round, 2000), kTimeoutS);
    ASSERT_TRUE(all.ok()) << all.status().to_string();
    ASSERT_EQ(all->size(), 2u);
    EXPECT_EQ((*all)[1], pattern(1, round, 1000 + round));
  }
  ASSERT_EQ(::kill(child, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  reaper.pid = -1;
  ASSERT_TRUE(WIFSIGNALED(status))
      << "the child exited with " << WEXITSTATUS(status) << " before it was killed";
  auto after = (*joined)->all_gather("next", kTimeoutS);
  ASSERT_FALSE(after.ok());
  EXPECT_EQ(after.status().code(), ErrorCode::kIo);
  EXPECT_TRUE(contains(after.status().message(), "process 1 left the group"))
      << after.status().message();
}

}  // namespace
}  // namespace spillway::compute
