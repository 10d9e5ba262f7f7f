// PlacementForm: New run's Tier placement box — the compute backend with the GPU this machine
// would use (GpuProbe, started with the form on a pool thread), the device memory, how many blocks
// keep their state in HBM (placement.hbm_state_blocks; its -1 reads "as many as fit"), where the
// optimizer state and master weights live, the SSD folder and the DRAM cap. Fields from the job
// schema (JobForm); sizes are shown in GB and kept in bytes.
//
// Thread-safety: GUI thread. Ownership: a widget of the page; it owns its fields and the probe.
#pragma once

#include <QGroupBox>

#include "JobSettings.h"

class QComboBox;
class QDoubleSpinBox;
class QLabel;
class QLineEdit;
class QSpinBox;

namespace spillway::ui {

class GpuProbe;

class PlacementForm : public QGroupBox {
  Q_OBJECT
 public:
  explicit PlacementForm(QWidget* parent = nullptr);
  void readInto(JobSettings* job) const;
  void fill(const JobSettings& job);
  // The GPU probe started with the form; its text() is what the label by the backend shows.
  const GpuProbe* gpuProbe() const { return gpuProbe_; }

 signals:
  void changed();  // any field: a plan made before no longer holds

 private:
  void showGpu();

  QComboBox *backend_, *optimizerTier_, *masterTier_;
  QLabel* gpuLabel_;
  GpuProbe* gpuProbe_;
  QDoubleSpinBox *deviceGb_, *dramCapGb_;
  QSpinBox* hbmStateBlocks_;
  QLineEdit* ssdDir_;
};

}  // namespace spillway::ui
