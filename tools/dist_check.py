"""Two (or more) torch.distributed ranks sharing one kernel cache directory, each running every public GEMM
(tests/gemm_cases.py: each spec's small problem plus random sweep problems) on its own device: one process per GPU
over NCCL, or, with fewer GPUs than ranks, ranks sharing GPUs over gloo (the cache is what is tested then). Checks
each result, compares the bits across ranks (same problem and seed on every rank), sums failures and kernel
compiles over the ranks and, on rank 0, checks the shared cache holds only complete entries, each compiled exactly
once (started from an empty DG_JIT_CACHE_DIR, the summed compiles must equal the entries).
Usage (repo root):
  DG_JIT_CACHE_DIR=<empty dir> python -m torch.distributed.run --nproc_per_node 2 -m tools.dist_check [N]
(N random sweep problems per rank, default 20; --help works without a GPU)."""
import argparse
import hashlib
import os
import sys
import traceback

import torch
import torch.distributed as dist

import deep_gemm
from tests.gemm_cases import SPECS, SPEC_BY_NAME, sweep_problems


def _footprint_bytes(problem: dict) -> int:
    """A generous estimate of the device memory a problem's inputs, FP32 references and output take."""
    k, n = problem.get("k", max(problem.get("ks", [0]) + [0])), problem.get("n", 1)
    if "sizes" in problem:
        groups, rows = len(problem["sizes"]), sum((s + 127) // 128 * 128 for s in problem["sizes"])
    elif "ks" in problem:
        groups, rows, k = len(problem["ks"]), problem["m"], sum(problem["ks"])
    else:
        groups, rows = problem.get("groups", 1), problem.get("groups", 1) * problem.get("m_max", problem.get("m", 1))
    return 16 * (rows * k + groups * n * k + groups * rows * n)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__[__doc__.index("Usage"):],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("count", nargs="?", type=int, default=20, help="random sweep problems per rank")
    count = parser.parse_args().count
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local = int(os.environ.get("LOCAL_RANK", rank))
    own_gpu = torch.cuda.device_count() >= world  # NCCL refuses two ranks on one GPU
    device = torch.device("cuda", local if own_gpu else local % torch.cuda.device_count())
    torch.cuda.set_device(device)
    if own_gpu:
        dist.init_process_group("nccl", device_id=device)
    else:
        dist.init_process_group("gloo")
    counts_device = device if own_gpu else torch.device("cpu")
    torch.backends.cuda.matmul.allow_tf32 = False
    problems = [(s.name, s.small, 0) for s in SPECS] + sweep_problems(count, 777)
    if not own_gpu:
        # Ranks sharing a GPU share its memory: leave out sweep problems whose inputs and references could not fit
        # twice (the FP32 references of the largest grouped problems take tens of GB).
        budget = torch.cuda.get_device_properties(device).total_memory // (4 * world)
        problems = [p for p in problems if _footprint_bytes(p[1]) <= budget]
    failures, digests = 0, []
    for name, problem, seed in problems:
        try:
            case = SPEC_BY_NAME[name].build(problem, device, seed)
            case.run()
            case.check()
            digests.append(hashlib.sha256(case.guarded.bits().cpu().numpy().tobytes()).hexdigest()[:16])
        except Exception:
            failures += 1
            digests.append("failed")
            print(f"[rank {rank}] FAILED {name} {problem}\n{traceback.format_exc()}", flush=True)
    totals = torch.tensor([failures, deep_gemm.jit.stats()["compiled"]], device=counts_device)
    dist.all_reduce(totals)
    failed, compiled = (int(x) for x in totals.tolist())
    gathered = [None] * world
    dist.all_gather_object(gathered, digests)
    same = all(g == gathered[0] for g in gathered)
    if rank == 0:
        root = os.path.join(os.environ["DG_JIT_CACHE_DIR"], "cache")
        names = sorted(os.listdir(root))
        leftovers = [n for n in names if n.startswith(".tmp.") or ".bad." in n]
        complete = [n for n in names if os.path.isfile(os.path.join(root, n, "meta.json"))]
        print(f"world={world} backend={dist.get_backend()} problems per rank={len(problems)} failures (all ranks)="
              f"{failed} bitwise equal across ranks={same} cache entries={len(names)} complete={len(complete)} "
              f"compiles (all ranks)={compiled} leftovers={len(leftovers)}", flush=True)
    dist.barrier()
    dist.destroy_process_group()
    sys.exit(0 if failed == 0 and same else 1)


if __name__ == "__main__":
    main()
