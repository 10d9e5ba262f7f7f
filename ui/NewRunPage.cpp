#include "NewRunPage.h"

#include <qcustomplot.h>

#include <QApplication>
#include <QCheckBox>
#include <QClipboard>
#include <QComboBox>
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
#include <QProcess>
#include <QProgressBar>
#include <QPushButton>
#include <QRegularExpression>
#include <QSaveFile>
#include <QScrollArea>
#include <QSettings>
#include <QSpinBox>
#include <QTextBrowser>
#include <QVBoxLayout>
#include <optional>

#include "DatasetPreviewLoader.h"
#include "Format.h"
#include "GpuProbe.h"
#include "PlanView.h"
#include "PlotTheme.h"
#include "WorkerClient.h"
#include "history/run-store.h"

namespace spillway::ui {
namespace {

QSpinBox* spin(int lo, int hi, int value, const QString& tip) {
  auto* s = new QSpinBox;
  s->setRange(lo, hi);
  s->setValue(value);
  s->setToolTip(tip);
  return s;
}

QDoubleSpinBox* dspin(double lo, double hi, double value, int decimals, const QString& tip) {
  auto* s = new QDoubleSpinBox;
  s->setRange(lo, hi);
  s->setDecimals(decimals);
  s->setValue(value);
  s->setToolTip(tip);
  return s;
}

// The worker's limits (app/worker/job-file.cpp): train.lr in (0, 10], micro_batch_size up to 2^16.
constexpr double kMaxLr = 10.0;
constexpr int kMaxMicroBatch = 1 << 16;

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

QComboBox* combo(const QStringList& items, const QString& tip) {
  auto* c = new QComboBox;
  c->addItems(items);
  c->setToolTip(tip);
  return c;
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
  modelCombo_->setToolTip(
      tr("A Hugging Face model folder: config.json, model.safetensors (or a sharded index) and "
         "tokenizer files"));
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
  modelLabel_->setWordWrap(true);
  ml->addWidget(modelLabel_);
  layout->addWidget(modelBox);
  connect(modelBrowse, &QPushButton::clicked, this, [this] {
    const QString d =
        QFileDialog::getExistingDirectory(this, tr("Model folder"), modelCombo_->currentText());
    if (!d.isEmpty()) setModelPath(d);
  });
  connect(modelCombo_, &QComboBox::currentTextChanged, this, &NewRunPage::validateModel);

  // Dataset
  auto* dataBox = new QGroupBox(tr("Dataset"));
  auto* dl = new QVBoxLayout(dataBox);
  auto* drow = new QHBoxLayout;
  dataCombo_ = new QComboBox;
  dataCombo_->setEditable(true);
  dataCombo_->addItems(settings.value("recent/datasets").toStringList());
  dataCombo_->setCurrentText(QString());
  dataCombo_->setObjectName("datasetPath");
  dataCombo_->setToolTip(
      tr("Plain text, JSONL/JSON with \"text\", Alpaca, ShareGPT, OpenAI messages, or "
         "pre-tokenized JSONL"));
  formatCombo_ = combo({"auto", "text", "json", "alpaca", "sharegpt", "openai", "pretokenized"},
                       tr("Dataset format (auto detects it)"));
  auto* dataBrowse = new QPushButton(tr("Browse…"));
  drow->addWidget(dataCombo_, 1);
  drow->addWidget(formatCombo_);
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

  // Training and placement side by side, the training form in two columns, so that the plan
  // stays on screen below them.
  auto* trainBox = new QGroupBox(tr("Training"));
  auto* trainColumns = new QHBoxLayout(trainBox);
  auto* tf = new QFormLayout;
  auto* tf2 = new QFormLayout;
  trainColumns->addLayout(tf);
  trainColumns->addLayout(tf2);
  name_ = new QLineEdit("fine-tune");
  name_->setToolTip(tr("The run's name in History"));
  steps_ = spin(1, 10'000'000, 200, tr("Optimizer steps"));
  microBatch_ =
      spin(1, 999'999'999, 4,
           tr("Sequences per micro-batch, at most %L1: activations on the device grow with it")
               .arg(kMaxMicroBatch));
  microBatch_->setObjectName("microBatch");
  gradAccum_ = spin(1, 1 << 16, 1,  // the worker's own limit
                    tr("Micro-batches per optimizer step (gradient accumulation). Layers stream "
                       "once per step however many there are"));
  seqLen_ = spin(8, 131072, 256, tr("Tokens per sequence; longer examples are truncated"));
  seqLen_->setObjectName("seqLen");
  lr_ = new QLineEdit(shortest(lrValue_));
  lr_->setObjectName("learningRate");
  lr_->setToolTip(tr("Peak learning rate, a number in (0, 10]: 3e-4, 2E-5 or 0.0003"));
  schedule_ = combo({"cosine", "linear", "constant"}, tr("Decay after the linear warmup"));
  warmup_ = spin(0, 1'000'000, 10, tr("Linear warmup steps"));
  weightDecay_ = dspin(0, 1, 0.0, 4, tr("AdamW decoupled weight decay (tensors with ndim >= 2)"));
  clip_ = dspin(0, 1000, 1.0, 3, tr("Global gradient-norm clipping; 0 = off"));
  evalFraction_ = dspin(0, 0.5, 0.1, 3, tr("Fraction of the data held out for evaluation"));
  evalEvery_ = spin(0, 1'000'000, 50, tr("Evaluate every N steps (0 = only at the start and end)"));
  checkpointEvery_ = spin(0, 1'000'000, 100, tr("Checkpoint every N steps (0 = only at the end)"));
  seed_ = spin(0, 1'000'000, 0, tr("Seed for shuffling"));
  tf->addRow(tr("Name"), name_);
  tf->addRow(tr("Steps"), steps_);
  tf->addRow(tr("Micro-batch size"), withError(microBatch_, &microBatchError_, "microBatchError"));
  tf->addRow(tr("Gradient accumulation"), gradAccum_);
  tf->addRow(tr("Sequence length"), seqLen_);
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

  // Placement
  auto* placeBox = new QGroupBox(tr("Tier placement"));
  auto* pf = new QFormLayout(placeBox);
  backend_ = combo({"auto", "cpu", "cuda"},
                   tr("Compute backend: auto takes the GPU when a usable one is present, else the "
                      "CPU; cuda fails at launch without one"));
  gpuLabel_ = new QLabel;
  gpuLabel_->setWordWrap(true);
  gpuLabel_->setToolTip(tr("The GPU the CUDA backend would use (device 0)"));
  gpuProbe_ = new GpuProbe(this);
  const auto showGpu = [this] {
    const bool usable = gpuProbe_->done() && gpuProbe_->answer().usable;
    gpuLabel_->setText(gpuProbe_->text());
    gpuLabel_->setEnabled(usable || !gpuProbe_->done());  // greyed: no GPU to choose
  };
  connect(gpuProbe_, &GpuProbe::finished, this, showGpu);
  showGpu();
  gpuProbe_->start();
  auto* backendRow = new QHBoxLayout;
  backendRow->addWidget(backend_);
  backendRow->addWidget(gpuLabel_, 1);
  deviceGb_ = dspin(0, 10000, 0, 2, tr("Device memory for the run in GB; 0 = all of it"));
  placementMode_ =
      combo({"auto", "manual"},
            tr("auto: DRAM up to the cap, the rest on the SSD, biggest categories first"));
  optimizerTier_ = combo({"dram", "ssd"}, tr("Where the AdamW moments live"));
  masterTier_ = combo({"dram", "ssd"}, tr("Where the fp32 master weights live"));
  ssdDir_ = new QLineEdit;
  ssdDir_->setToolTip(tr("Folder on a fast SSD for state that does not fit in DRAM"));
  auto* ssdBrowse = new QPushButton(tr("Browse…"));
  auto* ssdRow = new QHBoxLayout;
  ssdRow->addWidget(ssdDir_, 1);
  ssdRow->addWidget(ssdBrowse);
  dramCapGb_ = dspin(0, 100000, 0, 1, tr("Most DRAM the run may use in GB; 0 = what is available"));
  pf->addRow(tr("Backend"), backendRow);
  pf->addRow(tr("Device memory (GB)"), deviceGb_);
  pf->addRow(tr("Placement"), placementMode_);
  pf->addRow(tr("Optimizer state"), optimizerTier_);
  pf->addRow(tr("Master weights"), masterTier_);
  pf->addRow(tr("SSD folder"), ssdRow);
  pf->addRow(tr("DRAM cap (GB)"), dramCapGb_);
  settingsRow->addWidget(placeBox, 1);
  auto manual = [this] {
    const bool m = placementMode_->currentText() == "manual";
    optimizerTier_->setEnabled(m);
    masterTier_->setEnabled(m);
  };
  manual();
  connect(placementMode_, &QComboBox::currentTextChanged, this, manual);
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
  launchButton_ = new QPushButton(tr("Launch"));
  launchButton_->setDefault(true);
  copyButton_ = new QPushButton(tr("Copy command line"));
  buttons->addWidget(planButton_);
  buttons->addStretch();
  buttons->addWidget(copyButton_);
  buttons->addWidget(launchButton_);
  pl->addLayout(buttons);
  layout->addWidget(planBox);
  connect(planButton_, &QPushButton::clicked, this, &NewRunPage::plan);
  connect(planView_, &PlanView::applySuggestion, this, [this](int microBatchSize, int gradAccum) {
    microBatch_->setValue(microBatchSize);
    gradAccum_->setValue(gradAccum);
  });
  connect(launchButton_, &QPushButton::clicked, this, [this] { launch(); });
  connect(lr_, &QLineEdit::textChanged, this, &NewRunPage::checkInputs);
  connect(microBatch_, &QSpinBox::valueChanged, this, &NewRunPage::checkInputs);
  connect(copyButton_, &QPushButton::clicked, this, [this] {
    QString error;
    const QString job = writeJob(&error);
    if (job.isEmpty()) return void(QMessageBox::warning(this, tr("Copy command line"), error));
    QApplication::clipboard()->setText(WorkerClient::commandLine(job));
  });
}

void NewRunPage::checkInputs() {
  const std::optional<double> lr = parseNumber(lr_->text());
  const bool lrOk = lr && *lr > 0 && *lr <= kMaxLr;  // also false for nan
  if (lrOk) lrValue_ = *lr;
  lrError_->setText(lrOk ? QString()
                    : lr_->text().trimmed().isEmpty()
                        ? tr("Enter a learning rate, a number in (0, 10].")
                        : tr("\"%1\" is not a learning rate: enter a number in (0, 10], such as "
                             "3e-4 or 0.0003.")
                              .arg(lr_->text().trimmed()));
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
  model_ = ModelInfo::inspect(modelCombo_->currentText().trimmed());
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
    dataset_.error =
        path.isEmpty() ? tr("Choose a dataset file.")
                       : tr("Choose a valid model first: its tokenizer counts the tokens.");
    dataLabel_->setText(dataset_.error);
    clearDatasetView();
    return;
  }
  // Only schedules: the load starts on a pool thread once the changes pause, and a newer change
  // cancels it.
  DatasetPreview::Request request;
  request.path = path;
  request.tokenizerPath = modelCombo_->currentText().trimmed();
  request.seqLen = seqLen_->value();
  request.format = formatCombo_->currentText();
  datasetLoader_->request(request);
  dataLabel_->setText(tr("Reading dataset…"));
  dataBusy_->show();
}

// No samples and no bars: what was shown belongs to another file or setting.
void NewRunPage::clearDatasetView() {
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
  if (dataset_.sampled && dataset_.sampleBytes > 0) {
    const double wholeTokens = static_cast<double>(dataset_.totalTokens) *
                               static_cast<double>(dataset_.fileBytes) /
                               static_cast<double>(dataset_.sampleBytes);
    text += tr(" — counted in the first %1 of %2; about %3 tokens in the whole file")
                .arg(formatBytes(static_cast<double>(dataset_.sampleBytes)),
                     formatBytes(static_cast<double>(dataset_.fileBytes)),
                     formatCount(wholeTokens));
  }
  dataLabel_->setText(text);
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

JobSettings NewRunPage::settings() const {
  JobSettings s = loaded_;  // what the form does not show (eval file, template, base job)
  s.name = name_->text();
  s.modelPath = modelCombo_->currentText().trimmed();
  s.trainPath = dataCombo_->currentText().trimmed();
  s.evalFraction = evalFraction_->value();
  s.format = formatCombo_->currentText();
  s.seqLen = seqLen_->value();
  s.steps = steps_->value();
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
  const bool manual = placementMode_->currentText() == "manual";
  s.optimizerTier =
      manual ? optimizerTier_->currentText() : (ssdDir_->text().isEmpty() ? "dram" : "auto");
  s.masterTier =
      manual ? masterTier_->currentText() : (ssdDir_->text().isEmpty() ? "dram" : "auto");
  s.ssdDir = ssdDir_->text();
  s.dramCapBytes = static_cast<qint64>(dramCapGb_->value() * 1e9);
  return s;
}

void NewRunPage::setSettings(const JobSettings& s) {
  loaded_ = s;
  loaded_.runDir.clear();
  name_->setText(s.name);
  steps_->setValue(s.steps);
  microBatch_->setValue(s.microBatchSize);
  gradAccum_->setValue(s.gradAccum);
  seqLen_->setValue(s.seqLen);
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
  deviceGb_->setValue(s.deviceMemoryBytes / 1e9);
  ssdDir_->setText(s.ssdDir);
  dramCapGb_->setValue(s.dramCapBytes / 1e9);
  formatCombo_->setCurrentText(s.format);
  setModelPath(s.modelPath);
  setDatasetPath(s.trainPath);
}

bool NewRunPage::loadJob(const QString& path, QString* error) {
  QFile f(path);
  if (!f.open(QIODevice::ReadOnly)) return *error = tr("%1: %2").arg(path, f.errorString()), false;
  QJsonParseError pe;
  const QJsonDocument doc = QJsonDocument::fromJson(f.readAll(), &pe);
  if (!doc.isObject())
    return *error = tr("%1: not a JSON object (%2)").arg(path, pe.errorString()), false;
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

void NewRunPage::remember(const QString& key, const QString& value) {
  QSettings settings;
  QStringList list = settings.value(key).toStringList();
  list.removeAll(value);
  list.prepend(value);
  settings.setValue(key, list.mid(0, 10));
}

QString NewRunPage::writeJob(QString* error) {
  if (const QString e = inputError(); !e.isEmpty()) return *error = e, QString();
  JobSettings s = settings();
  if (!model_.ok) return *error = tr("The model is not usable: %1").arg(model_.error), QString();
  if (s.trainPath.isEmpty()) return *error = tr("Choose a dataset file."), QString();
  QString slug = s.name;
  slug.replace(QRegularExpression("[^A-Za-z0-9_.-]+"), "-");
  const QString stamp = QDateTime::currentDateTime().toString("yyyyMMdd-hhmmss");
  const QString folder = dataHome() + "/jobs/" + stamp + "-" + slug;
  s.runDir = dataHome() + "/runs/" + stamp + "-" + slug;
  if (!QDir().mkpath(folder)) return *error = tr("Cannot create %1").arg(folder), QString();
  QSaveFile f(folder + "/job.json");
  if (!f.open(QIODevice::WriteOnly)) return *error = f.errorString(), QString();
  f.write(QJsonDocument(s.toJson()).toJson());
  if (!f.commit()) return *error = f.errorString(), QString();
  lastJobPath_ = folder + "/job.json";
  return lastJobPath_;
}

void NewRunPage::plan() {
  QString error;
  const QString job = writeJob(&error);
  if (planProcess_) {
    planProcess_->disconnect(this);
    planProcess_->kill();
    planProcess_->waitForFinished(1000);
    planProcess_->deleteLater();
    planProcess_ = nullptr;
  }
  if (job.isEmpty()) {
    PlanResult r;
    r.error = error;
    planView_->setPlan(r);
    emit planned(r);
    return;
  }
  const QString worker = WorkerClient::workerPath();
  if (worker.isEmpty()) {
    PlanResult r;
    r.error = tr("spillway-worker was not found next to the app or on PATH");
    planView_->setPlan(r);
    emit planned(r);
    return;
  }
  planView_->setBusy(tr("Planning: measuring this machine…"));
  planButton_->setEnabled(false);
  planProcess_ = new QProcess(this);
  QProcess* p = planProcess_;
  connect(p, &QProcess::finished, this, [this, p](int code, QProcess::ExitStatus) {
    const PlanResult r =
        PlanResult::fromWorkerOutput(p->readAllStandardOutput(), p->readAllStandardError(), code);
    p->deleteLater();
    planProcess_ = nullptr;
    planButton_->setEnabled(inputError().isEmpty());
    planView_->setPlan(r);
    emit planned(r);
  });
  connect(p, &QProcess::errorOccurred, this, [this, p](QProcess::ProcessError e) {
    if (e != QProcess::FailedToStart) return;  // the others end in finished()
    PlanResult r;
    r.error = tr("Could not start spillway-worker: %1").arg(p->errorString());
    p->deleteLater();
    planProcess_ = nullptr;
    planButton_->setEnabled(inputError().isEmpty());
    planView_->setPlan(r);
    emit planned(r);
  });
  p->start(worker, {"plan", job, "--json"});
}

bool NewRunPage::planning() const {
  return planProcess_ != nullptr;
}

bool NewRunPage::launch(QString* runDirOut) {
  QString error;
  const QString job = writeJob(&error);
  if (job.isEmpty()) {
    QMessageBox::warning(this, tr("Launch"), error);
    return false;
  }
  const qint64 pid = WorkerClient::launch(job, QString(), &error);
  if (pid < 0) {
    QMessageBox::warning(this, tr("Launch"), tr("Could not start the worker: %1").arg(error));
    return false;
  }
  remember("recent/models", settings().modelPath);
  remember("recent/datasets", settings().trainPath);
  QFile f(job);
  f.open(QIODevice::ReadOnly);
  const QString dir = JobSettings::fromJson(QJsonDocument::fromJson(f.readAll()).object()).runDir;
  if (runDirOut) *runDirOut = dir;
  emit launched(dir, pid);
  return true;
}

}  // namespace spillway::ui
