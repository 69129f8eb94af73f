"""Measure on a CUDA GPU: --verify, --verify --step and calibrate."""
