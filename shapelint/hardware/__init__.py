"""GPU profiles: every hardware number, read from one YAML file per GPU, and their checks."""
