#include "history/schema.h"

#include <gtest/gtest.h>

#include <vector>

#include "history/run-store.h"
#include "test-data.h"

namespace spillway {
namespace {

TEST(Schema, MigratesFromEmptyAndReopens) {
  testing::TempDir dir;
  std::string path = dir.file("sub/dir/runs.db");  // parent directories are created
  {
    auto store = RunStore::open(path);
    ASSERT_TRUE(store.ok()) << store.status().to_string();
    auto v = (*store)->schema_version();
    ASSERT_TRUE(v.ok());
    EXPECT_EQ(*v, static_cast<int>(run_store_migrations().size()));
    RunInfo info;
    info.name = "kept";
    info.status = RunStatus::kCompleted;
    ASSERT_TRUE((*store)->create_run(info).ok());
  }
  {
    auto store = RunStore::open(path);
    ASSERT_TRUE(store.ok()) << store.status().to_string();
    auto runs = (*store)->list_runs();
    ASSERT_TRUE(runs.ok());
    ASSERT_EQ(runs->size(), 1u);
    EXPECT_EQ((*runs)[0].name, "kept");
  }
  // WAL mode persists in the file.
  auto db = SqliteDb::open(path);
  ASSERT_TRUE(db.ok());
  auto stmt = db->prepare("PRAGMA journal_mode");
  ASSERT_TRUE(stmt.ok());
  ASSERT_TRUE(*stmt->step());
  EXPECT_EQ(stmt->column_text(0), "wal");
}

TEST(Schema, AppliesOnlyNewMigrations) {
  testing::TempDir dir;
  auto db = SqliteDb::open(dir.file("m.db"));
  ASSERT_TRUE(db.ok());
  std::vector<Migration> list = {{"one", "CREATE TABLE a (x INTEGER);"}};
  auto before = apply_migrations(*db, list);
  ASSERT_TRUE(before.ok());
  EXPECT_EQ(*before, 0);
  list.push_back(
      {"two", "ALTER TABLE a ADD COLUMN y TEXT; INSERT INTO a (x, y) VALUES (1, 'two');"});
  before = apply_migrations(*db, list);
  ASSERT_TRUE(before.ok()) << before.status().to_string();
  EXPECT_EQ(*before, 1);
  EXPECT_EQ(*db->query_int("PRAGMA user_version"), 2);
  // Re-running is a no-op (the INSERT in "two" does not run again).
  ASSERT_TRUE(apply_migrations(*db, list).ok());
  EXPECT_EQ(*db->query_int("SELECT COUNT(*) FROM a"), 1);
}

TEST(Schema, VersionOneDatabaseGainsTheStepFiguresAndKeepsItsRuns) {
  testing::TempDir dir;
  const std::string path = dir.file("runs.db");
  {
    // A database as the first release wrote it: migration 1 only, one run.
    auto db = SqliteDb::open(path);
    ASSERT_TRUE(db.ok());
    ASSERT_TRUE(apply_migrations(*db, run_store_migrations().first(1)).ok());
    ASSERT_TRUE(db->exec("INSERT INTO runs (id, name, status, created_at) VALUES ('old', 'kept', "
                         "'completed', 1.0)")
                    .ok());
  }
  auto store = RunStore::open(path);
  ASSERT_TRUE(store.ok()) << store.status().to_string();
  EXPECT_EQ(*(*store)->schema_version(), static_cast<int>(run_store_migrations().size()));
  auto run = (*store)->get_run("old");
  ASSERT_TRUE(run.ok()) << run.status().to_string();
  EXPECT_EQ(run->name, "kept");
  EXPECT_EQ(run->predicted_json, "{}");
  EXPECT_EQ(run->measured_json, "{}");
}

TEST(Schema, FailedMigrationRollsBack) {
  testing::TempDir dir;
  auto db = SqliteDb::open(dir.file("m.db"));
  ASSERT_TRUE(db.ok());
  std::vector<Migration> list = {{"one", "CREATE TABLE a (x INTEGER);"},
                                 {"broken", "CREATE TABLE b (x INTEGER); THIS IS NOT SQL;"}};
  auto r = apply_migrations(*db, list);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("migration 2"), std::string::npos) << r.status().to_string();
  EXPECT_EQ(*db->query_int("PRAGMA user_version"), 1);
  EXPECT_EQ(*db->query_int("SELECT COUNT(*) FROM sqlite_master WHERE name = 'b'"), 0);
}

TEST(Schema, NewerDatabaseIsRefused) {
  testing::TempDir dir;
  std::string path = dir.file("runs.db");
  {
    auto db = SqliteDb::open(path);
    ASSERT_TRUE(db.ok());
    ASSERT_TRUE(db->exec("PRAGMA user_version = 999").ok());
  }
  auto store = RunStore::open(path);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), ErrorCode::kUnsupported);
}

// A damaged header's user_version can be negative; the migrations were indexed with it (fuzzing
// found the out-of-bounds read under UBSan). The file is refused and left as it was.
TEST(Schema, NegativeVersionIsDamagedAndLeftAlone) {
  testing::TempDir dir;
  const std::string path = dir.file("runs.db");
  {
    auto db = SqliteDb::open(path);
    ASSERT_TRUE(db.ok());
    ASSERT_TRUE(db->exec("CREATE TABLE t (x INTEGER); PRAGMA user_version = -7").ok());
  }
  auto store = RunStore::open(path);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), ErrorCode::kCorrupt);
  EXPECT_EQ(store.status().message(),
            path +
                " is damaged (its schema version is -7, which no Spillway writes); Spillway leaves "
                "it as it "
                "is: move it aside (History then starts a new one) or restore it from a backup");
  auto db = SqliteDb::open(path);
  ASSERT_TRUE(db.ok());
  EXPECT_EQ(*db->query_int("PRAGMA user_version"), -7);
  auto mode = db->prepare("PRAGMA journal_mode");
  ASSERT_TRUE(mode.ok() && *mode->step());
  EXPECT_EQ(mode->column_text(0), "delete");  // not switched to WAL
  auto r = apply_migrations(*db, run_store_migrations());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kCorrupt) << r.status().to_string();
}

TEST(Schema, NotADatabaseIsCorrupt) {
  testing::TempDir dir;
  std::string path = dir.file("runs.db");
  FILE* f = std::fopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  std::string junk(8192, 'x');
  std::fwrite(junk.data(), 1, junk.size(), f);
  std::fclose(f);
  auto store = RunStore::open(path);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), ErrorCode::kCorrupt) << store.status().to_string();
}

}  // namespace
}  // namespace spillway
