// The Jinja chat template renderer's process: posix_spawn of `python3 -I -B chat_template.py`,
// one JSON line a request on a socket (so that writing to a process that died returns EPIPE
// instead of raising SIGPIPE), one JSON line a reply on a pipe. A writer thread feeds the requests
// while this thread reads the replies, so a dataset larger than the pipe buffers cannot deadlock.
#include "data/chat-template-jinja.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <thread>

extern char** environ;

namespace spillway {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kInstall =
    "install the Debian packages python3 and python3-jinja2 (apt install python3 python3-jinja2)";

std::string dump(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

bool send_all(int fd, std::string_view data) {
  while (!data.empty()) {
    const ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

RenderedChat parse_reply(const json& j) {
  RenderedChat r;
  if (!j.is_object()) {
    r.error = "the renderer's reply is not a JSON object";
    return r;
  }
  if (auto e = j.find("error"); e != j.end()) {
    r.error = e->is_string() ? e->get<std::string>() : e->dump();
    if (r.error.empty()) r.error = "the chat template failed";
    if (auto l = j.find("template_line"); l != j.end() && l->is_number_integer())
      r.template_line = l->get<int>();
    return r;
  }
  auto text = j.find("text");
  auto trained = j.find("trained");
  if (text == j.end() || !text->is_string() || trained == j.end() || !trained->is_array()) {
    r.error = "the renderer's reply has no text and trained spans";
    return r;
  }
  r.text = text->get<std::string>();
  for (const json& span : *trained) {
    if (!span.is_array() || span.size() != 2 || !span[0].is_number_unsigned() ||
        !span[1].is_number_unsigned()) {
      r.error = "the renderer's reply has a malformed trained span";
      return r;
    }
    r.trained.emplace_back(span[0].get<size_t>(), span[1].get<size_t>());
  }
  return r;
}

}  // namespace

std::string RenderedChat::error_message() const {
  if (template_line > 0)
    return "the chat template failed at its line " + std::to_string(template_line) + ": " + error;
  return "chat template: " + error;
}

Result<std::string> chat_template_script() {
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (ec)
    return not_found("cannot find the chat template renderer: /proc/self/exe: " + ec.message());
  fs::path dir = exe.parent_path();
  std::string looked;
  for (int up = 0; up <= 4 && !dir.empty(); ++up, dir = dir.parent_path()) {
    const fs::path candidate = dir / "share" / "spillway" / "chat_template.py";
    if (fs::is_regular_file(candidate, ec)) return candidate.string();
    looked += (looked.empty() ? "" : ", ") + candidate.string();
    if (dir == dir.root_path()) break;
  }
  return not_found(
      "cannot find the chat template renderer share/spillway/chat_template.py (looked "
      "for " +
      looked + "); reinstall Spillway");
}

Result<std::unique_ptr<JinjaChatRenderer>> JinjaChatRenderer::start(
    const std::string& source, const std::map<std::string, std::string>& variables,
    const std::string& script_path) {
  std::string script = script_path;
  if (script.empty()) {
    SPW_ASSIGN_OR_RETURN(script, chat_template_script());
  }
  int in[2], out[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, in) != 0)
    return io_error(std::string("cannot start the chat template renderer: socketpair: ") +
                    std::strerror(errno));
  if (::pipe2(out, O_CLOEXEC) != 0) {
    const int err = errno;
    ::close(in[0]);
    ::close(in[1]);
    return io_error(std::string("cannot start the chat template renderer: pipe: ") +
                    std::strerror(err));
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, in[1], STDIN_FILENO);
  posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
  // -I: no user site-packages, no PYTHON* variables, no current folder on the path; -B: no .pyc.
  const char* argv[] = {"python3", "-I", "-B", script.c_str(), nullptr};
  pid_t pid = -1;
  const int rc =
      ::posix_spawnp(&pid, "python3", &actions, nullptr, const_cast<char**>(argv), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(in[1]);
  ::close(out[1]);
  if (rc != 0) {
    ::close(in[0]);
    ::close(out[0]);
    if (rc == ENOENT)
      return unsupported(std::string("rendering the model's chat template needs python3, which is "
                                     "not installed: ") +
                         kInstall);
    return io_error(std::string("cannot start python3 for the chat template: ") +
                    std::strerror(rc));
  }
  std::unique_ptr<JinjaChatRenderer> r(new JinjaChatRenderer());
  r->pid_ = pid;
  r->to_child_ = in[0];
  r->from_child_ = out[0];
  const std::string setup = dump(json{{"template", source}, {"variables", variables}}) + "\n";
  if (!send_all(r->to_child_, setup)) return r->fail("starting");
  SPW_ASSIGN_OR_RETURN(std::vector<RenderedChat> first, r->exchange({}));
  if (!first.front().ok()) {
    const RenderedChat& e = first.front();
    return invalid_argument((e.template_line > 0
                                 ? "chat template line " + std::to_string(e.template_line) + ": "
                                 : std::string("chat template: ")) +
                            e.error);
  }
  return r;
}

Status JinjaChatRenderer::fail(const std::string& what) {
  // The process is gone or broken: reap it and say why.
  if (to_child_ >= 0) ::close(to_child_), to_child_ = -1;
  int status = 0;
  pid_t done = -1;
  if (pid_ > 0) {
    while ((done = ::waitpid(pid_, &status, 0)) < 0 && errno == EINTR) {
    }
    pid_ = -1;
  }
  if (done > 0 && WIFEXITED(status) && WEXITSTATUS(status) == 3)
    return unsupported(
        "rendering the model's chat template needs Python's jinja2, which is not installed: " +
        std::string(kInstall));
  if (done > 0 && WIFEXITED(status) && WEXITSTATUS(status) == 127)
    return unsupported("rendering the model's chat template needs python3: " +
                       std::string(kInstall));
  std::string how = "stopped";
  if (done > 0 && WIFEXITED(status))
    how = "exited with status " + std::to_string(WEXITSTATUS(status));
  if (done > 0 && WIFSIGNALED(status))
    how = "was killed by signal " + std::to_string(WTERMSIG(status));
  return io_error("the chat template renderer (python3) " + how + " while " + what);
}

Result<std::vector<RenderedChat>> JinjaChatRenderer::render(
    std::span<const ChatRenderRequest> requests) {
  if (requests.empty()) return std::vector<RenderedChat>();
  return exchange(requests);
}

Result<std::vector<RenderedChat>> JinjaChatRenderer::exchange(
    std::span<const ChatRenderRequest> requests) {
  // No requests: the setup reply, {"ok": true, "generation": BOOL} or the compile error.
  const bool setup = requests.empty();
  if (to_child_ < 0 || from_child_ < 0) return io_error("the chat template renderer has stopped");
  std::thread writer;
  bool write_failed = false;
  if (!requests.empty()) {
    writer = std::thread([&] {
      for (const ChatRenderRequest& q : requests) {
        std::string line =
            "{\"messages\":" + q.messages +
            ",\"tools\":" + (q.tools.empty() ? std::string("null") : q.tools) +
            ",\"add_generation_prompt\":" + (q.add_generation_prompt ? "true" : "false") + "}\n";
        if (!send_all(to_child_, line)) {
          write_failed = true;
          return;
        }
      }
    });
  }
  const size_t expected = requests.empty() ? 1 : requests.size();
  std::vector<RenderedChat> out;
  out.reserve(expected);
  char buf[1 << 16];
  bool eof = false;
  while (out.size() < expected && !eof) {
    size_t nl;
    while (out.size() < expected && (nl = pending_.find('\n')) != std::string::npos) {
      auto j = json::parse(std::string_view(pending_).substr(0, nl), nullptr, false);
      pending_.erase(0, nl + 1);
      if (setup) {
        RenderedChat r;
        if (j.is_object() && j.value("ok", false)) {
          generation_ = j.value("generation", false);
        } else {
          r = parse_reply(j);
          if (r.ok()) r.error = "the renderer's first reply is malformed";
        }
        out.push_back(std::move(r));
      } else {
        out.push_back(j.is_discarded() ? RenderedChat{"", {}, "the renderer's reply is not JSON", 0}
                                       : parse_reply(j));
      }
    }
    if (out.size() >= expected) break;
    const ssize_t n = ::read(from_child_, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      eof = true;
    else
      pending_.append(buf, static_cast<size_t>(n));
  }
  if (writer.joinable()) {
    if (eof) ::shutdown(to_child_, SHUT_RDWR);  // unblocks a writer stuck on a dead process
    writer.join();
  }
  if (eof || write_failed) return fail(setup ? "starting" : "rendering");
  return out;
}

JinjaChatRenderer::~JinjaChatRenderer() {
  if (to_child_ >= 0) ::close(to_child_);
  if (from_child_ >= 0) ::close(from_child_);
  if (pid_ > 0) {
    // Nothing more is wanted from it, and it writes no file: a template still looping (a preview
    // given up, a load that failed) is stopped rather than waited for.
    ::kill(pid_, SIGKILL);
    int status = 0;
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
  }
}

size_t utf8_offset_of(std::string_view text, size_t index) {
  size_t pos = 0;
  for (size_t i = 0; i < index && pos < text.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(text[pos]);
    const size_t len = c < 0x80           ? 1
                       : (c >> 5) == 0x6  ? 2
                       : (c >> 4) == 0xE  ? 3
                       : (c >> 3) == 0x1E ? 4
                                          : 1;
    pos = std::min(text.size(), pos + len);
  }
  return pos;
}

Result<std::vector<ChatSegment>> chat_segments(const RenderedChat& rendered,
                                               const std::string& bos_token,
                                               const std::string& eos_token) {
  if (!rendered.ok()) return invalid_argument(rendered.error_message());
  const std::string_view text = rendered.text;
  std::vector<ChatSegment> out;
  // Appends text[begin, end) with `trained`, with BOS / EOS written as text split out.
  auto add = [&](size_t begin, size_t end, bool trained) {
    while (begin < end) {
      size_t next = end;
      ChatSegment::Special special = ChatSegment::Special::kNone;
      size_t special_len = 0;
      for (const auto& [token, kind] : {std::pair{&bos_token, ChatSegment::Special::kBos},
                                        std::pair{&eos_token, ChatSegment::Special::kEos}}) {
        if (token->empty()) continue;
        const size_t at = text.substr(0, end).find(*token, begin);
        if (at != std::string_view::npos && at + token->size() <= end && at < next) {
          next = at;
          special = kind;
          special_len = token->size();
        }
      }
      if (next > begin) {
        if (!out.empty() && out.back().special == ChatSegment::Special::kNone &&
            out.back().trained == trained)
          out.back().text.append(text.substr(begin, next - begin));
        else
          out.push_back({std::string(text.substr(begin, next - begin)), trained,
                         ChatSegment::Special::kNone});
      }
      if (special == ChatSegment::Special::kNone) break;
      out.push_back({std::string(), trained, special});
      begin = next + special_len;
    }
  };
  size_t code_points = 0;
  for (char c : text) code_points += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  size_t pos = 0;
  size_t last_end = 0;
  for (const auto& [start, end] : rendered.trained) {
    if (start < last_end || end < start)
      return invalid_argument("the chat template's trained spans are out of order");
    if (end > code_points)
      return invalid_argument("a trained span of the chat template is past its text");
    const size_t b = utf8_offset_of(text, start), e = utf8_offset_of(text, end);
    add(pos, b, false);
    add(b, e, true);
    pos = e;
    last_end = end;
  }
  add(pos, text.size(), false);
  return out;
}

}  // namespace spillway
