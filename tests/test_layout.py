"""The layers of the code, held over every import statement (docs/design.md, README's
module map).

* The core, ``sealsync`` outside ``sealsync/app/``, holds what every role shares and
  imports no role (``sender``, ``receiver``, ``spark_loader``) and not the app layer.
* A role imports the core and never another role.
* ``sealsync/app/`` (the command line, its output, the demo) is the one layer that
  composes the roles; nothing imports it but the entry points (``sealsync/__main__.py``,
  the console script) and the tests, benchmarks and examples.
* No two of the project's modules import each other, however indirectly.

"Every import" means what the AST holds: module level, inside functions (a lazy
import is still a dependency, only a later one), inside ``try`` and ``if``, relative
ones resolved. Imports under ``if TYPE_CHECKING:`` count for the layer rules too: an
annotation naming a role's type is a dependency on that role. They are left out of
the cycle check only, because they never run: an annotation that names a type of a
module importing this one cannot make an import fail half-way, which is the harm a
cycle does.
"""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import sealsync

ROLES = ("sender", "receiver", "spark_loader")
PACKAGES = ("sealsync", *ROLES)
APP = "sealsync.app"
ENTRY_POINTS = {"sealsync.__main__"}
ROOT = Path(sealsync.__file__).resolve().parent.parent


@dataclass(frozen=True)
class Import:
    """One imported module as written (``from a.b import c`` gives ``a.b.c``, which may
    name a module or only a name in ``a.b``)."""

    target: str
    line: int
    type_checking: bool


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(test: ast.expr) -> bool:
    return ast.unparse(test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING")


def imports_of(path: Path, root: Path = ROOT) -> list[Import]:
    """Every import statement in ``path``, wherever it stands in the file."""
    name = module_name(path, root)
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found: list[Import] = []

    def visit(node: ast.AST, type_checking: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child.test):
                for stmt in child.body:
                    visit_stmt(stmt, True)
                for stmt in child.orelse:
                    visit_stmt(stmt, type_checking)
                continue
            visit_stmt(child, type_checking)

    def visit_stmt(node: ast.AST, type_checking: bool) -> None:
        if isinstance(node, ast.Import):
            found.extend(Import(a.name, node.lineno, type_checking) for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)]
                module = ".".join([*base, *([node.module] if node.module else [])])
            else:
                module = node.module or ""
            for alias in node.names:
                target = module if alias.name == "*" else f"{module}.{alias.name}"
                found.append(Import(target, node.lineno, type_checking))
        visit(node, type_checking)

    visit(ast.parse(path.read_text(encoding="utf-8")), False)
    return found


def project_files(root: Path = ROOT) -> dict[str, Path]:
    """Module name -> file, for every module of the four packages."""
    return {
        module_name(path, root): path
        for package in PACKAGES
        for path in sorted((root / package).rglob("*.py"))
        if "__pycache__" not in path.parts
    }


def _within(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def layer_of(module: str) -> str:
    """``core``, ``app``, ``entry`` or the role's name."""
    if module in ENTRY_POINTS:
        return "entry"
    if _within(module, APP):
        return "app"
    top = module.split(".")[0]
    return top if top in ROLES else "core"


def layer_violations(files: dict[str, Path], root: Path = ROOT) -> list[str]:
    """``file:line: imports X`` for each import a layer may not make."""
    out = []
    for module, path in files.items():
        layer = layer_of(module)
        if layer in ("app", "entry"):
            continue
        for imp in imports_of(path, root):
            top = imp.target.split(".")[0]
            if _within(imp.target, APP):
                why = "the app layer"
            elif top in ROLES and top != layer:
                why = f"the role {top}" if layer == "core" else f"another role, {top}"
            else:
                continue
            where = path.relative_to(root)
            out.append(f"{where}:{imp.line}: {layer} imports {why} ({imp.target})")
    return out


def import_graph(files: dict[str, Path], root: Path = ROOT) -> dict[str, set[str]]:
    """Module -> the project modules it imports at run time (module level or inside a
    function; not under TYPE_CHECKING). ``from a import b`` is an edge to ``a.b`` when
    that is a module, else to ``a``. Importing ``a.b`` also runs ``a/__init__.py``; that
    implicit edge is left out, else every module of a package whose ``__init__`` imports
    its own modules would sit in a cycle through it."""
    graph: dict[str, set[str]] = {module: set() for module in files}
    for module, path in files.items():
        for imp in imports_of(path, root):
            if imp.type_checking:
                continue
            target = imp.target
            while target and target not in files:
                target = target.rpartition(".")[0]
            if target and target != module:
                graph[module].add(target)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm,
    iterative: the graph is a few hundred modules deep at most, but no recursion limit
    should decide that)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph.get(nxt, ())))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return sorted(found)


# --- the rules, on the project -------------------------------------------------------


def test_the_core_imports_no_role_and_no_role_another_and_only_entry_points_the_app() -> None:
    files = project_files()
    assert {layer_of(m) for m in files} == {"core", "app", "entry", *ROLES}
    assert layer_violations(files) == []


def test_no_import_cycle_among_the_project_modules() -> None:
    assert cycles(import_graph(project_files())) == []


def test_the_console_script_and_python_m_start_the_app_layer() -> None:
    import tomllib

    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))
    assert pyproject["project"]["scripts"]["sealsync"] == f"{APP}.cli:main"
    main = imports_of(ROOT / "sealsync" / "__main__.py")
    assert [i.target for i in main] == ["sys", f"{APP}.cli.main"]


# --- the checks see what they must ---------------------------------------------------


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return tmp_path


def test_imports_are_found_in_functions_branches_and_type_checking_blocks(
    tmp_path: Path,
) -> None:
    root = _tree(
        tmp_path,
        {
            "sealsync/__init__.py": "",
            "sealsync/m.py": (
                "from typing import TYPE_CHECKING\n"
                "import os\n"
                "if TYPE_CHECKING:\n"
                "    from sender.attempt import Run\n"
                "else:\n"
                "    import json\n"
                "def f():\n"
                "    import receiver.layout\n"
                "    try:\n"
                "        from . import names\n"
                "    except ImportError:\n"
                "        pass\n"
                "class C:\n"
                "    def g(self):\n"
                "        from .app import cli\n"
            ),
        },
    )
    found = {(i.target, i.type_checking) for i in imports_of(root / "sealsync/m.py", root)}
    assert found == {
        ("typing.TYPE_CHECKING", False),
        ("os", False),
        ("sender.attempt.Run", True),
        ("json", False),
        ("receiver.layout", False),
        ("sealsync.names", False),
        ("sealsync.app.cli", False),
    }


def test_each_rule_catches_its_breach(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            **{f"{p}/__init__.py": "" for p in PACKAGES},
            "sealsync/app/__init__.py": "",
            "sealsync/app/cli.py": "import sender.attempt\nimport receiver\nimport spark_loader\n",
            "sealsync/__main__.py": "from sealsync.app.cli import main\n",
            "sealsync/deletions.py": "def f():\n    from receiver.layout import X\n",
            "sealsync/names.py": "from typing import TYPE_CHECKING\n"
            "if TYPE_CHECKING:\n    import spark_loader.state\n",
            "sealsync/output.py": "from sealsync.app import output\n",
            "sender/attempt.py": "import receiver.storage\nfrom sealsync import names\n",
            "receiver/senders.py": "def f():\n    from sealsync.app.status import render\n",
            "spark_loader/state.py": "from sealsync.names import X\n",
        },
    )
    assert sorted(layer_violations(project_files(root), root)) == [
        "receiver/senders.py:2: receiver imports the app layer (sealsync.app.status.render)",
        "sealsync/deletions.py:2: core imports the role receiver (receiver.layout.X)",
        "sealsync/names.py:3: core imports the role spark_loader (spark_loader.state)",
        "sealsync/output.py:1: core imports the app layer (sealsync.app.output)",
        "sender/attempt.py:1: sender imports another role, receiver (receiver.storage)",
    ]


def test_a_cycle_is_found_through_lazy_imports_and_not_through_type_checking(
    tmp_path: Path,
) -> None:
    root = _tree(
        tmp_path,
        {
            **{f"{p}/__init__.py": "" for p in PACKAGES},
            "sender/a.py": "from sender.b import hostname\n",
            "sender/b.py": "def hostname():\n    from sender import c\n",
            "sender/c.py": "import sender.a\n",
            "spark_loader/x.py": "from spark_loader import y\n",
            "spark_loader/y.py": "from typing import TYPE_CHECKING\n"
            "if TYPE_CHECKING:\n    from spark_loader.x import Z\n",
            "receiver/p.py": "import receiver.q\n",
            "receiver/q.py": "import os\n",
        },
    )
    graph = import_graph(project_files(root), root)
    assert graph["sender.a"] == {"sender.b"} and graph["spark_loader.y"] == set()
    assert cycles(graph) == [["sender.a", "sender.b", "sender.c"]]


def test_the_role_packages_sit_beside_pyproject() -> None:
    assert (ROOT / "pyproject.toml").is_file()
    for name in (*ROLES, "tests", "examples"):
        assert (ROOT / name).is_dir(), name
    for sub in (
        "sealsync/app",
        "sender/manage",
        "sender/transfer",
        "sender/recover",
        "receiver/load",
        "receiver/recover",
    ):
        assert (ROOT / sub / "__init__.py").is_file(), sub


@pytest.mark.slow
def test_a_wheel_carries_the_four_packages_and_the_jar(tmp_path: Path) -> None:
    """What ``pip install sealsync-*.whl`` gets, on a cluster's executors too.

    Built from a copy of the checkout: pip builds a local folder in place, and
    setuptools' ``build/lib`` there keeps modules since deleted from the source, which a
    later wheel would carry (and the checkout would gain a second copy of every module).
    """
    source = tmp_path / "src"
    shutil.copytree(
        ROOT,
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
    assert {n.split("/")[0] for n in names if not n.startswith("sealsync-")} == set(PACKAGES)
    assert "spark_loader/jars/sealsync-spark.jar" in names
    assert "sealsync/app/cli.py" in names
    assert "sender/manage/selection.py" in names and "receiver/recover/replay.py" in names


def test_a_host_imports_the_receiver_plugin_from_its_package_alone() -> None:
    """``receiver/__init__.py`` is the plugin's surface: each name it promises resolves,
    and the example host imports nothing else of the project."""
    import receiver

    for name in receiver.__all__:
        assert getattr(receiver, name) is not None, name
    example = ROOT / "examples" / "host_server.py"
    project = {i.target for i in imports_of(example)} - {"__future__.annotations"}
    ours = {t for t in project if t.split(".")[0] in PACKAGES}
    assert ours and {t.rpartition(".")[0] for t in ours} == {"receiver"}
    assert all(t.split(".")[0] in sys.stdlib_module_names for t in project - ours), project
