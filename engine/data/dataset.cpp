#include "data/dataset.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "core/json-file.h"
#include "core/log.h"
#include "core/thread-pool.h"
#include "data/chat-template-jinja.h"
#include "data/tokenizer.h"

namespace spillway {
namespace {

bool is_chat_format(DatasetFormat f) {
  return f == DatasetFormat::kAlpaca || f == DatasetFormat::kShareGpt ||
         f == DatasetFormat::kOpenAiMessages;
}

// One record after tokenization: the token stream and which tokens are targets to learn, or,
// for pre-tokenized data, the finished sequence.
struct Encoded {
  std::vector<int32_t> tokens;
  std::vector<uint8_t> trained;
  TokenSequence sequence;  // pre-tokenized only
  int32_t token_count = 0;
  bool truncated = false;
  // Non-empty: the record is bad (a pre-tokenized id out of range, a text the tokenizer cannot
  // split: tokenizer.h).
  std::string error;
};

void encode_document(const DatasetRecord& r, const Tokenizer& tok, const DatasetOptions& o,
                     Encoded* e) {
  if (o.add_bos && tok.bos_id()) e->tokens.push_back(*tok.bos_id());
  const auto ids = tok.encode(r.text);
  if (!ids.ok()) {
    e->error = ids.status().message();
    return;
  }
  e->tokens.insert(e->tokens.end(), ids->begin(), ids->end());
  if (tok.eos_id()) e->tokens.push_back(*tok.eos_id());
  // In a packed text stream every token is a target, EOS included: it teaches where a
  // document ends.
  e->trained.assign(e->tokens.size(), 1);
}

// Tokens of rendered segments: BOS / EOS segments as the tokenizer's ids (left out when it has
// none), text encoded without special tokens added (HF add_special_tokens=False).
void encode_segments(const std::vector<ChatSegment>& segments, const Tokenizer& tok, Encoded* e) {
  for (const ChatSegment& s : segments) {
    std::optional<int32_t> special;
    if (s.special == ChatSegment::Special::kBos) {
      special = tok.bos_id();
      if (!special) continue;
    } else if (s.special == ChatSegment::Special::kEos) {
      special = tok.eos_id();
      if (!special) continue;
    }
    if (special) {
      e->tokens.push_back(*special);
      e->trained.push_back(s.trained ? 1 : 0);
      continue;
    }
    const auto ids = tok.encode(s.text);
    if (!ids.ok()) {
      e->error = ids.status().message();
      return;
    }
    e->tokens.insert(e->tokens.end(), ids->begin(), ids->end());
    e->trained.insert(e->trained.end(), ids->size(), s.trained ? 1 : 0);
  }
}

void encode_conversation(const DatasetRecord& r, const Tokenizer& tok, const DatasetOptions& o,
                         const ChatTemplateChoice& choice, Encoded* e) {
  const ChatTemplateKind kind = choice.kind;
  // The setting wins over the default that the model's own template would insert.
  const std::string& default_system =
      o.default_system.empty() ? choice.default_system : o.default_system;
  std::vector<ChatMessage> with_system;
  std::span<const ChatMessage> msgs = r.messages;
  if (!default_system.empty() && (msgs.empty() || msgs.front().role != ChatRole::kSystem)) {
    with_system.push_back({ChatRole::kSystem, default_system});
    with_system.insert(with_system.end(), msgs.begin(), msgs.end());
    msgs = with_system;
  }
  auto segments = render_chat(kind, msgs);
  if (!segments.ok()) {
    e->error = segments.status().message();
    return;
  }
  encode_segments(*segments, tok, e);
}

void encode_rendered(const RenderedChat& rendered, const Tokenizer& tok,
                     const ChatTemplateChoice& choice, Encoded* e) {
  if (!rendered.ok()) {
    e->error = rendered.error_message();
    return;
  }
  auto token = [&](const char* name) {
    auto it = choice.special_tokens.find(name);
    return it == choice.special_tokens.end() ? std::string() : it->second;
  };
  auto segments = chat_segments(rendered, token("bos_token"), token("eos_token"));
  if (!segments.ok()) {
    e->error = segments.status().message();
    return;
  }
  encode_segments(*segments, tok, e);
}

// Renders every conversation with the model's own template in one renderer process. A template
// that does not compile, or a renderer that cannot start, fails the load; a conversation the
// template refuses is that record's error.
Result<std::vector<RenderedChat>> render_with_model_template(const DatasetRecords& records,
                                                             const std::string& name,
                                                             const DatasetOptions& o,
                                                             const ChatTemplateChoice& choice) {
  auto renderer = JinjaChatRenderer::start(choice.jinja, choice.special_tokens);
  if (!renderer.ok())
    return Status(renderer.status().code(), name + ": " + renderer.status().message());
  std::vector<ChatRenderRequest> requests;
  requests.reserve(records.records.size());
  const std::string system =
      o.default_system.empty()
          ? std::string()
          : nlohmann::json{{"role", "system"}, {"content", o.default_system}}.dump(
                -1, ' ', false, nlohmann::json::error_handler_t::replace);
  for (const DatasetRecord& r : records.records) {
    ChatRenderRequest q{
        r.chat_messages_json.empty() ? chat_messages_json_of(r.messages) : r.chat_messages_json,
        r.chat_tools_json, false};
    // The default system message setting, for a conversation that has none.
    const bool has_system = !r.messages.empty() && r.messages.front().role == ChatRole::kSystem;
    if (!system.empty() && !has_system && q.messages.size() > 1)
      q.messages = "[" + system + (q.messages == "[]" ? "" : ",") + q.messages.substr(1);
    requests.push_back(std::move(q));
  }
  auto rendered = (*renderer)->render(requests);
  if (!rendered.ok())
    return Status(rendered.status().code(), name + ": " + rendered.status().message());
  return rendered;
}

// The bound pre-tokenized ids are checked against: the model's vocab_size when given (what the
// embedding and LM head index), else the tokenizer's size.
struct VocabBound {
  int32_t size = 0;
  bool from_model = false;

  std::string why_out(const char* key, size_t i, int32_t id) const {
    const std::string entry =
        "'" + std::string(key) + "' entry " + std::to_string(i) + " = " + std::to_string(id);
    return from_model ? entry + " is not below the model's vocab_size " + std::to_string(size)
                      : entry + " is outside the vocabulary (size " + std::to_string(size) + ")";
  }
};

void encode_pretokenized(const DatasetRecord& r, const VocabBound& vocab, int seq_len, Encoded* e) {
  for (size_t i = 0; i < r.input_ids.size(); ++i) {
    if (r.input_ids[i] >= vocab.size) {
      e->error = vocab.why_out("input_ids", i, r.input_ids[i]);
      return;
    }
  }
  for (size_t i = 0; i < r.labels.size(); ++i) {
    if (r.labels[i] >= vocab.size) {
      e->error = vocab.why_out("labels", i, r.labels[i]);
      return;
    }
  }
  e->token_count = static_cast<int32_t>(r.input_ids.size());
  e->sequence = sequence_from_hf_labels(r.input_ids, r.labels, seq_len, &e->truncated);
}

}  // namespace

const char* instruction_layout_name(InstructionLayout layout) {
  return layout == InstructionLayout::kPacked ? "packed" : "padded";
}

Result<InstructionLayout> parse_instruction_layout(std::string_view name) {
  if (name == "padded" || name.empty()) return InstructionLayout::kPadded;
  if (name == "packed") return InstructionLayout::kPacked;
  return invalid_argument("unknown instruction layout " + quote_name(name) +
                          " (expected padded or packed)");
}

Result<Dataset> Dataset::load(const std::string& path, const Tokenizer& tokenizer,
                              const DatasetOptions& options) {
  if (options.seq_len < 1)
    return invalid_argument("seq_len must be at least 1, got " + std::to_string(options.seq_len));
  SPW_ASSIGN_OR_RETURN(DatasetRecords records, read_dataset_records(path, options.read));
  return build(std::move(records), path, &tokenizer, options);
}

Result<Dataset> Dataset::load(const std::string& path, const DatasetOptions& options) {
  if (options.seq_len < 1)
    return invalid_argument("seq_len must be at least 1, got " + std::to_string(options.seq_len));
  SPW_ASSIGN_OR_RETURN(DatasetRecords records, read_dataset_records(path, options.read));
  return build(std::move(records), path, nullptr, options);
}

Result<Dataset> Dataset::from_records(DatasetRecords records, const std::string& name,
                                      const Tokenizer& tokenizer, const DatasetOptions& options) {
  return build(std::move(records), name, &tokenizer, options);
}

Result<Dataset> Dataset::from_records(DatasetRecords records, const std::string& name,
                                      const DatasetOptions& options) {
  return build(std::move(records), name, nullptr, options);
}

Result<Dataset> Dataset::build(DatasetRecords records, const std::string& name,
                               const Tokenizer* tokenizer, const DatasetOptions& options) {
  if (options.seq_len < 1)
    return invalid_argument("seq_len must be at least 1, got " + std::to_string(options.seq_len));
  const bool chat = is_chat_format(records.format);
  const bool pretokenized = records.format == DatasetFormat::kPreTokenized;
  if (!tokenizer && !pretokenized) {
    return invalid_argument(name + ": " + dataset_format_name(records.format) +
                            " data needs a tokenizer; only pre-tokenized data (\"input_ids\" "
                            "records) can be read without one");
  }
  if (!tokenizer && options.vocab_size <= 0)
    return invalid_argument(
        name + ": pre-tokenized data without a tokenizer needs the model's vocab_size");
  const VocabBound vocab = options.vocab_size > 0 ? VocabBound{options.vocab_size, true}
                                                  : VocabBound{tokenizer->vocab_size(), false};
  auto shared = std::make_shared<Shared>();
  shared->seq_len = options.seq_len;
  shared->format = records.format;
  // Padding positions have label -100, so without a tokenizer any id in range will do.
  shared->pad_id = tokenizer ? tokenizer->pad_id().value_or(tokenizer->eos_id().value_or(0)) : 0;
  std::vector<RenderedChat> rendered;  // kModel: each record's rendering
  if (chat) {
    shared->chat_template = choose_chat_template(options.chat_template, tokenizer,
                                                 options.model_type, options.fallback_template);
    if (shared->chat_template.kind == ChatTemplateKind::kModel) {
      SPW_ASSIGN_OR_RETURN(
          rendered, render_with_model_template(records, name, options, shared->chat_template));
    }
  } else if (!pretokenized && !tokenizer->eos_id()) {
    log_warn(name + ": the tokenizer has no EOS token; documents are packed without a separator");
  }

  // Tokenize every record (in parallel when a pool is given: Tokenizer is thread-safe).
  const size_t n = records.records.size();
  std::vector<Encoded> enc(n);
  auto work = [&](size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) {
      const DatasetRecord& r = records.records[i];
      Encoded& e = enc[i];
      if (pretokenized) {
        encode_pretokenized(r, vocab, options.seq_len, &e);
        continue;
      }
      if (chat && !rendered.empty())
        encode_rendered(rendered[i], *tokenizer, shared->chat_template, &e);
      else if (chat)
        encode_conversation(r, *tokenizer, options, shared->chat_template, &e);
      else
        encode_document(r, *tokenizer, options, &e);
      e.token_count = static_cast<int32_t>(e.tokens.size());
    }
  };
  if (options.pool && n > 1)
    options.pool->parallel_for(n, work, 1);
  else
    work(0, n);

  DatasetStats& st = shared->stats;
  IssueLog issues(name, options.read.skip_bad_records, options.read.max_reported_issues);
  std::vector<int32_t> stream;
  std::vector<uint8_t> stream_trained;
  const bool pack = !pretokenized && !chat;  // text: one stream cut into windows
  const bool pack_whole = chat && options.instruction_layout == InstructionLayout::kPacked;
  for (size_t i = 0; i < n; ++i) {
    Encoded& e = enc[i];
    if (!e.error.empty()) {
      SPW_RETURN_IF_ERROR(issues.report(records.records[i].line, std::move(e.error)));
      continue;
    }
    ++st.records;
    st.example_tokens.push_back(e.token_count);
    st.total_tokens += e.token_count;
    if (pack) {
      stream.insert(stream.end(), e.tokens.begin(), e.tokens.end());
      stream_trained.insert(stream_trained.end(), e.trained.begin(), e.trained.end());
    } else {
      TokenSequence s = pretokenized
                            ? std::move(e.sequence)
                            : single_sequence(e.tokens, e.trained, options.seq_len, &e.truncated);
      if (e.truncated) {
        ++st.truncated;
        st.dropped_positions += std::max<int64_t>(0, e.token_count - 1 - options.seq_len);
      }
      if (!s.input_ids.empty()) shared->sequences.push_back(std::move(s));
    }
    e = Encoded();  // free as we go
  }
  if (pack) {
    int64_t dropped = 0;
    shared->sequences =
        pack_stream(stream, stream_trained, options.seq_len, options.keep_tail, &dropped);
    st.dropped_positions += dropped;
  }
  if (pack_whole) shared->sequences = pack_examples(std::move(shared->sequences), options.seq_len);
  st.skipped = records.skipped + issues.count();
  st.issues = records.issues;
  for (const RecordIssue& i : issues.kept())
    if (st.issues.size() < options.read.max_reported_issues) st.issues.push_back(i);
  st.sequences = static_cast<int64_t>(shared->sequences.size());
  for (const TokenSequence& s : shared->sequences) {
    st.positions += static_cast<int64_t>(s.size());
    st.trained_tokens += s.trained_count();
  }
  if (shared->sequences.empty())
    return invalid_argument(name + ": the dataset gives no training sequence (" +
                            std::to_string(st.records) + " records, " +
                            std::to_string(st.total_tokens) + " tokens)");
  if (st.trained_tokens == 0)
    return invalid_argument(name + ": no position is trained (every label is -100)");
  const size_t count = shared->sequences.size();
  return Dataset(std::move(shared), 0, count);
}

const ChatTemplateChoice& Dataset::chat_template() const {
  static const ChatTemplateChoice kNone{ChatTemplateKind::kAuto, "", "", "", {}};
  return shared_ ? shared_->chat_template : kNone;
}

double Dataset::fill() const {
  if (empty() || seq_len() <= 0) return 0.0;
  return static_cast<double>(position_count()) /
         (static_cast<double>(size()) * static_cast<double>(seq_len()));
}

bool Dataset::packed() const {
  for (size_t i = 0; i < size(); ++i) {
    if (!(*this)[i].positions.empty()) return true;
  }
  return false;
}

double Dataset::attention_share() const {
  const double T = seq_len();
  if (empty() || T <= 0) return 0.0;
  double attended = 0;  // Σ over sequences of Σ over their segments of length²
  for (size_t i = 0; i < size(); ++i) {
    const TokenSequence& s = (*this)[i];
    if (s.positions.empty()) {  // one example, padded: attention runs over the whole row
      attended += T * T;
      continue;
    }
    double run = 0;
    for (int32_t p : s.positions) {
      if (p == 0 && run > 0) attended += run * run, run = 0;
      ++run;
    }
    const double padding = T - static_cast<double>(s.size());  // an example of its own
    attended += run * run + padding * padding;
  }
  return attended / (static_cast<double>(size()) * T * T);
}

int64_t Dataset::position_count() const {
  int64_t total = 0;
  for (size_t i = 0; i < size(); ++i) total += static_cast<int64_t>((*this)[i].size());
  return total;
}

int64_t Dataset::trained_count() const {
  int64_t total = 0;
  for (size_t i = 0; i < size(); ++i) total += (*this)[i].trained_count();
  return total;
}

Result<std::pair<Dataset, Dataset>> Dataset::split_tail(double fraction) const {
  char text[32];
  std::snprintf(text, sizeof text, "%g", fraction);
  if (!(fraction >= 0.0 && fraction < 1.0))
    return invalid_argument(std::string("data.eval_fraction must be in [0, 1), got ") + text);
  const size_t n = size();
  if (fraction == 0.0) return std::pair<Dataset, Dataset>{*this, Dataset(shared_, end_, end_)};
  if (n < 2)
    return invalid_argument(std::string("data.eval_fraction ") + text +
                            " cannot hold out a sequence for evaluation from " +
                            (n == 1 ? "the dataset's only sequence" : "an empty dataset") +
                            "; use a larger dataset, a shorter data.seq_len, a data.eval file, or "
                            "data.eval_fraction 0");
  size_t held = static_cast<size_t>(std::llround(static_cast<double>(n) * fraction));
  held = std::clamp<size_t>(held, 1, n - 1);
  const size_t cut = end_ - held;
  return std::pair<Dataset, Dataset>{Dataset(shared_, begin_, cut), Dataset(shared_, cut, end_)};
}

}  // namespace spillway
