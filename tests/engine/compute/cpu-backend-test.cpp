// CpuBackend memory accounting, streams/events, copies, argument checks, the workspace, and strict
// streams: work that runs only when waited for, so missing waits and early host reads show.
#include "compute/cpu/cpu-backend.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <thread>
#include <vector>

#include "backend-test-util.h"
#include "compute-test-util.h"
#include "compute/cuda-workspace.h"
#include "core/thread-pool.h"

namespace spillway::compute {
namespace {

using namespace spillway::compute::testing;

// What `count` floats at `p` hold right now, read behind the backend's back (device memory is
// host memory on the CPU): the tests look at memory before and after the streams run.
std::vector<float> peek(const void* p, size_t count) {
  std::vector<float> v(count);
  std::memcpy(v.data(), p, count * sizeof(float));
  return v;
}

CpuBackendOptions strict_options() {
  return CpuBackendOptions{.strict_streams = true};
}

TEST(CpuBackend, NameDtypeAndDeviceInfo) {
  auto be = make_cpu_backend(1 << 20);
  EXPECT_EQ(be->name(), "cpu");
  EXPECT_EQ(be->act_dtype(), DType::kF32);
  const DeviceInfo info = be->device_info();
  EXPECT_EQ(info.name, "CPU (" + std::to_string(ThreadPool::global().size()) + " threads)");
  EXPECT_EQ(info.total_bytes, 1u << 20);
  EXPECT_EQ(info.compute_capability, 0);
  EXPECT_EQ(info.multiprocessors, static_cast<int>(ThreadPool::global().size()));
  EXPECT_TRUE(info.driver.empty());
}

TEST(CpuBackend, AllocationsAreAlignedAndCounted) {
  CpuBackend be(CpuBackendOptions{.device_capacity_bytes = 1 << 20});
  auto a = be.device().device_alloc(1000);
  ASSERT_TRUE(a.ok()) << a.status().to_string();
  EXPECT_EQ(reinterpret_cast<uintptr_t>(*a) % 256, 0u);
  EXPECT_EQ(be.device_bytes_in_use(), 1024u);  // rounded up to 256
  size_t free_bytes = 0, total = 0;
  ASSERT_TRUE(be.device_memory_info(&free_bytes, &total).ok());
  EXPECT_EQ(total, 1u << 20);
  EXPECT_EQ(free_bytes, (1u << 20) - 1024u);
  EXPECT_EQ(be.device_bytes_after(static_cast<char*>(*a) + 24), 976u);  // requested bytes
  EXPECT_EQ(be.device_bytes_after(&free_bytes), 0u);
  be.device().device_free(*a);
  EXPECT_EQ(be.device_bytes_in_use(), 0u);
  EXPECT_EQ(be.device_peak_bytes(), 1024u);
}

TEST(CpuBackend, AllocBeyondCapacityIsOutOfMemory) {
  auto be = make_cpu_backend(1 << 20);
  auto a = be->device().device_alloc(600 << 10);
  ASSERT_TRUE(a.ok());
  auto b = be->device().device_alloc(600 << 10);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), ErrorCode::kOutOfMemory);
  EXPECT_NE(b.status().message().find("requested 614400 bytes"), std::string::npos)
      << b.status().message();
  EXPECT_NE(b.status().message().find("free of 1048576 bytes"), std::string::npos);
  be->device().device_free(*a);
  auto c = be->device().device_alloc(600 << 10);  // fits again after the free
  EXPECT_TRUE(c.ok());
  be->device().device_free(*c);
  EXPECT_EQ(be->device().device_alloc((1 << 20) + 1).status().code(), ErrorCode::kOutOfMemory);
  EXPECT_TRUE(
      be->device().device_alloc(1 << 20).ok());  // exactly the capacity; freed by the backend
}

TEST(CpuBackend, UnboundedCapacityReportsPhysicalMemory) {
  auto be = make_cpu_backend();
  size_t free_bytes = 0, total = 0;
  ASSERT_TRUE(be->device_memory_info(&free_bytes, &total).ok());
  EXPECT_GT(total, 0u);
  auto a = be->device().device_alloc(64 << 20);
  ASSERT_TRUE(a.ok());
  be->device().device_free(*a);
}

TEST(CpuBackend, PoisonedAllocationsAreNaN) {
  CpuBackend be(CpuBackendOptions{.poison_allocations = true});
  auto a = be.device().device_alloc(64 * sizeof(float));
  ASSERT_TRUE(a.ok());
  const float* f = static_cast<const float*>(*a);
  for (int i = 0; i < 64; ++i) EXPECT_TRUE(std::isnan(f[i]));
  ASSERT_TRUE(be.device().fill_zero(*a, 64 * sizeof(float), 0).ok());
  for (int i = 0; i < 64; ++i) EXPECT_EQ(f[i], 0.0f);
}

TEST(CpuBackend, HostRegisterValidatesItsArguments) {
  auto be = make_cpu_backend();
  std::vector<char> mem(4096);
  EXPECT_OK(be->device().host_register(mem.data(), mem.size()));
  EXPECT_EQ(be->device().host_register(mem.data(), mem.size()).code(),
            ErrorCode::kInvalidArgument);  // twice
  EXPECT_EQ(be->device().host_register(nullptr, 16).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(be->device().host_register(mem.data() + 8, 0).code(), ErrorCode::kInvalidArgument);
  be->device().host_unregister(mem.data());
  EXPECT_OK(be->device().host_register(mem.data(), mem.size()));  // again, once unregistered
  be->device().host_unregister(mem.data());
}

TEST(CpuBackend, CopiesRoundTrip) {
  for (bool strict : {false, true}) {
    auto be = make_cpu_backend(
        CpuBackendOptions{.device_capacity_bytes = 1 << 20, .strict_streams = strict});
    auto s = be->device().create_stream();
    ASSERT_TRUE(s.ok());
    EXPECT_NE(s->id(), 0);
    auto ev = be->device().create_event();
    ASSERT_TRUE(ev.ok());
    auto dev = be->device().device_alloc(100 * sizeof(float));
    auto dev2 = be->device().device_alloc(100 * sizeof(float));
    auto pinned = be->device().host_alloc_pinned(100 * sizeof(float));
    ASSERT_TRUE(dev.ok() && dev2.ok() && pinned.ok());
    std::vector<float> src(100), dst(100, -1.0f);
    for (int i = 0; i < 100; ++i) src[i] = 0.5f * i;
    // Each hop on another stream than the last waits for it through an event.
    ASSERT_OK(be->device().copy_h2d(*dev, src.data(), 100 * sizeof(float), *s));
    ASSERT_OK(be->device().record_event(*ev, *s));
    ASSERT_OK(be->device().stream_wait_event(0, *ev));
    ASSERT_OK(be->device().copy_d2d(*dev2, *dev, 100 * sizeof(float), 0));
    ASSERT_OK(be->device().record_event(*ev, 0));
    ASSERT_OK(be->device().stream_wait_event(*s, *ev));
    ASSERT_OK(be->device().copy_d2h(*pinned, *dev2, 100 * sizeof(float), *s));
    ASSERT_OK(be->device().copy_h2d(*dev, *pinned, 100 * sizeof(float), *s));
    ASSERT_OK(be->device().record_event(*ev, *s));
    ASSERT_OK(be->device().stream_wait_event(0, *ev));
    ASSERT_OK(be->device().copy_d2h(dst.data(), *dev, 100 * sizeof(float), 0));
    ASSERT_OK(be->device().synchronize_stream(0));
    EXPECT_EQ(src, dst) << (strict ? "strict" : "synchronous");
    be->device().host_free_pinned(*pinned);
    be->device().device_free(*dev);
    be->device().device_free(*dev2);
  }
}

TEST(CpuBackend, StreamsAndEventsAreValidated) {
  auto be = make_cpu_backend();
  auto s = be->device().create_stream();
  auto e = be->device().create_event();
  ASSERT_TRUE(s.ok() && e.ok());
  EXPECT_TRUE(be->device().record_event(*e, *s).ok());
  EXPECT_TRUE(be->device().stream_wait_event(0, *e).ok());
  EXPECT_TRUE(be->device().synchronize_event(*e).ok());
  EXPECT_TRUE(be->device().synchronize_stream(*s).ok());
  EXPECT_TRUE(be->device().synchronize_stream(0).ok());
  EXPECT_EQ(be->device().synchronize_stream(s->id() + 1).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(be->device().synchronize_stream(-1).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(be->device().record_event(e->id() + 1, 0).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(be->device().record_event(*e, 7).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(be->device().stream_wait_event(0, -1).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(be->device().synchronize_event(e->id() + 1).code(), ErrorCode::kInvalidArgument);
  float x = 1.0f;
  EXPECT_EQ(be->device().copy_h2d(&x, &x, 4, 9).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(be->device().copy_h2d(nullptr, &x, 4, 0).code(), ErrorCode::kInvalidArgument);
  EXPECT_TRUE(be->device().copy_h2d(nullptr, nullptr, 0, 0).ok());
  EXPECT_EQ(
      be->add_inplace(f32(&x, {static_cast<int64_t>(1)}), f32(&x, {static_cast<int64_t>(1)}), 9)
          .code(),
      ErrorCode::kInvalidArgument);
  // An event never recorded counts as complete.
  auto fresh = be->device().create_event();
  ASSERT_TRUE(fresh.ok());
  EXPECT_OK(be->device().synchronize_event(*fresh));
  EXPECT_OK(be->device().stream_wait_event(*s, *fresh));
}

TEST(CpuBackend, TensorsMustFitTheirDeviceAllocations) {
  auto be = make_cpu_backend();
  auto dev = be->device().device_alloc(10 * sizeof(float));
  ASSERT_TRUE(dev.ok());
  std::vector<float> host(64, 1.0f);
  // y[3, 4] is 12 floats; its allocation has 10.
  auto st = be->linear_forward(Tensor(*dev, DType::kF32, {3, 4}), f32(host.data(), {3, 2}),
                               f32(host.data(), {4, 2}), ConstTensor(nullptr, DType::kF32, {4}), 0);
  EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(st.message().find("y needs 48 bytes"), std::string::npos) << st.message();
  EXPECT_OK(be->linear_forward(Tensor(*dev, DType::kF32, {2, 5}), f32(host.data(), {2, 2}),
                               f32(host.data(), {5, 2}), ConstTensor(nullptr, DType::kF32, {5}),
                               0));  // exactly 10
  EXPECT_EQ(be->device().copy_h2d(static_cast<char*>(*dev) + 8, host.data(), 40, 0).code(),
            ErrorCode::kInvalidArgument);
  st = be->rmsnorm_forward(Tensor(nullptr, DType::kF32, {2, 4}), Tensor(nullptr, DType::kF32, {2}),
                           f32(host.data(), {2, 4}), f32(host.data(), {4}), 1e-5f, 0);
  EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(st.message().find("out is null"), std::string::npos) << st.message();
}

// ---- the workspace ----------------------------------------------------------------------------

TEST(CpuBackend, OpsThatNeedAWorkspaceSaySo) {
  for (bool strict : {false, true}) {
    auto be = make_cpu_backend(CpuBackendOptions{.strict_streams = strict});
    const int batch = 2, seq = 40, hq = 4, hkv = 2, d = 8;
    std::vector<float> q(size_t(batch) * seq * hq * d, 0.5f),
        kv(size_t(batch) * seq * hkv * d, 0.5f), out(q.size()), lse(size_t(batch) * hq * seq);
    auto st = be->attention_forward(
        f32(out.data(), {batch, seq, hq, d}), f32(lse.data(), {batch, hq, seq}),
        f32(q.data(), {batch, seq, hq, d}), f32(kv.data(), {batch, seq, hkv, d}),
        f32(kv.data(), {batch, seq, hkv, d}), 0);
    EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument);  // at the call, also in strict mode
    EXPECT_NE(st.message().find("workspace"), std::string::npos) << st.message();
    EXPECT_NE(st.message().find("none is set"), std::string::npos) << st.message();

    const int n = 5, v = 7;
    std::vector<float> x(size_t(n) * d, 0.1f), w(size_t(v) * d, 0.1f), losses(n);
    std::vector<int32_t> labels(n, 1);
    st = be->lm_head_loss(f32(losses.data(), {n}), Tensor(nullptr, DType::kF32, {n, d}),
                          Tensor(nullptr, DType::kF32, {v, d}), f32(x.data(), {n, d}),
                          f32(w.data(), {v, d}), i32(labels.data(), {n}), 0.0f,
                          Tensor(nullptr, DType::kF32, {n, v}), n, 0);
    EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(st.message().find("lm_head_loss: needs"), std::string::npos) << st.message();

    // Sized for a much smaller call: too small, and the message says by how much.
    ASSERT_OK(set_test_workspace(*be, attention_shapes(1, 2, 1, 1, d)));
    st = be->attention_forward(
        f32(out.data(), {batch, seq, hq, d}), f32(lse.data(), {batch, hq, seq}),
        f32(q.data(), {batch, seq, hq, d}), f32(kv.data(), {batch, seq, hkv, d}),
        f32(kv.data(), {batch, seq, hkv, d}), 0);
    EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(st.message().find("the one set has"), std::string::npos) << st.message();

    ASSERT_OK(set_test_workspace(*be, attention_shapes(batch, seq, hq, hkv, d)));
    EXPECT_OK(be->attention_forward(
        f32(out.data(), {batch, seq, hq, d}), f32(lse.data(), {batch, hq, seq}),
        f32(q.data(), {batch, seq, hq, d}), f32(kv.data(), {batch, seq, hkv, d}),
        f32(kv.data(), {batch, seq, hkv, d}), 0));
    EXPECT_OK(be->device().synchronize_stream(0));  // nothing failed when the queued op ran
    EXPECT_OK(be->set_workspace(nullptr, 0, {}));   // taken back
    EXPECT_EQ(be->attention_forward(
                    f32(out.data(), {batch, seq, hq, d}), f32(lse.data(), {batch, hq, seq}),
                    f32(q.data(), {batch, seq, hq, d}), f32(kv.data(), {batch, seq, hkv, d}),
                    f32(kv.data(), {batch, seq, hkv, d}), 0)
                  .code(),
              ErrorCode::kInvalidArgument);
  }
}

TEST(CpuBackend, SetWorkspaceChecksSizeAndAlignment) {
  auto be = make_cpu_backend();
  const OpShapes shapes = attention_shapes(1, 16, 2, 1, 8);
  const size_t bytes = be->workspace_bytes(shapes);
  EXPECT_GT(bytes, 0u);
  EXPECT_EQ(bytes % 256, 0u);
  EXPECT_EQ(be->workspace_bytes(OpShapes{}), 0u);
  // The largest op's need, not the sum: the ops run one at a time.
  OpShapes both = shapes;
  both.tokens = 16, both.vocab = 100, both.lm_head_chunk = 16;
  EXPECT_EQ(be->workspace_bytes(both),
            std::max(bytes, be->workspace_bytes(lm_head_shapes(16, 8, 100, 16))));
  auto ws = be->device().device_alloc(bytes + 256);
  ASSERT_TRUE(ws.ok());
  EXPECT_EQ(be->set_workspace(*ws, bytes - 256, shapes).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(be->set_workspace(static_cast<char*>(*ws) + 64, bytes, shapes).code(),
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(be->set_workspace(nullptr, bytes, shapes).code(), ErrorCode::kInvalidArgument);
  // Past the end of its device allocation.
  EXPECT_EQ(be->set_workspace(static_cast<char*>(*ws) + 256, bytes + 256, shapes).code(),
            ErrorCode::kInvalidArgument);
  EXPECT_OK(be->set_workspace(*ws, bytes, shapes));
}

// ---- strict streams ---------------------------------------------------------------------------

// (a) Stream A copies a buffer that stream 0 writes: without a wait A sees the old contents; with
// an event recorded after the write and waited on, the new ones, and nothing stream 0 queued after
// the record.
TEST(CpuBackendStrict, ReadsAcrossStreamsNeedAWait) {
  CpuBackend be(strict_options());
  const size_t bytes = 4 * sizeof(float);
  auto buf = be.device().device_alloc(bytes), dst = be.device().device_alloc(bytes);
  ASSERT_TRUE(buf.ok() && dst.ok());
  const std::vector<float> old_data = {1, 2, 3, 4}, new_data = {5, 6, 7, 8},
                           later_data = {9, 9, 9, 9};
  ASSERT_OK(be.device().copy_h2d(*buf, old_data.data(), bytes, 0));
  ASSERT_OK(be.device().synchronize_stream(0));
  auto a = be.device().create_stream();
  ASSERT_TRUE(a.ok());

  ASSERT_OK(be.device().copy_h2d(*buf, new_data.data(), bytes, 0));
  ASSERT_OK(be.device().copy_d2d(*dst, *buf, bytes, *a));  // no wait
  ASSERT_OK(be.device().synchronize_stream(*a));
  EXPECT_EQ(peek(*dst, 4), old_data);

  auto written = be.device().create_event();
  ASSERT_TRUE(written.ok());
  ASSERT_OK(be.device().record_event(*written, 0));
  ASSERT_OK(
      be.device().copy_h2d(*buf, later_data.data(), bytes, 0));  // after the record: not waited for
  ASSERT_OK(be.device().stream_wait_event(*a, *written));
  ASSERT_OK(be.device().copy_d2d(*dst, *buf, bytes, *a));
  ASSERT_OK(be.device().synchronize_stream(*a));
  EXPECT_EQ(peek(*dst, 4), new_data);
  EXPECT_EQ(peek(*buf, 4), new_data);  // stream 0 ran up to the record only
  ASSERT_OK(be.device().synchronize_stream(0));
  EXPECT_EQ(peek(*buf, 4), later_data);
}

// (b) The host sees the results of copies and ops only after it synchronises.
TEST(CpuBackendStrict, HostSeesNothingBeforeSynchronize) {
  CpuBackend be(strict_options());
  const int n = 3, in = 4, out = 2;
  auto x = random_floats(n * in, 1), w = random_floats(out * in, 2);
  auto dev = be.device().device_alloc(x.size() * sizeof(float));
  ASSERT_TRUE(dev.ok());
  std::vector<float> back(x.size(), -1.0f), y(n * out, -1.0f);
  ASSERT_OK(be.device().copy_h2d(*dev, x.data(), x.size() * sizeof(float), 0));
  ASSERT_OK(be.linear_forward(f32(y.data(), {n, out}), ConstTensor(*dev, DType::kF32, {n, in}),
                              f32(w.data(), {out, in}), ConstTensor(nullptr, DType::kF32, {out}),
                              0));
  auto done = be.device().create_event();
  ASSERT_TRUE(done.ok());
  ASSERT_OK(be.device().record_event(*done, 0));
  ASSERT_OK(be.device().copy_d2h(back.data(), *dev, x.size() * sizeof(float), 0));
  EXPECT_EQ(y, std::vector<float>(n * out, -1.0f));
  EXPECT_EQ(back, std::vector<float>(x.size(), -1.0f));

  ASSERT_OK(be.device().synchronize_event(
      *done));  // runs the work before the record: the op, not the copy back
  EXPECT_NE(y, std::vector<float>(n * out, -1.0f));
  EXPECT_EQ(back, std::vector<float>(x.size(), -1.0f));
  ASSERT_OK(be.device().synchronize_stream(0));
  EXPECT_EQ(back, x);

  // The op computed what the synchronous backend computes.
  auto sync = make_cpu_backend();
  std::vector<float> y_sync(n * out);
  ASSERT_OK(sync->linear_forward(f32(y_sync.data(), {n, out}), f32(x.data(), {n, in}),
                                 f32(w.data(), {out, in}), ConstTensor(nullptr, DType::kF32, {out}),
                                 0));
  EXPECT_EQ(y, y_sync);
}

// (c) elapsed_s measures the recorded work when it runs, not when it was queued: a host sleep
// between queueing and synchronising does not count, the work does.
TEST(CpuBackendStrict, ElapsedTimeIsTakenWhenTheWorkRuns) {
  CpuBackend be(strict_options());
  const int n = 256, d = 256;
  auto x = random_floats(size_t(n) * d, 3), w = random_floats(size_t(d) * d, 4);
  std::vector<float> y(size_t(n) * d);
  auto start = be.device().create_event(/*timing=*/true),
       end = be.device().create_event(/*timing=*/true);
  ASSERT_TRUE(start.ok() && end.ok());
  ASSERT_OK(be.device().record_event(*start, 0));
  for (int i = 0; i < 8; ++i)
    ASSERT_OK(be.linear_forward(f32(y.data(), {n, d}), f32(x.data(), {n, d}), f32(w.data(), {d, d}),
                                ConstTensor(nullptr, DType::kF32, {d}), 0));
  ASSERT_OK(be.device().record_event(*end, 0));
  EXPECT_EQ(be.device().elapsed_s(*start, *end).status().code(),
            ErrorCode::kInvalidArgument);  // not run yet
  const double sleep_s = 0.3;
  std::this_thread::sleep_for(std::chrono::duration<double>(sleep_s));
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_OK(be.device().synchronize_event(*end));
  const double sync_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  auto elapsed = be.device().elapsed_s(*start, *end);
  ASSERT_TRUE(elapsed.ok()) << elapsed.status().to_string();
  EXPECT_GT(*elapsed, 0.0);
  EXPECT_LE(*elapsed, sync_s);   // within the synchronize that ran the work...
  EXPECT_LT(*elapsed, sleep_s);  // ...and without the host's sleep before it
}

TEST(CpuBackend, ElapsedTimeOfSynchronousWork) {
  auto be = make_cpu_backend();
  auto start = be->device().create_event(true), end = be->device().create_event(true),
       plain = be->device().create_event();
  ASSERT_TRUE(start.ok() && end.ok() && plain.ok());
  EXPECT_EQ(be->device().elapsed_s(*start, *end).status().code(),
            ErrorCode::kInvalidArgument);  // never recorded
  ASSERT_OK(be->device().record_event(*start, 0));
  std::this_thread::sleep_for(
      std::chrono::milliseconds(50));  // synchronous: the host's time is the stream's
  ASSERT_OK(be->device().record_event(*end, 0));
  ASSERT_OK(be->device().record_event(*plain, 0));
  auto elapsed = be->device().elapsed_s(*start, *end);
  ASSERT_TRUE(elapsed.ok()) << elapsed.status().to_string();
  EXPECT_GE(*elapsed, 0.05);
  EXPECT_LT(*elapsed, 5.0);
  EXPECT_EQ(be->device().elapsed_s(*start, *plain).status().code(),
            ErrorCode::kInvalidArgument);  // no timing
}

// (d) Destroying a stream runs its work first; destroyed streams and events stay unknown (ids are
// not reused).
TEST(CpuBackendStrict, DestroyedStreamsAndEventsAreRejected) {
  CpuBackend be(strict_options());
  auto dev = be.device().device_alloc(4 * sizeof(float));
  ASSERT_TRUE(dev.ok());
  const std::vector<float> data = {1, 2, 3, 4};
  auto s = be.device().create_stream();
  ASSERT_TRUE(s.ok());
  const StreamId sid = s->id();
  ASSERT_OK(be.device().copy_h2d(*dev, data.data(), 4 * sizeof(float), sid));
  s->reset();
  EXPECT_EQ(peek(*dev, 4), data);  // the queued copy ran before the stream went
  EXPECT_EQ(be.device().synchronize_stream(sid).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(be.device().copy_h2d(*dev, data.data(), 4 * sizeof(float), sid).code(),
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(be.device().fill_zero(*dev, 16, sid).code(), ErrorCode::kInvalidArgument);

  auto e = be.device().create_event(true);
  ASSERT_TRUE(e.ok());
  const EventId eid = e->id();
  EXPECT_EQ(be.device().record_event(eid, sid).code(), ErrorCode::kInvalidArgument);
  ASSERT_OK(be.device().record_event(eid, 0));
  e->reset();
  EXPECT_EQ(be.device().record_event(eid, 0).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(be.device().synchronize_event(eid).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(be.device().stream_wait_event(0, eid).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(be.device().elapsed_s(eid, eid).status().code(), ErrorCode::kInvalidArgument);
  EXPECT_OK(
      be.device().synchronize_stream(0));  // the queued record of the destroyed event does nothing

  auto s2 = be.device().create_stream();
  auto e2 = be.device().create_event();
  ASSERT_TRUE(s2.ok() && e2.ok());
  EXPECT_NE(s2->id(), sid);
  EXPECT_NE(e2->id(), eid);
  Stream moved = std::move(*s2);  // a moved-from handle destroys nothing
  EXPECT_OK(be.device().synchronize_stream(moved));
}

// Token ids and labels are device data: the strict backend checks them when the op runs (here,
// after the queued upload), and the synchronize that ran a failing op returns its error, then and
// later, also to streams that waited on it.
TEST(CpuBackendStrict, FailuresAreStickyAndReachTheStreamsThatWait) {
  CpuBackend be(CpuBackendOptions{.poison_allocations = true, .strict_streams = true});
  const int n = 4, d = 8, v = 10;
  ASSERT_OK(set_test_workspace(be, lm_head_shapes(n, d, v, n)));
  auto ids = be.device().device_alloc(n * sizeof(int32_t)),
       labels = be.device().device_alloc(n * sizeof(int32_t));
  auto table = be.device().device_alloc(size_t(v) * d * sizeof(float)),
       losses = be.device().device_alloc(n * sizeof(float));
  ASSERT_TRUE(ids.ok() && labels.ok() && table.ok() && losses.ok());
  std::vector<float> table_host = random_floats(size_t(v) * d, 5), x(size_t(n) * d);
  const std::vector<int32_t> ids_host = {3, 9, 0, 3}, bad_labels = {1, -100, 10, 2};
  ASSERT_OK(be.device().copy_h2d(*table, table_host.data(), table_host.size() * sizeof(float), 0));
  // Poisoned (NaN) ids would be out of range if they were checked now.
  ASSERT_OK(be.device().copy_h2d(*ids, ids_host.data(), n * sizeof(int32_t), 0));
  ASSERT_OK(be.embedding_forward(f32(x.data(), {n, d}), i32(static_cast<const int32_t*>(*ids), {n}),
                                 ConstTensor(*table, DType::kF32, {v, d}), 0));
  ASSERT_OK(be.device().synchronize_stream(0));
  for (int j = 0; j < d; ++j) EXPECT_EQ(x[size_t(1) * d + j], table_host[size_t(9) * d + j]);

  ASSERT_OK(be.device().copy_h2d(*labels, bad_labels.data(), n * sizeof(int32_t), 0));
  ASSERT_OK(be.lm_head_loss(
      Tensor(static_cast<float*>(*losses), DType::kF32, {n}), Tensor(nullptr, DType::kF32, {n, d}),
      Tensor(nullptr, DType::kF32, {v, d}), f32(x.data(), {n, d}),
      ConstTensor(*table, DType::kF32, {v, d}), i32(static_cast<const int32_t*>(*labels), {n}),
      0.0f, Tensor(nullptr, DType::kF32, {n, v}), n, 0));  // queued: ok
  auto after = be.device().create_event();
  auto a = be.device().create_stream();
  ASSERT_TRUE(after.ok() && a.ok());
  ASSERT_OK(be.device().record_event(*after, 0));
  ASSERT_OK(be.device().stream_wait_event(*a, *after));
  std::vector<float> host(n);
  ASSERT_OK(be.device().copy_d2h(host.data(), *losses, n * sizeof(float), *a));

  Status st = be.device().synchronize_stream(*a);
  EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(st.message().find("waited for work that failed"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("stream 0: lm_head_loss: label 10"), std::string::npos)
      << st.message();
  st = be.device().synchronize_stream(0);
  EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(st.message().find("stream 0: lm_head_loss: label 10"), std::string::npos)
      << st.message();
  EXPECT_EQ(be.device().synchronize_stream(0).code(), ErrorCode::kInvalidArgument);  // sticky
  EXPECT_EQ(be.device().synchronize_event(*after).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(be.device().fill_zero(*losses, 4, 0).code(),
            ErrorCode::kInvalidArgument);  // no more work on it
  auto b = be.device().create_stream();    // other streams go on
  ASSERT_TRUE(b.ok());
  EXPECT_OK(be.device().fill_zero(*losses, 4, *b));
  EXPECT_OK(be.device().synchronize_stream(*b));
}

// Freeing memory runs the queued work first, as cudaFree synchronises the device.
TEST(CpuBackendStrict, FreeingMemoryRunsTheWorkThatUsesIt) {
  CpuBackend be(strict_options());
  const std::vector<float> data = {1, 2, 3, 4};
  std::vector<float> back(4, 0.0f);
  auto dev = be.device().device_alloc(4 * sizeof(float));
  auto s = be.device().create_stream();
  ASSERT_TRUE(dev.ok() && s.ok());
  ASSERT_OK(be.device().copy_h2d(*dev, data.data(), 4 * sizeof(float), *s));
  ASSERT_OK(be.device().copy_d2h(back.data(), *dev, 4 * sizeof(float), *s));
  be.device().device_free(*dev);
  EXPECT_EQ(back, data);
}

// --- typed ops: the tensor references' checks (backend.cpp) -------------------------------------

TEST(TypedOps, WrongDtypeNamesTheOpAndTheArgument) {
  auto be = make_cpu_backend();
  std::vector<float> x(6, 1.0f), w(6, 1.0f), y(4);
  std::vector<uint16_t> x16(6);
  const Status st =
      be->linear_forward(f32(y.data(), {2, 2}), ConstTensor(x16.data(), DType::kBF16, {2, 3}),
                         f32(w.data(), {2, 3}), {}, 0);
  EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(st.message(), "linear_forward: x is BF16 [2, 3], expected F32 [2, 3]");
}

TEST(TypedOps, TransposedWeightIsAnError) {
  auto be = make_cpu_backend();
  std::vector<float> x(2 * 3, 1.0f), w(3 * 4, 1.0f), y(2 * 4);
  // y[2, 4] = x[2, 3] · W[4, 3]ᵀ, with W given as [3, 4].
  const Status st = be->linear_forward(f32(y.data(), {2, 4}), f32(x.data(), {2, 3}),
                                       f32(w.data(), {3, 4}), {}, 0);
  EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(st.message(), "linear_forward: w is F32 [3, 4], expected F32 [4, 3]");
}

TEST(TypedOps, SwappedQueryAndKeyAreAnError) {
  auto be = make_cpu_backend();
  const int b = 1, t = 4, hq = 4, hkv = 2, d = 8;
  std::vector<float> q(b * t * hq * d, 0.5f), k(b * t * hkv * d, 0.5f), v(k.size(), 0.5f),
      out(q.size()), lse(b * hq * t);
  const Shape qs{b, t, hq, d}, kvs{b, t, hkv, d};
  const Status st =
      be->attention_forward(f32(out.data(), qs), f32(lse.data(), {b, hq, t}), f32(k.data(), kvs),
                            f32(q.data(), qs), f32(v.data(), kvs), 0);
  EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(st.message().find("attention_forward: q is F32 [1, 4, 2, 8] and k F32 [1, 4, 4, 8]"),
            std::string::npos)
      << st.message();
}

TEST(TypedOps, MismatchedOutputShapeIsAnError) {
  auto be = make_cpu_backend();
  std::vector<float> x(2 * 8, 1.0f), w(8, 1.0f), out(2 * 8), rstd(3);
  const Status st = be->rmsnorm_forward(f32(out.data(), {2, 8}), f32(rstd.data(), {3}),
                                        f32(x.data(), {2, 8}), f32(w.data(), {8}), 1e-5f, 0);
  EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(st.message(), "rmsnorm_forward: rstd is F32 [3], expected F32 [2]");
}

TEST(TypedOps, AbsentOptionalArgumentsPass) {
  auto be = make_cpu_backend();
  std::vector<float> x(2 * 3, 1.0f), w(4 * 3, 0.5f), y(2 * 4);
  EXPECT_TRUE(
      be->linear_forward(f32(y.data(), {2, 4}), f32(x.data(), {2, 3}), f32(w.data(), {4, 3}), {}, 0)
          .ok());
  EXPECT_FLOAT_EQ(y[0], 1.5f);  // Σ over 3 of 1 · 0.5
}

// --- device and facts ----------------------------------------------------------------------------

TEST(CpuBackend, IsItsOwnDeviceOfOrdinalZero) {
  auto be = make_cpu_backend();
  Device& dev = be->device();
  EXPECT_EQ(dev.ordinal(), 0);
  EXPECT_EQ(dev.kind(), BackendKind::kCpu);
  EXPECT_EQ(dev.name(), "cpu");
  EXPECT_FALSE(dev.facts().gpu);
  EXPECT_EQ(be->facts().alignment, kDeviceAlignment);
}

TEST(BackendFacts, KindsNamesAndWorkspaces) {
  EXPECT_EQ(parse_backend_kind("cpu"), BackendKind::kCpu);
  EXPECT_EQ(parse_backend_kind("cuda"), BackendKind::kCuda);
  EXPECT_EQ(parse_backend_kind("auto"), std::nullopt);
  EXPECT_STREQ(backend_name(BackendKind::kCuda), "cuda");
  EXPECT_EQ(backend_facts(BackendKind::kCuda).act_dtype, DType::kBF16);
  EXPECT_TRUE(backend_facts(BackendKind::kCuda).gpu);
  EXPECT_EQ(backend_facts(BackendKind::kCpu).act_dtype, DType::kF32);
  // CUDA: cuBLASLt's 32 MiB, then the LM head's fp32 logits and bf16 dlogits (6 B per logit).
  OpShapes s;
  s.tokens = 8;
  s.vocab = 1000;
  s.lm_head_chunk = 8;
  EXPECT_EQ(workspace_bytes(BackendKind::kCuda, s),
            (size_t{32} << 20) + align_to_device(8 * 1000 * 4) + align_to_device(8 * 1000 * 2));
  // The CPU backend answers what the facts say without a device.
  auto be = make_cpu_backend();
  EXPECT_EQ(be->workspace_bytes(s), workspace_bytes(BackendKind::kCpu, s));
}

// cuDNN's attention backward (cuda/cudnn-attention.h) in the CUDA workspace: the chunk of
// sequences one call takes and its bytes, against the plan workspaces cuDNN 9.19 reported on an
// H200 (2026-11-28, attention-bench with SPILLWAY_LOG=debug): the estimate, with the softmax sum
// in front and the slack, must hold each, or the backward falls back to the module's kernel.
// cuDNN's attention backward takes no window narrower than the rows (a third of the module's
// kernel's pace there); the engine and the planner ask this one rule.
TEST(BackendFacts, CudnnBackwardTakesOnlyWindowsThatSpanTheRows) {
  EXPECT_TRUE(cuda::cudnn_attention_backward_takes_window(0, 2048));
  EXPECT_TRUE(cuda::cudnn_attention_backward_takes_window(2048, 2048));
  EXPECT_TRUE(cuda::cudnn_attention_backward_takes_window(4096, 2048));
  EXPECT_FALSE(cuda::cudnn_attention_backward_takes_window(2047, 2048));
  EXPECT_FALSE(cuda::cudnn_attention_backward_takes_window(512, 8192));
}

TEST(BackendFacts, CudnnAttentionWorkspaceHoldsWhatCudnnAsks) {
  using cuda::cudnn_attention_backward_bytes;
  using cuda::cudnn_attention_backward_chunk;
  struct Measured {
    int seq, hq, hkv, head_dim;
    size_t plan_bytes;  // CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE for one sequence
  };
  for (const Measured& m : {Measured{2048, 32, 32, 128, 268435712},  // llama2-7b
                            Measured{2048, 28, 4, 128, 264241408},   // qwen2.5-7b (GQA)
                            Measured{4096, 4, 1, 256, 150995200},    // gemma3-1b
                            Measured{300, 4, 2, 64, 1290496}}) {
    const size_t sum = align_to_device(size_t(m.hq) * m.seq * sizeof(float));
    EXPECT_GE(cudnn_attention_backward_bytes(m.seq, m.hq, m.hkv, m.head_dim) +
                  cuda::kCudnnAttentionSlackBytes,
              sum + m.plan_bytes)
        << m.seq << " " << m.hq << "/" << m.hkv << " " << m.head_dim;
  }
  // Heads cuDNN does not take: none.
  EXPECT_FALSE(cudnn_attention_backward_chunk(4, 256, 8, 4, 8).covered());
  EXPECT_FALSE(cudnn_attention_backward_chunk(4, 256, 8, 3, 64).covered());
  EXPECT_EQ(cuda::attention_backward_scratch_floats(8, 2048, 32, 32, 128, false),
            size_t{8} * 32 * 2048);
}

// How cuDNN's attention backward splits a micro-batch (cuda-workspace.h): whole sequences while
// one fits 1.5 GiB, then one sequence in chunks of whole GQA groups of query heads that fit, then
// one group up to 5 GiB; and the attention scratch reserves what one call of that chunk takes.
TEST(BackendFacts, CudnnBackwardRunsChunksOfSequencesOrHeads) {
  using cuda::cudnn_attention_backward_bytes;
  using cuda::cudnn_attention_backward_chunk;
  using cuda::cudnn_attention_backward_chunk_bytes;
  using cuda::CudnnBackwardChunk;
  struct Case {
    int batch, seq, hq, hkv;
    CudnnBackwardChunk want;
    size_t call_bytes;  // cudnn_attention_backward_bytes of one call, written out
  };
  constexpr size_t kGiB = size_t{1} << 30;
  // llama2-7b (32 heads of 128): the scores' gradient is t² bf16 a head (t a multiple of 128),
  // with t fp32 softmax sums a head.
  auto mha = [](size_t seqs, size_t heads, size_t t) {
    return seqs * (heads * t * t * 2 + align_to_device(heads * t * 4));
  };
  // qwen2.5-7b (28 query heads, 4 KV heads, groups of 7): and the per-query-head dK and dV.
  auto gqa = [](size_t heads, size_t t) {
    return heads * t * t * 2 + 2 * heads * t * 128 * 2 + align_to_device(heads * t * 4);
  };
  for (const Case& c : {
           Case{8, 2048, 32, 32, {4, 32}, mha(4, 32, 2048)},  // 1.07 GB: four sequences
           Case{6, 2048, 32, 8, {3, 32}, 3 * cudnn_attention_backward_bytes(2048, 32, 8, 128)},
           Case{2, 4096, 32, 32, {1, 32}, mha(1, 32, 4096)},  // 1.07 GB: one sequence
           Case{2, 8192, 32, 32, {1, 32}, mha(1, 32, 8192)},  // 4.3 GB a sequence: one, whole
           Case{1, 16384, 32, 32, {1, 8}, mha(1, 8, 16384)},  // 512 MiB a head: 8, up to 5 GiB
           Case{1, 32768, 32, 32, {1, 2}, mha(1, 2, 32768)},  // 2 GiB a head: 2
           Case{1, 65536, 32, 32, {}, 0},                     // 8 GiB a head: none
           Case{1, 8192, 28, 4, {1, 28}, gqa(28, 8192)},      // 3.9 GB a sequence: whole
           Case{1, 16384, 28, 4, {1, 7}, gqa(7, 16384)},      // 3.5 GiB a group: one
           Case{1, 32768, 28, 4, {}, 0},                      // 14 GiB a group: none
           Case{1,
                8190,
                32,
                32,
                {1, 32},
                mha(1, 32, 8192) - 32 * 8192 * 4 +
                    align_to_device(32 * 8190 * 4)},  // whole rows only
           Case{1, 16382, 32, 32, {}, 0},
       }) {
    SCOPED_TRACE(std::to_string(c.batch) + "x" + std::to_string(c.seq) + " " +
                 std::to_string(c.hq) + "/" + std::to_string(c.hkv));
    const CudnnBackwardChunk got = cudnn_attention_backward_chunk(c.batch, c.seq, c.hq, c.hkv, 128);
    EXPECT_EQ(got.sequences, c.want.sequences);
    EXPECT_EQ(got.heads, c.want.heads);
    EXPECT_EQ(got.covered(), c.call_bytes > 0);
    EXPECT_EQ(cudnn_attention_backward_chunk_bytes(got, c.seq, c.hq, c.hkv, 128), c.call_bytes);
    if (got.covered()) {  // whole groups, and sequences whole or one at a time
      EXPECT_EQ(c.hq % got.heads, 0);
      EXPECT_EQ(got.heads % (c.hq / c.hkv), 0);
      EXPECT_TRUE(got.heads == c.hq || got.sequences == 1);
    }
    // The scratch: one call's workspace, its slack and the ragged reserve, or the module's delta.
    const size_t fused = got.covered() ? c.call_bytes + cuda::kCudnnAttentionSlackBytes +
                                             cuda::cudnn_ragged_reserve_bytes(c.batch, c.seq, c.hq)
                                       : 0;
    const size_t delta = size_t(c.batch) * c.hq * c.seq * sizeof(float);
    EXPECT_EQ(cuda::attention_backward_scratch_floats(c.batch, c.seq, c.hq, c.hkv, 128, true) *
                  sizeof(float),
              std::max(fused, delta));
  }
  // llama2-7b from 8192 to 32768 reserves one call of 4.3 GB.
  for (int t : {8192, 16384, 32768})
    EXPECT_LT(cuda::attention_backward_scratch_floats(1, t, 32, 32, 128, true) * sizeof(float),
              5 * kGiB);
  // The order the backward falls back through where cuDNN's plan asks more than the estimate.
  using cuda::cudnn_attention_backward_next_chunk;
  auto next = [](CudnnBackwardChunk c, int batch, int seq, int hq, int hkv) {
    const CudnnBackwardChunk n = cudnn_attention_backward_next_chunk(c, batch, seq, hq, hkv);
    return std::pair{n.sequences, n.heads};
  };
  EXPECT_EQ(next({6, 32}, 6, 2048, 32, 32), std::pair(3, 32));
  EXPECT_EQ(next({3, 32}, 6, 2048, 32, 32), std::pair(2, 32));
  EXPECT_EQ(next({1, 32}, 6, 2048, 32, 32), std::pair(1, 16));
  EXPECT_EQ(next({1, 8}, 1, 8192, 32, 32), std::pair(1, 4));
  EXPECT_EQ(next({1, 1}, 1, 8192, 32, 32), std::pair(0, 0));
  EXPECT_EQ(next({1, 28}, 1, 8192, 28, 4), std::pair(1, 14));
  EXPECT_EQ(next({1, 14}, 1, 8192, 28, 4), std::pair(1, 7));
  EXPECT_EQ(next({1, 7}, 1, 8192, 28, 4), std::pair(0, 0));
  EXPECT_EQ(next({1, 32}, 1, 8190, 32, 32), std::pair(0, 0));
}

// Packed rows on cuDNN (cuda-workspace.h): the plans' buckets, the ragged index's layout, and a
// scratch that holds the packed backward of any examples at these shapes in chunks of one.
TEST(CudaWorkspace, RaggedBucketsAndScratch) {
  using namespace spillway::cuda;
  EXPECT_EQ(cudnn_ragged_examples_bucket(0), 0);
  EXPECT_EQ(cudnn_ragged_examples_bucket(1), 1);
  EXPECT_EQ(cudnn_ragged_examples_bucket(3), 4);
  EXPECT_EQ(cudnn_ragged_examples_bucket(16), 16);
  EXPECT_EQ(cudnn_ragged_examples_bucket(17), 32);
  // 64·2^k or 96·2^k, the least that holds the longest example, at most the row.
  const std::pair<int, int> lengths[] = {{1, 64},     {64, 64},     {65, 96},
                                         {96, 96},    {97, 128},    {700, 768},
                                         {900, 1024}, {1025, 1536}, {1600, 2048}};
  for (auto [longest, want] : lengths) {
    EXPECT_EQ(cudnn_ragged_length_bucket(longest, 8192), want) << longest;
  }
  EXPECT_EQ(cudnn_ragged_length_bucket(2000, 2048), 2048);
  EXPECT_EQ(cudnn_ragged_length_bucket(1100, 1200), 1200);
  EXPECT_EQ(cudnn_ragged_length_bucket(30, 40), 40);
  EXPECT_EQ(cudnn_ragged_length_bucket(0, 40), 0);
  // Four arrays of chunk + 1 int32s, each rounded up to 16 bytes.
  EXPECT_EQ(cudnn_ragged_chunk_index_ints(1), 16);
  EXPECT_EQ(cudnn_ragged_chunk_index_ints(3), 16);
  EXPECT_EQ(cudnn_ragged_chunk_index_ints(4), 32);
  EXPECT_EQ(cudnn_ragged_chunk_index_ints(16), 80);
  EXPECT_EQ(cudnn_ragged_index_bytes(16, 4), align_to_device(4 * 32 * 4));
  EXPECT_EQ(cudnn_ragged_index_bytes(0, 4), 0u);
  EXPECT_EQ(cudnn_ragged_stats_bytes(2, 32, 1024), align_to_device(2 * 32 * 1024 * 4));
  struct Heads {
    int batch, seq, hq, hkv, d;
  };
  for (const Heads& h : {Heads{4, 2048, 32, 32, 128}, Heads{1, 8192, 32, 8, 128},
                         Heads{2, 700, 4, 1, 256}, Heads{3, 100, 4, 2, 64}}) {
    SCOPED_TRACE(std::to_string(h.batch) + "x" + std::to_string(h.seq));
    const size_t scratch =
        attention_backward_scratch_floats(h.batch, h.seq, h.hq, h.hkv, h.d, true) * sizeof(float);
    const int most = cudnn_ragged_examples_bucket(h.batch * h.seq / kCudnnRaggedMinAverageLength);
    const size_t one_at_a_time = cudnn_ragged_index_bytes(most, 1) +
                                 cudnn_ragged_stats_bytes(1, h.hq, h.seq) +
                                 cudnn_attention_backward_bytes(h.seq, h.hq, h.hkv, h.d);
    EXPECT_GE(scratch, one_at_a_time + kCudnnAttentionSlackBytes);
    EXPECT_EQ(cudnn_ragged_reserve_bytes(h.batch, h.seq, h.hq),
              cudnn_ragged_index_bytes(most, 1) + cudnn_ragged_stats_bytes(1, h.hq, h.seq));
  }
  // Where the unpacked backward runs chunks of heads (llama2-7b at 16384: 8 heads a call), the
  // scratch holds a packed example of up to 8192 tokens with all its heads, not the next bucket.
  {
    const size_t scratch =
        attention_backward_scratch_floats(1, 16384, 32, 32, 128, true) * sizeof(float);
    const size_t index = cudnn_ragged_index_bytes(cudnn_ragged_examples_bucket(16384 / 16), 1);
    EXPECT_GE(scratch, index + cudnn_ragged_stats_bytes(1, 32, 8192) +
                           cudnn_attention_backward_bytes(8192, 32, 32, 128));
    EXPECT_LT(scratch, index + cudnn_ragged_stats_bytes(1, 32, 12288) +
                           cudnn_attention_backward_bytes(12288, 32, 32, 128));
  }
  // The ragged index the GPU builds (cudnn-ragged.cuh), as the host builds it: rows of 8 tokens
  // cut into examples of 3 and 5, then 1 and 7; q has 2 heads of 8 (16 elements a token), k/v one
  // (8); 8 sequences in chunks of 4, the second chunk's empty, at the end of the tokens.
  const std::vector<int32_t> positions = {0, 1, 2, 0, 1, 2, 3, 4, 0, 0, 1, 2, 3, 4, 5, 6};
  std::vector<int32_t> index(cudnn_ragged_index_bytes(8, 4) / 4, -1);
  ASSERT_EQ(cudnn_ragged_chunk_index_ints(4), 32);
  EXPECT_EQ(cudnn_ragged_index_host(positions.data(), 2, 8, 2, 1, 8, 8, 4, 8, index.data()), 4);
  auto array = [&](int c, int a, int n) {
    return std::vector<int32_t>(index.begin() + cudnn_ragged_slot(4, c, a, 0),
                                index.begin() + cudnn_ragged_slot(4, c, a, n));
  };
  EXPECT_EQ(array(0, 0, 4), (std::vector<int32_t>{3, 5, 1, 7}));            // lengths
  EXPECT_EQ(array(0, 1, 5), (std::vector<int32_t>{0, 48, 128, 144, 256}));  // q offsets
  EXPECT_EQ(array(0, 2, 5), (std::vector<int32_t>{0, 24, 64, 72, 128}));    // k/v offsets
  EXPECT_EQ(array(0, 3, 4), (std::vector<int32_t>{0, 3, 8, 9}));            // first tokens
  EXPECT_EQ(array(1, 0, 4), (std::vector<int32_t>{0, 0, 0, 0}));
  EXPECT_EQ(array(1, 1, 5), (std::vector<int32_t>(5, 256)));
  EXPECT_EQ(array(1, 2, 5), (std::vector<int32_t>(5, 128)));
  EXPECT_EQ(array(1, 3, 4), (std::vector<int32_t>(4, 16)));
  // Sequences longer than the plan's are cut to it (the kernel reports them).
  EXPECT_EQ(cudnn_ragged_index_host(positions.data(), 2, 8, 2, 1, 8, 8, 4, 4, index.data()), 4);
  EXPECT_EQ(array(0, 0, 4), (std::vector<int32_t>{3, 4, 1, 4}));
  // Heads cuDNN does not take reserve nothing for it.
  EXPECT_EQ(attention_backward_scratch_floats(2, 64, 4, 4, 8, true), size_t{2} * 4 * 64);
}

}  // namespace
}  // namespace spillway::compute
