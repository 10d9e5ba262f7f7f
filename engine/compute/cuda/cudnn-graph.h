// cuDNN's graph API (the backend API of cudnn_graph.h), opened at run time: the library, a handle
// per GPU, and a small builder of operation graphs and their execution plans. Only the fused
// attention of cudnn-attention.h uses it; cudnn-frontend (the C++ layer NVIDIA writes over this
// API) is not a Debian package, so the graphs are built here on the C API directly.
//
// The library: libcudnn.so.9 (Debian's nvidia-cudnn, NVIDIA's libcudnn9-cuda-*, or pip's
// nvidia-cudnn-cu*), or SPILLWAY_CUDNN_LIBRARY. It is opened once per process and never closed,
// as the module. Without it every user of this file falls back to its own kernels: cuDNN is an
// accelerator here, never a requirement.
//
// Errors: kUnsupported when the library is missing or too old (it names what to install);
// kInternal naming the call, the status and cuDNN's last error message otherwise.
// Thread-safety: load_cudnn is; a CudnnHandle and the descriptors are used by one thread.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "core/status.h"

#if SPILLWAY_HAVE_CUDNN
#include <cudnn_graph.h>
#endif

namespace spillway::cuda {

#if SPILLWAY_HAVE_CUDNN

// The cuDNN functions this module calls, from the library opened at run time.
struct CudnnApi {
  decltype(&cudnnGetVersion) get_version = nullptr;
  decltype(&cudnnGetErrorString) error_string = nullptr;
  decltype(&cudnnGetLastErrorString) last_error = nullptr;
  decltype(&cudnnCreate) create = nullptr;
  decltype(&cudnnDestroy) destroy = nullptr;
  decltype(&cudnnSetStream) set_stream = nullptr;
  decltype(&cudnnBackendCreateDescriptor) create_descriptor = nullptr;
  decltype(&cudnnBackendDestroyDescriptor) destroy_descriptor = nullptr;
  decltype(&cudnnBackendSetAttribute) set_attribute = nullptr;
  decltype(&cudnnBackendGetAttribute) get_attribute = nullptr;
  decltype(&cudnnBackendFinalize) finalize = nullptr;
  decltype(&cudnnBackendExecute) execute = nullptr;
  size_t version = 0;  // cudnnGetVersion: major·10000 + minor·100 + patch

  // "what failed: STATUS (cuDNN's last error message)".
  std::string error(cudnnStatus_t s, const std::string& what) const;
};

// The library, opened on the first call; kUnsupported (with what to install) when it is missing,
// older than `min_version`.
Result<const CudnnApi*> load_cudnn(size_t min_version);

// One backend descriptor, destroyed with the object. Setters record the first failure, which
// finalize() (or status()) returns, so a graph reads as a list of set() calls.
class CudnnDesc {
 public:
  CudnnDesc() = default;
  CudnnDesc(const CudnnApi* api, cudnnBackendDescriptorType_t type);
  ~CudnnDesc();
  CudnnDesc(CudnnDesc&& o) noexcept;
  CudnnDesc& operator=(CudnnDesc&& o) noexcept;
  CudnnDesc(const CudnnDesc&) = delete;
  CudnnDesc& operator=(const CudnnDesc&) = delete;

  cudnnBackendDescriptor_t get() const { return desc_; }
  // `count` values of `type` at `values`.
  CudnnDesc& set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, int64_t count,
                 const void* values);
  CudnnDesc& set_i64(cudnnBackendAttributeName_t name, std::initializer_list<int64_t> values);
  CudnnDesc& set_desc(cudnnBackendAttributeName_t name, const CudnnDesc& d);
  template <class T>
  CudnnDesc& set_value(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type,
                       const T& value) {
    return set(name, type, 1, &value);
  }
  Status finalize();
  // finalize() for a descriptor of a graph: a failure stays in status(), which the graph reports.
  void seal() { (void)finalize(); }
  const Status& status() const { return status_; }

 private:
  const CudnnApi* api_ = nullptr;
  cudnnBackendDescriptor_t desc_ = nullptr;
  Status status_;
};

// A graph of cuDNN operations over 4-D tensors, built once per shape and run many times.
class CudnnGraph {
 public:
  explicit CudnnGraph(const CudnnApi* api) : api_(api) {}

  // A tensor the caller binds a pointer to at run time (`uid` names it in execute()), or one of
  // the graph's intermediates (virtual: cuDNN keeps it on chip), or a scalar passed by value (a
  // host float bound at execute()). Returns its index for the operation builders. `ragged`: the
  // index of an int32 tensor [batch + 1, 1, 1, 1] of each batch entry's first element (ragged
  // sequences packed one after another: dim 0's stride is then not used), or -1.
  int tensor(int64_t uid, std::initializer_list<int64_t> dims,
             std::initializer_list<int64_t> strides, cudnnDataType_t type, int ragged = -1);
  int virtual_tensor(std::initializer_list<int64_t> dims, std::initializer_list<int64_t> strides,
                     cudnnDataType_t type, int ragged = -1);
  int scalar(int64_t uid, cudnnDataType_t type);

  // The operations, each out = f(inputs), computed in fp32 unless `prec` says otherwise.
  // matmul: c = a·b per batch entry; m, n, k: int32 tensors [batch, 1, 1, 1] of each entry's
  // actual rows of a, columns of b and inner size (sequences shorter than the dims), or -1.
  void matmul(int a, int b, int c, int m = -1, int n = -1, int k = -1);
  // y -1 for unary modes; comparisons compute in CUDNN_DATA_BOOLEAN.
  void pointwise(cudnnPointwiseMode_t mode, int x, int y, int out,
                 cudnnDataType_t prec = CUDNN_DATA_FLOAT);
  // out = cond ? x : y (CUDNN_POINTWISE_BINARY_SELECT).
  void select(int x, int y, int cond, int out);
  // out = the index of each element along `axis` (0..3) of x's shape.
  void gen_index(int x, int axis, int out, cudnnDataType_t prec);
  // out = x summed (or its maximum taken) over the dims where out has size 1, or over groups of
  // consecutive indices where out's dim divides x's.
  void reduce(cudnnReduceTensorOp_t op, int x, int out);
  // out = x seen with out's dims and strides (a transposed view).
  void reshape(int x, int out);

  // Finalizes the graph on `handle` and takes the first engine configuration that the heuristics
  // rank and that can build a plan, skipping those whose numerical notes include any of `avoid`
  // (cuDNN's run-time compiled engines take seconds at the first call: they are allowed).
  // kUnsupported when none does, with cuDNN's reason for the first that failed.
  Status build(cudnnHandle_t handle, std::initializer_list<cudnnBackendNumericalNote_t> avoid);
  bool built() const { return plan_.get() != nullptr; }
  int64_t workspace_bytes() const { return workspace_bytes_; }
  // The engine the plan runs (its global index), for logs and benchmarks.
  int64_t engine_index() const { return engine_index_; }

  // Runs the plan on the handle's stream with `uids[i]` bound to `pointers[i]` (device memory,
  // or a host float for a by-value scalar) and `workspace` of at least workspace_bytes().
  Status execute(cudnnHandle_t handle, const std::vector<int64_t>& uids,
                 const std::vector<void*>& pointers, void* workspace) const;

 private:
  CudnnDesc& op(cudnnBackendDescriptorType_t type);
  // A pointwise descriptor of `mode` computing in `prec`, not yet sealed (GEN_INDEX adds its axis).
  CudnnDesc& pointwise_desc(cudnnPointwiseMode_t mode, cudnnDataType_t prec);
  int add_tensor(int64_t uid, std::initializer_list<int64_t> dims,
                 std::initializer_list<int64_t> strides, cudnnDataType_t type, bool is_virtual,
                 bool by_value, int ragged);
  Status status() const;

  const CudnnApi* api_;
  std::vector<CudnnDesc> tensors_;
  std::vector<CudnnDesc> ops_;
  std::vector<CudnnDesc> op_descs_;  // the matmul/pointwise/reduction descriptors the ops use
  int64_t next_virtual_uid_ = int64_t{1} << 40;
  CudnnDesc plan_;
  int64_t workspace_bytes_ = 0;
  int64_t engine_index_ = -1;
};

#endif  // SPILLWAY_HAVE_CUDNN

}  // namespace spillway::cuda
