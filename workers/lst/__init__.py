"""The Latin Square Task: puzzles, a small transformer, and a trainer that writes PE checkpoints.

``workers.lst.puzzles`` is numpy only; ``workers.lst.model`` and ``workers.lst.train`` need torch.
"""
