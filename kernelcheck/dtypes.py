"""Dtype names: the short names users type and the torch dtypes behind them."""

from __future__ import annotations

import torch

SHORT_NAMES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
ALIASES = {
    "fp32": "fp32",
    "float32": "fp32",
    "float": "fp32",
    "bf16": "bf16",
    "bfloat16": "bf16",
    "fp16": "fp16",
    "float16": "fp16",
    "half": "fp16",
}
FIXED_DTYPES = {
    "float64": torch.float64,
    "int64": torch.int64,
    "int32": torch.int32,
    "bool": torch.bool,
    **{name: SHORT_NAMES[short] for name, short in ALIASES.items()},
}


def canonical(name: str) -> str | None:
    """'bfloat16' -> 'bf16'; None when the name is not a floating case dtype."""
    return ALIASES.get(name.strip().lower())


def torch_dtype(short: str) -> torch.dtype:
    return SHORT_NAMES[short]


def short_name(dtype: torch.dtype) -> str:
    for short, dt in SHORT_NAMES.items():
        if dt == dtype:
            return short
    return str(dtype).removeprefix("torch.")
