"""Golden model repositories per target and mode; every generated config.pbtxt parses.

Regenerate with ``./scripts/test.sh tests/repo/test_golden.py --update-golden`` (see
tests/golden/README.md) and review the diff.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pdtrt.repo.generate import RepoMode, generate_repo
from pdtrt.repo.pbtxt import parse_config
from pdtrt.repo.validate import validate_repo
from pdtrt.spec.load import load_deployment
from tests.conftest import EXAMPLES, TESTS

GOLDEN = TESTS / "golden" / "repo"
GOLDEN_ENGINES = Path("/pdtrt-golden/engines")  # fixed, never created: paths stay stable
EXAMPLE_SPECS = ("llama3-8b-h100-l40s-trtllm-0.21", "llama3-8b-h100-l40s", "reference-cpu",
                 "reference-remote")
# --mode pools needs pools with an endpoint: the remote example's, and trtllm-1.2's decode
# pool (its own Triton server on the L40S host)
POOL_EXAMPLES = ("llama3-8b-h100-l40s", "reference-remote")
CASES = [(ex, mode) for ex in EXAMPLE_SPECS for mode in RepoMode
         if mode is not RepoMode.POOLS or ex in POOL_EXAMPLES]


def _generate(example: str, mode: RepoMode, out: Path) -> dict[str, str]:
    dep = load_deployment(EXAMPLES / f"{example}.yaml")
    generate_repo(dep, out, mode=mode, engines_root=GOLDEN_ENGINES)
    return {str(p.relative_to(out)): p.read_text() for p in sorted(out.rglob("*"))
            if p.is_file()}


@pytest.mark.parametrize(("example", "mode"), CASES, ids=[f"{e}-{m}" for e, m in CASES])
def test_golden_repository(example, mode, tmp_path, update_golden):
    files = _generate(example, mode, tmp_path / "repo")
    golden = GOLDEN / f"{example}-{mode}"
    if update_golden:
        for old in sorted(golden.rglob("*"), reverse=True) if golden.exists() else []:
            old.unlink() if old.is_file() else old.rmdir()
        for rel, text in files.items():
            (golden / rel).parent.mkdir(parents=True, exist_ok=True)
            (golden / rel).write_text(text)
    want = {str(p.relative_to(golden)): p.read_text() for p in sorted(golden.rglob("*"))
            if p.is_file()}
    assert sorted(files) == sorted(want)
    for rel, text in files.items():
        assert text == want[rel], f"{rel} differs from its golden copy"


GOLDEN_CONFIGS = sorted(GOLDEN.rglob("config.pbtxt"))
assert GOLDEN_CONFIGS, f"no golden configs under {GOLDEN}: the test below would pass vacuously"


@pytest.mark.parametrize("config", GOLDEN_CONFIGS,
                         ids=lambda p: str(p.relative_to(GOLDEN)))
def test_every_golden_config_parses(config):
    cfg = parse_config(config.read_text())
    assert cfg.name == config.parent.name
    assert cfg.max_batch_size > 0


@pytest.mark.parametrize(("example", "mode"), CASES, ids=[f"{e}-{m}" for e, m in CASES])
def test_generated_repository_validates(example, mode, tmp_path):
    _generate(example, mode, tmp_path / "repo")
    report = validate_repo(tmp_path / "repo")
    assert report.problems == ()
    assert all("does not exist" in w for w in report.warnings)
    front = ("preprocessing", "postprocessing")
    for name in front:  # a pools repository has only engine models
        assert (tmp_path / "repo" / name / "1").is_dir() == (mode is not RepoMode.POOLS)


def test_output_is_deterministic(tmp_path):
    a = _generate("llama3-8b-h100-l40s-trtllm-0.21", RepoMode.BOTH, tmp_path / "a")
    b = _generate("llama3-8b-h100-l40s-trtllm-0.21", RepoMode.BOTH, tmp_path / "b")
    assert a == b
