// Data parallel past one machine (docs/architecture.md, "Past one machine") on the CPU backend:
// machines as threads of this process, each with its CPU device, joined by an in-memory process
// group (thread-exchanges.h), the host state sharded by block between them (block-owners.h): the
// step and the training of as many ranks in one process bit for bit, stops and lost machines, and
// the checkpoints the machines write together (checkpoint-parts.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string>
#include <thread>

#include "model/model-config.h"
#include "model/parameter-layout.h"
#include "state-rig.h"
#include "test-data.h"
#include "thread-exchanges.h"
#include "train/block-owners.h"
#include "train/checkpoint-parts.h"
#include "train/data-parallel-engine.h"

namespace spillway {
namespace {
using testing::Golden;
using testing::rig_config;
using testing::ThreadExchanges;

// One "machine" of a group across processes: its CPU device, the golden state of the blocks it
// owns (block-owners.h) and its engine, joined to the others through `exchange`; train() adds its
// optimizer.
struct Machine {
  std::unique_ptr<compute::Backend> backend;
  std::unique_ptr<ModelState> state;
  std::unique_ptr<DataParallelEngine> engine;
  std::unique_ptr<OptimizerStateStore> store;
  std::unique_ptr<Optimizer> opt;

  // `ssd_folder`: the master and moments of the machine's blocks on the SSD tier there (in
  // pieces that cut through tensors, as state-rig's Rig), else in DRAM.
  Status init(const Golden& g, int micro_batches, compute::ProcessExchange& exchange,
              const std::string& ssd_folder = "") {
    StreamingConfig cfg = rig_config(g, 1);
    cfg.max_micro_batches = micro_batches;
    backend = testing::engine_cpu_backend(g.layout, cfg, true, size_t{256} << 20);
    cfg.block_owners = assign_block_owners(g.layout, exchange.processes(), 1);
    const BlockTiers tiers = BlockTiers::all(
        g.layout.num_blocks(), ssd_folder.empty() ? BlockTiers::kDram : BlockTiers::kSsd);
    SPW_ASSIGN_OR_RETURN(state,
                         ModelState::create(g.layout, true, 0, tiers.dram,
                                            held_blocks(cfg.block_owners, exchange.process())));
    SPW_ASSIGN_OR_RETURN(TensorStore weights, TensorStore::open(g.files.model));
    SPW_RETURN_IF_ERROR(state->load_weights(weights));
    if (ssd_folder.empty()) {
      store = make_dram_state(*state);
    } else {
      SsdStateConfig sc;
      sc.store.folder = ssd_folder;
      sc.store.block_bytes = 64 << 10;
      sc.tiers = tiers;
      sc.chunk_bytes = testing::kChunkBytes;
      SPW_ASSIGN_OR_RETURN(store, make_ssd_state(*state, sc));
    }
    std::vector<compute::Backend*> group = {backend.get()};
    SPW_ASSIGN_OR_RETURN(engine,
                         DataParallelEngine::create(group, *state, cfg, nullptr, &exchange));
    return {};
  }

  // `steps` steps of the golden trajectory with AdamW, each machine taking its half of every
  // step's micro-batches of one sequence; the losses.
  Result<std::vector<double>> train(Golden& g, const std::vector<StepBatch>& batches) {
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
                     const std::string& ssd_folder = "") {
  Status made[2];
  std::vector<std::thread> threads;
  for (int p = 0; p < 2; ++p) {
    threads.emplace_back([&, p] {
      made[p] = machines[p].init(g, g.B / 2, exchange.of(p),
                                 ssd_folder.empty() ? "" : ssd_folder + "/" + std::to_string(p));
    });
  }
  for (auto& t : threads) t.join();
  return made[0].ok() ? made[1] : made[0];
}

// `f(p)` for each of the two machines on a thread of its own, as their processes run; each
// one's status.
template <class F>
std::vector<Status> on_machines(F f) {
  std::vector<Status> status(2);
  std::vector<std::thread> threads;
  for (int p = 0; p < 2; ++p) threads.emplace_back([&, p] { status[p] = f(p); });
  for (auto& t : threads) t.join();
  return status;
}

// Golden step 0's first two micro-batches of one sequence: what the engine of one of two machines
// takes, for a forward pass that every machine runs alike.
StepBatch machine_batch(Golden& g) {
  StepBatch batch = g.batch(0, 1);
  batch.micro_batches = 2;
  batch.input_ids = batch.input_ids.first(2 * g.T);
  batch.labels = batch.labels.first(2 * g.T);
  return batch;
}

// Every block `got` holds has `want`'s master weights and moments, bit for bit: read through
// `store` where given (the SSD tier's), else from `got` itself.
void expect_held_blocks(ModelState& got, OptimizerStateStore* store, ModelState& want,
                        const std::string& where) {
  for (size_t b = 0; b < got.num_blocks(); ++b) {
    if (!got.holds(b)) continue;
    const size_t n = got.layout().blocks()[b].numel;
    std::vector<float> master(got.master(b), got.master(b) + n), m(n), v(n);
    if (store) {
      const Status read = store->read_block(b, master.data(), m.data(), v.data());
      ASSERT_TRUE(read.ok()) << read.to_string();
    } else {
      m.assign(got.exp_avg(b), got.exp_avg(b) + n);
      v.assign(got.exp_avg_sq(b), got.exp_avg_sq(b) + n);
    }
    EXPECT_EQ(0, std::memcmp(master.data(), want.master(b), n * 4)) << where << " block " << b;
    EXPECT_EQ(0, std::memcmp(m.data(), want.exp_avg(b), n * 4)) << where << " block " << b;
    EXPECT_EQ(0, std::memcmp(v.data(), want.exp_avg_sq(b), n * 4)) << where << " block " << b;
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

// The owners of llama-70b's 82 blocks on M machines of N GPUs: each machine within one block of
// 1/M of the parameters, neighbouring layers on different machines, each machine's blocks round
// its GPUs, and the same table on every call (every process computes its own).
TEST(BlockOwners, BalanceTheParametersWithinABlock) {
  const ParameterLayout layout = ParameterLayout::build(*model_preset("llama-70b"));
  uint64_t total = 0, largest = 0;
  for (const BlockLayout& b : layout.blocks()) {
    total += b.numel;
    largest = std::max<uint64_t>(largest, b.numel);
  }
  for (const int machines : {2, 3, 9}) {
    const auto owners = assign_block_owners(layout, machines, 4);
    ASSERT_EQ(owners.size(), layout.num_blocks());
    EXPECT_EQ(owners, assign_block_owners(layout, machines, 4));
    std::vector<uint64_t> held(machines, 0);
    std::vector<int> given(machines, 0);
    for (size_t b = 0; b < owners.size(); ++b) {
      ASSERT_GE(owners[b].process, 0);
      ASSERT_LT(owners[b].process, machines);
      EXPECT_EQ(owners[b].gpu, given[owners[b].process]++ % 4) << "block " << b;
      held[owners[b].process] += layout.blocks()[b].numel;
      if (b >= 2 && b + 1 < owners.size()) {  // two layers side by side
        EXPECT_NE(owners[b].process, owners[b - 1].process) << machines << " machines, block " << b;
      }
    }
    for (int p = 0; p < machines; ++p) {
      EXPECT_LE(held[p], total / machines + largest) << machines << " machines, process " << p;
      EXPECT_GE(held[p] + largest, total / machines) << machines << " machines, process " << p;
    }
    EXPECT_EQ(held_blocks(owners, 1).size(), layout.num_blocks());
  }
}

// Each machine holds about half of the host state, the gradient of each
// block it holds is the two ranks' sum bit for bit (the reduce sums in rank order, as the
// reduce-scatter does), it holds no other, and both machines know every block's sum of squares.
TEST(DataParallelMachines, TwoMachinesComputeTheStepOfTwoRanksBitForBit) {
  SPILLWAY_REQUIRE_DATA();
  Golden g("stories260K");
  const StepBatch batch = g.batch(0, 1);
  auto two_ranks = testing::data_parallel_step(g, batch, 2, rig_config(g, 1));
  ASSERT_OK(two_ranks.status());
  ThreadExchanges exchange(2);
  Machine machines[2];
  ASSERT_OK(join_machines(g, exchange, machines));
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

// Training on two machines of one CPU rank each gives the bits of two ranks in one process: the
// same losses and gradient norms, and each machine's blocks end with the same master weights and
// moments.
TEST(DataParallelMachines, TwoMachinesTrainTheBitsOfTwoRanks) {
  SPILLWAY_REQUIRE_DATA();
  Golden g("stories260K");
  const int steps = g.meta["adamw"]["steps"];
  std::vector<StepBatch> batches;
  for (int s = 0; s < steps; ++s) batches.push_back(g.batch(s, 1));
  testing::DpRig two;
  ASSERT_OK(two.init(g, 1, 2));
  std::vector<double> losses, norms;
  ASSERT_OK(two.run(g, 1, steps, &losses, &norms));
  Machine shards[2];
  ThreadExchanges exchange(2);
  ASSERT_OK(join_machines(g, exchange, shards));
  std::vector<double> shard_losses[2];
  for (const Status& st : on_machines([&](int p) -> Status {
         SPW_ASSIGN_OR_RETURN(shard_losses[p], shards[p].train(g, batches));
         return {};
       }))
    ASSERT_OK(st);
  for (int p = 0; p < 2; ++p) {
    EXPECT_EQ(shard_losses[p], losses) << "process " << p;
    expect_held_blocks(*shards[p].state, nullptr, *two.state, "process " + std::to_string(p));
  }
}

// The same on the SSD tier: each machine keeps the master and moments of its own blocks there
// (the store skips the others), and they end as two ranks in one process end them in DRAM.
TEST(DataParallelMachines, TwoMachinesTrainTheBitsOfTwoRanksOnTheSsdTier) {
  SPILLWAY_REQUIRE_DATA();
  Golden g("stories260K");
  std::vector<StepBatch> batches = {g.batch(0, 1), g.batch(1, 1)};
  testing::DpRig two;
  ASSERT_OK(two.init(g, 1, 2));
  std::vector<double> losses, norms;
  ASSERT_OK(two.run(g, 1, 2, &losses, &norms));
  testing::TempDir ssd;
  Machine machines[2];
  ThreadExchanges exchange(2);
  ASSERT_OK(join_machines(g, exchange, machines, ssd.path()));
  std::vector<double> got[2];
  for (const Status& st : on_machines([&](int p) -> Status {
         SPW_ASSIGN_OR_RETURN(got[p], machines[p].train(g, batches));
         return {};
       }))
    ASSERT_OK(st);
  for (int p = 0; p < 2; ++p) {
    EXPECT_EQ(got[p], losses) << "process " << p;
    expect_held_blocks(*machines[p].state, machines[p].store.get(), *two.state,
                       "process " + std::to_string(p));
  }
}

// A forward pass (evaluation) takes every machine, each block coming from its owner, and gives
// the loss of one machine holding every block, on both.
TEST(DataParallelMachines, TwoMachinesEvaluateAsOne) {
  SPILLWAY_REQUIRE_DATA();
  Golden g("stories260K");
  const StepBatch batch = machine_batch(g);
  testing::DpRig one;
  ASSERT_OK(one.init(g, 1, 1));
  auto want = one.engine->forward(batch);
  ASSERT_OK(want.status());
  ThreadExchanges exchange(2);
  Machine machines[2];
  ASSERT_OK(join_machines(g, exchange, machines));
  std::optional<Result<StepResult>> got[2];
  for (const Status& st : on_machines([&](int p) {
         got[p].emplace(machines[p].engine->forward(batch));
         return got[p]->status();
       }))
    ASSERT_OK(st);
  for (int p = 0; p < 2; ++p) {
    EXPECT_EQ(got[p]->value().loss_sum, want->loss_sum) << "process " << p;
    EXPECT_EQ(got[p]->value().targets, want->targets) << "process " << p;
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

// The same in an evaluation: a forward pass waiting for a lost machine's broadcast ends at the
// next check, naming the pass, rather than hanging.
TEST(DataParallelMachines, AMachineLostMidEvaluationEndsItAtTheNextCheck) {
  SPILLWAY_REQUIRE_DATA();
  Golden g("stories260K");
  ThreadExchanges exchange(2);
  Machine machines[2];
  ASSERT_OK(join_machines(g, exchange, machines));
  machines[0].engine->set_step_timeout(3600);
  exchange.lose(1);
  auto r = machines[0].engine->forward(machine_batch(g));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("process 1 left the group (connection closed)"),
            std::string::npos)
      << r.status().to_string();
  EXPECT_NE(r.status().message().find("the forward pass stops on CPU rank 0 of process 0"),
            std::string::npos)
      << r.status().to_string();
}

// A machine whose filesystem is not process 0's (seen here as process 0's folder renamed on the
// way, as another mount would show it) makes the check fail on every process, naming the machine
// and what to do, before any training.
TEST(DataParallelMachines, AMachineThatDoesNotSeeTheRunFolderIsNamed) {
  // Process 1's end of the group, which reads the first round's folder under another path.
  struct Elsewhere final : compute::ProcessExchange {
    explicit Elsewhere(compute::ProcessExchange& inner) : inner(inner) {}
    int process() const override { return inner.process(); }
    int processes() const override { return inner.processes(); }
    Result<std::vector<std::string>> all_gather(std::string_view mine, double timeout) override {
      auto all = inner.all_gather(mine, timeout);
      if (all.ok() && rounds++ == 0) (*all)[0] = "/nonexistent-mount" + (*all)[0];
      return all;
    }
    void abort() override { inner.abort(); }
    compute::ProcessExchange& inner;
    int rounds = 0;
  };
  testing::TempDir dir;
  ThreadExchanges exchange(2);
  Elsewhere elsewhere(exchange.of(1));
  const std::vector<Status> checked = on_machines([&](int p) {
    return check_shared_folder(
        dir.file("run"),
        p == 0 ? exchange.of(0) : static_cast<compute::ProcessExchange&>(elsewhere));
  });
  for (int p = 0; p < 2; ++p) {
    EXPECT_EQ(checked[p].code(), ErrorCode::kInvalidArgument) << checked[p].to_string();
    EXPECT_NE(checked[p].message().find("process 1 does not see /nonexistent-mount"),
              std::string::npos)
        << checked[p].to_string();
    EXPECT_NE(checked[p].message().find("set the job's run_dir to a folder on a filesystem they "
                                        "share"),
              std::string::npos)
        << checked[p].to_string();
  }
  // The marker is gone: the run folder holds only what the run writes.
  EXPECT_TRUE(std::filesystem::is_empty(dir.file("run")));
}

// The checkpoint two machines write together is save_checkpoint's, whole: it loads as a model
// with every tensor, and resumes on one machine holding every block and on two holding their own,
// with the master weights and moments of two ranks in one process bit for bit.
TEST(DataParallelMachines, TheirCheckpointResumesOnAnyNumberOfMachines) {
  SPILLWAY_REQUIRE_DATA();
  Golden g("stories260K");
  std::vector<StepBatch> batches = {g.batch(0, 1), g.batch(1, 1)};
  testing::DpRig two;  // the reference: two ranks in one process
  ASSERT_OK(two.init(g, 1, 2));
  std::vector<double> losses, norms;
  ASSERT_OK(two.run(g, 1, 2, &losses, &norms));
  Machine shards[2];
  {
    ThreadExchanges exchange(2);
    ASSERT_OK(join_machines(g, exchange, shards));
    for (const Status& st :
         on_machines([&](int p) { return shards[p].train(g, batches).status(); }))
      ASSERT_OK(st);
  }
  testing::TempDir dir;
  const std::string checkpoints = dir.file("run/checkpoints");
  ThreadExchanges exchange(2);
  for (const Status& st :
       on_machines([&](int p) { return check_shared_folder(dir.file("run"), exchange.of(p)); }))
    ASSERT_OK(st);
  TrainerState t;
  t.step = 2;
  t.run_id = "machines";
  std::string folders[2];
  for (const Status& st : on_machines([&](int p) -> Status {
         SPW_ASSIGN_OR_RETURN(folders[p],
                              save_checkpoint_parts(checkpoints, *shards[p].state, t,
                                                    shards[p].store.get(), exchange.of(p)));
         return {};
       }))
    ASSERT_OK(st);
  EXPECT_EQ(folders[0], folders[1]);
  EXPECT_EQ(std::filesystem::path(folders[0]).filename(), "step-000002");
  EXPECT_TRUE(
      std::filesystem::exists(std::filesystem::path(folders[0]) / "model-m1-00001.safetensors"));

  // As a model: every tensor, through the index over both machines' files.
  auto model = TensorStore::open(folders[0]);
  ASSERT_OK(model.status());
  const Status complete = g.layout.check(*model);
  EXPECT_TRUE(complete.ok()) << complete.to_string();
  // On one machine holding every block.
  auto one = ModelState::create(g.layout, true);
  ASSERT_OK(one.status());
  auto resumed = load_checkpoint(folders[0], **one);
  ASSERT_OK(resumed.status());
  EXPECT_EQ(resumed->step, 2);
  EXPECT_EQ((*one)->step, 2);
  expect_held_blocks(**one, nullptr, *two.state, "one machine");
  // On two machines, each holding its own blocks.
  const auto owners = assign_block_owners(g.layout, 2, 1);
  for (int p = 0; p < 2; ++p) {
    auto mine = ModelState::create(g.layout, true, 0, SIZE_MAX, held_blocks(owners, p));
    ASSERT_OK(mine.status());
    ASSERT_OK(load_checkpoint(folders[0], **mine).status());
    expect_held_blocks(**mine, nullptr, *two.state, "process " + std::to_string(p));
  }
}

}  // namespace
}  // namespace spillway
