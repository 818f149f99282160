"""headscope workers: the analysis core (``workers.analysis``, ``workers.models``) and the queue jobs."""
