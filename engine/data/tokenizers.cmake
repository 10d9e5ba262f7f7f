# Tokenizers: HF tokenizer.json BPE (normalizers, pre-tokenizers via PCRE2, added tokens, BPE
# model, decoders, post-processors) and tokenizer.model through libsentencepiece.
target_sources(spillway_data PRIVATE
  tokenizer.cpp
  tokenizer-added-vocab.cpp
  tokenizer-bpe.cpp
  tokenizer-config.cpp
  tokenizer-decoder.cpp
  tokenizer-json.cpp
  tokenizer-normalizer.cpp
  tokenizer-post-processor.cpp
  tokenizer-pretokenizer.cpp
  tokenizer-regex.cpp
  tokenizer-replace.cpp
  tokenizer-unicode.cpp
  sentencepiece-tokenizer.cpp
  gguf-vocab.cpp)

# ICU supplies the Unicode normal forms (NFC for Qwen2/Qwen3). Optional: without it the NFC
# normalizer passes text through unchanged and logs a warning at load.
pkg_check_modules(SPILLWAY_ICU QUIET IMPORTED_TARGET icu-uc)
if(SPILLWAY_ICU_FOUND)
  target_link_libraries(spillway_data PRIVATE PkgConfig::SPILLWAY_ICU)
  set_property(SOURCE ${CMAKE_CURRENT_SOURCE_DIR}/tokenizer-unicode.cpp APPEND PROPERTY
               COMPILE_DEFINITIONS SPILLWAY_HAVE_ICU=1)
else()
  message(WARNING "ICU (icu-uc) not found: tokenizer NFC/NFKC normalizers will be pass-through")
endif()
target_sources(spillway_data PRIVATE byte-tokenizer.cpp model-tokenizer.cpp)
