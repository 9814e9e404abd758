"""The CUDA kernels behind the engine: their output and log-sum-exp (LSE) against a float32 softmax of the
same q, k and v (`-m gpu`, on a CUDA device: benchmarks/gpu.sh), and, on any machine, the calls themselves
against this torch's operator schemas (on the meta device) and the memory-efficient kernel's bias alignment.

Which kernel runs: flash for float16 / bfloat16 without a mask, memory-efficient with a mask or in float32
(probe.engine.kernels). α is rebuilt as exp(s − LSE), so an LSE error is an α error of the same size.
"""

from __future__ import annotations

import math

import pytest
import torch

from probe.engine.kernels import BIAS_ALIGNMENT, _cuda_fused_attention, aligned_bias, fused_attention

SCALE = 0.25
# the engine's own error in reduced precision, measured on the CPU kernel (docs/engine.md): 5.4e-5, asserted
# at 2e-4 there; the same bound here, for both kernels and every dtype
LSE_TOL = 2e-4
OUTPUT_TOL = {torch.float32: 1e-4, torch.bfloat16: 2e-2, torch.float16: 4e-3}


def _qkv(n_batch, n_heads, n_query, n_key, dtype, device, dim=16):
    generator = torch.Generator().manual_seed(n_query * 1000 + n_key)
    q, k, v = (torch.randn(n_batch, n_heads, n, dim, generator=generator) * 1.5
               for n in (n_query, n_key, n_key))
    return q.to(device, dtype), k.to(device, dtype), v.to(device, dtype)


def _reference(q, k, v, mask, is_causal):
    """(output [batch head query dim] float32, lse [batch head query] float32) of the very (rounded) q, k, v;
    a fully masked row's LSE is 0 (the CPU kernel's convention)."""
    scores = SCALE * q.float() @ k.float().transpose(-1, -2)  # [batch head query key]
    if mask is not None:
        scores = scores + mask.float()
    if is_causal:
        above = torch.ones(scores.shape[-2:], dtype=torch.bool, device=scores.device).triu(1)
        scores = scores.masked_fill(above, -math.inf)
    lse = torch.logsumexp(scores, -1)
    alpha = torch.softmax(scores, -1).nan_to_num(0.0)
    return alpha @ v.float(), torch.where(lse.isfinite(), lse, 0.0)


def _padding_mask(n_batch, n_query, n_key, dtype, device, fully_masked_rows=0):
    """[batch 1 query key] additive: the second sequence's last keys are padding; its first rows may see no
    key at all."""
    mask = torch.zeros(n_batch, 1, n_query, n_key)
    mask[-1, :, :, n_key - 5:] = -math.inf
    mask[-1, :, :fully_masked_rows, :] = -math.inf
    return mask.to(device, dtype)


# --- on a CUDA device -------------------------------------------------------------------------------------


def _needs_cuda():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("is_causal", [True, False])
def test_flash_kernel_lse_equals_torch(dtype, is_causal, cuda_kernels_only):
    """No mask, half precision: the flash kernel. Odd lengths (37, 130) and 4 heads."""
    _needs_cuda()
    for n in (37, 130):
        q, k, v = _qkv(2, 4, n, n, dtype, "cuda")
        output, lse = fused_attention(q, k, v, None, is_causal, SCALE, 0.0)
        expected_output, expected_lse = _reference(q, k, v, None, is_causal)
        assert lse.dtype == torch.float32 and lse.shape == (2, 4, n)
        assert (lse - expected_lse).abs().max().item() <= LSE_TOL, (n, (lse - expected_lse).abs().max())
        assert (output.float() - expected_output).abs().max().item() <= OUTPUT_TOL[dtype]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("is_causal", [True, False])
def test_memory_efficient_kernel_lse_equals_torch(dtype, is_causal, cuda_kernels_only):
    """With a padding mask (or float32): the memory-efficient kernel, at key counts its alignment rule would
    refuse without aligned_bias (37, 130: not multiples of 4 / 8), with rows that see no key at all (LSE 0,
    α 0) when the mask alone decides."""
    _needs_cuda()
    for n in (37, 130):
        q, k, v = _qkv(2, 4, n, n, dtype, "cuda")
        mask = _padding_mask(2, n, n, dtype, "cuda", fully_masked_rows=0 if is_causal else 3)
        output, lse = fused_attention(q, k, v, mask, is_causal, SCALE, 0.0)
        expected_output, expected_lse = _reference(q, k, v, mask, is_causal)
        assert lse.dtype == torch.float32 and lse.shape == (2, 4, n)
        assert (lse - expected_lse).abs().max().item() <= LSE_TOL, (n, (lse - expected_lse).abs().max())
        seen = (mask[:, 0] == 0).any(-1)[:, None, :, None]  # [batch 1 query 1]: rows that see some key
        assert ((output.float() - expected_output).abs() * seen).max().item() <= OUTPUT_TOL[dtype]
        if not is_causal:
            assert lse[-1, :, :3].abs().max().item() == 0  # fully masked rows: 0, never ±inf or NaN
            alpha = torch.exp(SCALE * q[-1, :, :3].float() @ k[-1].float().transpose(-1, -2)
                              + mask[-1, :, :3].float() - lse[-1, :, :3, None])
            assert alpha.abs().max().item() == 0


@pytest.mark.gpu
def test_memory_efficient_kernel_without_a_mask_in_float32(cuda_kernels_only):
    """float32 without a mask (no flash kernel in float32): the memory-efficient kernel, bias None."""
    _needs_cuda()
    q, k, v = _qkv(1, 3, 33, 33, torch.float32, "cuda")
    output, lse = fused_attention(q, k, v, None, True, SCALE, 0.0)
    expected_output, expected_lse = _reference(q, k, v, None, True)
    assert (lse - expected_lse).abs().max().item() <= LSE_TOL
    assert (output - expected_output).abs().max().item() <= OUTPUT_TOL[torch.float32]


@pytest.mark.gpu
def test_the_fallback_guard_catches_a_refused_kernel(cuda_kernels_only):
    """Positive control of the guard the CUDA tests use: a call no kernel takes (float64: neither kernel has
    it) must fail the test, not pass through the blockwise fallback, which would give the same values."""
    _needs_cuda()
    q, k, v = _qkv(1, 2, 8, 8, torch.float64, "cuda")
    with pytest.raises((AssertionError, RuntimeError)):
        fused_attention(q, k, v, None, False, SCALE, 0.0)


# --- on any machine ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype,masked", [(torch.bfloat16, False), (torch.float16, False),
                                          (torch.float32, False), (torch.float32, True),
                                          (torch.bfloat16, True)])
def test_the_cuda_calls_match_this_torchs_operators(dtype, masked):
    """The flash and memory-efficient calls on the meta device: this torch's operator schemas accept their
    arguments, and the LSE comes back float32 [batch head query] (the memory-efficient kernel's padded query
    axis cropped) beside an output of the query's shape and dtype."""
    q = torch.empty(2, 4, 37, 16, device="meta", dtype=dtype)
    mask = torch.zeros(2, 1, 37, 37).to("meta", dtype) if masked else None
    output, lse = _cuda_fused_attention(q, q, q, mask, True, SCALE, 0.0)
    assert output.shape == q.shape and output.dtype == dtype
    assert lse.shape == (2, 4, 37) and lse.dtype == torch.float32


@pytest.mark.parametrize("n_key", [37, 48, 130])
def test_aligned_bias_has_the_kernels_strides_and_the_same_values(n_key):
    torch.manual_seed(0)
    mask = torch.randn(2, 1, 5, n_key)  # [batch 1 query key]
    aligned = aligned_bias(mask)
    assert torch.equal(aligned, mask) and aligned.stride(-1) == 1
    assert all(stride % BIAS_ALIGNMENT == 0 for stride in aligned.stride()[:-1])
    assert (aligned is mask) == (n_key % BIAS_ALIGNMENT == 0)  # a copy only where the strides need one
    expanded = aligned.expand(2, 4, 5, n_key)  # as the kernel gets it: [batch head query key]
    assert all(stride % BIAS_ALIGNMENT == 0 for stride in expanded.stride()[:-1])
