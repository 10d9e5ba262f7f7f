#include "train/gguf-export.h"

#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/fail-point.h"
#include "core/file-util.h"
#include "data/model-tokenizer.h"
#include "train/export.h"

namespace spillway {
namespace fs = std::filesystem;

Result<GgufFileType> parse_gguf_type(const std::string& name) {
  if (name == "f16") return GgufFileType::kMostlyF16;
  if (name == "bf16") return GgufFileType::kMostlyBF16;
  if (name == "q8_0") return GgufFileType::kMostlyQ8_0;
  return invalid_argument("unknown GGUF type '" + name + "'; choose f16, bf16 or q8_0");
}

const char* gguf_type_label(GgufFileType t) {
  switch (t) {
    case GgufFileType::kAllF32:
      return "f32";
    case GgufFileType::kMostlyF16:
      return "f16";
    case GgufFileType::kMostlyBF16:
      return "bf16";
    case GgufFileType::kMostlyQ8_0:
      return "q8_0";
  }
  return "?";
}

std::string ollama_modelfile(const GgufVocabInfo& vocab) {
  std::string s =
      "# Written by Spillway. In this folder: ollama create NAME -f Modelfile\n"
      "# No TEMPLATE: Ollama compares model.gguf's tokenizer.chat_template with its own templates\n"
      "# and uses the closest when it is within 100 edits (template.Named); when none is, it "
      "sends\n"
      "# the prompt as it is: then add a TEMPLATE line in Ollama's Go template syntax.\n"
      "FROM ./model.gguf\n";
  for (const std::string& stop : vocab.stop) {
    std::string quoted;
    for (char c : stop) {
      if (c == '"' || c == '\\') quoted += '\\';
      quoted += c;
    }
    s += "PARAMETER stop \"" + quoted + "\"\n";
  }
  return s;
}

Result<GgufExportResult> export_gguf(const ModelState& state, const std::string& tokenizer_source,
                                     const std::string& out, GgufFileType type) {
  const auto fail = [&](const Status& st) { return st.with_context("export to " + out); };
  if (tokenizer_source.empty() || tokenizer_source == kBuiltinBytesTokenizer)
    return fail(invalid_argument(
        std::string(tokenizer_source.empty()
                        ? "the model has no tokenizer"
                        : "the model uses Spillway's built-in byte tokenizer") +
        ", and a GGUF file must carry one llama.cpp knows: pass --tokenizer with the model's "
        "tokenizer folder, or export --format hf"));
  const ModelConfig& config = state.config();
  const nlohmann::json hp = config.to_json();
  GgufExportResult result;
  auto arch = gguf_architecture(config.architecture);
  if (!arch.ok()) return fail(arch.status());
  result.architecture = *arch;

  GgufWriter w;
  w.set_string("general.architecture", *arch);
  w.set_string("general.type", "model");
  w.set_string("general.name", fs::path(out).filename().string());
  if (Status st = set_gguf_hparams(*arch, hp, type, w); !st.ok()) return fail(st);
  auto extra = gguf_extra_tensors(*arch, hp, w);
  if (!extra.ok()) return fail(extra.status());
  auto vocab = set_gguf_vocab(*arch, hp, tokenizer_source, w);
  if (!vocab.ok()) return fail(vocab.status());
  result.vocab = std::move(*vocab);
  w.set_u32("general.quantization_version", 2);  // GGML_QNT_VERSION

  for (GgufExtraTensor& t : *extra) {
    const int64_t n = static_cast<int64_t>(t.values.size());
    auto values = std::make_shared<std::vector<float>>(std::move(t.values));
    if (Status st = w.add_tensor(t.name, {n}, GgmlType::kF32, [values] { return *values; });
        !st.ok())
      return fail(st);
  }
  const GgmlType wanted = gguf_file_type_tensor_type(type);
  const ParameterLayout& layout = state.layout();
  for (size_t b = 0; b < layout.num_blocks(); ++b) {
    for (const ParamView& p : layout.blocks()[b].params) {
      auto mapped = gguf_tensor_name(*arch, hp, p.name);
      if (!mapped.ok()) return fail(mapped.status());
      std::vector<int64_t> ne(p.shape.rbegin(), p.shape.rend());  // ggml order: innermost first
      GgmlType t = gguf_keeps_f32(mapped->name, ne.size()) ? GgmlType::kF32 : wanted;
      if (t == GgmlType::kQ8_0 && ne[0] % kQ8_0BlockSize != 0) {
        t = GgmlType::kF16;  // convert: QuantError -> "falling back to F16"
        ++result.f16_fallbacks;
      }
      const float* src = state.master(b) + p.offset;
      const size_t numel = p.numel;
      const std::vector<int64_t> shape = p.shape;
      const GgufTensorName m = *mapped;
      auto values = [src, numel, shape, m]() -> Result<std::vector<float>> {
        std::vector<float> v(src, src + numel);
        if (m.transform == GgufTransform::kRopePermute)
          v = rope_permute(v, shape[0], shape.size() > 1 ? shape[1] : 1, m.permute_heads);
        if (m.transform == GgufTransform::kAddOne)
          for (float& x : v) x += 1.0f;
        return v;
      };
      if (Status st = w.add_tensor(m.name, ne, t, values); !st.ok()) return fail(st);
    }
  }
  result.tensors = w.tensor_count();
  if (result.f16_fallbacks > 0)
    result.notes.push_back(std::to_string(result.f16_fallbacks) +
                           " tensors have rows whose length is not a multiple of 32 and are "
                           "written as F16, as llama.cpp's converter does");
  for (const std::string& n : result.vocab.notes) result.notes.push_back(n);

  Status st = write_export_folder(out, [&](const std::string& tmp) -> Status {
    SPW_RETURN_IF_ERROR(write_file_atomic_stream(
        (fs::path(tmp) / kGgufFileName).string(),
        [&](const std::function<Status(const void*, size_t)>& sink) { return w.write(sink); }));
    if (fail_point("export.write")) return io_error("export.write: failed by SPILLWAY_FAIL_POINTS");
    return write_file_atomic((fs::path(tmp) / kModelfileName).string(),
                             ollama_modelfile(result.vocab));
  });
  if (!st.ok()) return st;  // write_export_folder names the folder
  return result;
}

}  // namespace spillway
