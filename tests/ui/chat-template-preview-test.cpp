// The chat template on the New run page (issue 13 point 6): chosen in the form (auto and each
// supported one), the template used named in the preview with why, the end-of-turn tokens shown
// by name and as trained, and truncation as a warning whose fix (a longer sequence) is a button
// that changes the form; packing (the default) cuts what padding cuts.
#include <gtest/gtest.h>

#include <QCheckBox>
#include <QComboBox>
#include <QJsonObject>
#include <QLabel>
#include <QPushButton>
#include <QSignalSpy>
#include <QSpinBox>
#include <QTest>
#include <fstream>

#include "DatasetPreview.h"
#include "JobForm.h"
#include "NewRunPage.h"
#include "data/chat-template.h"
#include "test-data.h"
#include "ui-test-util.h"

namespace spillway::ui {
namespace {
using spillway::testing::data_path;

QString alpaca() {
  return q(data_path("datasets/alpaca/alpaca_en_demo.json"));
}

// Waits for the preview that the last change of the form asked for.
bool waitForPreview(NewRunPage& page, QSignalSpy& spy) {
  spy.clear();
  return spy.wait(30000) && page.datasetPreview().ok;
}

TEST(ChatTemplate, TheFormOffersAutoAndEverySupportedTemplate) {
  NewRunPage page;
  auto* combo = page.findChild<QComboBox*>("chatTemplate");
  ASSERT_NE(combo, nullptr);
  QStringList items;
  for (int i = 0; i < combo->count(); ++i) items << combo->itemText(i);
  EXPECT_EQ(items,
            (QStringList{"auto", "model", "llama-2", "llama-3", "chatml", "alpaca", "plain"}));
  EXPECT_EQ(combo->currentText(), "auto");
  // Every name the form offers is one the engine renders.
  for (const QString& name : items)
    EXPECT_TRUE(parse_chat_template_kind(name.toStdString()).ok()) << name.toStdString();
  // The combo has a visible label, and the job carries what is chosen.
  bool labelled = false;
  for (QLabel* l : page.findChildren<QLabel*>()) labelled |= l->buddy() == combo;
  EXPECT_TRUE(labelled);
  combo->setCurrentText("chatml");
  EXPECT_EQ(page.settings().toJson()["data"]["template"], "chatml");
}

TEST(ChatTemplate, ThePreviewNamesTheTemplateUsedAndShowsTrainedEndOfTurnTokens) {
  SPILLWAY_REQUIRE_DATA();
  NewRunPage page;
  page.show();
  QSignalSpy previewed(&page, &NewRunPage::datasetPreviewed);
  page.setModelPath(q(data_path("models/stories260K")));
  page.findChild<QSpinBox*>("seqLen")->setValue(512);
  // One conversation a sample (not packed), so that each sample has one reply's end.
  page.findChild<QCheckBox*>("packing")->setChecked(false);
  // Short replies ("I am {{name}}, an AI assistant..."): every sample ends inside the sequence.
  page.setDatasetPath(q(data_path("datasets/alpaca/identity.json")));
  ASSERT_TRUE(waitForPreview(page, previewed)) << page.datasetPreview().error.toStdString();
  auto* used = page.findChild<QLabel*>("chatTemplateUsed");
  ASSERT_NE(used, nullptr);
  EXPECT_TRUE(used->isVisible());
  // auto: stories260K's tokenizer has no chat template; its family (llama, no Llama-3 header
  // token) gives llama-2.
  EXPECT_EQ(page.datasetPreview().chatTemplate, "llama-2");
  EXPECT_TRUE(
      used->text().startsWith("Chat template used: <b>llama-2</b> (from model family 'llama'"))
      << used->text().toStdString();
  // Each reply ends with EOS, shown by its name, trained; the prompt's BOS is shown, not trained.
  const DatasetPreview& p = page.datasetPreview();
  EXPECT_EQ(p.truncated, 0);
  EXPECT_EQ(p.specialTokensTrained, 3) << p.previewHtml.left(3000).toStdString();  // one per sample
  EXPECT_GT(p.specialTokensShown, p.specialTokensTrained);  // BOS of each sample
  EXPECT_TRUE(
      p.previewHtml.contains("title=\"special token &lt;/s&gt;, trained\">&lt;/s&gt;</span>"))
      << p.previewHtml.left(3000).toStdString();
  EXPECT_TRUE(
      p.previewHtml.contains("title=\"special token &lt;s&gt;, not trained\">&lt;s&gt;</span>"));
  EXPECT_TRUE(used->text().contains("those on yellow are trained"));
  // Short conversations one a sequence leave it mostly padding: the label says what packing would
  // do, and once packed how full the sequences are.
  auto* label = page.findChild<QLabel*>("datasetLabel");
  ASSERT_NE(label, nullptr);
  const qint64 unpacked = p.sequences;  // p is the page's preview: the next one replaces it
  EXPECT_LT(p.positions, p.sequences * 512 / 2);
  EXPECT_TRUE(label->text().contains("full: packing the conversations would fill them"))
      << label->text().toStdString();
  page.findChild<QCheckBox*>("packing")->setChecked(true);
  ASSERT_TRUE(waitForPreview(page, previewed));
  EXPECT_TRUE(page.datasetPreview().packed);
  EXPECT_LT(page.datasetPreview().sequences, unpacked);
  EXPECT_TRUE(label->text().contains("conversations packed, sequences "))
      << label->text().toStdString();
  page.findChild<QCheckBox*>("packing")->setChecked(false);
  ASSERT_TRUE(waitForPreview(page, previewed));

  // Chosen in the form: alpaca's layout, and the preview says it was set.
  page.findChild<QComboBox*>("chatTemplate")->setCurrentText("alpaca");
  ASSERT_TRUE(waitForPreview(page, previewed));
  EXPECT_EQ(page.datasetPreview().chatTemplate, "alpaca");
  EXPECT_EQ(used->text().left(50).toStdString(),
            "Chat template used: <b>alpaca</b> (set to alpaca).");
  EXPECT_TRUE(page.datasetPreview().previewHtml.contains("### Instruction:"));
  EXPECT_EQ(page.datasetPreview().specialTokensTrained, 3);  // alpaca's replies end with EOS too

  // Plain text has no template: the line goes.
  page.setDatasetPath(q(data_path("datasets/tinyshakespeare/input.txt")));
  ASSERT_TRUE(waitForPreview(page, previewed));
  EXPECT_FALSE(used->isVisible());
}

TEST(ChatTemplate, ChatMlEndOfTurnIsShownByNameAndTrained) {
  SPILLWAY_REQUIRE_DATA();
  DatasetPreview::Request r;
  r.path = alpaca();
  r.modelPath = q(data_path("models/qwen2-tiny"));
  r.tokenizerPath = q(data_path("tokenizers/qwen2.5"));
  r.chatTemplate = "chatml";  // the hand-written one, forced over Qwen2.5's own
  r.seqLen = 1024;
  const DatasetPreview p = DatasetPreview::load(r);
  ASSERT_TRUE(p.ok) << p.error.toStdString();
  EXPECT_EQ(p.chatTemplate, "chatml");
  // <|im_end|> closes every turn; the reply's is trained, the system's and the user's are not.
  EXPECT_TRUE(p.previewHtml.contains("title=\"special token &lt;|im_end|&gt;, trained\""))
      << p.previewHtml.left(3000).toStdString();
  EXPECT_TRUE(p.previewHtml.contains("title=\"special token &lt;|im_end|&gt;, not trained\""));
  EXPECT_GE(p.specialTokensTrained, 1);
}

// A model with its own template (Qwen3's): the preview is its rendering by jinja2, the trained
// spans marked: each reply with its closing <|im_end|>, a tool call as the model writes it, and
// for the last reply the empty reasoning block Qwen3's template writes before it (what the model
// writes at inference).
TEST(ChatTemplate, ThePreviewShowsTheModelsOwnTemplateWithTrainedSpans) {
  SPILLWAY_REQUIRE_DATA();
  spillway::testing::TempDir tmp;
  const std::string data = tmp.path() + "/tool.jsonl";
  std::ofstream(data)
      << R"({"messages": [{"role": "user", "content": "Weather in Paris?"}, )"
         R"({"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": )"
         R"({"name": "weather", "arguments": {"city": "Paris"}}}]}, )"
         R"({"role": "tool", "content": "{\"celsius\": 21}"}, )"
         R"({"role": "assistant", "content": "It is 21 degrees."}], )"
         R"("tools": [{"type": "function", "function": {"name": "weather", "parameters": )"
         R"({"type": "object", "properties": {"city": {"type": "string"}}}}}]})"
      << "\n";
  DatasetPreview::Request r;
  r.path = q(data);
  r.modelPath = q(data_path("models/qwen2-tiny"));
  r.tokenizerPath = q(data_path("tokenizers/qwen3"));
  r.seqLen = 1024;
  const DatasetPreview p = DatasetPreview::load(r);
  ASSERT_TRUE(p.ok) << p.error.toStdString();
  EXPECT_EQ(p.chatTemplate, "model");
  EXPECT_TRUE(p.chatTemplateReason.startsWith("the model's own chat template"))
      << p.chatTemplateReason.toStdString();
  const QString trained = "<span style=\"background-color:#ffe08a;color:#000\">";
  const QString& html = p.previewHtml;
  EXPECT_TRUE(html.contains("# Tools")) << html.toStdString();
  // The system text's <tool_call> example is not trained; the call the model makes is.
  EXPECT_TRUE(html.contains(trained + "&lt;tool_call&gt;")) << html.toStdString();
  EXPECT_TRUE(html.contains(trained + "&lt;think&gt;")) << html.toStdString();
  EXPECT_TRUE(html.contains(trained + " degrees"));
  EXPECT_TRUE(html.contains("title=\"special token &lt;|im_end|&gt;, trained\""));
  EXPECT_TRUE(html.contains("title=\"special token &lt;|im_end|&gt;, not trained\""));
}

TEST(ChatTemplate, TruncationIsAWarningWhoseFixesChangeTheForm) {
  SPILLWAY_REQUIRE_DATA();
  NewRunPage page;
  page.show();
  QSignalSpy previewed(&page, &NewRunPage::datasetPreviewed);
  page.setModelPath(q(data_path("models/stories260K")));
  page.findChild<QSpinBox*>("seqLen")->setValue(128);
  page.setDatasetPath(alpaca());
  ASSERT_TRUE(waitForPreview(page, previewed)) << page.datasetPreview().error.toStdString();
  const DatasetPreview first = page.datasetPreview();
  ASSERT_GT(first.truncated, 0);
  auto* warning = page.findChild<QWidget*>("truncationWarning");
  auto* text = page.findChild<QLabel*>("truncationText");
  auto* useSeqLen = page.findChild<QPushButton*>("useSeqLenForAll");
  ASSERT_TRUE(warning && text && useSeqLen);
  // Packing (the default) cuts what padding cuts: it is no fix for truncation.
  EXPECT_TRUE(page.findChild<QCheckBox*>("packing")->isChecked());
  EXPECT_TRUE(first.packed);
  EXPECT_EQ(page.findChild<QPushButton*>("usePacking"), nullptr);
  EXPECT_TRUE(warning->isVisible());
  std::printf("alpaca at 128 on stories260K: %s\n", text->text().toStdString().c_str());
  EXPECT_TRUE(text->text().startsWith(QString("⚠ %1 of 999 examples (").arg(first.truncated)))
      << text->text().toStdString();
  EXPECT_TRUE(
      text->text().contains("are longer than 128 tokens and are cut: their ends are not trained."));
  // The longer sequence: a multiple of 64 within the model's 512 positions.
  EXPECT_GT(first.seqLenForAll, 128);
  EXPECT_LE(first.seqLenForAll, 512);
  EXPECT_EQ(first.seqLenForAll % 64, 0);
  EXPECT_TRUE(useSeqLen->isVisible());
  EXPECT_EQ(useSeqLen->text(), QString("Use %1").arg(first.seqLenForAll));

  // Fix 1: the longer sequence, from the button.
  QTest::mouseClick(useSeqLen, Qt::LeftButton);
  EXPECT_EQ(page.findChild<QSpinBox*>("seqLen")->value(), first.seqLenForAll);
  ASSERT_TRUE(waitForPreview(page, previewed));
  EXPECT_LT(page.datasetPreview().truncated, first.truncated);
  if (page.datasetPreview().truncated == 0) {
    EXPECT_FALSE(warning->isVisible());
  } else {  // the longest example is past the model's 512 positions
    EXPECT_EQ(first.seqLenForAll, 512);
    EXPECT_FALSE(useSeqLen->isVisible());
    EXPECT_TRUE(text->text().contains("The model takes at most 512 positions."))
        << text->text().toStdString();
  }

  // Unpacked, the same conversations are cut: packing keeps each whole only where it fits.
  page.findChild<QSpinBox*>("seqLen")->setValue(128);
  page.findChild<QCheckBox*>("packing")->setChecked(false);
  ASSERT_TRUE(waitForPreview(page, previewed));
  EXPECT_FALSE(page.datasetPreview().packed);
  EXPECT_EQ(page.datasetPreview().truncated, first.truncated);
  EXPECT_EQ(page.datasetPreview().trainedTokens, first.trainedTokens);
  EXPECT_FALSE(page.settings().toJson()["data"]["packing"].get<bool>());
}

}  // namespace
}  // namespace spillway::ui
