"""The analyses: one folder per idea, each with its spec (``spec.py``, torch-free), its maths and its
section (docs/architecture.md). This package imports nothing itself, so the backend can read the
specs without loading torch."""
