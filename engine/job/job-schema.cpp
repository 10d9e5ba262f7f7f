#include "job/job-schema.h"

#include <cmath>
#include <cstdio>
#include <set>

#include "core/json-file.h"
#include "data/chat-template.h"
#include "data/dataset-reader.h"
#include "job/device-selection.h"

namespace spillway::job {
using nlohmann::json;

namespace {

constexpr double kMaxCount =
    1099511627776.0;  // 2^40 steps or intervals: far beyond any run, safe to multiply
constexpr double kMaxBytes = 1152921504606846976.0;         // 2^60 bytes (1 EiB): no tier is larger
constexpr double kMaxSeed = 18446744073709551615.0;         // 2^64 - 1 (as a double: 2^64)
constexpr int64_t kMaxMicroBatchTokens = int64_t{1} << 24;  // train.micro_batch_size x data.seq_len
constexpr int64_t kMaxStepSequences = int64_t{1}
                                      << 20;  // train.micro_batch_size x train.grad_accum

Range closed(double lo, double hi) {
  return {lo, hi, false, false};
}
Range upper_open(double lo, double hi) {
  return {lo, hi, false, true};
}
Range lower_open(double lo, double hi) {
  return {lo, hi, true, false};
}

JobKey key(std::string path, KeyType type, json def, std::string unit, std::string description) {
  JobKey k;
  k.path = std::move(path);
  k.type = type;
  k.default_value = std::move(def);
  k.unit = std::move(unit);
  k.description = std::move(description);
  return k;
}
JobKey required(JobKey k) {
  k.required = true;
  return k;
}
JobKey ranged(JobKey k, Range r) {
  k.range = r;
  return k;
}
JobKey choice(std::string path, std::vector<std::string> choices, std::string description) {
  JobKey k = key(std::move(path), KeyType::kChoice, choices.front(), "", std::move(description));
  k.choices = std::move(choices);
  return k;
}

// The table. Defaults are the worker's: a job file that leaves a key out runs as it always has.
std::vector<JobKey> build_table() {
  using T = KeyType;
  return {
      required(key("name", T::kString, nullptr, "", "The run's name in History.")),
      key("model.path", T::kPath, nullptr, "",
          "A Hugging Face model folder: config.json, model.safetensors (or a sharded index), "
          "tokenizer files; Llama, Mistral, Qwen2, Qwen3, Phi-3 / Phi-4 and Gemma 3 text "
          "(`Gemma3ForCausalLM`, model_type `gemma3_text`: gemma-3-1b, gemma-3-270m; the "
          "multimodal `Gemma3ForConditionalGeneration` checkpoints are refused with that reason) "
          "families (an unsupported architecture is refused with the supported ones and the "
          "closest named). Set this or model.init."),
      key("model.init", T::kModel, nullptr, "",
          "Instead of model.path: random initialisation (N(0, 0.02^2), norms 1: Gemma's (1 + w) "
          "norms 0) from a preset "
          "(llama-tiny, "
          "llama-byte-5m, llama-5m, llama-50m, llama-1b, llama-7b, llama-13b, llama-70b) or a "
          "config.json object."),
      ranged(key("model.seed", T::kInteger, 0, "", "Seed of model.init's random weights."),
             closed(0, kMaxSeed)),
      key("model.tokenizer", T::kPath, nullptr, "",
          "A tokenizer.json, tokenizer.model, a folder holding one, or builtin:bytes; unset: the "
          "model folder's. "
          "A model without one trains on pretokenized data only."),
      required(key("data.train", T::kPath, nullptr, "", "The training dataset file.")),
      key("data.eval", T::kPath, nullptr, "",
          "An evaluation dataset file; unset: data.eval_fraction is held out."),
      ranged(key("data.eval_fraction", T::kNumber, 0.0, "fraction",
                 "Without data.eval: the last fraction of the training sequences is held out for "
                 "evaluation."),
             upper_open(0, 1)),
      choice("data.format",
             {"auto", "text", "json", "alpaca", "sharegpt", "openai", "pretokenized"},
             "Dataset format: plain text, JSONL/JSON with \"text\", Alpaca, ShareGPT, OpenAI "
             "messages, or input_ids; "
             "auto detects it."),
      choice("data.template", {"auto", "model", "llama-2", "llama-3", "chatml", "alpaca", "plain"},
             "Chat template of instruction data, whose prompt tokens are not trained; auto and "
             "model: the model's own (rendered by jinja2 as transformers does), else the model "
             "family's hand-written one; a name forces that hand-written template."),
      ranged(key("data.seq_len", T::kInteger, 256, "tokens",
                 "Tokens per sequence; longer examples are cut."),
             closed(2, 1 << 20)),
      key("data.packing", T::kBool, true, "",
          "Instruction data: several whole conversations share a sequence, each with its own "
          "positions and attending only to itself (a block-diagonal mask), so that no compute "
          "goes to padding and the numbers are those of one conversation per sequence; false: "
          "one conversation per sequence, padded. Either way a conversation longer than "
          "data.seq_len is cut."),
      key("data.shuffle", T::kBool, true, "",
          "Shuffle the sequences each epoch, deterministically by data.seed."),
      ranged(key("data.seed", T::kInteger, 0, "", "Seed of the shuffle."), closed(0, kMaxSeed)),
      ranged(key("train.steps", T::kInteger, 0, "steps",
                 "Optimizer steps; 0: as many as train.epochs takes."),
             closed(0, kMaxCount)),
      ranged(key("train.epochs", T::kNumber, 1.0, "epochs",
                 "Passes over the training data, when train.steps is 0."),
             closed(0, 1e6)),
      ranged(key("train.micro_batch_size", T::kInteger, 1, "sequences",
                 "Sequences per micro-batch; the activations on the device grow with it."),
             closed(1, 1 << 16)),
      ranged(key("train.grad_accum", T::kInteger, 1, "micro-batches",
                 "Micro-batches per optimizer step; the layers stream once per step however many "
                 "there are."),
             closed(1, 1 << 16)),
      ranged(key("train.lr", T::kNumber, 1e-4, "",
                 "Peak learning rate (above 10 every model diverges)."),
             lower_open(0, 10)),
      choice("train.schedule", {"constant", "cosine", "linear"},
             "Learning-rate decay after the linear warmup."),
      ranged(
          key("train.warmup_steps", T::kInteger, 0, "steps", "Linear warmup from 0 to train.lr."),
          closed(0, kMaxCount)),
      ranged(key("train.min_lr_ratio", T::kNumber, 0.0, "fraction",
                 "Where the decay ends, as a fraction of train.lr."),
             closed(0, 1)),
      ranged(key("train.weight_decay", T::kNumber, 0.0, "",
                 "AdamW decoupled weight decay (torch.optim.AdamW), on tensors with ndim >= 2."),
             closed(0, 1e3)),
      ranged(key("train.beta1", T::kNumber, 0.9, "", "AdamW decay of the first moment."),
             upper_open(0, 1)),
      ranged(key("train.beta2", T::kNumber, 0.999, "", "AdamW decay of the second moment."),
             upper_open(0, 1)),
      ranged(key("train.eps", T::kNumber, 1e-8, "",
                 "AdamW epsilon, added to the root of the second moment."),
             closed(0, 1)),
      ranged(key("train.clip_grad_norm", T::kNumber, 1.0, "",
                 "Global L2 gradient clipping (torch.nn.utils.clip_grad_norm_); 0: off."),
             closed(0, 1e30)),
      ranged(key("train.seed", T::kInteger, 0, "",
                 "Recorded with the run; training draws no random numbers of its own (the shuffle "
                 "uses data.seed)."),
             closed(0, kMaxSeed)),
      ranged(key("train.eval_every", T::kInteger, 0, "steps",
                 "Evaluate every N steps, and before the first and after the last; 0: only after "
                 "the last."),
             closed(0, kMaxCount)),
      ranged(key("train.eval_batches", T::kInteger, 0, "batches",
                 "Batches per evaluation; 0: the whole eval set."),
             closed(0, kMaxCount)),
      ranged(key("train.checkpoint_every", T::kInteger, 0, "steps",
                 "Checkpoint every N steps, and after the last; 0: only after the last."),
             closed(0, kMaxCount)),
      ranged(key("train.keep_checkpoints", T::kInteger, 2, "checkpoints",
                 "How many of the newest scheduled checkpoints are kept; 0: all. One saved on "
                 "request (Save "
                 "checkpoint, SIGUSR1) is always kept."),
             closed(0, 1 << 20)),
      ranged(key("train.log_every", T::kInteger, 1, "steps", "A log line every N steps; 0: none."),
             closed(0, kMaxCount)),
      choice("placement.backend", {"auto", "cpu", "cuda"},
             "Compute backend: auto takes a usable GPU, else the CPU (the log says why); cuda "
             "fails without one."),
      key("placement.devices", T::kDevices, 1, "GPUs",
          "The GPUs to train on: \"all\", a count (the first N) or a list of indices ([0, 2]). "
          "Each step's micro-batches are spread over them (data parallel): tokens per step are "
          "micro_batch_size x grad_accum x seq_len per GPU, and the host keeps one copy of the "
          "weights and AdamW state."),
      ranged(key("placement.device_memory_bytes", T::kInteger, 0, "bytes",
                 "Device memory for the run; 0: all of the GPU's (unbounded on the CPU backend). "
                 "Checkpoints stay "
                 "on the device while they fit."),
             closed(0, kMaxBytes)),
      ranged(key("placement.weight_slots", T::kInteger, 2, "slots",
                 "Device slots through which the layers' weights stream (2: double buffering)."),
             closed(2, 64)),
      ranged(key("placement.hbm_state_blocks", T::kInteger, -1, "blocks",
                 "Blocks (embedding, layers, head, in that order) whose fp32 master weights, "
                 "gradients and AdamW moments stay in the GPU's memory, updated there by the GPU "
                 "(the same bits as the CPU's AdamW); -1: as many as fit beside the checkpoints, "
                 "or more where the plan predicts a faster step with some checkpoints moved to "
                 "host memory (none on the CPU backend); 0: none."),
             closed(-1, 1 << 20)),
      ranged(key("placement.saved_activation_layers", T::kInteger, -1, "layers",
                 "Layers (the last ones) that keep every activation their backward needs in the "
                 "GPU's memory from the forward to the backward and skip its recompute "
                 "(selective activation checkpointing: the same bits, about a quarter less of "
                 "their compute, each layer's activations of every micro-batch in HBM); -1: "
                 "as many as the plan predicts make the step faster, against the HBM state "
                 "tier's blocks and the checkpoints (none on the CPU backend); 0: none, every "
                 "layer recomputes."),
             closed(-1, 1 << 20)),
      ranged(key("placement.mlp_recompute_layers", T::kInteger, -1, "layers",
                 "Layers before placement.saved_activation_layers' that keep every activation "
                 "their backward needs but the MLP's gate, up and activation, which the backward "
                 "recomputes (two GEMMs): about half the memory of a saved layer for most of its "
                 "gain, more at long sequences; -1: the plan's choice, beside "
                 "placement.saved_activation_layers (none on the CPU backend); 0: none."),
             closed(-1, 1 << 20)),
      choice("placement.optimizer", {"dram", "ssd", "auto"},
             "Where the AdamW moments live: DRAM, the SSD (under placement.ssd_dir), or auto (per "
             "block: the first blocks' moments in DRAM up to placement.dram_cap_bytes, the rest on "
             "the SSD; the plan lists which)."),
      choice("placement.master", {"dram", "ssd", "auto"},
             "Where the fp32 master weights live: DRAM, the SSD (with the moments), or auto (DRAM, "
             "unless even without the moments DRAM cannot hold it)."),
      key("placement.ssd_dir", T::kPath, "", "",
          "A folder on a fast SSD for the state on the SSD tier; required when optimizer or master "
          "is ssd."),
      ranged(key("placement.dram_cap_bytes", T::kInteger, 0, "bytes",
                 "Most DRAM the run may use; 0: what is available."),
             closed(0, kMaxBytes)),
      key("output.run_dir", T::kPath, "", "",
          "The run folder; empty: $XDG_DATA_HOME/spillway/runs/<run id>."),
      key("output.db", T::kPath, "", "",
          "The run database; empty: $XDG_DATA_HOME/spillway/runs.db."),
  };
}

std::string number_text(double v) {
  if (v == kMaxSeed) return "18446744073709551615";
  char buf[64];
  if (v == std::floor(v) && std::abs(v) <= 9.3e18)
    std::snprintf(buf, sizeof(buf), "%.0f", v);
  else
    std::snprintf(buf, sizeof(buf), "%g", v);
  return buf;
}

// A value as an error quotes it: its start only, a value may be megabytes long.
std::string quoted(const json& v) {
  return describe_json(v);
}

// A key of the user's as an error names it: as is when it looks like a key, else quoted (it may be
// megabytes long or hold a newline).
std::string key_text(const std::string& key) {
  const bool plain =
      !key.empty() && key.size() <= 60 &&
      key.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-") ==
          std::string::npos;
  return plain ? key : quote_for_message(key);
}

// Whether the JSON integer `v` lies in `r`, whose bounds are whole numbers; 2^64 - 1 (kMaxSeed)
// stands for "any unsigned 64-bit value".
bool integer_in(const Range& r, const json& v) {
  const auto lo = static_cast<int64_t>(r.lo);  // small: -1, 0, 1, 2
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    // A negative bound is below every unsigned value (cast, -1 was above them all: 0 was refused).
    const bool above =
        lo < 0 || (r.lo_open ? u > static_cast<uint64_t>(lo) : u >= static_cast<uint64_t>(lo));
    if (r.hi >= kMaxSeed) return above;
    const auto hi = static_cast<uint64_t>(r.hi);
    return above && (r.hi_open ? u < hi : u <= hi);
  }
  const int64_t x = v.get<int64_t>();
  if (x < lo || (r.lo_open && x == lo)) return false;
  if (r.hi >= kMaxSeed || x < 0) return true;
  const auto hi = static_cast<uint64_t>(r.hi);
  return r.hi_open ? static_cast<uint64_t>(x) < hi : static_cast<uint64_t>(x) <= hi;
}

bool type_matches(const JobKey& k, const json& v) {
  switch (k.type) {
    case KeyType::kString:
    case KeyType::kPath:
    case KeyType::kChoice:
      return v.is_string();
    case KeyType::kInteger:
      return v.is_number_integer();
    case KeyType::kNumber:
      return v.is_number();
    case KeyType::kBool:
      return v.is_boolean();
    case KeyType::kModel:
      return v.is_string() || v.is_object();
    case KeyType::kDevices:
      return v.is_string() || v.is_number_integer() || v.is_array();
  }
  return false;
}

// The value as default text in the tables: 256, 0.0001, "auto", none.
std::string default_text(const JobKey& k) {
  const json& d = k.default_value;
  if (k.required) return "required";
  if (d.is_null()) return "unset";
  if (d.is_string()) return d.get<std::string>().empty() ? "\"\"" : d.get<std::string>();
  if (d.is_number_float()) return number_text(d.get<double>());
  return d.dump();
}

std::string escape_cell(std::string s) {
  std::string out;
  for (char c : s) {
    if (c == '|')
      out += "\\|";
    else
      out += c;
  }
  return out;
}

}  // namespace

const char* key_type_name(KeyType type) {
  switch (type) {
    case KeyType::kString:
      return "a string";
    case KeyType::kPath:
      return "a path (a string)";
    case KeyType::kInteger:
      return "an integer";
    case KeyType::kNumber:
      return "a number";
    case KeyType::kBool:
      return "true or false";
    case KeyType::kChoice:
      return "a string";
    case KeyType::kModel:
      return "a preset name or a config.json object";
    case KeyType::kDevices:
      return "\"all\", a count of GPUs or a list of GPU indices";
  }
  return "a value";
}

bool Range::contains(double v) const {
  if (!std::isfinite(v)) return false;
  if (lo_open ? !(v > lo) : !(v >= lo)) return false;
  return hi_open ? v < hi : v <= hi;
}

std::string Range::to_string() const {
  return std::string(lo_open ? "(" : "[") + number_text(lo) + ", " + number_text(hi) +
         (hi_open ? ")" : "]");
}

std::string JobKey::section() const {
  const size_t dot = path.find('.');
  return dot == std::string::npos ? "" : path.substr(0, dot);
}

std::string JobKey::name() const {
  const size_t dot = path.find('.');
  return dot == std::string::npos ? path : path.substr(dot + 1);
}

std::string JobKey::allowed() const {
  switch (type) {
    case KeyType::kInteger:
    case KeyType::kNumber:
      return range.to_string();
    case KeyType::kBool:
      return "true, false";
    case KeyType::kChoice: {
      std::string s;
      for (const auto& c : choices) s += (s.empty() ? "" : ", ") + c;
      return s;
    }
    case KeyType::kModel:
      return "a preset or a config.json object";
    case KeyType::kDevices:
      return "all, a count, a list of indices";
    case KeyType::kPath:
      return "a path";
    case KeyType::kString:
      return "text";
  }
  return "";
}

const std::vector<std::string>& job_sections() {
  static const std::vector<std::string> kSections = {"model", "data", "train", "placement",
                                                     "output"};
  return kSections;
}

const std::vector<JobKey>& job_keys() {
  static const std::vector<JobKey> kKeys = build_table();
  return kKeys;
}

const JobKey* find_job_key(std::string_view path) {
  for (const auto& k : job_keys()) {
    if (k.path == path) return &k;
  }
  return nullptr;
}

Status check_value(const JobKey& k, const json& v) {
  if (!type_matches(k, v))
    return invalid_argument("job.json: " + k.path + ": expected " + key_type_name(k.type) +
                            ", got " + quoted(v));
  if (k.type == KeyType::kInteger) {
    // Compared exactly as integers (the bounds are whole numbers): out-of-range values used to
    // wrap when read into an int.
    if (!integer_in(k.range, v))
      return invalid_argument("job.json: " + k.path + " must be in " + k.range.to_string() +
                              ", got " + quoted(v));
  } else if (k.type == KeyType::kNumber) {
    const double x = v.get<double>();
    if (!k.range.contains(x))
      return invalid_argument("job.json: " + k.path + " must be in " + k.range.to_string() +
                              ", got " + number_text(x));
  } else if (k.type == KeyType::kDevices) {
    if (auto d = parse_device_selection(v); !d.ok()) return d.status();
  } else if (k.type == KeyType::kChoice) {
    const std::string s = v.get<std::string>();
    // The engine's readers take aliases ("messages", "jsonl", "qwen"): accept what they accept.
    if (k.path == "data.format") {
      if (auto f = parse_dataset_format(s); !f.ok())
        return f.status().with_context("job.json: data.format");
      return {};
    }
    if (k.path == "data.template") {
      if (auto t = parse_chat_template_kind(s); !t.ok())
        return t.status().with_context("job.json: data.template");
      return {};
    }
    for (const auto& c : k.choices) {
      if (s == c) return {};
    }
    return invalid_argument("job.json: " + k.path + ": " + quote_name(s) + " is not one of " +
                            k.allowed());
  }
  return {};
}

Result<json> resolve_job(const json& input) {
  if (!input.is_object()) return invalid_argument("job.json: expected a JSON object");
  // Unknown top-level keys and sections that are not objects first: they name what was mistyped.
  std::set<std::string> top = {"name"};
  for (const auto& s : job_sections()) top.insert(s);
  for (auto it = input.begin(); it != input.end(); ++it) {
    if (!top.count(it.key())) {
      std::string list;
      for (const auto& k : top) list += (list.empty() ? "" : ", ") + k;
      return invalid_argument("job.json: unknown key job." + key_text(it.key()) +
                              " (known keys: " + list + ")");
    }
  }
  json j = json::object();
  if (auto it = input.find("name"); it != input.end() && !it->is_null()) {
    SPW_RETURN_IF_ERROR(check_value(*find_job_key("name"), *it));
    j["name"] = *it;
  } else {
    return invalid_argument("job.json: missing required key name");
  }
  if (j["name"].get<std::string>().empty())
    return invalid_argument("job.json: name must not be empty");
  for (const std::string& section : job_sections()) {
    auto it = input.find(section);
    const bool given = it != input.end() && !it->is_null();
    if (!given && section == "model")
      return invalid_argument(
          "job.json: missing required key model ({\"path\": DIR} or {\"init\": PRESET})");
    if (!given && section == "data")
      return invalid_argument("job.json: missing required key data ({\"train\": FILE, ...})");
    if (given && !it->is_object())
      return invalid_argument("job.json: job." + section + ": expected an object, got " +
                              quoted(*it));
    const json in = given ? *it : json::object();
    json out = json::object();
    std::set<std::string> known;
    for (const JobKey& k : job_keys()) {
      if (k.section() != section) continue;
      known.insert(k.name());
      auto v = in.find(k.name());
      if (v == in.end() || v->is_null()) {
        if (k.required) return invalid_argument("job.json: missing required key " + k.path);
        out[k.name()] = k.default_value;
        continue;
      }
      SPW_RETURN_IF_ERROR(check_value(k, *v));
      out[k.name()] = *v;
    }
    for (auto v = in.begin(); v != in.end(); ++v) {
      if (!known.count(v.key())) {
        std::string list;
        for (const auto& k : known) list += (list.empty() ? "" : ", ") + k;
        return invalid_argument("job.json: unknown key " + section + "." + key_text(v.key()) +
                                " (known keys: " + list + ")");
      }
    }
    j[section] = std::move(out);
  }
  // The rules that tie keys together.
  const json& m = j["model"];
  if (m["path"].is_null() == m["init"].is_null())
    return invalid_argument(
        "job.json: model needs exactly one of \"path\" (a Hugging Face folder) or \"init\" (a "
        "preset name or a config object)");
  if (j["train"]["steps"].get<int64_t>() == 0 && j["train"]["epochs"].get<double>() == 0)
    return invalid_argument("job.json: set train.steps or train.epochs");
  // Each key has its range; their products have theirs too, far above any real job, so that every
  // size the engine computes from them (a micro-batch's tokens in an int, a step's rows, their
  // bytes) stays exact: 65,536 sequences of 2^20 tokens wrapped to 0 tokens and a plan that fit
  // (issue 15).
  const int64_t mb = j["train"]["micro_batch_size"].get<int64_t>(),
                seq = j["data"]["seq_len"].get<int64_t>(),
                accum = j["train"]["grad_accum"].get<int64_t>();
  if (mb * seq > kMaxMicroBatchTokens)
    return invalid_argument(
        "job.json: train.micro_batch_size x data.seq_len is " + std::to_string(mb * seq) +
        " tokens a micro-batch, more than " + std::to_string(kMaxMicroBatchTokens) +
        "; lower train.micro_batch_size (and raise train.grad_accum) or data.seq_len");
  if (mb * accum > kMaxStepSequences)
    return invalid_argument("job.json: train.micro_batch_size x train.grad_accum is " +
                            std::to_string(mb * accum) + " sequences a step, more than " +
                            std::to_string(kMaxStepSequences) + "; lower one of them");
  const json& p = j["placement"];
  if ((p["optimizer"] == "ssd" || p["master"] == "ssd") && p["ssd_dir"].get<std::string>().empty())
    return invalid_argument(
        "job.json: placement.ssd_dir is required when optimizer or master is on \"ssd\"");
  return j;
}

std::string job_keys_markdown() {
  std::string out =
      "| key | type | default | unit | allowed | description |\n|---|---|---|---|---|---|\n";
  for (const JobKey& k : job_keys()) {
    std::string type = k.type == KeyType::kInteger   ? "integer"
                       : k.type == KeyType::kNumber  ? "number"
                       : k.type == KeyType::kBool    ? "bool"
                       : k.type == KeyType::kPath    ? "path"
                       : k.type == KeyType::kModel   ? "string or object"
                       : k.type == KeyType::kDevices ? "string, integer or list"
                                                     : "string";
    out += "| `" + k.path + "` | " + type + " | " + escape_cell(default_text(k)) + " | " + k.unit +
           " | " +
           escape_cell(k.type == KeyType::kString || k.type == KeyType::kPath ||
                               k.type == KeyType::kModel
                           ? ""
                           : k.allowed()) +
           " | " + escape_cell(k.description) + " |\n";
  }
  return out;
}

std::string job_keys_text() {
  std::string out;
  for (const JobKey& k : job_keys()) {
    out += k.path + " (" + default_text(k);
    if (!k.unit.empty()) out += ", " + k.unit;
    if (k.type != KeyType::kString && k.type != KeyType::kPath && k.type != KeyType::kModel)
      out += "; " + k.allowed();
    out += ")\n    " + k.description + "\n";
  }
  return out;
}

}  // namespace spillway::job
