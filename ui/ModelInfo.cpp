#include "ModelInfo.h"

#include <QDir>
#include <QDirIterator>
#include <QFileInfo>
#include <QJsonDocument>
#include <QObject>
#include <nlohmann/json.hpp>

#include "Format.h"
#include "model/parameter-layout.h"
#include "model/safetensors.h"

namespace spillway::ui {
namespace {

// The figures a usable model shows, whether read from a folder or created from model.init.
void describe(ModelInfo& info, const ModelConfig& config, const ModelSummary& s) {
  info.ok = true;
  info.architecture = QString::fromStdString(config.architecture);
  info.family = QString::fromStdString(config.family());
  info.modelType = QString::fromStdString(config.model_type);
  info.parameters = static_cast<qint64>(s.parameters);
  info.layers = config.num_layers;
  info.hiddenSize = config.hidden_size;
  info.vocabSize = config.vocab_size;
  info.heads = config.num_heads;
  info.kvHeads = config.num_kv_heads;
}

}  // namespace

ModelInfo ModelInfo::inspect(const QString& dir) {
  ModelInfo info;
  if (dir.isEmpty()) {
    info.error = QObject::tr(
        "Choose a model folder (Hugging Face layout: config.json and model.safetensors).");
    return info;
  }
  if (!QFileInfo(dir).isDir()) {
    info.error = QObject::tr("%1 is not a folder.").arg(dir);
    return info;
  }
  auto config = ModelConfig::load(dir.toStdString());
  if (!config.ok()) {
    info.error = QString::fromStdString(config.status().message());
    return info;
  }
  auto store = TensorStore::open(dir.toStdString());
  if (!store.ok()) {
    info.error = QString::fromStdString(store.status().message());
    return info;
  }
  ParameterLayout layout = ParameterLayout::build(*config);
  if (Status st = layout.check(*store); !st.ok()) {
    info.error = QString::fromStdString(st.message());
    return info;
  }
  const ModelSummary s = summarize(layout, &*store);
  describe(info, *config, s);
  info.dtype = QString::fromStdString(s.dtype);
  info.bytesOnDisk = static_cast<qint64>(s.bytes_on_disk);
  return info;
}

Result<ModelConfig> ModelInfo::initConfig(const QJsonValue& init) {
  if (init.isString()) return model_preset(init.toString().toStdString());
  if (!init.isObject())
    return invalid_argument(std::string("expected a preset name (") + model_preset_names() +
                            ") or a config.json object");
  const QByteArray bytes = QJsonDocument(init.toObject()).toJson(QJsonDocument::Compact);
  const auto j = nlohmann::json::parse(bytes.constData(), bytes.constData() + bytes.size(), nullptr,
                                       /*allow_exceptions=*/false);
  return ModelConfig::from_json(j);
}

ModelInfo ModelInfo::inspectInit(const QJsonObject& model) {
  ModelInfo info;
  info.fromInit = true;
  info.init = model["init"].toString();
  info.seed = model["seed"].toInteger(0);
  auto config = initConfig(model["init"]);
  Status st = config.ok() ? config->validate() : config.status();
  if (!st.ok()) {
    info.error =
        QObject::tr("model.init: %1")
            .arg(st.message().empty() ? QObject::tr("the engine refused it without a reason")
                                      : QString::fromStdString(st.message()));
    return info;
  }
  describe(info, *config, summarize(ParameterLayout::build(*config), nullptr));
  return info;
}

QString ModelInfo::summary() const {
  if (!ok) return error;
  if (fromInit)
    return QObject::
        tr("Created from model.init: %1%2 · %3 layers · hidden %4 · heads %5/%6 · vocabulary %7 · "
           "%8 parameters · random initialisation (seed %9)")
            .arg(init.isEmpty() ? QString() : init + " · ", architecture)
            .arg(layers)
            .arg(hiddenSize)
            .arg(heads)
            .arg(kvHeads)
            .arg(vocabSize)
            .arg(formatCount(parameters))
            .arg(seed);
  // The family first: Phi-4's folder says Phi3ForCausalLM.
  return QObject::tr(
             "%1 (%2) · %3 parameters · %4 layers · hidden %5 · heads %6/%7 · vocabulary %8 · %9 · "
             "%10 on disk")
      .arg(family, architecture, formatCount(parameters))
      .arg(layers)
      .arg(hiddenSize)
      .arg(heads)
      .arg(kvHeads)
      .arg(vocabSize)
      .arg(dtype, formatBytes(bytesOnDisk));
}

QStringList findHuggingFaceModels(const QString& hubDir) {
  const QString hub = hubDir.isEmpty() ? QDir::homePath() + "/.cache/huggingface/hub" : hubDir;
  QStringList out;
  QDir root(hub);
  for (const QString& repo : root.entryList({"models--*"}, QDir::Dirs)) {
    QDir snapshots(root.filePath(repo + "/snapshots"));
    for (const QString& snap : snapshots.entryList(QDir::Dirs | QDir::NoDotAndDotDot)) {
      const QString path = snapshots.filePath(snap);
      if (QFileInfo::exists(path + "/config.json")) out << path;
    }
  }
  return out;
}

}  // namespace spillway::ui
