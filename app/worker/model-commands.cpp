#include "worker/model-commands.h"

#include <filesystem>
#include <ostream>

#include <nlohmann/json.hpp>

#include "data/dataset.h"
#include "data/dataset-options.h"
#include "model/parameter-layout.h"
#include "train/checkpoint.h"
#include "train/export.h"
#include "train/inference.h"
#include "worker/args.h"
#include "worker/job-file.h"

namespace spillway::worker {
namespace fs = std::filesystem;
using nlohmann::json;

int run_eval(const std::vector<std::string>& argv, CommandIo io) {
  auto args = parse_args(argv, {"--model", "--data", "--seq-len", "--batch", "--format", "--template"}, {"--json"});
  if (!args.ok()) return report_failure(io, false, args.status());
  const bool as_json = args->has("--json");
  auto model = args->require("--model");
  auto data = args->require("--data");
  if (!model.ok() || !data.ok())
    return report_failure(io, as_json,
                          invalid_argument("usage: eval --model DIR --data FILE [--seq-len N] [--batch N] [--format F] "
                                           "[--template T] [--json]"));
  // The job file's defaults for what eval shares with training (data.seq_len, data.format, data.template).
  DataSettings settings;
  auto seq = args->number("--seq-len", settings.seq_len);
  auto batch = args->number("--batch", 4);
  if (!seq.ok() || !batch.ok()) return report_failure(io, as_json, !seq.ok() ? seq.status() : batch.status());
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
    io.out << json{{"loss", r->loss}, {"perplexity", r->perplexity}, {"targets", r->targets}, {"sequences", r->sequences}}.dump() << std::endl;
  } else {
    io.out << "loss " << r->loss << "  perplexity " << r->perplexity << "  (" << r->targets << " tokens in " << r->sequences
           << " sequences)" << std::endl;
  }
  return 0;
}

int run_generate(const std::vector<std::string>& argv, CommandIo io) {
  auto args = parse_args(argv, {"--model", "--prompt", "--max-new-tokens", "--temperature", "--top-p", "--seed"}, {"--json"});
  if (!args.ok()) return report_failure(io, false, args.status());
  const bool as_json = args->has("--json");
  auto model = args->require("--model");
  auto prompt = args->require("--prompt");
  if (!model.ok() || !prompt.ok())
    return report_failure(io, as_json, invalid_argument("usage: generate --model DIR --prompt TEXT [--max-new-tokens N] [--temperature T] [--top-p P] [--seed S]"));
  GenerateOptions o;
  auto n = args->number("--max-new-tokens", 64);
  auto t = args->number("--temperature", 0.0);
  auto p = args->number("--top-p", 1.0);
  auto s = args->number("--seed", 0);
  for (const auto* r : {&n, &t, &p, &s}) {
    if (!r->ok()) return report_failure(io, as_json, r->status());
  }
  o.max_new_tokens = static_cast<int>(*n);
  o.temperature = static_cast<float>(*t);
  o.top_p = static_cast<float>(*p);
  o.seed = static_cast<uint64_t>(*s);
  auto config = ModelConfig::load(*model);
  if (!config.ok()) return report_failure(io, as_json, config.status());
  auto session = InferenceSession::open(*model, std::min(config->max_position_embeddings, 1024), 1);
  if (!session.ok()) return report_failure(io, as_json, session.status());
  auto ids = (*session)->tokenizer().encode_with_special(*prompt);
  if (!ids.ok()) return report_failure(io, as_json, ids.status().with_context("--prompt"));
  const size_t prompt_len = ids->size();
  auto out = (*session)->generate(*ids, o);
  if (!out.ok()) return report_failure(io, as_json, out.status());
  const std::vector<int32_t> fresh(out->begin() + prompt_len, out->end());
  const auto completion = (*session)->tokenizer().decode(fresh, true);
  if (!completion.ok()) return report_failure(io, as_json, completion.status());
  if (as_json) io.out << json{{"prompt", *prompt}, {"completion", *completion}, {"ids", *out}}.dump() << std::endl;
  else io.out << *prompt << *completion << std::endl;
  return 0;
}

int run_export(const std::vector<std::string>& argv, CommandIo io) {
  auto args = parse_args(argv, {"--checkpoint", "--out", "--tokenizer"}, {"--json"});
  if (!args.ok()) return report_failure(io, false, args.status());
  const bool as_json = args->has("--json");
  auto ckpt = args->require("--checkpoint");
  auto out = args->require("--out");
  if (!ckpt.ok() || !out.ok()) return report_failure(io, as_json, invalid_argument("usage: export --checkpoint DIR --out DIR [--tokenizer PATH]"));
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
    const std::string job_path = (fs::path(*ckpt).parent_path().parent_path() / "job.json").string();
    auto run_job = fs::exists(job_path) ? load_job(job_path) : Result<TrainJob>(not_found(job_path));
    // model.tokenizer itself must exist (export_model says so when it does not); the model folder
    // may have none.
    const bool named = run_job.ok() && !run_job->tokenizer_path.empty();
    if (run_job.ok()) tok = named ? run_job->tokenizer_path : run_job->model_path;
    if (!run_job.ok() && run_job.status().code() != ErrorCode::kNotFound) {
      no_tokenizer_why = "no --tokenizer, and the run folder's job.json cannot be read (" + run_job.status().message() + ")";
    } else if (tok.empty()) {
      no_tokenizer_why = "no --tokenizer and no run folder job.json naming one beside " + *ckpt;
    } else if (!named && !has_tokenizer_files(tok)) {
      no_tokenizer_why = "the run's model folder " + tok + " has no tokenizer files (it trained on pre-tokenized data)";
      tok.clear();
    }
  }
  if (!no_tokenizer_why.empty()) {
    io.err << "spillway-worker: warning: " << no_tokenizer_why
           << ": the export holds no tokenizer files; pass --tokenizer PATH to include one" << std::endl;
  }
  Status st = export_model(**state, tok, *out);
  if (!st.ok()) return report_failure(io, as_json, st);
  if (as_json) {
    json j = {{"out", *out}, {"step", ts->step}, {"tokenizer", !tok.empty()}};
    if (tok.empty()) j["warning"] = "no tokenizer written: " + no_tokenizer_why;
    io.out << j.dump() << std::endl;
  } else {
    io.out << "exported step " << ts->step << " to " << *out << (tok.empty() ? " (no tokenizer written)" : "") << std::endl;
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
    io.out << json{{"architecture", s.architecture}, {"parameters", s.parameters}, {"layers", config->num_layers},
                   {"hidden_size", config->hidden_size}, {"vocab_size", config->vocab_size}, {"dtype", s.dtype},
                   {"bytes_on_disk", s.bytes_on_disk}, {"layer_parameters", s.layer_parameters}}
                  .dump()
           << std::endl;
  } else {
    io.out << s.to_string(*config);
  }
  return 0;
}

}  // namespace spillway::worker
