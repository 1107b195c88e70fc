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


STORAGE_PACKAGE = "receiver.storage"
LAYOUT_MODULE = "sealsync.received"
LAYOUT_READERS = ("receiver", "spark_loader")
MAX_CLASS_LINES = 400


def contract_violations(files: dict[str, Path], root: Path = ROOT) -> list[str]:
    """``file:line: ...`` where the code goes around the storage contract or the
    received-files layout:

    * outside ``receiver/storage/``, a storage probed for what it is or can do
      (``getattr``/``hasattr`` on an expression naming a storage, ``isinstance``/
      ``issubclass`` against a concrete storage class): the contract declares it;
    * in the receiver and the loader, the data roots (``DATA_ROOTS``) named outside
      ``sealsync/received.py``: a path of the layout built or taken apart by hand;
    * a class longer than MAX_CLASS_LINES lines.
    """
    out = []
    for module, path in files.items():
        where = path.relative_to(root)
        tree = ast.parse(path.read_text(encoding="utf-8"))
        in_storage = _within(module, STORAGE_PACKAGE)
        reads_layout = module.split(".")[0] in LAYOUT_READERS and module != LAYOUT_MODULE
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef) and node.end_lineno is not None:
                length = node.end_lineno - node.lineno + 1
                if length > MAX_CLASS_LINES:
                    out.append(f"{where}:{node.lineno}: class {node.name} is {length} lines")
            if not in_storage and isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                func, args = node.func.id, node.args
                if func in ("getattr", "hasattr") and args and "storage" in ast.unparse(args[0]):
                    out.append(f"{where}:{node.lineno}: probes a storage ({ast.unparse(node)})")
                if func in ("isinstance", "issubclass") and len(args) == 2:
                    classes = ast.unparse(args[1])
                    if any(n in classes for n in ("DirectoryStorage", "IoTDBStorage")):
                        out.append(f"{where}:{node.lineno}: asks what a storage is ({classes})")
            if reads_layout:
                named = (
                    (isinstance(node, ast.Name) and node.id == "DATA_ROOTS")
                    or (isinstance(node, ast.Attribute) and node.attr == "DATA_ROOTS")
                    or (
                        isinstance(node, ast.ImportFrom)
                        and any(a.name == "DATA_ROOTS" for a in node.names)
                    )
                )
                if named:
                    out.append(
                        f"{where}:{node.lineno}: builds the received-files layout by hand "
                        "(use sealsync.received)"
                    )
    return out


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


def test_the_storage_contract_and_the_layout_module_are_not_gone_around() -> None:
    assert contract_violations(project_files()) == []


def test_each_contract_rule_catches_its_breach(tmp_path: Path) -> None:
    long_class = "class Big:\n" + "    x = 1\n" * MAX_CLASS_LINES
    root = _tree(
        tmp_path,
        {
            **{f"{p}/__init__.py": "" for p in PACKAGES},
            "receiver/storage/__init__.py": "",
            "receiver/storage/directory.py": "def f(storage):\n"
            "    return getattr(storage, 'usage', None)\n",
            "receiver/apply.py": "def f(self):\n"
            "    return getattr(self.storage, 'deferred_sync', None)\n",
            "receiver/service.py": "def f(s):\n    return isinstance(s, DirectoryStorage)\n",
            "receiver/walk.py": "from sealsync.names import DATA_ROOTS\n",
            "spark_loader/disc.py": "import sealsync.names as n\nr = n.DATA_ROOTS\n",
            "sealsync/received.py": "from sealsync.names import DATA_ROOTS\n",
            "sender/scan.py": "from sealsync.names import DATA_ROOTS\n",
            "spark_loader/big.py": long_class,
        },
    )
    assert sorted(contract_violations(project_files(root), root)) == [
        "receiver/apply.py:2: probes a storage (getattr(self.storage, 'deferred_sync', None))",
        "receiver/service.py:2: asks what a storage is (DirectoryStorage)",
        "receiver/walk.py:1: builds the received-files layout by hand (use sealsync.received)",
        f"spark_loader/big.py:1: class Big is {MAX_CLASS_LINES + 1} lines",
        "spark_loader/disc.py:2: builds the received-files layout by hand (use sealsync.received)",
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
