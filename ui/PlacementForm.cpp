#include "PlacementForm.h"

#include <QComboBox>
#include <QDoubleSpinBox>
#include <QFileDialog>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QSpinBox>

#include "DialogFolder.h"
#include "Format.h"
#include "GpuProbe.h"
#include "JobForm.h"

namespace spillway::ui {

PlacementForm::PlacementForm(QWidget* parent) : QGroupBox(tr("Tier placement"), parent) {
  auto* pf = new QFormLayout(this);
  backend_ = JobForm::comboBox("placement.backend");
  gpuLabel_ = new QLabel;
  gpuLabel_->setObjectName("gpuHint");
  gpuLabel_->setWordWrap(true);
  // Its text can name long paths (no CUDA module: where it looked): they wrap at '/', and a word
  // longer than the room left is cut rather than widening the page; the tooltip has it whole.
  gpuLabel_->setMinimumWidth(120);
  gpuProbe_ = new GpuProbe(this);
  connect(gpuProbe_, &GpuProbe::finished, this, &PlacementForm::showGpu);
  showGpu();
  gpuProbe_->start();
  auto* backendRow = new QHBoxLayout;
  backendRow->addWidget(backend_);
  backendRow->addWidget(gpuLabel_, 1);
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
  pf->addRow(tr("Device memory (GB)"), deviceGb_);
  pf->addRow(tr("State in HBM (blocks)"), hbmStateBlocks_);
  pf->addRow(tr("Optimizer state"), optimizerTier_);
  pf->addRow(tr("Master weights"), masterTier_);
  pf->addRow(tr("SSD folder"), ssdRow);
  pf->addRow(tr("DRAM cap (GB)"), dramCapGb_);
  // The GPU's line is about the cuda and auto choices: with cpu chosen it would be beside the
  // point.
  connect(backend_, &QComboBox::currentTextChanged, this, &PlacementForm::showGpu);
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

void PlacementForm::readInto(JobSettings* s) const {
  s->backend = backend_->currentText();
  s->deviceMemoryBytes = static_cast<qint64>(deviceGb_->value() * 1e9);
  s->optimizerTier = optimizerTier_->currentText();
  s->masterTier = masterTier_->currentText();
  s->ssdDir = ssdDir_->text();
  s->dramCapBytes = static_cast<qint64>(dramCapGb_->value() * 1e9);
  s->hbmStateBlocks = hbmStateBlocks_->value();
}

void PlacementForm::fill(const JobSettings& s) {
  backend_->setCurrentText(s.backend);
  optimizerTier_->setCurrentText(s.optimizerTier);
  masterTier_->setCurrentText(s.masterTier);
  deviceGb_->setValue(s.deviceMemoryBytes / 1e9);
  ssdDir_->setText(s.ssdDir);
  dramCapGb_->setValue(s.dramCapBytes / 1e9);
  hbmStateBlocks_->setValue(s.hbmStateBlocks);
}

}  // namespace spillway::ui
