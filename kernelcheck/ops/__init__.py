"""Gold functions (float64) and honest fp32 references of the built-in ops.

An op is a spec plus functions here (or anywhere importable): adding an op never
changes the core.
"""
