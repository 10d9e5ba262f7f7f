# Tokenizer tests: golden ids from HF tokenizers, llama.cpp test vectors, libsentencepiece,
# behaviour and error cases on small synthetic tokenizer.json files.
spillway_add_test(tokenizer_tests
  SOURCES
    ${CMAKE_CURRENT_LIST_DIR}/tokenizer-golden-test.cpp
    ${CMAKE_CURRENT_LIST_DIR}/tokenizer-testvectors-test.cpp
    ${CMAKE_CURRENT_LIST_DIR}/tokenizer-sentencepiece-test.cpp
    ${CMAKE_CURRENT_LIST_DIR}/tokenizer-behavior-test.cpp
  LIBS spillway_data nlohmann_json::nlohmann_json)

# GGUF tokenizer metadata (data/gguf-vocab) as llama.cpp's converter writes it.
# GgufFamilyGoldenTest: Qwen3, Gemma 3 and Phi-3 against convert's output (tests/gguf/golden).
spillway_add_test(gguf_vocab_tests
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/gguf-vocab-test.cpp
    ${CMAKE_CURRENT_LIST_DIR}/gguf-family-golden-test.cpp
  LIBS spillway_data nlohmann_json::nlohmann_json)
target_compile_definitions(gguf_vocab_tests PRIVATE
  SPILLWAY_GGUF_GOLDEN_DIR="${PROJECT_SOURCE_DIR}/tests/gguf/golden")
