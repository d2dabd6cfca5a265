"""Randomized sweep over every public GEMM (tests/gemm_cases.py): random m (1..16384, primes), ragged n and k, group
counts and sizes, masked_m (0, full, over-full, random) and expected_m; guarded, poisoned outputs; each problem
checked against the dequantised FP32 and BF16 references and re-run for bitwise equality.

The normal GPU run takes a fast subset (DG_SWEEP default 40 fixed-seed problems + 10 fresh-seed ones). The full
sweep is `DG_SWEEP=1000 pytest tests/gpu/test_sweep_gpu.py` (1000 fixed-seed problems + 200 fresh-seed ones;
a failing fresh problem is reproduced with DG_SWEEP_FRESH_SEED=<seed from its test id>).
"""
import os
import random

import pytest
import torch

from gemm_cases import SPEC_BY_NAME, sweep_problems

pytestmark = pytest.mark.gpu

FIXED_SEED = 20261121
COUNT = int(os.environ.get("DG_SWEEP", "40"))
FRESH_COUNT = int(os.environ.get("DG_SWEEP_FRESH", str(max(10, COUNT // 5))))
FRESH_SEED = int(os.environ.get("DG_SWEEP_FRESH_SEED") or random.SystemRandom().randrange(1 << 31))  # see conftest

FIXED = sweep_problems(COUNT, FIXED_SEED)
FRESH = sweep_problems(FRESH_COUNT, FRESH_SEED)


def _run(name: str, problem: dict, seed: int) -> None:
    torch.backends.cuda.matmul.allow_tf32 = False
    case = SPEC_BY_NAME[name].build(problem, torch.device("cuda"), seed)
    case.run()
    case.check()
    first = case.guarded.bits()
    case.guarded.reset()
    case.run()
    case.check()
    assert torch.equal(first, case.guarded.bits()), f"{case.desc}: rerun is not bitwise identical"


@pytest.mark.parametrize("name,problem,seed", FIXED, ids=[f"fixed{i}-{p[0]}" for i, p in enumerate(FIXED)])
def test_fixed_seed_problem(name, problem, seed):
    _run(name, problem, seed)


@pytest.mark.parametrize("name,problem,seed", FRESH,
                         ids=[f"fresh{FRESH_SEED}-{i}-{p[0]}" for i, p in enumerate(FRESH)])
def test_fresh_seed_problem(name, problem, seed):
    _run(name, problem, seed)
