target_sources(spillway_data PRIVATE data-placeholder.cpp)
