#include "worker/commands.h"

#include <iterator>
#include <nlohmann/json.hpp>
#include <ostream>
#include <set>
#include <sstream>

#include "worker/bench-command.h"
#include "worker/chat-template-command.h"
#include "worker/job-keys-command.h"
#include "worker/model-commands.h"
#include "worker/models-command.h"
#include "worker/plan-command.h"
#include "worker/probe-command.h"
#include "worker/tokenize-command.h"
#include "worker/train-command.h"

namespace spillway::worker {

int report_failure(CommandIo io, bool json, const Status& st) {
  if (json)
    io.out
        << nlohmann::json{{"error", error_code_name(st.code())}, {"message", st.message()}}.dump()
        << std::endl;
  io.err << "spillway-worker: " << st.to_string() << "\n";
  return st.code() == ErrorCode::kInvalidArgument ? 2 : 1;
}

const std::vector<Command>& commands() {
  static const std::vector<Command> kCommands = {
      {"train", kTrainUsage,
       "Runs a training job; SIGTERM checkpoints and stops, SIGUSR1 checkpoints now. --resume "
       "continues the run that "
       "wrote the checkpoint (the same History row and folder); --run-id records the run under ID "
       "(its folder "
       "runs/ID unless the job names one), or names the run to resume. Past one machine, one "
       "worker per machine: --rank (0 on the machine at --rendezvous), --processes (the "
       "machines), --rendezvous HOST:PORT, or the environment of srun, mpirun or torchrun with "
       "SPILLWAY_RENDEZVOUS (or MASTER_ADDR and MASTER_PORT); each machine holds and checkpoints "
       "its share of the state into the run folder, which every machine must see; process 0 "
       "exports.",
       run_train},
      {"plan", "plan JOB.json [--measure N] [--machines M [--network-gbps G]] [--json]",
       "Bytes per tier (HBM, DRAM, SSD), whether the job fits, and the predicted step time; "
       "--measure N runs the job's first N "
       "steps in a throwaway run and prints measured against predicted (step time, peak HBM and "
       "DRAM, link bytes); SIGTERM or "
       "Ctrl-C stops the measure and removes that run. --machines M plans the job on M "
       "machines of this one's shape, one worker each, over a network of --network-gbps G "
       "(default 100).",
       run_plan},
      {"eval",
       "eval --model DIR --data FILE [--seq-len N] [--batch N] [--format F] [--template T] "
       "[--json]",
       "Mean loss and perplexity of a model on a dataset, read as training reads it (data.format, "
       "data.template).",
       run_eval},
      {"generate",
       "generate --model DIR --prompt TEXT [--tokenizer PATH] [--chat TEMPLATE] [--max-new-tokens "
       "N] [--temperature T] [--top-p P] [--seed S] [--backend B] [--logits FILE] [--json]",
       "Continues a prompt, or answers it as a chat (greedy at temperature 0).", run_generate},
      {"export",
       "export --checkpoint DIR --out DIR [--tokenizer PATH] [--format hf|gguf] "
       "[--type f16|bf16|q8_0] [--json]",
       "Writes a checkpoint as a Hugging Face model folder, or as model.gguf for llama.cpp "
       "with an Ollama Modelfile.",
       run_export},
      {"inspect", "inspect --model DIR [--json]",
       "Validates a model folder and prints its summary.", run_inspect},
      {"models", "models [--hub DIR] [--job FILE] [--backend auto|cpu|cuda] [--json]",
       "Lists the models of the Hugging Face cache ($HF_HUB_CACHE, $HF_HOME/hub or "
       "~/.cache/huggingface/hub) with family, size and whether the job (the built-in one "
       "without --job) fits this machine, and why not.",
       run_models},
      {"probe", "probe [--ssd-dir DIR] [--backend auto|cpu|cuda] [--gpu] [--json]",
       "Measures this machine: compute, memory and disk bandwidths; on a GPU its GEMM TFLOPS, the "
       "host link and the CPU AdamW. "
       "--gpu only says whether a usable CUDA GPU is there (name, memory, compute capability) or "
       "why not.",
       run_probe},
      {"bench",
       "bench --model SHAPE [--backend auto|cpu|cuda] [--micro-batch N] [--seq-len T] "
       "[--tokens-per-step K | --micro-batches M] "
       "[--weight-slots K] [--lm-head-chunk C] [--checkpoints device|host] "
       "[--device-checkpoint-layers L] [--saved-activation-layers S] [--mlp-recompute-layers R] "
       "[--hbm-state-blocks B] "
       "[--devices N] "
       "[--steps S] [--warmup W] [--ops] [--json]",
       "Times training steps of a random-initialised model shape (tinyllama-1.1b, llama3.2-3b, "
       "llama2-7b, llama2-13b, qwen2.5-7b, a preset or a "
       "model folder); N, T, K, M, the slots, C, L (layers whose checkpoints stay in HBM, -1 "
       "every one that fits), S (the last layers, whose activations stay in HBM: no recompute), R "
       "(the layers before those, which keep all but the MLP's intermediates), B "
       "(blocks whose state stays in HBM, -1 as many as fit, 0 none) and "
       "the GPUs of --devices (data parallel, M micro-batches each) may be "
       "comma-separated lists to sweep. --ops times every op of one more step: each op family's "
       "calls, device time, FLOPs or bytes and rate, against a device copy and a GEMM measured "
       "in the same process.",
       run_bench},
      {"tokenize", "tokenize --tokenizer PATH [--add-special-tokens]",
       "Reads JSON lines {\"text\": ...} on stdin and writes {\"ids\": [...]} lines.",
       run_tokenize},
      {"chat-template", "chat-template --model DIR [--add-generation-prompt] [--tools FILE]",
       "Reads JSON lines {\"messages\": [...]} on stdin and writes {\"text\": ..., \"trained\": "
       "[[start, end], ...]} lines (code-point offsets), rendered by the model's own chat template "
       "as training renders it; {\"error\": ...} when the template refuses one.",
       run_chat_template},
      {"job-keys", "job-keys [--markdown | --json]",
       "Prints every key of the job file with its default, unit, allowed values and meaning.",
       run_job_keys},
  };
  return kCommands;
}

static void print_help(std::ostream& out) {
  out << "usage: spillway-worker COMMAND [ARGS]\n\ncommands:\n";
  for (const auto& c : commands()) out << "  " << c.usage << "\n      " << c.summary << "\n";
}

// Whether `args` (after the command name) ask for the command's help: `--help` or `-h` where an
// option may stand, not as the value of an option that takes one ("--prompt --help" is a prompt).
// The value options are read off the usage line: "--model DIR" takes a value, "[--json]" does not.
static bool asks_for_help(const std::vector<std::string>& args, const std::string& usage) {
  std::set<std::string> value_options;
  std::istringstream words(usage);
  const std::vector<std::string> w{std::istream_iterator<std::string>(words), {}};
  for (size_t i = 0; i + 1 < w.size(); ++i) {
    std::string name = w[i];
    if (name.starts_with("[")) name.erase(0, 1);
    if (!name.starts_with("--") || name.ends_with("]")) continue;
    const std::string& next = w[i + 1];
    if (!next.starts_with("--") && !next.starts_with("[") && next != "|")
      value_options.insert(name);
  }
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--help" || args[i] == "-h") return true;
    if (value_options.count(args[i])) ++i;  // its value, whatever it reads
  }
  return false;
}

int run_worker(const std::vector<std::string>& argv, CommandIo io) {
  if (argv.empty() || argv[0] == "--help" || argv[0] == "-h" || argv[0] == "help") {
    print_help(argv.empty() ? io.err : io.out);
    return argv.empty() ? 2 : 0;
  }
  for (const auto& c : commands()) {
    if (argv[0] != c.name) continue;
    const std::vector<std::string> args(argv.begin() + 1, argv.end());
    if (asks_for_help(args, c.usage)) {
      io.out << "usage: spillway-worker " << c.usage << "\n  " << c.summary << "\n";
      return 0;
    }
    return c.run(args, io);
  }
  io.err << "spillway-worker: unknown command '" << argv[0] << "'\n";
  print_help(io.err);
  return 2;
}

}  // namespace spillway::worker
