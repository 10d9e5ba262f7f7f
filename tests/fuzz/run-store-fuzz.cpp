// Fuzz target: a runs.db file, opened as the worker and the GUI open the run history
// (RunStore::open: schema check, migrations, reconcile of dead runs) and then read entirely: the
// run list with a filter, and each run's row, metrics, samples, events, checkpoints and evals,
// then one user edit. A corrupt database must be an error value, never a crash.
//
// Seeds: a database written here through RunStore with runs of every status and rows of every
// table, and an empty one.
#include <cstdint>
#include <filesystem>

#include "fuzz-util.h"
#include "history/run-store.h"

using namespace spillway;

namespace {

void write_seed(const std::string& name, int runs) {
  const std::string dir = fuzz::fresh_dir("seed");
  const std::string path = dir + "/runs.db";
  {
    auto store = RunStore::open(path);
    if (!store.ok()) return;
    for (int i = 0; i < runs; ++i) {
      RunInfo info;
      info.name = "run " + std::to_string(i);
      info.status = i % 2 ? RunStatus::kCompleted : RunStatus::kRunning;
      info.pid = 999999 + i;  // not alive: reconcile marks it interrupted on open
      info.job_json = R"({"name": "x", "train": {"steps": 10}})";
      info.model_name = "stories260K";
      info.tags = {"a", "b,c"};
      info.notes = "notes";
      auto id = (*store)->create_run(info);
      if (!id.ok()) continue;
      MetricRow m;
      m.step = 1, m.loss = 2.5, m.lr = 1e-3, m.tokens = 1024, m.t_s = 0.5;
      (void)(*store)->add_metric(*id, m);
      (void)(*store)->add_sample(*id, 0.1, R"({"rss_bytes": 1000})");
      (void)(*store)->add_event(*id, 0.2, "log", R"({"message": "hi"})");
      CheckpointRow c;
      c.step = 1, c.path = "/tmp/x", c.bytes = 100;
      (void)(*store)->add_checkpoint(*id, c);
      EvalRow e;
      e.step = 1, e.loss = 2.0;
      (void)(*store)->add_eval(*id, e);
      if (i % 2) (void)(*store)->finish_run(*id, RunStatus::kCompleted, {2.0, 1, 1024, ""});
    }
  }
  fuzz::add_seed(name, fuzz::slurp(path));
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  if (!fuzz::seeds_out()) return 0;
  write_seed("runs-3", 3);
  write_seed("empty", 0);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string dir = fuzz::fresh_dir("in");
  for (const char* stale : {"/runs.db-wal", "/runs.db-shm", "/runs.db-journal"})
    std::remove((dir + stale).c_str());
  const std::string path = fuzz::write_input(dir, "runs.db", data, size);
  RunStoreOptions options;
  options.busy_timeout_ms = 0;
  auto store = RunStore::open(path, options);
  if (!store.ok()) return 0;
  RunStore& s = **store;
  (void)s.schema_version();
  RunFilter filter;
  filter.text = "run";
  (void)s.list_runs(filter);
  auto runs = s.list_runs();
  if (!runs.ok()) return 0;
  for (size_t i = 0; i < runs->size() && i < 8; ++i) {
    const std::string& id = (*runs)[i].id;
    (void)s.get_run(id);
    (void)s.metrics(id);
    (void)s.samples(id);
    (void)s.events(id);
    (void)s.checkpoints(id);
    (void)s.evals(id);
  }
  if (!runs->empty()) (void)s.set_notes(runs->front().id, "edited");
  return 0;
}
