// Removed once the data folder has real sources.
