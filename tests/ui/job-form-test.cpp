// The New run form and the job schema (engine/job/job-schema): every field names a key of the job
// file, starts at that key's default, takes its range or choices and shows its description; a
// form left as it is writes the job a file without those keys would run.
#include <gtest/gtest.h>

#include <QAbstractSpinBox>
#include <QCheckBox>
#include <QComboBox>
#include <QDoubleSpinBox>
#include <QLineEdit>
#include <QPushButton>
#include <QSpinBox>
#include <QTableView>
#include <QTest>
#include <climits>
#include <fstream>
#include <limits>
#include <set>

#include "HistoryPage.h"
#include "IntegerSpinBox.h"
#include "JobForm.h"
#include "JobSettings.h"
#include "MainWindow.h"
#include "NewRunPage.h"
#include "PlacementForm.h"
#include "history-wait.h"
#include "history/run-store.h"
#include "job/job-schema.h"
#include "ui-test-util.h"

namespace spillway::ui {
namespace {
using spillway::testing::TempDir;

// The input fields a person fills in: not the line edits inside spin boxes and combo boxes, nor
// an input that is not part of the job (Measure's step count).
bool isField(QWidget* w) {
  if (w->property(JobForm::kNotInJobProperty).toBool()) return false;
  if (!qobject_cast<QAbstractSpinBox*>(w) && !qobject_cast<QComboBox*>(w) &&
      !qobject_cast<QLineEdit*>(w) && !qobject_cast<QCheckBox*>(w))
    return false;
  QWidget* parent = w->parentWidget();
  return !(qobject_cast<QLineEdit*>(w) &&
           (qobject_cast<QAbstractSpinBox*>(parent) || qobject_cast<QComboBox*>(parent)));
}

std::string describe(QWidget* w) {
  return std::string(w->metaObject()->className()) + " '" + w->objectName().toStdString() +
         "' (tooltip: " + w->toolTip().left(60).toStdString() + ")";
}

// The value the form's job holds for `k`, as JSON text ("" when absent); numbers as doubles.
std::string valueIn(const nlohmann::json& job, const job::JobKey& k) {
  const nlohmann::json& in =
      k.section().empty() ? job : job.value(k.section(), nlohmann::json::object());
  const auto it = in.find(k.name());
  if (it == in.end()) return "";
  if (it->is_number()) return nlohmann::json(it->get<double>()).dump();
  return it->dump();
}

std::string schemaDefault(const job::JobKey& k) {
  const nlohmann::json& d = k.default_value;
  return d.is_number() ? nlohmann::json(d.get<double>()).dump() : d.dump();
}

TEST(JobForm, EveryFieldHasAKeyTheSchemasDefaultRangeAndTooltip) {
  NewRunPage page;
  const nlohmann::json job = page.settings().toJson();  // the job the untouched form writes
  std::set<std::string> keys;
  for (QWidget* w : page.findChildren<QWidget*>()) {
    if (!isField(w)) continue;
    const std::string path = w->property(JobForm::kKeyProperty).toString().toStdString();
    ASSERT_FALSE(path.empty()) << "a field of the form with no job key: " << describe(w);
    const job::JobKey* k = job::find_job_key(path);
    ASSERT_NE(k, nullptr) << describe(w) << " names " << path
                          << ", which the job schema does not have";
    keys.insert(path);
    EXPECT_TRUE(w->toolTip().contains(QString::fromStdString(k->description)))
        << path << ": " << describe(w);
    if (!k->required && !k->default_value.is_null()) {
      EXPECT_EQ(valueIn(job, *k), schemaDefault(*k))
          << path << ": the form starts elsewhere than the schema's default";
    }
    if (auto* s = qobject_cast<QSpinBox*>(w)) {
      EXPECT_EQ(s->minimum(), static_cast<int>(k->range.lo)) << path;
      // The range's end, or past it where the form refuses a value with a message (micro-batch).
      EXPECT_GE(s->maximum(), static_cast<int>(std::min<double>(k->range.hi, INT_MAX))) << path;
      if (s->maximum() > k->range.hi) {
        s->setValue(static_cast<int>(k->range.hi) + 1);
        EXPECT_FALSE(page.inputError().isEmpty()) << path << " past its range is not refused";
        s->setValue(static_cast<int>(k->range.hi));
        EXPECT_TRUE(page.inputError().isEmpty()) << path << " at the end of its range is refused";
        s->setValue(k->default_value.get<int>());
      }
    }
    if (auto* s = qobject_cast<IntegerSpinBox*>(w)) {
      EXPECT_EQ(s->minimum(), static_cast<quint64>(k->range.lo)) << path;
      // The whole range: a seed's is [0, 2^64 - 1] (2^64 as a double).
      EXPECT_EQ(s->maximum(), k->range.hi >= 0x1p64 ? std::numeric_limits<quint64>::max()
                                                    : static_cast<quint64>(k->range.hi))
          << path;
    }
    if (auto* c = qobject_cast<QComboBox*>(w); c && !c->isEditable()) {
      QStringList items;
      for (int i = 0; i < c->count(); ++i) items << c->itemText(i);
      QStringList choices;
      for (const std::string& choice : k->choices) choices << QString::fromStdString(choice);
      EXPECT_EQ(items, choices) << path;
    }
  }
  // The keys the form shows; more may come, none may go without this list changing.
  for (const char* path : {"name",
                           "model.path",
                           "data.train",
                           "data.format",
                           "data.template",
                           "data.seq_len",
                           "data.eval_fraction",
                           "data.seed",
                           "train.steps",
                           "train.epochs",
                           "train.micro_batch_size",
                           "train.grad_accum",
                           "train.lr",
                           "train.schedule",
                           "train.warmup_steps",
                           "train.weight_decay",
                           "train.clip_grad_norm",
                           "train.eval_every",
                           "train.checkpoint_every",
                           "placement.backend",
                           "placement.devices",
                           "placement.device_memory_bytes",
                           "placement.hbm_state_blocks",
                           "placement.optimizer",
                           "placement.master",
                           "placement.ssd_dir",
                           "placement.dram_cap_bytes"})
    EXPECT_TRUE(keys.count(path)) << path << " is not on the form";
}

// JobSettings, the form as a value, starts at the schema's defaults too: a job from it that the
// form did not touch resolves to what a job file without those keys resolves to.
TEST(JobForm, UntouchedSettingsResolveToTheSchemasDefaults) {
  JobSettings s;
  s.modelPath = "/m";
  s.trainPath = "/d.txt";
  auto fromForm = job::resolve_job(nlohmann::json::parse(s.toText().toStdString()));
  ASSERT_TRUE(fromForm.ok()) << fromForm.status().to_string();
  auto bare = job::resolve_job({{"name", s.name.toStdString()},
                                {"model", {{"path", "/m"}}},
                                {"data", {{"train", "/d.txt"}}}});
  ASSERT_TRUE(bare.ok()) << bare.status().to_string();
  // Numbers compare by value (the form writes 0.0 where the schema says 0).
  for (const job::JobKey& k : job::job_keys()) {
    const nlohmann::json& a =
        k.section().empty() ? (*fromForm)[k.name()] : (*fromForm)[k.section()][k.name()];
    const nlohmann::json& b =
        k.section().empty() ? (*bare)[k.name()] : (*bare)[k.section()][k.name()];
    if (a.is_number() && b.is_number())
      EXPECT_EQ(a.get<double>(), b.get<double>()) << k.path;
    else
      EXPECT_EQ(a, b) << k.path;
  }
}

// A seed past 2^31 (2^40; 2^62 + 1, 2^63 + 1 and 2^64 - 1, which a double does not hold; 2^63 - 1)
// comes back whole through JobSettings (the job a clone or a job file gives the form), the form's
// field and the job.json text the worker reads; the int spin box it had made every one of them 0 or
// 2^31 - 1, and Qt's JSON (doubles) cut the low bits of those past 2^53.
const quint64 kSeeds[] = {quint64{1} << 40, (quint64{1} << 62) + 1, 9223372036854775807ULL,
                          (quint64{1} << 63) + 1, 18446744073709551615ULL};

TEST(JobForm, SixtyFourBitSeedRoundTripsThroughTheSettingsAndTheForm) {
  for (const quint64 seed : kSeeds) {
    JobSettings s;
    s.modelPath = "/m";
    s.trainPath = "/d.txt";
    s.seed = seed;
    const QByteArray text = s.toText();
    EXPECT_TRUE(text.contains("\"seed\": " + QByteArray::number(seed))) << text.toStdString();
    EXPECT_EQ(JobSettings::fromText(text).seed, seed) << seed;
    auto resolved = job::resolve_job(nlohmann::json::parse(text.toStdString()));
    ASSERT_TRUE(resolved.ok()) << resolved.status().to_string();
    EXPECT_EQ((*resolved)["data"]["seed"].get<uint64_t>(), seed);

    NewRunPage page;
    page.setSettings(JobSettings::fromText(text));
    EXPECT_EQ(page.settings().seed, seed);
    IntegerSpinBox* field = nullptr;
    for (auto* w : page.findChildren<IntegerSpinBox*>())
      if (w->property(JobForm::kKeyProperty).toString() == "data.seed") field = w;
    ASSERT_NE(field, nullptr);
    EXPECT_EQ(field->maximum(), std::numeric_limits<quint64>::max());
    EXPECT_EQ(field->value(), seed);
    EXPECT_EQ(field->text(), QString::number(seed));
    // Typed in: the digits reach the job; a number past the field's top (2^64 - 1) is refused.
    field->setValue(0);
    field->selectAll();
    QTest::keyClicks(field, QString::number(seed));
    EXPECT_EQ(page.settings().seed, seed);
    field->selectAll();
    QTest::keyClicks(field, "99999999999999999999");
    EXPECT_EQ(page.settings().seed, 9999999999999999999ULL);  // the last digit is refused
  }
}

// The same seeds through the files a person meets: a job file opened in New run (data.seed on the
// form; model.seed and train.seed, which the form does not show, in the job it carries) and saved
// again; and History's Clone of a run whose recorded job has them.
TEST(JobForm, SixtyFourBitSeedRoundTripsThroughJobFilesAndClone) {
  TempDir tmp;
  qputenv("XDG_CONFIG_HOME", QByteArray::fromStdString(tmp.path() + "/config"));
  const std::string data = tmp.path() + "/d.txt";
  std::ofstream(data) << "some text to train on\n";
  for (const quint64 seed : kSeeds) {
    const std::string n = std::to_string(seed);
    const std::string job = R"({"name": "seeded", "model": {"init": "llama-byte-5m", "seed": )" +
                            n + R"(, "tokenizer": "builtin:bytes"}, "data": {"train": ")" + data +
                            R"(", "seed": )" + n + R"(}, "train": {"steps": 3, "seed": )" + n +
                            "}}";
    const std::string in = tmp.path() + "/in.json", out = tmp.path() + "/out.json";
    std::ofstream(in) << job;

    NewRunPage page;
    QString error;
    ASSERT_TRUE(page.loadJob(q(in), &error)) << error.toStdString();
    EXPECT_EQ(page.settings().seed, seed);
    ASSERT_TRUE(page.saveJob(q(out), &error)) << error.toStdString();
    std::ifstream saved(out);
    const nlohmann::json written = nlohmann::json::parse(saved);
    EXPECT_EQ(written["data"]["seed"].get<uint64_t>(), seed) << written.dump();
    EXPECT_EQ(written["model"]["seed"].get<uint64_t>(), seed) << written.dump();
    EXPECT_EQ(written["train"]["seed"].get<uint64_t>(), seed) << written.dump();

    // Clone: the job the run recorded in the store (RunInfo::job_json) fills the form.
    const std::string db = tmp.path() + "/runs-" + n + ".db";
    {
      auto store = RunStore::open(db);
      ASSERT_TRUE(store.ok());
      RunInfo run;
      run.name = "seeded";
      run.status = RunStatus::kCompleted;
      run.job_json = job;
      ASSERT_TRUE((*store)->create_run(run).ok());
    }
    MainWindow window(q(db));
    window.showPage(MainWindow::kHistory);
    ASSERT_TRUE(waitForHistory(window.historyModel()));
    QTableView* table = window.historyPage()->table();
    ASSERT_EQ(table->model()->rowCount(), 1);
    table->setCurrentIndex(table->model()->index(0, 0));
    QPushButton* clone = nullptr;
    for (QPushButton* b : window.historyPage()->findChildren<QPushButton*>())
      if (b->text() == "Clone") clone = b;
    ASSERT_NE(clone, nullptr);
    QTest::mouseClick(clone, Qt::LeftButton);
    const JobSettings cloned = window.newRunPage()->settings();
    EXPECT_EQ(cloned.name, "seeded (clone)");
    EXPECT_EQ(cloned.seed, seed);
    const nlohmann::json again = cloned.toJson();
    EXPECT_EQ(again["model"]["seed"].get<uint64_t>(), seed) << again.dump();
    EXPECT_EQ(again["train"]["seed"].get<uint64_t>(), seed) << again.dump();
  }
}

// placement.hbm_state_blocks on Tier placement (issue 24): the schema's range and help, and its
// -1 ("as many as fit") in words rather than as a number.
TEST(JobForm, HbmStateBlocksReadsMinusOneAsAsManyAsFit) {
  PlacementForm form;
  auto* box = form.findChild<QSpinBox*>("hbmStateBlocks");
  ASSERT_NE(box, nullptr);
  EXPECT_EQ(box->property(JobForm::kKeyProperty).toString(), "placement.hbm_state_blocks");
  EXPECT_EQ(box->minimum(), -1);
  EXPECT_EQ(box->maximum(), 1 << 20);
  EXPECT_TRUE(box->toolTip().startsWith("Blocks (embedding, layers, head, in that order)"))
      << box->toolTip().toStdString();
  // The schema's default, -1, reads as words.
  EXPECT_EQ(box->value(), -1);
  EXPECT_EQ(box->text(), "as many as fit");
  JobSettings s;
  form.readInto(&s);
  EXPECT_EQ(s.hbmStateBlocks, -1);
  EXPECT_EQ(s.toJson()["placement"]["hbm_state_blocks"].get<int>(), -1);
  // A job's own number goes into the field and back into the job.
  s.hbmStateBlocks = 18;
  form.fill(s);
  EXPECT_EQ(box->text(), "18");
  JobSettings back;
  form.readInto(&back);
  const nlohmann::json job = back.toJson();
  EXPECT_EQ(job["placement"]["hbm_state_blocks"].get<int>(), 18);
  EXPECT_EQ(JobSettings::fromJson(job).hbmStateBlocks, 18);
  EXPECT_EQ(JobSettings::fromJson(nlohmann::json::object()).hbmStateBlocks, -1);
}

}  // namespace
}  // namespace spillway::ui
