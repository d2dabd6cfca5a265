"""The problems of the sm100 first-use self-test (the gate is deep_gemm/selftest.py): small ragged problems run through
the runtime and compared with a dequantised FP32 reference. Registered with the gate when deep_gemm is imported; the
gate runs them the first time a process launches an sm100 kernel (kind x scale path) on a device."""
from typing import List

import torch

from . import selftest
from .heuristics import KernelType
from .heuristics.common import ceil_div
from .heuristics.sm100 import SCALES_FP32, SCALES_UE8M0
from .runtime import Op, call_unplanned
from .scale_layout import ceil_to_ue8m0
from .testing import calc_diff, dequant_per_block, dequant_per_token
from .utils.math import per_block_cast_to_fp8, per_token_cast_to_fp8

# The variant each (kind, scale path) runs as.
_OPS = {(KernelType.NORMAL, SCALES_FP32): Op.DENSE, (KernelType.M_GROUPED_CONTIGUOUS, SCALES_FP32): Op.CONTIGUOUS,
        (KernelType.M_GROUPED_MASKED, SCALES_FP32): Op.MASKED, (KernelType.NORMAL, SCALES_UE8M0): Op.DENSE_UE8M0,
        (KernelType.M_GROUPED_CONTIGUOUS, SCALES_UE8M0): Op.CONTIGUOUS_UE8M0,
        (KernelType.M_GROUPED_MASKED, SCALES_UE8M0): Op.MASKED_UE8M0}

# calc_diff bounds: path (a) is the Hopper numerics (a correct kernel lands near 1e-6); path (b) is compared with a
# reference that uses the same rounded scales, and accumulates a whole tile's K in tensor memory (no promotion).
SELFTEST_BOUND = {SCALES_FP32: 1e-5, SCALES_UE8M0: 1e-4}
# (m, n, k) per problem: m ragged against the 128-row blocks, n a multiple of 8 ragged against BLOCK_N, k ragged
# against the 128-wide K blocks (and a multiple of 16, as TMA needs).
_SELFTEST_SHAPES = ((1, 72, 208), (130, 200, 576), (300, 136, 128))
_SELFTEST_GROUPS = 3


def _quantised(rows: int, k: int, gen, device, per_block: bool):
    x = torch.randn((rows, k), generator=gen, device=device, dtype=torch.float32).to(torch.bfloat16)
    return per_block_cast_to_fp8(x) if per_block else per_token_cast_to_fp8(x)


def run_selftest(kind: KernelType, scales: str, device: torch.device) -> List[selftest.CaseResult]:
    """Run the self-test problems of the sm100 kernel `kind` with `scales` on `device` through the runtime (no plan
    of theirs stays cached); one result per problem: calc_diff against the dequantised FP32 reference (with the
    rounded scales on path (b)), and whether every required element was written and nothing else."""
    gen = torch.Generator(device=device).manual_seed(19)
    applied = ceil_to_ue8m0 if scales == SCALES_UE8M0 else (lambda s: s)
    results = []
    for m, n, k in _SELFTEST_SHAPES:
        groups = 1 if kind == KernelType.NORMAL else _SELFTEST_GROUPS
        bs = [_quantised(n, k, gen, device, True) for _ in range(groups)]
        deq_b = [dequant_per_block(x, applied(s)) for x, s in bs]
        problem = f"{kind.value} m={m} n={n} k={k}"
        if kind == KernelType.M_GROUPED_MASKED:
            As = [_quantised(m, k, gen, device, False) for _ in range(groups)]
            a, sa = torch.stack([x for x, _ in As]), torch.stack([s for _, s in As])
            b, sb = torch.stack([x for x, _ in bs]), torch.stack([s for _, s in bs])
            masked_m = torch.tensor([m, max(m // 2, 1), 0][:groups], dtype=torch.int32, device=device)
            out = torch.full((groups, m, n), float("nan"), dtype=torch.bfloat16, device=device)
            call_unplanned(_OPS[kind, scales], (a, sa), (b, sb), out, masked_m, m)
            valid = torch.arange(m, device=device).view(1, m, 1) < masked_m.view(groups, 1, 1)
            ref = torch.stack([dequant_per_token(x, applied(s)) @ deq_b[g].t() for g, (x, s) in enumerate(As)])
            got = torch.where(valid, out.float(), ref)
            untouched = (torch.isnan(out.float()) | valid).all()  # rows >= masked_m still hold the NaN poison
        else:
            rows = m if kind == KernelType.NORMAL else 128 * ceil_div(m, 128) * groups
            a, sa = _quantised(rows, k, gen, device, False)
            out = torch.full((rows, n), float("nan"), dtype=torch.bfloat16, device=device)
            deq_a = dequant_per_token(a, applied(sa))
            if kind == KernelType.NORMAL:
                call_unplanned(_OPS[kind, scales], (a, sa), bs[0], out)
                ref = deq_a @ deq_b[0].t()
            else:
                b, sb = torch.stack([x for x, _ in bs]), torch.stack([s for _, s in bs])
                segment = rows // groups
                m_indices = torch.full((rows,), -1, dtype=torch.int32, device=device)
                ref = torch.zeros((rows, n), dtype=torch.float32, device=device)
                for g in range(groups):
                    used = slice(g * segment, g * segment + max(m - 17 * g, 1))
                    m_indices[used] = g
                    ref[used] = deq_a[used] @ deq_b[g].t()
                call_unplanned(_OPS[kind, scales], (a, sa), (b, sb), out, m_indices)
            got = out.float()
            untouched = None
        # NOTES: nothing above waits for the device (a hung kernel must not block this loop before the timeout).
        finished = torch.cuda.Event()
        finished.record()
        if not selftest.wait_for(finished.query):
            # NOTES: a hung kernel keeps the device busy; report it instead of blocking in a synchronize forever.
            results.append(selftest.CaseResult(problem, float("inf"), SELFTEST_BOUND[scales],
                                               f"did not finish within {selftest.TIMEOUT_S:g} s (hung)"))
            break
        if not bool(torch.isfinite(got).all()):
            results.append(selftest.CaseResult(problem, float("inf"), SELFTEST_BOUND[scales],
                                               "NaN/Inf or unwritten elements in the output"))
            continue
        results.append(selftest.CaseResult(problem, calc_diff(got, ref), SELFTEST_BOUND[scales],
                                           None if untouched is None or bool(untouched) else
                                           "wrote rows beyond masked_m"))
    return results


selftest.register(run_selftest)
