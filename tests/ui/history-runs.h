// addCompletedRun: a completed run in a test's run store, with a plan for History's and Compare's
// columns read from the run's events (the HBM state, the GPUs). One helper for the History tests
// that need such runs.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "history/run-store.h"

namespace spillway::ui {

// A completed run named `name` in `store`, its folder under `root`, its job `job_json`. Its plan
// event is `plan` (none when null): in the folder's events.jsonl, after a few lines of loading,
// or with `in_store` in runs.db's events. Returns the run's id ("" when it could not be made).
inline std::string addCompletedRun(RunStore& store, const std::string& root,
                                   const std::string& name, const std::string& job_json,
                                   const std::optional<nlohmann::json>& plan, bool in_store) {
  RunInfo info;
  info.id = RunStore::new_run_id();
  info.name = name;
  info.status = RunStatus::kCompleted;
  info.run_dir = root + "/" + info.id;
  info.job_json = job_json;
  std::filesystem::create_directories(info.run_dir);
  {
    std::ofstream f(info.run_dir + "/events.jsonl");
    f << R"({"type":"state","t":0,"state":"loading"})"
      << "\n"
      << R"({"type":"log","t":0.5,"level":"info","message":"the word plan, not an event"})"
      << "\n";
    if (plan && !in_store) {
      nlohmann::json line = *plan;
      line["type"] = "plan";
      line["t"] = 1.0;
      f << line.dump() << "\n";
    }
    f << R"({"type":"state","t":2,"state":"completed"})"
      << "\n";
  }
  auto id = store.create_run(info);
  EXPECT_TRUE(id.ok());
  if (plan && in_store) EXPECT_TRUE(store.add_event(*id, 1.0, "plan", plan->dump()).ok());
  return id.ok() ? *id : std::string();
}

}  // namespace spillway::ui
