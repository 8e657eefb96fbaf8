"""A logp gold that counts its calls in a file: proof that candidates share one gold."""

import os

from kernelcheck.ops.logp import gold as logp_gold


def gold(logits, target):
    with open(os.environ["KC_GOLD_COUNT_FILE"], "a") as f:
        f.write(f"{tuple(logits.shape)}\n")
    return logp_gold(logits, target)
