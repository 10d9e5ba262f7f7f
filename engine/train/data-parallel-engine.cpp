#include "train/data-parallel-engine.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

namespace spillway {

// What a process hands the others at the end of a step (past one machine): its GPUs' loss and
// targets, whether a stop and whether a checkpoint were asked for on it, followed by each block's
// gradient sum of squares over this machine's GPUs (those of the blocks it holds; 0 for the
// others). Sent as their bytes (no padding), between machines of one architecture.
struct ProcessStep {
  double loss_sum = 0;
  int64_t targets = 0;
  int64_t stop = 0;
  int64_t checkpoint = 0;
};
static_assert(sizeof(ProcessStep) == 32, "ProcessStep goes over the wire as its bytes");

struct DataParallelEngine::Impl {
  // The run's processes, one per machine (null: this one alone), this one's index and the count.
  compute::ProcessExchange* processes = nullptr;
  int process = 0, machines = 1;
  const std::atomic<bool>* stop = nullptr;  // set_stop_flag, across machines: read at a step's end
  bool stop_asked = false;                  // a process asked for a stop at the last step's end
  std::atomic<bool>* checkpoint = nullptr;  // set_checkpoint_flag: taken at a step's end
  bool checkpoint_asked = false;            // a process asked for a checkpoint then
  std::vector<std::unique_ptr<compute::Communicator>> comms;  // [rank]; empty for one GPU
  std::vector<std::unique_ptr<StreamingEngine>> engines;      // [rank], destroyed before comms
  std::vector<std::string> names;  // [rank]: "GPU 3", or "CPU rank 1", for messages
  std::vector<int> devices;        // [rank]: the CUDA index, or the rank on the CPU backend

  // The step's first failure: the rank whose pass failed first aborts the group (the others'
  // passes then fail because of it), and its error is the step's.
  std::mutex failure_mu;
  int first_failed = -1;
  bool broken = false;        // a step failed: the group is aborted and cannot train again
  double last_step_s = 0;     // the last step that finished, for the watchdog's limit
  double step_timeout_s = 0;  // set_step_timeout; 0: the default rule

  int ranks() const { return static_cast<int>(engines.size()); }

  void abort_group() {
    for (auto& c : comms) c->abort();
    if (machines > 1) processes->abort();  // the other machines' next exchange fails at once
  }
  void failed(int rank) {
    {
      std::lock_guard<std::mutex> lock(failure_mu);
      if (first_failed < 0) first_failed = rank;
    }
    abort_group();
  }

  // The watchdog's time limit for a pass: step_timeout_s, else max(kMinStepTimeoutS, 10 × the
  // last step's time).
  double time_limit_s() const {
    return step_timeout_s > 0 ? step_timeout_s : std::max(kMinStepTimeoutS, 10 * last_step_s);
  }

  // `pass(r)` for every rank on a thread of its own, the caller watching for a hung GPU; every
  // rank's result, or the pass's error (`what`: "step", "forward pass"). A pass that fails calls
  // failed() itself (StreamingEngine's on_failure), which aborts the group.
  Result<std::vector<StepResult>> on_every_rank(
      const char* what, const std::function<Result<StepResult>(int rank)>& pass) {
    const int n = ranks();
    if (broken)
      return internal_error("data parallel: an earlier step failed and aborted the group of " +
                            std::to_string(n) + " devices; start the run again to train on");
    std::mutex mu;
    std::condition_variable cv;
    std::vector<std::optional<Result<StepResult>>> results(n);
    int done = 0;
    const auto start = std::chrono::steady_clock::now();
    std::vector<std::thread> threads;
    for (int r = 0; r < n; ++r) {
      threads.emplace_back([&, r] {
        Result<StepResult> res = pass(r);
        std::lock_guard<std::mutex> lock(mu);
        ++done;
        results[r].emplace(std::move(res));
        cv.notify_all();
      });
    }
    // The watchdog: a pass past its time limit is taken as hung, its group aborted (the GPUs'
    // collectives then end with an error) and the ranks still running named.
    const double limit_s = time_limit_s();
    // Past one machine it also asks the process group every kGroupCheckS whether a machine left:
    // NCCL's kernels would wait for it for ever.
    std::string hung;
    Status lost;
    {
      std::unique_lock<std::mutex> lock(mu);
      const auto deadline = start + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                        std::chrono::duration<double>(limit_s));
      const auto slice = std::chrono::duration_cast<std::chrono::steady_clock::duration>(
          std::chrono::duration<double>(kGroupCheckS));
      while (done != n && std::chrono::steady_clock::now() < deadline) {
        const auto until =
            machines > 1 ? std::min(deadline, std::chrono::steady_clock::now() + slice) : deadline;
        if (cv.wait_until(lock, until, [&] { return done == n; }) || machines == 1) continue;
        lock.unlock();
        lost = processes->check();
        lock.lock();
        if (!lost.ok()) break;
      }
      if (done != n) {
        for (int r = 0; r < n; ++r) {
          if (!results[r]) hung += (hung.empty() ? "" : ", ") + names[r];
        }
        lock.unlock();
        abort_group();
        lock.lock();
        cv.wait(lock, [&] { return done == n; });
      }
    }
    for (std::thread& t : threads) t.join();
    broken = !hung.empty() || first_failed >= 0;
    if (!lost.ok())
      return lost.with_context("data parallel across machines: the " + std::string(what) +
                               " stops on " + hung +
                               " (the last checkpoint stands and resumes on any number of "
                               "machines)");
    for (int r = 0; r < n; ++r) broken = broken || !results[r]->ok();

    for (int r = 0; r < n; ++r) {
      if (!results[r]->ok() && results[r]->status().code() == ErrorCode::kCancelled)
        return results[r]->status();
    }
    if (!hung.empty()) {
      char limit[32];
      std::snprintf(limit, sizeof(limit), "%.4g", limit_s);
      return internal_error("the " + std::string(what) + " did not finish within " +
                            std::string(limit) + " s on " + hung +
                            ": a lost GPU, or NCCL waiting for a peer or a link that failed; the "
                            "run stops (the last checkpoint stands and resumes on any number of "
                            "GPUs)");
    }
    for (int r = 0; r < n; ++r) {  // a failure nobody reported through failed(): a bug
      if (!results[r]->ok() && first_failed < 0) first_failed = r;
    }
    if (first_failed >= 0) return results[first_failed]->status().with_context(names[first_failed]);
    std::vector<StepResult> out;
    for (auto& r : results) out.push_back(std::move(r->value()));
    return out;
  }

  // Each GPU's step on a thread of its own; the caller waits, watching for a hung GPU.
  Result<StepResult> step(const StepBatch& batch) {
    const int n = ranks();
    const int all = n * machines;  // the group's ranks, machine-major
    if (batch.micro_batches % all != 0)
      return invalid_argument("data parallel: " + std::to_string(batch.micro_batches) +
                              " micro-batches do not split evenly over " + std::to_string(all) +
                              " GPUs");
    const int per_rank = batch.micro_batches / all;
    const size_t rank_tokens =
        static_cast<size_t>(per_rank) * batch.micro_batch_size * batch.seq_len;
    if (batch.input_ids.size() != rank_tokens * all || batch.labels.size() != rank_tokens * all ||
        (!batch.positions.empty() && batch.positions.size() != rank_tokens * all))
      return invalid_argument("data parallel: the batch holds " +
                              std::to_string(batch.input_ids.size()) + " ids and " +
                              std::to_string(batch.labels.size()) + " labels and " +
                              std::to_string(batch.positions.size()) + " positions, expected " +
                              std::to_string(rank_tokens * all));
    // Every process holds the whole step's batch and counts its targets alike.
    int64_t targets = 0;
    for (int32_t lab : batch.labels) targets += lab != -100;
    const size_t first = static_cast<size_t>(process) * n;  // this process's first rank
    const auto start = std::chrono::steady_clock::now();
    SPW_ASSIGN_OR_RETURN(std::vector<StepResult> results, on_every_rank("step", [&](int r) {
                           StepBatch b = batch;
                           b.micro_batches = per_rank;
                           const size_t at = (first + r) * rank_tokens;
                           b.input_ids = batch.input_ids.subspan(at, rank_tokens);
                           b.labels = batch.labels.subspan(at, rank_tokens);
                           if (!batch.positions.empty())
                             b.positions = batch.positions.subspan(at, rank_tokens);
                           // No targets: no gradient anywhere.
                           b.loss_targets = targets > 0 ? targets : 1;
                           return engines[r]->forward_backward(b);
                         }));
    const double limit_s = time_limit_s();
    StepResult out;
    out.grad_sumsq.assign(results[0].grad_sumsq.size(), 0.0);
    for (int r = 0; r < n; ++r) {
      const StepResult& s = results[r];
      out.loss_sum += s.loss_sum;
      out.targets += s.targets;
      for (size_t b = 0; b < s.grad_sumsq.size(); ++b) out.grad_sumsq[b] += s.grad_sumsq[b];
      out.device_timelines.push_back(s.timeline);
    }
    out.timeline = out.device_timelines[0];
    if (machines > 1) SPW_RETURN_IF_ERROR(across_machines(out, limit_s));
    last_step_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return out;
  }

  // Past one machine: the step's loss and targets over every machine, summed in process order,
  // whether any asked for a stop, and each block's gradient sum of squares, its owner's, summed
  // over the processes in process order too (the others add zeros).
  Status across_machines(StepResult& out, double limit_s) {
    ProcessStep mine;
    mine.loss_sum = out.loss_sum;
    mine.targets = out.targets;
    mine.stop = stop && stop->load();
    mine.checkpoint = checkpoint && checkpoint->exchange(false);
    std::string message(reinterpret_cast<const char*>(&mine), sizeof(mine));
    const size_t sums = out.grad_sumsq.size();
    message.append(reinterpret_cast<const char*>(out.grad_sumsq.data()), sums * sizeof(double));
    auto all = processes->all_gather(message, limit_s);
    if (!all.ok()) {
      broken = true;
      abort_group();
      return all.status().with_context("data parallel across machines");
    }
    out.loss_sum = 0;
    out.targets = 0;
    std::fill(out.grad_sumsq.begin(), out.grad_sumsq.end(), 0.0);
    stop_asked = checkpoint_asked = false;
    for (const std::string& p : *all) {
      ProcessStep theirs;
      if (p.size() != message.size())
        return internal_error("data parallel: a process sent " + std::to_string(p.size()) +
                              " bytes for its step, expected " + std::to_string(message.size()));
      std::memcpy(&theirs, p.data(), sizeof(theirs));
      out.loss_sum += theirs.loss_sum;
      out.targets += theirs.targets;
      stop_asked = stop_asked || theirs.stop != 0;
      checkpoint_asked = checkpoint_asked || theirs.checkpoint != 0;
      for (size_t b = 0; b < sums; ++b) {
        double sq;
        std::memcpy(&sq, p.data() + sizeof(theirs) + b * sizeof(double), sizeof(sq));
        out.grad_sumsq[b] += sq;
      }
    }
    return {};
  }
};

DataParallelEngine::DataParallelEngine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
DataParallelEngine::~DataParallelEngine() = default;

Result<std::unique_ptr<DataParallelEngine>> DataParallelEngine::create(
    std::span<compute::Backend* const> backends, ModelState& state, const StreamingConfig& config,
    TierCounters* counters, compute::ProcessExchange* processes) {
  std::vector<compute::Device*> devices;
  for (compute::Backend* b : backends) devices.push_back(&b->device());
  return create(devices, backends, state, config, counters, processes);
}

Result<std::unique_ptr<DataParallelEngine>> DataParallelEngine::create(
    std::span<compute::Device* const> devices, std::span<compute::Backend* const> backends,
    ModelState& state, const StreamingConfig& config, TierCounters* counters,
    compute::ProcessExchange* processes) {
  if (backends.empty() || devices.size() != backends.size())
    return invalid_argument("data parallel: " + std::to_string(devices.size()) + " devices for " +
                            std::to_string(backends.size()) + " backends");
  auto impl = std::make_unique<Impl>();
  const int n = static_cast<int>(backends.size());
  if (processes && processes->processes() > 1) {
    impl->processes = processes;
    impl->process = processes->process();
    impl->machines = processes->processes();
  }
  const bool group = n > 1 || impl->machines > 1;
  if (group) {
    SPW_ASSIGN_OR_RETURN(impl->comms, compute::make_communicators(backends, impl->processes));
  }
  for (int r = 0; r < n; ++r) {
    StreamingConfig c = config;
    c.data_parallel_ranks = n;
    c.data_parallel_processes = impl->machines;
    c.register_host_state = r == 0;  // portable: one registration serves every GPU
    const bool gpu = backends[r]->facts().gpu;
    impl->devices.push_back(gpu ? backends[r]->device().ordinal() : r);
    impl->names.push_back(
        (gpu ? "GPU " : "CPU rank ") + std::to_string(impl->devices.back()) +
        (impl->machines > 1 ? " of process " + std::to_string(impl->process) : std::string()));
    auto engine = StreamingEngine::create(*devices[r], *backends[r], state, c, counters);
    if (!engine.ok())
      return !group ? engine.status() : engine.status().with_context(impl->names[r]);
    if (group) {
      Impl* self = impl.get();
      SPW_RETURN_IF_ERROR(
          (*engine)->set_communicator(impl->comms[r].get(), [self, r] { self->failed(r); }));
    }
    impl->engines.push_back(std::move(*engine));
  }
  return std::unique_ptr<DataParallelEngine>(new DataParallelEngine(std::move(impl)));
}

void DataParallelEngine::set_step_timeout(double seconds) {
  impl_->step_timeout_s = seconds;
}

int DataParallelEngine::ranks() const {
  return impl_->ranks();
}

StreamingEngine& DataParallelEngine::rank(int r) {
  return *impl_->engines.at(r);
}

int DataParallelEngine::machines() const {
  return impl_->machines;
}

bool DataParallelEngine::stop_asked() const {
  return impl_->stop_asked;
}

void DataParallelEngine::set_checkpoint_flag(std::atomic<bool>* asked) {
  impl_->checkpoint = asked;
}

bool DataParallelEngine::checkpoint_asked() const {
  return impl_->checkpoint_asked;
}

Result<StepResult> DataParallelEngine::forward_backward(const StepBatch& batch) {
  if (impl_->ranks() == 1 && impl_->machines == 1)
    return impl_->engines[0]->forward_backward(batch);
  return impl_->step(batch);
}

Result<StepResult> DataParallelEngine::forward(const StepBatch& batch, float* logits) {
  if (impl_->machines == 1) return impl_->engines[0]->forward(batch, logits);
  // Every GPU of every machine takes part in each block's broadcast: each runs the pass.
  SPW_ASSIGN_OR_RETURN(std::vector<StepResult> results,
                       impl_->on_every_rank("forward pass", [&](int r) {
                         return impl_->engines[r]->forward(batch, r == 0 ? logits : nullptr);
                       }));
  return std::move(results[0]);
}

void DataParallelEngine::set_weight_gate(std::function<void(size_t block)> gate) {
  for (auto& e : impl_->engines) e->set_weight_gate(gate);
}

void DataParallelEngine::set_span_sink(DeviceSpanSink sink, std::function<double()> clock) {
  const int n = impl_->ranks();
  for (int r = 0; r < n; ++r) {
    StreamingEngine::SpanSink tagged;
    if (sink) {
      const std::optional<int> device =
          n > 1 ? std::optional<int>(impl_->devices[r]) : std::nullopt;
      tagged = [sink, device](size_t block, const char* phase, double start_s, double end_s) {
        sink(device, block, phase, start_s, end_s);
      };
    }
    impl_->engines[r]->set_span_sink(std::move(tagged), clock);
  }
}

void DataParallelEngine::set_stop_flag(const std::atomic<bool>* stop) {
  impl_->stop = stop;
  // Across machines a stop waits for the step's end, where every machine learns of it: one
  // machine stopping mid-step would leave the others waiting in its collectives.
  for (auto& e : impl_->engines) e->set_stop_flag(impl_->machines > 1 ? nullptr : stop);
}

void DataParallelEngine::invalidate_weights() {
  for (auto& e : impl_->engines) e->invalidate_weights();
}

const DeviceMemoryPlan& DataParallelEngine::memory_plan() const {
  return impl_->engines[0]->memory_plan();
}

HbmState* DataParallelEngine::hbm_state() {
  return impl_->engines[0]->hbm_state();
}

uint64_t DataParallelEngine::h2d_bytes() const {
  uint64_t sum = 0;
  for (const auto& e : impl_->engines) sum += e->h2d_bytes();
  return sum;
}

uint64_t DataParallelEngine::d2h_bytes() const {
  uint64_t sum = 0;
  for (const auto& e : impl_->engines) sum += e->d2h_bytes();
  return sum;
}

}  // namespace spillway
