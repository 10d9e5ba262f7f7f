// make_backend without a GPU: "cpu" as asked, "auto" falling back to the CPU with the reason, and
// "cuda" failing with one actionable line, for a module that is missing, not a library, or not a
// Spillway module. $SPILLWAY_CUDA_BACKEND pins the module's path, so these hold on any machine
// (with or without a GPU, with or without the CUDA build).
#include "compute/backend-loader.h"

#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <optional>
#include <string>

#include "test-data.h"

namespace spillway::compute {
namespace {

// Sets an environment variable for the scope of a test, restoring the old value after.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() {
    if (old_) {
      setenv(name_, old_->c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

bool one_line(const std::string& s) {
  return !s.empty() && s.find('\n') == std::string::npos;
}

TEST(BackendLoader, CpuAsAsked) {
  BackendOptions options;
  options.kind = "cpu";
  options.device_memory_bytes = 64 << 20;
  auto choice = make_backend(options);
  ASSERT_TRUE(choice.ok()) << choice.status().to_string();
  ASSERT_NE(choice->backend, nullptr);
  EXPECT_EQ(choice->backend->name(), "cpu");
  EXPECT_EQ(choice->reason.rfind("cpu: ", 0), 0u) << choice->reason;
  EXPECT_TRUE(one_line(choice->reason));
  size_t free_bytes = 0, total_bytes = 0;
  ASSERT_TRUE(choice->backend->device_memory_info(&free_bytes, &total_bytes).ok());
  EXPECT_EQ(total_bytes, size_t(64) << 20) << "device_memory_bytes is the CPU's capacity";
}

TEST(BackendLoader, UnknownKind) {
  auto choice = make_backend({.kind = "tpu"});
  ASSERT_FALSE(choice.ok());
  EXPECT_EQ(choice.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(choice.status().message().find("auto, cpu or cuda"), std::string::npos)
      << choice.status().to_string();
}

TEST(BackendLoader, AutoFallsBackToCpuWhenTheModuleIsMissing) {
  ScopedEnv env("SPILLWAY_CUDA_BACKEND", "/nonexistent/libspillway-cuda.so");
  auto choice = make_backend({.kind = "auto"});
  ASSERT_TRUE(choice.ok()) << choice.status().to_string();
  EXPECT_EQ(choice->backend->name(), "cpu");
  EXPECT_EQ(choice->reason.rfind("cpu: ", 0), 0u) << choice->reason;
  EXPECT_NE(choice->reason.find("/nonexistent/libspillway-cuda.so"), std::string::npos)
      << choice->reason;
  EXPECT_TRUE(one_line(choice->reason)) << choice->reason;
}

TEST(BackendLoader, CudaFailsWithOneLineWhenTheModuleIsMissing) {
  ScopedEnv env("SPILLWAY_CUDA_BACKEND", "/nonexistent/libspillway-cuda.so");
  auto choice = make_backend({.kind = "cuda"});
  ASSERT_FALSE(choice.ok());
  const Status& s = choice.status();
  EXPECT_EQ(s.code(), ErrorCode::kUnsupported) << s.to_string();
  EXPECT_EQ(s.message().rfind("cuda: ", 0), 0u) << s.to_string();
  EXPECT_NE(s.message().find("SPILLWAY_CUDA_BACKEND"), std::string::npos) << s.to_string();
  EXPECT_TRUE(one_line(s.message())) << s.to_string();

  DeviceInfo info;
  std::string why;
  EXPECT_FALSE(probe_cuda(&info, &why));
  EXPECT_TRUE(one_line(why)) << why;
  EXPECT_NE(s.message().find(why), std::string::npos) << "probe_cuda says what make_backend says";
}

TEST(BackendLoader, NotALibrary) {
  ::spillway::testing::TempDir dir;
  const std::string path = dir.file("libspillway-cuda.so");
  std::ofstream(path) << "this is not an ELF file, but long enough to have a header to read\n";
  ScopedEnv env("SPILLWAY_CUDA_BACKEND", path);
  auto cuda = make_backend({.kind = "cuda"});
  ASSERT_FALSE(cuda.ok());
  EXPECT_EQ(cuda.status().code(), ErrorCode::kUnsupported);
  EXPECT_NE(cuda.status().message().find("could not load " + path), std::string::npos)
      << cuda.status().to_string();
  EXPECT_TRUE(one_line(cuda.status().message())) << cuda.status().to_string();
  auto automatic = make_backend({.kind = "auto"});
  ASSERT_TRUE(automatic.ok()) << automatic.status().to_string();
  EXPECT_EQ(automatic->backend->name(), "cpu");
  EXPECT_NE(automatic->reason.find(path), std::string::npos) << automatic->reason;
}

// A real shared library that is not a Spillway module: libm, found where the process loaded it.
TEST(BackendLoader, LibraryWithoutTheEntryPoint) {
  void* libm = dlopen("libm.so.6", RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(libm, nullptr) << dlerror();
  Dl_info where{};
  ASSERT_NE(dladdr(dlsym(libm, "cos"), &where), 0);
  ASSERT_NE(where.dli_fname, nullptr);
  const std::string path = where.dli_fname;
  ScopedEnv env("SPILLWAY_CUDA_BACKEND", path);
  auto cuda = make_backend({.kind = "cuda"});
  ASSERT_FALSE(cuda.ok());
  EXPECT_EQ(cuda.status().code(), ErrorCode::kUnsupported);
  EXPECT_NE(cuda.status().message().find(kCudaBackendEntry), std::string::npos)
      << cuda.status().to_string();
  EXPECT_TRUE(one_line(cuda.status().message())) << cuda.status().to_string();
}

// Whatever this machine has: a usable GPU (the "cuda" reason names it) or the
// CPU with one line saying why not.
TEST(BackendLoader, AutoSaysWhatItPicked) {
  auto choice = make_backend({.kind = "auto"});
  ASSERT_TRUE(choice.ok()) << choice.status().to_string();
  EXPECT_EQ(choice->reason.rfind(choice->backend->name() + ": ", 0), 0u) << choice->reason;
  EXPECT_TRUE(one_line(choice->reason)) << choice->reason;
  std::printf("auto: %s\n", choice->reason.c_str());
}

}  // namespace
}  // namespace spillway::compute
