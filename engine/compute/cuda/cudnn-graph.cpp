#include "compute/cuda/cudnn-graph.h"

#if SPILLWAY_HAVE_CUDNN

#include <dlfcn.h>

#include <cstdlib>
#include <mutex>
#include <utility>

namespace spillway::cuda {

std::string CudnnApi::error(cudnnStatus_t s, const std::string& what) const {
  std::string out = what + " failed: " + error_string(s);
  char last[512] = {};
  last_error(last, sizeof last);
  if (last[0]) out += " (" + std::string(last) + ")";
  return out;
}

Result<const CudnnApi*> load_cudnn(size_t min_version) {
  static CudnnApi api;
  static std::string error;
  static std::once_flag once;
  std::call_once(once, [] {
    const char* env = std::getenv("SPILLWAY_CUDNN_LIBRARY");
    const std::string path = env && *env ? env : "libcudnn.so.9";
    void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);  // never closed, as the module
    if (!lib) {
      error = "cuDNN (" + path + ") could not be opened: " + dlerror() +
              "; install cuDNN 9 (Debian: nvidia-cudnn; NVIDIA: libcudnn9-cuda-12), or point "
              "SPILLWAY_CUDNN_LIBRARY at libcudnn.so.9";
      return;
    }
    bool all = true;
    auto sym = [&](auto& fn, const char* name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, name));
      all = all && fn != nullptr;
    };
    sym(api.get_version, "cudnnGetVersion");
    sym(api.error_string, "cudnnGetErrorString");
    sym(api.last_error, "cudnnGetLastErrorString");
    sym(api.create, "cudnnCreate");
    sym(api.destroy, "cudnnDestroy");
    sym(api.set_stream, "cudnnSetStream");
    sym(api.create_descriptor, "cudnnBackendCreateDescriptor");
    sym(api.destroy_descriptor, "cudnnBackendDestroyDescriptor");
    sym(api.set_attribute, "cudnnBackendSetAttribute");
    sym(api.get_attribute, "cudnnBackendGetAttribute");
    sym(api.finalize, "cudnnBackendFinalize");
    sym(api.execute, "cudnnBackendExecute");
    if (!all) {
      error = path + " lacks functions of cuDNN 9's graph API: install cuDNN 9";
      return;
    }
    api.version = api.get_version();
  });
  if (!error.empty()) return unsupported(error);
  if (api.version < min_version) {
    return unsupported("cuDNN " + std::to_string(api.version) + " is older than the " +
                       std::to_string(min_version) + " this build needs");
  }
  return &api;
}

// --- CudnnDesc -----------------------------------------------------------------------------------

CudnnDesc::CudnnDesc(const CudnnApi* api, cudnnBackendDescriptorType_t type) : api_(api) {
  const cudnnStatus_t s = api_->create_descriptor(type, &desc_);
  if (s != CUDNN_STATUS_SUCCESS) {
    desc_ = nullptr;
    status_ = internal_error(
        api_->error(s, "cudnnBackendCreateDescriptor(" + std::to_string(type) + ")"));
  }
}

CudnnDesc::~CudnnDesc() {
  if (desc_) api_->destroy_descriptor(desc_);
}

CudnnDesc::CudnnDesc(CudnnDesc&& o) noexcept
    : api_(o.api_), desc_(std::exchange(o.desc_, nullptr)), status_(std::move(o.status_)) {}

CudnnDesc& CudnnDesc::operator=(CudnnDesc&& o) noexcept {
  if (this != &o) {
    if (desc_) api_->destroy_descriptor(desc_);
    api_ = o.api_;
    desc_ = std::exchange(o.desc_, nullptr);
    status_ = std::move(o.status_);
  }
  return *this;
}

CudnnDesc& CudnnDesc::set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type,
                          int64_t count, const void* values) {
  if (!status_.ok() || desc_ == nullptr) return *this;
  const cudnnStatus_t s = api_->set_attribute(desc_, name, type, count, values);
  if (s != CUDNN_STATUS_SUCCESS) {
    status_ = internal_error(api_->error(s, "setting attribute " + std::to_string(name)));
  }
  return *this;
}

CudnnDesc& CudnnDesc::set_i64(cudnnBackendAttributeName_t name,
                              std::initializer_list<int64_t> values) {
  return set(name, CUDNN_TYPE_INT64, static_cast<int64_t>(values.size()), values.begin());
}

CudnnDesc& CudnnDesc::set_desc(cudnnBackendAttributeName_t name, const CudnnDesc& d) {
  if (!d.status_.ok() && status_.ok()) status_ = d.status_;
  const cudnnBackendDescriptor_t raw = d.get();
  return set(name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &raw);
}

Status CudnnDesc::finalize() {
  if (!status_.ok()) return status_;
  const cudnnStatus_t s = api_->finalize(desc_);
  if (s != CUDNN_STATUS_SUCCESS) status_ = internal_error(api_->error(s, "cudnnBackendFinalize"));
  return status_;
}

// --- CudnnGraph ----------------------------------------------------------------------------------

namespace {

// cuDNN wants 16-byte aligned tensors for its fused kernels; the engine's arena and workspace
// hand out 256-byte aligned ones.
constexpr int64_t kTensorAlignment = 16;

}  // namespace

int CudnnGraph::add_tensor(int64_t uid, std::initializer_list<int64_t> dims,
                           std::initializer_list<int64_t> strides, cudnnDataType_t type,
                           bool is_virtual, bool by_value, int ragged) {
  CudnnDesc t(api_, CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  const bool yes = true;
  t.set_value(CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, type)
      .set(CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, static_cast<int64_t>(dims.size()),
           dims.begin())
      .set(CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, static_cast<int64_t>(strides.size()),
           strides.begin())
      .set_value(CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, uid)
      .set_value(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, kTensorAlignment);
  if (is_virtual) t.set_value(CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, yes);
  if (by_value) t.set_value(CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, yes);
  if (ragged >= 0) t.set_desc(CUDNN_ATTR_TENSOR_RAGGED_OFFSET_DESC, tensors_[ragged]);
  t.seal();
  tensors_.push_back(std::move(t));
  return static_cast<int>(tensors_.size()) - 1;
}

int CudnnGraph::tensor(int64_t uid, std::initializer_list<int64_t> dims,
                       std::initializer_list<int64_t> strides, cudnnDataType_t type, int ragged) {
  return add_tensor(uid, dims, strides, type, /*is_virtual=*/false, /*by_value=*/false, ragged);
}

int CudnnGraph::virtual_tensor(std::initializer_list<int64_t> dims,
                               std::initializer_list<int64_t> strides, cudnnDataType_t type,
                               int ragged) {
  return add_tensor(next_virtual_uid_++, dims, strides, type, /*is_virtual=*/true,
                    /*by_value=*/false, ragged);
}

int CudnnGraph::scalar(int64_t uid, cudnnDataType_t type) {
  return add_tensor(uid, {1, 1, 1, 1}, {1, 1, 1, 1}, type, /*is_virtual=*/false,
                    /*by_value=*/true, -1);
}

CudnnDesc& CudnnGraph::op(cudnnBackendDescriptorType_t type) {
  ops_.emplace_back(api_, type);
  return ops_.back();
}

void CudnnGraph::matmul(int a, int b, int c, int m, int n, int k) {
  CudnnDesc& d = op_descs_.emplace_back(api_, CUDNN_BACKEND_MATMUL_DESCRIPTOR);
  d.set_value(CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, CUDNN_DATA_FLOAT).seal();
  CudnnDesc& o = op(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
  o.set_desc(CUDNN_ATTR_OPERATION_MATMUL_ADESC, tensors_[a])
      .set_desc(CUDNN_ATTR_OPERATION_MATMUL_BDESC, tensors_[b])
      .set_desc(CUDNN_ATTR_OPERATION_MATMUL_CDESC, tensors_[c])
      .set_desc(CUDNN_ATTR_OPERATION_MATMUL_DESC, d);
  if (m >= 0) o.set_desc(CUDNN_ATTR_OPERATION_MATMUL_GEMM_M_OVERRIDE_DESC, tensors_[m]);
  if (n >= 0) o.set_desc(CUDNN_ATTR_OPERATION_MATMUL_GEMM_N_OVERRIDE_DESC, tensors_[n]);
  if (k >= 0) o.set_desc(CUDNN_ATTR_OPERATION_MATMUL_GEMM_K_OVERRIDE_DESC, tensors_[k]);
  o.seal();
}

CudnnDesc& CudnnGraph::pointwise_desc(cudnnPointwiseMode_t mode, cudnnDataType_t prec) {
  CudnnDesc& p = op_descs_.emplace_back(api_, CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
  p.set_value(CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, mode)
      .set_value(CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, prec);
  return p;
}

void CudnnGraph::pointwise(cudnnPointwiseMode_t mode, int x, int y, int out, cudnnDataType_t prec) {
  CudnnDesc& p = pointwise_desc(mode, prec);
  p.seal();
  CudnnDesc& o = op(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
  o.set_desc(CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, p)
      .set_desc(CUDNN_ATTR_OPERATION_POINTWISE_XDESC, tensors_[x]);
  if (y >= 0) o.set_desc(CUDNN_ATTR_OPERATION_POINTWISE_BDESC, tensors_[y]);
  o.set_desc(CUDNN_ATTR_OPERATION_POINTWISE_YDESC, tensors_[out]).seal();
}

void CudnnGraph::select(int x, int y, int cond, int out) {
  CudnnDesc& p = pointwise_desc(CUDNN_POINTWISE_BINARY_SELECT, CUDNN_DATA_FLOAT);
  p.seal();
  op(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR)
      .set_desc(CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, p)
      .set_desc(CUDNN_ATTR_OPERATION_POINTWISE_XDESC, tensors_[x])
      .set_desc(CUDNN_ATTR_OPERATION_POINTWISE_BDESC, tensors_[y])
      .set_desc(CUDNN_ATTR_OPERATION_POINTWISE_TDESC, tensors_[cond])
      .set_desc(CUDNN_ATTR_OPERATION_POINTWISE_YDESC, tensors_[out])
      .seal();
}

void CudnnGraph::gen_index(int x, int axis, int out, cudnnDataType_t prec) {
  const int64_t ax = axis;
  CudnnDesc& p = pointwise_desc(CUDNN_POINTWISE_GEN_INDEX, prec);
  p.set_value(CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, ax).seal();
  op(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR)
      .set_desc(CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, p)
      .set_desc(CUDNN_ATTR_OPERATION_POINTWISE_XDESC, tensors_[x])
      .set_desc(CUDNN_ATTR_OPERATION_POINTWISE_YDESC, tensors_[out])
      .seal();
}

void CudnnGraph::reduce(cudnnReduceTensorOp_t reduce_op, int x, int out) {
  CudnnDesc& r = op_descs_.emplace_back(api_, CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
  r.set_value(CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, reduce_op)
      .set_value(CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, CUDNN_DATA_FLOAT)
      .seal();
  op(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR)
      .set_desc(CUDNN_ATTR_OPERATION_REDUCTION_DESC, r)
      .set_desc(CUDNN_ATTR_OPERATION_REDUCTION_XDESC, tensors_[x])
      .set_desc(CUDNN_ATTR_OPERATION_REDUCTION_YDESC, tensors_[out])
      .seal();
}

void CudnnGraph::reshape(int x, int out) {
  op(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR)
      .set_desc(CUDNN_ATTR_OPERATION_RESHAPE_XDESC, tensors_[x])
      .set_desc(CUDNN_ATTR_OPERATION_RESHAPE_YDESC, tensors_[out])
      .seal();
}

Status CudnnGraph::status() const {
  for (const CudnnDesc& d : tensors_) SPW_RETURN_IF_ERROR(d.status());
  for (const CudnnDesc& d : op_descs_) SPW_RETURN_IF_ERROR(d.status());
  for (const CudnnDesc& d : ops_) SPW_RETURN_IF_ERROR(d.status());
  return Status::ok_status();
}

Status CudnnGraph::build(cudnnHandle_t handle,
                         std::initializer_list<cudnnBackendNumericalNote_t> avoid) {
  SPW_RETURN_IF_ERROR(status());
  std::vector<cudnnBackendDescriptor_t> raw_ops;
  for (const CudnnDesc& d : ops_) raw_ops.push_back(d.get());
  CudnnDesc graph(api_, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  graph.set_value(CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, handle)
      .set(CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
           static_cast<int64_t>(raw_ops.size()), raw_ops.data());
  SPW_RETURN_IF_ERROR(graph.finalize());

  CudnnDesc heur(api_, CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
  heur.set_desc(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph)
      .set_value(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, CUDNN_HEUR_MODE_A);
  SPW_RETURN_IF_ERROR(heur.finalize());
  int64_t count = 0;
  cudnnStatus_t s = api_->get_attribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                        CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, nullptr);
  if (s != CUDNN_STATUS_SUCCESS) return internal_error(api_->error(s, "engine heuristics"));
  if (count == 0) {
    return unsupported("cuDNN has no engine for this graph (" + api_->error(s, "heuristics") + ")");
  }
  std::vector<CudnnDesc> configs;
  std::vector<cudnnBackendDescriptor_t> raw_configs;
  for (int64_t i = 0; i < count; ++i) {
    configs.emplace_back(api_, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
    SPW_RETURN_IF_ERROR(configs.back().status());
    raw_configs.push_back(configs.back().get());
  }
  s = api_->get_attribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                          count, &count, raw_configs.data());
  if (s != CUDNN_STATUS_SUCCESS) return internal_error(api_->error(s, "engine heuristics"));

  std::string first_reason;
  for (int64_t i = 0; i < count; ++i) {
    // The engine behind the configuration: its numerical notes and global index.
    CudnnDesc engine(api_, CUDNN_BACKEND_ENGINE_DESCRIPTOR);
    cudnnBackendDescriptor_t raw_engine = engine.get();
    int64_t n = 0;
    s = api_->get_attribute(raw_configs[i], CUDNN_ATTR_ENGINECFG_ENGINE,
                            CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, &raw_engine);
    if (s != CUDNN_STATUS_SUCCESS) continue;
    cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
    int64_t note_count = 0;
    api_->get_attribute(raw_engine, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                        CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &note_count, notes);
    bool skip = false;
    for (int64_t j = 0; j < note_count; ++j) {
      for (cudnnBackendNumericalNote_t a : avoid) skip = skip || notes[j] == a;
    }
    if (skip) {
      if (first_reason.empty())
        first_reason = "engine " + std::to_string(i) + " has an avoided note";
      continue;
    }
    int64_t index = -1;
    api_->get_attribute(raw_engine, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &n,
                        &index);
    CudnnDesc plan(api_, CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
    plan.set_value(CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, handle)
        .set(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
             &raw_configs[i]);
    if (Status st = plan.finalize(); !st.ok()) {
      if (first_reason.empty()) first_reason = st.message();
      continue;
    }
    int64_t ws = 0;
    s = api_->get_attribute(plan.get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64,
                            1, &n, &ws);
    if (s != CUDNN_STATUS_SUCCESS) return internal_error(api_->error(s, "plan workspace size"));
    plan_ = std::move(plan);
    workspace_bytes_ = ws;
    engine_index_ = index;
    return Status::ok_status();
  }
  return unsupported("none of cuDNN's " + std::to_string(count) +
                     " engines for this graph builds a plan: " + first_reason);
}

Status CudnnGraph::execute(cudnnHandle_t handle, const std::vector<int64_t>& uids,
                           const std::vector<void*>& pointers, void* workspace) const {
  CudnnDesc pack(api_, CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  pack.set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, static_cast<int64_t>(uids.size()),
           uids.data())
      .set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR,
           static_cast<int64_t>(pointers.size()), pointers.data())
      .set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace);
  SPW_RETURN_IF_ERROR(pack.finalize());
  const cudnnStatus_t s = api_->execute(handle, plan_.get(), pack.get());
  if (s != CUDNN_STATUS_SUCCESS) return internal_error(api_->error(s, "cudnnBackendExecute"));
  return Status::ok_status();
}

}  // namespace spillway::cuda

#endif  // SPILLWAY_HAVE_CUDNN
