// DatasetPreview: what the New run page shows about a dataset for a model — detected format,
// example count, token-length statistics and truncation at the chosen sequence length, and the
// first samples rendered with the trained tokens highlighted. load() tokenizes the whole file
// with the model's tokenizer (engine/data), so call it off the GUI thread for large files.
#pragma once

#include <QString>
#include <QVector>

namespace spillway::ui {

struct DatasetPreview {
  bool ok = false;
  QString error;  // "FILE:LINE: reason" for a malformed record, or what is missing
  QString format;
  QString chatTemplate;
  qint64 examples = 0;
  qint64 sequences = 0;
  qint64 totalTokens = 0;
  qint64 trainedTokens = 0;
  qint64 truncated = 0;  // examples cut at seqLen
  int maxExampleTokens = 0;
  QVector<qint64> histogram;  // counts of example lengths in equal bins over [0, histogramUpper]
  int histogramUpper = 0;
  QString previewHtml;  // first samples; trained tokens highlighted

  // `tokenizerPath`: a model folder or tokenizer file ("builtin:bytes" for the byte tokenizer).
  static DatasetPreview load(const QString& path, const QString& tokenizerPath, int seqLen,
                             const QString& format = "auto", int samples = 3);
};

}  // namespace spillway::ui
