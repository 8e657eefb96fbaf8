"""Lines for logs (kernelcheck/wrap.py): at most 80 columns, words and commands whole."""

from __future__ import annotations

import shlex

from kernelcheck.wrap import fill, fill_command, log_width

COMMAND = (
    "  repro: kernelcheck run --op logp --spec '/tmp/my specs/a b.toml' --candidate mine "
    "--device cpu --dtype fp32 --shape batch=8,vocab=257 --attr temperature=1.0 "
    "--checks forward_accuracy --seed 0 --distributions normal+large+masked+equal+heavy+lm"
)


def test_a_wrapped_command_is_the_same_command_and_keeps_flags_with_values():
    text = fill_command(COMMAND, 80)
    lines = text.splitlines()
    assert len(lines) > 1 and all(len(x) <= 80 for x in lines)
    assert all(x.endswith(" \\") for x in lines[:-1])
    assert shlex.split(text.replace("\\\n", "")) == shlex.split(COMMAND)
    assert not any(x.rstrip(" \\").endswith(("--spec", "--attr", "--seed")) for x in lines)
    assert fill_command(COMMAND, None) == COMMAND


def test_fill_never_breaks_a_word_and_indents_continuations():
    path = "/a/very/long/path/" + "x" * 90
    lines = fill(f"native cpu: available {path} (avx2 build in use)", 80).splitlines()
    assert path in [x.strip() for x in lines]  # longer than 80: whole, on its own line
    assert all(x.startswith("    ") for x in lines[1:])
    assert fill("short", 80) == "short" and fill("x " * 100, None) == "x " * 100


def test_log_width_is_80_at_most_off_a_terminal():
    assert log_width(False, 200) == 80 and log_width(False, 60) == 60
    assert log_width(True, 200) is None
