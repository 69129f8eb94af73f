"""shapelint: find the layer shapes that waste your GPU, before you train."""

__version__ = "0.1.0"
