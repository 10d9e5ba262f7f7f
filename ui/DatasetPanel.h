// DatasetPanel: New run's Dataset box — the dataset field (recent files), its format and chat
// template, Browse…, the line that counts the examples and tokens, the template used, the
// truncation warning with its two fixes, and the rendered samples beside the histogram of tokens
// per example.
//
// preview() only schedules: DatasetPreviewLoader reads the file on a pool thread once the changes
// pause, and a newer request cancels an older one, so the panel never reads the file on the
// window's thread. The form's other settings (sequence length, packing, the model's tokenizer)
// come with each request; the panel says when its own fields change (changed()) and the page asks
// for a preview with the whole form.
//
// Thread-safety: GUI thread. Ownership: a widget of the page; it owns its fields and the loader.
#pragma once

#include <QGroupBox>

#include "DatasetPreview.h"
#include "JobSettings.h"

class QComboBox;
class QCustomPlot;
class QLabel;
class QProgressBar;
class QPushButton;
class QTextBrowser;

namespace spillway::ui {

class DatasetPreviewLoader;

class DatasetPanel : public QGroupBox {
  Q_OBJECT
 public:
  explicit DatasetPanel(QWidget* parent = nullptr);

  QString path() const;  // trimmed
  void setPath(const QString& path);
  QString format() const;
  QString chatTemplate() const;
  void setFormatAndTemplate(const QString& format, const QString& chatTemplate);
  // Shows `job`'s dataset: "Choose a dataset file." without one, "Choose a valid model first"
  // while `modelOk` is false (its tokenizer counts the tokens), else a preview on its way.
  void preview(const JobSettings& job, bool modelOk);
  // The last preview shown; while loader()->busy() a newer one is on its way.
  const DatasetPreview& shown() const { return dataset_; }
  const DatasetPreviewLoader* loader() const { return loader_; }

 signals:
  void changed();  // the path, format or template: a new preview is due
  void previewed(const DatasetPreview& preview);  // a preview (or its error) is shown
  // The truncation warning's fix: this sequence length holds the examples.
  void useSeqLen(int seqLen);

 private:
  void showPreview(const DatasetPreview& preview);
  void reserveStatusHeight();
  void clearView();
  void showTemplateAndTruncation();

  DatasetPreview dataset_;
  QComboBox *path_, *format_, *template_;
  QLabel* label_;
  QProgressBar* busy_;
  QLabel* templateUsed_;  // the chat template the preview (and training) renders with, and why
  // Truncated examples as a warning, with the two fixes as buttons.
  QWidget* truncation_;
  QLabel* truncationText_;
  QPushButton* useSeqLen_;
  DatasetPreviewLoader* loader_;
  QTextBrowser* samples_;
  QCustomPlot* histogram_;
};

}  // namespace spillway::ui
