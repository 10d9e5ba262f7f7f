// ModelCacheDialog: New run's "Hugging Face cache…" — the models a user has downloaded with
// transformers or huggingface-cli, each with its family, size, and whether the job fits this
// machine and why not, from `spillway-worker models --json` (the planner's verdict per model; the
// worker probes the machine once, a second or so). The worker runs as a child process, so the
// window never waits on the cache's disk or the probe. Picking a row (double-click or "Use this
// model") closes the dialog with that model's folder.
//
// GUI thread. Ownership: a dialog of its parent; it owns its child process and kills it on close.
#pragma once

#include <QDialog>
#include <QJsonObject>
#include <QList>

class QLabel;
class QProcess;
class QPushButton;
class QTableWidget;

namespace spillway::ui {

class ModelCacheDialog : public QDialog {
  Q_OBJECT
 public:
  // `jobPath`: the job the fit is planned for (New run's form as a job file); "" plans the built-in
  // job (the form is not a job yet). `hubDir` overrides the cache folder (tests).
  explicit ModelCacheDialog(const QString& jobPath, const QString& hubDir = QString(),
                            QWidget* parent = nullptr);
  ~ModelCacheDialog() override;

  // The chosen model's folder once accepted; "" before.
  QString chosenPath() const { return chosen_; }
  // The rows as the worker described them (tests), in table order.
  const QList<QJsonObject>& models() const { return models_; }
  QTableWidget* table() const { return table_; }
  // Whether the worker is still listing.
  bool listing() const { return process_ != nullptr; }

 signals:
  void listed();  // the table is filled (or the status line says why not)

 private:
  void start(const QString& jobPath, const QString& hubDir);
  void fill(const QByteArray& out, const QByteArray& err, int code);
  void choose();

  QLabel* status_;
  QTableWidget* table_;
  QPushButton* use_;
  QProcess* process_ = nullptr;
  QList<QJsonObject> models_;
  QString chosen_;
};

}  // namespace spillway::ui
