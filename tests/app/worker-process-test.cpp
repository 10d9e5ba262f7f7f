// The helper that starts the worker sets the child's environment: an inherited variable of a name
// it is given is replaced, never listed twice, so a test's XDG_DATA_HOME wins over the desktop's.
#include "worker-process.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "test-data.h"

namespace spillway {
namespace {

// Sets an environment variable for one scope, then puts back what was there.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (old_)
      setenv(name_, old_->c_str(), 1);
    else
      unsetenv(name_);
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};

std::vector<std::string> with_prefix(const std::vector<std::string>& lines,
                                     const std::string& prefix) {
  std::vector<std::string> hits;
  for (const auto& l : lines)
    if (l.rfind(prefix, 0) == 0) hits.push_back(l);
  return hits;
}

TEST(WorkerProcessTest, ChildEnvironmentReplacesInheritedNames) {
  const char* parent[] = {"HOME=/home/u", "XDG_DATA_HOME=/y", "XDG_DATA_HOME_EXTRA=/z", "PATH=/bin",
                          nullptr};
  auto env = testing::child_environment(parent, {"XDG_DATA_HOME=/x", "NEW=1"});
  EXPECT_EQ(env, (std::vector<std::string>{"HOME=/home/u", "XDG_DATA_HOME_EXTRA=/z", "PATH=/bin",
                                           "XDG_DATA_HOME=/x", "NEW=1"}));
  // A name given twice: the later value, once.
  EXPECT_EQ(testing::child_environment(parent, {"PATH=/a", "PATH=/b"}),
            (std::vector<std::string>{"HOME=/home/u", "XDG_DATA_HOME=/y", "XDG_DATA_HOME_EXTRA=/z",
                                      "PATH=/b"}));
}

TEST(WorkerProcessTest, ChildSeesOnlyTheGivenValue) {
  ScopedEnv xdg("XDG_DATA_HOME", "/y");
  testing::TempDir tmp;
  const std::string out = tmp.file("env.out"), err = tmp.file("env.err");
  const pid_t pid = testing::spawn_process("/usr/bin/env", {}, {"XDG_DATA_HOME=/x"}, out, err);
  ASSERT_GT(pid, 0);
  ASSERT_EQ(testing::wait_exit(pid), 0) << testing::slurp(err);
  std::vector<std::string> lines;
  std::istringstream s(testing::slurp(out));
  for (std::string line; std::getline(s, line);) lines.push_back(line);
  EXPECT_EQ(with_prefix(lines, "XDG_DATA_HOME="), std::vector<std::string>{"XDG_DATA_HOME=/x"});
  // Everything else is still inherited.
  if (const char* path = std::getenv("PATH")) {
    EXPECT_EQ(with_prefix(lines, "PATH="), std::vector<std::string>{std::string("PATH=") + path});
  }
}

}  // namespace
}  // namespace spillway
