"""pdtrt gpus, pdtrt doctor, pdtrt --version, and the rule that every option is tested."""

from __future__ import annotations

import json
from pathlib import Path

import click

from pdtrt import __version__
from pdtrt.cli.main import cli


def test_gpus_table(run):
    result = run("gpus")
    assert result.exit_code == 0
    rows = {line.split("│")[1].strip(): line for line in result.stdout.splitlines()
            if line.startswith("│")}
    assert set(rows) == {"h100-sxm", "h100-pcie", "h200", "l40s", "l4", "a100-sxm", "a100-pcie",
                         "a10g", "cpu"}
    assert [c.strip() for c in rows["l40s"].split("│")[1:-1]] == [
        "l40s", "8.9", "362", "733", "48", "0.864", "pcie4 32", "1.860"]


def test_gpus_prices_json(run, tmp_path):
    prices = tmp_path / "p.yaml"
    prices.write_text("l40s: 1.58\n")
    data = json.loads(run("gpus", "--prices", str(prices), "--json").stdout)
    l40s = next(g for g in data if g["key"] == "l40s")
    assert l40s["price_per_hour_usd"] == 1.58 and l40s["memory_bytes"] == 48 << 30


def test_gpus_bad_prices(run, tmp_path):
    prices = tmp_path / "p.yaml"
    prices.write_text("l40s: free\n")
    result = run("gpus", "--prices", str(prices))
    assert result.exit_code == 2
    assert result.stderr.startswith("error: prices file")


def test_doctor(run):
    result = run("doctor")
    assert result.exit_code == 0
    names = [line.split(":")[0].split(maxsplit=1)[1] for line in result.stdout.splitlines()
             if line[:1] not in (" ", "")]
    assert names == ["python", "numpy", "GPUs", "embedded Triton", "ucxx", "TensorRT-LLM",
                     "LLM API"]
    data = json.loads(run("doctor", "--json").stdout)
    assert [c["name"] for c in data["checks"]] == names


def test_version(run):
    assert run("--version").stdout == f"pdtrt, version {__version__}\n"


def _options(command: click.Command, prefix: str = ""):
    for param in command.params:
        for opt in getattr(param, "opts", []):
            if opt.startswith("--") and opt not in ("--help",):
                yield f"{prefix}{command.name} {opt}", opt
    if isinstance(command, click.Group):
        for sub in command.commands.values():
            yield from _options(sub, f"{prefix}{command.name} ")


def test_every_cli_option_is_exercised_by_a_test():
    sources = "\n".join(p.read_text() for p in Path(__file__).parent.glob("test_*.py"))
    untested = [where for where, opt in _options(cli) if f'"{opt}"' not in sources]
    assert not untested, f"options no CLI test passes: {untested}"
