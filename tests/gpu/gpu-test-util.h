// Helpers for the GPU tests (CTest label `gpu`): the CUDA backend or a skip, and one "side" of a
// CUDA-against-CPU comparison, which takes and gives fp32 host vectors whatever the backend's
// activation dtype, so one test body runs on both backends.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "compute/backend-loader.h"
#include "compute/backend.h"
#include "core/dtype.h"

namespace spillway::gpu_testing {

using compute::Backend;

#define EXPECT_OK(expr)                                      \
  do {                                                       \
    const ::spillway::Status s_ = (expr);                    \
    EXPECT_TRUE(s_.ok()) << #expr << ": " << s_.to_string(); \
  } while (0)

#define ASSERT_OK(expr)                                      \
  do {                                                       \
    const ::spillway::Status s_ = (expr);                    \
    ASSERT_TRUE(s_.ok()) << #expr << ": " << s_.to_string(); \
  } while (0)

// The values a bf16 tensor holds: inputs go to both backends already rounded, so a comparison
// measures the op, not the rounding of its inputs.
inline std::vector<float> bf16_rounded(std::vector<float> v) {
  for (float& x : v) x = bf16_to_f32(f32_to_bf16(x));
  return v;
}

// ‖a − ref‖ / ‖ref‖ in double (‖a − ref‖ when ref is zero; infinity on a size mismatch).
inline double rel_l2(const std::vector<float>& a, const std::vector<float>& ref) {
  if (a.size() != ref.size()) return INFINITY;
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = double(a[i]) - ref[i];
    num += d * d;
    den += double(ref[i]) * ref[i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

inline bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// One backend's part of a test: device buffers that live as long as the side, the workspace for
// `shapes`, and fp32 host vectors in and out. Work runs on stream 0; the readers synchronise it.
// A failed call is a test failure (ADD_FAILURE) and yields a null pointer or an empty vector,
// which the next op rejects.
class Side {
 public:
  Side(Backend& backend, const compute::OpShapes& shapes) : be_(backend) {
    const size_t bytes = be_.workspace_bytes(shapes);
    if (void* ws = alloc(bytes)) check(be_.set_workspace(ws, bytes, shapes), "set_workspace");
  }
  ~Side() {
    check(be_.device().synchronize_stream(0), "synchronize_stream");
    for (void* p : allocs_) be_.device().device_free(p);
  }
  Side(const Side&) = delete;
  Side& operator=(const Side&) = delete;

  Backend& be() { return be_; }

  void* alloc(size_t bytes) {
    auto p = be_.device().device_alloc(bytes);
    if (!p.ok()) {
      ADD_FAILURE() << "device_alloc(" << bytes << "): " << p.status().to_string();
      return nullptr;
    }
    allocs_.push_back(*p);
    return *p;
  }
  // act_dtype() copy of `v` (the CUDA backend converts on the device, as the trainer does).
  void* act(const std::vector<float>& v) {
    float* f = f32(v);
    if (be_.act_dtype() == DType::kF32) return f;
    void* a = alloc(v.size() * dtype_size(be_.act_dtype()));
    check(be_.device().convert(a, be_.act_dtype(), f, DType::kF32, v.size(), 0), "convert");
    return a;
  }
  void* act_zeros(size_t n) { return zeros(n * dtype_size(be_.act_dtype())); }
  float* f32(const std::vector<float>& v) {
    return static_cast<float*>(upload(v.data(), v.size() * 4));
  }
  float* f32_zeros(size_t n) { return static_cast<float*>(zeros(n * 4)); }
  int32_t* i32(const std::vector<int32_t>& v) {
    return static_cast<int32_t*>(upload(v.data(), v.size() * 4));
  }

  std::vector<float> get_act(const void* p, size_t n) {
    if (be_.act_dtype() == DType::kF32) return get_f32(static_cast<const float*>(p), n);
    float* f = static_cast<float*>(alloc(n * 4));
    check(be_.device().convert(f, DType::kF32, p, be_.act_dtype(), n, 0), "convert");
    return get_f32(f, n);
  }
  std::vector<float> get_f32(const float* p, size_t n) {
    std::vector<float> v(n);
    check(be_.device().copy_d2h(v.data(), p, n * 4, 0), "copy_d2h");
    if (!check(be_.device().synchronize_stream(0), "synchronize_stream")) return {};
    return v;
  }

 private:
  bool check(const Status& s, const char* what) {
    if (!s.ok()) ADD_FAILURE() << be_.name() << " " << what << ": " << s.to_string();
    return s.ok();
  }
  void* upload(const void* src, size_t bytes) {
    void* p = alloc(bytes);
    // Synchronised at once: `src` may be a temporary, and a stream may hold a copy until waited on.
    if (p && check(be_.device().copy_h2d(p, src, bytes, 0), "copy_h2d"))
      check(be_.device().synchronize_stream(0), "synchronize");
    return p;
  }
  void* zeros(size_t bytes) {
    void* p = alloc(bytes);
    if (p) check(be_.device().fill_zero(p, bytes, 0), "fill_zero");
    return p;
  }

  Backend& be_;
  std::vector<void*> allocs_;
};

}  // namespace spillway::gpu_testing
