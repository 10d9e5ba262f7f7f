#include "worker/model-commands.h"

#include <filesystem>
#include <nlohmann/json.hpp>
#include <ostream>
#include <sstream>

#include "core/file-util.h"
#include "data/chat-template-jinja.h"
#include "data/chat-template.h"
#include "data/dataset-options.h"
#include "data/dataset.h"
#include "model/model-config.h"
#include "model/parameter-layout.h"
#include "train/checkpoint.h"
#include "train/export.h"
#include "train/gguf-export.h"
#include "train/inference.h"
#include "worker/args.h"
#include "worker/job-file.h"

namespace spillway::worker {
namespace fs = std::filesystem;
using nlohmann::json;

int run_eval(const std::vector<std::string>& argv, CommandIo io) {
  auto args = parse_args(
      argv, {"--model", "--data", "--seq-len", "--batch", "--format", "--template"}, {"--json"});
  if (!args.ok()) return report_failure(io, false, args.status());
  const bool as_json = args->has("--json");
  auto model = args->require("--model");
  auto data = args->require("--data");
  if (!model.ok() || !data.ok())
    return report_failure(
        io, as_json,
        invalid_argument(
            "usage: eval --model DIR --data FILE [--seq-len N] [--batch N] [--format F] "
            "[--template T] [--json]"));
  // The job file's defaults for what eval shares with training (data.seq_len, data.format,
  // data.template).
  DataSettings settings = data_settings(TrainJob());
  // Whole numbers in the job file's ranges, checked before anything is allocated (--seq-len 5.9 ran
  // as 5; 99999999999 wrapped to a negative int; 100000 ran past the model's 512 positions).
  auto seq = args->integer("--seq-len", settings.seq_len, 2, 1 << 20);
  auto batch = args->integer("--batch", 4, 1, 1 << 16);
  if (!seq.ok() || !batch.ok())
    return report_failure(io, as_json, !seq.ok() ? seq.status() : batch.status());
  if (*seq * *batch > (int64_t{1} << 24))
    return report_failure(
        io, as_json,
        invalid_argument("--batch x --seq-len is " + std::to_string(*seq * *batch) +
                         " tokens, more than 16777216; lower --batch or --seq-len"));
  if (auto config = ModelConfig::load(*model);
      config.ok() && *seq > config->max_position_embeddings)
    return report_failure(
        io, as_json,
        invalid_argument("--seq-len " + std::to_string(*seq) +
                         " is beyond the model's max_position_embeddings " +
                         std::to_string(config->max_position_embeddings) + "; lower --seq-len"));
  settings.seq_len = static_cast<int>(*seq);
  settings.format = args->get("--format").value_or(settings.format);
  settings.chat_template = args->get("--template").value_or(settings.chat_template);
  auto session = InferenceSession::open(*model, settings.seq_len, static_cast<int>(*batch));
  if (!session.ok()) return report_failure(io, as_json, session.status());
  auto opts = make_dataset_options(settings, (*session)->config());
  if (!opts.ok()) return report_failure(io, as_json, opts.status());
  auto ds = Dataset::load(*data, (*session)->tokenizer(), *opts);
  if (!ds.ok()) return report_failure(io, as_json, ds.status());
  auto r = (*session)->eval(*ds);
  if (!r.ok()) return report_failure(io, as_json, r.status());
  if (as_json) {
    io.out << json{{"loss", r->loss},
                   {"perplexity", r->perplexity},
                   {"targets", r->targets},
                   {"sequences", r->sequences}}
                  .dump()
           << std::endl;
  } else {
    io.out << "loss " << r->loss << "  perplexity " << r->perplexity << "  (" << r->targets
           << " tokens in " << r->sequences << " sequences)" << std::endl;
  }
  return 0;
}

namespace {

// The prompt as a chat model sees a user's message: rendered by `kind`'s template with the
// assistant's turn opened (every segment before the reply's first trained one), BOS/EOS segments
// as the tokenizer's ids. `stop` gets the template's end-of-turn token (the reply's closing text
// when it is one token: <|im_end|>, <|eot_id|>), which ends the reply as EOS does.
// The same with the model's own template: the prompt rendered with add_generation_prompt, and
// the stop the closing token of an empty reply's trained span (<|im_end|>, <|eot_id|>).
Result<std::vector<int32_t>> model_chat_prompt_ids(const ChatTemplateChoice& choice,
                                                   const std::string& prompt, const Tokenizer& tok,
                                                   std::string* text, std::vector<int32_t>* stop) {
  SPW_ASSIGN_OR_RETURN(auto renderer,
                       JinjaChatRenderer::start(choice.jinja, choice.special_tokens));
  const json user = {{"role", "user"}, {"content", prompt}};
  const json reply = {{"role", "assistant"}, {"content", ""}};
  const std::vector<ChatRenderRequest> requests = {
      {json::array({user}).dump(-1, ' ', false, json::error_handler_t::replace), "", true},
      {json::array({user, reply}).dump(-1, ' ', false, json::error_handler_t::replace), "", false}};
  SPW_ASSIGN_OR_RETURN(std::vector<RenderedChat> rendered, renderer->render(requests));
  for (const RenderedChat& r : rendered)
    if (!r.ok()) return invalid_argument(r.error_message());
  auto token = [&](const char* name) {
    auto it = choice.special_tokens.find(name);
    return it == choice.special_tokens.end() ? std::string() : it->second;
  };
  SPW_ASSIGN_OR_RETURN(std::vector<ChatSegment> segments,
                       chat_segments(rendered[0], token("bos_token"), token("eos_token")));
  std::vector<int32_t> ids;
  for (const ChatSegment& seg : segments) {
    std::optional<int32_t> special;
    if (seg.special == ChatSegment::Special::kBos) special = tok.bos_id();
    if (seg.special == ChatSegment::Special::kEos) special = tok.eos_id();
    if (seg.special != ChatSegment::Special::kNone) {
      if (special) ids.push_back(*special);
      continue;
    }
    SPW_ASSIGN_OR_RETURN(std::vector<int32_t> part, tok.encode(seg.text));
    ids.insert(ids.end(), part.begin(), part.end());
  }
  *text = rendered[0].text;
  const RenderedChat& empty = rendered[1];
  if (!empty.trained.empty()) {
    const auto [start, end] = empty.trained.back();
    const size_t b = utf8_offset_of(empty.text, start), e = utf8_offset_of(empty.text, end);
    auto closing = tok.encode(std::string_view(empty.text).substr(b, e - b));
    if (closing.ok() && !closing->empty()) stop->push_back(closing->back());
  }
  return ids;
}

Result<std::vector<int32_t>> chat_prompt_ids(ChatTemplateChoice choice, const std::string& prompt,
                                             const Tokenizer& tok, std::string* text,
                                             std::vector<int32_t>* stop) {
  if (choice.kind == ChatTemplateKind::kModel)
    return model_chat_prompt_ids(choice, prompt, tok, text, stop);
  std::vector<ChatMessage> msgs;
  if (!choice.default_system.empty()) msgs.push_back({ChatRole::kSystem, choice.default_system});
  msgs.push_back({ChatRole::kUser, prompt});
  msgs.push_back({ChatRole::kAssistant, ""});
  SPW_ASSIGN_OR_RETURN(std::vector<ChatSegment> segments, render_chat(choice.kind, msgs));
  std::vector<int32_t> ids;
  bool reply = false;
  for (const ChatSegment& seg : segments) {
    reply |= seg.trained;
    std::optional<int32_t> special;
    if (seg.special == ChatSegment::Special::kBos) special = tok.bos_id();
    if (seg.special == ChatSegment::Special::kEos) special = tok.eos_id();
    if (reply) {  // the empty reply's closing: its one special token is a stop
      if (special) continue;
      auto closing = tok.encode(seg.text);
      if (closing.ok() && closing->size() == 1) stop->push_back(closing->front());
      continue;
    }
    if (seg.special != ChatSegment::Special::kNone) {
      if (special) ids.push_back(*special);
      continue;
    }
    SPW_ASSIGN_OR_RETURN(std::vector<int32_t> part, tok.encode(seg.text));
    ids.insert(ids.end(), part.begin(), part.end());
    *text += seg.text;
  }
  return ids;
}

}  // namespace

int run_generate(const std::vector<std::string>& argv, CommandIo io) {
  auto args = parse_args(argv,
                         {"--model", "--tokenizer", "--prompt", "--max-new-tokens", "--temperature",
                          "--top-p", "--seed", "--chat", "--backend", "--logits"},
                         {"--json"});
  if (!args.ok()) return report_failure(io, false, args.status());
  const bool as_json = args->has("--json");
  auto model = args->require("--model");
  auto prompt = args->require("--prompt");
  if (!model.ok() || !prompt.ok())
    return report_failure(
        io, as_json,
        invalid_argument("usage: generate --model DIR --prompt TEXT [--tokenizer PATH] "
                         "[--max-new-tokens N] [--temperature T] [--top-p P] [--seed S] "
                         "[--chat TEMPLATE] [--backend B] [--logits FILE] [--json]"));
  GenerateOptions o;
  auto n = args->integer("--max-new-tokens", 64, 1, 4096);
  auto t = args->number("--temperature", 0.0);
  auto p = args->number("--top-p", 1.0);
  auto s = args->integer("--seed", 0, 0, int64_t{1} << 53);
  for (const Status* st : {&n.status(), &t.status(), &p.status(), &s.status()}) {
    if (!st->ok()) return report_failure(io, as_json, *st);
  }
  const auto shortest = [](double v) {
    std::ostringstream o;
    o << v;
    return o.str();
  };
  if (*n < 1 || *n > 4096)
    return report_failure(
        io, as_json,
        invalid_argument("--max-new-tokens must be in [1, 4096], got " + shortest(*n)));
  if (*t < 0 || *t > 100)
    return report_failure(
        io, as_json, invalid_argument("--temperature must be in [0, 100], got " + shortest(*t)));
  if (!(*p > 0 && *p <= 1))
    return report_failure(io, as_json,
                          invalid_argument("--top-p must be in (0, 1], got " + shortest(*p)));
  o.max_new_tokens = static_cast<int>(*n);
  o.temperature = static_cast<float>(*t);
  o.top_p = static_cast<float>(*p);
  o.seed = static_cast<uint64_t>(*s);
  // --chat: the template by name, or auto (the tokenizer's, else the model family's).
  std::optional<ChatTemplateKind> chat;
  if (auto name = args->get("--chat")) {
    auto kind = parse_chat_template_kind(*name);
    if (!kind.ok()) return report_failure(io, as_json, kind.status().with_context("--chat"));
    chat = *kind;
  }
  auto config = ModelConfig::load(*model);
  if (!config.ok()) return report_failure(io, as_json, config.status());
  auto session = InferenceSession::open(*model, std::min(config->max_position_embeddings, 1024), 1,
                                        0, args->get("--backend").value_or("auto"),
                                        args->get("--tokenizer").value_or(""));
  if (!session.ok()) return report_failure(io, as_json, session.status());
  const Tokenizer& tok = (*session)->tokenizer();
  std::string prompt_text = *prompt;
  std::string template_name, template_reason;
  Result<std::vector<int32_t>> ids = std::vector<int32_t>();
  if (chat) {
    const ChatTemplateChoice choice = choose_chat_template(*chat, &tok, config->model_type);
    template_name = chat_template_name(choice.kind);
    template_reason = choice.reason;
    prompt_text.clear();
    ids = chat_prompt_ids(choice, *prompt, tok, &prompt_text, &o.stop_ids);
  } else {
    ids = tok.encode_with_special(*prompt);
  }
  if (!ids.ok()) return report_failure(io, as_json, ids.status().with_context("--prompt"));
  const size_t prompt_len = ids->size();
  // A prompt that fills the context leaves no new token to generate: say so, not an empty answer.
  if (prompt_len >= static_cast<size_t>((*session)->max_seq()))
    return report_failure(
        io, as_json,
        invalid_argument(
            "the prompt is " + std::to_string(prompt_len) + " tokens, and this model holds " +
            std::to_string((*session)->max_seq()) + " (max_position_embeddings " +
            std::to_string(config->max_position_embeddings) +
            (config->max_position_embeddings > (*session)->max_seq() ? ", generate uses 1024"
                                                                     : "") +
            "): no room is left for new tokens; shorten the prompt"));
  // --logits: the prompt's logits [prompt tokens, vocab] as little-endian float32, for comparing
  // with another runtime (tests/gguf/roundtrip.py compares llama.cpp's).
  if (auto logits_path = args->get("--logits")) {
    auto logits = (*session)->logits(*ids);
    if (!logits.ok()) return report_failure(io, as_json, logits.status());
    Status st = write_file_atomic(*logits_path,
                                  std::string_view(reinterpret_cast<const char*>(logits->data()),
                                                   logits->size() * sizeof(float)));
    if (!st.ok()) return report_failure(io, as_json, st.with_context("--logits"));
  }
  auto out = (*session)->generate(*ids, o);
  if (!out.ok()) return report_failure(io, as_json, out.status());
  const std::vector<int32_t> fresh(out->begin() + prompt_len, out->end());
  const auto completion = tok.decode(fresh, true);
  if (!completion.ok()) return report_failure(io, as_json, completion.status());
  if (as_json) {
    json j = {{"prompt", *prompt},
              {"completion", *completion},
              {"ids", *out},
              {"prompt_tokens", prompt_len},
              {"new_tokens", fresh.size()},
              {"backend", (*session)->backend_description()}};
    if (chat)
      j.update({{"template", template_name},
                {"template_reason", template_reason},
                {"prompt_text", prompt_text}});
    // A byte-level model (builtin:bytes) can stop inside a UTF-8 sequence or emit one that is not
    // valid; JSON carries each invalid byte as U+FFFD, as Hugging Face's decode(errors="replace").
    io.out << j.dump(-1, ' ', false, json::error_handler_t::replace) << std::endl;
  } else {
    io.out << prompt_text << *completion << std::endl;
  }
  return 0;
}

int run_export(const std::vector<std::string>& argv, CommandIo io) {
  auto args =
      parse_args(argv, {"--checkpoint", "--out", "--tokenizer", "--format", "--type"}, {"--json"});
  if (!args.ok()) return report_failure(io, false, args.status());
  const bool as_json = args->has("--json");
  auto ckpt = args->require("--checkpoint");
  auto out = args->require("--out");
  if (!ckpt.ok() || !out.ok())
    return report_failure(io, as_json,
                          invalid_argument("usage: export --checkpoint DIR --out DIR "
                                           "[--tokenizer PATH] [--format hf|gguf] "
                                           "[--type f16|bf16|q8_0]"));
  // The format and, for GGUF, the tensor type: checked before the checkpoint is read.
  const std::string format = args->get("--format").value_or("hf");
  if (format != "hf" && format != "gguf")
    return report_failure(
        io, as_json,
        invalid_argument("--format must be hf (a Hugging Face folder) or gguf (llama.cpp, "
                         "Ollama), got '" +
                         format + "'"));
  if (format == "hf" && args->get("--type"))
    return report_failure(io, as_json,
                          invalid_argument("--type applies to --format gguf only; the Hugging "
                                           "Face export is float32"));
  auto gguf_type = parse_gguf_type(args->get("--type").value_or("f16"));
  if (!gguf_type.ok())
    return report_failure(io, as_json, gguf_type.status().with_context("--type"));
  auto config = ModelConfig::load(*ckpt);
  if (!config.ok()) return report_failure(io, as_json, config.status());
  auto state = ModelState::create(ParameterLayout::build(*config), false);
  if (!state.ok()) return report_failure(io, as_json, state.status());
  auto ts = load_checkpoint(*ckpt, **state);
  if (!ts.ok()) return report_failure(io, as_json, ts.status());
  // The tokenizer: given, or the one the run was trained with (the run folder's job.json); none
  // when the run's model folder has none (it trained on pre-tokenized data).
  std::string tok = args->get("--tokenizer").value_or("");
  std::string no_tokenizer_why;
  if (tok.empty()) {
    // The run folder's job.json, read as `train` read it (the job schema).
    const std::string job_path =
        (fs::path(*ckpt).parent_path().parent_path() / "job.json").string();
    auto run_job =
        fs::exists(job_path) ? load_job(job_path) : Result<TrainJob>(not_found(job_path));
    // model.tokenizer itself must exist (export_model says so when it does not); the model folder
    // may have none.
    const bool named = run_job.ok() && !run_job->tokenizer_path.empty();
    if (run_job.ok()) tok = named ? run_job->tokenizer_path : run_job->model_path;
    if (!run_job.ok() && run_job.status().code() != ErrorCode::kNotFound) {
      no_tokenizer_why = "no --tokenizer, and the run folder's job.json cannot be read (" +
                         run_job.status().message() + ")";
    } else if (tok.empty()) {
      no_tokenizer_why = "no --tokenizer and no run folder job.json naming one beside " + *ckpt;
    } else if (!named && !has_tokenizer_files(tok)) {
      no_tokenizer_why = "the run's model folder " + tok +
                         " has no tokenizer files (it trained on pre-tokenized data)";
      tok.clear();
    }
  }
  if (!no_tokenizer_why.empty()) {
    io.err << "spillway-worker: warning: " << no_tokenizer_why
           << ": the export holds no tokenizer files; pass --tokenizer PATH to include one"
           << std::endl;
  }
  if (format == "gguf") {
    auto r = export_gguf(**state, tok, *out, *gguf_type);
    if (!r.ok()) return report_failure(io, as_json, r.status());
    const std::string file = (fs::path(*out) / kGgufFileName).string();
    if (as_json) {
      io.out << json{{"out", *out},
                     {"step", ts->step},
                     {"format", "gguf"},
                     {"file", file},
                     {"type", gguf_type_label(*gguf_type)},
                     {"architecture", r->architecture},
                     {"tokenizer_model", r->vocab.model},
                     {"tokenizer_pre", r->vocab.pre},
                     {"chat_template", !r->vocab.chat_template.empty()},
                     {"tensors", r->tensors},
                     {"notes", r->notes}}
                    .dump()
             << std::endl;
    } else {
      io.out << "exported step " << ts->step << " to " << file << " ("
             << gguf_type_label(*gguf_type) << ", llama.cpp architecture " << r->architecture
             << ", tokenizer " << r->vocab.model << "/" << r->vocab.pre
             << (r->vocab.chat_template.empty() ? ", no chat template" : ", with chat template")
             << ") and an Ollama Modelfile beside it" << std::endl;
      for (const std::string& n : r->notes) io.out << "note: " << n << std::endl;
    }
    return 0;
  }
  Status st = export_model(**state, tok, *out);
  if (!st.ok()) return report_failure(io, as_json, st);
  if (as_json) {
    json j = {{"out", *out}, {"step", ts->step}, {"tokenizer", !tok.empty()}};
    if (tok.empty()) j["warning"] = "no tokenizer written: " + no_tokenizer_why;
    io.out << j.dump() << std::endl;
  } else {
    io.out << "exported step " << ts->step << " to " << *out
           << (tok.empty() ? " (no tokenizer written)" : "") << std::endl;
  }
  return 0;
}

int run_inspect(const std::vector<std::string>& argv, CommandIo io) {
  auto args = parse_args(argv, {"--model"}, {"--json"});
  if (!args.ok()) return report_failure(io, false, args.status());
  const bool as_json = args->has("--json");
  auto model = args->require("--model");
  if (!model.ok()) return report_failure(io, as_json, model.status());
  auto config = ModelConfig::load(*model);
  if (!config.ok()) return report_failure(io, as_json, config.status());
  auto store = TensorStore::open(*model);
  if (!store.ok()) return report_failure(io, as_json, store.status());
  ParameterLayout layout = ParameterLayout::build(*config);
  if (Status st = layout.check(*store); !st.ok()) return report_failure(io, as_json, st);
  ModelSummary s = summarize(layout, &*store);
  if (as_json) {
    io.out << json{{"architecture", s.architecture},   {"parameters", s.parameters},
                   {"layers", config->num_layers},     {"hidden_size", config->hidden_size},
                   {"vocab_size", config->vocab_size}, {"dtype", s.dtype},
                   {"bytes_on_disk", s.bytes_on_disk}, {"layer_parameters", s.layer_parameters}}
                  .dump()
           << std::endl;
  } else {
    io.out << s.to_string(*config);
  }
  return 0;
}

}  // namespace spillway::worker
