"""Float64 references and layout helpers shared by the native-kernel tests."""

from __future__ import annotations

import torch

DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def ref_logp(x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    """float64 logp of the (exactly decoded) logits; 0 where the target is out of range."""
    xd = x.double() if x.requires_grad else x.detach().double()
    vocab = xd.shape[-1]
    valid = (t >= 0) & (t < vocab)
    lsm = torch.log_softmax(xd, dim=-1)
    out = lsm.gather(-1, torch.where(valid, t, 0).unsqueeze(-1)).squeeze(-1)
    return torch.where(valid, out, torch.zeros_like(out))


def ref_grad(x: torch.Tensor, t: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """float64 g * (onehot - softmax) via autograd; all-zero rows for out-of-range targets."""
    xd = x.detach().double().requires_grad_(True)
    out = ref_logp(xd, t)
    (grad,) = torch.autograd.grad(out, xd, g.double())
    return grad


def bits(x: torch.Tensor) -> torch.Tensor:
    """Integer view of a float tensor, for bitwise comparisons."""
    x = x.detach().contiguous()
    return x.view({4: torch.int32, 2: torch.int16}[x.element_size()])


def make_targets(rows: int, vocab: int, gen: torch.Generator, bad: bool = True) -> torch.Tensor:
    t = torch.randint(0, vocab, (rows,), generator=gen)
    if bad and rows >= 4:
        t[1] = -100
        t[3] = vocab
    return t


def misaligned_copy(x: torch.Tensor, offset: int) -> torch.Tensor:
    """Same values as the contiguous 2-D ``x``, starting ``offset`` elements into a buffer."""
    flat = torch.empty(x.numel() + offset + 8, dtype=x.dtype, device=x.device)
    view = flat[offset : offset + x.numel()].view(x.shape)
    view.copy_(x)
    return view


def ulp_tol(dtype: torch.dtype) -> float:
    """Relative spacing of ``dtype`` (one unit in the last place at 1.0)."""
    return torch.finfo(dtype).eps
