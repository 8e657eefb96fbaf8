"""Errors that end a run before it starts, and the exit codes of the CLI."""

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_NOTHING_CHECKED = 5  # pytest's "no tests collected": a run that tested nothing
EXIT_SIGINT = 130
EXIT_SIGTERM = 143


class UsageError(Exception):
    """A bad flag, an unknown name or an unavailable device: exit 2, one line."""


class Interrupted(BaseException):
    """SIGINT or SIGTERM arrived: stop now, keep what completed (BaseException so that no
    ``except Exception`` in a candidate or a check swallows it)."""

    def __init__(self, signame: str):
        self.signame = signame
        super().__init__(signame)


class SpecError(UsageError):
    """A spec that cannot be used; the message names the file, the key and what was expected."""

    def __init__(self, source: object, key: str, problem: str):
        self.source = str(source)
        self.key = key
        self.problem = problem
        where = f"{self.source}: {key}" if key else self.source
        super().__init__(f"{where}: {problem}")
