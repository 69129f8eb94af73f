"""The pipeline: load, capture, check, price and locate one target into a Result; the settings table."""
