"""What the user gives beside the runs: the options and their defaults (options.py,
config.py), the knowledge base (kb.py) and the gate's baseline (baseline_file.py)."""
