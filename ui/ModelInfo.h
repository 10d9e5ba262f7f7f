// ModelInfo: what the New run page shows about a model folder, or about a model a job creates
// from `model.init` (a preset name or a config.json object, random weights) — or why it cannot be
// used. inspect() reads config.json and validates every safetensors header and tensor
// (engine/model); fromInit() parses the init as the worker does. Neither does Qt work beyond
// strings, so both may run off the GUI thread.
#pragma once

#include <QJsonObject>
#include <QString>
#include <QStringList>

#include "core/status.h"
#include "model/model-config.h"

namespace spillway::ui {

struct ModelInfo {
  bool ok = false;
  QString error;  // a message a person can act on when !ok; never empty then
  QString architecture;
  QString family;  // in words: "Qwen3", "Phi-3 / Phi-4" (ModelConfig::family)
  qint64 parameters = 0;
  int layers = 0;
  int hiddenSize = 0;
  int vocabSize = 0;
  int heads = 0, kvHeads = 0;
  QString dtype;  // dominant dtype on disk
  qint64 bytesOnDisk = 0;
  QString modelType;
  // Created from model.init: `init` is the preset's name ("" for a config object), `seed` the
  // seed of its random weights (model.seed). Nothing on disk: bytesOnDisk 0, dtype "".
  bool fromInit = false;
  QString init;
  qint64 seed = 0;

  static ModelInfo inspect(const QString& dir);
  // `model` is a job's model section holding "init" (and "seed"); an unknown preset or a config
  // the engine refuses is !ok with the engine's message.
  static ModelInfo inspectInit(const QJsonObject& model);
  // The ModelConfig of `init` (a preset name or a config.json object), as the worker reads it.
  static Result<ModelConfig> initConfig(const QJsonValue& init);
  QString summary() const;  // one line for the page
};

// Model folders (snapshots) in a Hugging Face hub cache (~/.cache/huggingface/hub by default).
QStringList findHuggingFaceModels(const QString& hubDir = QString());

}  // namespace spillway::ui
