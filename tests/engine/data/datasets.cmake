# Dataset tests. The real-tokenizer cases need Tokenizer::load, which lives in tokenizer.cpp;
# until that file exists they compile out (and the fake byte tokenizer covers the logic).
set(_spw_dataset_test_defs)
if(EXISTS ${PROJECT_SOURCE_DIR}/engine/data/tokenizer.cpp)
  list(APPEND _spw_dataset_test_defs SPILLWAY_HAVE_TOKENIZER_LOAD=1)
endif()
spillway_add_test(dataset_tests
  SOURCES
    ${CMAKE_CURRENT_LIST_DIR}/dataset-reader-test.cpp
    ${CMAKE_CURRENT_LIST_DIR}/chat-template-test.cpp
    ${CMAKE_CURRENT_LIST_DIR}/packing-test.cpp
    ${CMAKE_CURRENT_LIST_DIR}/data-cursor-test.cpp
    ${CMAKE_CURRENT_LIST_DIR}/dataset-test.cpp
  LIBS spillway_data)
target_compile_definitions(dataset_tests PRIVATE ${_spw_dataset_test_defs})

# The model's own chat template against transformers (make_chat_expected.py wrote the cases).
spillway_add_test(chat_template_jinja_tests
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/chat-template-jinja-test.cpp
  LIBS spillway_data)
target_compile_definitions(chat_template_jinja_tests PRIVATE
  SPILLWAY_CHAT_EXPECTED="${CMAKE_CURRENT_LIST_DIR}/chat-template-expected.jsonl")
