#include "train/machine-probe.h"

#include <cblas.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <utility>
#include <vector>

#include "compute/backend-loader.h"
#include "compute/cpu/attention-key-bias.h"
#include "compute/cpu/attention.h"
#include "core/buffer.h"
#include "core/dtype.h"
#include "core/thread-pool.h"
#include "telemetry/sampler.h"
#include "train/adamw.h"

namespace spillway {
namespace {

using compute::Backend;
using compute::EventId;
using compute::StreamId;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

double time_it(const std::function<void()>& fn, int reps) {
  fn();  // warm-up
  const auto t0 = Clock::now();
  for (int i = 0; i < reps; ++i) fn();
  return seconds_since(t0) / reps;
}

// Sequential O_DIRECT write (fsynced) then read of 64 MiB in `dir`: the slower of the two, in
// bytes/s; 0 when it cannot be measured (no folder, or a filesystem without O_DIRECT).
double probe_disk(const std::string& dir) {
  if (dir.empty()) return 0;
  const std::string path = dir + "/.spillway-probe-" + std::to_string(::getpid());
  const size_t bytes = 64 << 20, chunk = 4 << 20;
  void* buf = nullptr;
  if (posix_memalign(&buf, 4096, chunk) != 0) return 0;
  std::memset(buf, 0x5a, chunk);
  double rate = 0;
  int fd = ::open(path.c_str(), O_CREAT | O_TRUNC | O_RDWR | O_DIRECT, 0600);
  if (fd >= 0) {
    ::unlink(path.c_str());  // now: a process killed mid-probe must not leave 64 MiB behind
    auto t0 = Clock::now();
    bool ok = true;
    for (size_t off = 0; ok && off < bytes; off += chunk) {
      ok = ::pwrite(fd, buf, chunk, static_cast<off_t>(off)) == static_cast<ssize_t>(chunk);
    }
    ok = ok && ::fsync(fd) == 0;
    const double w = seconds_since(t0);
    t0 = Clock::now();
    for (size_t off = 0; ok && off < bytes; off += chunk) {
      ok = ::pread(fd, buf, chunk, static_cast<off_t>(off)) == static_cast<ssize_t>(chunk);
    }
    const double r = seconds_since(t0);
    if (ok) rate = bytes / std::max(w, r);
    ::close(fd);
  }
  std::free(buf);
  return rate;
}

// Device and pinned host buffers of the probe, freed through the backend when they go.
class DeviceBuffer {
 public:
  DeviceBuffer(compute::Device& be, void* p) : be_(&be), p_(p) {}
  DeviceBuffer(DeviceBuffer&& o) noexcept : be_(o.be_), p_(std::exchange(o.p_, nullptr)) {}
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() {
    if (p_) be_->device_free(p_);
  }
  void* get() const { return p_; }

 private:
  compute::Device* be_;
  void* p_;
};

class PinnedBuffer {
 public:
  PinnedBuffer(compute::Device& be, void* p) : be_(&be), p_(p) {}
  PinnedBuffer(PinnedBuffer&& o) noexcept : be_(o.be_), p_(std::exchange(o.p_, nullptr)) {}
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  ~PinnedBuffer() {
    if (p_) be_->host_free_pinned(p_);
  }
  void* get() const { return p_; }

 private:
  compute::Device* be_;
  void* p_;
};

Result<DeviceBuffer> device_buffer(compute::Device& be, size_t bytes) {
  SPW_ASSIGN_OR_RETURN(void* p, be.device_alloc(bytes));
  return DeviceBuffer(be, p);
}

Result<PinnedBuffer> pinned_buffer(compute::Device& be, size_t bytes) {
  SPW_ASSIGN_OR_RETURN(void* p, be.host_alloc_pinned(bytes));
  return PinnedBuffer(be, p);
}

// Seconds per repetition of `enqueue` (which puts `reps` repetitions of work on streams ordered
// after `start` on `first`, and returns the stream that ends last), between two timing events.
Result<double> time_on_device(compute::Device& be, StreamId first, int reps,
                              const std::function<Result<StreamId>()>& enqueue) {
  SPW_ASSIGN_OR_RETURN(compute::Event start, be.create_event(true));
  SPW_ASSIGN_OR_RETURN(compute::Event end, be.create_event(true));
  SPW_RETURN_IF_ERROR(be.record_event(start, first));
  SPW_ASSIGN_OR_RETURN(StreamId last, enqueue());
  SPW_RETURN_IF_ERROR(be.record_event(end, last));
  SPW_RETURN_IF_ERROR(be.synchronize_event(end));
  SPW_ASSIGN_OR_RETURN(double s, be.elapsed_s(start, end));
  return s / reps;
}

// Fills `bytes / act` elements of pinned `host` with uniform values in [-1, 1) in `act`
// (a cheap LCG: the GEMM's speed depends on the values only through power draw, so they must be
// non-zero, not well distributed).
void fill_random(void* host, DType act, size_t count, uint64_t seed) {
  std::vector<float> f(count);
  uint64_t s = seed * 6364136223846793005ull + 1442695040888963407ull;
  for (float& x : f) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    x = static_cast<float>(s >> 40) * 0x1.0p-23f - 1.0f;
  }
  convert_from_f32(f.data(), act, host, count);
}

}  // namespace

MachineProbe probe_machine(const std::string& ssd_dir) {
  MachineProbe m;
  const int n = 512;
  std::vector<float> a(n * n, 1.0f), b(n * n, 0.5f), c(n * n);
  double t = time_it(
      [&] {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a.data(), n, b.data(),
                    n, 0.0f, c.data(), n);
      },
      5);
  m.compute_flops = 2.0 * n * n * n / t;
  std::vector<char> src(64 << 20, 1), dst(64 << 20);
  t = time_it([&] { std::memcpy(dst.data(), src.data(), src.size()); }, 3);
  m.h2d_bytes_per_s = src.size() / t;
  m.host_mem_bytes_per_s = 2.0 * src.size() / t;  // a copy reads and writes
  const MemInfo mem = read_meminfo();
  m.dram_total_bytes = mem.total_bytes.value_or(0);
  m.dram_available_bytes = mem.available_bytes.value_or(0);
  m.ssd_bytes_per_s = probe_disk(ssd_dir);
  if (!ssd_dir.empty()) {
    const FsSpace space = read_fs_space(ssd_dir);
    m.ssd_free_bytes = space.free_bytes.value_or(0);
    m.ssd_total_bytes = space.total_bytes.value_or(0);
  }
  return m;
}

namespace {

// Seconds per call of `fn`: the median of 5 samples after a warm-up, each of as many calls as
// take about 20 ms. On a machine that other work shares, the job sees the cores as they are most
// of the time; a sample of one call of a few milliseconds sees one lucky or unlucky time slice.
double median_of_5(const std::function<void()>& fn) {
  auto t0 = Clock::now();
  fn();
  const double first = seconds_since(t0);
  const int calls =
      static_cast<int>(std::clamp(std::ceil(0.02 / std::max(first, 1e-6)), 1.0, 1000.0));
  std::vector<double> s(5);
  for (double& t : s) {
    t0 = Clock::now();
    for (int c = 0; c < calls; ++c) fn();
    t = seconds_since(t0) / calls;
  }
  std::nth_element(s.begin(), s.begin() + 2, s.end());
  return s[2];
}

Result<AlignedBuffer> random_floats(size_t n, uint64_t seed) {
  SPW_ASSIGN_OR_RETURN(AlignedBuffer b, AlignedBuffer::allocate(std::max<size_t>(n, 1) * 4));
  fill_random(b.data(), DType::kF32, n, seed);
  return b;
}

// One linear layer y[rows, out] = x[rows, in] · W[out, in]ᵀ as the CPU backend's linear_forward
// and linear_backward call sgemm (compute/cpu/linear.cpp): the forward twice (the backward's
// recompute), then dx = dy · W and dW += dyᵀ · x. 8·rows·in·out FLOPs.
struct GemmShape {
  int in = 0, out = 0;
};

Result<double> time_gemms(const std::vector<GemmShape>& shapes, int rows, double* flops) {
  size_t widest = 0, weight = 0;  // the widest activation row, the largest weight
  for (const GemmShape& g : shapes) {
    widest = std::max<size_t>({widest, size_t(g.in), size_t(g.out)});
    weight = std::max(weight, size_t(g.in) * size_t(g.out));
  }
  const size_t act = static_cast<size_t>(rows) * widest;
  SPW_ASSIGN_OR_RETURN(AlignedBuffer x, random_floats(act, 1));
  SPW_ASSIGN_OR_RETURN(AlignedBuffer dy, random_floats(act, 2));
  SPW_ASSIGN_OR_RETURN(AlignedBuffer w, random_floats(weight, 3));
  SPW_ASSIGN_OR_RETURN(AlignedBuffer y, AlignedBuffer::allocate(act * 4));
  SPW_ASSIGN_OR_RETURN(AlignedBuffer dw, AlignedBuffer::allocate(weight * 4));
  const float *xp = x.as<float>(), *dyp = dy.as<float>(), *wp = w.as<float>();
  float *yp = y.as<float>(), *dwp = dw.as<float>();
  *flops = 0;
  for (const GemmShape& g : shapes) *flops += 8.0 * rows * g.in * g.out;
  return median_of_5([&] {
    for (const GemmShape& g : shapes) {
      for (int pass = 0; pass < 2; ++pass)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, g.out, g.in, 1.0f, xp, g.in, wp,
                    g.in, 0.0f, yp, g.out);
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, g.in, g.out, 1.0f, dyp, g.out,
                  wp, g.in, 0.0f, yp, g.in);
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, g.out, g.in, rows, 1.0f, dyp, g.out, xp,
                  g.in, 1.0f, dwp, g.in);
    }
  });
}

// Seconds of one layer's attention in a training step (forward, the recompute's forward,
// backward, and with `key_bias` the key bias's gradient) for `batch` sequences of `seq` tokens,
// `hq` query and `hkv` key-value heads of `head_dim`.
Result<double> time_attention(int batch, int seq, int hq, int hkv, int head_dim, bool key_bias) {
  const int heads = hq;  // every buffer as large as the query heads'
  const size_t n = static_cast<size_t>(batch) * seq * heads * head_dim;
  std::vector<AlignedBuffer> b;
  for (uint64_t i = 0; i < 8; ++i) {
    SPW_ASSIGN_OR_RETURN(AlignedBuffer buffer, random_floats(n, i + 1));
    b.push_back(std::move(buffer));
  }
  std::vector<float> lse(static_cast<size_t>(batch) * heads * seq);
  const size_t scratch_bytes =
      std::max(compute::cpu::attention_forward_scratch_bytes(batch, seq, hq, hkv, head_dim),
               compute::cpu::attention_backward_scratch_bytes(batch, seq, hq, hkv, head_dim));
  SPW_ASSIGN_OR_RETURN(AlignedBuffer scratch,
                       AlignedBuffer::allocate(
                           std::max(scratch_bytes, compute::cpu::attention_key_bias_scratch_bytes(
                                                       batch, seq, hq, hkv, head_dim))));
  compute::cpu::RopeTable rope;
  if (key_bias) {
    SPW_ASSIGN_OR_RETURN(rope, compute::cpu::make_rope_table(seq, head_dim, 10000.0f, {}));
  }
  std::vector<float> db(static_cast<size_t>(heads) * head_dim);
  float *q = b[0].as<float>(), *k = b[1].as<float>(), *v = b[2].as<float>(),
        *out = b[3].as<float>(), *dout = b[4].as<float>();
  Status st;
  const double s = median_of_5([&] {
    for (int pass = 0; pass < 2 && st.ok(); ++pass)
      st = compute::cpu::attention_forward(out, lse.data(), q, k, v, batch, seq, hq, hkv, head_dim,
                                           scratch.data());
    if (st.ok())
      st = compute::cpu::attention_backward(b[5].as<float>(), b[6].as<float>(), b[7].as<float>(),
                                            dout, q, k, v, out, lse.data(), batch, seq, hq, hkv,
                                            head_dim, scratch.data());
    if (st.ok() && key_bias)
      st = compute::cpu::attention_key_bias_backward(db.data(), dout, q, k, v, batch, seq, hq, hkv,
                                                     head_dim, rope, scratch.data());
  });
  SPW_RETURN_IF_ERROR(st);
  return s;
}

}  // namespace

Status probe_cpu_compute(const ModelConfig& c, int seq_len, int64_t micro_batch_tokens,
                         MachineProbe* m) {
  if (c.hidden_size < 1 || c.head_dim < 1 || seq_len < 1 || micro_batch_tokens < 1)
    return invalid_argument("probe_cpu_compute: sizes must be positive");
  // A decoder layer's linears and the LM head, once each: the head's share of the step is one
  // layer's in L + 1, which weighs it about right for the small models where it matters.
  const std::vector<GemmShape> shapes = {
      {c.hidden_size, c.q_dim()},           {c.hidden_size, c.kv_dim()},
      {c.hidden_size, c.kv_dim()},          {c.q_dim(), c.hidden_size},
      {c.hidden_size, c.intermediate_size}, {c.hidden_size, c.intermediate_size},
      {c.intermediate_size, c.hidden_size}, {c.hidden_size, c.vocab_size}};
  double per_row = 0;
  for (const GemmShape& g : shapes) per_row += 8.0 * g.in * g.out;
  // As many rows as the step's micro-batch (up to 4,096) and a budget that grows with the
  // threads: a few hundred rows leave most of 16 cores idle where the step's GEMMs fill them.
  const int threads = static_cast<int>(ThreadPool::global().size());
  const double kGemmBudgetFlops = 4e8 * std::max(1, threads / 2);
  int rows = static_cast<int>(std::min<int64_t>(micro_batch_tokens, 4096));
  while (rows > 64 && rows * per_row > kGemmBudgetFlops) rows /= 2;
  m->cpu_gemm_flops = 0;
  if (rows * per_row <= kGemmBudgetFlops) {
    double flops = 0;
    SPW_ASSIGN_OR_RETURN(double s, time_gemms(shapes, rows, &flops));
    m->cpu_gemm_flops = flops / s;
  }
  // The job's sequence length up to 1,024 (the cost per score grows with it: 1.7 times at 512
  // what it is at 256 on 2 cores), in whole groups of the model's grouped-query ratio, as many
  // key-value heads as keep it near 600K scores (8 query heads at 256 tokens).
  const int group = std::max(1, c.num_heads / std::max(1, c.num_kv_heads));
  const int seq = std::min(seq_len, 1024);
  const double group_scores = group * seq * (seq + 1) / 2.0;
  const int hkv = std::max(1, std::min(c.num_kv_heads, static_cast<int>(6e5 / group_scores)));
  const int hq = hkv * group;
  // The kernels run batch × heads tasks on the pool: as many sequences as give each thread two
  // tasks and the call about 600K scores (a call of a few thousand scores is mostly the pool's
  // overhead), no more than the step's own micro-batch, so that the probe loads the cores as the
  // step does.
  const int64_t step_tasks =
      std::max<int64_t>(1, micro_batch_tokens / std::max(1, seq_len)) * c.num_heads;
  const double head_scores = seq * (seq + 1) / 2.0;
  const int64_t wanted = std::max<int64_t>(
      (2 * threads + hq - 1) / hq, static_cast<int64_t>(std::ceil(6e5 / (hq * head_scores))));
  const int batch = static_cast<int>(std::max<int64_t>(1, std::min(wanted, step_tasks / hq)));
  SPW_ASSIGN_OR_RETURN(double attention_s,
                       time_attention(batch, seq, hq, hkv, c.head_dim, c.attention_bias));
  m->cpu_attention_s_per_score = attention_s / (double(batch) * hq * seq * (seq + 1) / 2.0);
  // The element-wise ops' bandwidth: a 64 MiB copy in one chunk per thread, as the pool runs them.
  const size_t bytes = size_t{64} << 20;
  std::vector<char> src(bytes, 1), dst(bytes);
  const double copy_s = median_of_5([&] {
    ThreadPool::global().parallel_for(bytes, [&](size_t b0, size_t b1) {
      std::memcpy(dst.data() + b0, src.data() + b0, b1 - b0);
    });
  });
  m->cpu_stream_bytes_per_s = 2.0 * bytes / copy_s;  // a copy reads and writes
  m->cpu_threads = threads;
  return {};
}

Status probe_device(Backend& backend, MachineProbe* m, const DeviceProbeSizes& sizes) {
  compute::Device& be = backend.device();
  if (sizes.gemm_n < 1 || sizes.gemm_reps < 1 || sizes.copy_bytes == 0 || sizes.copy_reps < 1)
    return invalid_argument("probe_device: sizes and repetitions must be positive");
  size_t free_bytes = 0, total_bytes = 0;
  SPW_RETURN_IF_ERROR(be.device_memory_info(&free_bytes, &total_bytes));
  const DType act = be.act_dtype();
  const size_t n = static_cast<size_t>(sizes.gemm_n);
  const size_t mat_bytes = n * n * dtype_size(act);
  const size_t copy = sizes.copy_bytes;

  // The GEMM: y[n, n] = x[n, n] · W[n, n]ᵀ, as the engine's linear layers call it; the workspace
  // only for linears of that size (no attention, no LM head).
  compute::OpShapes shapes;
  shapes.tokens = shapes.hidden = shapes.intermediate = sizes.gemm_n;
  const size_t ws_bytes = backend.workspace_bytes(shapes);
  SPW_ASSIGN_OR_RETURN(DeviceBuffer ws,
                       device_buffer(be, std::max(ws_bytes, compute::kDeviceAlignment)));
  SPW_RETURN_IF_ERROR(
      backend.set_workspace(ws.get(), std::max(ws_bytes, compute::kDeviceAlignment), shapes));
  SPW_ASSIGN_OR_RETURN(DeviceBuffer x, device_buffer(be, mat_bytes));
  SPW_ASSIGN_OR_RETURN(DeviceBuffer w, device_buffer(be, mat_bytes));
  SPW_ASSIGN_OR_RETURN(DeviceBuffer y, device_buffer(be, mat_bytes));
  SPW_ASSIGN_OR_RETURN(PinnedBuffer h_src, pinned_buffer(be, std::max(copy, mat_bytes)));
  SPW_ASSIGN_OR_RETURN(PinnedBuffer h_dst, pinned_buffer(be, copy));
  const StreamId compute = 0;
  for (auto [dst, seed] : {std::pair{x.get(), 1}, std::pair{w.get(), 2}}) {
    fill_random(h_src.get(), act, n * n, seed);
    SPW_RETURN_IF_ERROR(be.copy_h2d(dst, h_src.get(), mat_bytes, compute));
    SPW_RETURN_IF_ERROR(be.synchronize_stream(compute));  // h_src is refilled next
  }
  const int in = sizes.gemm_n;
  auto gemms = [&](int reps) -> Result<StreamId> {
    const compute::Shape square{in, in};  // y[n, n] = x[n, n] · W[n, n]ᵀ
    for (int r = 0; r < reps; ++r)
      SPW_RETURN_IF_ERROR(backend.linear_forward(
          compute::Tensor(y.get(), act, square), compute::ConstTensor(x.get(), act, square),
          compute::ConstTensor(w.get(), act, square), {}, compute));
    return compute;
  };
  SPW_RETURN_IF_ERROR(
      gemms(2).status());  // warm-up: the GEMM library picks its algorithm on first use
  SPW_ASSIGN_OR_RETURN(double gemm_s, time_on_device(be, compute, sizes.gemm_reps,
                                                     [&] { return gemms(sizes.gemm_reps); }));

  // The host link with pinned buffers: each way alone, then both at once on two streams.
  SPW_ASSIGN_OR_RETURN(DeviceBuffer d_a, device_buffer(be, copy));
  SPW_ASSIGN_OR_RETURN(DeviceBuffer d_b, device_buffer(be, copy));
  SPW_ASSIGN_OR_RETURN(compute::Stream up, be.create_stream());
  SPW_ASSIGN_OR_RETURN(compute::Stream down, be.create_stream());
  auto h2d = [&](int reps) -> Result<StreamId> {
    for (int r = 0; r < reps; ++r)
      SPW_RETURN_IF_ERROR(be.copy_h2d(d_a.get(), h_src.get(), copy, up));
    return up.id();
  };
  auto d2h = [&](int reps) -> Result<StreamId> {
    for (int r = 0; r < reps; ++r)
      SPW_RETURN_IF_ERROR(be.copy_d2h(h_dst.get(), d_b.get(), copy, down));
    return down.id();
  };
  SPW_RETURN_IF_ERROR(h2d(1).status());
  SPW_RETURN_IF_ERROR(d2h(1).status());
  const int reps = sizes.copy_reps;
  SPW_ASSIGN_OR_RETURN(double h2d_s, time_on_device(be, up, reps, [&] { return h2d(reps); }));
  SPW_ASSIGN_OR_RETURN(double d2h_s, time_on_device(be, down, reps, [&] { return d2h(reps); }));
  SPW_ASSIGN_OR_RETURN(compute::Event started, be.create_event());
  SPW_ASSIGN_OR_RETURN(compute::Event down_done, be.create_event());
  SPW_ASSIGN_OR_RETURN(double duplex_s, time_on_device(be, up, reps, [&]() -> Result<StreamId> {
                         // `down` starts with `up` and `up` ends after `down`, so the timing events
                         // bracket both.
                         SPW_RETURN_IF_ERROR(be.record_event(started, up));
                         SPW_RETURN_IF_ERROR(be.stream_wait_event(down, started));
                         SPW_RETURN_IF_ERROR(h2d(reps).status());
                         SPW_RETURN_IF_ERROR(d2h(reps).status());
                         SPW_RETURN_IF_ERROR(be.record_event(down_done, down));
                         SPW_RETURN_IF_ERROR(be.stream_wait_event(up, down_done));
                         return up.id();
                       }));

  m->compute_flops = 2.0 * static_cast<double>(n) * n * n / gemm_s;
  m->h2d_bytes_per_s = copy / h2d_s;
  m->d2h_bytes_per_s = copy / d2h_s;
  m->duplex_bytes_per_s = 2.0 * copy / duplex_s;
  m->device_total_bytes = total_bytes;
  m->device_free_bytes = free_bytes;
  m->backend = be.name();
  m->device = be.device_info().name;
  m->attention = be.device_info().attention;
  if (be.facts().gpu) {
    const Result<int> gpus = compute::cuda_device_count();
    m->gpus = gpus.ok() ? std::max(*gpus, 1) : 1;
    if (m->nccl_bus_bytes_per_s <= 0)
      m->nccl_bus_bytes_per_s = default_nccl_bus_bytes_per_s(be.device_info().compute_capability);
  }
  return {};
}

double default_nccl_bus_bytes_per_s(int compute_capability) {
  return compute_capability >= 90 ? kNcclBusBytesPerSNvlink : kNcclBusBytesPerSPcie;
}

Result<double> measure_adamw(size_t params) {
  if (params == 0) return invalid_argument("measure_adamw: params must be positive");
  SPW_ASSIGN_OR_RETURN(AlignedBuffer p, AlignedBuffer::allocate(params * sizeof(float), 4096));
  SPW_ASSIGN_OR_RETURN(AlignedBuffer m, AlignedBuffer::allocate(params * sizeof(float), 4096));
  SPW_ASSIGN_OR_RETURN(AlignedBuffer v, AlignedBuffer::allocate(params * sizeof(float), 4096));
  SPW_ASSIGN_OR_RETURN(AlignedBuffer g, AlignedBuffer::allocate(params * sizeof(float), 4096));
  float* pp = p.as<float>();
  float* gp = g.as<float>();
  ThreadPool::global().parallel_for(
      params,
      [&](size_t b, size_t e) {
        std::fill(pp + b, pp + e, 0.02f);
        std::fill(gp + b, gp + e, 1e-3f);
      },
      1 << 16);
  const AdamWConfig c{1e-4, 0.9, 0.95, 1e-8, 0.1};
  double best = 0;
  for (int step = 1; step <= 4; ++step) {
    const auto t0 = Clock::now();
    adamw_update_range(pp, m.as<float>(), v.as<float>(), gp, params, c, step, 1.0f, true);
    const double s = seconds_since(t0);
    if (step > 1 && (best == 0 || s < best)) best = s;  // step 1 is the warm-up
  }
  return static_cast<double>(params) / best;
}

}  // namespace spillway
