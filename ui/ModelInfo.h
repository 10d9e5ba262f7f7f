// ModelInfo: what the New run page shows about a model folder — or why it cannot be used.
// inspect() reads config.json and validates every safetensors header and tensor (engine/model);
// it does no Qt work beyond strings, so it may run off the GUI thread.
#pragma once

#include <QString>
#include <QStringList>

namespace spillway::ui {

struct ModelInfo {
  bool ok = false;
  QString error;  // a message a person can act on when !ok
  QString architecture;
  qint64 parameters = 0;
  int layers = 0;
  int hiddenSize = 0;
  int vocabSize = 0;
  int heads = 0, kvHeads = 0;
  QString dtype;  // dominant dtype on disk
  qint64 bytesOnDisk = 0;
  QString modelType;

  static ModelInfo inspect(const QString& dir);
  QString summary() const;  // one line for the page
};

// Model folders (snapshots) in a Hugging Face hub cache (~/.cache/huggingface/hub by default).
QStringList findHuggingFaceModels(const QString& hubDir = QString());

}  // namespace spillway::ui
