"""Format-check workers that cannot start are the receiver's fault, never the file's.

Replayed with real processes: ``sealsync serve`` started from a folder that holds a
checkout of the project (its workers once imported that instead of the installed
code and died, and every valid file was refused as "crashed the format reader"); a
broken native dependency that kills every worker as it starts (files are answered
"retry later", the cause is logged, in ``log_file`` too); a module the workers need
gone from under a running receiver.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from deploy_helpers import Deployment, make_deployment, populate

from receiver.inspect_pool import InspectPool, InspectUnavailable
from sealsync.errors import FormatError

pytestmark = pytest.mark.slow  # worker processes, real receivers and senders

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = Path(sys.executable).parent / "sealsync"
"""The console script, as an operator runs it (``python -m`` would put the working
directory on the receiver's own sys.path too)."""


def serve_from(dep: Deployment, cwd: Path, env: dict[str, str] | None = None) -> None:
    """``sealsync serve`` started in ``cwd`` (the deployment's log collects its output)."""
    with open(dep.root / "receiver.log", "ab") as log:
        dep.proc = subprocess.Popen(
            [str(SCRIPT), "serve", "--init", "--config", str(dep.receiver_config)],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=cwd,
            env=env,
        )
    dep.wait_listening()


def with_log_file(dep: Deployment) -> Path:
    log_file = dep.root / "receiver-file.log"
    text = dep.receiver_config.read_text()
    dep.receiver_config.write_text(text + f'log_file = "{log_file}"\n')
    return log_file


def checkout_copy(parent: Path) -> Path:
    """A checkout of the project as an operator clones it: ``parent/sealsync/``, its
    packages beside pyproject.toml (no ``__init__.py`` at its top)."""
    top = parent / "sealsync"
    top.mkdir(parents=True)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "jars", "java")
    for package in ("sealsync", "receiver", "sender", "spark_loader"):
        shutil.copytree(ROOT / package, top / package, ignore=ignore)
    shutil.copy(ROOT / "pyproject.toml", top / "pyproject.toml")
    return top


def sends_and_loads(dep: Deployment) -> None:
    """The deployment's first sender ships a few files and every one of them is loaded."""
    sender = dep.senders[0]
    names = populate(sender.edge, groups=1, files=3)
    result = sender.send()
    assert result.returncode == 0, (result.stderr, dep.log())
    assert dep.loaded_hashes(sender) == sender.sealed_hashes()
    assert len(dep.loaded_hashes(sender)) == len(names)


def test_serve_started_beside_a_checkout_verifies_good_files(tmp_path: Path) -> None:
    assert SCRIPT.exists(), "the console script is installed by the README's pip install"
    dep = make_deployment(tmp_path / "site")
    ops = tmp_path / "ops"  # the operator's folder: it holds a checkout
    checkout_copy(ops)
    serve_from(dep, cwd=ops)
    try:
        sends_and_loads(dep)
        assert "crashed the format reader" not in dep.log()
        assert "Traceback" not in dep.log()
    finally:
        assert dep.stop_receiver() == 0


BROKEN_TSFILE = 'raise OSError("libtsfile.so: cannot open shared object file")\n'


def test_the_receivers_own_process_never_loads_the_format_libraries(tmp_path: Path) -> None:
    """The workers read the files; the receiver's process only unpickles their findings.
    Loading pyarrow and numpy for that cost its first round after a start their import
    on the CPU it was receiving on, and kept them in its memory."""
    dep = make_deployment(tmp_path / "site")
    serve_from(dep, cwd=tmp_path)
    try:
        sends_and_loads(dep)  # verified by the workers, their findings read here
        assert dep.proc is not None
        mapped = Path(f"/proc/{dep.proc.pid}/maps").read_text()
        assert "/pyarrow/" not in mapped and "/numpy/" not in mapped
    finally:
        assert dep.stop_receiver() == 0


def test_workers_that_cannot_start_are_the_receivers_fault(tmp_path: Path) -> None:
    assert SCRIPT.exists(), "the console script is installed by the README's pip install"
    dep = make_deployment(tmp_path / "site")
    sender = dep.senders[0]
    populate(sender.edge, groups=1, files=2)
    log_file = with_log_file(dep)
    broken = tmp_path / "broken"  # a TsFile package whose native library fails to load
    (broken / "tsfile").mkdir(parents=True)
    (broken / "tsfile" / "__init__.py").write_text(BROKEN_TSFILE)
    env = {**os.environ, "PYTHONPATH": str(broken)}
    serve_from(dep, cwd=tmp_path, env=env)
    try:
        result = sender.send()
        assert result.returncode == 1
        refusals = [line for line in result.stderr.splitlines() if "refused" in line]
        assert refusals, result.stderr
        for line in refusals:
            assert "retry later" in line and "the receiver cannot check files now" in line
            assert "not a valid data file" not in line and "crashed" not in line
        assert dep.loaded_hashes(sender) == {}
        logged = log_file.read_text()
        assert "the format check cannot run: its worker processes do not start" in logged
        assert "libtsfile.so: cannot open shared object file" in logged
        assert "crashed the format reader" not in logged
        # nothing is remembered against the files: the next round ships them again
        again = sender.send()
        assert again.returncode == 1 and "retry later" in again.stderr
    finally:
        assert dep.stop_receiver() == 0
    serve_from(dep, cwd=tmp_path)  # the installation repaired: the same files go through
    try:
        result = sender.send()
        assert result.returncode == 0, (result.stderr, dep.log())
        assert dep.loaded_hashes(sender) == sender.sealed_hashes()
    finally:
        assert dep.stop_receiver() == 0


def test_a_module_gone_from_under_the_pool_is_not_blamed_on_the_file(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """What the workers import is removed while the receiver runs (an upgrade in
    place): the check cannot start, which is said once, with its cause."""
    folder = tmp_path / "code"
    folder.mkdir()
    (folder / "vanishing_target.py").write_text(
        "from sealsync.formats.common import FileInfo\n"
        "def check(path):\n"
        "    return FileInfo(('root.d',), 1)\n"
    )
    sys.path.insert(0, str(folder))
    try:
        import vanishing_target  # type: ignore[import-not-found]

        (folder / "vanishing_target.py").unlink()
        shutil.rmtree(folder / "__pycache__", ignore_errors=True)
        caplog.set_level(logging.INFO, logger="sealsync")
        with InspectPool(workers=2, timeout=60.0, target=vanishing_target.check) as pool:
            paths = [tmp_path / f"{n}.tsfile" for n in ("a", "b", "c")]
            results = pool.inspect_many(paths)
            with pytest.raises(InspectUnavailable) as single:
                pool.inspect(tmp_path / "d.tsfile")
            assert pool.unavailable is not None
    finally:
        sys.path.remove(str(folder))
        sys.modules.pop("vanishing_target", None)
    assert all(isinstance(r, InspectUnavailable) for r in results), results
    assert isinstance(single.value, FormatError)  # it travels where a FormatError does
    assert "No module named 'vanishing_target'" in str(single.value)
    assert "crashed" not in str(single.value)
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1, [r.getMessage() for r in errors]  # once per outage
    assert "No module named 'vanishing_target'" in errors[0].getMessage()


def test_a_crashing_file_is_still_refused_as_the_files_own(tmp_path: Path) -> None:
    from receiver_inspect_targets import crashing_inspect

    with InspectPool(workers=1, timeout=60.0, target=crashing_inspect) as pool:
        with pytest.raises(FormatError) as crash:
            pool.inspect(tmp_path / "crash.tsfile")
        assert not isinstance(crash.value, InspectUnavailable)
        assert "crash.tsfile: the file crashed the format reader" in str(crash.value)
        assert pool.unavailable is None
        assert pool.inspect(tmp_path / "fine.tsfile").devices == ("root.fine",)


def test_the_host_environment_is_left_as_it_was(tmp_path: Path) -> None:
    """The workers start with PYTHONSAFEPATH, the host's environment does not keep it:
    the host's other children (scripts run beside their own modules) would lose the
    folder of their script on their import path."""
    assert "PYTHONSAFEPATH" not in os.environ
    bad = tmp_path / "x.tsfile"
    bad.write_bytes(b"not a tsfile")
    with InspectPool(workers=1, timeout=60.0) as pool, pytest.raises(FormatError):
        pool.inspect(bad)
    assert "PYTHONSAFEPATH" not in os.environ
