# Datasets: readers, chat templates, packing, statistics, the resumable cursor and batches.
target_sources(spillway_data PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/chat-template.cpp
  ${CMAKE_CURRENT_LIST_DIR}/dataset-reader.cpp
  ${CMAKE_CURRENT_LIST_DIR}/dataset-stats.cpp
  ${CMAKE_CURRENT_LIST_DIR}/packing.cpp
  ${CMAKE_CURRENT_LIST_DIR}/dataset.cpp
  ${CMAKE_CURRENT_LIST_DIR}/dataset-options.cpp
  ${CMAKE_CURRENT_LIST_DIR}/data-cursor.cpp
  ${CMAKE_CURRENT_LIST_DIR}/batch-iterator.cpp
  ${CMAKE_CURRENT_LIST_DIR}/text-check.cpp)
