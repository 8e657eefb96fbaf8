"""Lines for logs: wrapped at 80 columns when the output is not a terminal.

A terminal wraps long lines itself (and copies them whole); a log viewer, a mail or a
file do not, so there every line the commands print is wrapped here. Words are never
broken: a token longer than the width (a path) stays whole on its own line. A shell
command is wrapped with backslash continuations, so that pasting its lines reruns it.
"""

from __future__ import annotations

import re
import textwrap

PIPE_WIDTH = 80  # not on a terminal: what a log viewer or a mail shows unwrapped
INDENT = "    "  # a wrapped line's continuation
_SHELL_WORD = re.compile(r"""(?:'[^']*'|"[^"]*"|[^\s'"])+""")  # quotes keep their spaces


def log_width(is_terminal: bool, width: int) -> int | None:
    """The width to wrap at: None on a terminal (it wraps by itself), else at most 80."""
    return None if is_terminal else min(width, PIPE_WIDTH)


def fill(text: str, width: int | None, indent: str = INDENT) -> str:
    """``text`` wrapped at ``width`` (None: unchanged), continuations indented."""
    if width is None or len(text) <= width:
        return text
    return "\n".join(
        textwrap.wrap(
            text,
            width=max(width, 40),
            subsequent_indent=indent,
            break_long_words=False,
            break_on_hyphens=False,
        )
        or [""]
    )


def fill_command(text: str, width: int | None, indent: str = INDENT + "  ") -> str:
    """A line holding a shell command, wrapped between words (never inside quotes, nor
    between a flag and its value) with a backslash at each break: the pasted lines are
    the same command."""
    if width is None or len(text) <= width:
        return text
    width = max(width, 40)
    lines: list[str] = []
    line = text[: len(text) - len(text.lstrip())]  # the line's own indent stays
    for word in _units(_SHELL_WORD.findall(text)):
        if line.strip() and len(line) + 1 + len(word) + 2 > width:
            lines.append(line + " \\")
            line = indent + word
        else:
            line = f"{line} {word}" if line.strip() else line + word
    lines.append(line)
    return "\n".join(lines)


def _units(words: list[str]) -> list[str]:
    """``--flag value`` pairs as one unit: a break never parts a flag from its value."""
    out: list[str] = []
    for word in words:
        if out and out[-1].startswith("--") and " " not in out[-1] and not word.startswith("-"):
            out[-1] += " " + word
        else:
            out.append(word)
    return out
