#include "JobSettings.h"

#include <QJsonArray>
#include <QJsonDocument>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <type_traits>
#include <utility>
#include <variant>

#include "job/job-schema.h"

namespace spillway::ui {

namespace {

// A member of the form that holds one job key.
using Member = std::variant<QString JobSettings::*, int JobSettings::*, double JobSettings::*,
                            bool JobSettings::*, qint64 JobSettings::*, quint64 JobSettings::*>;
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
    {"placement.hbm_state_blocks", &JobSettings::hbmStateBlocks},
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

// `name` of the object `j`, or {} when it is not an object.
nlohmann::json sectionOf(const nlohmann::json& j, const char* name) {
  if (!j.is_object()) return nlohmann::json::object();
  const auto it = j.find(name);
  return it != j.end() && it->is_object() ? *it : nlohmann::json::object();
}

// `v` as an integer of type T, when it is one T holds (an integral floating-point value too).
template <class T>
std::optional<T> integerOf(const nlohmann::json& v) {
  using Limits = std::numeric_limits<T>;
  if (v.is_number_unsigned()) {
    const std::uint64_t u = v.get<std::uint64_t>();
    if (u <= static_cast<std::uint64_t>(Limits::max())) return static_cast<T>(u);
  } else if (v.is_number_integer()) {
    const std::int64_t i = v.get<std::int64_t>();
    if (i < 0 ? Limits::is_signed && i >= static_cast<std::int64_t>(Limits::min())
              : static_cast<std::uint64_t>(i) <= static_cast<std::uint64_t>(Limits::max()))
      return static_cast<T>(i);
  } else if (v.is_number_float()) {
    const double d = v.get<double>();
    if (d == std::trunc(d) && d >= static_cast<double>(Limits::min()) &&
        d < std::ldexp(1.0, Limits::digits))
      return static_cast<T>(d);
  }
  return std::nullopt;
}

nlohmann::json valueOf(const JobSettings& s, const Member& member) {
  return std::visit(
      [&](auto m) -> nlohmann::json {
        using T = std::remove_cvref_t<decltype(s.*m)>;
        if constexpr (std::is_same_v<T, QString>)
          return (s.*m).toStdString();
        else if constexpr (std::is_same_v<T, quint64>)
          return static_cast<std::uint64_t>(s.*m);
        else if constexpr (std::is_same_v<T, qint64>)
          return static_cast<std::int64_t>(s.*m);
        else
          return s.*m;
      },
      member);
}

// Reads `v` into `member`; a value of another type (or none) keeps what the member holds.
void read(JobSettings& s, const Member& member, const nlohmann::json& v) {
  std::visit(
      [&](auto m) {
        auto& field = s.*m;
        using T = std::remove_cvref_t<decltype(field)>;
        if constexpr (std::is_same_v<T, QString>) {
          if (v.is_string()) field = QString::fromStdString(v.get<std::string>());
        } else if constexpr (std::is_same_v<T, double>) {
          if (v.is_number()) field = v.get<double>();
        } else if constexpr (std::is_same_v<T, bool>) {
          if (v.is_boolean()) field = v.get<bool>();
        } else if constexpr (std::is_same_v<T, quint64>) {
          // A negative seed is read as 0 (the schema refuses it at launch).
          if (v.is_number_integer() && !v.is_number_unsigned() && v.get<std::int64_t>() < 0)
            field = 0;
          else if (const auto i = integerOf<quint64>(v))
            field = *i;
        } else {
          if (const auto i = integerOf<T>(v)) field = *i;
        }
      },
      member);
}

// `j` as Qt's JSON value (through its text: a number past 2^53 loses its low bits).
QJsonValue toQt(const nlohmann::json& j) {
  const QByteArray text = QByteArray::fromStdString(
      "[" + j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "]");
  return QJsonDocument::fromJson(text).array().at(0);
}

}  // namespace

job::DeviceSelection JobSettings::defaultDevices() {
  const job::JobKey* k = job::find_job_key("placement.devices");
  if (k == nullptr) return {};
  Result<job::DeviceSelection> d = job::parse_device_selection(k->default_value);
  return d.ok() ? *d : job::DeviceSelection{};
}

QJsonValue JobSettings::modelInit() const {
  if (!modelPath.isEmpty()) return QJsonValue::Undefined;
  const nlohmann::json model = sectionOf(base, "model");
  return model.contains("init") ? toQt(model["init"]) : QJsonValue::Undefined;
}

QString JobSettings::tokenizer() const {
  const bool initJob = sectionOf(base, "model").contains("init");
  return !modelPath.isEmpty() && initJob ? QString() : tokenizerPath;
}

QJsonObject JobSettings::baseModel() const {
  return toQt(sectionOf(base, "model")).toObject();
}

nlohmann::json JobSettings::toJson() const {
  // The sections the form writes into, each the base job's with the form's fields over it.
  nlohmann::json data = sectionOf(base, "data"), train = sectionOf(base, "train"),
                 placement = sectionOf(base, "placement");
  for (const Field& f : kFields) {
    const auto [section, name] = sectionAndName(f.path);
    nlohmann::json& into = section == "data" ? data : section == "train" ? train : placement;
    into[name.toStdString()] = valueOf(*this, f.member);
  }
  placement["devices"] = devices.to_json();
  if (!evalPath.isEmpty()) {
    data["eval"] = evalPath.toStdString();
    data.erase("eval_fraction");
  } else {
    data["eval_fraction"] = evalFraction;
    data.erase("eval");
  }
  nlohmann::json output = sectionOf(base, "output");
  if (!runDir.isEmpty())
    output["run_dir"] = runDir.toStdString();
  else
    output.erase("run_dir");
  // A model made from a preset ("init") keeps its section when the form names no folder.
  nlohmann::json model = modelPath.isEmpty() && base.is_object() && base.contains("model")
                             ? sectionOf(base, "model")
                             : nlohmann::json{{"path", modelPath.toStdString()}};
  if (!modelPath.isEmpty() && !tokenizer().isEmpty())
    model["tokenizer"] = tokenizer().toStdString();
  return nlohmann::json{
      {"name", name.toStdString()}, {"model", model},  {"data", data}, {"train", train},
      {"placement", placement},     {"output", output}};
}

QByteArray JobSettings::toText() const {
  return QByteArray::fromStdString(
      toJson().dump(4, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
}

JobSettings JobSettings::fromJson(const nlohmann::json& job) {
  JobSettings s;  // the schema's defaults for whatever the job leaves out
  if (!job.is_object()) return s;
  s.base = job;
  const auto text = [](const nlohmann::json& o, const char* key, const QString& otherwise) {
    const auto it = o.find(key);
    return it != o.end() && it->is_string() ? QString::fromStdString(it->get<std::string>())
                                            : otherwise;
  };
  s.name = text(job, "name", s.name);
  const nlohmann::json m = sectionOf(job, "model"), d = sectionOf(job, "data");
  s.modelPath = text(m, "path", {});
  s.tokenizerPath = text(m, "tokenizer", {});
  s.evalPath = text(d, "eval", {});
  if (const auto it = d.find("eval_fraction"); it != d.end() && it->is_number())
    s.evalFraction = it->get<double>();
  for (const Field& f : kFields) {
    const auto [section, name] = sectionAndName(f.path);
    const nlohmann::json from = sectionOf(job, section.toLatin1().constData());
    const auto it = from.find(name.toStdString());
    read(s, f.member, it != from.end() ? *it : nlohmann::json());
  }
  if (const auto p = sectionOf(job, "placement"); p.contains("devices")) {
    if (Result<job::DeviceSelection> d = job::parse_device_selection(p["devices"]); d.ok())
      s.devices = *d;
  }
  s.runDir = text(sectionOf(job, "output"), "run_dir", {});
  return s;
}

JobSettings JobSettings::fromText(const QByteArray& text) {
  return fromJson(nlohmann::json::parse(text.constData(), text.constData() + text.size(), nullptr,
                                        /*allow_exceptions=*/false));
}

}  // namespace spillway::ui
