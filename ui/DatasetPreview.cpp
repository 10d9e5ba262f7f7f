#include "DatasetPreview.h"

#include <QObject>
#include <algorithm>

#include "core/thread-pool.h"
#include "data/dataset.h"
#include "train/export.h"

namespace spillway::ui {

DatasetPreview DatasetPreview::load(const QString& path, const QString& tokenizerPath, int seqLen,
                                    const QString& format, int samples) {
  DatasetPreview p;
  if (path.isEmpty()) {
    p.error = QObject::tr("Choose a dataset file.");
    return p;
  }
  auto loaded = load_model_tokenizer(tokenizerPath.toStdString());
  if (!loaded.ok()) {
    p.error = QObject::tr("The model's tokenizer: %1").arg(QString::fromStdString(loaded.status().message()));
    return p;
  }
  const std::unique_ptr<Tokenizer> tokenizer = std::move(*loaded);
  DatasetOptions opts;
  opts.seq_len = seqLen;
  opts.pool = &ThreadPool::global();
  auto fmt = parse_dataset_format(format.toStdString());
  if (!fmt.ok()) {
    p.error = QString::fromStdString(fmt.status().message());
    return p;
  }
  opts.read.format = *fmt;
  auto ds = Dataset::load(path.toStdString(), *tokenizer, opts);
  if (!ds.ok()) {
    p.error = QString::fromStdString(ds.status().message());
    return p;
  }
  const DatasetStats& s = ds->stats();
  p.ok = true;
  p.format = dataset_format_name(ds->format());
  p.chatTemplate = QString::fromStdString(ds->chat_template().reason);
  p.examples = s.records;
  p.sequences = static_cast<qint64>(ds->size());
  p.totalTokens = s.total_tokens;
  p.trainedTokens = s.trained_tokens;
  p.truncated = s.truncated;
  p.maxExampleTokens = s.max_example_tokens();
  p.histogramUpper = std::max(seqLen * 2, 1);
  for (int64_t c : s.histogram(40, p.histogramUpper)) p.histogram << c;

  QString html;
  for (int i = 0; i < samples && i < static_cast<int>(ds->size()); ++i) {
    const TokenSequence& seq = (*ds)[i];
    html += QString("<p><b>sample %1</b> (%2 tokens, %3 trained)<br/>")
                .arg(i + 1)
                .arg(seq.size())
                .arg(seq.trained_count());
    // Each token's text is what it adds to the decoded prefix: decoding tokens one by one would
    // lose SentencePiece's leading spaces and split multi-byte characters.
    std::string previous;
    for (size_t t = 0; t < seq.size(); ++t) {
      // Position t's token is the target of position t-1: it is trained when that label is set.
      const bool trained = t > 0 && seq.labels[t - 1] != -100;
      std::string prefix = tokenizer->decode(std::span<const int32_t>(seq.input_ids.data(), t + 1));
      const std::string piece =
          prefix.size() >= previous.size() && prefix.compare(0, previous.size(), previous) == 0
              ? prefix.substr(previous.size())
              : tokenizer->decode(std::span<const int32_t>(&seq.input_ids[t], 1));
      previous = std::move(prefix);
      QString text = QString::fromStdString(piece).toHtmlEscaped();
      text.replace("\n", "↵<br/>");
      html +=
          trained
              ? QString("<span style=\"background-color:#ffe08a;color:#000\">%1</span>").arg(text)
              : text;
    }
    html += "</p>";
  }
  p.previewHtml = html;
  return p;
}

}  // namespace spillway::ui
