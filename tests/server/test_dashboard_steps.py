"""A dashboard point sums up the ticks of its step: memory the most seen, the rest the mean."""

from jupyter_vgpu.server.dashboard import SLICE_FIELDS, _Step


def test_a_step_keeps_the_most_memory_seen_and_the_mean_of_the_rest() -> None:
    step = _Step()
    step.add({"used": 0, "util": 0})  # the tick before the kernel's use began
    step.add({"used": 1 << 30, "util": 60})
    step.add({"used": None, "util": None})  # unknown: left out, not a zero
    assert step.point(5.0, SLICE_FIELDS) == (5.0, float(1 << 30), 30.0)
    assert _Step().point(5.0, SLICE_FIELDS) == (5.0, None, None)
