// DatasetPreview: what the New run page shows about a dataset for a model — detected format,
// example count, token-length statistics and truncation at the chosen sequence length, and the
// first samples rendered with the trained tokens highlighted.
//
// The data is read with the options training uses (make_dataset_options, engine/data): the job's
// format, chat template and sequence length and the model's config.json (its model_type picks the
// template when the tokenizer names none), so the template and the trained-token mask shown are
// training's.
//
// load() reads a bounded sample (DatasetSample: the first Request::sampleBytes, cut at a record
// boundary), so its cost does not grow with the file: the counts are those of the sample, and
// `sampled` says so. It tokenizes with the model's tokenizer (engine/data): 1 MB of plain text is
// about 0.3 s with stories260K's, so it runs on a pool thread (DatasetPreviewLoader), never on the
// GUI thread. The sequence length does not make the work grow: each sample shows at most
// kShownTokens tokens, each decoded with a short context instead of its whole prefix.
//
// Thread-safety: load() may run on several threads at once (the tokenizer cache is guarded by a
// mutex; Tokenizer is thread-safe). It checks `cancel` between the file's chunks, between phases
// and between shown tokens, and returns early with `cancelled` set; the one phase it cannot stop
// inside is Dataset::from_records (tokenizing and packing the sample). Results are plain values
// owned by the caller.
#pragma once

#include <QJsonValue>
#include <QString>
#include <QVector>
#include <atomic>

namespace spillway::ui {

struct JobSettings;

struct DatasetPreview {
  // What to preview. `generation` is the loader's request number, echoed in the result.
  struct Request {
    QString path;
    QString modelPath;      // the model folder: its config.json (model_type, vocab_size)
    QJsonValue modelInit;   // or, without a folder, the job's model.init (a preset or a config)
    QString tokenizerPath;  // a model folder or tokenizer file ("builtin:bytes": byte tokenizer)
    int seqLen = 512;
    QString format = "auto";
    QString chatTemplate = "auto";
    bool packing = false;  // data.packing: instruction data packed into full sequences
    int samples = 3;
    qint64 sampleBytes = 1'000'000;  // read at most this much of the file
    quint64 generation = 0;

    bool operator==(const Request&) const = default;

    // The preview of a job's training data: its file, model, tokenizer (model.tokenizer, else the
    // model folder), format, template and sequence length.
    static Request of(const JobSettings& job);
  };
  // One sample sequence as training sees it: token ids and their labels (-100: not trained).
  struct Sample {
    QVector<int> ids;
    QVector<int> labels;
  };
  static constexpr int kShownTokens = 512;  // per sample in previewHtml

  bool ok = false;
  bool cancelled = false;  // a newer request replaced this one; nothing else is set
  quint64 generation = 0;
  int seqLen = 0;  // the request's
  QString error;   // "FILE:LINE: reason" for a malformed record, or what is missing or wrong
  // Set when seqLen is beyond the model's max_position_embeddings, which training refuses: what
  // to change. The rest of the preview is still filled in.
  QString beyondPositions;
  QString format;
  QString chatTemplate;        // the template used for chat formats ("" for text): "chatml", ...
  QString chatTemplateReason;  // why that one: "tokenizer_config.json chat_template has ..."
  // The counts below are of the first `sampleBytes` of `fileBytes` when `sampled`.
  bool sampled = false;
  qint64 sampleBytes = 0;
  qint64 fileBytes = 0;
  qint64 examples = 0;
  qint64 sequences = 0;
  qint64 totalTokens = 0;
  qint64 trainedTokens = 0;
  qint64 positions =
      0;  // the sequences' tokens, padding not counted: fill = positions / (sequences · seqLen)
  qint64 truncated = 0;  // examples cut at seqLen
  int maxExampleTokens = 0;
  // Chat data packed (data.packing): several whole conversations a sequence, each attending only
  // to itself. Packing cuts nothing that padding would not: a longer example is cut either way.
  bool packed = false;
  // When examples are truncated: the sequence length that holds the longest one (a multiple of
  // 64, at most the model's positions).
  int seqLenForAll = 0;
  // The special tokens shown in previewHtml as chips (their vocabulary strings, "</s>",
  // "<|im_end|>"), and how many of them are trained targets: a template's end-of-turn token is.
  int specialTokensShown = 0;
  int specialTokensTrained = 0;
  QVector<qint64> histogram;  // counts of example lengths in equal bins over [0, histogramUpper]
  int histogramUpper = 0;
  QString previewHtml;      // first samples; trained tokens highlighted
  QVector<Sample> samples;  // the same first samples, whole

  static DatasetPreview load(const Request& request, const std::atomic<bool>* cancel = nullptr);
  // A model folder that is also the tokenizer's.
  static DatasetPreview load(const QString& path, const QString& modelPath, int seqLen,
                             const QString& format = "auto", int samples = 3);
};

}  // namespace spillway::ui
