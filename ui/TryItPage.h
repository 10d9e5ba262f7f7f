// TryItPage: try the model a run trained — a prompt in, the base model's and the fine-tuned
// model's text out side by side, with temperature, top-p and max new tokens, sent as a chat turn
// (the run's data.template, auto: the tokenizer's or the family's) when "Chat format" is on; and
// Export, which writes the run's latest checkpoint as a model folder where the user chooses and
// says where it went.
//
// Nothing runs in the GUI process: each side is `spillway-worker generate --json` in a QProcess
// (the fine-tuned side on the run's export/, else its latest checkpoint with the run's tokenizer;
// a run trained from model.init has only that side: the base side says why in one line),
// Export is `spillway-worker export --json`. Stop kills them; a worker's error is shown in red on
// its side. GUI thread; borrows the history model; owns its processes.
#pragma once

#include <QString>
#include <QWidget>

class QCheckBox;
class QComboBox;
class QDoubleSpinBox;
class QLabel;
class QPlainTextEdit;
class QProcess;
class QPushButton;
class QSpinBox;
class QTextBrowser;

namespace spillway::ui {

class RunHistoryModel;

class TryItPage : public QWidget {
  Q_OBJECT
 public:
  explicit TryItPage(RunHistoryModel* model, QWidget* parent = nullptr);
  ~TryItPage() override;

  // What a run offers to try: its base model (the job's model.path and tokenizer), and the
  // fine-tuned model: export/ when the run wrote one, else its latest checkpoint.
  struct Models {
    QString error;  // why the run cannot be tried ("" when it can)
    QString runDir, runName;
    QString baseModel, tokenizer;  // tokenizer: the job's model.tokenizer, else baseModel
    // Why the run has no base side ("" when it has one): a run that trained a model.init model
    // started from random weights, which are no base to compare with; its fine-tuned side works.
    QString noBase;
    QString tuned;  // export/ or checkpoints/step-N
    bool tunedIsCheckpoint = false;
    QString latestCheckpoint;  // what Export writes ("" when the run has none)
    QString chatTemplate;      // the job's data.template ("auto" when it names none)
    bool chat = false;         // the data was chat data, or the tokenizer has a chat template
  };
  static Models modelsOf(const QString& runDir);

  // Chooses the run (by id, as History's rows name them) and shows what will be compared.
  void setRun(const QString& runId);
  QString runId() const;
  const Models& models() const { return models_; }
  void setPrompt(const QString& text);
  // Starts both sides; false (and why, on the page) when the run or the prompt cannot be tried.
  bool generate();
  void stop();
  bool busy() const;
  // The completions shown, and each side's error ("" when none).
  QString baseText() const;
  QString tunedText() const;
  QString baseError() const { return baseError_; }
  // What the side's status line says (progress, the token count, an error, or models().noBase).
  QString baseStatus() const;
  QString tunedStatus() const;
  QString tunedError() const { return tunedError_; }
  // Writes the latest checkpoint at `dir` in the background, in the format the Export format
  // choice names (a Hugging Face folder, or model.gguf in F16/BF16/Q8_0 with an Ollama Modelfile;
  // setExportFormat picks it: "hf", "gguf-f16", "gguf-bf16", "gguf-q8_0"); exported() says how it
  // went, and the page shows where it went. Export… asks for `dir` in a folder dialog that
  // opens where the last export went (else the home folder) and takes a new folder's name. The
  // worker refuses a `dir` that holds files Spillway did not write; the page shows its reason.
  bool exportTo(const QString& dir);
  QString exportMessage() const;
  // The format Export writes; the choice is kept for the next session (QSettings export/format).
  bool setExportFormat(const QString& format);  // false for a name it does not list

 signals:
  void generated();  // both sides ended (or were stopped)
  void exported(bool ok, const QString& message);

 protected:
  void showEvent(QShowEvent* event) override;

 private:
  struct Side;
  void fillRuns();
  void showRun();
  void startSide(Side& side, const QString& model, const QString& tokenizer);
  void sideEnded(Side& side, int code);
  void updateButtons();
  RunHistoryModel* model_;
  Models models_;
  QComboBox* runs_;
  QLabel* source_;
  QPlainTextEdit* prompt_;
  QDoubleSpinBox *temperature_, *topP_;
  QSpinBox* maxTokens_;
  QCheckBox* chat_;
  QComboBox* exportFormat_;
  QPushButton *generate_, *stop_, *export_;
  QTextBrowser *baseOut_, *tunedOut_;
  QLabel *baseStatus_, *tunedStatus_, *exportStatus_;
  QString baseError_, tunedError_;
  Side* base_;
  Side* tuned_;
  QProcess* exportProcess_ = nullptr;
};

}  // namespace spillway::ui
