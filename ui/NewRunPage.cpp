#include "NewRunPage.h"

#include <qcustomplot.h>

#include <QAction>
#include <QApplication>
#include <QCheckBox>
#include <QClipboard>
#include <QComboBox>
#include <QCryptographicHash>
#include <QDateTime>
#include <QDir>
#include <QDoubleSpinBox>
#include <QFileDialog>
#include <QFormLayout>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QJsonDocument>
#include <QLabel>
#include <QLineEdit>
#include <QLocale>
#include <QMessageBox>
#include <QPointer>
#include <QProcess>
#include <QProgressBar>
#include <QPushButton>
#include <QRegularExpression>
#include <QSaveFile>
#include <QScrollArea>
#include <QSettings>
#include <QSpinBox>
#include <QTemporaryDir>
#include <QTextBrowser>
#include <QTimer>
#include <QVBoxLayout>
#include <optional>

#include "DatasetPreviewLoader.h"
#include "Format.h"
#include "GpuProbe.h"
#include "JobForm.h"
#include "PlanView.h"
#include "PlotTheme.h"
#include "WorkerClient.h"
#include "history/run-folder.h"
#include "history/run-store.h"
#include "job/job-schema.h"

namespace spillway::ui {
namespace {

// The worker's limits, from the job schema: train.lr in (0, 10], micro_batch_size up to 2^16.
const double kMaxLr = JobForm::maximum("train.lr");
const int kMaxMicroBatch = static_cast<int>(JobForm::maximum("train.micro_batch_size"));

// A learning rate as typed: 3e-3, 2E-5, 0.0003, or a decimal in this locale ("0,0003"); nullopt
// for anything else.
std::optional<double> parseNumber(const QString& text) {
  const QString t = text.trimmed();
  bool ok = false;
  double v = QLocale::c().toDouble(t, &ok);
  if (!ok) v = QLocale().toDouble(t, &ok);
  return ok ? std::optional<double>(v) : std::nullopt;
}

QString shortest(double v) {
  return QString::number(v, 'g', QLocale::FloatingPointShortest);
}

// A field with its error under it, red and hidden while there is none.
QWidget* withError(QWidget* field, QLabel** error, const QString& name) {
  auto* w = new QWidget;
  auto* l = new QVBoxLayout(w);
  l->setContentsMargins(0, 0, 0, 0);
  l->setSpacing(2);
  l->addWidget(field);
  *error = new QLabel;
  (*error)->setObjectName(name);
  (*error)->setStyleSheet("color:#d32f2f");
  (*error)->setWordWrap(true);
  (*error)->hide();
  l->addWidget(*error);
  return w;
}

QString dataHome() {
  auto runs = RunStore::default_runs_dir();
  return runs.ok() ? QFileInfo(QString::fromStdString(*runs)).absolutePath()
                   : QDir::homePath() + "/.local/share/spillway";
}

}  // namespace

NewRunPage::NewRunPage(QWidget* parent) : QWidget(parent) {
  auto* outer = new QVBoxLayout(this);
  auto* scroll = new QScrollArea;
  scroll->setWidgetResizable(true);
  auto* content = new QWidget;
  auto* layout = new QVBoxLayout(content);
  scroll->setWidget(content);
  outer->addWidget(scroll);
  QSettings settings;

  // Model
  auto* modelBox = new QGroupBox(tr("Model"));
  auto* ml = new QVBoxLayout(modelBox);
  auto* mrow = new QHBoxLayout;
  modelCombo_ = new QComboBox;
  modelCombo_->setEditable(true);
  JobForm::bind(modelCombo_, "model.path");
  modelCombo_->addItems(settings.value("recent/models").toStringList());
  for (const QString& m : findHuggingFaceModels()) {
    if (modelCombo_->findText(m) < 0) modelCombo_->addItem(m);
  }
  modelCombo_->setCurrentText(QString());
  auto* modelBrowse = new QPushButton(tr("Browse…"));
  mrow->addWidget(modelCombo_, 1);
  mrow->addWidget(modelBrowse);
  ml->addLayout(mrow);
  modelLabel_ = new QLabel(tr("Choose a model folder."));
  modelLabel_->setObjectName("modelSummary");
  modelLabel_->setWordWrap(true);
  ml->addWidget(modelLabel_);
  layout->addWidget(modelBox);
  connect(modelBrowse, &QPushButton::clicked, this, [this] {
    const QString d =
        QFileDialog::getExistingDirectory(this, tr("Model folder"), modelCombo_->currentText());
    if (!d.isEmpty()) setModelPath(d);
  });
  connect(modelCombo_, &QComboBox::currentTextChanged, this, &NewRunPage::validateModel);
  model_ = ModelInfo::inspect(QString());  // "Choose a model folder": its reason from the start

  // Dataset
  auto* dataBox = new QGroupBox(tr("Dataset"));
  auto* dl = new QVBoxLayout(dataBox);
  auto* drow = new QHBoxLayout;
  dataCombo_ = new QComboBox;
  dataCombo_->setEditable(true);
  dataCombo_->addItems(settings.value("recent/datasets").toStringList());
  dataCombo_->setCurrentText(QString());
  dataCombo_->setObjectName("datasetPath");
  JobForm::bind(dataCombo_, "data.train");
  formatCombo_ = JobForm::comboBox("data.format");
  formatCombo_->setObjectName("datasetFormat");
  templateCombo_ = JobForm::comboBox("data.template");
  templateCombo_->setObjectName("chatTemplate");
  auto* templateName = new QLabel(tr("Chat template"));
  templateName->setBuddy(templateCombo_);
  auto* dataBrowse = new QPushButton(tr("Browse…"));
  drow->addWidget(dataCombo_, 1);
  drow->addWidget(formatCombo_);
  drow->addWidget(templateName);
  drow->addWidget(templateCombo_);
  drow->addWidget(dataBrowse);
  dl->addLayout(drow);
  dataLabel_ = new QLabel(tr("Choose a dataset file."));
  dataLabel_->setObjectName("datasetLabel");
  dataLabel_->setWordWrap(true);
  dataBusy_ = new QProgressBar;
  dataBusy_->setRange(0, 0);  // busy: a load has no steps to count
  dataBusy_->setTextVisible(false);
  dataBusy_->setMaximumSize(120, 12);
  dataBusy_->hide();
  auto* labelRow = new QHBoxLayout;
  labelRow->addWidget(dataLabel_, 1);
  labelRow->addWidget(dataBusy_);
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
  usePacking_ = new QPushButton(tr("Pack conversations"));
  usePacking_->setObjectName("usePacking");
  usePacking_->setToolTip(JobForm::toolTip("data.packing"));
  tl->addWidget(truncationText_, 1);
  tl->addWidget(useSeqLen_);
  tl->addWidget(usePacking_);
  truncation_->hide();
  dl->addWidget(truncation_);
  datasetLoader_ = new DatasetPreviewLoader(this);
  connect(datasetLoader_, &DatasetPreviewLoader::finished, this, &NewRunPage::showDatasetPreview);
  auto* prow = new QHBoxLayout;
  preview_ = new QTextBrowser;
  preview_->setMinimumHeight(130);
  histogram_ = new QCustomPlot;
  histogram_->setMinimumSize(280, 130);
  histogram_->xAxis->setLabel(tr("tokens per example (longer ones in the last bar)"));
  histogram_->yAxis->setLabel(tr("examples"));
  PlotTheme::follow(histogram_);
  prow->addWidget(preview_, 3);
  prow->addWidget(histogram_, 2);
  dl->addLayout(prow);
  layout->addWidget(dataBox);
  connect(dataBrowse, &QPushButton::clicked, this, [this] {
    const QString f = QFileDialog::getOpenFileName(this, tr("Dataset"), dataCombo_->currentText());
    if (!f.isEmpty()) setDatasetPath(f);
  });
  connect(dataCombo_, &QComboBox::currentTextChanged, this, &NewRunPage::previewDataset);
  connect(formatCombo_, &QComboBox::currentTextChanged, this, &NewRunPage::previewDataset);
  connect(templateCombo_, &QComboBox::currentTextChanged, this, &NewRunPage::previewDataset);

  // Training and placement side by side, the training form in two columns, so that the plan
  // stays on screen below them.
  auto* trainBox = new QGroupBox(tr("Training"));
  auto* trainColumns = new QHBoxLayout(trainBox);
  auto* tf = new QFormLayout;
  auto* tf2 = new QFormLayout;
  trainColumns->addLayout(tf);
  trainColumns->addLayout(tf2);
  // Every field from the job schema: its default, range or choices and tooltip (JobForm).
  name_ = new QLineEdit(JobSettings().name);
  JobForm::bind(name_, "name");
  steps_ = JobForm::spinBox("train.steps");
  steps_->setObjectName("steps");
  steps_->setSpecialValueText(tr("from epochs"));
  epochs_ = JobForm::doubleSpinBox("train.epochs", 2);
  epochs_->setObjectName("epochs");
  // Up to 999,999,999 shown, so that a value past the worker's limit is refused with a message
  // rather than changed without a word.
  microBatch_ = JobForm::spinBox("train.micro_batch_size", 999'999'999);
  microBatch_->setObjectName("microBatch");
  gradAccum_ = JobForm::spinBox("train.grad_accum");
  seqLen_ = JobForm::spinBox("data.seq_len");
  seqLen_->setObjectName("seqLen");
  packing_ = new QCheckBox(tr("Pack conversations into full sequences"));
  JobForm::bind(packing_, "data.packing");
  packing_->setObjectName("packing");
  packing_->setChecked(JobForm::defaultValue("data.packing").toBool());
  lrValue_ = JobForm::defaultValue("train.lr").toDouble();
  lr_ = JobForm::lineEdit("train.lr");
  lr_->setText(shortest(lrValue_));
  lr_->setObjectName("learningRate");
  lr_->setToolTip(lr_->toolTip() + tr("\nTyped as 3e-4, 2E-5 or 0.0003"));
  schedule_ = JobForm::comboBox("train.schedule");
  warmup_ = JobForm::spinBox("train.warmup_steps");
  weightDecay_ = JobForm::doubleSpinBox("train.weight_decay", 4);
  clip_ = JobForm::doubleSpinBox("train.clip_grad_norm", 3);
  evalFraction_ = JobForm::doubleSpinBox("data.eval_fraction", 3);
  evalEvery_ = JobForm::spinBox("train.eval_every");
  checkpointEvery_ = JobForm::spinBox("train.checkpoint_every");
  seed_ = JobForm::integerSpinBox("data.seed");
  tf->addRow(tr("Name"), name_);
  tf->addRow(tr("Steps"), steps_);
  tf->addRow(tr("Epochs"), epochs_);
  tf->addRow(tr("Micro-batch size"), withError(microBatch_, &microBatchError_, "microBatchError"));
  tf->addRow(tr("Gradient accumulation"), gradAccum_);
  tf->addRow(tr("Sequence length"), seqLen_);
  tf->addRow(tr("Packing"), packing_);
  tf->addRow(tr("Learning rate"), withError(lr_, &lrError_, "learningRateError"));
  tf->addRow(tr("Schedule"), schedule_);
  tf2->addRow(tr("Warmup steps"), warmup_);
  tf2->addRow(tr("Weight decay"), weightDecay_);
  tf2->addRow(tr("Clip gradient norm"), clip_);
  tf2->addRow(tr("Eval fraction"), evalFraction_);
  tf2->addRow(tr("Eval every"), evalEvery_);
  tf2->addRow(tr("Checkpoint every"), checkpointEvery_);
  tf2->addRow(tr("Seed"), seed_);
  auto* settingsRow = new QHBoxLayout;
  settingsRow->addWidget(trainBox, 2);
  layout->addLayout(settingsRow);
  connect(seqLen_, &QSpinBox::valueChanged, this, &NewRunPage::previewDataset);
  connect(packing_, &QCheckBox::toggled, this, &NewRunPage::previewDataset);
  connect(useSeqLen_, &QPushButton::clicked, this,
          [this] { seqLen_->setValue(dataset_.seqLenForAll); });
  connect(usePacking_, &QPushButton::clicked, this, [this] { packing_->setChecked(true); });
  const auto stepsOrEpochs = [this] { epochs_->setEnabled(steps_->value() == 0); };
  stepsOrEpochs();
  connect(steps_, &QSpinBox::valueChanged, this, stepsOrEpochs);

  // Placement
  auto* placeBox = new QGroupBox(tr("Tier placement"));
  auto* pf = new QFormLayout(placeBox);
  backend_ = JobForm::comboBox("placement.backend");
  gpuLabel_ = new QLabel;
  gpuLabel_->setWordWrap(true);
  // Its text can name long paths (no CUDA module: where it looked): they wrap at '/', and a word
  // longer than the room left is cut rather than widening the page; the tooltip has it whole.
  gpuLabel_->setMinimumWidth(120);
  gpuProbe_ = new GpuProbe(this);
  const auto showGpu = [this] {
    const bool usable = gpuProbe_->done() && gpuProbe_->answer().usable;
    gpuLabel_->setText(breakablePaths(gpuProbe_->text()));
    gpuLabel_->setToolTip(
        tr("The GPU the CUDA backend would use (device 0): %1").arg(gpuProbe_->text()));
    gpuLabel_->setEnabled(usable || !gpuProbe_->done());  // greyed: no GPU to choose
  };
  connect(gpuProbe_, &GpuProbe::finished, this, showGpu);
  showGpu();
  gpuProbe_->start();
  auto* backendRow = new QHBoxLayout;
  backendRow->addWidget(backend_);
  backendRow->addWidget(gpuLabel_, 1);
  deviceGb_ = JobForm::doubleSpinBox("placement.device_memory_bytes", 2, 1e-9);  // shown in GB
  optimizerTier_ = JobForm::comboBox("placement.optimizer");
  masterTier_ = JobForm::comboBox("placement.master");
  ssdDir_ = JobForm::lineEdit("placement.ssd_dir");
  auto* ssdBrowse = new QPushButton(tr("Browse…"));
  auto* ssdRow = new QHBoxLayout;
  ssdRow->addWidget(ssdDir_, 1);
  ssdRow->addWidget(ssdBrowse);
  dramCapGb_ = JobForm::doubleSpinBox("placement.dram_cap_bytes", 1, 1e-9);  // shown in GB
  pf->addRow(tr("Backend"), backendRow);
  pf->addRow(tr("Device memory (GB)"), deviceGb_);
  pf->addRow(tr("Optimizer state"), optimizerTier_);
  pf->addRow(tr("Master weights"), masterTier_);
  pf->addRow(tr("SSD folder"), ssdRow);
  pf->addRow(tr("DRAM cap (GB)"), dramCapGb_);
  settingsRow->addWidget(placeBox, 1);
  connect(ssdBrowse, &QPushButton::clicked, this, [this] {
    const QString d = QFileDialog::getExistingDirectory(this, tr("SSD folder"), ssdDir_->text());
    if (!d.isEmpty()) ssdDir_->setText(d);
  });

  // Plan and launch
  auto* planBox = new QGroupBox(tr("Plan"));
  auto* pl = new QVBoxLayout(planBox);
  planView_ = new PlanView;
  pl->addWidget(planView_);
  auto* buttons = new QHBoxLayout;
  planButton_ = new QPushButton(tr("Plan"));
  measureButton_ = new QPushButton(tr("Measure"));
  measureButton_->setObjectName("measure");
  measureSteps_ = new QSpinBox;
  measureSteps_->setObjectName("measureSteps");
  measureSteps_->setProperty(JobForm::kNotInJobProperty, true);  // Measure's, not the job's
  measureSteps_->setRange(1, kMaxMeasureSteps);
  measureSteps_->setValue(kMeasureSteps);
  measureSteps_->setSuffix(tr(" steps"));
  const QString measureTip = tr(
      "Train the job's first steps in a throwaway run and show the measured step time, tokens/s, "
      "peak HBM and DRAM and link bytes against the plan's (spillway-worker plan JOB --measure "
      "N). The first step warms up the libraries: the figures are of the steps after it.");
  measureButton_->setToolTip(measureTip);
  measureSteps_->setToolTip(measureTip);
  measureAction_ = new QAction(tr("&Measure"), this);
  measureAction_->setObjectName("measureAction");
  measureAction_->setShortcut(QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_P));
  measureAction_->setToolTip(measureTip);
  stopButton_ = new QPushButton(tr("Stop"));
  stopButton_->setObjectName("stopPlan");
  stopButton_->setToolTip(tr("Stop the plan or measure in progress; nothing is kept"));
  stopButton_->setEnabled(false);
  launchButton_ = new QPushButton(tr("Launch"));
  launchButton_->setDefault(true);
  copyButton_ = new QPushButton(tr("Copy command line"));
  buttons->addWidget(planButton_);
  buttons->addWidget(measureButton_);
  buttons->addWidget(measureSteps_);
  buttons->addWidget(stopButton_);
  buttons->addStretch();
  buttons->addWidget(copyButton_);
  buttons->addWidget(launchButton_);
  pl->addLayout(buttons);
  layout->addWidget(planBox);
  connect(planButton_, &QPushButton::clicked, this, &NewRunPage::plan);
  connect(measureButton_, &QPushButton::clicked, this, &NewRunPage::measure);
  connect(measureAction_, &QAction::triggered, this, &NewRunPage::measure);
  connect(stopButton_, &QPushButton::clicked, this, &NewRunPage::stopPlan);
  planTicker_ = new QTimer(this);
  planTicker_->setInterval(1000);
  connect(planTicker_, &QTimer::timeout, this, [this] {
    planView_->setBusy(tr("%1 %2 s").arg(planBusyText_).arg(planClock_.elapsed() / 1000));
  });
  connect(planView_, &PlanView::applySuggestion, this, [this](int microBatchSize, int gradAccum) {
    microBatch_->setValue(microBatchSize);
    gradAccum_->setValue(gradAccum);
  });
  connect(launchButton_, &QPushButton::clicked, this, [this] { launch(); });
  connect(lr_, &QLineEdit::textChanged, this, &NewRunPage::checkInputs);
  connect(microBatch_, &QSpinBox::valueChanged, this, &NewRunPage::checkInputs);
  connect(copyButton_, &QPushButton::clicked, this, [this] {
    QString error;
    const QString job = writeCommandLineJob(&error);
    if (job.isEmpty()) return void(QMessageBox::warning(this, tr("Copy command line"), error));
    QApplication::clipboard()->setText(WorkerClient::commandLine(job));
  });
}

void NewRunPage::checkInputs() {
  const std::optional<double> lr = parseNumber(lr_->text());
  const bool lrOk = lr && *lr > 0 && *lr <= kMaxLr;  // also false for nan
  if (lrOk) lrValue_ = *lr;
  const QString range = JobForm::allowed("train.lr");
  lrError_->setText(lrOk ? QString()
                    : lr_->text().trimmed().isEmpty()
                        ? tr("Enter a learning rate, a number in %1.").arg(range)
                        : tr("\"%1\" is not a learning rate: enter a number in %2, such as "
                             "3e-4 or 0.0003.")
                              .arg(lr_->text().trimmed(), range));
  lrError_->setVisible(!lrOk);
  lr_->setStyleSheet(lrOk ? QString() : QString("QLineEdit { border: 1px solid #d32f2f; }"));
  const bool batchOk = microBatch_->value() <= kMaxMicroBatch;
  microBatchError_->setText(batchOk
                                ? QString()
                                : tr("%L1 sequences is more than the worker's %L2 per micro-batch.")
                                      .arg(microBatch_->value())
                                      .arg(kMaxMicroBatch));
  microBatchError_->setVisible(!batchOk);
  const bool ok = lrOk && batchOk;
  planButton_->setEnabled(ok && !planning());
  measureButton_->setEnabled(ok && !planning());
  measureAction_->setEnabled(measureButton_->isEnabled());
  measureSteps_->setEnabled(!planning());
  stopButton_->setEnabled(planning() && !planStopped_);
  launchButton_->setEnabled(ok);
  copyButton_->setEnabled(ok);
}

QString NewRunPage::inputError() const {
  if (!lrError_->text().isEmpty()) return lrError_->text();
  return microBatchError_->text();
}

void NewRunPage::setModelPath(const QString& dir) {
  modelCombo_->setCurrentText(dir);
}
void NewRunPage::setDatasetPath(const QString& path) {
  dataCombo_->setCurrentText(path);
}

void NewRunPage::validateModel() {
  const QString dir = modelCombo_->currentText().trimmed();
  // No folder named and a job that creates its model from model.init (the built-in job): that
  // model is the job's, as the worker builds it; a folder typed in its place replaces it.
  const QJsonObject jobModel = loaded_.base["model"].toObject();
  model_ = dir.isEmpty() && jobModel.contains("init") ? ModelInfo::inspectInit(jobModel)
                                                      : ModelInfo::inspect(dir);
  modelCombo_->lineEdit()->setPlaceholderText(
      jobModel.contains("init") ? tr("The job's model.init; or choose a model folder") : QString());
  modelLabel_->setText(
      model_.ok
          ? model_.summary()
          : QString("<span style=\"color:#d32f2f\">%1</span>").arg(model_.error.toHtmlEscaped()));
  if (model_.ok) previewDataset();
}

void NewRunPage::previewDataset() {
  const QString path = dataCombo_->currentText().trimmed();
  if (path.isEmpty() || !model_.ok) {
    datasetLoader_->cancel();
    dataBusy_->hide();
    dataset_ = DatasetPreview();
    dataset_.error = path.isEmpty()
                         ? tr("Choose a dataset file.")
                         : tr("Choose a valid model first: its tokenizer counts the tokens.");
    dataLabel_->setText(dataset_.error);
    clearDatasetView();
    return;
  }
  // Only schedules: the load starts on a pool thread once the changes pause, and a newer change
  // cancels it.
  datasetLoader_->request(DatasetPreview::Request::of(settings()));
  dataLabel_->setText(tr("Reading dataset…"));
  dataBusy_->show();
}

// No samples and no bars: what was shown belongs to another file or setting.
void NewRunPage::clearDatasetView() {
  templateUsed_->hide();
  truncation_->hide();
  preview_->clear();
  histogram_->clearPlottables();
  histogram_->clearItems();
  histogram_->replot(QCustomPlot::rpQueuedReplot);
}

void NewRunPage::showDatasetPreview(const DatasetPreview& preview) {
  dataBusy_->hide();
  dataset_ = preview;
  if (!dataset_.ok) {
    dataLabel_->setText(
        QString("<span style=\"color:#d32f2f\">%1</span>").arg(dataset_.error.toHtmlEscaped()));
    clearDatasetView();
    emit datasetPreviewed(dataset_);
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
  if (dataset_.packed) text += tr(" · conversations packed");
  if (dataset_.sampled && dataset_.sampleBytes > 0) {
    const double wholeTokens = static_cast<double>(dataset_.totalTokens) *
                               static_cast<double>(dataset_.fileBytes) /
                               static_cast<double>(dataset_.sampleBytes);
    text +=
        tr(" — counted in the first %1 of %2; about %3 tokens in the whole file")
            .arg(formatBytes(static_cast<double>(dataset_.sampleBytes)),
                 formatBytes(static_cast<double>(dataset_.fileBytes)), formatCount(wholeTokens));
  }
  dataLabel_->setText(text);
  showTemplateAndTruncation();
  preview_->setHtml(dataset_.previewHtml);
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
  emit datasetPreviewed(dataset_);
}

// The template line (chat data only) and the truncation warning of the preview just shown.
void NewRunPage::showTemplateAndTruncation() {
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
  if (longer && dataset_.packingHelps)
    warning += tr(" Fix: %1, or pack the conversations.").arg(seqFix);
  else if (longer)
    warning += tr(" Fix: %1.").arg(seqFix);
  else if (dataset_.packingHelps)
    warning += tr(" The model takes at most %1 positions: pack the conversations.")
                   .arg(dataset_.seqLenForAll);
  truncationText_->setText(warning);
  useSeqLen_->setText(tr("Use %1").arg(dataset_.seqLenForAll));
  useSeqLen_->setVisible(longer);
  usePacking_->setVisible(dataset_.packingHelps);
  truncation_->show();
}

JobSettings NewRunPage::settings() const {
  JobSettings s = loaded_;  // what the form does not show (eval file, tokenizer, base job)
  s.name = name_->text();
  s.modelPath = modelCombo_->currentText().trimmed();
  s.trainPath = dataCombo_->currentText().trimmed();
  s.evalFraction = evalFraction_->value();
  s.format = formatCombo_->currentText();
  s.chatTemplate = templateCombo_->currentText();
  s.seqLen = seqLen_->value();
  s.packing = packing_->isChecked();
  s.steps = steps_->value();
  s.epochs = epochs_->value();
  s.microBatchSize = microBatch_->value();
  s.gradAccum = gradAccum_->value();
  s.lr = lrValue_;  // the last valid value; while the field's text is not one, writeJob() refuses
  s.schedule = schedule_->currentText();
  s.warmupSteps = warmup_->value();
  s.weightDecay = weightDecay_->value();
  s.clipGradNorm = clip_->value();
  s.evalEvery = evalEvery_->value();
  s.checkpointEvery = checkpointEvery_->value();
  s.seed = seed_->value();
  s.backend = backend_->currentText();
  s.deviceMemoryBytes = static_cast<qint64>(deviceGb_->value() * 1e9);
  s.optimizerTier = optimizerTier_->currentText();
  s.masterTier = masterTier_->currentText();
  s.ssdDir = ssdDir_->text();
  s.dramCapBytes = static_cast<qint64>(dramCapGb_->value() * 1e9);
  return s;
}

void NewRunPage::setSettings(const JobSettings& s) {
  loaded_ = s;
  loaded_.runDir.clear();
  name_->setText(s.name);
  steps_->setValue(s.steps);
  epochs_->setValue(s.epochs);
  microBatch_->setValue(s.microBatchSize);
  gradAccum_->setValue(s.gradAccum);
  seqLen_->setValue(s.seqLen);
  packing_->setChecked(s.packing);
  lr_->setText(shortest(s.lr));
  schedule_->setCurrentText(s.schedule);
  warmup_->setValue(s.warmupSteps);
  weightDecay_->setValue(s.weightDecay);
  clip_->setValue(s.clipGradNorm);
  evalFraction_->setValue(s.evalFraction);
  evalEvery_->setValue(s.evalEvery);
  checkpointEvery_->setValue(s.checkpointEvery);
  seed_->setValue(s.seed);
  backend_->setCurrentText(s.backend);
  optimizerTier_->setCurrentText(s.optimizerTier);
  masterTier_->setCurrentText(s.masterTier);
  deviceGb_->setValue(s.deviceMemoryBytes / 1e9);
  ssdDir_->setText(s.ssdDir);
  dramCapGb_->setValue(s.dramCapBytes / 1e9);
  formatCombo_->setCurrentText(s.format);
  templateCombo_->setCurrentText(s.chatTemplate);
  // The model shown must be this job's even when the field's text does not change (an empty
  // field stays empty for a model.init job), which emits nothing: the check ran for the last job,
  // or never, and left "The model is not usable:" without a reason.
  const bool same = modelCombo_->currentText() == s.modelPath;
  setModelPath(s.modelPath);
  if (same) validateModel();
  setDatasetPath(s.trainPath);
}

NewRunPage::~NewRunPage() {
  // Before planDir_ goes: a worker still measuring writes into it.
  cancelPlan(3000);
}

bool NewRunPage::loadJob(const QString& path, QString* error) {
  QFile f(path);
  if (!f.open(QIODevice::ReadOnly)) return *error = tr("%1: %2").arg(path, f.errorString()), false;
  const QByteArray bytes = f.readAll();
  QJsonParseError pe;
  const QJsonDocument doc = QJsonDocument::fromJson(bytes, &pe);
  if (!doc.isObject())
    return *error = tr("%1: not a JSON object (%2)").arg(path, pe.errorString()), false;
  // The worker's own check: a key the schema does not know would be refused at launch, and a
  // form filled without it would not run what the file says.
  const auto resolved = job::resolve_job(nlohmann::json::parse(
      bytes.constData(), bytes.constData() + bytes.size(), nullptr, /*allow_exceptions=*/false));
  if (!resolved.ok())
    return *error = tr("%1 is not a job the worker takes: %2")
                        .arg(path, QString::fromStdString(resolved.status().message())),
           false;
  JobSettings s = JobSettings::fromJson(doc.object());
  const QDir base = QFileInfo(path).absoluteDir();
  for (QString* p : {&s.modelPath, &s.trainPath, &s.evalPath}) {
    if (!p->isEmpty() && QFileInfo(*p).isRelative())
      *p = QDir::cleanPath(base.absoluteFilePath(*p));
  }
  s.runDir.clear();  // a new run gets its own folder
  setSettings(s);
  return true;
}

bool NewRunPage::saveJob(const QString& path, QString* error) {
  JobSettings s;
  if (!jobForWorker(&s, error)) return false;
  s.runDir.clear();
  const QByteArray json = QJsonDocument(s.toJson()).toJson();
  const auto resolved = job::resolve_job(nlohmann::json::parse(
      json.constData(), json.constData() + json.size(), nullptr, /*allow_exceptions=*/false));
  if (!resolved.ok()) return *error = QString::fromStdString(resolved.status().message()), false;
  return writeJobFile(path, s, error);
}

void NewRunPage::remember(const QString& key, const QString& value) {
  QSettings settings;
  QStringList list = settings.value(key).toStringList();
  list.removeAll(value);
  list.prepend(value);
  settings.setValue(key, list.mid(0, 10));
}

bool NewRunPage::jobForWorker(JobSettings* job, QString* error) const {
  if (const QString e = inputError(); !e.isEmpty()) return *error = e, false;
  *job = settings();
  if (!model_.ok)
    return *error = tr("The model is not usable: %1")
                        .arg(model_.error.isEmpty() ? tr("choose a model folder") : model_.error),
           false;
  if (job->trainPath.isEmpty()) return *error = tr("Choose a dataset file."), false;
  return true;
}

bool NewRunPage::writeJobFile(const QString& path, const JobSettings& job, QString* error) {
  if (!QDir().mkpath(QFileInfo(path).absolutePath()))
    return *error = tr("Cannot create %1").arg(QFileInfo(path).absolutePath()), false;
  QSaveFile f(path);
  if (!f.open(QIODevice::WriteOnly))
    return *error = tr("Cannot write %1: %2").arg(path, f.errorString()), false;
  f.write(QJsonDocument(job.toJson()).toJson());
  if (!f.commit()) return *error = tr("Cannot write %1: %2").arg(path, f.errorString()), false;
  return true;
}

QString NewRunPage::slug() const {
  QString s = name_->text();
  s.replace(QRegularExpression("[^A-Za-z0-9_.-]+"), "-");
  return s;
}

QString NewRunPage::writeJob(QString* error) {
  JobSettings s;
  if (!jobForWorker(&s, error)) return {};
  const QString stamp = QDateTime::currentDateTime().toString("yyyyMMdd-hhmmss");
  const QString folder = dataHome() + "/jobs/" + stamp + "-" + slug();
  // The job names no run folder: the worker names it by the run's id (history/run-folder.h),
  // the same folder whether the job is launched here or from a terminal.
  s.runDir.clear();
  if (!writeJobFile(folder + "/job.json", s, error)) return {};
  lastJobPath_ = folder + "/job.json";
  return lastJobPath_;
}

QString NewRunPage::writePlanJob(QString* error) {
  JobSettings s;
  if (!jobForWorker(&s, error)) return {};
  if (!planDir_ || !planDir_->isValid()) {
    planDir_ = std::make_unique<QTemporaryDir>(QDir::tempPath() + "/spillway-plan-XXXXXX");
    if (!planDir_->isValid())
      return *error =
                 tr("Cannot make a temporary folder for the plan: %1").arg(planDir_->errorString()),
             QString();
  }
  const QString path = planDir_->filePath("job.json");
  return writeJobFile(path, s, error) ? path : QString();
}

QString NewRunPage::writeCommandLineJob(QString* error) {
  JobSettings s;
  if (!jobForWorker(&s, error)) return {};
  // No run folder: each run of the command gets its own under the runs folder.
  const QByteArray json = QJsonDocument(s.toJson()).toJson();
  const QString hash =
      QString::fromLatin1(QCryptographicHash::hash(json, QCryptographicHash::Sha1).toHex().left(8));
  const QString path = dataHome() + "/jobs/" + slug() + "-" + hash + ".json";
  return writeJobFile(path, s, error) ? path : QString();
}

void NewRunPage::plan() {
  runPlan({}, tr("Planning: measuring this machine…"));
}

void NewRunPage::measure() {
  const int steps = measureSteps_->value();
  runPlan({"--measure", QString::number(steps)},
          steps == 1 ? tr("Measuring: loading the model and training 1 step…")
                     : tr("Measuring: loading the model and training %1 steps…").arg(steps));
}

QString NewRunPage::planTempDir() const {
  return planDir_ ? planDir_->filePath("worker-tmp") : QString();
}

void NewRunPage::cancelPlan(int waitMs) {
  if (!planProcess_) return;
  planProcess_->disconnect(this);
  planProcess_->kill();
  planProcess_->waitForFinished(waitMs);
  planProcess_->deleteLater();
  planProcess_ = nullptr;
  planTicker_->stop();
  if (const QString tmp = planTempDir(); !tmp.isEmpty()) QDir(tmp).removeRecursively();
}

void NewRunPage::runPlan(const QStringList& extraArgs, const QString& busyText) {
  QString error;
  const QString job = writePlanJob(&error);
  cancelPlan(1000);
  if (job.isEmpty()) {
    PlanResult r;
    r.error = error;
    planEnded(r);
    return;
  }
  const QString worker = WorkerClient::workerPath();
  if (worker.isEmpty()) {
    PlanResult r;
    r.error = tr("spillway-worker was not found next to the app or on PATH");
    planEnded(r);
    return;
  }
  // The worker's temporary files (plan --measure's throwaway run) in a folder of the page's, so
  // that a worker stopped before it cleans up leaves nothing behind: the folder is emptied when
  // it ends.
  const QString tmp = planTempDir();
  QDir(tmp).removeRecursively();
  if (!QDir().mkpath(tmp)) {
    PlanResult r;
    r.error = tr("Cannot make a temporary folder for the worker: %1").arg(tmp);
    planEnded(r);
    return;
  }
  planBusyText_ = busyText;
  planStopped_ = false;
  planClock_.start();
  planTicker_->start();
  planView_->setBusy(busyText);
  planProcess_ = new QProcess(this);
  QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
  env.insert("TMPDIR", tmp);
  planProcess_->setProcessEnvironment(env);
  QProcess* p = planProcess_;
  connect(p, &QProcess::finished, this, [this, p](int code, QProcess::ExitStatus) {
    const PlanResult r =
        PlanResult::fromWorkerOutput(p->readAllStandardOutput(), p->readAllStandardError(), code);
    planEnded(r);
  });
  connect(p, &QProcess::errorOccurred, this, [this, p](QProcess::ProcessError e) {
    if (e != QProcess::FailedToStart) return;  // the others end in finished()
    PlanResult r;
    r.error = tr("Could not start spillway-worker: %1").arg(p->errorString());
    planEnded(r);
  });
  p->start(worker, QStringList{"plan", job, "--json"} + extraArgs);
  checkInputs();  // Plan and Measure off, Stop on
}

void NewRunPage::planEnded(const PlanResult& r) {
  const bool stopped = planStopped_;
  const qint64 seconds = planProcess_ ? planClock_.elapsed() / 1000 : 0;
  if (planProcess_) {
    planProcess_->disconnect(this);
    planProcess_->deleteLater();
    planProcess_ = nullptr;
  }
  planTicker_->stop();
  planStopped_ = false;
  if (const QString tmp = planTempDir(); !tmp.isEmpty()) QDir(tmp).removeRecursively();
  checkInputs();
  if (stopped) {
    planView_->setNote(tr("Stopped after %1 s: nothing was measured.").arg(seconds));
    return;
  }
  planView_->setPlan(r);
  emit planned(r);
}

void NewRunPage::stopPlan() {
  if (!planProcess_ || planStopped_) return;
  planStopped_ = true;
  stopButton_->setEnabled(false);
  planView_->setBusy(tr("Stopping…"));
  planTicker_->stop();
  // SIGTERM first, so that a worker that handles it can clean up; SIGKILL if it has not ended
  // within the grace period. Either way finished() comes, and planEnded() empties the worker's
  // temporary folder.
  planProcess_->terminate();
  QPointer<QProcess> p = planProcess_;
  QTimer::singleShot(kStopGraceMs, this, [p] {
    if (p && p->state() != QProcess::NotRunning) p->kill();
  });
}

bool NewRunPage::planning() const {
  return planProcess_ != nullptr;
}

qint64 NewRunPage::planPid() const {
  return planProcess_ ? planProcess_->processId() : 0;
}

bool NewRunPage::launch(QString* runDirOut) {
  QString error;
  const QString job = writeJob(&error);
  if (job.isEmpty()) {
    QMessageBox::warning(this, tr("Launch"), error);
    return false;
  }
  // The run's id, and so its folder, is chosen here so that Live can watch the folder from the
  // first moment; the worker records the run under it (--run-id).
  const std::string id = RunStore::new_run_id();
  const auto folder = default_run_folder(id);
  if (!folder.ok()) {
    QMessageBox::warning(this, tr("Launch"), QString::fromStdString(folder.status().message()));
    return false;
  }
  const qint64 pid = WorkerClient::launch(job, QString(), &error, QString::fromStdString(id));
  if (pid < 0) {
    QMessageBox::warning(this, tr("Launch"), tr("Could not start the worker: %1").arg(error));
    return false;
  }
  if (!settings().modelPath.isEmpty())
    remember("recent/models", settings().modelPath);  // not model.init
  remember("recent/datasets", settings().trainPath);
  const QString dir = QString::fromStdString(*folder);
  if (runDirOut) *runDirOut = dir;
  emit launched(dir, pid);
  return true;
}

}  // namespace spillway::ui
