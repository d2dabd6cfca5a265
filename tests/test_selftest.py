"""The sm100 first-use self-test gate (deep_gemm/selftest.py) with fake runners, no GPU: verdicts cached per (device,
family), a clear error naming the family and the device, re-entrant launches passing through, DG_SM100_SELFTEST=0."""
import pytest

from deep_gemm import selftest
from deep_gemm.envs import VARIABLES

DEVICE = (0, "NVIDIA B200", (10, 0))
OTHER_DEVICE = (1, "NVIDIA B200", (10, 0))


@pytest.fixture(autouse=True)
def fresh(monkeypatch):
    monkeypatch.delenv("DG_SM100_SELFTEST", raising=False)
    selftest.clear()
    yield
    selftest.clear()


class FakeRunner:
    def __init__(self, diffs, bound=1e-5, error=None):
        self.diffs, self.bound, self.error, self.calls = diffs, bound, error, 0

    def __call__(self):
        self.calls += 1
        return [selftest.CaseResult(f"dense m={i} n=72 k=208", d, self.bound, self.error if i == 0 else None)
                for i, d in enumerate(self.diffs)]


def test_passing_family_runs_once_per_device_and_family():
    runner = FakeRunner([1e-7, 3e-7])
    for _ in range(3):
        selftest.ensure(0, "dense", runner, key=DEVICE)
    assert runner.calls == 1
    selftest.ensure(1, "dense", runner, key=OTHER_DEVICE)
    selftest.ensure(0, "dense_ue8m0", runner, key=DEVICE)
    assert runner.calls == 3
    assert selftest.verdicts() == {(DEVICE, "dense"): True, (OTHER_DEVICE, "dense"): True,
                                   (DEVICE, "dense_ue8m0"): True}


def test_failing_family_raises_a_clear_error_every_time():
    runner = FakeRunner([1e-7, 0.5])
    with pytest.raises(selftest.SelfTestError) as info:
        selftest.ensure(0, "masked", runner, key=DEVICE)
    message = str(info.value)
    assert "the sm100 kernel of the 'masked' variant FAILED its self-test on device 0 (NVIDIA B200, sm_100)" in message
    assert "dense m=1 n=72 k=208: calc_diff 0.5 >= 1e-05" in message and "DG_SM100_SELFTEST=0" in message
    assert "m=0" not in message  # only the failed problems are listed
    # Cached: the next use raises the same error without running again.
    with pytest.raises(selftest.SelfTestError, match="FAILED"):
        selftest.ensure(0, "masked", runner, key=DEVICE)
    assert runner.calls == 1
    assert selftest.verdicts() == {(DEVICE, "masked"): False}
    assert issubclass(selftest.SelfTestError, RuntimeError)


@pytest.mark.parametrize("diffs, error", [([float("nan")], None), ([0.0], "wrote rows beyond masked_m"), ([], None)])
def test_nan_other_errors_and_empty_runs_fail(diffs, error):
    with pytest.raises(selftest.SelfTestError):
        selftest.ensure(0, "dense", FakeRunner(diffs, error=error), key=DEVICE)


def test_launches_inside_the_runner_pass_through():
    inner_calls = []

    def runner():
        # The self-test's own launches reach `ensure` again for the same family: they must not recurse.
        selftest.ensure(0, "dense", lambda: pytest.fail("re-entered the self-test"), key=DEVICE)
        inner_calls.append(1)
        return [selftest.CaseResult("p", 0.0, 1e-5)]

    selftest.ensure(0, "dense", runner, key=DEVICE)
    assert inner_calls == [1]


def test_runner_exception_leaves_no_verdict():
    def broken():
        raise RuntimeError("CUDA error: out of memory")

    with pytest.raises(RuntimeError, match="out of memory"):
        selftest.ensure(0, "dense", broken, key=DEVICE)
    assert selftest.verdicts() == {}
    runner = FakeRunner([0.0])
    selftest.ensure(0, "dense", runner, key=DEVICE)
    assert runner.calls == 1


@pytest.mark.parametrize("value", ["0", "false", "off"])
def test_env_var_turns_the_gate_off(monkeypatch, value):
    monkeypatch.setenv("DG_SM100_SELFTEST", value)
    runner = FakeRunner([0.9])
    selftest.ensure(0, "dense", runner, key=DEVICE)  # a failing family, but the gate is off
    assert runner.calls == 0 and selftest.verdicts() == {}


def test_env_var_is_documented():
    (var,) = [v for v in VARIABLES if v.name == "DG_SM100_SELFTEST"]
    assert var.default == "1" and var.is_flag and "self" in var.effect.lower()


def test_hopper_launches_never_reach_the_gate():
    """The sm90 family's modules do not import the gate; only the sm100 launcher calls it."""
    import inspect

    from deep_gemm.families import sm90_fp8_gemm_1d2d, sm100_fp8_gemm_1d2d
    assert "selftest" not in inspect.getsource(sm90_fp8_gemm_1d2d)
    assert "selftest.ensure(" in inspect.getsource(sm100_fp8_gemm_1d2d.build_plan)


def test_wait_for_times_out_on_a_hung_device():
    assert selftest.wait_for(lambda: True, timeout_s=0.0)
    polls = []
    assert not selftest.wait_for(lambda: polls.append(1) and False, timeout_s=0.05, poll_s=0.01)
    assert len(polls) >= 2
    done_after = iter([False, False, True])
    assert selftest.wait_for(lambda: next(done_after), timeout_s=5.0, poll_s=0.0)
