"""The design card's layout: ``sender``, ``receiver`` and ``spark_loader`` import
``sealsync``, never the reverse at module level (the CLI's commands import them lazily,
inside the function that runs the command), so the shared package stays importable on
its own and no import cycle can form."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import sealsync

ROLES = {"sender", "receiver", "spark_loader"}
SHARED = Path(sealsync.__file__).resolve().parent


def _module_level_imports(path: Path) -> set[str]:
    """Top-level package names imported by ``path`` outside any function body."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
                continue  # a lazy import: runs only when the command does
            if isinstance(child, ast.If) and ast.unparse(child.test) == "TYPE_CHECKING":
                continue  # for mypy only, never run
            if isinstance(child, ast.Import):
                found.update(alias.name.split(".")[0] for alias in child.names)
            elif isinstance(child, ast.ImportFrom) and child.module and not child.level:
                found.add(child.module.split(".")[0])
            visit(child)

    visit(tree)
    return found


def test_the_shared_package_imports_no_role_at_module_level() -> None:
    offenders = {
        str(path.relative_to(SHARED.parent)): sorted(_module_level_imports(path) & ROLES)
        for path in sorted(SHARED.rglob("*.py"))
    }
    assert {k: v for k, v in offenders.items() if v} == {}


def test_the_check_sees_an_import_at_module_level(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text(
        "import os\nfrom sender.round import run_round\n\ndef f():\n    import receiver\n"
    )
    assert _module_level_imports(module) == {"os", "sender"}


def test_the_role_packages_sit_beside_pyproject() -> None:
    root = SHARED.parent
    assert (root / "pyproject.toml").is_file()
    for name in (*sorted(ROLES), "tests", "examples"):
        assert (root / name).is_dir(), name
    for sub in (
        "sender/manage",
        "sender/transfer",
        "sender/recover",
        "receiver/load",
        "receiver/recover",
    ):
        assert (root / sub / "__init__.py").is_file(), sub


@pytest.mark.slow
def test_a_wheel_carries_the_four_packages_and_the_jar(tmp_path: Path) -> None:
    """What ``pip install sealsync-*.whl`` gets, on a cluster's executors too.

    Built from a copy of the checkout: pip builds a local folder in place, and
    setuptools' ``build/lib`` there keeps modules since deleted from the source, which a
    later wheel would carry (and the checkout would gain a second copy of every module).
    """
    source = tmp_path / "src"
    shutil.copytree(
        SHARED.parent,
        source,
        ignore=shutil.ignore_patterns(".*", "build", "*.egg-info", "__pycache__", "sealsync-demo"),
    )
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps"]
        + ["-w", str(tmp_path), str(source)],
        check=True,
        capture_output=True,
    )
    (wheel,) = tmp_path.glob("sealsync-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert {n.split("/")[0] for n in names if not n.startswith("sealsync-")} == {
        "sealsync",
        *ROLES,
    }
    assert "spark_loader/jars/sealsync-spark.jar" in names
    assert "sender/manage/selection.py" in names and "receiver/recover/replay.py" in names
