// Data parallel (train/data-parallel-engine.h) on the CPU backend: N CpuBackends, one thread each,
// summing their gradients through the CPU group (compute/cpu/cpu-communicator.h). The schedule
// is the GPU's — each rank's share of the micro-batches, the reduce-scatter of every block's
// gradient, each rank's 1/N share downloaded into the one host gradient, the gradient norm over
// the ranks — so these tests hold it to the golden trajectories (PyTorch's) and to the one-device
// run, give the same bits twice, and end a step that one rank cannot finish without a hang.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>

#include "compute/cpu/cpu-backend.h"
#include "state-rig.h"
#include "test-data.h"
#include "thread-exchanges.h"
#include "train/data-parallel-engine.h"

namespace spillway {
namespace {
using testing::DpRig;
using testing::Golden;
using testing::rig_config;
using testing::ThreadExchanges;

struct Case {
  std::string model;
  int micro_batch_size;
  int ranks;
};

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  const Case& c = info.param;
  return spillway::testing::test_name(c.model + "_mb" + std::to_string(c.micro_batch_size) +
                                      "_ranks" + std::to_string(c.ranks));
}

class DataParallelGolden : public ::testing::TestWithParam<Case> {};

// N ranks train the golden trajectory: the reference's losses, gradient norms and final weights to
// golden-test.cpp's tolerances, and the one-device run's within float rounding (the gradient's sum
// over ranks is a regrouping of the one device's sum over micro-batches).
TEST_P(DataParallelGolden, MatchesTheReferenceAndOneDevice) {
  SPILLWAY_REQUIRE_DATA();
  const Case c = GetParam();
  Golden g(c.model);
  DpRig one, dp;
  ASSERT_OK(one.init(g, c.micro_batch_size, 1));
  ASSERT_OK(dp.init(g, c.micro_batch_size, c.ranks));
  EXPECT_EQ(dp.engine->ranks(), c.ranks);
  const int steps = g.meta["adamw"]["steps"];
  std::vector<double> losses, norms, one_losses, one_norms;
  ASSERT_OK(one.run(g, c.micro_batch_size, steps, &one_losses, &one_norms));
  ASSERT_OK(dp.run(g, c.micro_batch_size, steps, &losses, &norms));
  for (int s = 0; s < steps; ++s) {
    EXPECT_NEAR(losses[s], g.meta["step_losses"][s].get<double>(), testing::step_loss_tolerance(s))
        << "step " << s + 1;
    EXPECT_NEAR(norms[s], g.meta["step_grad_norms_before_clip"][s].get<double>(), 1e-4 * norms[s]);
    EXPECT_NEAR(losses[s], one_losses[s], 1e-6 * std::fabs(one_losses[s])) << "step " << s + 1;
    EXPECT_NEAR(norms[s], one_norms[s], 1e-5 * one_norms[s]) << "step " << s + 1;
  }
  double num = 0, den = 0;
  for (size_t b = 0; b < g.layout.num_blocks(); ++b) {
    for (const ParamView& p : g.layout.blocks()[b].params) {
      auto ref = testing::read_f32(*g.traj, p.name);
      const float* x = dp.state->master(b) + p.offset;
      for (size_t i = 0; i < p.numel; ++i) {
        num += (double(x[i]) - ref[i]) * (double(x[i]) - ref[i]);
        den += double(ref[i]) * ref[i];
      }
    }
  }
  EXPECT_LT(std::sqrt(num / den), 1e-4);
  // Each rank brought down its share of every gradient (ceil(numel / N) floats, fewer for the last
  // ranks of a block that does not split evenly): the host link carries each gradient once, and
  // each rank its own tokens' losses and its sums of squares.
  uint64_t grads = 0;
  for (const auto& b : g.layout.blocks()) grads += b.numel * 4;
  const uint64_t tokens = uint64_t(g.B) * g.T, blocks = g.layout.num_blocks();
  EXPECT_EQ(one.engine->d2h_bytes(), steps * (grads + tokens * 4 + blocks * 8));
  EXPECT_EQ(dp.engine->d2h_bytes(), steps * (grads + tokens * 4 + c.ranks * blocks * 8));
}

INSTANTIATE_TEST_SUITE_P(Cases, DataParallelGolden,
                         ::testing::Values(Case{"stories260K", 1, 2}, Case{"stories260K", 1, 4},
                                           Case{"stories260K", 2, 2}, Case{"qwen2-tiny", 1, 3},
                                           Case{"llama-mha-tiny", 1, 2},
                                           Case{"gemma3-tiny", 1, 2},  // tied embeddings
                                           Case{"qwen3-tiny", 1, 3}),
                         case_name);

// The same job twice gives the same bits, and strict streams (each stream's work held until
// someone waits for it) give the bits of the synchronous run: the reduce, the share's download
// and its sum of squares are ordered by events.
TEST(DataParallel, SameBitsTwiceAndOnStrictStreams) {
  SPILLWAY_REQUIRE_DATA();
  Golden g("qwen2-tiny");
  DpRig a, b, strict;
  ASSERT_OK(a.init(g, 1, 3));
  ASSERT_OK(b.init(g, 1, 3));
  ASSERT_OK(strict.init(g, 1, 3, /*strict=*/true));
  const int steps = g.meta["adamw"]["steps"];
  std::vector<double> la, na, lb, nb, ls, ns;
  ASSERT_OK(a.run(g, 1, steps, &la, &na));
  ASSERT_OK(b.run(g, 1, steps, &lb, &nb));
  ASSERT_OK(strict.run(g, 1, steps, &ls, &ns));
  EXPECT_EQ(la, lb);
  EXPECT_EQ(na, nb);
  EXPECT_EQ(la, ls);
  EXPECT_EQ(na, ns);
  const std::vector<float> sa = a.all_state(), sb = b.all_state(), ss = strict.all_state();
  ASSERT_EQ(sa.size(), sb.size());
  EXPECT_EQ(0, std::memcmp(sa.data(), sb.data(), sa.size() * 4)) << "twice";
  EXPECT_EQ(0, std::memcmp(sa.data(), ss.data(), sa.size() * 4)) << "strict streams";
}

// A stop request in the middle of a step ends every rank's pass (the first to see it aborts the
// group, so no rank waits for a collective that will never come) and the step is kCancelled.
TEST(DataParallel, AStopMidStepEndsEveryRank) {
  SPILLWAY_REQUIRE_DATA();
  Golden g("stories260K");
  DpRig dp;
  ASSERT_OK(dp.init(g, 1, 2));
  std::atomic<bool> stop{false};
  dp.engine->set_stop_flag(&stop);
  // Rank 0's view: the stop comes while the ranks stream layer 2; the gate is shared.
  std::atomic<bool> fired{false};
  dp.engine->set_weight_gate([&](size_t b) {
    if (b == 3 && !fired.exchange(true)) stop = true;
  });
  auto r = dp.engine->forward_backward(g.batch(0, 1));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kCancelled) << r.status().to_string();
  // The group is aborted: the next step says so instead of hanging.
  auto again = dp.engine->forward_backward(g.batch(1, 1));
  ASSERT_FALSE(again.ok());
  EXPECT_NE(again.status().message().find("aborted the group"), std::string::npos)
      << again.status().to_string();
  // Rank 0 alone still evaluates (forward needs no collective).
  stop = false;
  StepBatch half = g.batch(0, 1);  // rank 0's engine takes up to 2 micro-batches of 1
  half.micro_batches = 2;
  half.input_ids = half.input_ids.first(2 * g.T);
  half.labels = half.labels.first(2 * g.T);
  auto eval = dp.engine->rank(0).forward(half);
  EXPECT_TRUE(eval.ok()) << eval.status().to_string();
}

// One rank fails (a token id out of the vocabulary in its share): the others end, and the step's
// error is that rank's, naming it.
TEST(DataParallel, ARankThatFailsEndsTheStepWithItsError) {
  SPILLWAY_REQUIRE_DATA();
  Golden g("stories260K");
  DpRig dp;
  ASSERT_OK(dp.init(g, 1, 2));
  StepBatch batch = g.batch(0, 1);
  std::vector<int32_t> ids(batch.input_ids.begin(), batch.input_ids.end());
  ids.back() = 1 << 20;  // rank 1's share
  batch.input_ids = ids;
  auto r = dp.engine->forward_backward(batch);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("CPU rank 1"), std::string::npos) << r.status().to_string();
  EXPECT_NE(r.status().message().find("outside the vocabulary"), std::string::npos)
      << r.status().to_string();
}

// A step that does not finish within its time limit (a rank stuck: here rank 1's pass held in the
// weight gate while rank 0 waits for it at a reduce-scatter) is aborted by the watchdog and fails
// naming the ranks still running, instead of hanging the run.
TEST(DataParallel, TheWatchdogEndsAHungStep) {
  SPILLWAY_REQUIRE_DATA();
  Golden g("stories260K");
  DpRig dp;
  ASSERT_OK(dp.init(g, 1, 2));
  dp.engine->set_step_timeout(0.5);
  std::atomic<bool> held{false};
  dp.engine->set_weight_gate([&](size_t b) {
    if (b == 2 && !held.exchange(true)) std::this_thread::sleep_for(std::chrono::seconds(3));
  });
  const auto t0 = std::chrono::steady_clock::now();
  auto r = dp.engine->forward_backward(g.batch(0, 1));
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("the step did not finish within 0.5 s on CPU rank"),
            std::string::npos)
      << r.status().to_string();
  EXPECT_NE(r.status().message().find("the last checkpoint stands"), std::string::npos);
  EXPECT_LT(took, 60.0) << "bounded: the held rank wakes after 3 s and finds the group aborted";
}

// Every rank's timeline reaches the span sink, tagged with its device (on the CPU backend the
// rank): both ranks' spans of every block, the reduce-scatter's among them, each within its own
// step. With one rank the spans name no device, as before data parallel.
TEST(DataParallel, TheSpanSinkHearsEveryRankTaggedWithItsDevice) {
  SPILLWAY_REQUIRE_DATA();
  Golden g("stories260K");
  struct Heard {
    std::optional<int> device;
    size_t block;
    std::string phase;
    double start, end;
  };
  std::mutex mu;  // the ranks' threads call the sink at once
  std::vector<Heard> heard;
  auto sink = [&](std::optional<int> device, size_t block, const char* phase, double start,
                  double end) {
    std::lock_guard<std::mutex> lock(mu);
    heard.push_back({device, block, phase, start, end});
  };
  const double t0 = 100.0;
  const size_t blocks = g.layout.num_blocks();

  DpRig dp;
  ASSERT_OK(dp.init(g, 1, 2));
  dp.engine->set_span_sink(sink, [&] { return t0; });
  auto r = dp.engine->forward_backward(g.batch(0, 1));
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  // Every span came before forward_backward returned, from both ranks, block by block.
  std::map<std::optional<int>, std::map<std::string, std::set<size_t>>> seen;
  for (const Heard& h : heard) {
    seen[h.device][h.phase].insert(h.block);
    EXPECT_LE(t0, h.start) << h.phase << " " << h.block;
    EXPECT_LE(h.start, h.end) << h.phase << " " << h.block;
  }
  ASSERT_EQ(seen.size(), 2u);
  for (int rank : {0, 1}) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    ASSERT_TRUE(seen.count(rank));
    for (const char* phase : {"h2d", "backward", "reduce"})
      EXPECT_EQ(seen[rank][phase].size(), blocks) << phase;
    // The head's compute is its backward, fused with its forward (golden-test.cpp).
    EXPECT_EQ(seen[rank]["forward"].size(), blocks - 1);
    EXPECT_FALSE(seen[rank]["d2h"].empty());  // the rank's share of each block's gradient
  }
  // Each rank's timeline is the one its step reports.
  ASSERT_EQ(r->device_timelines.size(), 2u);
  for (int rank : {0, 1}) {
    double reduce = 0;
    for (const Heard& h : heard)
      if (h.device == rank && h.phase == "reduce") reduce += h.end - h.start;
    EXPECT_NEAR(reduce, r->device_timelines[rank].reduce_s, 1e-9) << "rank " << rank;
  }

  // An empty sink turns every rank's spans off.
  heard.clear();
  dp.engine->set_span_sink(nullptr, nullptr);
  ASSERT_TRUE(dp.engine->forward_backward(g.batch(1, 1)).ok());
  EXPECT_TRUE(heard.empty());

  DpRig one;
  ASSERT_OK(one.init(g, 1, 1));
  one.engine->set_span_sink(sink, [&] { return t0; });
  ASSERT_TRUE(one.engine->forward_backward(g.batch(0, 1)).ok());
  ASSERT_FALSE(heard.empty());
  for (const Heard& h : heard) {
    EXPECT_FALSE(h.device.has_value()) << h.phase << " " << h.block;
    EXPECT_NE(h.phase, "reduce");
  }
}

// What a group cannot do, said before it trains.
TEST(DataParallel, RefusesWhatItCannotSplit) {
  SPILLWAY_REQUIRE_DATA();
  Golden g("stories260K");
  DpRig tier;
  const Status st = tier.init(g, 1, 2, false, /*hbm_blocks=*/2);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("HBM state tier trains on one GPU only"), std::string::npos)
      << st.to_string();

  DpRig dp;
  ASSERT_OK(dp.init(g, 1, 2));
  StepBatch odd = g.batch(0, 1);  // 4 micro-batches of 1; take 3
  odd.micro_batches = 3;
  odd.input_ids = odd.input_ids.first(3 * g.T);
  odd.labels = odd.labels.first(3 * g.T);
  auto r = dp.engine->forward_backward(odd);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("3 micro-batches do not split evenly over 2"),
            std::string::npos)
      << r.status().to_string();
}

// The CPU group's all-reduce: every rank ends with the sum over ranks in rank order, the same bits
// on each, for a count that does not divide by the ranks.
// A CPU group of `n` ranks: the backends and their communicators.
struct CpuGroup {
  std::vector<std::unique_ptr<compute::Backend>> backends;
  std::vector<std::unique_ptr<compute::Communicator>> comms;

  explicit CpuGroup(int n) {
    std::vector<compute::Backend*> group;
    for (int r = 0; r < n; ++r) {
      backends.push_back(compute::make_cpu_backend());
      group.push_back(backends.back().get());
    }
    auto made = compute::make_communicators(group);
    EXPECT_TRUE(made.ok()) << made.status().to_string();
    if (made.ok()) comms = std::move(*made);
  }
  // `collective(rank)` on a thread per rank; each rank's status.
  template <typename F>
  std::vector<Status> run(F collective) {
    std::vector<Status> status(comms.size());
    std::vector<std::thread> threads;
    for (size_t r = 0; r < comms.size(); ++r)
      threads.emplace_back([&, r] { status[r] = collective(static_cast<int>(r)); });
    for (auto& t : threads) t.join();
    return status;
  }
};

// The CPU group's reduce-scatter: every rank's share is the sum over ranks, in rank order; a
// share past a short buffer's end is zero padding.
TEST(CpuCommunicator, ReduceScatterSumsEachShare) {
  constexpr int kRanks = 3;
  constexpr size_t kCount = 5;
  CpuGroup g(kRanks);
  ASSERT_EQ(g.comms.size(), size_t{kRanks});
  std::vector<std::vector<float>> buf(kRanks, std::vector<float>(kRanks * kCount));
  for (int r = 0; r < kRanks; ++r)
    for (size_t i = 0; i < buf[r].size(); ++i) buf[r][i] = float(r + 1) * 0.1f + float(i);
  const std::vector<Status> status =
      g.run([&](int r) { return g.comms[r]->reduce_scatter_sum(buf[r].data(), kCount, 0); });
  for (int r = 0; r < kRanks; ++r) {
    ASSERT_TRUE(status[r].ok()) << status[r].to_string();
    for (size_t i = 0; i < kCount; ++i) {
      const size_t at = r * kCount + i;
      float want = 0.1f + float(at);  // rank order: ((r0 + r1) + r2)
      want += 0.2f + float(at);
      want += 0.3f + float(at);
      EXPECT_EQ(buf[r][at], want) << "rank " << r << " element " << i;
    }
  }
  // A backend in the group twice is refused.
  std::vector<compute::Backend*> twice = {g.backends[0].get(), g.backends[0].get()};
  auto bad = compute::make_communicators(twice);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("in the group twice"), std::string::npos);
}

// The collectives of the host state sharded by block, in one process and across processes (one
// CPU rank each, through the exchange): a reduce gives the root alone the sum over the ranks in
// rank order, and a broadcast every rank the root's bytes.
TEST(CpuCommunicator, ReduceGivesTheRootTheSumAndBroadcastTheRootsBytes) {
  constexpr int kRanks = 3;
  constexpr size_t kCount = 7;
  auto expect = [&](const std::vector<Status>& status, std::vector<std::vector<float>>& buf,
                    const std::string& where) {
    for (int r = 0; r < kRanks; ++r) {
      ASSERT_TRUE(status[r].ok()) << where << ": " << status[r].to_string();
    }
    for (size_t i = 0; i < kCount; ++i) {
      float want = 0.1f + float(i);  // rank order: ((r0 + r1) + r2)
      want += 0.2f + float(i);
      want += 0.3f + float(i);
      EXPECT_EQ(buf[2][i], want) << where << ": element " << i;
      EXPECT_EQ(buf[0][i], 0.1f + float(i))
          << where << ": a rank that is not the root keeps its own";
    }
  };
  auto fill = [&] {
    std::vector<std::vector<float>> buf(kRanks, std::vector<float>(kCount));
    for (int r = 0; r < kRanks; ++r)
      for (size_t i = 0; i < kCount; ++i) buf[r][i] = float(r + 1) * 0.1f + float(i);
    return buf;
  };
  std::vector<std::string> bytes = {"rank zero", "rank one!", "rank two."};
  {
    CpuGroup g(kRanks);
    auto buf = fill();
    expect(g.run([&](int r) { return g.comms[r]->reduce_sum(buf[r].data(), kCount, 2, 0); }), buf,
           "one process");
    auto sent = bytes;
    const std::vector<Status> status =
        g.run([&](int r) { return g.comms[r]->broadcast(sent[r].data(), sent[r].size(), 1, 0); });
    for (int r = 0; r < kRanks; ++r) {
      ASSERT_OK(status[r]);
      EXPECT_EQ(sent[r], "rank one!") << "rank " << r;
    }
    EXPECT_FALSE(g.comms[0]->reduce_sum(buf[0].data(), kCount, kRanks, 0).ok());
  }
  ThreadExchanges exchange(kRanks);
  auto buf = fill();
  auto sent = bytes;
  std::vector<Status> reduced(kRanks), broadcast(kRanks);
  std::vector<std::thread> threads;
  for (int p = 0; p < kRanks; ++p) {
    threads.emplace_back([&, p] {
      auto backend = compute::make_cpu_backend();
      std::vector<compute::Backend*> group = {backend.get()};
      auto comms = compute::make_communicators(group, &exchange.of(p));
      if (!comms.ok()) {
        reduced[p] = comms.status();
        return;
      }
      reduced[p] = (*comms)[0]->reduce_sum(buf[p].data(), kCount, 2, 0);
      broadcast[p] = (*comms)[0]->broadcast(sent[p].data(), sent[p].size(), 1, 0);
    });
  }
  for (auto& t : threads) t.join();
  expect(reduced, buf, "across processes");
  for (int p = 0; p < kRanks; ++p) {
    ASSERT_OK(broadcast[p]);
    EXPECT_EQ(sent[p], "rank one!") << "process " << p;
  }
}

// abort() frees a rank that waits for a peer that never comes, and later collectives fail at
// once.
TEST(CpuCommunicator, AbortFreesAWaitingRank) {
  auto a = compute::make_cpu_backend(), b = compute::make_cpu_backend();
  std::vector<compute::Backend*> group = {a.get(), b.get()};
  auto comms = compute::make_communicators(group);
  ASSERT_TRUE(comms.ok());
  std::vector<float> buf(8, 1.0f);
  Status waited;
  std::thread t([&] { waited = (*comms)[0]->reduce_scatter_sum(buf.data(), 4, 0); });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // rank 0 waits at the barrier
  (*comms)[1]->abort();
  t.join();
  EXPECT_FALSE(waited.ok());
  EXPECT_NE(waited.message().find("aborted"), std::string::npos) << waited.to_string();
  EXPECT_FALSE((*comms)[1]->reduce_scatter_sum(buf.data(), 4, 0).ok());
}

}  // namespace
}  // namespace spillway
