"""kernelcheck: verify compute kernels against a float64 gold.

The pipeline, one package per stage: ``spec`` (TOML op specs) -> ``cases`` (the
dtype x shape grid and seeded inputs) -> ``candidates`` (the kernels under test) ->
``checks`` (pure verdicts) -> ``report`` (renderers). ``runner`` drives the stages and
``api`` is the library surface the CLI, the tests and the pytest plugin call. Importing
it changes nothing in the importer's process (``environment.py``).
"""

__version__ = "0.1.0"
