"""Ahead-of-time warm-up: compile into the disk cache exactly the kernels the runtime will load for a set of GEMM
shapes or a model description, in parallel processes, so that no call of a serving or training job waits for a compile.

The kernel lists come from the kernel families the runtime's registry dispatches each variant to (`Family.kernels`,
built on the functions their own calls use).

Several ranks on one node (torch.distributed): only the node's compile leader (`is_compile_leader`) spawns compile
workers. The other ranks spawn none: they watch the disk cache fill, and once it stops filling (the leader is done, or
has been idle for `leader_timeout_s`) they build whatever is still missing themselves, one kernel at a time. The
cache's per-kernel lock makes such a build wait for a compile the leader is running and then load its result, so
every rank ends with every kernel cached and each kernel is compiled once on the node.
"""
import sys
import threading
import time
from dataclasses import dataclass
from typing import Dict, Iterable, List, Optional, Sequence, Tuple, Union

import torch

from . import jit
from .device import get_num_sms
from .heuristics.common import ceil_div
from .jit.leader import is_compile_leader
from .jit.parallel import missing
from .runtime import VARIANTS, families_of
from .utils.layout import get_mk_alignment_for_contiguous_layout

__all__ = ["warmup", "MoEModel", "MODELS", "model_shapes", "is_compile_leader", "FAMILIES", "WARMUP_FIELDS"]

# The variants a warm-up takes shapes of (the registry's, deep_gemm.runtime.VARIANTS), by name.
_WARMUP = tuple(v for v in VARIANTS if v.warmup_fields is not None)
_BY_NAME = {v.name: v for v in _WARMUP}
FAMILIES = tuple(_BY_NAME)
# The fields of one warm-up shape of each (the CLI builds the shapes of a variant it has no rule of its own for).
WARMUP_FIELDS = {name: v.warmup_fields for name, v in _BY_NAME.items()}
ARCHS = ("sm_90a", "sm_100a")
DEFAULT_NUM_SMS = 132  # H100 / H200 SXM
DEFAULT_NUM_SMS_SM100 = 148  # B200
_POLL_S = 0.5


@dataclass(frozen=True)
class MoEModel:
    """A DeepSeek-V3-like MoE transformer: MLA attention, a few dense MLP layers, MoE layers of routed experts plus
    shared experts. Only what sets GEMM shapes."""
    hidden: int
    moe_intermediate: int        # per routed (and shared) expert
    num_experts: int
    top_k: int
    num_shared_experts: int
    dense_intermediate: int      # the dense MLP layers' (0: none)
    q_lora_rank: int
    kv_lora_rank: int
    num_heads: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int


MODELS = {"deepseek-v3": MoEModel(hidden=7168, moe_intermediate=2048, num_experts=256, top_k=8, num_shared_experts=1,
                                  dense_intermediate=18432, q_lora_rank=1536, kv_lora_rank=512, num_heads=128,
                                  qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128)}


def _split(value: int, tp: int, what: str) -> int:
    if value % tp:
        raise ValueError(f"tp={tp} must divide the {what} ({value})")
    return value // tp


def model_shapes(model: MoEModel, tp: int = 1, max_tokens: int = 4096, training: bool = False) -> Dict[str, list]:
    """The GEMM shapes of `model` on one rank of a `tp`-way group, per family (the `warmup` arguments):

    - attention (MLA): the fused q_a/kv_a projection (n = q_lora + kv_lora + rope, replicated), q_b, kv_b and o
      (heads split over tp);
    - dense MLP layers and shared experts: gate+up and down, intermediate split over tp;
    - routed experts, expert-parallel over the tp ranks (num_experts / tp local experts, whole intermediate):
      contiguous for prefill (any m) and masked for decode, whose expected_m (the mean rows per local expert) takes
      every value up to ceil(max_tokens * tp * top_k / num_experts), max_tokens being one rank's decode batch;
    - with `training`: the data gradients (dense / contiguous with n and k swapped), and the weight gradients
      (wgrad with m, n = the weight's rows and columns; k-grouped for the routed experts)."""
    _positive(tp=tp, max_tokens=max_tokens)
    m = model
    h = m.hidden
    heads = _split(m.num_heads, tp, "number of heads")
    linears = [(m.q_lora_rank + m.kv_lora_rank + m.qk_rope_head_dim, h),
               (heads * (m.qk_nope_head_dim + m.qk_rope_head_dim), m.q_lora_rank),
               (heads * (m.qk_nope_head_dim + m.v_head_dim), m.kv_lora_rank),
               (h, heads * m.v_head_dim)]
    for inter, what in ((m.dense_intermediate, "dense intermediate size"),
                        (m.num_shared_experts * m.moe_intermediate, "shared experts' intermediate size")):
        if inter:
            inter = _split(inter, tp, what)
            linears += [(2 * inter, h), (h, inter)]
    groups = _split(m.num_experts, tp, "number of routed experts")
    experts = [(2 * m.moe_intermediate, h), (h, m.moe_intermediate)]
    expected_m = ceil_div(max_tokens * tp * m.top_k, m.num_experts)
    shapes = dict(dense=list(linears), contiguous=[(n, k, groups) for n, k in experts],
                  masked=[(n, k, groups, expected_m) for n, k in experts])
    if training:
        shapes["dense"] += [(k, n) for n, k in linears]
        shapes["contiguous"] += [(k, n, groups) for n, k in experts]
        shapes["wgrad"] = list(linears)
        shapes["k_grouped"] = [(n, k, groups) for n, k in experts]
    return shapes


def _positive(**values) -> None:
    for name, value in values.items():
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{name} must be an int, got {type(value).__name__}")
        if value <= 0:
            raise ValueError(f"{name} must be positive, got {value}")


def _expected_ms(value: Union[int, Sequence[int]], name: str) -> Tuple[int, ...]:
    """An int: every expected_m from 1 to it; a sequence: those values."""
    if isinstance(value, (list, tuple, range)):
        for i, v in enumerate(value):
            _positive(**{f"{name}[{i}]": v})
        if not value:
            raise ValueError(f"{name} must not be empty")
        return tuple(value)
    _positive(**{name: value})
    return tuple(range(1, value + 1))


def _shape(item, family: str, fields: Tuple[str, ...]) -> tuple:
    if not isinstance(item, (list, tuple)) or len(item) != len(fields):
        raise ValueError(f"{family} shapes are ({', '.join(fields)}), got {item!r}")
    return tuple(item)


def _variant_sources(variant, item, ms: Optional[Tuple[int, ...]], num_sms: int, arch: str) -> List:
    """The kernels one warm-up shape of `variant` loads on `arch`: those of every variant warmed up under its name
    (on sm_100, dense also warms dense_ue8m0 up, ...), from the families the runtime dispatches them to. The kernels
    of masked, psum and bmm shapes depend on their expected_m / m values, which replace `ms`."""
    fields = variant.warmup_fields
    shape = dict(zip(fields, _shape(item, variant.name, fields)))
    if fields[-1] in ("expected_m", "m") and "k" in fields:
        ms = _expected_ms(shape.pop(fields[-1]), fields[-1])
    _positive(**shape)
    alignment = get_mk_alignment_for_contiguous_layout()
    sources = []
    for v in VARIANTS:
        if v.name == variant.name or v.warmup_as == variant.name:
            for family in families_of(v.name, arch):
                sources += family.kernels(v.name, shape, ms, num_sms, arch, alignment)
    if not sources:
        served = [v.name for v in _WARMUP if families_of(v.name, arch)]
        raise ValueError(f"no {arch} kernel for the {variant.name} family ({arch}: {', '.join(served)})")
    return sources


def _family_sources(family: str, item, ms: Optional[Tuple[int, ...]], num_sms: int, arch: str) -> List:
    """The kernels one shape of `family` (a variant name) loads (see `warmup`); errors name the shape."""
    try:
        return _variant_sources(_BY_NAME[family], item, ms, num_sms, arch)
    except (TypeError, ValueError) as e:
        raise type(e)(f"{family} shape {item!r}: {e}") from None


class _Progress:
    """A tqdm bar when tqdm is installed (pip install deepgemm-sm90[progress]), else a plain line every 10%."""

    def __init__(self, total: int, done: int, enabled: bool, what: str):
        self.total, self.done, self.enabled, self.what = total, done, enabled, what
        self.bar = None
        if enabled:
            try:
                from tqdm import tqdm
                self.bar = tqdm(total=total, initial=done, desc=what, unit="kernel", file=sys.stderr)
            except ImportError:
                self._line()
        self._last_line = done

    def update(self, done: int) -> None:
        done = min(done, self.total)
        if done > self.done and self.bar is not None:
            self.bar.update(done - self.done)
        self.done = done
        if self.enabled and self.bar is None and (done - self._last_line >= max(1, self.total // 10)
                                                  or done == self.total):
            self._last_line = done
            self._line()

    def _line(self) -> None:
        print(f"{self.what}: {self.done}/{self.total} kernels", file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _watch(todo: list, arch: str, progress: _Progress, stop: threading.Event, base: int) -> None:
    """Update `progress` from the disk cache until `stop` is set."""
    while not stop.wait(_POLL_S):
        progress.update(base + len(todo) - len(missing(todo, arch)))


def _mark_complete_groups(shapes: dict, num_sms: int, arch: str) -> None:
    """Give each shape's family its first-sight precompile (`Family.precompile`), which finds every kernel built by
    now and records the shape's group as complete: a serving process's first call of that shape then checks the
    group's cache entries instead of enumerating every variant the heuristic can pick."""
    for name, items in shapes.items():
        fields = _BY_NAME[name].warmup_fields
        for family in families_of(name, arch):
            if family.precompile is not None:
                for item in items:
                    family.precompile(name, dict(zip(fields, item)), num_sms, arch)


def warmup(dense: Iterable = (), contiguous: Iterable = (), masked: Iterable = (), psum: Iterable = (),
           wgrad: Iterable = (), k_grouped: Iterable = (), bmm: Iterable = (), *, model: Optional[MoEModel] = None,
           tp: int = 1, max_tokens: int = 4096, training: bool = False, families: Optional[Iterable[str]] = None,
           ms: Optional[Iterable[int]] = None, num_sms: Optional[int] = None, arch: str = "sm_90a", jobs: int = 0,
           progress: bool = True, leader: Optional[bool] = None, leader_timeout_s: float = 300.0,
           **shapes_of: Iterable) -> dict:
    """Compile into the disk cache (DG_JIT_CACHE_DIR) every kernel that calls of these shapes will load.

    Shapes per family (the runtime's kernel depends on nothing else):
      dense (n, k); contiguous (n, k, num_groups): every kernel any m can pick, which is also what the first call
        of an (n, k) precompiles (restrict to the kernels of given row counts with `ms`);
      masked / psum (n, k, num_groups, expected_m): expected_m a list of values, or an int: every value 1..int;
      wgrad (m, n): the weight gradient's output [m, n]; k_grouped (m, n, num_groups);
      bmm (n, k, num_batches, m): the batched GEMM's rows per batch m, a list or an int (every value 1..int);
      any other variant in `FAMILIES`, by its name as a keyword: shapes of its `Variant.warmup_fields`.
    `model` (e.g. MODELS["deepseek-v3"]) adds `model_shapes(model, tp, max_tokens, training)`; `families` keeps
    only those families. num_sms: the SMs the calls will use (default: the current GPU's count, or its
    `set_num_sms` cap; 132 without a GPU). jobs: compile processes (default: CPUs, at most 16).
    `leader`: whether this process compiles for its node (default: `is_compile_leader()`, see the module doc).

    Returns {"kernels": distinct kernels, "compiled": compiles this process (and its workers) ran, "cached": found
    in the cache at the start, "waited": built meanwhile by another process, "seconds", "failures": [{"kernel",
    "error"}], "by_family": {family: kernels}, "arch", "num_sms", "leader"}."""
    start = time.perf_counter()
    if arch not in ARCHS:
        raise ValueError(f"arch must be one of {ARCHS} (the arches with kernels), got {arch!r}")
    if num_sms is None:
        num_sms = get_num_sms() if torch.cuda.is_available() else \
            (DEFAULT_NUM_SMS_SM100 if arch == "sm_100a" else DEFAULT_NUM_SMS)
    _positive(num_sms=num_sms)
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 0:
        raise ValueError(f"jobs must be an int >= 0 (0: one per CPU, at most 16), got {jobs!r}")
    unknown = sorted(set(shapes_of) - set(FAMILIES))
    if unknown:
        raise TypeError(f"warmup() got unexpected keyword arguments {unknown} (the variants with warm-up shapes: "
                        f"{FAMILIES})")
    given = dict(shapes_of, dense=dense, contiguous=contiguous, masked=masked, psum=psum, wgrad=wgrad,
                 k_grouped=k_grouped, bmm=bmm)
    shapes = {name: list(given.get(name, ())) for name in FAMILIES}
    if model is not None:
        if not isinstance(model, MoEModel):
            raise TypeError(f"model must be a deep_gemm.warmup.MoEModel, got {type(model).__name__}")
        for family, items in model_shapes(model, tp, max_tokens, training).items():
            shapes[family] += items
    if families is not None:
        families = list(families)
        unknown = [f for f in families if f not in FAMILIES]
        if unknown:
            raise ValueError(f"families must be among {FAMILIES}, got {unknown}")
        shapes = {f: v if f in families else [] for f, v in shapes.items()}
    if ms is not None:
        ms = tuple(ms)
        for i, m in enumerate(ms):
            _positive(**{f"ms[{i}]": m})
    sources, by_family = {}, {}
    for family, items in shapes.items():
        names = set()
        for item in items:
            for s in _family_sources(family, item, ms, num_sms, arch):
                names.add(s.instantiation())
                sources.setdefault(s.instantiation(), s)
        if names:
            by_family[family] = len(names)
    sources = list(sources.values())
    leader = is_compile_leader() if leader is None else leader

    before = jit.stats()
    todo = missing(sources, arch)
    cached = len(sources) - len(todo)
    bar = _Progress(len(sources), cached, progress and bool(todo), "deep_gemm warmup")
    try:
        if leader:
            stop = threading.Event()
            watcher = threading.Thread(target=_watch, args=(todo, arch, bar, stop, cached), daemon=True)
            watcher.start()
            try:
                jit.build_many(todo, arch, jobs)
            finally:
                stop.set()
                watcher.join()
            left = missing(todo, arch)
        else:
            left, last_change = todo, time.monotonic()
            while left and time.monotonic() - last_change < leader_timeout_s:
                time.sleep(_POLL_S)
                now_left = missing(left, arch)
                if len(now_left) < len(left):
                    last_change = time.monotonic()
                left = now_left
                bar.update(len(sources) - len(left))
        # Built here, one at a time: a leader's failures (to get their errors), a follower's leftovers (waiting on
        # the key's lock for a compile still running elsewhere).
        failures = []
        for s in left:
            try:
                jit.build(s, arch)
            except Exception as e:  # report every failure, keep building the others
                failures.append(dict(kernel=s.instantiation(), error=f"{type(e).__name__}: {e}"))
            bar.update(bar.done + 1)
        if not failures and ms is None and leader:
            _mark_complete_groups(shapes, num_sms, arch)
    finally:
        bar.close()
    compiled = jit.stats()["compiled"] - before["compiled"]
    return dict(kernels=len(sources), compiled=compiled, cached=cached,
                waited=max(0, len(sources) - cached - compiled - len(failures)), seconds=time.perf_counter() - start,
                failures=failures, by_family=by_family, arch=arch, num_sms=num_sms, leader=leader)
