#include "DatasetPanel.h"

#include <qcustomplot.h>

#include <QComboBox>
#include <QFileDialog>
#include <QHBoxLayout>
#include <QLabel>
#include <QProgressBar>
#include <QPushButton>
#include <QSettings>
#include <QTextBrowser>
#include <QVBoxLayout>
#include <algorithm>

#include "DatasetPreviewLoader.h"
#include "DialogFolder.h"
#include "Format.h"
#include "JobForm.h"
#include "PlotTheme.h"

namespace spillway::ui {

DatasetPanel::DatasetPanel(QWidget* parent) : QGroupBox(tr("Dataset"), parent) {
  auto* dl = new QVBoxLayout(this);
  auto* drow = new QHBoxLayout;
  path_ = new QComboBox;
  path_->setEditable(true);
  path_->addItems(QSettings().value("recent/datasets").toStringList());
  path_->setCurrentText(QString());
  path_->setObjectName("datasetPath");
  JobForm::bind(path_, "data.train");
  format_ = JobForm::comboBox("data.format");
  format_->setObjectName("datasetFormat");
  template_ = JobForm::comboBox("data.template");
  template_->setObjectName("chatTemplate");
  auto* templateName = new QLabel(tr("Chat template"));
  templateName->setBuddy(template_);
  auto* browse = new QPushButton(tr("Browse…"));
  drow->addWidget(path_, 1);
  drow->addWidget(format_);
  drow->addWidget(templateName);
  drow->addWidget(template_);
  drow->addWidget(browse);
  dl->addLayout(drow);
  label_ = new QLabel(tr("Choose a dataset file."));
  label_->setObjectName("datasetLabel");
  label_->setWordWrap(true);
  busy_ = new QProgressBar;
  busy_->setRange(0, 0);  // busy: a load has no steps to count
  busy_->setTextVisible(false);
  busy_->setMaximumSize(120, 12);
  // The status line keeps its width whether the bar shows or not, so that its text wraps the same.
  QSizePolicy busyPolicy = busy_->sizePolicy();
  busyPolicy.setRetainSizeWhenHidden(true);
  busy_->setSizePolicy(busyPolicy);
  busy_->hide();
  reserveStatusHeight();
  auto* labelRow = new QHBoxLayout;
  labelRow->addWidget(label_, 1);
  labelRow->addWidget(busy_);
  dl->addLayout(labelRow);
  templateUsed_ = new QLabel;
  templateUsed_->setObjectName("chatTemplateUsed");
  templateUsed_->setWordWrap(true);
  templateUsed_->hide();
  dl->addWidget(templateUsed_);
  truncation_ = new QWidget;
  truncation_->setObjectName("truncationWarning");
  auto* tl = new QHBoxLayout(truncation_);
  tl->setContentsMargins(0, 0, 0, 0);
  truncationText_ = new QLabel;
  truncationText_->setObjectName("truncationText");
  truncationText_->setWordWrap(true);
  truncationText_->setStyleSheet("color:#b45309");  // amber: a warning, not an error
  useSeqLen_ = new QPushButton;
  useSeqLen_->setObjectName("useSeqLenForAll");
  tl->addWidget(truncationText_, 1);
  tl->addWidget(useSeqLen_);
  truncation_->hide();
  dl->addWidget(truncation_);
  loader_ = new DatasetPreviewLoader(this);
  connect(loader_, &DatasetPreviewLoader::finished, this, &DatasetPanel::showPreview);
  auto* prow = new QHBoxLayout;
  samples_ = new QTextBrowser;
  samples_->setMinimumHeight(130);
  histogram_ = new QCustomPlot;
  histogram_->setMinimumSize(280, 130);
  histogram_->xAxis->setLabel(tr("tokens per example (longer ones in the last bar)"));
  histogram_->yAxis->setLabel(tr("examples"));
  PlotTheme::follow(histogram_);
  prow->addWidget(samples_, 3);
  prow->addWidget(histogram_, 2);
  dl->addLayout(prow);
  connect(browse, &QPushButton::clicked, this, [this] {
    const QString f = QFileDialog::getOpenFileName(
        this, tr("Dataset"), DialogFolder::start("datasets", path_->currentText()));
    DialogFolder::remember("datasets", f);
    if (!f.isEmpty()) setPath(f);
  });
  connect(path_, &QComboBox::currentTextChanged, this, &DatasetPanel::changed);
  connect(format_, &QComboBox::currentTextChanged, this, &DatasetPanel::changed);
  connect(template_, &QComboBox::currentTextChanged, this, &DatasetPanel::changed);
  connect(useSeqLen_, &QPushButton::clicked, this,
          [this] { emit useSeqLen(dataset_.seqLenForAll); });
}

QString DatasetPanel::path() const {
  return path_->currentText().trimmed();
}

void DatasetPanel::setPath(const QString& path) {
  path_->setCurrentText(path);
}

QString DatasetPanel::format() const {
  return format_->currentText();
}

QString DatasetPanel::chatTemplate() const {
  return template_->currentText();
}

void DatasetPanel::setFormatAndTemplate(const QString& format, const QString& chatTemplate) {
  format_->setCurrentText(format);
  template_->setCurrentText(chatTemplate);
}

void DatasetPanel::preview(const JobSettings& job, bool modelOk) {
  if (job.trainPath.isEmpty() || !modelOk) {
    loader_->cancel();
    busy_->hide();
    dataset_ = DatasetPreview();
    dataset_.error = job.trainPath.isEmpty()
                         ? tr("Choose a dataset file.")
                         : tr("Choose a valid model first: its tokenizer counts the tokens.");
    reserveStatusHeight();
    label_->setText(dataset_.error);
    clearView();
    return;
  }
  // Only schedules: the load starts on a pool thread once the changes pause, and a newer change
  // cancels it.
  loader_->request(DatasetPreview::Request::of(job));
  // "Reading dataset…" is one line where the preview's line may be two or three: the line keeps
  // the height it had, so that the fields below it do not move while the preview recomputes.
  label_->setMinimumHeight(std::max(label_->minimumHeight(), label_->height()));
  label_->setText(tr("Reading dataset…"));
  busy_->show();
}

// No samples and no bars: what was shown belongs to another file or setting.
void DatasetPanel::clearView() {
  templateUsed_->hide();
  truncation_->hide();
  samples_->clear();
  histogram_->clearPlottables();
  histogram_->clearItems();
  histogram_->replot(QCustomPlot::rpQueuedReplot);
}

// At least two lines, the height of a preview's line at the window's usual widths, so that a
// one-line message ("Choose a dataset file.") and the preview's line take the same room.
void DatasetPanel::reserveStatusHeight() {
  label_->setMinimumHeight(2 * label_->fontMetrics().lineSpacing());
}

void DatasetPanel::showPreview(const DatasetPreview& preview) {
  busy_->hide();
  reserveStatusHeight();
  dataset_ = preview;
  if (!dataset_.ok) {
    label_->setText(
        QString("<span style=\"color:#d32f2f\">%1</span>").arg(dataset_.error.toHtmlEscaped()));
    clearView();
    emit previewed(dataset_);
    return;
  }
  // English plurals without a translation file: tr() fills in %n, the source text has the form.
  const int examples = static_cast<int>(dataset_.examples);
  const int sequences = static_cast<int>(dataset_.sequences);
  QString text =
      tr("Format %1 · %2 · %3 of up to %4 tokens · %5 tokens, %6 trained · %7 truncated at %4")
          .arg(dataset_.format)
          .arg(examples == 1 ? tr("%n example", nullptr, examples)
                             : tr("%n examples", nullptr, examples))
          .arg(sequences == 1 ? tr("%n sequence", nullptr, sequences)
                              : tr("%n sequences", nullptr, sequences))
          .arg(dataset_.seqLen)
          .arg(formatCount(dataset_.totalTokens), formatCount(dataset_.trainedTokens))
          .arg(dataset_.truncated);
  // What the padding costs: the share of each step's tokens that are the data's.
  const double fill = sequences > 0 && dataset_.seqLen > 0
                          ? static_cast<double>(dataset_.positions) /
                                (static_cast<double>(sequences) * dataset_.seqLen)
                          : 0.0;
  if (dataset_.packed)
    text += tr(" · conversations packed, sequences %1% full").arg(fill * 100.0, 0, 'f', 0);
  else if (!dataset_.chatTemplate.isEmpty() && fill < 0.5)
    text += tr(" · sequences %1% full: packing the conversations would fill them")
                .arg(fill * 100.0, 0, 'f', 0);
  if (dataset_.sampled && dataset_.sampleBytes > 0) {
    const double wholeTokens = static_cast<double>(dataset_.totalTokens) *
                               static_cast<double>(dataset_.fileBytes) /
                               static_cast<double>(dataset_.sampleBytes);
    text +=
        tr(" — counted in the first %1 of %2; about %3 tokens in the whole file")
            .arg(formatBytes(static_cast<double>(dataset_.sampleBytes)),
                 formatBytes(static_cast<double>(dataset_.fileBytes)), formatCount(wholeTokens));
  }
  if (!dataset_.beyondPositions.isEmpty())
    text = QString("<span style=\"color:#d32f2f\">%1</span><br>%2")
               .arg(dataset_.beyondPositions.toHtmlEscaped(), text.toHtmlEscaped());
  label_->setText(text);
  showTemplateAndTruncation();
  samples_->setHtml(dataset_.previewHtml);
  histogram_->clearPlottables();
  histogram_->clearItems();
  auto* bars = new QCPBars(histogram_->xAxis, histogram_->yAxis);
  const double width =
      static_cast<double>(dataset_.histogramUpper) / std::max<int>(1, dataset_.histogram.size());
  QVector<double> x, y;
  for (int i = 0; i < dataset_.histogram.size(); ++i)
    x << (i + 0.5) * width, y << dataset_.histogram[i];
  bars->setData(x, y);
  bars->setWidth(width * 0.9);
  auto* line = new QCPItemStraightLine(histogram_);
  line->point1->setCoords(dataset_.seqLen, 0);
  line->point2->setCoords(dataset_.seqLen, 1);
  line->setPen(QPen(QColor("#d32f2f"), 2));
  histogram_->rescaleAxes();
  histogram_->replot(QCustomPlot::rpQueuedReplot);
  emit previewed(dataset_);
}

// The template line (chat data only) and the truncation warning of the preview just shown.
void DatasetPanel::showTemplateAndTruncation() {
  if (dataset_.chatTemplate.isEmpty()) {
    templateUsed_->hide();
  } else {
    QString line = tr("Chat template used: <b>%1</b> (%2).")
                       .arg(dataset_.chatTemplate.toHtmlEscaped(),
                            dataset_.chatTemplateReason.toHtmlEscaped());
    if (dataset_.specialTokensShown > 0)
      line +=
          tr(" Special tokens are shown by name in <span style=\"color:#b3261e;font-weight:"
             "bold\">red</span>; those on yellow are trained, as each reply's closing token is.");
    templateUsed_->setText(line);
    templateUsed_->show();
  }
  if (dataset_.truncated <= 0) {
    truncation_->hide();
    return;
  }
  const double share = 100.0 * static_cast<double>(dataset_.truncated) /
                       static_cast<double>(std::max<qint64>(1, dataset_.examples));
  QString warning = tr("⚠ %1 of %2 examples (%3%) are longer than %4 tokens and are cut: their "
                       "ends are not trained.")
                        .arg(dataset_.truncated)
                        .arg(dataset_.examples)
                        .arg(share, 0, 'f', 0)
                        .arg(dataset_.seqLen);
  const bool longer = dataset_.seqLenForAll > dataset_.seqLen;
  // The longest example fits the model's positions, or only fewer are cut.
  const bool holdsAll = dataset_.seqLenForAll >= dataset_.maxExampleTokens - 1;
  const QString seqFix =
      holdsAll
          ? tr("a sequence length of %1 holds the longest (%2 tokens)")
                .arg(dataset_.seqLenForAll)
                .arg(dataset_.maxExampleTokens)
          : tr("a sequence length of %1, the model's most, cuts fewer").arg(dataset_.seqLenForAll);
  if (longer)
    warning += tr(" Fix: %1.").arg(seqFix);
  else
    warning += tr(" The model takes at most %1 positions.").arg(dataset_.seqLenForAll);
  truncationText_->setText(warning);
  useSeqLen_->setText(tr("Use %1").arg(dataset_.seqLenForAll));
  useSeqLen_->setVisible(longer);
  truncation_->show();
}

}  // namespace spillway::ui
