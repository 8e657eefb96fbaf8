"""Drives stages 2-4 for each case: load the candidate, draw trials, run the checks
(``runner/case.py``), in isolated workers side by side (``execute.py``, ``schedule.py``).

Importing the package imports nothing heavy, so the command can start its workers before
torch loads (``runner/spares.py``).
"""
