#include "DatasetPreview.h"

#include <QDateTime>
#include <QDir>
#include <QFileInfo>
#include <QHash>
#include <QLocale>
#include <QObject>
#include <algorithm>
#include <memory>
#include <mutex>

#include "DatasetSample.h"
#include "JobSettings.h"
#include "ModelInfo.h"
#include "data/dataset-options.h"
#include "data/dataset.h"
#include "data/model-tokenizer.h"
#include "data/tokenizer.h"
#include "model/model-config.h"

namespace spillway::ui {
namespace {

// Tokens of context before each shown token: enough for a piece to come out as it does in the
// whole text (SentencePiece's leading space, a character split over byte tokens), and a constant,
// so rendering costs O(tokens shown) and not O(seq_len^2) as decoding the whole prefix did (seq_len
// 100000 spent minutes there).
constexpr size_t kDecodeContext = 8;

bool stop(const std::atomic<bool>* cancel) {
  return cancel && cancel->load(std::memory_order_relaxed);
}

DatasetPreview cancelledPreview(quint64 generation) {
  DatasetPreview p;
  p.cancelled = true;
  p.generation = generation;
  return p;
}

// Identifies the tokenizer files' version: the names, sizes and times of the folder's files.
QString tokenizerStamp(const QString& path) {
  const QFileInfo info(path);
  QString stamp = path;
  const QFileInfoList files =
      info.isDir() ? QDir(path).entryInfoList(QDir::Files, QDir::Name) : QFileInfoList{info};
  for (const QFileInfo& f : files)
    stamp += QString("|%1:%2:%3")
                 .arg(f.fileName())
                 .arg(f.size())
                 .arg(f.lastModified().toMSecsSinceEpoch());
  return stamp;
}

// The last tokenizer loaded, kept while its files do not change: every change of the form
// previews with the same model, and a large tokenizer.json (a 128K-token BPE vocabulary and its
// merges) need not be parsed again each time.
std::shared_ptr<const Tokenizer> cachedTokenizer(const QString& path, QString* error) {
  static std::mutex mutex;
  static QString cachedStamp;
  static std::shared_ptr<const Tokenizer> cached;
  const QString stamp = tokenizerStamp(path);
  {
    std::lock_guard lock(mutex);
    if (cached && stamp == cachedStamp) return cached;
  }
  auto loaded = load_model_tokenizer(path.toStdString());
  if (!loaded.ok()) {
    *error = QObject::tr("The model's tokenizer: %1")
                 .arg(QString::fromStdString(loaded.status().message()));
    return nullptr;
  }
  std::shared_ptr<const Tokenizer> tokenizer = std::move(*loaded);
  std::lock_guard lock(mutex);
  cachedStamp = stamp;
  cached = tokenizer;
  return tokenizer;
}

// Whether the engine reads `path` as JSON (and the sample must be cut at JSON record boundaries).
bool readAsJson(const QString& path, DatasetFormat format) {
  if (format == DatasetFormat::kText) return false;
  if (format != DatasetFormat::kAuto) return true;
  const QString ext = QFileInfo(path).suffix().toLower();
  return ext == "json" || ext == "jsonl" || ext == "ndjson";
}

// The trained-token highlight, and the look of a special token (BOS, EOS, a template's end of
// turn), which decodes to nothing or to text that reads like the data's own.
constexpr const char* kTrainedStyle = "background-color:#ffe08a;color:#000";
constexpr const char* kSpecialStyle = "color:#b3261e;font-weight:bold";

// Whether `id` is a special token that the preview shows by its name: BOS and EOS (a
// SentencePiece control token decodes to ""), and any token HF's skip_special_tokens drops
// (<|im_end|>, <|eot_id|>). `cache` remembers the answer per id.
bool isSpecial(int32_t id, const Tokenizer& tokenizer, QHash<int32_t, bool>& cache) {
  if (auto it = cache.constFind(id); it != cache.constEnd()) return *it;
  bool special = id == tokenizer.bos_id() || id == tokenizer.eos_id();
  if (!special) {
    const int32_t one[] = {id};
    const auto skipped = tokenizer.decode(one, true);
    const auto kept = tokenizer.decode(one, false);
    special = skipped.ok() && kept.ok() && skipped->empty() && !kept->empty();
  }
  cache.insert(id, special);
  return special;
}

// `seq`'s first kShownTokens tokens as HTML, trained ones highlighted, special tokens shown by
// their names (counted in `preview`). Empty when cancelled.
QString renderSequence(const TokenSequence& seq, const Tokenizer& tokenizer,
                       const std::atomic<bool>* cancel, bool* cancelled, DatasetPreview& preview) {
  QString html;
  QHash<int32_t, bool> specials;
  // The inputs, then the last target when it is trained: the token that ends the last reply
  // (EOS, <|im_end|>) is only a label, never an input, and would not be shown otherwise.
  std::vector<int32_t> tokens(seq.input_ids.begin(), seq.input_ids.end());
  if (!seq.labels.empty() && seq.labels.back() != -100) tokens.push_back(seq.labels.back());
  const size_t shown = std::min<size_t>(tokens.size(), DatasetPreview::kShownTokens);
  for (size_t t = 0; t < shown; ++t) {
    if (stop(cancel)) return *cancelled = true, QString();
    // Position t's token is the target of position t-1: it is trained when that label is set.
    const bool trained = t > 0 && seq.labels[t - 1] != -100;
    if (isSpecial(tokens[t], tokenizer, specials)) {
      const QString name = QString::fromStdString(tokenizer.id_to_token(tokens[t])).toHtmlEscaped();
      const QString why = trained ? QObject::tr("special token %1, trained")
                                  : QObject::tr("special token %1, not trained");
      html += QString("<span style=\"%1;%2\" title=\"%3\">%4</span>")
                  .arg(kSpecialStyle, trained ? kTrainedStyle : "", why.arg(name), name);
      ++preview.specialTokensShown;
      if (trained) ++preview.specialTokensTrained;
      // A line break after a reply's closing token and after EOS: the next turn starts a line.
      if (trained || tokens[t] == tokenizer.eos_id()) html += "<br/>";
      continue;
    }
    // Each token's text is what it adds to the decoded text before it: decoding tokens one by
    // one would lose SentencePiece's leading spaces and split multi-byte characters.
    const size_t from = t > kDecodeContext ? t - kDecodeContext : 0;
    const std::span<const int32_t> ids(tokens.data() + from, t + 1 - from);
    const auto with = tokenizer.decode(ids);
    const auto before =
        t > from ? tokenizer.decode(ids.first(ids.size() - 1)) : Result<std::string>(std::string());
    if (!with.ok() || !before.ok()) {
      // A decoder that fails (tokenizer.h) ends the sample with its reason.
      const Status& why = with.ok() ? before.status() : with.status();
      return html + QString("<span style=\"color:#d33\"> [%1]</span>")
                        .arg(QString::fromStdString(why.message()).toHtmlEscaped());
    }
    const bool extends =
        with->size() >= before->size() && with->compare(0, before->size(), *before) == 0;
    const auto last =
        extends ? Result<std::string>(with->substr(before->size())) : tokenizer.decode(ids.last(1));
    const std::string piece = last.ok() ? *last : std::string();
    QString text = QString::fromStdString(piece).toHtmlEscaped();
    text.replace("\n", "↵<br/>");
    html += trained ? QString("<span style=\"%1\">%2</span>").arg(kTrainedStyle, text) : text;
  }
  if (const qint64 more = static_cast<qint64>(tokens.size() - shown); more > 0) {
    html += " <i>" +
            (more == 1 ? QObject::tr("… and 1 more token")
                       : QObject::tr("… and %1 more tokens").arg(QLocale().toString(more))) +
            "</i>";
  }
  return html;
}

}  // namespace

DatasetPreview::Request DatasetPreview::Request::of(const JobSettings& job) {
  Request r;
  r.path = job.trainPath;
  r.modelPath = job.modelPath;
  r.modelInit = job.modelInit();
  r.tokenizerPath = job.tokenizer().isEmpty() ? job.modelPath : job.tokenizer();
  r.seqLen = job.seqLen;
  r.format = job.format;
  r.chatTemplate = job.chatTemplate;
  r.packing = job.packing;
  return r;
}

DatasetPreview DatasetPreview::load(const QString& path, const QString& modelPath, int seqLen,
                                    const QString& format, int samples) {
  Request r;
  r.path = path;
  r.modelPath = modelPath;
  r.tokenizerPath = modelPath;
  r.seqLen = seqLen;
  r.format = format;
  r.samples = samples;
  return load(r);
}

DatasetPreview DatasetPreview::load(const Request& r, const std::atomic<bool>* cancel) {
  DatasetPreview p;
  p.generation = r.generation;
  p.seqLen = r.seqLen;
  if (r.path.isEmpty()) {
    p.error = QObject::tr("Choose a dataset file.");
    return p;
  }
  if (stop(cancel)) return cancelledPreview(r.generation);
  // The options training reads the data with: the job's settings and the model's config.json.
  const bool init = r.modelPath.isEmpty() && !r.modelInit.isUndefined() && !r.modelInit.isNull();
  auto config =
      init ? ModelInfo::initConfig(r.modelInit) : ModelConfig::load(r.modelPath.toStdString());
  if (!config.ok()) {
    p.error = (init ? QObject::tr("The model's model.init: %1")
                    : QObject::tr("The model's config.json: %1"))
                  .arg(QString::fromStdString(config.status().message()));
    return p;
  }
  if (r.seqLen > config->max_position_embeddings) {
    // What the worker refuses (planner.h, check_positions): the model never saw such positions.
    // The preview is still shown (how the data would be cut), with this above it in red.
    p.beyondPositions = QObject::tr(
                            "Sequence length %1 is beyond the model's %2 positions "
                            "(max_position_embeddings): lower it to %2 or less.")
                            .arg(r.seqLen)
                            .arg(config->max_position_embeddings);
  }
  auto options = make_dataset_options(
      {r.format.toStdString(), r.chatTemplate.toStdString(), r.seqLen, r.packing}, *config);
  if (!options.ok()) {
    p.error = QString::fromStdString(options.status().message());
    return p;
  }
  const DatasetOptions& opts = *options;
  if (stop(cancel)) return cancelledPreview(r.generation);
  const DatasetSample sample =
      DatasetSample::read(r.path, r.sampleBytes, readAsJson(r.path, opts.read.format), cancel);
  if (sample.cancelled) return cancelledPreview(r.generation);
  if (!sample.ok()) {
    p.error = sample.error;
    return p;
  }
  p.fileBytes = sample.fileBytes;
  p.sampleBytes = sample.readBytes;
  p.sampled = !sample.whole;

  QString error;
  const std::shared_ptr<const Tokenizer> tokenizer = cachedTokenizer(r.tokenizerPath, &error);
  if (!tokenizer) {
    p.error = error;
    return p;
  }
  if (stop(cancel)) return cancelledPreview(r.generation);

  const std::string path = r.path.toStdString();
  auto records = parse_dataset_records(
      std::string_view(sample.bytes.constData(), sample.bytes.size()), path, opts.read);
  if (!records.ok() && p.sampled) {
    // The cut may have split a record the sampler cannot see the end of (one JSON object over
    // many lines): read the whole file, and keep the records that start inside the sample. A bad
    // record is then reported as the worker would report it.
    if (stop(cancel)) return cancelledPreview(r.generation);
    records = read_dataset_records(path, opts.read);
    if (records.ok()) {
      const int64_t lines = sample.bytes.count('\n') + 1;
      auto& list = records->records;
      auto past = std::find_if(list.begin() + 1, list.end(),
                               [lines](const DatasetRecord& rec) { return rec.line > lines; });
      list.erase(past, list.end());
    }
  }
  if (!records.ok()) {
    p.error = QString::fromStdString(records.status().message());
    return p;
  }
  if (stop(cancel)) return cancelledPreview(r.generation);
  auto ds = Dataset::from_records(std::move(*records), path, *tokenizer, opts);
  if (stop(cancel)) return cancelledPreview(r.generation);
  if (!ds.ok()) {
    p.error = QString::fromStdString(ds.status().message());
    return p;
  }
  const DatasetStats& s = ds->stats();
  p.format = dataset_format_name(ds->format());
  if (ds->chat_template().kind != ChatTemplateKind::kAuto)
    p.chatTemplate = chat_template_name(ds->chat_template().kind);
  p.chatTemplateReason = QString::fromStdString(ds->chat_template().reason);
  p.examples = s.records;
  p.sequences = static_cast<qint64>(ds->size());
  p.totalTokens = s.total_tokens;
  p.trainedTokens = s.trained_tokens;
  p.positions = s.positions;
  p.truncated = s.truncated;
  p.maxExampleTokens = s.max_example_tokens();
  const bool chat = ds->chat_template().kind != ChatTemplateKind::kAuto;
  p.packed = chat && r.packing;
  if (p.truncated > 0) {
    // An example of n tokens is whole in a sequence of n - 1 positions (the last token is only a
    // target); rounded up to a multiple of 64, within the job's and the model's limits.
    const int most = std::min<int>(static_cast<int>(JobForm::maximum("data.seq_len")),
                                   config->max_position_embeddings);
    const int need = std::max(2, p.maxExampleTokens - 1);
    p.seqLenForAll = std::min(most, (need + 63) / 64 * 64);
  }
  p.histogramUpper = std::max(r.seqLen * 2, 1);
  for (int64_t c : s.histogram(40, p.histogramUpper)) p.histogram << c;

  QString html;
  for (int i = 0; i < r.samples && i < static_cast<int>(ds->size()); ++i) {
    const TokenSequence& seq = (*ds)[i];
    bool cancelled = false;
    const QString body = renderSequence(seq, *tokenizer, cancel, &cancelled, p);
    if (cancelled) return cancelledPreview(r.generation);
    Sample whole;
    whole.ids = QVector<int>(seq.input_ids.begin(), seq.input_ids.end());
    whole.labels = QVector<int>(seq.labels.begin(), seq.labels.end());
    p.samples << whole;
    html += QString("<p><b>sample %1</b> (%2 tokens, %3 trained)<br/>%4</p>")
                .arg(i + 1)
                .arg(seq.size())
                .arg(seq.trained_count())
                .arg(body);
  }
  p.previewHtml = html;
  p.ok = true;
  return p;
}

}  // namespace spillway::ui
