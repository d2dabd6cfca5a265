"""Stream-K's tail split (TileScheduler in include/deep_gemm/common/scheduler.cuh, mirrored by
heuristics.sm90.stream_k_split): which launches split, and that the pieces every CTA walks cover each tail tile's K
blocks exactly once, in part order, with distinct workspace slots and counters inside what the host allocates."""
import itertools

import pytest

from deep_gemm.heuristics import GemmProblem, KernelType, get_config
from deep_gemm.heuristics.common import ceil_div
from deep_gemm.heuristics.sm90 import (MIN_STREAM_K_BLOCKS, stream_k_capable, stream_k_split,
                                       stream_k_workspace)


def cta_pieces(cta, num_tiles, k_blocks, grid, split):
    """What TileScheduler::next hands CTA `cta` after the whole waves: (tail tile, k_begin, k_end, parts, part,
    slot), transcribed from the device code."""
    tail, blocks = split
    cursor = min(cta * blocks, tail * k_blocks)
    end = min(cursor + blocks, tail * k_blocks)
    pieces = []
    while cursor < end:
        j = cursor // k_blocks
        k_begin = cursor - j * k_blocks
        k_end = min(k_blocks, k_begin + (end - cursor))
        cursor += k_end - k_begin
        first = j * k_blocks // blocks
        parts = ((j + 1) * k_blocks - 1) // blocks - first + 1
        pieces.append((j, k_begin, k_end, parts, cta - first, j + cta))
    return pieces


@pytest.mark.parametrize("num_tiles,k_blocks,grid,stages", [
    (352, 56, 132, 4), (4096, 12, 132, 4), (363, 16, 132, 4), (440, 8, 132, 4), (570, 16, 132, 4),
    (133, 56, 132, 3), (140, 7, 132, 5), (10, 40, 132, 4), (20, 128, 132, 4), (264 + 20, 9, 132, 3)])
def test_tail_pieces_cover_each_tile_once(num_tiles, k_blocks, grid, stages):
    split = stream_k_split(num_tiles, k_blocks, grid, stages)
    assert split is not None
    tail, blocks = split
    assert tail == num_tiles % grid and blocks >= MIN_STREAM_K_BLOCKS and 4 * blocks <= 3 * k_blocks
    step = stages if k_blocks % stages == 0 else 1
    covered = {j: [] for j in range(tail)}
    slots = set()
    for cta in range(grid):
        for j, k_begin, k_end, parts, part, slot in cta_pieces(cta, num_tiles, k_blocks, grid, split):
            assert k_begin % step == 0 and k_end % step == 0 or k_end == k_blocks
            covered[j].append((part, k_begin, k_end, parts))
            assert slot not in slots and slot < 2 * grid
            slots.add(slot)
    for j, pieces in covered.items():
        pieces.sort()
        assert [p[0] for p in pieces] == list(range(len(pieces)))      # parts 0..P-1, each once
        assert all(p[3] == len(pieces) for p in pieces)                # every part knows the count
        assert pieces[0][1] == 0 and pieces[-1][2] == k_blocks         # the whole K range ...
        assert all(a[2] == b[1] for a, b in zip(pieces, pieces[1:]))   # ... in order, without overlap


def test_no_split_where_it_does_not_pay():
    assert stream_k_split(264, 56, 132, 4) is None     # whole waves
    assert stream_k_split(262, 56, 132, 4) is None     # a nearly full last wave: no gain
    assert stream_k_split(133, 4, 132, 4) is None      # K too short to split (at least 4 blocks per piece)
    assert stream_k_split(352, 56, 132, 4) == (88, 40)


def test_which_heuristic_picks_can_split():
    """Dense 4096x2112x7168 (128x192, 352 tiles = 2.67 waves) splits; multicast and promotion-overlap kernels do
    not (a multicast pair must walk the same K blocks; the overlapped K loop runs whole tiles)."""
    dense = get_config(GemmProblem(4096, 2112, 7168, 132, "sm_90a", KernelType.NORMAL, 1))
    assert stream_k_capable(dense, KernelType.NORMAL)
    assert stream_k_split(ceil_div(4096, dense.block_m) * ceil_div(2112, dense.block_n), 56, 132,
                          dense.num_stages) == (88, 40)
    big = get_config(GemmProblem(4096, 7168, 16384, 132, "sm_90a", KernelType.NORMAL, 1))
    assert big.num_multicast == 2 and not stream_k_capable(big, KernelType.NORMAL)
    small = get_config(GemmProblem(128, 4096, 7168, 132, "sm_90a", KernelType.NORMAL, 1))
    assert not stream_k_capable(small, KernelType.NORMAL)
    for kind in (KernelType.M_GROUPED_MASKED, KernelType.BATCHED, KernelType.M_GROUPED_PSUM):
        assert not stream_k_capable(dense, kind)
    counters, partials = stream_k_workspace(dense, 132)
    assert counters >= 132 * 2 * 4 and counters % 256 == 0 and partials == 2 * 132 * 128 * 192 * 4


@pytest.mark.parametrize("tiles,k_blocks,stages", itertools.product(range(133, 400, 37), (5, 8, 16, 56), (3, 4, 5)))
def test_split_arithmetic_sweep(tiles, k_blocks, stages):
    split = stream_k_split(tiles, k_blocks, 132, stages)
    if split is None:
        return
    seen = set()
    for cta in range(132):
        for piece in cta_pieces(cta, tiles, k_blocks, 132, split):
            assert piece[5] not in seen
            seen.add(piece[5])
            assert 0 <= piece[0] < split[0] < 132   # counter index inside the host's grid x 2 counters
