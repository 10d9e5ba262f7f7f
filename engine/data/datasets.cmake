# Datasets: readers, chat templates, packing, statistics, the resumable cursor and batches.
target_sources(spillway_data PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/chat-template.cpp
  ${CMAKE_CURRENT_LIST_DIR}/chat-template-jinja.cpp
  ${CMAKE_CURRENT_LIST_DIR}/dataset-reader.cpp
  ${CMAKE_CURRENT_LIST_DIR}/dataset-stats.cpp
  ${CMAKE_CURRENT_LIST_DIR}/packing.cpp
  ${CMAKE_CURRENT_LIST_DIR}/dataset.cpp
  ${CMAKE_CURRENT_LIST_DIR}/dataset-options.cpp
  ${CMAKE_CURRENT_LIST_DIR}/data-cursor.cpp
  ${CMAKE_CURRENT_LIST_DIR}/batch-iterator.cpp
  ${CMAKE_CURRENT_LIST_DIR}/text-check.cpp)

# The model's own chat template is rendered by this script (chat-template-jinja.h), found from the
# executable's location: share/spillway/ of the build tree, as of the installed tree.
configure_file(${CMAKE_CURRENT_LIST_DIR}/chat_template.py
  ${CMAKE_BINARY_DIR}/share/spillway/chat_template.py COPYONLY)
install(FILES ${CMAKE_CURRENT_LIST_DIR}/chat_template.py
  DESTINATION ${CMAKE_INSTALL_DATADIR}/spillway COMPONENT spillway)
