// How a Hugging Face decoder maps onto llama.cpp's GGUF: the architecture name, the
// hyperparameter keys, each tensor's GGUF name and the transformation its values need, exactly as
// llama.cpp's convert_hf_to_gguf.py writes them (its conversion/llama.py, qwen.py, gemma.py,
// phi.py and base.py's TextModel.set_gguf_parameters; tensor names from gguf-py's
// tensor_mapping.py and constants.py, which src/llama-arch.cpp reads back).
//
// Families, keyed on config.json's architecture: LlamaForCausalLM and MistralForCausalLM ->
// "llama" (q/k rows permuted from Hugging Face's rotate-half RoPE layout to llama.cpp's
// interleaved one), Qwen2ForCausalLM -> "qwen2", Qwen3ForCausalLM -> "qwen3" (attn_q_norm,
// attn_k_norm), Gemma3ForCausalLM -> "gemma3" (every norm weight + 1: Gemma's RMSNorm scales by
// 1 + w, llama.cpp's by w; post_attention_norm, ffn_norm = pre_feedforward, post_ffw_norm),
// Phi3ForCausalLM -> "phi3" (attn_qkv holds the fused qkv_proj, ffn_up the fused gate_up_proj).
//
// Pure functions of their arguments; thread-safe.
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "core/status.h"
#include "model/gguf-writer.h"

namespace spillway {

// llama.cpp's architecture for a Hugging Face one ("LlamaForCausalLM" -> "llama");
// kUnsupported naming the supported ones otherwise.
Result<std::string> gguf_architecture(const std::string& hf_architecture);

enum class GgufTransform {
  kNone,
  kRopePermute,  // convert's LlamaModel.permute over `permute_heads` heads (rows of q or k)
  kAddOne,       // Gemma's norm weights: w + 1
};

struct GgufTensorName {
  std::string name;  // "blk.3.attn_q.weight"
  GgufTransform transform = GgufTransform::kNone;
  int permute_heads = 0;
};

// The GGUF name of Hugging Face tensor `hf_name` in a model of architecture `arch` (gguf name)
// with hyperparameters `hparams` (config.json); kUnsupported names a tensor llama.cpp has no
// place for.
Result<GgufTensorName> gguf_tensor_name(const std::string& arch, const nlohmann::json& hparams,
                                        const std::string& hf_name);

// LlamaModel.permute: rows [n_head, 2, rows / n_head / 2] swapped to [n_head, rows / n_head / 2,
// 2], each row of `cols` values kept whole. `w` is [rows, cols] row-major (cols 1 for a bias).
std::vector<float> rope_permute(const std::vector<float>& w, int64_t rows, int64_t cols,
                                int n_head);

// Whether convert keeps a tensor in F32 whatever the file type: 1-D tensors and norms.
bool gguf_keeps_f32(const std::string& gguf_name, size_t n_dims);

// llama.cpp's file types (general.file_type, enum llama_ftype) for the types export writes.
enum class GgufFileType : uint32_t {
  kAllF32 = 0,
  kMostlyF16 = 1,
  kMostlyQ8_0 = 7,
  kMostlyBF16 = 32
};
GgmlType gguf_file_type_tensor_type(GgufFileType t);

// The hyperparameter keys ({arch}.context_length, ...) and general.file_type convert writes for
// `hparams` (config.json). kInvalidArgument names a field the family needs and `hparams` lacks.
Status set_gguf_hparams(const std::string& arch, const nlohmann::json& hparams,
                        GgufFileType file_type, GgufWriter& w);

// Tensors convert computes rather than copies (generate_extra_tensors): Llama 3's rope_freqs
// (rope_type "llama3"), Phi-3's rope_factors_long/short (LongRoPE). F32, 1-D.
struct GgufExtraTensor {
  std::string name;
  std::vector<float> values;
};
Result<std::vector<GgufExtraTensor>> gguf_extra_tensors(const std::string& arch,
                                                        const nlohmann::json& hparams,
                                                        GgufWriter& w);

}  // namespace spillway
