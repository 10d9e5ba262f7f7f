#include "JobSettings.h"

#include <algorithm>
#include <type_traits>
#include <utility>
#include <variant>

namespace spillway::ui {

namespace {

// A member of the form that holds one job key.
using Member = std::variant<QString JobSettings::*, int JobSettings::*, double JobSettings::*, bool JobSettings::*,
                            qint64 JobSettings::*, quint64 JobSettings::*>;
struct Field {
  const char* path;  // the job schema's key (engine/job/job-schema): "section.name"
  Member member;
};

// The form's fields that are one job key each, in the schema's order; toJson writes them and
// fromJson reads them (a key the job leaves out keeps the schema's default, JobForm::defaultValue).
// name, model.*, data.eval, data.eval_fraction and output.run_dir follow rules of their own below.
const Field kFields[] = {
    {"data.train", &JobSettings::trainPath},
    {"data.format", &JobSettings::format},
    {"data.template", &JobSettings::chatTemplate},
    {"data.seq_len", &JobSettings::seqLen},
    {"data.packing", &JobSettings::packing},
    {"data.shuffle", &JobSettings::shuffle},
    {"data.seed", &JobSettings::seed},
    {"train.steps", &JobSettings::steps},
    {"train.epochs", &JobSettings::epochs},
    {"train.micro_batch_size", &JobSettings::microBatchSize},
    {"train.grad_accum", &JobSettings::gradAccum},
    {"train.lr", &JobSettings::lr},
    {"train.schedule", &JobSettings::schedule},
    {"train.warmup_steps", &JobSettings::warmupSteps},
    {"train.weight_decay", &JobSettings::weightDecay},
    {"train.clip_grad_norm", &JobSettings::clipGradNorm},
    {"train.eval_every", &JobSettings::evalEvery},
    {"train.checkpoint_every", &JobSettings::checkpointEvery},
    {"placement.backend", &JobSettings::backend},
    {"placement.device_memory_bytes", &JobSettings::deviceMemoryBytes},
    {"placement.optimizer", &JobSettings::optimizerTier},
    {"placement.master", &JobSettings::masterTier},
    {"placement.ssd_dir", &JobSettings::ssdDir},
    {"placement.dram_cap_bytes", &JobSettings::dramCapBytes},
};

// "train.lr" as {"train", "lr"}.
std::pair<QString, QString> sectionAndName(const char* path) {
  const QString p = QString::fromLatin1(path);
  const qsizetype dot = p.indexOf('.');
  return {p.left(dot), p.mid(dot + 1)};
}

QJsonValue valueOf(const JobSettings& s, const Member& member) {
  return std::visit(
      [&](auto m) -> QJsonValue {
        using T = std::remove_cvref_t<decltype(s.*m)>;
        // A seed past what Qt's JSON holds as an integer is written as the largest it holds (the
        // form's field goes no further: JobForm::kMaxJsonInteger).
        if constexpr (std::is_same_v<T, quint64>) return static_cast<qint64>(std::min(s.*m, JobForm::kMaxJsonInteger));
        else return QJsonValue(s.*m);
      },
      member);
}

void read(JobSettings& s, const Member& member, const QJsonValue& v) {
  std::visit(
      [&](auto m) {
        auto& field = s.*m;
        using T = std::remove_cvref_t<decltype(field)>;
        if constexpr (std::is_same_v<T, QString>) field = v.toString(field);
        else if constexpr (std::is_same_v<T, int>) field = v.toInt(field);
        else if constexpr (std::is_same_v<T, double>) field = v.toDouble(field);
        else if constexpr (std::is_same_v<T, bool>) field = v.toBool(field);
        else if constexpr (std::is_same_v<T, qint64>) field = v.toInteger(field);
        else field = static_cast<quint64>(std::max<qint64>(v.toInteger(static_cast<qint64>(field)), 0));
      },
      member);
}

}  // namespace

QJsonValue JobSettings::modelInit() const {
  if (!modelPath.isEmpty()) return QJsonValue::Undefined;
  return base["model"].toObject()["init"];
}

QString JobSettings::tokenizer() const {
  const bool initJob = base["model"].toObject().contains("init");
  return !modelPath.isEmpty() && initJob ? QString() : tokenizerPath;
}

QJsonObject JobSettings::toJson() const {
  // The sections the form writes into, each the base job's with the form's fields over it.
  QJsonObject data = base["data"].toObject(), train = base["train"].toObject(),
              placement = base["placement"].toObject();
  for (const Field& f : kFields) {
    const auto [section, name] = sectionAndName(f.path);
    QJsonObject& into = section == "data" ? data : section == "train" ? train : placement;
    into[name] = valueOf(*this, f.member);
  }
  if (!evalPath.isEmpty()) {
    data["eval"] = evalPath;
    data.remove("eval_fraction");
  } else {
    data["eval_fraction"] = evalFraction;
    data.remove("eval");
  }
  QJsonObject output = base["output"].toObject();
  if (!runDir.isEmpty())
    output["run_dir"] = runDir;
  else
    output.remove("run_dir");
  // A model made from a preset ("init") keeps its section when the form names no folder.
  QJsonObject model = modelPath.isEmpty() && base.contains("model")
                          ? base["model"].toObject()
                          : QJsonObject{{"path", modelPath}};
  if (!modelPath.isEmpty() && !tokenizer().isEmpty()) model["tokenizer"] = tokenizer();
  return QJsonObject{{"name", name},   {"model", model},         {"data", data},
                     {"train", train}, {"placement", placement}, {"output", output}};
}

JobSettings JobSettings::fromJson(const QJsonObject& j) {
  JobSettings s;  // the schema's defaults for whatever the job leaves out
  s.base = j;
  s.name = j["name"].toString(s.name);
  const QJsonObject m = j["model"].toObject(), d = j["data"].toObject();
  s.modelPath = m["path"].toString();
  s.tokenizerPath = m["tokenizer"].toString();
  s.evalPath = d["eval"].toString();
  s.evalFraction = d["eval_fraction"].toDouble(s.evalFraction);
  for (const Field& f : kFields) {
    const auto [section, name] = sectionAndName(f.path);
    read(s, f.member, j[section].toObject()[name]);
  }
  s.runDir = j["output"].toObject()["run_dir"].toString();
  return s;
}

}  // namespace spillway::ui
