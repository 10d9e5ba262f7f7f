#include "PlacementForm.h"

#include <QCheckBox>
#include <QComboBox>
#include <QDoubleSpinBox>
#include <QFileDialog>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QSpinBox>
#include <QVBoxLayout>
#include <algorithm>

#include "DialogFolder.h"
#include "Format.h"
#include "GpuProbe.h"
#include "JobForm.h"

namespace spillway::ui {

PlacementForm::PlacementForm(QWidget* parent) : PlacementForm(GpuProbe::AnswerFn(), parent) {}

PlacementForm::PlacementForm(GpuProbe::AnswerFn probe, QWidget* parent)
    : QGroupBox(tr("Tier placement"), parent), devices_(JobSettings::defaultDevices()) {
  auto* pf = new QFormLayout(this);
  backend_ = JobForm::comboBox("placement.backend");
  gpuLabel_ = new QLabel;
  gpuLabel_->setObjectName("gpuHint");
  gpuLabel_->setWordWrap(true);
  // Its text can name long paths (no CUDA module: where it looked): they wrap at '/', and a word
  // longer than the room left is cut rather than widening the page; the tooltip has it whole.
  gpuLabel_->setMinimumWidth(120);
  gpuProbe_ = probe ? new GpuProbe(std::move(probe), this) : new GpuProbe(this);
  auto* backendRow = new QHBoxLayout;
  backendRow->addWidget(backend_);
  backendRow->addWidget(gpuLabel_, 1);
  // The GPUs: one box a GPU under "All GPUs", made once the probe has listed them.
  gpus_ = new QWidget;
  gpus_->setObjectName("gpuPicker");
  auto* gpusColumn = new QVBoxLayout(gpus_);
  gpusColumn->setContentsMargins(0, 0, 0, 0);
  gpusColumn->setSpacing(2);
  allGpus_ = new QCheckBox(tr("All GPUs"));
  allGpus_->setObjectName("allGpus");
  JobForm::bind(allGpus_, "placement.devices");
  gpusHint_ = new QLabel;
  gpusHint_->setObjectName("gpusHint");
  gpusHint_->setWordWrap(true);
  gpusHint_->setMinimumWidth(120);
  gpusColumn->addWidget(allGpus_);
  gpusColumn->addWidget(gpusHint_);
  connect(allGpus_, &QCheckBox::clicked, this, [this] { readGpus(allGpus_); });
  connect(gpuProbe_, &GpuProbe::finished, this, &PlacementForm::showGpu);
  connect(gpuProbe_, &GpuProbe::finished, this, &PlacementForm::showGpus);
  showGpu();
  showGpus();
  gpuProbe_->start();
  deviceGb_ = JobForm::doubleSpinBox("placement.device_memory_bytes", 2, 1e-9);  // shown in GB
  // -1 is the schema's "as many as fit", 0 "none": words in the field rather than numbers.
  hbmStateBlocks_ = JobForm::spinBox("placement.hbm_state_blocks");
  hbmStateBlocks_->setObjectName("hbmStateBlocks");
  hbmStateBlocks_->setSpecialValueText(tr("as many as fit"));
  optimizerTier_ = JobForm::comboBox("placement.optimizer");
  masterTier_ = JobForm::comboBox("placement.master");
  ssdDir_ = JobForm::lineEdit("placement.ssd_dir");
  auto* ssdBrowse = new QPushButton(tr("Browse…"));
  auto* ssdRow = new QHBoxLayout;
  ssdRow->addWidget(ssdDir_, 1);
  ssdRow->addWidget(ssdBrowse);
  dramCapGb_ = JobForm::doubleSpinBox("placement.dram_cap_bytes", 1, 1e-9);  // shown in GB
  pf->addRow(tr("Backend"), backendRow);
  pf->addRow(tr("GPUs"), gpus_);
  pf->addRow(tr("Device memory (GB)"), deviceGb_);
  pf->addRow(tr("State in HBM (blocks)"), hbmStateBlocks_);
  pf->addRow(tr("Optimizer state"), optimizerTier_);
  pf->addRow(tr("Master weights"), masterTier_);
  pf->addRow(tr("SSD folder"), ssdRow);
  pf->addRow(tr("DRAM cap (GB)"), dramCapGb_);
  // The GPU's line is about the cuda and auto choices: with cpu chosen it would be beside the
  // point.
  connect(backend_, &QComboBox::currentTextChanged, this, &PlacementForm::showGpu);
  connect(backend_, &QComboBox::currentTextChanged, this, &PlacementForm::showGpuSelection);
  for (QComboBox* c : {backend_, optimizerTier_, masterTier_})
    connect(c, &QComboBox::currentTextChanged, this, &PlacementForm::changed);
  for (QDoubleSpinBox* b : {deviceGb_, dramCapGb_})
    connect(b, &QDoubleSpinBox::valueChanged, this, &PlacementForm::changed);
  connect(ssdDir_, &QLineEdit::textChanged, this, &PlacementForm::changed);
  connect(hbmStateBlocks_, &QSpinBox::valueChanged, this, &PlacementForm::changed);
  connect(ssdBrowse, &QPushButton::clicked, this, [this] {
    const QString d = QFileDialog::getExistingDirectory(
        this, tr("SSD folder"), DialogFolder::start("ssd", ssdDir_->text()));
    DialogFolder::remember("ssd", d);
    if (!d.isEmpty()) ssdDir_->setText(d);
  });
}

void PlacementForm::showGpu() {
  const bool usable = gpuProbe_->done() && gpuProbe_->answer().usable;
  gpuLabel_->setText(breakablePaths(gpuProbe_->text()));
  gpuLabel_->setToolTip(
      tr("The GPU the CUDA backend would use (device 0): %1").arg(gpuProbe_->text()));
  gpuLabel_->setEnabled(usable || !gpuProbe_->done());  // greyed: no GPU to choose
  gpuLabel_->setVisible(backend_->currentText() != QLatin1String("cpu"));
}

void PlacementForm::showGpus() {
  for (QCheckBox* b : gpuBoxes_) delete b;
  gpuBoxes_.clear();
  const bool done = gpuProbe_->done();
  const GpuProbe::Answer& a = gpuProbe_->answer();
  // Each GPU the machine has, then any the job names that it lacks (checked, so that the user
  // sees it and can take it off).
  QVector<GpuProbe::Device> shown = done ? a.gpus : QVector<GpuProbe::Device>();
  for (int i : done ? devices_.indices : std::vector<int>()) {
    if (std::none_of(shown.begin(), shown.end(),
                     [i](const GpuProbe::Device& d) { return d.index == i; })) {
      GpuProbe::Device missing;
      missing.index = i;
      missing.usable = false;
      missing.why = tr("this machine has no GPU %1").arg(i);
      shown.push_back(missing);
    }
  }
  const bool anyUsable =
      std::any_of(shown.begin(), shown.end(), [](const GpuProbe::Device& d) { return d.usable; });
  auto* column = static_cast<QVBoxLayout*>(gpus_->layout());
  for (int k = 0; k < shown.size(); ++k) {
    const GpuProbe::Device& d = shown[k];
    QString text = tr("GPU %1").arg(d.index);
    if (!d.name.isEmpty()) text += " · " + d.name;
    if (d.totalBytes > 0) text += " · " + formatBytes(static_cast<double>(d.totalBytes));
    if (!d.usable) text += " · " + tr("not usable");
    auto* box = new QCheckBox(text);
    box->setObjectName(QString("gpu%1").arg(d.index));
    box->setProperty("gpuIndex", d.index);
    box->setProperty("gpuUsable", d.usable);
    JobForm::bind(box, "placement.devices");
    if (d.usable)
      box->setToolTip(tr("GPU %1 · sm_%2 · PCI %3%4\n\n%5")
                          .arg(d.index)
                          .arg(d.computeCapability)
                          .arg(d.pciBusId,
                               d.attention.isEmpty()
                                   ? QString()
                                   : "\n" + tr("attention on %1").arg(d.attention),
                               JobForm::toolTip("placement.devices")));
    else
      box->setToolTip(tr("GPU %1 cannot be used: %2\n\n%3")
                          .arg(d.index)
                          .arg(d.why.isEmpty() ? tr("unknown reason") : d.why)
                          .arg(JobForm::toolTip("placement.devices")));
    connect(box, &QCheckBox::clicked, this, [this, box] { readGpus(box); });
    column->insertWidget(column->count() - 1, box);  // above the hint
    gpuBoxes_ << box;
  }
  gpusUsable_ = anyUsable;
  showGpuSelection();
}

void PlacementForm::showGpuSelection() {
  const bool done = gpuProbe_->done();
  const GpuProbe::Answer& a = gpuProbe_->answer();
  // What the selection checks: all, the first N, or the named ones.
  allGpus_->setChecked(devices_.all);
  for (QCheckBox* box : gpuBoxes_) {
    const int i = box->property("gpuIndex").toInt();
    box->setChecked(devices_.all ||
                    (devices_.indices.empty()
                         ? i < devices_.count
                         : std::count(devices_.indices.begin(), devices_.indices.end(), i) > 0));
  }
  // Usable only where there is a GPU to choose and the backend would run on one.
  const bool cpu = backend_->currentText() == QLatin1String("cpu");
  QString why;
  if (!done)
    why = tr("probing GPUs…");
  else if (!gpusUsable_)
    why = tr("This machine has no usable GPU (%1): the run trains on the CPU.")
              .arg(a.why.isEmpty() ? tr("unknown reason") : a.why);
  else if (cpu)
    why = tr("The CPU backend trains on no GPU: choose auto or cuda to pick GPUs.");
  const bool enabled = why.isEmpty();
  // The line under the boxes is short (the backend's line beside them has the probe's whole
  // answer, which can name long paths); the tooltip says all of it.
  const QString hint = !done ? why
                       : !gpusUsable_
                           ? tr("No usable GPU on this machine: the run trains on the CPU.")
                           : QString();
  allGpus_->setEnabled(enabled);
  allGpus_->setToolTip(enabled ? JobForm::toolTip("placement.devices")
                               : why + "\n\n" + JobForm::toolTip("placement.devices"));
  // An unusable GPU can only be taken off (a loaded job named it).
  for (QCheckBox* box : gpuBoxes_)
    box->setEnabled(enabled && !devices_.all &&
                    (box->property("gpuUsable").toBool() || box->isChecked()));
  gpusHint_->setText(hint);
  gpusHint_->setToolTip(why);
  gpusHint_->setVisible(!gpusHint_->text().isEmpty());
  gpusHint_->setEnabled(false);
}

void PlacementForm::readGpus(QCheckBox* clicked) {
  if (clicked == allGpus_) {
    devices_ = JobSettings::defaultDevices();
    devices_.all = allGpus_->isChecked();
  } else {
    // Not remade here: the box that was clicked is still delivering its signal.
    std::vector<int> checked;
    for (QCheckBox* box : gpuBoxes_)
      if (box->isChecked()) checked.push_back(box->property("gpuIndex").toInt());
    if (checked.empty()) {  // a run needs a GPU: the last one stays
      clicked->setChecked(true);
      return;
    }
    std::sort(checked.begin(), checked.end());
    devices_ = job::DeviceSelection{};
    bool prefix = true;  // GPUs 0..N-1: written as the count N
    for (size_t k = 0; k < checked.size(); ++k)
      prefix = prefix && checked[k] == static_cast<int>(k);
    if (prefix)
      devices_.count = static_cast<int>(checked.size());
    else
      devices_.indices = checked, devices_.count = static_cast<int>(checked.size());
  }
  showGpuSelection();
  emit changed();
}

void PlacementForm::readInto(JobSettings* s) const {
  s->backend = backend_->currentText();
  s->deviceMemoryBytes = static_cast<qint64>(deviceGb_->value() * 1e9);
  s->optimizerTier = optimizerTier_->currentText();
  s->masterTier = masterTier_->currentText();
  s->ssdDir = ssdDir_->text();
  s->dramCapBytes = static_cast<qint64>(dramCapGb_->value() * 1e9);
  s->hbmStateBlocks = hbmStateBlocks_->value();
  s->devices = devices_;
}

void PlacementForm::fill(const JobSettings& s) {
  backend_->setCurrentText(s.backend);
  optimizerTier_->setCurrentText(s.optimizerTier);
  masterTier_->setCurrentText(s.masterTier);
  deviceGb_->setValue(s.deviceMemoryBytes / 1e9);
  ssdDir_->setText(s.ssdDir);
  dramCapGb_->setValue(s.dramCapBytes / 1e9);
  hbmStateBlocks_->setValue(s.hbmStateBlocks);
  devices_ = s.devices;
  showGpus();
}

}  // namespace spillway::ui
