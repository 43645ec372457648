"""The layer rule of ``slotserver`` (README "Layout"; contracts in pyproject.toml), checked by
import-linter: kept on this tree, broken as soon as a lower layer imports a higher one. And what
importing the engine costs: no drafter, request parser, HTTP or Prometheus module comes with it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def lint_imports(root: Path) -> subprocess.CompletedProcess:
    """``lint-imports`` over the packages under ``root`` (they shadow any installed copy)."""
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run([sys.executable, "-c", "import sys; from importlinter.cli import lint_imports_command; "
                           "sys.exit(lint_imports_command())", "--no-cache"],
                          cwd=root, env=env, capture_output=True, text=True, timeout=120)


def copy_tree(dst: Path) -> Path:
    for name in ("slotserver", "ngram"):
        shutil.copytree(ROOT / name, dst / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", dst / "pyproject.toml")
    return dst


def test_every_contract_is_kept():
    run = lint_imports(ROOT)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "4 kept, 0 broken" in run.stdout


def test_a_lower_layer_importing_a_higher_one_breaks_the_contract(tmp_path):
    tree = copy_tree(tmp_path)
    batch = tree / "slotserver" / "engine" / "batch.py"
    batch.write_text(batch.read_text() + "\nfrom slotserver.serving.job import Job  # noqa\n")
    run = lint_imports(tree)
    assert run.returncode == 1
    assert "slotserver.engine.batch -> slotserver.serving.job" in run.stdout
    # the layers, and the engine's own contract: through the job, the engine would load the drafters
    assert "Contracts: 2 kept, 2 broken." in run.stdout


def test_ngram_importing_the_server_breaks_its_contract(tmp_path):
    tree = copy_tree(tmp_path)
    pool = tree / "ngram" / "pool.py"
    pool.write_text(pool.read_text() + "\nimport slotserver.stats  # noqa\n")
    run = lint_imports(tree)
    assert run.returncode == 1 and "ngram is pure: no server, no llama.cpp, no HTTP BROKEN" in run.stdout


def loaded_by(module: str) -> list[str]:
    code = f"import json, sys; import {module}; print(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120, check=True)
    return json.loads(out.stdout)


def test_importing_the_engine_loads_no_drafter_request_parser_or_http():
    loaded = loaded_by("slotserver.engine.engine")
    ours = [m for m in loaded if m.split(".")[0] in ("slotserver", "ngram")]
    assert not [m for m in ours if m.startswith(("ngram", "slotserver.speculation", "slotserver.serving",
                                                "slotserver.api", "slotserver.config"))], ours
    assert not [m for m in loaded if m.split(".")[0] in ("aiohttp", "prometheus_client", "matplotlib")]
    assert len(ours) <= 20, ours  # the engine layer, sampling and the leaves: 16 at the restructure
