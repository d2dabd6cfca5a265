"""Which process of a node compiles: used by the families' first-sight precompile and by the warm-up."""
import os


def is_compile_leader() -> bool:
    """Whether this process compiles for its node: yes outside torch.distributed; under it, local rank 0
    (LOCAL_RANK, set by torchrun), or global rank 0 (RANK) of a WORLD_SIZE > 1 job that sets no LOCAL_RANK.
    Unreadable values count as a leader (compiling twice is safe, waiting for nobody is not)."""
    try:
        local = os.environ.get("LOCAL_RANK", "").strip()
        if local:
            return int(local) == 0
        if int(os.environ.get("WORLD_SIZE", "1").strip() or 1) > 1:
            return int(os.environ.get("RANK", "0").strip() or 0) == 0
    except ValueError:
        pass
    return True
