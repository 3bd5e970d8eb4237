"""The two front doors: the command line (cli.py, its entry.py) and the Python API (api.py).
Imports run one way through flows/: commands → job → outputs → (warehouse | inputs) → sources
→ storage, with transforms/ and sql/ below (tests/test_layering.py)."""
