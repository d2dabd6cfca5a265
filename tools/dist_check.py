"""Two (or more) torch.distributed ranks, one process per GPU (NCCL), sharing one kernel cache directory, each
running every public GEMM (tests/gemm_cases.py: each spec's small problem plus random sweep problems) on its own
device. Checks each result, compares the bits across ranks (same problem and seed on every rank), all-reduces a
failure count over NCCL and, on rank 0, checks the shared cache holds only complete entries.
Usage: DG_JIT_CACHE_DIR=<empty dir> python -m torch.distributed.run --nproc_per_node 2 tools/dist_check.py [N]"""
import hashlib
import os
import sys
import traceback

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
from gemm_cases import SPECS, SPEC_BY_NAME, sweep_problems  # noqa: E402


def main() -> None:
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local = int(os.environ.get("LOCAL_RANK", rank))
    torch.cuda.set_device(local)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    torch.backends.cuda.matmul.allow_tf32 = False
    problems = [(s.name, s.small, 0) for s in SPECS] + sweep_problems(count, 777)
    failures, digests = 0, []
    for name, problem, seed in problems:
        try:
            case = SPEC_BY_NAME[name].build(problem, torch.device("cuda", local), seed)
            case.run()
            case.check()
            digests.append(hashlib.sha256(case.guarded.bits().cpu().numpy().tobytes()).hexdigest()[:16])
        except Exception:
            failures += 1
            digests.append("failed")
            print(f"[rank {rank}] FAILED {name} {problem}\n{traceback.format_exc()}", flush=True)
    total = torch.tensor([failures], device="cuda")
    dist.all_reduce(total)
    gathered = [None] * world
    dist.all_gather_object(gathered, digests)
    same = all(g == gathered[0] for g in gathered)
    if rank == 0:
        root = os.path.join(os.environ["DG_JIT_CACHE_DIR"], "cache")
        names = sorted(os.listdir(root))
        leftovers = [n for n in names if n.startswith(".tmp.") or ".bad." in n]
        print(f"world={world} problems per rank={len(problems)} failures (all ranks)={int(total.item())} "
              f"bitwise equal across ranks={same} cache entries={len(names)} leftovers={len(leftovers)}", flush=True)
    dist.barrier()
    dist.destroy_process_group()
    sys.exit(0 if int(total.item()) == 0 and same else 1)


if __name__ == "__main__":
    main()
