"""SASS of a compiled kernel: disassemble a cubin with cuobjdump and measure its main (K) loop. Pure Python, no GPU.

The main loop is the innermost natural loop whose body holds warpgroup MMAs (FP8 wgmma disassembles to `QGMMA`);
its cost is counted per K block of one math warp's instruction stream:
instructions in the body / K blocks the (unrolled) body covers, K blocks = MMAs / (MMAs per K block per warp).
A developer tool outside the package (the runtime never imports it), used by tests/jit/test_codegen_budget.py and
by hand from the repository root.

Usage: python -m tools.sass --family dense --m 4096 --n 7168 --k 16384 [--block-m 256 --block-n 128]
"""
import argparse
import re
import sys
from collections import Counter
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Set, Tuple

from deep_gemm.families import sm90_fp8_gemm_1d2d, sm90_fp8_wgrad_1d1d
from deep_gemm.heuristics import GemmProblem, KernelType, get_config
from deep_gemm.heuristics.common import GemmConfig
from deep_gemm.heuristics.sm90 import build_sm90_config, num_math_threads
from deep_gemm.heuristics.sm90_wgrad import build_wgrad_config, get_wgrad_config, group_capacity
from deep_gemm.jit.compiler import NVRTCCompiler
from deep_gemm.jit.disasm import find_cuobjdump, sass_text

# Warpgroup MMA opcodes (wgmma.mma_async): QGMMA = FP8 inputs, HGMMA = 16-bit inputs.
MMA_OPCODES = ("QGMMA", "HGMMA")
# One wgmma covers 32 of K for FP8 inputs.
MMA_K = 32

_LINE = re.compile(r"/\*([0-9a-fA-F]+)\*/\s+([^;]*?)\s*;")
_FUNCTION = re.compile(r"^\s*Function\s*:\s*(\S+)")
_PREDICATE = re.compile(r"^@!?U?P(?:T|\d+)$")
_HEX = re.compile(r"0x([0-9a-fA-F]+)")
# Control transfers: direct branches and calls name their target; RET/EXIT/indirect jumps end a path.
_BRANCHES = ("BRA", "CALL", "JMP")
_ENDS = ("EXIT", "RET", "BRX", "JMX", "KILL")


@dataclass(frozen=True)
class Instruction:
    address: int
    text: str                # e.g. "@P1 BRA 0x320" (no trailing ';', no encoding)
    predicate: str           # "" or e.g. "@!P0"
    opcode: str              # full mnemonic, e.g. "SYNCS.PHASECHK.TRANS64.TRYWAIT"
    target: Optional[int]    # branch / call target address

    @property
    def base(self) -> str:
        """The mnemonic without modifiers: "SYNCS.PHASECHK.TRANS64.TRYWAIT" -> "SYNCS"."""
        return self.opcode.split(".", 1)[0]

    @property
    def unconditional(self) -> bool:
        return self.predicate in ("", "@PT", "@UPT")


def parse_sass(text: str) -> Dict[str, List[Instruction]]:
    """cuobjdump -sass output -> {function name: instructions in address order}. Text before any `Function :`
    line (e.g. a hand-written snippet) goes under the name ""."""
    functions: Dict[str, List[Instruction]] = {}
    current = functions.setdefault("", [])
    for line in text.splitlines():
        header = _FUNCTION.match(line)
        if header:
            current = functions.setdefault(header.group(1), [])
            continue
        match = _LINE.search(line)
        if not match or not match.group(2):
            continue
        address, body = int(match.group(1), 16), match.group(2)
        tokens = body.split()
        predicate = tokens[0] if _PREDICATE.match(tokens[0]) else ""
        opcode = tokens[1] if predicate else tokens[0]
        target = None
        if opcode.split(".", 1)[0] in _BRANCHES:
            # NOTES: BRA's target is its last hex operand (a predicate or convergence barrier may precede it).
            targets = _HEX.findall(body)
            target = int(targets[-1], 16) if targets else None
        current.append(Instruction(address, body, predicate, opcode, target))
    if not functions[""]:
        del functions[""]
    return functions


def disassemble(cubin: bytes, cuobjdump: Optional[str] = None) -> Dict[str, List[Instruction]]:
    """{mangled function name: instructions} of every kernel in `cubin`."""
    return parse_sass(sass_text(cubin, cuobjdump))


def pick_function(functions: Dict[str, List[Instruction]], name_contains: str = "") -> List[Instruction]:
    names = [n for n in functions if name_contains in n]
    if len(names) != 1:
        raise ValueError(f"expected one function matching {name_contains!r}, found {names or list(functions)}")
    return functions[names[0]]


# ---- Control flow ----

@dataclass(frozen=True)
class Loop:
    """A natural loop: `blocks` are indices of basic blocks; `header` dominates all of them."""
    header: int
    blocks: frozenset
    back_edges: Tuple[int, ...]   # source blocks of the edges into the header


class ControlFlow:
    """Basic blocks, dominators and natural loops of one function's instructions."""

    def __init__(self, instructions: Sequence[Instruction]):
        self.instructions = list(instructions)
        index = {ins.address: i for i, ins in enumerate(self.instructions)}
        leaders = {0}
        for i, ins in enumerate(self.instructions):
            if ins.target is not None and ins.target in index:
                leaders.add(index[ins.target])
            if ins.base in _BRANCHES + _ENDS and i + 1 < len(self.instructions):
                leaders.add(i + 1)
        starts = sorted(leaders)
        # Block b = instructions [starts[b], ends[b]).
        self.starts = starts
        self.ends = starts[1:] + [len(self.instructions)]
        block_of = {s: b for b, s in enumerate(starts)}
        self.succ: List[List[int]] = []
        for b, end in enumerate(self.ends):
            last = self.instructions[end - 1]
            out = []
            if last.target is not None and last.target in index:
                out.append(block_of[index[last.target]])
            falls_through = not (last.unconditional and last.base in ("BRA", "JMP") + _ENDS)
            if falls_through and end < len(self.instructions):
                out.append(b + 1)
            self.succ.append(out)
        self.pred: List[List[int]] = [[] for _ in starts]
        for b, out in enumerate(self.succ):
            for s in out:
                self.pred[s].append(b)
        self.idom = self._dominators()

    def _dominators(self) -> List[Optional[int]]:
        """Immediate dominators (Cooper, Harvey & Kennedy); None for the entry and unreachable blocks."""
        order, seen, stack = [], {0}, [(0, iter(self.succ[0]))]
        while stack:
            node, it = stack[-1]
            nxt = next((s for s in it if s not in seen), None)
            if nxt is None:
                order.append(node)
                stack.pop()
            else:
                seen.add(nxt)
                stack.append((nxt, iter(self.succ[nxt])))
        rpo = order[::-1]
        number = {b: i for i, b in enumerate(rpo)}
        idom: List[Optional[int]] = [None] * len(self.starts)
        idom[0] = 0
        changed = True
        while changed:
            changed = False
            for b in rpo[1:]:
                preds = [p for p in self.pred[b] if idom[p] is not None]
                new = preds[0]
                for p in preds[1:]:
                    a, c = p, new
                    while a != c:
                        while number[a] > number[c]:
                            a = idom[a]
                        while number[c] > number[a]:
                            c = idom[c]
                    new = a
                if idom[b] != new:
                    idom[b], changed = new, True
        idom[0] = None
        return idom

    def dominates(self, a: int, b: int) -> bool:
        while b is not None:
            if a == b:
                return True
            b = self.idom[b]
        return False

    def loops(self) -> List[Loop]:
        """Natural loops, one per header (back edges into one header are merged), in address order."""
        bodies: Dict[int, Set[int]] = {}
        latches: Dict[int, List[int]] = {}
        for b, out in enumerate(self.succ):
            if self.idom[b] is None and b != 0:
                continue  # unreachable
            for h in out:
                if self.dominates(h, b):
                    body = bodies.setdefault(h, {h})
                    latches.setdefault(h, []).append(b)
                    stack = [b]
                    while stack:
                        n = stack.pop()
                        if n not in body:
                            body.add(n)
                            stack += [p for p in self.pred[n] if self.idom[p] is not None or p == 0]
        return [Loop(h, frozenset(bodies[h]), tuple(sorted(latches[h]))) for h in sorted(bodies)]

    def block_instructions(self, b: int) -> List[Instruction]:
        return self.instructions[self.starts[b]:self.ends[b]]


# ---- Main-loop report ----

@dataclass(frozen=True)
class LoopReport:
    """One loop's steady-state cost. `body` = the loop's instructions laid out between its header and its last back
    edge (the path every iteration issues from); `num_cold` = the loop's out-of-line instructions placed elsewhere
    (e.g. the retry path of a barrier wait), which are not counted."""
    start: int                    # address of the header
    end: int                      # address of the last back edge
    body: Tuple[Instruction, ...]
    num_cold: int
    mmas_per_k_block: int

    @property
    def num_instructions(self) -> int:
        return len(self.body)

    @property
    def num_mma(self) -> int:
        return self.count(*MMA_OPCODES)

    @property
    def k_blocks(self) -> float:
        return self.num_mma / self.mmas_per_k_block

    @property
    def per_k_block(self) -> float:
        """Instructions per K block per math warp."""
        return self.num_instructions / self.k_blocks

    def count(self, *bases: str) -> int:
        """Instructions in the body whose opcode (without modifiers) is one of `bases`."""
        return sum(ins.base in bases for ins in self.body)

    def histogram(self, full: bool = False) -> Dict[str, float]:
        """Instructions per K block per math warp by opcode (without modifiers unless `full`), most frequent first."""
        counts = Counter(ins.opcode if full else ins.base for ins in self.body)
        return {op: n / self.k_blocks for op, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))}

    def summary(self) -> str:
        return (f"loop 0x{self.start:x}-0x{self.end:x}: {self.num_instructions} instructions, {self.num_mma} MMAs "
                f"= {self.k_blocks:g} K blocks x {self.mmas_per_k_block} MMAs; {self.per_k_block:.2f} instructions "
                f"per K block per math warp ({self.num_cold} out-of-line not counted)")

    def format(self, full: bool = False) -> str:
        lines = [self.summary()] + [f"  {op:<40} {n:8.2f}" for op, n in self.histogram(full).items()]
        return "\n".join(lines)


def mmas_per_k_block(config: GemmConfig, mma_k: int = MMA_K) -> int:
    """MMAs one math warp issues per K block: BLOCK_K / mma_k (32 for FP8, 16 for BF16) per 64-row sub-tile,
    `sub-tiles` per math warpgroup (the sm90 kernels: one warpgroup at BLOCK_M = 64, else two; BLOCK_M = 256 gives
    each two sub-tiles)."""
    sub_tiles = config.block_m // (64 * (num_math_threads(config.block_m) // 128))
    return config.block_k // mma_k * sub_tiles


def mma_loops(instructions: Sequence[Instruction], mmas_per_k_block: int) -> List[LoopReport]:
    """Every innermost loop holding MMAs (no loop with MMAs nested inside it), in address order: one per K loop
    the compiler emitted, e.g. one per RHS-scale straddle case."""
    if not instructions:
        return []
    flow = ControlFlow(instructions)

    def has_mma(loop: Loop) -> bool:
        return any(i.base in MMA_OPCODES for b in loop.blocks for i in flow.block_instructions(b))

    with_mma = [loop for loop in flow.loops() if has_mma(loop)]
    reports = []
    for loop in with_mma:
        if any(other is not loop and other.blocks < loop.blocks for other in with_mma):
            continue
        start = flow.starts[loop.header]
        end = max(flow.ends[b] - 1 for b in loop.back_edges)
        inside = sorted(b for b in loop.blocks if start <= flow.starts[b] <= end)
        body = tuple(i for b in inside for i in flow.block_instructions(b))
        cold = sum(flow.ends[b] - flow.starts[b] for b in loop.blocks) - len(body)
        reports.append(LoopReport(flow.instructions[start].address, flow.instructions[end].address, body, cold,
                                  mmas_per_k_block))
    return reports


def main_loop(instructions: Sequence[Instruction], mmas_per_k_block: int) -> LoopReport:
    """The main loop: of `mma_loops`, the one with the most MMAs, the first in address order on a tie (the K loops
    of the straddle cases are alike; a remainder loop, where there is one, has fewer MMAs)."""
    loops = mma_loops(instructions, mmas_per_k_block)
    if not loops:
        raise ValueError("no loop with warpgroup MMAs in this function")
    return max(loops, key=lambda r: (r.num_mma, -r.start))


def register_moves_problem(ptx: str, ptxas_log: str, num_threads: int) -> str:
    """Why a kernel's setmaxnreg moves cannot all complete ("" if they can). They move registers only inside the
    CTA's launch allocation (ptxas's count per thread, in steps of 8): what the producer warpgroup (128 threads)
    gives up with setmaxnreg.dec must cover what the other warpgroups take with setmaxnreg.inc, or their .inc waits
    forever. (A paged MQA logits kernel hung so: 640 threads at 96 registers, the producer at 40, four math
    warpgroups asking 112.)"""
    used = re.search(r"Used (\d+) registers", ptxas_log)
    if used is None:
        return "no 'Used N registers' in the ptxas log (compile with ptxas_verbose=True)"
    regs = (int(used.group(1)) + 7) // 8 * 8
    dec = {int(v) for v in re.findall(r"setmaxnreg\.dec\.sync\.aligned\.u32 (\d+);", ptx)}
    inc = {int(v) for v in re.findall(r"setmaxnreg\.inc\.sync\.aligned\.u32 (\d+);", ptx)}
    if len(dec) > 1 or len(inc) > 1:
        return f"several setmaxnreg targets: dec {sorted(dec)}, inc {sorted(inc)}"
    producer, math = (dec or {regs}).pop(), (inc or {regs}).pop()
    need = 128 * producer + (num_threads - 128) * math
    if need > regs * num_threads:
        return (f"128 x {producer} + {num_threads - 128} x {math} = {need} registers > the launch allocation "
                f"{num_threads} x {regs} = {regs * num_threads}")
    return ""


# ---- Command line ----

def _config(args) -> Tuple[object, GemmConfig]:
    """(KernelSource, config) for the command line's problem, the heuristic's pick unless a tile is forced."""
    if args.family == "wgrad":
        if args.block_m:
            config = build_wgrad_config(args.m, args.n, args.groups, args.block_m, args.block_n, args.num_sms,
                                        args.multicast, not args.multicast_on_b)
        else:
            config = get_wgrad_config(args.m, args.n, args.groups, args.num_sms)
        return sm90_fp8_wgrad_1d1d.kernel_source(args.n, config, group_capacity(args.groups)), config
    kind = {"dense": KernelType.NORMAL, "contiguous": KernelType.M_GROUPED_CONTIGUOUS,
            "masked": KernelType.M_GROUPED_MASKED}[args.family]
    if args.block_m:
        config = build_sm90_config(args.m, args.n, args.k, args.block_m, args.block_n, args.num_sms, args.multicast,
                                   not args.multicast_on_b, full_grid=kind == KernelType.M_GROUPED_MASKED)
    else:
        groups = 1 if kind == KernelType.NORMAL else args.groups
        config = get_config(GemmProblem(args.m, args.n, args.k, args.num_sms, kernel_type=kind, num_groups=groups))
    return sm90_fp8_gemm_1d2d.kernel_source(args.n, args.k, config, kind), config


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.sass",
                                     description="Compile one sm_90a kernel with NVRTC and print its main loop's "
                                                 "instructions per K block per math warp.")
    parser.add_argument("--family", choices=("dense", "contiguous", "masked", "wgrad"), default="dense")
    parser.add_argument("--m", type=int, required=True, help="rows (masked: expected rows per group)")
    parser.add_argument("--n", type=int, required=True)
    parser.add_argument("--k", type=int, default=4096, help="K (a run-time value for wgrad)")
    parser.add_argument("--groups", type=int, default=1)
    parser.add_argument("--num-sms", type=int, default=132)
    parser.add_argument("--block-m", type=int, default=0, help="force the tile (with --block-n)")
    parser.add_argument("--block-n", type=int, default=0)
    parser.add_argument("--multicast", type=int, default=1, help="with a forced tile: CTAs per cluster")
    parser.add_argument("--multicast-on-b", action="store_true", help="with a forced tile: multicast B, not A")
    parser.add_argument("--full-opcodes", action="store_true", help="histogram by opcode with its modifiers")
    args = parser.parse_args(argv)
    if bool(args.block_m) != bool(args.block_n):
        parser.error("--block-m and --block-n go together")

    tool = find_cuobjdump()
    if tool is None:
        print("cuobjdump not found: pip install nvidia-cuda-cuobjdump", file=sys.stderr)
        return 2
    source, config = _config(args)
    print(f"{source.name}: {config}")
    result = NVRTCCompiler().compile(source.code(), "sm_90a")
    instructions = pick_function(disassemble(result.cubin, tool), "_impl")
    loops = mma_loops(instructions, mmas_per_k_block(config))
    for loop in loops:
        print(loop.summary())
    best = main_loop(instructions, mmas_per_k_block(config))
    print(f"main loop (the first with the most MMAs): 0x{best.start:x}, R2UR {best.count('R2UR')}, "
          f"local memory {best.count('LDL', 'STL')}")
    print(best.format(args.full_opcodes))
    return 0


if __name__ == "__main__":
    sys.exit(main())
