"""A fused logp + entropy op (two outputs), declared only in a spec: its gold and an honest
fused candidate, whose entropy (and its gradient) is not 0 on ignored rows: only logp's
contract says so."""

from __future__ import annotations

from kernelcheck.candidates.torch_entropy import entropy
from kernelcheck.candidates.torch_logp import logp
from kernelcheck.ops import entropy as entropy_op
from kernelcheck.ops import logp as logp_op


def gold(logits, target):
    return logp_op.gold(logits, target), entropy_op.gold(logits)


def fused(logits, target):
    return logp(logits, target), entropy(logits)
