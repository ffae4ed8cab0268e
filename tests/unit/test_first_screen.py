"""The first screen says what to do: one sign convention for every TTFT figure, stated
once; an action and its setting per undecided or failed verdict; a host without data
says so."""

from __future__ import annotations

import re
from pathlib import Path

from report_runs import make_run

from prefixbench.report.build import build_summary
from prefixbench.report.headline import SIGN_CONVENTION
from prefixbench.report.write import write_outputs


def test_one_sign_convention_for_every_ttft_figure(tmp_path: Path) -> None:
    run = make_run(tmp_path)
    write_outputs(build_summary(run), run, ("md",))
    md = (run / "report.md").read_text()
    assert md.count(SIGN_CONVENTION) == 1
    assert "positive: slower" not in md
    bottom = re.search(r"sharing nothing the TTFT reduction was ([+-]\d+\.\d)%", md)
    step7 = re.search(r"No-overlap TTFT reduction: ([+-]\d+\.\d)%", md)
    assert bottom and step7
    # The fixtures' cached no-overlap run is slower: both figures negative, one quantity.
    assert float(bottom.group(1)) < 0 and float(step7.group(1)) < 0
    assert abs(float(bottom.group(1)) - float(step7.group(1))) < 1.0
