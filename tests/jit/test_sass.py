"""SASS parsing and main-loop detection (tools/sass.py) on hand-written cuobjdump output, no NVRTC needed."""
import pytest

from deep_gemm.heuristics.sm90 import build_sm90_config
from deep_gemm.heuristics.sm90_wgrad import build_wgrad_config
from tools import sass

# A tile loop (0x20) around two K loops: 0x30 (4 QGMMAs, with an R2UR, a barrier wait whose retry path sits out of
# line at 0x190 and re-enters the body at 0x50) and 0x110 (2 QGMMAs, a remainder); the kernel ends in EXIT and the
# usual unreachable self-branch. Format of `cuobjdump -sass`: each instruction followed by an encoding-only line.
SNIPPET = """
	code for sm_90a
		Function : tiny_kernel
	.headerflags	@"EF_CUDA_ACCELERATORS EF_CUDA_SM90 EF_CUDA_VIRTUAL_SM(EF_CUDA_SM90)"
        /*0000*/                   S2R R0, SR_TID.X ;                                 /* 0x0000000000007919 */
                                                                                      /* 0x000e6e0000002100 */
        /*0010*/                   MOV R2, RZ ;                                       /* 0x000000ff00027202 */
                                                                                      /* 0x000fe20000000f00 */
        /*0020*/                   IADD3 R2, R2, 0x1, RZ ;                            /* 0x0000000102027810 */
        /*0030*/                   SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [UR4], R3 ;     /* 0x00000003ff0075a7 */
        /*0040*/              @!P0 BRA 0x190 ;                                        /* 0x0000000000508947 */
        /*0050*/                   R2UR UR6, R4 ;                                     /* 0x00000000040672ca */
        /*0060*/                   WARPGROUP.ARRIVE ;                                 /* 0x00000000000079cd */
        /*0070*/                   QGMMA.64x128x32.F32.E4M3.E4M3 R24, gdesc[UR4], R24 ;
        /*0080*/                   QGMMA.64x128x32.F32.E4M3.E4M3 R24, gdesc[UR6], R24, gsb0 ;
        /*0090*/                   WARPGROUP.DEPBAR.LE gsb0, 0x0 ;
        /*00a0*/                   FFMA R8, R24, R5, R8 ;
        /*00b0*/                   FFMA R9, R25, R5, R9 ;
        /*00c0*/                   QGMMA.64x128x32.F32.E4M3.E4M3 R24, gdesc[UR8], RZ, !UPT ;
        /*00d0*/                   QGMMA.64x128x32.F32.E4M3.E4M3 R24, gdesc[UR10], R24, gsb0 ;
        /*00e0*/                   WARPGROUP.DEPBAR.LE gsb0, 0x0 ;
        /*00f0*/                   ISETP.NE.AND P1, PT, R2, 0x10, PT ;
        /*0100*/               @P1 BRA 0x30 ;
        /*0110*/                   QGMMA.64x128x32.F32.E4M3.E4M3 R24, gdesc[UR4], R24 ;
        /*0120*/                   QGMMA.64x128x32.F32.E4M3.E4M3 R24, gdesc[UR6], R24, gsb0 ;
        /*0130*/                   ISETP.NE.AND P2, PT, R2, 0x20, PT ;
        /*0140*/               @P2 BRA 0x110 ;
        /*0150*/                   ISETP.NE.AND P3, PT, R2, 0x40, PT ;
        /*0160*/               @P3 BRA 0x20 ;
        /*0170*/                   EXIT ;
        /*0180*/                   BRA 0x180;
        /*0190*/                   SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [UR4], R3 ;
        /*01a0*/              @!P0 BRA 0x190 ;
        /*01b0*/                   BRA 0x50 ;
"""

MMAS_PER_K_BLOCK = 2


@pytest.fixture
def instructions():
    return sass.pick_function(sass.parse_sass(SNIPPET), "tiny")


def test_parse_instructions(instructions):
    assert len(instructions) == 28
    assert [i.address for i in instructions[:3]] == [0x0, 0x10, 0x20]
    wait = instructions[3]
    assert (wait.opcode, wait.base, wait.predicate, wait.target) == \
        ("SYNCS.PHASECHK.TRANS64.TRYWAIT", "SYNCS", "", None)
    retry = instructions[4]
    assert (retry.opcode, retry.predicate, retry.target, retry.unconditional) == ("BRA", "@!P0", 0x190, False)
    assert retry.text == "@!P0 BRA 0x190"
    assert instructions[-1].target == 0x50 and instructions[-1].unconditional
    assert instructions[7].opcode == "QGMMA.64x128x32.F32.E4M3.E4M3"


def test_parse_splits_functions():
    text = SNIPPET + "\n\t\tFunction : other\n        /*0000*/                   EXIT ;\n"
    functions = sass.parse_sass(text)
    assert sorted(functions) == ["other", "tiny_kernel"]
    assert [i.opcode for i in functions["other"]] == ["EXIT"]
    with pytest.raises(ValueError, match="expected one function"):
        sass.pick_function(functions, "")


def test_loops_are_natural_loops(instructions):
    flow = sass.ControlFlow(instructions)
    headers = [flow.instructions[flow.starts[loop.header]].address for loop in flow.loops()]
    # The retry path's jump back to 0x50 enters the K loop's body from outside: not a loop. The self-branch after
    # EXIT is unreachable: not a loop either.
    assert headers == [0x20, 0x30, 0x110, 0x190]


def test_main_loop_is_the_innermost_with_the_most_mmas(instructions):
    loops = sass.mma_loops(instructions, MMAS_PER_K_BLOCK)
    assert [(r.start, r.end, r.num_mma) for r in loops] == [(0x30, 0x100, 4), (0x110, 0x140, 2)]
    main = sass.main_loop(instructions, MMAS_PER_K_BLOCK)
    assert (main.start, main.end) == (0x30, 0x100)
    assert main.num_instructions == 14
    assert main.num_cold == 3  # the retry path 0x190-0x1b0
    assert main.k_blocks == 2 and main.per_k_block == 7
    assert main.count("R2UR") == 1 and main.count("LDL", "STL") == 0


def test_histogram_per_k_block(instructions):
    main = sass.main_loop(instructions, MMAS_PER_K_BLOCK)
    histogram = main.histogram()
    # Most frequent first, then by name.
    assert list(histogram.items()) == [("QGMMA", 2), ("WARPGROUP", 1.5), ("BRA", 1), ("FFMA", 1), ("ISETP", 0.5),
                                       ("R2UR", 0.5), ("SYNCS", 0.5)]
    full = main.histogram(full=True)
    assert full["WARPGROUP.DEPBAR.LE"] == 1 and full["WARPGROUP.ARRIVE"] == 0.5
    assert "QGMMA" in main.format() and "7.00 instructions per K block" in main.format()


def test_ties_pick_the_first_loop():
    # The same K loop twice (one per straddle case): the first one is the main loop.
    lines = [
        "/*0000*/ MOV R2, RZ ;", "/*0010*/ QGMMA.64x128x32.F32.E4M3.E4M3 R24, gdesc[UR4], R24 ;",
        "/*0020*/ @P0 BRA 0x10 ;", "/*0030*/ QGMMA.64x128x32.F32.E4M3.E4M3 R24, gdesc[UR4], R24 ;",
        "/*0040*/ @P1 BRA 0x30 ;", "/*0050*/ EXIT ;"]
    instructions = sass.parse_sass("\n".join(lines))[""]
    assert [r.start for r in sass.mma_loops(instructions, 1)] == [0x10, 0x30]
    assert sass.main_loop(instructions, 1).start == 0x10


def test_no_mma_loop_raises():
    instructions = sass.parse_sass("/*0000*/ QGMMA.64x8x32.F32.E4M3.E4M3 R0, gdesc[UR4], R0 ;\n/*0010*/ EXIT ;")[""]
    with pytest.raises(ValueError, match="no loop"):
        sass.main_loop(instructions, 4)


def test_mmas_per_k_block_from_config():
    # 4 wgmma (K = 32 each) per 128-wide K block per 64-row sub-tile; two sub-tiles per warpgroup at BLOCK_M = 256.
    assert sass.mmas_per_k_block(build_sm90_config(4096, 7168, 4096, 256, 128, 132)) == 8
    assert sass.mmas_per_k_block(build_sm90_config(4096, 7168, 4096, 128, 192, 132)) == 4
    assert sass.mmas_per_k_block(build_sm90_config(64, 7168, 4096, 64, 128, 132)) == 4
    assert sass.mmas_per_k_block(build_wgrad_config(16384, 7168, 1, 256, 112, 132)) == 8


def test_register_moves_problem():
    """setmaxnreg moves within the launch allocation: what the producer frees must cover what the others take."""
    log = "ptxas info    : Used 96 registers, used 1 barriers\n"
    moves = "setmaxnreg.dec.sync.aligned.u32 {};\nsetmaxnreg.inc.sync.aligned.u32 {};\n"
    assert sass.register_moves_problem(moves.format(24, 112), log, 640) == ""
    assert "62464 registers > the launch allocation 640 x 96 = 61440" in \
        sass.register_moves_problem(moves.format(40, 112), log, 640)
    assert sass.register_moves_problem("", log, 640) == ""  # no moves
    assert "ptxas_verbose" in sass.register_moves_problem(moves.format(24, 112), "", 640)
    assert "several" in sass.register_moves_problem(moves.format(24, 112) + moves.format(24, 104), log, 640)
