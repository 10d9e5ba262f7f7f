// make_backend: the CPU backend directly, the CUDA backend through dlopen of libspillway-cuda.so.
#include "compute/backend-loader.h"

#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

namespace spillway::compute {

namespace {

namespace fs = std::filesystem;

constexpr const char* kModuleFile = "libspillway-cuda.so";

// Whether the running executable lies inside the build tree (the tests live in its subfolders),
// rather than installed.
bool running_in_build_tree() {
#ifdef SPILLWAY_BUILD_DIR
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return false;
  const fs::path build_dir = fs::path(SPILLWAY_BUILD_DIR).lexically_normal();
  const fs::path rel = exe.lexically_normal().lexically_relative(build_dir);
  return !rel.empty() && *rel.begin() != "..";
#else
  return false;
#endif
}

// Where the module may be, in the order of backend-loader.h (without the environment variable).
std::vector<fs::path> module_candidates() {
  std::vector<fs::path> paths;
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    paths.push_back(exe.parent_path() / kModuleFile);
    // The installed layout: <prefix>/bin/spillway-worker and <prefix>/<libdir>/spillway/ (the
    // libdir of GNUInstallDirs, e.g. lib/x86_64-linux-gnu), relative so the tree can be moved.
    paths.push_back((exe.parent_path() / ".." / SPILLWAY_INSTALL_LIBDIR / "spillway" / kModuleFile)
                        .lexically_normal());
  }
#ifdef SPILLWAY_CUDA_MODULE_BUILD_PATH
  // Only for executables of the build tree: an installed worker on a machine that also has a build
  // tree must not load that tree's module, of another version.
  if (running_in_build_tree()) paths.push_back(SPILLWAY_CUDA_MODULE_BUILD_PATH);
#endif
  return paths;
}

// A dlopen failure in words: a missing CUDA library is the common case, and its soname says which
// CUDA major version to install.
std::string describe_dlopen_error(const std::string& path, const std::string& err) {
  const std::string marker = ": cannot open shared object file";
  if (const size_t at = err.find(marker); at != std::string::npos) {
    const std::string missing = err.substr(0, at);
    if (missing != path) {
      std::string cuda = "CUDA";
      if (const size_t so = missing.rfind(".so."); so != std::string::npos) {
        const std::string major = missing.substr(so + 4, missing.find('.', so + 4) - (so + 4));
        if (!major.empty() && major.find_first_not_of("0123456789") == std::string::npos)
          cuda += " " + major;
      }
      return missing + " not found (needed by " + path + "): install the " + cuda +
             " runtime libraries or use backend cpu";
    }
  }
  return "could not load " + path + " (" + err +
         "): rebuild it with this version of Spillway or use backend cpu";
}

// Opens the module and finds its entry point. The handle is never closed: backends it made must
// not outlive it, and dlopen of an already loaded module only counts a reference.
struct Module {
  CudaBackendCreateFn create = nullptr;
  CudaDeviceCountFn device_count = nullptr;
};

Result<Module> load_module() {
  std::error_code ec;
  fs::path path;
  if (const char* env = std::getenv("SPILLWAY_CUDA_BACKEND"); env && *env) {
    // An explicit path is the only one tried: silently loading another module would hide the
    // mistake.
    path = env;
    if (!fs::is_regular_file(path, ec)) {
      return unsupported(std::string("SPILLWAY_CUDA_BACKEND=") + env +
                         " is not a file: point it at libspillway-cuda.so or unset it");
    }
  } else {
    std::string looked;
    for (const fs::path& p : module_candidates()) {
      if (fs::is_regular_file(p, ec)) {
        path = p;
        break;
      }
      looked += (looked.empty() ? "" : ", ") + p.string();
    }
    if (path.empty()) {
#ifdef SPILLWAY_CUDA_MODULE_BUILD_PATH
      const char* fix = running_in_build_tree()
                            ? "build the spillway_cuda target or set SPILLWAY_CUDA_BACKEND"
                            : "install the spillway-cuda package or set SPILLWAY_CUDA_BACKEND";
#else
      const char* fix = "build Spillway with -DSPILLWAY_CUDA=ON or set SPILLWAY_CUDA_BACKEND";
#endif
      return unsupported(std::string("no CUDA backend module (") + kModuleFile +
                         " not found: looked at " + looked + "): " + fix);
    }
  }
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* err = dlerror();
    return unsupported(describe_dlopen_error(path.string(), err ? err : "unknown dlopen error"));
  }
  void* entry = dlsym(handle, kCudaBackendEntry);
  void* count = dlsym(handle, kCudaDeviceCountEntry);
  if (entry == nullptr || count == nullptr) {
    return unsupported(path.string() + " is not a Spillway CUDA backend module of this version " +
                       "(it lacks " + (entry ? kCudaDeviceCountEntry : kCudaBackendEntry) +
                       "): point SPILLWAY_CUDA_BACKEND at libspillway-cuda.so or rebuild it");
  }
  return Module{reinterpret_cast<CudaBackendCreateFn>(entry),
                reinterpret_cast<CudaDeviceCountFn>(count)};
}

// A module entry's failure as a Status.
Status module_error(int code, const char* error) {
  const bool known =
      code > static_cast<int>(ErrorCode::kOk) && code <= static_cast<int>(ErrorCode::kInternal);
  const std::string message =
      error[0] ? error : "the CUDA backend module failed with code " + std::to_string(code);
  return Status(known ? static_cast<ErrorCode>(code) : ErrorCode::kInternal, message);
}

Result<std::unique_ptr<Backend>> make_cuda_backend(int device) {
  SPW_ASSIGN_OR_RETURN(const Module module, load_module());
  Backend* raw = nullptr;
  char error[1024] = {};
  if (const int code = module.create(device, &raw, error, sizeof(error)); code != 0)
    return module_error(code, error);
  if (raw == nullptr)
    return internal_error("the CUDA backend module returned success but no backend");
  return std::unique_ptr<Backend>(raw);
}

// "NVIDIA H100 80GB HBM3, 79.1 GiB, sm_90"
std::string describe(const DeviceInfo& info) {
  char mem[32];
  std::snprintf(mem, sizeof(mem), "%.1f GiB", static_cast<double>(info.total_bytes) / (1ull << 30));
  return info.name + ", " + mem + ", sm_" + std::to_string(info.compute_capability);
}

}  // namespace

Result<BackendChoice> make_backend(const BackendOptions& options) {
  const bool want_cuda = options.kind == "cuda", automatic = options.kind == "auto";
  if (options.kind != "cpu" && !want_cuda && !automatic) {
    return invalid_argument("unknown backend '" + options.kind + "' (expected auto, cpu or cuda)");
  }
  BackendChoice choice;
  if (want_cuda || automatic) {
    auto cuda = make_cuda_backend(options.cuda_device);
    if (cuda.ok()) {
      choice.backend = std::move(*cuda);
      choice.reason = "cuda: " + describe(choice.backend->device_info());
      return choice;
    }
    if (want_cuda) return Status(cuda.status().code(), "cuda: " + cuda.status().message());
    choice.reason = "cpu: " + cuda.status().message();
  }
  choice.backend = make_cpu_backend(options.device_memory_bytes);
  if (choice.reason.empty()) choice.reason = "cpu: " + choice.backend->device_info().name;
  return choice;
}

Result<int> cuda_device_count() {
  SPW_ASSIGN_OR_RETURN(const Module module, load_module());
  int count = 0;
  char error[1024] = {};
  if (const int code = module.device_count(&count, error, sizeof(error)); code != 0)
    return module_error(code, error);
  return count;
}

Result<std::vector<std::unique_ptr<Backend>>> make_cuda_backends(const std::vector<int>& devices) {
  std::vector<std::unique_ptr<Backend>> out;
  for (int d : devices) {
    auto b = make_cuda_backend(d);
    if (!b.ok()) return b.status().with_context("GPU " + std::to_string(d));
    out.push_back(std::move(*b));
  }
  return out;
}

bool probe_cuda(DeviceInfo* info, std::string* why) {
  auto cuda = make_cuda_backend(0);
  if (!cuda.ok()) {
    if (why) *why = cuda.status().message();
    return false;
  }
  if (info) *info = (*cuda)->device_info();
  return true;
}

}  // namespace spillway::compute
