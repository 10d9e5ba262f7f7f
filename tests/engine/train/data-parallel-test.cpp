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
#include "train/block-owners.h"
#include "train/data-parallel-engine.h"

namespace spillway {
namespace {
using testing::Golden;
using testing::rig_config;

// N CPU "devices" with the golden run's engine each, one host state in DRAM, one optimizer.
struct DpRig {
  std::vector<std::unique_ptr<compute::Backend>> backends;
  std::unique_ptr<ModelState> state;
  std::unique_ptr<OptimizerStateStore> store;
  std::unique_ptr<DataParallelEngine> engine;
  std::unique_ptr<Optimizer> opt;

  // `mb` sequences a micro-batch; the golden step's B / mb micro-batches split over `ranks`.
  Status init(const Golden& g, int mb, int ranks, bool strict = false, int hbm_blocks = 0) {
    StreamingConfig cfg = rig_config(g, mb, hbm_blocks);
    cfg.max_micro_batches = g.B / mb / ranks;
    StreamingConfig sized = cfg;
    sized.data_parallel_ranks = ranks;  // the padded gradient buffers
    std::vector<compute::Backend*> group;
    for (int r = 0; r < ranks; ++r) {
      // Room for every checkpoint: the link then carries only the step's own bytes.
      backends.push_back(testing::engine_cpu_backend(g.layout, sized, strict, size_t{256} << 20));
      group.push_back(backends.back().get());
    }
    SPW_ASSIGN_OR_RETURN(state, ModelState::create(g.layout, true));
    SPW_ASSIGN_OR_RETURN(TensorStore weights, TensorStore::open(g.files.model));
    SPW_RETURN_IF_ERROR(state->load_weights(weights));
    store = make_dram_state(*state);
    SPW_ASSIGN_OR_RETURN(engine, DataParallelEngine::create(group, *state, cfg));
    opt = std::make_unique<Optimizer>(*state, g.adamw(),
                                      g.meta["adamw"]["clip_grad_norm"].get<double>(), store.get());
    Optimizer* o = opt.get();
    engine->set_weight_gate([o](size_t b) { o->wait_block(b); });
    return {};
  }

  Status run(Golden& g, int mb, int steps, std::vector<double>* losses,
             std::vector<double>* norms) {
    for (int s = 0; s < steps; ++s) {
      SPW_ASSIGN_OR_RETURN(StepResult r, engine->forward_backward(g.batch(s, mb)));
      StepStats st = opt->begin_step(g.meta["adamw"]["lr"].get<double>(), r.grad_sumsq);
      SPW_RETURN_IF_ERROR(opt->status());
      losses->push_back(r.loss());
      norms->push_back(st.grad_norm);
    }
    opt->wait_all();
    return {};
  }

  // Every block's master, m and v.
  std::vector<float> all_state() {
    std::vector<float> out, m, v, p;
    for (size_t b = 0; b < state->num_blocks(); ++b) {
      const size_t n = state->layout().blocks()[b].numel;
      p.resize(n), m.resize(n), v.resize(n);
      EXPECT_TRUE(store->read_block(b, p.data(), m.data(), v.data()).ok());
      out.insert(out.end(), p.begin(), p.end());
      out.insert(out.end(), m.begin(), m.end());
      out.insert(out.end(), v.begin(), v.end());
    }
    return out;
  }
};

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

// The processes of a group across machines as threads of this one (compute::ProcessExchange):
// what HostGroup does over TCP, in memory, so that the engine's part past one machine is tested
// here and the transport in host-group-test.
class ThreadExchanges {
 public:
  explicit ThreadExchanges(int n) : n_(n), payloads_(n) {
    for (int p = 0; p < n; ++p) ends_.push_back(std::make_unique<End>(*this, p));
  }
  compute::ProcessExchange& of(int p) { return *ends_[p]; }
  // Process p is gone as a machine that died is: check() says so on every process, but a round
  // waits for it until someone aborts the group (as NCCL's kernels wait for a lost peer).
  void lose(int p) {
    std::lock_guard<std::mutex> lock(mu_);
    lost_ = "process " + std::to_string(p) + " left the group (connection closed)";
  }

 private:
  struct End final : compute::ProcessExchange {
    End(ThreadExchanges& group, int p) : group(group), p(p) {}
    int process() const override { return p; }
    int processes() const override { return group.n_; }
    Result<std::vector<std::string>> all_gather(std::string_view mine, double) override {
      std::unique_lock<std::mutex> lock(group.mu_);
      if (group.aborted_) return io_error("a process left the group");
      group.payloads_[p] = std::string(mine);
      const uint64_t round = group.round_;
      if (++group.arrived_ == group.n_) {
        group.result_ = group.payloads_;
        group.arrived_ = 0;
        ++group.round_;
        group.cv_.notify_all();
        return group.result_;
      }
      group.cv_.wait(lock, [&] { return group.aborted_ || group.round_ != round; });
      if (group.round_ == round) return io_error("a process left the group");
      return group.result_;
    }
    Status check() override {
      std::lock_guard<std::mutex> lock(group.mu_);
      return group.lost_.empty() ? Status() : io_error(group.lost_);
    }
    void abort() override {
      std::lock_guard<std::mutex> lock(group.mu_);
      group.aborted_ = true;
      group.cv_.notify_all();
    }
    ThreadExchanges& group;
    const int p;
  };
  const int n_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::string> payloads_, result_;
  int arrived_ = 0;
  uint64_t round_ = 0;
  bool aborted_ = false;
  std::string lost_;
  std::vector<std::unique_ptr<End>> ends_;
};

// One "machine" of a group across processes: its CPU device, its own copy of the golden state
// (or, `sharded`, of the blocks it owns: block-owners.h) and its engine, joined to the others
// through `exchange`; train() adds its optimizer.
struct Machine {
  std::unique_ptr<compute::Backend> backend;
  std::unique_ptr<ModelState> state;
  std::unique_ptr<DataParallelEngine> engine;
  std::unique_ptr<OptimizerStateStore> store;
  std::unique_ptr<Optimizer> opt;

  Status init(const Golden& g, int micro_batches, compute::ProcessExchange& exchange,
              bool sharded = false) {
    StreamingConfig cfg = rig_config(g, 1);
    cfg.max_micro_batches = micro_batches;
    backend = testing::engine_cpu_backend(g.layout, cfg, true, size_t{256} << 20);
    if (sharded) {
      cfg.block_owners = assign_block_owners(g.layout, exchange.processes(), 1);
      SPW_ASSIGN_OR_RETURN(state,
                           ModelState::create(g.layout, true, 0, SIZE_MAX,
                                              held_blocks(cfg.block_owners, exchange.process())));
      SPW_ASSIGN_OR_RETURN(TensorStore weights, TensorStore::open(g.files.model));
      SPW_RETURN_IF_ERROR(state->load_weights(weights));
    } else {
      SPW_ASSIGN_OR_RETURN(state, testing::golden_state(g));
    }
    std::vector<compute::Backend*> group = {backend.get()};
    SPW_ASSIGN_OR_RETURN(engine,
                         DataParallelEngine::create(group, *state, cfg, nullptr, &exchange));
    return {};
  }

  // `steps` steps of the golden trajectory with AdamW, each machine taking its half of every
  // step's micro-batches of one sequence; the losses.
  Result<std::vector<double>> train(Golden& g, const std::vector<StepBatch>& batches) {
    store = make_dram_state(*state);
    opt = std::make_unique<Optimizer>(*state, g.adamw(),
                                      g.meta["adamw"]["clip_grad_norm"].get<double>(), store.get());
    Optimizer* o = opt.get();
    engine->set_weight_gate([o](size_t b) { o->wait_block(b); });
    std::vector<double> losses;
    for (const StepBatch& batch : batches) {
      SPW_ASSIGN_OR_RETURN(StepResult r, engine->forward_backward(batch));
      opt->begin_step(g.meta["adamw"]["lr"].get<double>(), r.grad_sumsq);
      SPW_RETURN_IF_ERROR(opt->status());
      losses.push_back(r.loss());
    }
    opt->wait_all();
    return losses;
  }
};

// Both machines of `exchange` made at once, as the processes of a run make theirs (on GPUs each
// waits there for the others' NCCL ranks); the first error, if any. `machines`: two.
Status join_machines(const Golden& g, ThreadExchanges& exchange, Machine* machines,
                     bool sharded = false) {
  Status made[2];
  std::vector<std::thread> threads;
  for (int p = 0; p < 2; ++p) {
    threads.emplace_back(
        [&, p] { made[p] = machines[p].init(g, g.B / 2, exchange.of(p), sharded); });
  }
  for (auto& t : threads) t.join();
  return made[0].ok() ? made[1] : made[0];
}

// Two machines of one CPU device each compute the step of two CPU ranks in one process bit for
// bit: process p's device is rank p, the all-reduce sums in rank order as the reduce-scatter
// does, and each machine's copy of every gradient is the whole sum. The loss is the step's over
// both machines, on each.
TEST(DataParallelMachines, TwoMachinesComputeTheStepOfTwoRanksBitForBit) {
  SPILLWAY_REQUIRE_DATA();
  Golden g("stories260K");
  const StepBatch batch = g.batch(0, 1);
  auto two_ranks = testing::data_parallel_step(g, batch, 2, rig_config(g, 1));
  ASSERT_OK(two_ranks.status());
  ThreadExchanges exchange(2);
  Machine machines[2];
  std::optional<Result<testing::Step>> steps[2];
  Status made[2];
  std::vector<std::thread> threads;
  for (int p = 0; p < 2; ++p) {
    threads.emplace_back([&, p] {
      made[p] = machines[p].init(g, g.B / 2, exchange.of(p));
      if (made[p].ok())
        steps[p].emplace(testing::step_of(*machines[p].engine, *machines[p].state, batch));
    });
  }
  for (auto& t : threads) t.join();
  for (int p = 0; p < 2; ++p) {
    ASSERT_OK(made[p]);
    ASSERT_OK(steps[p]->status());
    const testing::Step& s = steps[p]->value();
    EXPECT_EQ(machines[p].engine->machines(), 2);
    EXPECT_EQ(s.result.loss_sum, two_ranks->result.loss_sum) << "process " << p;
    EXPECT_EQ(s.result.targets, two_ranks->result.targets);
    ASSERT_EQ(s.grads.size(), two_ranks->grads.size());
    for (size_t b = 0; b < s.grads.size(); ++b) {
      EXPECT_EQ(s.grads[b], two_ranks->grads[b]) << "process " << p << " block " << b;
      // One share's sum of squares against two shares' summed: the same within rounding.
      EXPECT_NEAR(s.result.grad_sumsq[b], two_ranks->result.grad_sumsq[b],
                  1e-6 * two_ranks->result.grad_sumsq[b]);
    }
    EXPECT_FALSE(machines[p].engine->stop_asked());
  }
}

// A stop asked for on one machine does not cut its step short (the others would wait in its
// collectives): the step ends on both and both learn of it.
TEST(DataParallelMachines, AStopOnOneMachineStopsEveryMachineAfterTheStep) {
  SPILLWAY_REQUIRE_DATA();
  Golden g("stories260K");
  ThreadExchanges exchange(2);
  Machine machines[2];
  std::atomic<bool> stops[2] = {false, true};
  Status results[2];
  const StepBatch batch = g.batch(0, 1);  // read once: Golden::batch fills its cache unguarded
  std::vector<std::thread> threads;
  for (int p = 0; p < 2; ++p) {
    threads.emplace_back([&, p] {
      results[p] = machines[p].init(g, g.B / 2, exchange.of(p));
      if (!results[p].ok()) return;
      machines[p].engine->set_stop_flag(&stops[p]);
      results[p] = machines[p].engine->forward_backward(batch).status();
    });
  }
  for (auto& t : threads) t.join();
  for (int p = 0; p < 2; ++p) {
    ASSERT_OK(results[p]);
    EXPECT_TRUE(machines[p].engine->stop_asked()) << "process " << p;
  }
}

// The host state sharded by block: each machine holds about half of it, the gradient of each
// block it holds is the two ranks' sum bit for bit (the reduce sums in rank order, as the
// reduce-scatter does), it holds no other, and both machines know every block's sum of squares.
TEST(DataParallelMachines, ShardedStateComputesTheStepOfTwoRanksBitForBit) {
  SPILLWAY_REQUIRE_DATA();
  Golden g("stories260K");
  const StepBatch batch = g.batch(0, 1);
  auto two_ranks = testing::data_parallel_step(g, batch, 2, rig_config(g, 1));
  ASSERT_OK(two_ranks.status());
  ThreadExchanges exchange(2);
  Machine machines[2];
  ASSERT_OK(join_machines(g, exchange, machines, /*sharded=*/true));
  std::optional<Result<testing::Step>> steps[2];
  std::vector<std::thread> threads;
  for (int p = 0; p < 2; ++p) {
    threads.emplace_back([&, p] {
      steps[p].emplace(testing::step_of(*machines[p].engine, *machines[p].state, batch));
    });
  }
  for (auto& t : threads) t.join();
  auto whole = ModelState::create(g.layout, true);
  ASSERT_OK(whole.status());
  uint64_t held = 0;
  for (int p = 0; p < 2; ++p) {
    ASSERT_OK(steps[p]->status());
    const testing::Step& s = steps[p]->value();
    const ModelState& st = *machines[p].state;
    held += st.master_bytes();
    EXPECT_LT(st.master_bytes(), (*whole)->master_bytes() * 3 / 4) << "process " << p;
    EXPECT_EQ(s.result.loss_sum, two_ranks->result.loss_sum) << "process " << p;
    EXPECT_EQ(s.result.targets, two_ranks->result.targets);
    for (size_t b = 0; b < s.grads.size(); ++b) {
      if (st.holds(b))
        EXPECT_EQ(s.grads[b], two_ranks->grads[b]) << "process " << p << " block " << b;
      else
        EXPECT_EQ(machines[p].state->grad(b), nullptr);
      // The whole block's sum of squares against two shares' summed: the same within rounding,
      // and the same bits on both machines.
      EXPECT_NEAR(s.result.grad_sumsq[b], two_ranks->result.grad_sumsq[b],
                  1e-6 * two_ranks->result.grad_sumsq[b]);
      EXPECT_EQ(s.result.grad_sumsq[b], steps[0]->value().result.grad_sumsq[b]);
    }
  }
  EXPECT_EQ(held, (*whole)->master_bytes());
}

// Training with the state sharded by block gives the bits of training with a copy of it on each
// machine: the same losses, and each machine's blocks end with the same master weights and
// moments (the gradients are the same sums, their norm the same sums of squares).
TEST(DataParallelMachines, ShardedStateTrainsTheBitsOfACopyPerMachine) {
  SPILLWAY_REQUIRE_DATA();
  Golden g("stories260K");
  const int steps = g.meta["adamw"]["steps"];
  std::vector<StepBatch> batches;
  for (int s = 0; s < steps; ++s) batches.push_back(g.batch(s, 1));
  Machine copies[2], shards[2];
  std::vector<double> copy_losses[2], shard_losses[2];
  for (bool sharded : {false, true}) {
    ThreadExchanges exchange(2);
    Machine* machines = sharded ? shards : copies;
    ASSERT_OK(join_machines(g, exchange, machines, sharded));
    Status trained[2];
    std::vector<std::thread> threads;
    for (int p = 0; p < 2; ++p) {
      threads.emplace_back([&, p] {
        auto r = machines[p].train(g, batches);
        trained[p] = r.status();
        if (r.ok()) (sharded ? shard_losses : copy_losses)[p] = *r;
      });
    }
    for (auto& t : threads) t.join();
    ASSERT_OK(trained[0]);
    ASSERT_OK(trained[1]);
  }
  for (int p = 0; p < 2; ++p) {
    EXPECT_EQ(shard_losses[p], copy_losses[0]) << "process " << p;
    const ModelState& mine = *shards[p].state;
    ModelState& copy = *copies[0].state;
    for (size_t b = 0; b < mine.num_blocks(); ++b) {
      if (!mine.holds(b)) continue;
      const size_t n = g.layout.blocks()[b].numel;
      ModelState& m = *shards[p].state;
      EXPECT_EQ(0, std::memcmp(m.master(b), copy.master(b), n * sizeof(float))) << "block " << b;
      EXPECT_EQ(0, std::memcmp(m.exp_avg(b), copy.exp_avg(b), n * sizeof(float))) << "block " << b;
      EXPECT_EQ(0, std::memcmp(m.exp_avg_sq(b), copy.exp_avg_sq(b), n * sizeof(float)))
          << "block " << b;
    }
  }
}

// A machine that leaves (its process died: the exchange fails) ends the others' step with an
// error that says so, instead of a hang.
TEST(DataParallelMachines, AMachineThatLeavesEndsTheStep) {
  SPILLWAY_REQUIRE_DATA();
  Golden g("stories260K");
  ThreadExchanges exchange(2);
  Machine machines[2];
  ASSERT_OK(join_machines(g, exchange, machines));
  exchange.of(1).abort();
  auto r = machines[0].engine->forward_backward(g.batch(0, 1));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("left the group"), std::string::npos)
      << r.status().to_string();
  EXPECT_NE(r.status().message().find("CPU rank 0 of process 0"), std::string::npos)
      << r.status().to_string();
}

// A machine lost while the others wait in a collective for it (NCCL never returns): the step's
// watchdog asks the process group every second, sees the machine gone, aborts the group and
// ends the step with the group's line, long before its time limit.
TEST(DataParallelMachines, AMachineLostMidCollectiveEndsTheStepAtTheNextCheck) {
  SPILLWAY_REQUIRE_DATA();
  Golden g("stories260K");
  ThreadExchanges exchange(2);
  Machine machines[2];
  ASSERT_OK(join_machines(g, exchange, machines));
  machines[0].engine->set_step_timeout(3600);  // the watchdog's limit is not what ends it
  exchange.lose(1);
  auto r = machines[0].engine->forward_backward(g.batch(0, 1));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kIo) << r.status().to_string();
  EXPECT_NE(r.status().message().find("process 1 left the group (connection closed)"),
            std::string::npos)
      << r.status().to_string();
  EXPECT_NE(r.status().message().find("the step stops on CPU rank 0 of process 0"),
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

TEST(CpuCommunicator, AllReduceGivesEveryRankTheSum) {
  constexpr int kRanks = 3;
  constexpr size_t kCount = 7;
  CpuGroup g(kRanks);
  ASSERT_EQ(g.comms.size(), size_t{kRanks});
  std::vector<std::vector<float>> buf(kRanks, std::vector<float>(kCount));
  for (int r = 0; r < kRanks; ++r)
    for (size_t i = 0; i < kCount; ++i) buf[r][i] = float(r + 1) * 0.1f + float(i);
  const std::vector<Status> status =
      g.run([&](int r) { return g.comms[r]->all_reduce_sum(buf[r].data(), kCount, 0); });
  for (int r = 0; r < kRanks; ++r) {
    ASSERT_TRUE(status[r].ok()) << status[r].to_string();
    for (size_t i = 0; i < kCount; ++i) {
      float want = 0.1f + float(i);  // rank order: ((r0 + r1) + r2)
      want += 0.2f + float(i);
      want += 0.3f + float(i);
      EXPECT_EQ(buf[r][i], want) << "rank " << r << " element " << i;
    }
  }
}

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
