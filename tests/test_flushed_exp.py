"""exp with subnormal results flushed (kernelcheck/flushed_exp.py)."""

import torch

from kernelcheck.flushed_exp import exp_flushed_


def test_exp_flushed_is_exp_with_terms_under_fp32s_smallest_normal_zero():
    """exp itself above -87; exactly +0 at and below (where exp is subnormal or underflows,
    and slow); a NaN anywhere never changes how the other elements are computed."""
    above = float(torch.nextafter(torch.tensor(-87.0), torch.tensor(0.0)))  # next fp32 up
    x = torch.tensor([0.0, -10.0, -86.9, above, -87.0, -87.1, -95.0, -128.0, float("-inf")])
    got = exp_flushed_(x.clone())
    keep = x > -87.0
    assert torch.equal(got[keep], torch.exp(x[keep])) and got[3] > 0
    assert got[~keep].tolist() == [0.0] * 5 and not torch.signbit(got).any()
    with_nan = exp_flushed_(torch.cat([x, torch.tensor([float("nan")])]))
    assert torch.equal(with_nan[:-1], got) and with_nan[-1].isnan()
    plain = torch.tensor([-1.0, -2.0])
    assert torch.equal(exp_flushed_(plain.clone()), torch.exp(plain))
