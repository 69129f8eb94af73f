"""Load: build a target's model and example inputs on fake tensors (model.py, YAML, Hugging Face config)."""
