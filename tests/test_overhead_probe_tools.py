"""What the CPU and disk probes share: running a tool with its CPU time accounted, and
the folders they measure (filesystem type, a work folder that cleans up after itself)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from servebench.overhead.probes import ProbeContext, ProbeUnavailable
from servebench.overhead.probes.folders import disk_folders, filesystem_type, work_folder
from servebench.overhead.probes.tool import ToolFailed, require, run_tool

BUSY = (
    "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.3: pass\nprint('done')"
)


def test_run_tool_counts_the_childs_cpu_time() -> None:
    done = run_tool([sys.executable, "-c", BUSY], timeout_s=60)
    assert done.stdout == "done\n"
    assert done.cpu_s >= 0.3  # the child's own busy loop, at least
    assert done.wall_s >= 0.3


def test_run_tool_failure_is_one_line_with_the_tools_last_words() -> None:
    with pytest.raises(ToolFailed, match=r"^sh exited with status 3: second$"):
        run_tool(["sh", "-c", "echo first >&2; echo second >&2; exit 3"], timeout_s=60)


def test_run_tool_timeout() -> None:
    with pytest.raises(ToolFailed, match=r"sleep did not finish within 0\.2 s"):
        run_tool(["sleep", "5"], timeout_s=0.2)


def test_require_names_the_package() -> None:
    with pytest.raises(ProbeUnavailable, match=r"no-such-tool .* \(Debian package some-pkg\)"):
        require("no-such-tool", "some-pkg")


@pytest.mark.skipif(shutil.which("findmnt") is None, reason="util-linux findmnt is absent")
def test_filesystem_type_agrees_with_findmnt(tmp_path: Path) -> None:
    for path in (tmp_path, Path("/proc/self"), Path("/")):
        expected = subprocess.run(
            ["findmnt", "-n", "-o", "FSTYPE", "-T", str(path)],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        assert filesystem_type(path) == expected, path


def test_disk_folders_name_both_sides(tmp_path: Path) -> None:
    context = ProbeContext(scratch=tmp_path / "a", overlay=tmp_path / "b")
    assert disk_folders(context) == [("scratch", tmp_path / "a"), ("overlay", tmp_path / "b")]


def test_work_folder_is_removed_with_its_files_also_on_failure(tmp_path: Path) -> None:
    with work_folder(tmp_path, "x-") as folder:
        (folder / "sub").mkdir()
        (folder / "sub" / "f").write_bytes(b"1")
        assert folder.parent == tmp_path and folder.name.startswith("x-")
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(KeyError), work_folder(tmp_path, "y-") as folder:
        (folder / "f").write_bytes(b"1")
        raise KeyError("boom")
    assert list(tmp_path.iterdir()) == []
