"""``make mutate``: the modules mutmut mutates are the ones its score table lists, and the
test files it selects exist and are fast-tier files (docs/testing.md, "Mutation testing")."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

from prefixbench_perf import mutation

ROOT = Path(__file__).resolve().parents[2]
CONFIG = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["mutmut"]


def test_the_mutated_files_are_the_scored_modules_in_order() -> None:
    files = [f"src/{m.replace('.', '/')}.py" for m in mutation.MODULES]
    assert CONFIG["only_mutate"] == files
    assert all((ROOT / f).is_file() for f in files)


def test_the_selected_tests_are_fast_tier_files() -> None:
    tests = CONFIG["pytest_add_cli_args_test_selection"]
    assert tests and all(t.startswith("tests/unit/") for t in tests)
    missing = [t for t in tests if not (ROOT / t).is_file()]
    assert not missing
    assert CONFIG["pytest_add_cli_args"][-2:] == ["-m", "not integration"]


def test_every_named_equivalent_belongs_to_a_mutated_module() -> None:
    assert all(mutation.module_of(m) in mutation.MODULES for m in mutation.EQUIVALENT)
    assert all(reason.strip() for reason in mutation.EQUIVALENT.values())


def test_the_score_leaves_out_equivalents_and_counts_untested_as_survived(
        tmp_path: Path) -> None:
    module = "prefixbench.predict.segments"
    eq = next(iter(mutation.EQUIVALENT))
    codes = {f"{module}.x_a__mutmut_1": 1, f"{module}.x_a__mutmut_2": 0,
             f"{module}.x_a__mutmut_3": 33, f"{module}.x_a__mutmut_4": 36,
             f"{module}.x_a__mutmut_5": None, eq: 0}
    s = mutation.score(module, codes)
    # 5 run; 1 equivalent; killed: the failing test and the timeout.
    assert (s.mutants, s.run, s.killed, s.survived, s.no_tests, s.equivalent) == \
        (6, 5, 2, 1, 1, 1)
    assert s.score == 2 / 4
    assert mutation.survivors(codes) == [f"{module}.x_a__mutmut_2",
                                         f"{module}.x_a__mutmut_3"]
    assert mutation.pending(module, codes) == [f"{module}.x_a__mutmut_5"]
    assert mutation.pending(module, None) == [f"{module}.*"]
    assert mutation.pending(module, codes, recheck=True) == [
        f"{module}.x_a__mutmut_2", f"{module}.x_a__mutmut_3", f"{module}.x_a__mutmut_5"]
    meta = mutation.meta_path(tmp_path, module)
    meta.parent.mkdir(parents=True)
    meta.write_text(json.dumps({"exit_code_by_key": codes}))
    assert mutation.exit_codes(tmp_path, module) == codes
    assert mutation.exit_codes(tmp_path, "prefixbench.report.compare") is None
