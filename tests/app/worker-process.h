// Runs the built spillway-worker binary as a child process for end-to-end tests: arguments,
// environment, captured stdout/stderr, exit code; or started in the background to be signalled
// (SIGKILL, SIGTERM) mid-run.
//
// The child inherits the test's environment with the given "NAME=value" entries set over it: an
// inherited variable of the same name is replaced, never listed twice (getenv would return the
// first copy, so a desktop's XDG_DATA_HOME would win over the test's and the worker would write to
// the user's runs.db).
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

extern char** environ;

namespace spillway::testing {

struct ProcessResult {
  int exit_code = -1;
  std::string out, err;
};

// The inherited environment `parent` (null-terminated, like environ) with each "NAME=value" of
// `set` in place of any inherited NAME; inherited order first, then the names it lacked.
inline std::vector<std::string> child_environment(const char* const* parent,
                                                  const std::vector<std::string>& set) {
  auto name_of = [](const std::string& e) { return e.substr(0, e.find('=')); };
  std::vector<std::string> names;
  for (const auto& e : set) names.push_back(name_of(e));
  auto overridden = [&](const std::string& name) {
    for (const auto& n : names)
      if (n == name) return true;
    return false;
  };
  std::vector<std::string> envs;
  for (const char* const* e = parent; e && *e; ++e)
    if (!overridden(name_of(*e))) envs.push_back(*e);
  // The last entry of a name given twice wins, as with setenv called in order.
  for (size_t i = 0; i < set.size(); ++i) {
    bool later = false;
    for (size_t j = i + 1; j < set.size(); ++j) later |= names[j] == names[i];
    if (!later) envs.push_back(set[i]);
  }
  return envs;
}

// Starts `program` with `args` and child_environment(environ, env), stdout and stderr to the two
// files. Returns the child's pid, or -1 when it could not be started.
inline pid_t spawn_process(const std::string& program, const std::vector<std::string>& args,
                           const std::vector<std::string>& env, const std::string& out_path,
                           const std::string& err_path) {
  std::vector<std::string> all = {program};
  all.insert(all.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : all) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> envs = child_environment(environ, env);
  std::vector<char*> envp;
  for (auto& e : envs) envp.push_back(e.data());
  envp.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&fa, 2, err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&fa);
  return rc == 0 ? pid : -1;
}

inline pid_t spawn_worker(const std::vector<std::string>& args, const std::vector<std::string>& env,
                          const std::string& out_path, const std::string& err_path) {
  return spawn_process(SPILLWAY_WORKER_BINARY, args, env, out_path, err_path);
}

inline std::string slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

inline int wait_exit(pid_t pid) {
  int status = 0;
  if (pid <= 0 || waitpid(pid, &status, 0) != pid) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

inline ProcessResult run_worker_process(const std::vector<std::string>& args,
                                        const std::vector<std::string>& env,
                                        const std::string& scratch_dir) {
  const std::string out = scratch_dir + "/stdout.txt", err = scratch_dir + "/stderr.txt";
  pid_t pid = spawn_worker(args, env, out, err);
  ProcessResult r;
  r.exit_code = wait_exit(pid);
  r.out = slurp(out);
  r.err = slurp(err);
  return r;
}

}  // namespace spillway::testing
