"""The application: command line, Python API, configuration, cache, workers, isolation, outputs."""
