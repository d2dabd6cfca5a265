"""The GPU suite's problem builders and checkers (tests/gemm_cases.py), run on the CPU with a simulated kernel that
writes the reference: a right result passes, a wrong or missing element fails, also when the checks walk the
output in many small blocks (as they do for the largest problems on the GPU)."""
import pytest
import torch

import gemm_cases
from gemm_cases import SPECS


def _simulate(case) -> None:
    """Write what a correct kernel writes: the reference, rounded to the output's type (accumulated for FP32)."""
    ref = case.extra["ref"]
    if "simulate" in case.extra:  # a builder's own simulation (outputs besides `out`, split partial sums)
        case.extra["simulate"]()
    elif "result" in case.extra:  # the expected output (with any accumulation input added), where it is written
        written = case.extra.get("written")
        if written is None:
            case.out.copy_(case.extra["result"].to(case.out.dtype))
        else:
            case.out[written] = case.extra["result"][written].to(case.out.dtype)
    elif case.fn_name == "m_grouped_gemm_fp8_fp8_bf16_nt_masked":
        for e, c in enumerate(case.extra["counts"]):
            case.out[e, :c] = ref[e, :c].to(case.out.dtype)
    elif case.out.dtype == torch.float32:
        case.out.copy_(case.guarded.initial + ref)
    else:
        case.out.copy_(ref.to(case.out.dtype))


def _build(spec):
    case = spec.build(dict(spec.small), torch.device("cpu"), 7)
    assert "ref" in case.extra, f"{spec.name}: the builder must expose its reference for this test"
    return case


@pytest.mark.parametrize("block", [1 << 26, 7])
@pytest.mark.parametrize("spec", SPECS, ids=[s.name for s in SPECS])
def test_checker_accepts_the_reference_and_rejects_a_wrong_element(monkeypatch, spec, block):
    monkeypatch.setattr(gemm_cases, "CHECK_BLOCK_ELEMENTS", block)
    case = _build(spec)
    _simulate(case)
    case.guarded.check_guards()
    case.checker(case)
    # One large error in a written element must fail the check.
    flat = case.out.view(-1, case.out.shape[-1])
    written = (flat.view(case.guarded.buf.dtype) != -1).nonzero()
    r, c = (int(v) for v in written[len(written) // 2])
    flat[r, c] = float(flat[r, c]) * -4 + 1000
    with pytest.raises(AssertionError):
        case.checker(case)


def test_accumulated_check_allows_rounding_of_a_cancelling_sum_but_not_a_doubled_tile():
    """The FP32-accumulating checks allow the rounding measured on an H100 (3.8e-6 of sum |a_i b_i|: a 1 x 1 x 5872
    wgrad whose result, -4.98, cancelled terms of total magnitude 3860, was 1.5e-2 off), however small the result;
    a doubled element still fails."""
    # NOTES: seed 24 draws a sum that cancels as much (-5.08 from terms of magnitude 3800): the old tolerance, 1e-3 of
    # the result, rejected its rounding.
    problem, seed, cpu = dict(m=1, n=1, k=5872, sa_form="col_major", sb_form="rows"), 24, torch.device("cpu")
    case = gemm_cases.SPEC_BY_NAME["wgrad_gemm_fp8_fp8_fp32_nt"].build(problem, cpu, seed)
    gen = gemm_cases._gen(cpu, seed)  # the builder's operands, drawn again
    a_deq = gemm_cases.quant_rows(1, 5872, gen, cpu)[2]
    b_deq = gemm_cases.quant_rows(1, 5872, gen, cpu)[2]
    _simulate(case)
    case.out.add_(3.8e-6 * float((a_deq.double() * b_deq.double()).abs().sum()))
    case.checker(case)
    case.out.add_(case.extra["ref"])
    with pytest.raises(AssertionError):
        case.checker(case)
