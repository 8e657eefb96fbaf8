"""Gold, reference and candidates of the spec-only ``log_softmax`` op (tests only)."""

import torch


def gold(x):
    return torch.log_softmax(x, dim=-1)


def reference_fp32(x):
    return torch.log_softmax(x.float(), dim=-1).to(x.dtype)


def candidate(x):
    return torch.log_softmax(x.float(), dim=-1).to(x.dtype)


def lossy_candidate(x):
    """Computes in the input dtype and adds a bias: fails fp32 accuracy."""
    return torch.log_softmax(x, dim=-1) + 1e-3
