#include "NewRunPage.h"

#include <QApplication>
#include <QClipboard>
#include <QHBoxLayout>
#include <QMessageBox>
#include <QResizeEvent>
#include <QScrollArea>
#include <QStyle>
#include <QVBoxLayout>

#include "DatasetPanel.h"
#include "ModelPicker.h"
#include "PlacementForm.h"
#include "PlanView.h"
#include "RunLauncher.h"
#include "SpinBox.h"
#include "TrainingForm.h"
#include "WorkerClient.h"

namespace spillway::ui {

// Model, dataset, then training and placement side by side (so that the plan stays on screen
// below them; one above the other on a narrow window), then the plan with the buttons, in a
// scroll area.
NewRunPage::NewRunPage(QWidget* parent)
    : QWidget(parent),
      model_(new ModelPicker),
      data_(new DatasetPanel),
      training_(new TrainingForm),
      placement_(new PlacementForm),
      plan_(new PlanPanel) {
  auto* content = new QWidget;
  auto* layout = new QVBoxLayout(content);
  layout->addWidget(model_);
  layout->addWidget(data_);
  settingsRow_ = new QBoxLayout(QBoxLayout::LeftToRight);
  settingsRow_->addWidget(training_, 2);
  settingsRow_->addWidget(placement_, 1);
  layout->addLayout(settingsRow_);
  layout->addWidget(plan_);
  scroll_ = new QScrollArea;
  scroll_->setWidgetResizable(true);
  scroll_->setWidget(content);
  (new QVBoxLayout(this))->addWidget(scroll_);

  plan_->setJobSource(
      [this](JobSettings* job, QString* error) { return jobForWorker(job, error); });
  model_->setJobFile([this](QString* error) { return plan_->writePlanJob(error); });
  connect(model_, &ModelPicker::checked, this, [this](const ModelInfo& m) {
    if (m.ok) previewDataset();
  });
  connect(data_, &DatasetPanel::changed, this, &NewRunPage::previewDataset);
  connect(data_, &DatasetPanel::previewed, this, &NewRunPage::datasetPreviewed);
  // A red preview holds Launch off, with its reason; a cancelled one says nothing yet.
  connect(data_, &DatasetPanel::previewed, plan_, [this](const DatasetPreview& p) {
    if (!p.cancelled) plan_->setPreviewError(p.ok ? p.beyondPositions : p.error);
  });
  // A plan that did not fit holds Launch off until a setting it rests on changes.
  for (auto signal : {&TrainingForm::inputsChanged, &TrainingForm::datasetShapeChanged})
    connect(training_, signal, plan_, &PlanPanel::planStale);
  connect(placement_, &PlacementForm::changed, plan_, &PlanPanel::planStale);
  connect(model_, &ModelPicker::checked, plan_, &PlanPanel::planStale);
  connect(data_, &DatasetPanel::useSeqLen, training_, &TrainingForm::setSeqLen);
  connect(training_, &TrainingForm::datasetShapeChanged, this, &NewRunPage::previewDataset);
  connect(training_, &TrainingForm::inputsChanged, this, &NewRunPage::checkInputs);
  for (SpinBoxRefusal* refusal : findChildren<SpinBoxRefusal*>())
    connect(refusal, &SpinBoxRefusal::changed, this, &NewRunPage::checkInputs);
  connect(plan_->planView(), &PlanView::applySuggestion, training_, &TrainingForm::setBatch);
  connect(plan_, &PlanPanel::planned, this, &NewRunPage::planned);
  connect(plan_, &PlanPanel::launchClicked, this, [this] { launch(); });
  connect(plan_, &PlanPanel::copyClicked, this, &NewRunPage::copyCommandLine);
}

NewRunPage::~NewRunPage() = default;

void NewRunPage::resizeEvent(QResizeEvent* event) {
  // The page's width (the scroll area's content is never narrower than its minimum) against the
  // two forms' minimums with the content's margins, the scroll area's frame and a scroll bar.
  const QMargins page = layout()->contentsMargins(),
                 content = settingsRow_->parentWidget()->layout()->contentsMargins();
  const int room = event->size().width() - page.left() - page.right();
  const int sideBySide = training_->minimumSizeHint().width() +
                         placement_->minimumSizeHint().width() + settingsRow_->spacing() +
                         content.left() + content.right() + 2 * scroll_->frameWidth() +
                         style()->pixelMetric(QStyle::PM_ScrollBarExtent, nullptr, scroll_);
  const auto direction = room >= sideBySide ? QBoxLayout::LeftToRight : QBoxLayout::TopToBottom;
  if (settingsRow_->direction() != direction) {
    settingsRow_->setDirection(direction);
    // Laid out now, not on the next layout request: the scroll area sizes the content by it.
    settingsRow_->parentWidget()->layout()->activate();
  }
  QWidget::resizeEvent(event);
}

const ModelInfo& NewRunPage::modelInfo() const {
  return model_->info();
}
const DatasetPreview& NewRunPage::datasetPreview() const {
  return data_->shown();
}
const DatasetPreviewLoader* NewRunPage::datasetLoader() const {
  return data_->loader();
}
PlanView* NewRunPage::planView() const {
  return plan_->planView();
}
const GpuProbe* NewRunPage::gpuProbe() const {
  return placement_->gpuProbe();
}
QAction* NewRunPage::measureAction() const {
  return plan_->measureAction();
}

void NewRunPage::checkInputs() {
  plan_->setInputOk(training_->checkInputs() && refusal().isEmpty());
}

QString NewRunPage::inputError() const {
  const QString e = training_->inputError();
  return e.isEmpty() ? refusal() : e;
}

QString NewRunPage::refusal() const {
  for (const SpinBoxRefusal* r : findChildren<SpinBoxRefusal*>())
    if (!r->message().isEmpty()) return r->message();
  return QString();
}

void NewRunPage::setModelPath(const QString& dir) {
  model_->setPath(dir);
}
void NewRunPage::setDatasetPath(const QString& path) {
  data_->setPath(path);
}

void NewRunPage::previewDataset() {
  data_->preview(settings(), model_->info().ok);
}

JobSettings NewRunPage::settings() const {
  JobSettings s = loaded_;  // what the form does not show (eval file, tokenizer, base job)
  s.modelPath = model_->path();
  s.trainPath = data_->path();
  s.format = data_->format();
  s.chatTemplate = data_->chatTemplate();
  training_->readInto(&s);
  placement_->readInto(&s);
  return s;
}

void NewRunPage::setSettings(const JobSettings& s) {
  loaded_ = s;
  loaded_.runDir.clear();
  training_->fill(s);
  placement_->fill(s);
  data_->setFormatAndTemplate(s.format, s.chatTemplate);
  // The model shown must be this job's even when the field's text does not change (an empty
  // field stays empty for a model.init job): setPath checks it whatever the text was.
  model_->setJobModel(loaded_.baseModel());
  setModelPath(s.modelPath);
  setDatasetPath(s.trainPath);
}

bool NewRunPage::loadJob(const QString& path, QString* error) {
  JobSettings s;
  if (!RunLauncher::readJobFile(path, &s, error)) return false;
  setSettings(s);
  return true;
}

bool NewRunPage::saveJob(const QString& path, QString* error) {
  JobSettings s;
  return jobForWorker(&s, error) && RunLauncher::saveJobFile(path, s, error);
}

bool NewRunPage::jobForWorker(JobSettings* job, QString* error) const {
  if (const QString e = inputError(); !e.isEmpty()) return *error = e, false;
  model_->settle();  // a path typed a moment ago is checked now: the job is the field's
  *job = settings();
  const ModelInfo& model = model_->info();
  if (!model.ok)
    return *error = tr("The model is not usable: %1")
                        .arg(model.error.isEmpty() ? tr("choose a model folder") : model.error),
           false;
  if (job->trainPath.isEmpty()) return *error = tr("Choose a dataset file."), false;
  return true;
}

QString NewRunPage::writeJob(QString* error) {
  JobSettings s;
  return jobForWorker(&s, error) ? RunLauncher::writeRunJob(s, error) : QString();
}

QString NewRunPage::writePlanJob(QString* error) {
  return plan_->writePlanJob(error);
}

QString NewRunPage::writeCommandLineJob(QString* error) {
  JobSettings s;
  return jobForWorker(&s, error) ? RunLauncher::writeCommandLineJob(s, error) : QString();
}

void NewRunPage::copyCommandLine() {
  QString error;
  const QString job = writeCommandLineJob(&error);
  if (job.isEmpty()) return void(QMessageBox::warning(this, tr("Copy command line"), error));
  QApplication::clipboard()->setText(WorkerClient::commandLine(job));
}

void NewRunPage::plan() {
  plan_->plan();
}
void NewRunPage::measure() {
  plan_->measure();
}
void NewRunPage::stopPlan() {
  plan_->stopPlan();
}
bool NewRunPage::planning() const {
  return plan_->planning();
}
qint64 NewRunPage::planPid() const {
  return plan_->planPid();
}

bool NewRunPage::launch(QString* runDirOut) {
  QString error, dir;
  qint64 pid = 0;
  const QString job = writeJob(&error);
  if (job.isEmpty() || !RunLauncher::launch(job, &dir, &pid, &error)) {
    QMessageBox::warning(this, tr("Launch"), error);
    return false;
  }
  const JobSettings s = settings();
  if (!s.modelPath.isEmpty())
    RunLauncher::remember("recent/models", s.modelPath);  // not model.init
  RunLauncher::remember("recent/datasets", s.trainPath);
  if (runDirOut) *runDirOut = dir;
  emit launched(dir, pid);
  return true;
}

}  // namespace spillway::ui
