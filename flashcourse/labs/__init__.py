"""Checkers for the course's labs, one module per lab topic.

Each checker runs the learner's function on random inputs (irregular shapes,
causal masks, extreme values), compares it with the expected result, and prints
either the pass line or a specific hint. Stubs that still raise
NotImplementedError are reported as "not implemented yet", so a fresh lab
notebook runs top to bottom.
"""
