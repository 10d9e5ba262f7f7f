// PlacementForm: New run's Tier placement box — the compute backend with the GPU this machine
// would use (GpuProbe, started with the form on a pool thread), the GPUs to train on
// (placement.devices: "All GPUs" or the machine's GPUs by name and memory, each checkable, from the
// same probe; disabled, with a tooltip that says why, on a machine without a usable GPU or with the
// CPU backend chosen), the device memory, how many blocks
// keep their state in HBM (placement.hbm_state_blocks; its -1 reads "as many as fit"), where the
// optimizer state and master weights live, the SSD folder and the DRAM cap. Fields from the job
// schema (JobForm); sizes are shown in GB and kept in bytes.
//
// Thread-safety: GUI thread. Ownership: a widget of the page; it owns its fields and the probe.
#pragma once

#include <QGroupBox>
#include <QVector>

#include "GpuProbe.h"
#include "JobSettings.h"

class QCheckBox;
class QComboBox;
class QDoubleSpinBox;
class QLabel;
class QLineEdit;
class QSpinBox;

namespace spillway::ui {

class PlacementForm : public QGroupBox {
  Q_OBJECT
 public:
  explicit PlacementForm(QWidget* parent = nullptr);
  // The same with the GPU probe's answer from `probe` (tests pass a machine of their own).
  PlacementForm(GpuProbe::AnswerFn probe, QWidget* parent);
  void readInto(JobSettings* job) const;
  void fill(const JobSettings& job);
  // The GPU probe started with the form; its text() is what the label by the backend shows.
  const GpuProbe* gpuProbe() const { return gpuProbe_; }

 signals:
  void changed();  // any field: a plan made before no longer holds

 private:
  void showGpu();
  // Remakes the GPUs control from the probe's GPUs and devices_ (and any index devices_ names
  // that the machine lacks), then enables it as the machine and the backend allow.
  void showGpus();
  // Checks and enables the boxes as devices_, the probe and the backend say.
  void showGpuSelection();
  // The boxes as a selection: "all", the first N GPUs (as a count: the job then runs on any
  // machine with that many), or the indices checked. At least one stays checked.
  void readGpus(QCheckBox* clicked);

  QComboBox *backend_, *optimizerTier_, *masterTier_;
  QLabel* gpuLabel_;
  GpuProbe* gpuProbe_;
  QDoubleSpinBox *deviceGb_, *dramCapGb_;
  QSpinBox* hbmStateBlocks_;
  QLineEdit* ssdDir_;
  QWidget* gpus_;  // "gpuPicker": allGpus_ and a box per GPU (property "gpuIndex")
  QCheckBox* allGpus_;
  QLabel* gpusHint_;  // "probing GPUs…", "no usable GPU"
  QVector<QCheckBox*> gpuBoxes_;
  bool gpusUsable_ = false;       // the probe found a GPU the CUDA backend can use
  job::DeviceSelection devices_;  // placement.devices as the form holds it
};

}  // namespace spillway::ui
