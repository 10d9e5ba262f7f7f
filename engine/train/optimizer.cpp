#include "train/optimizer.h"

#include <algorithm>
#include <cmath>

#include "train/hbm-state.h"

namespace spillway {

Optimizer::Optimizer(ModelState& state, AdamWConfig base, double clip_grad_norm,
                     OptimizerStateStore* store)
    : state_(state),
      own_store_(store ? nullptr : make_dram_state(state)),
      store_(store ? store : own_store_.get()),
      base_(base),
      clip_(clip_grad_norm) {
  tiers_ = store_->tiers();
  if (tiers_.any_on_ssd())
    pool_ = std::make_unique<ThreadPool>(std::clamp<size_t>(ThreadPool::global().size() / 8, 1, 4));
  thread_ = std::thread([this] { run(); });
}

Optimizer::~Optimizer() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

StepStats Optimizer::begin_step(double lr, std::span<const double> grad_sumsq) {
  wait_all();
  const bool measured = grad_sumsq.size() == state_.num_blocks();
  double sq = 0.0;  // summed in block order either way: the same bits when the sums are the same
  for (size_t b = 0; b < state_.num_blocks(); ++b) {
    if (measured || state_.holds(b))
      sq += measured ? grad_sumsq[b]
                     : sum_of_squares(state_.grad(b), state_.layout().blocks()[b].numel);
  }
  StepStats s;
  s.grad_norm = std::sqrt(sq);
  s.clip_coef = clip_coefficient(s.grad_norm, clip_);
  if (posted_) {
    s.prev_update_ssd_read_bytes = store_->ssd_read_bytes() - pass_read_start_;
    s.prev_update_ssd_write_bytes = store_->ssd_write_bytes() - pass_write_start_;
  }
  {
    std::lock_guard lock(mu_);
    if ((hbm_ || !state_.holds_all()) && !measured && error_.ok())
      error_ = internal_error(
          "optimizer: the gradients of the HBM state tier's blocks, or of other machines' blocks, "
          "are not in this state, so begin_step needs the engine's per-block sums of squares "
          "(StepResult::grad_sumsq)");
    if (!error_.ok()) return s;
    if (hbm_) {
      // The device's blocks, on its compute stream (after this step's backward, before the next
      // forward); the same constants as the CPU's below.
      AdamWConfig cfg = base_;
      cfg.lr = lr;
      if (Status st = hbm_->update(cfg, state_.step + 1, s.clip_coef); !st.ok()) {
        error_ = st;
        return s;
      }
      host_stale_ = true;
    }
    pass_read_start_ = store_->ssd_read_bytes();
    pass_write_start_ = store_->ssd_write_bytes();
    posted_ = true;
    step_cfg_ = base_;
    step_cfg_.lr = lr;
    step_coef_ = s.clip_coef;
    step_number_ = ++state_.step;
    done_blocks_ = 0;
    pending_ = true;
  }
  cv_.notify_all();
  return s;
}

void Optimizer::wait_block(size_t b) {
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return !pending_ || done_blocks_ > b; });
}

Status Optimizer::set_hbm_state(HbmState* hbm) {
  wait_all();
  hbm_ = hbm;
  return hbm_ ? hbm_->load_from_host(own_store_ ? nullptr : store_) : Status();
}

Status Optimizer::sync_host() {
  wait_all();
  SPW_RETURN_IF_ERROR(status());
  if (!hbm_ || !host_stale_) return {};
  SPW_RETURN_IF_ERROR(hbm_->store_to_host(own_store_ ? nullptr : store_));
  host_stale_ = false;
  return {};
}

Status Optimizer::status() const {
  std::lock_guard lock(const_cast<std::mutex&>(mu_));
  return error_;
}

void Optimizer::wait_all() {
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return !pending_; });
}

void Optimizer::run() {
  std::unique_lock lock(mu_);
  while (true) {
    cv_.wait(lock, [&] { return stop_ || (pending_ && done_blocks_ == 0); });
    if (stop_) return;
    const AdamWConfig cfg = step_cfg_;
    const float coef = step_coef_;
    const int64_t step = step_number_;
    lock.unlock();
    double t0 = 0.0;
    const size_t first = hbm_ ? hbm_->blocks() : 0;  // the HBM tier updated those
    {
      std::lock_guard guard(mu_);
      done_blocks_ = first;
      cv_.notify_all();
    }
    Status st = store_->for_each_block(
        first,
        [&](size_t b, size_t offset, size_t count, float* master, float* m, float* v) {
          if (!state_.holds(b)) return;  // another machine updates it
          const BlockLayout& block = state_.layout().blocks()[b];
          ThreadPool* pool = tiers_.of(b) == BlockTiers::kDram ? nullptr : pool_.get();
          if (span_sink_ && offset == 0) t0 = clock_();
          if (offset == 0 && count == block.numel) {
            adamw_update_block(block, master, m, v, state_.grad(b), cfg, step, coef, pool);
          } else {
            // A piece of the block: each parameter's part of it, the padding untouched as above.
            for (const ParamView& p : block.params) {
              const size_t lo = std::max(offset, p.offset),
                           hi = std::min(offset + count, p.offset + p.numel);
              if (lo >= hi) continue;
              adamw_update_range(master + (lo - offset), m + (lo - offset), v + (lo - offset),
                                 state_.grad(b) + lo, hi - lo, cfg, step, coef, p.decay, pool);
            }
          }
          if (span_sink_ && offset + count == block.numel) span_sink_(b, "optimizer", t0, clock_());
        },
        [&](size_t b) {
          std::lock_guard guard(mu_);
          done_blocks_ = b + 1;
          cv_.notify_all();
        });
    lock.lock();
    if (!st.ok() && error_.ok()) error_ = st;
    pending_ = false;
    cv_.notify_all();
  }
}

}  // namespace spillway
