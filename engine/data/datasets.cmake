# target_sources(spillway_data PRIVATE ...)
