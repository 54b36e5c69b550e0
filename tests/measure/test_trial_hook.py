"""`gtplab sweep --on-trial-start CMD` (gtplab/measure/sweep.py trial_hook): the command runs to its
end while the trial's traffic runs (Runner.on_start), and one that fails stops the sweep with one line."""

from __future__ import annotations

import time

import pytest

from gtplab.errors import UserError
from gtplab.measure.sweep import trial_hook


def test_the_hook_runs_to_its_end_before_the_trial_goes_on(tmp_path):
    mark = tmp_path / "ran"
    t0 = time.monotonic()
    trial_hook(f"sleep 0.2; echo once >> {mark}")()
    assert time.monotonic() - t0 >= 0.2 and mark.read_text() == "once\n"


def test_a_failing_hook_is_one_clear_error():
    with pytest.raises(UserError) as e:
        trial_hook("echo 'no such link' >&2; exit 3")()
    assert "exited 3: no such link" in str(e.value) and "\n" not in str(e.value)
