"""The Latin Square Task: puzzles, a small transformer, and a trainer that writes PE checkpoints.

``workers.analyses.positional.lst.puzzles`` is numpy only; ``workers.analyses.positional.lst.model`` and ``workers.analyses.positional.lst.train`` need torch.
"""
