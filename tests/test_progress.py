"""Long commands show progress with a time estimate: a tqdm bar on a terminal, plain lines in a log."""
from __future__ import annotations

import io

from sdk.commands.simulate import _CompileProgress, _Progress


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_simulate_progress_plain_lines_per_tenth_with_time_left():
    """Called as each case is done: a line at every tenth, the last when all are done."""
    out = io.StringIO()
    p = _Progress(20, out)
    for i in range(20):
        p(f"k/case{i}/fp32")
    p.close()
    lines = out.getvalue().splitlines()
    assert len(lines) == 10 and lines[0].startswith("simulated 2/20 cases (10%);") and "left" in lines[0]
    assert lines[-2].startswith("simulated 18/20 cases (90%)")
    assert lines[-1].startswith("simulated 20/20 cases (100%)")


def test_simulate_progress_bar_on_a_terminal():
    out = Tty()
    p = _Progress(3, out)
    for i in range(3):
        p(f"k/case{i}/fp32")
    p.close()
    text = out.getvalue()
    assert "simulating" in text and "3/3 [" in text and "k/case2/fp32" in text and "<" in text


def test_simulate_says_what_it_compiles_and_how_far_it_is():
    """The compile phase (what each launch holds on chip, per target) says what it compiles, for
    which targets, and how far it is, in lines of its own after the cases."""
    out = io.StringIO()
    p = _CompileProgress(out)
    p(0, 5, ["sm_89", "sm_121"])
    for i in range(1, 6):
        p(i, 5, ["sm_89", "sm_121"])
    p.close()
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("compiling 5 launch(es) for sm_89, sm_121") and "cache" in lines[0]
    assert lines[1].startswith("compiled 1/5 launches (20%);") and lines[-1].startswith("compiled 5/5 launches (100%)")
    assert len(lines) == 6
