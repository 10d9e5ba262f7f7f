// The New run form and the job schema (engine/job/job-schema): every field names a key of the job
// file, starts at that key's default, takes its range or choices and shows its description; a
// form left as it is writes the job a file without those keys would run.
#include <gtest/gtest.h>

#include <QAbstractSpinBox>
#include <QCheckBox>
#include <QComboBox>
#include <QDoubleSpinBox>
#include <QJsonDocument>
#include <QJsonObject>
#include <QLineEdit>
#include <QSpinBox>
#include <QTest>
#include <climits>
#include <set>

#include "JobForm.h"
#include "IntegerSpinBox.h"
#include "JobSettings.h"
#include "NewRunPage.h"
#include "job/job-schema.h"

namespace spillway::ui {
namespace {

// The input fields a person fills in: not the line edits inside spin boxes and combo boxes, nor
// an input that is not part of the job (Measure's step count).
bool isField(QWidget* w) {
  if (w->property(JobForm::kNotInJobProperty).toBool()) return false;
  if (!qobject_cast<QAbstractSpinBox*>(w) && !qobject_cast<QComboBox*>(w) && !qobject_cast<QLineEdit*>(w) &&
      !qobject_cast<QCheckBox*>(w))
    return false;
  QWidget* parent = w->parentWidget();
  return !(qobject_cast<QLineEdit*>(w) && (qobject_cast<QAbstractSpinBox*>(parent) || qobject_cast<QComboBox*>(parent)));
}

std::string describe(QWidget* w) {
  return std::string(w->metaObject()->className()) + " '" + w->objectName().toStdString() + "' (tooltip: " +
         w->toolTip().left(60).toStdString() + ")";
}

// The value the form's job holds for `k`, as JSON text ("" when absent).
std::string valueIn(const QJsonObject& job, const job::JobKey& k) {
  const QJsonValue v = k.section().empty() ? job[QString::fromStdString(k.name())]
                                           : job[QString::fromStdString(k.section())][QString::fromStdString(k.name())];
  if (v.isUndefined()) return "";
  if (v.isDouble()) return nlohmann::json(v.toDouble()).dump();
  if (v.isBool()) return v.toBool() ? "true" : "false";
  if (v.isString()) return nlohmann::json(v.toString().toStdString()).dump();
  return "?";
}

std::string schemaDefault(const job::JobKey& k) {
  const nlohmann::json& d = k.default_value;
  return d.is_number() ? nlohmann::json(d.get<double>()).dump() : d.dump();
}

TEST(JobForm, EveryFieldHasAKeyTheSchemasDefaultRangeAndTooltip) {
  NewRunPage page;
  const QJsonObject job = page.settings().toJson();  // the job the untouched form writes
  std::set<std::string> keys;
  for (QWidget* w : page.findChildren<QWidget*>()) {
    if (!isField(w)) continue;
    const std::string path = w->property(JobForm::kKeyProperty).toString().toStdString();
    ASSERT_FALSE(path.empty()) << "a field of the form with no job key: " << describe(w);
    const job::JobKey* k = job::find_job_key(path);
    ASSERT_NE(k, nullptr) << describe(w) << " names " << path << ", which the job schema does not have";
    keys.insert(path);
    EXPECT_TRUE(w->toolTip().contains(QString::fromStdString(k->description))) << path << ": " << describe(w);
    if (!k->required && !k->default_value.is_null()) {
      EXPECT_EQ(valueIn(job, *k), schemaDefault(*k)) << path << ": the form starts elsewhere than the schema's default";
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
      // The whole range, up to what a job written through Qt's JSON holds (2^63 - 1).
      EXPECT_EQ(s->maximum(), std::min<double>(k->range.hi, 9223372036854775807.0) >= 9.2e18
                                  ? JobForm::kMaxJsonInteger
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
  for (const char* path : {"name", "model.path", "data.train", "data.format", "data.template", "data.seq_len",
                           "data.eval_fraction", "data.seed", "train.steps", "train.epochs", "train.micro_batch_size",
                           "train.grad_accum", "train.lr", "train.schedule", "train.warmup_steps", "train.weight_decay",
                           "train.clip_grad_norm", "train.eval_every", "train.checkpoint_every", "placement.backend",
                           "placement.device_memory_bytes", "placement.optimizer", "placement.master",
                           "placement.ssd_dir", "placement.dram_cap_bytes"})
    EXPECT_TRUE(keys.count(path)) << path << " is not on the form";
}

// JobSettings, the form as a value, starts at the schema's defaults too: a job from it that the
// form did not touch resolves to what a job file without those keys resolves to.
TEST(JobForm, UntouchedSettingsResolveToTheSchemasDefaults) {
  JobSettings s;
  s.modelPath = "/m";
  s.trainPath = "/d.txt";
  const QJsonObject j = s.toJson();
  auto fromForm = job::resolve_job(nlohmann::json::parse(QJsonDocument(j).toJson().toStdString()));
  ASSERT_TRUE(fromForm.ok()) << fromForm.status().to_string();
  auto bare = job::resolve_job({{"name", s.name.toStdString()}, {"model", {{"path", "/m"}}}, {"data", {{"train", "/d.txt"}}}});
  ASSERT_TRUE(bare.ok()) << bare.status().to_string();
  // Numbers compare by value (the form writes 0.0 where the schema says 0).
  for (const job::JobKey& k : job::job_keys()) {
    const nlohmann::json& a = k.section().empty() ? (*fromForm)[k.name()] : (*fromForm)[k.section()][k.name()];
    const nlohmann::json& b = k.section().empty() ? (*bare)[k.name()] : (*bare)[k.section()][k.name()];
    if (a.is_number() && b.is_number()) EXPECT_EQ(a.get<double>(), b.get<double>()) << k.path;
    else EXPECT_EQ(a, b) << k.path;
  }
}

// A seed past 2^31 (2^40, 2^62 + 1, which a double does not hold, and 2^63 - 1) comes back
// whole through JobSettings (the job a clone or a job file gives the form), the form's field and
// the job.json text the worker reads; the int spin box it had made every one of them 0 or 2^31 - 1.
TEST(JobForm, SixtyFourBitSeedRoundTripsThroughTheSettingsAndTheForm) {
  for (const quint64 seed : {quint64{1} << 40, (quint64{1} << 62) + 1, JobForm::kMaxJsonInteger}) {
    JobSettings s;
    s.modelPath = "/m";
    s.trainPath = "/d.txt";
    s.seed = seed;
    const QByteArray text = QJsonDocument(s.toJson()).toJson();
    EXPECT_EQ(JobSettings::fromJson(QJsonDocument::fromJson(text).object()).seed, seed) << seed;
    auto resolved = job::resolve_job(nlohmann::json::parse(text.toStdString()));
    ASSERT_TRUE(resolved.ok()) << resolved.status().to_string();
    EXPECT_EQ((*resolved)["data"]["seed"].get<uint64_t>(), seed);

    NewRunPage page;
    page.setSettings(JobSettings::fromJson(QJsonDocument::fromJson(text).object()));
    EXPECT_EQ(page.settings().seed, seed);
    IntegerSpinBox* field = nullptr;
    for (auto* w : page.findChildren<IntegerSpinBox*>())
      if (w->property(JobForm::kKeyProperty).toString() == "data.seed") field = w;
    ASSERT_NE(field, nullptr);
    EXPECT_EQ(field->value(), seed);
    EXPECT_EQ(field->text(), QString::number(seed));
    // Typed in: the digits reach the job; a number past the field's top is refused.
    field->setValue(0);
    field->selectAll();
    QTest::keyClicks(field, QString::number(seed));
    EXPECT_EQ(page.settings().seed, seed);
    field->selectAll();
    QTest::keyClicks(field, "99999999999999999999");
    EXPECT_LE(page.settings().seed, JobForm::kMaxJsonInteger);
  }
}

}  // namespace
}  // namespace spillway::ui
