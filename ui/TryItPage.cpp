#include "TryItPage.h"

#include <QCheckBox>
#include <QComboBox>
#include <QDir>
#include <QDoubleSpinBox>
#include <QFile>
#include <QFileDialog>
#include <QFileInfo>
#include <QFormLayout>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QLabel>
#include <QPlainTextEdit>
#include <QProcess>
#include <QPushButton>
#include <QSettings>
#include <QSignalBlocker>
#include <QSpinBox>
#include <QTextBrowser>
#include <QTextDocumentFragment>
#include <QUrl>
#include <QVBoxLayout>
#include <tuple>

#include "DialogFolder.h"
#include "RunHistoryModel.h"
#include "WorkerClient.h"
#include "data/model-tokenizer.h"
#include "history/run-folder.h"

namespace spillway::ui {
namespace {

constexpr const char* kLastExportKey = "export/lastFolder";
constexpr const char* kExportFormatKey = "export/format";  // the format chosen last

// Export's folder dialog: an existing folder, or the name of a new one typed into it (Qt's
// folder dialog refuses a name that does not exist yet, "Directory not found"), which the export
// then makes. Qt's own dialog, not the platform's, whose accept() cannot be taken over.
class ExportFolderDialog : public QFileDialog {
 public:
  explicit ExportFolderDialog(QWidget* parent)
      : QFileDialog(parent, QObject::tr("Export the model to")) {
    setObjectName("exportFolderDialog");
    setFileMode(QFileDialog::Directory);
    setOption(QFileDialog::ShowDirsOnly);
    setOption(QFileDialog::DontUseNativeDialog);
    setLabelText(QFileDialog::FileName, QObject::tr("Folder:"));
    // Where the user was: the folder that held the last export, else the home folder (not the
    // app's working directory).
    const QString last = QSettings().value(kLastExportKey).toString();
    const QString parentDir = QFileInfo(last).absolutePath();
    setDirectory(!last.isEmpty() && QFileInfo(parentDir).isDir() ? parentDir
                                                                 : DialogFolder::home());
  }
  QString chosen() const { return chosen_.isEmpty() ? selectedFiles().value(0) : chosen_; }

  void accept() override {
    const QString typed = selectedFiles().value(0);
    const QFileInfo info(typed);
    if (!typed.isEmpty() && !info.exists() && QFileInfo(info.absolutePath()).isDir()) {
      chosen_ = info.absoluteFilePath();  // a new folder in an existing one
      QDialog::accept();
      return;
    }
    QFileDialog::accept();
  }

 private:
  QString chosen_;
};

}  // namespace

struct TryItPage::Side {
  QProcess* process = nullptr;
  QTextBrowser* out = nullptr;
  QLabel* status = nullptr;
  QString* error = nullptr;
  QString text;
  QString what;  // "base" / "fine-tuned", for the status line
};

namespace {

QJsonObject readJson(const QString& path) {
  QFile f(path);
  if (!f.open(QIODevice::ReadOnly)) return {};
  return QJsonDocument::fromJson(f.readAll()).object();
}

// The last JSON line a `--json` worker command printed.
QJsonObject lastJsonLine(const QByteArray& out) {
  const QList<QByteArray> lines = out.trimmed().split('\n');
  return lines.isEmpty() ? QJsonObject() : QJsonDocument::fromJson(lines.last()).object();
}

QString red(const QString& text) {
  return QString("<span style=\"color:#d32f2f\">%1</span>").arg(text.toHtmlEscaped());
}

}  // namespace

TryItPage::Models TryItPage::modelsOf(const QString& runDir) {
  Models m;
  m.runDir = runDir;
  const QJsonObject job = readJson(runDir + "/job.json");
  if (job.isEmpty())
    return m.error = tr("%1 has no job.json: the run cannot be tried.").arg(runDir), m;
  m.runName = job["name"].toString();
  const QJsonObject model = job["model"].toObject(), data = job["data"].toObject();
  m.baseModel = model["path"].toString();
  m.tokenizer = model["tokenizer"].toString(m.baseModel);
  m.chatTemplate = data["template"].toString("auto");
  // A model made from model.init has no base, but what it became is a model like any other.
  if (m.baseModel.isEmpty() && model.contains("init"))
    m.noBase = tr("No base model: this run started from random weights (model.init).");
  else if (m.baseModel.isEmpty())
    return m.error =
               tr("%1/job.json names no model (model.path or model.init): the run cannot be tried.")
                   .arg(runDir),
           m;
  const QStringList checkpoints = [&] {
    QStringList out;
    for (const std::string& c : list_checkpoints((runDir + "/checkpoints").toStdString()))
      out << QString::fromStdString(c);
    return out;
  }();
  if (!checkpoints.isEmpty()) m.latestCheckpoint = checkpoints.last();
  if (QFileInfo::exists(runDir + "/export/config.json")) {
    m.tuned = runDir + "/export";
  } else if (!m.latestCheckpoint.isEmpty()) {
    m.tuned = m.latestCheckpoint;
    m.tunedIsCheckpoint = true;
  } else {
    return m.error =
               tr("The run has no checkpoint and no export yet: train it to its first "
                  "checkpoint (or Save checkpoint in Live) first."),
           m;
  }
  // Chat data (a format other than text), a template set by the job, or a tokenizer that has one.
  const QString format = data["format"].toString("auto");
  const QString train = data["train"].toString();
  const bool chatFormat =
      format == "alpaca" || format == "sharegpt" || format == "openai" ||
      (format == "auto" && (train.endsWith(".json") || train.endsWith(".jsonl")));
  const QString tokDir =
      QFileInfo(m.tokenizer).isDir() ? m.tokenizer : QFileInfo(m.tokenizer).path();
  const bool hasTemplate = !m.tokenizer.isEmpty() &&
                           m.tokenizer != QLatin1String(kBuiltinBytesTokenizer) &&
                           readJson(tokDir + "/tokenizer_config.json").contains("chat_template");
  m.chat = m.chatTemplate != "auto" || chatFormat || hasTemplate;
  return m;
}

TryItPage::TryItPage(RunHistoryModel* model, QWidget* parent)
    : QWidget(parent), model_(model), base_(new Side), tuned_(new Side) {
  auto* layout = new QVBoxLayout(this);
  auto* top = new QHBoxLayout;
  runs_ = new QComboBox;
  runs_->setObjectName("tryRun");
  runs_->setSizeAdjustPolicy(QComboBox::AdjustToMinimumContentsLengthWithIcon);
  runs_->setMinimumContentsLength(24);
  top->addWidget(new QLabel(tr("Run")));
  top->addWidget(runs_, 1);
  exportFormat_ = new QComboBox;
  exportFormat_->setObjectName("tryExportFormat");
  exportFormat_->addItem(tr("Hugging Face folder"), "hf");
  exportFormat_->addItem(tr("GGUF F16 (llama.cpp, Ollama)"), "gguf-f16");
  exportFormat_->addItem(tr("GGUF BF16"), "gguf-bf16");
  exportFormat_->addItem(tr("GGUF Q8_0"), "gguf-q8_0");
  exportFormat_->setToolTip(
      tr("What Export writes: a Hugging Face model folder (float32 safetensors, for transformers), "
         "or model.gguf with an Ollama Modelfile (for llama.cpp, Ollama, LM Studio)"));
  if (const int last = exportFormat_->findData(QSettings().value(kExportFormatKey).toString());
      last >= 0)
    exportFormat_->setCurrentIndex(last);
  connect(exportFormat_, &QComboBox::currentIndexChanged, this, [this] {
    QSettings().setValue(kExportFormatKey, exportFormat_->currentData().toString());
  });
  top->addWidget(exportFormat_);
  export_ = new QPushButton(tr("Export…"));
  export_->setObjectName("tryExport");
  export_->setToolTip(
      tr("Write the run's latest checkpoint in the chosen format (spillway-worker export)"));
  top->addWidget(export_);
  layout->addLayout(top);
  source_ = new QLabel;
  source_->setObjectName("tryModels");
  source_->setWordWrap(true);
  source_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  layout->addWidget(source_);
  exportStatus_ = new QLabel;
  exportStatus_->setObjectName("tryExportStatus");
  exportStatus_->setWordWrap(true);
  exportStatus_->setOpenExternalLinks(true);
  exportStatus_->hide();
  layout->addWidget(exportStatus_);

  prompt_ = new QPlainTextEdit;
  prompt_->setObjectName("tryPrompt");
  prompt_->setPlaceholderText(tr("A prompt, or a question for a chat model"));
  prompt_->setMinimumHeight(60);
  prompt_->setMaximumHeight(120);
  layout->addWidget(prompt_);
  auto* settings = new QHBoxLayout;
  temperature_ = new QDoubleSpinBox;
  temperature_->setObjectName("tryTemperature");
  temperature_->setRange(0, 5);
  temperature_->setSingleStep(0.1);
  temperature_->setValue(0);
  temperature_->setToolTip(tr("0: greedy, the same text each time"));
  topP_ = new QDoubleSpinBox;
  topP_->setObjectName("tryTopP");
  topP_->setRange(0.01, 1);
  topP_->setSingleStep(0.05);
  topP_->setValue(0.9);
  maxTokens_ = new QSpinBox;
  maxTokens_->setObjectName("tryMaxTokens");
  maxTokens_->setRange(1, 4096);
  maxTokens_->setValue(64);
  chat_ = new QCheckBox(tr("Chat format"));
  chat_->setObjectName("tryChat");
  chat_->setToolTip(tr("Send the prompt as a user turn in the run's chat template"));
  generate_ = new QPushButton(tr("Generate"));
  generate_->setObjectName("tryGenerate");
  generate_->setDefault(true);
  stop_ = new QPushButton(tr("Stop"));
  stop_->setObjectName("tryStop");
  settings->addWidget(new QLabel(tr("Temperature")));
  settings->addWidget(temperature_);
  settings->addWidget(new QLabel(tr("Top-p")));
  settings->addWidget(topP_);
  settings->addWidget(new QLabel(tr("Max new tokens")));
  settings->addWidget(maxTokens_);
  settings->addWidget(chat_);
  settings->addStretch();
  settings->addWidget(stop_);
  settings->addWidget(generate_);
  layout->addLayout(settings);

  auto* sides = new QHBoxLayout;
  for (auto [side, title, name] : {std::tuple{base_, tr("Base model"), "tryBase"},
                                   std::tuple{tuned_, tr("Fine-tuned"), "tryTuned"}}) {
    auto* box = new QGroupBox(title);
    auto* bl = new QVBoxLayout(box);
    side->out = new QTextBrowser;
    side->out->setObjectName(QString(name) + "Output");
    side->out->setMinimumHeight(100);
    side->status = new QLabel;
    side->status->setObjectName(QString(name) + "Status");
    side->status->setWordWrap(true);
    bl->addWidget(side->out, 1);
    bl->addWidget(side->status);
    sides->addWidget(box, 1);
  }
  base_->error = &baseError_;
  base_->what = tr("base model");
  tuned_->error = &tunedError_;
  tuned_->what = tr("fine-tuned model");
  layout->addLayout(sides, 1);

  connect(runs_, &QComboBox::currentIndexChanged, this, &TryItPage::showRun);
  connect(generate_, &QPushButton::clicked, this, [this] { generate(); });
  connect(stop_, &QPushButton::clicked, this, &TryItPage::stop);
  connect(export_, &QPushButton::clicked, this, [this] {
    ExportFolderDialog dialog(this);
    if (dialog.exec() != QDialog::Accepted || dialog.chosen().isEmpty()) return;
    QSettings().setValue(kLastExportKey, dialog.chosen());
    exportTo(dialog.chosen());
  });
  // History's rows come from a read on a pool thread: a page on screen lists them when they come.
  connect(model_, &QAbstractItemModel::modelReset, this, [this] {
    if (isVisible()) fillRuns();
  });
  fillRuns();
  updateButtons();
}

TryItPage::~TryItPage() {
  for (Side* s : {base_, tuned_}) {
    if (s->process) {
      s->process->disconnect(this);
      s->process->kill();
      s->process->waitForFinished(2000);
    }
    delete s;
  }
  if (exportProcess_) {
    exportProcess_->disconnect(this);
    exportProcess_->kill();
    exportProcess_->waitForFinished(2000);
  }
}

void TryItPage::showEvent(QShowEvent* event) {
  fillRuns();
  QWidget::showEvent(event);
}

// What the chosen run offers. The run chosen again (the page shown again) keeps the user's Chat
// format; its models are read again (a run that ended since has an export now).
void TryItPage::showRun() {
  const QString dir = runs_->currentData(Qt::UserRole + 1).toString();
  const bool sameRun = !dir.isEmpty() && dir == models_.runDir;
  models_ = Models();
  if (runs_->currentIndex() < 0) {
    source_->setText(tr("No run yet: launch one from New run, then try it here."));
    updateButtons();
    return;
  }
  models_ = modelsOf(dir);
  if (!models_.error.isEmpty()) {
    source_->setText(red(models_.error));
  } else {
    source_->setText(tr("Base: %1 · Fine-tuned: %2%3")
                         .arg(models_.noBase.isEmpty() ? models_.baseModel.toHtmlEscaped()
                                                       : tr("none (random weights, model.init)"),
                              models_.tuned.toHtmlEscaped(),
                              models_.tunedIsCheckpoint
                                  ? tr(" (the latest checkpoint: the run has no export)")
                                  : QString()));
    if (!sameRun) chat_->setChecked(models_.chat);
  }
  // The base side says at once why it will stay empty; a side of another run is cleared.
  if (!busy()) {
    if (!sameRun) {
      for (Side* s : {base_, tuned_}) {
        s->out->clear();
        s->text.clear();
        s->error->clear();
        s->status->clear();
      }
    }
    if (!models_.noBase.isEmpty()) {
      base_->out->clear();
      base_->status->setText(models_.noBase);
    }
  }
  updateButtons();
}

// Runs with a folder, newest first, the current one kept.
void TryItPage::fillRuns() {
  const QString keep = runId();
  QSignalBlocker block(runs_);
  runs_->clear();
  for (int i = 0; i < model_->rowCount(); ++i) {
    const RunInfo& r = model_->run(i).info;
    if (r.run_dir.empty()) continue;
    runs_->addItem(QString("%1 · %2 (%3)")
                       .arg(QString::fromStdString(r.name), QString::fromStdString(r.id),
                            QString(run_status_name(r.status))),
                   QString::fromStdString(r.id));
    runs_->setItemData(runs_->count() - 1, QString::fromStdString(r.run_dir), Qt::UserRole + 1);
  }
  const int at = runs_->findData(keep);
  runs_->setCurrentIndex(at >= 0 ? at : runs_->count() > 0 ? 0 : -1);
  block.unblock();
  showRun();
}

void TryItPage::setRun(const QString& id) {
  if (runs_->findData(id) < 0) fillRuns();
  if (runs_->currentIndex() == runs_->findData(id)) return showRun();
  runs_->setCurrentIndex(runs_->findData(id));
}

QString TryItPage::runId() const {
  return runs_->currentData().toString();
}

void TryItPage::setPrompt(const QString& text) {
  prompt_->setPlainText(text);
}

bool TryItPage::busy() const {
  return base_->process || tuned_->process;
}

QString TryItPage::baseText() const {
  return base_->text;
}
QString TryItPage::tunedText() const {
  return tuned_->text;
}
QString TryItPage::baseStatus() const {
  return base_->status->text();
}
QString TryItPage::tunedStatus() const {
  return tuned_->status->text();
}

void TryItPage::updateButtons() {
  generate_->setEnabled(!busy() && models_.error.isEmpty() && !models_.runDir.isEmpty());
  stop_->setEnabled(busy());
  export_->setEnabled(!exportProcess_ && !models_.latestCheckpoint.isEmpty());
}

bool TryItPage::generate() {
  if (busy()) return false;
  if (models_.runDir.isEmpty() || !models_.error.isEmpty()) return false;
  if (prompt_->toPlainText().trimmed().isEmpty()) {
    (models_.noBase.isEmpty() ? base_ : tuned_)->status->setText(red(tr("Type a prompt first.")));
    return false;
  }
  if (models_.noBase.isEmpty()) {
    startSide(*base_, models_.baseModel, models_.tokenizer);
  } else {
    base_->text.clear();
    base_->error->clear();
    base_->out->clear();
    base_->status->setText(models_.noBase);
  }
  startSide(*tuned_, models_.tuned, models_.tunedIsCheckpoint ? models_.tokenizer : QString());
  updateButtons();
  return true;
}

void TryItPage::startSide(Side& side, const QString& model, const QString& tokenizer) {
  side.text.clear();
  side.error->clear();
  side.out->clear();
  const QString worker = WorkerClient::workerPath();
  if (worker.isEmpty()) {
    *side.error = tr("spillway-worker was not found next to the app or on PATH");
    side.status->setText(red(*side.error));
    return;
  }
  QStringList args{"generate",
                   "--model",
                   model,
                   "--prompt",
                   prompt_->toPlainText(),
                   "--max-new-tokens",
                   QString::number(maxTokens_->value()),
                   "--temperature",
                   QString::number(temperature_->value()),
                   "--top-p",
                   QString::number(topP_->value()),
                   "--json"};
  if (!tokenizer.isEmpty()) args << "--tokenizer" << tokenizer;
  if (chat_->isChecked()) args << "--chat" << models_.chatTemplate;
  side.status->setText(tr("Generating with the %1…").arg(side.what));
  side.process = new QProcess(this);
  QProcess* p = side.process;
  connect(p, &QProcess::finished, this, [this, &side](int code) { sideEnded(side, code); });
  connect(p, &QProcess::errorOccurred, this, [this, &side, p](QProcess::ProcessError e) {
    if (e != QProcess::FailedToStart) return;  // the others end in finished()
    *side.error = tr("Could not start spillway-worker: %1").arg(p->errorString());
    side.status->setText(red(*side.error));
    p->deleteLater();
    side.process = nullptr;
    updateButtons();
    if (!busy()) emit generated();
  });
  p->start(worker, args);
}

void TryItPage::sideEnded(Side& side, int code) {
  QProcess* p = side.process;
  const QJsonObject j = lastJsonLine(p->readAllStandardOutput());
  const QString err = QString::fromUtf8(p->readAllStandardError()).trimmed();
  const bool crashed = p->exitStatus() != QProcess::NormalExit;
  p->deleteLater();
  side.process = nullptr;
  if (crashed) {
    *side.error = tr("Stopped.");
    side.status->setText(*side.error);
  } else if (code != 0 || !j.contains("completion")) {
    *side.error = j["message"].toString(
        err.isEmpty() ? tr("spillway-worker generate exited with %1").arg(code)
                      : err.section('\n', -1));
    side.status->setText(red(*side.error));
  } else {
    side.text = j["completion"].toString();
    const QString prompt =
        j.contains("prompt_text") ? j["prompt_text"].toString() : j["prompt"].toString();
    side.out->setHtml(QString("<span style=\"color:#888\">%1</span>%2")
                          .arg(prompt.toHtmlEscaped().replace("\n", "<br/>"),
                               side.text.toHtmlEscaped().replace("\n", "<br/>")));
    side.status->setText(j.contains("template") ? tr("%1 new tokens · chat template %2")
                                                      .arg(j["new_tokens"].toInt())
                                                      .arg(j["template"].toString())
                                                : tr("%1 new tokens").arg(j["new_tokens"].toInt()));
  }
  updateButtons();
  if (!busy()) emit generated();
}

void TryItPage::stop() {
  for (Side* s : {base_, tuned_})
    if (s->process) s->process->kill();  // finished() follows, with a crash exit
}

bool TryItPage::exportTo(const QString& dir) {
  if (exportProcess_ || models_.latestCheckpoint.isEmpty()) return false;
  const QString worker = WorkerClient::workerPath();
  if (worker.isEmpty()) return false;
  exportStatus_->setText(
      tr("Exporting %1 to %2…").arg(QFileInfo(models_.latestCheckpoint).fileName(), dir));
  exportStatus_->show();
  exportProcess_ = new QProcess(this);
  QProcess* p = exportProcess_;
  connect(p, &QProcess::finished, this, [this, p, dir](int code) {
    const QJsonObject j = lastJsonLine(p->readAllStandardOutput());
    const QString err = QString::fromUtf8(p->readAllStandardError()).trimmed();
    p->deleteLater();
    exportProcess_ = nullptr;
    const bool ok = code == 0 && j.contains("out");
    QString message;
    if (ok) {
      message = tr("Exported step %1 to %2").arg(j["step"].toInteger()).arg(dir);
      if (j["format"].toString() == "gguf")
        message = tr("Exported step %1 to %2 (GGUF %3, with an Ollama Modelfile)")
                      .arg(j["step"].toInteger())
                      .arg(j["file"].toString(), j["type"].toString().toUpper());
      if (j.contains("warning")) message += tr(" (%1)").arg(j["warning"].toString());
      for (const QJsonValue& note : j["notes"].toArray())
        message += tr("; note: %1").arg(note.toString());
      exportStatus_->setText(
          QString("%1 · <a href=\"%2\">open folder</a>")
              .arg(message.toHtmlEscaped(), QUrl::fromLocalFile(dir).toString(QUrl::FullyEncoded)));
    } else {
      message = tr("Export failed: %1")
                    .arg(j["message"].toString(err.isEmpty() ? tr("exit code %1").arg(code) : err));
      exportStatus_->setText(red(message));
    }
    updateButtons();
    emit exported(ok, message);
  });
  QStringList args{"export", "--checkpoint", models_.latestCheckpoint, "--out", dir, "--json"};
  const QString format = exportFormat_->currentData().toString();
  if (format.startsWith("gguf-"))
    args << "--format"
         << "gguf"
         << "--type" << format.mid(5);
  if (!models_.tokenizer.isEmpty())
    args << "--tokenizer" << models_.tokenizer;  // pre-tokenized: none
  p->start(worker, args);
  updateButtons();
  return true;
}

bool TryItPage::setExportFormat(const QString& format) {
  const int i = exportFormat_->findData(format);
  if (i < 0) return false;
  exportFormat_->setCurrentIndex(i);
  return true;
}

QString TryItPage::exportMessage() const {
  return exportStatus_->isVisible() || !exportStatus_->text().isEmpty()
             ? QTextDocumentFragment::fromHtml(exportStatus_->text()).toPlainText()
             : QString();
}

}  // namespace spillway::ui
