"""``kernelcheck`` and ``python -m kernelcheck``: the command's own process settings
(``kernelcheck/environment.py``), made before torch loads, then the CLI."""


def main() -> None:
    import sys

    from kernelcheck.environment import set_command_defaults

    set_command_defaults()
    from kernelcheck.runner import spares  # imports no torch

    spares.prestart(spares.wanted(sys.argv[1:]))  # workers import torch while we do
    from kernelcheck.cli import entry

    entry()


if __name__ == "__main__":
    main()
