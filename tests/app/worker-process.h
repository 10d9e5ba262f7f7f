// Runs the built spillway-worker binary as a child process for end-to-end tests: arguments,
// extra environment, captured stdout/stderr, exit code; or started in the background to be
// signalled (SIGKILL, SIGTERM) mid-run.
#pragma once

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fcntl.h>

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

inline pid_t spawn_worker(const std::vector<std::string>& args, const std::vector<std::string>& env,
                          const std::string& out_path, const std::string& err_path) {
  std::vector<std::string> all = {SPILLWAY_WORKER_BINARY};
  all.insert(all.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : all) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> envs;
  for (char** e = environ; *e; ++e) envs.push_back(*e);
  envs.insert(envs.end(), env.begin(), env.end());
  std::vector<char*> envp;
  for (auto& e : envs) envp.push_back(e.data());
  envp.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&fa, 2, err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  pid_t pid = -1;
  posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&fa);
  return pid;
}

inline std::string slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

inline int wait_exit(pid_t pid) {
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

inline ProcessResult run_worker_process(const std::vector<std::string>& args, const std::vector<std::string>& env,
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
