"""`servebench.common.userfile`, the one reader of a user's file, on files numpy and the
file system make: an .npz read from its headers as numpy itself reads it, a folder copied
as it is or refused for what it must not hold. (Hostile files through the commands that
read them: tests/test_hostile_files.py.)"""

from __future__ import annotations

import os
import stat
import zipfile
from pathlib import Path

import numpy as np
import pytest

from servebench.common.userfile import (
    ByteLimit,
    NpzFile,
    UserFileError,
    copy_folder,
    scan_folder,
    within,
)

PLENTY = ByteLimit(2**30, "a test's limit")


@pytest.mark.parametrize("save", [np.savez, np.savez_compressed])
def test_an_npz_reads_as_numpy_reads_it(save, tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    arrays = {
        "x": rng.standard_normal((5, 3, 2)).astype(np.float32),
        "fortran": np.asfortranarray(rng.standard_normal((4, 6))),
        "counts": rng.integers(-9, 9, (7,), dtype=np.int16).astype(">i2"),
        "mask": rng.integers(0, 2, (2, 2)).astype(bool),
        "empty": np.zeros((0, 3), np.float16),
    }
    path = tmp_path / "data.npz"
    save(path, **arrays)
    with NpzFile(path, PLENTY) as npz, np.load(path) as reference:
        assert sorted(npz.headers) == sorted(arrays)
        for key in arrays:
            got = npz.read(key)
            assert got.dtype == reference[key].dtype and got.shape == reference[key].shape
            np.testing.assert_array_equal(got, reference[key])
        assert npz.headers["x"].nbytes == arrays["x"].nbytes


def test_an_npz_is_refused_for_what_numpy_would_unpickle_or_not_read(tmp_path: Path) -> None:
    objects = tmp_path / "objects.npz"
    np.savez(objects, x=np.array([{"a": 1}, None], dtype=object))
    with pytest.raises(UserFileError, match="holds object values, not plain numbers"):
        NpzFile(objects, PLENTY)
    foreign = tmp_path / "foreign.npz"
    with zipfile.ZipFile(foreign, "w") as archive:
        archive.writestr("notes.txt", "hello")
    with pytest.raises(UserFileError, match=r"'notes.txt' is not an \.npy array"):
        NpzFile(foreign, PLENTY)
    arrays = tmp_path / "big.npz"  # a few hundred bytes that inflate to 8,000
    np.savez_compressed(arrays, x=np.zeros(1000, np.float64))
    with pytest.raises(UserFileError, match=r"declares arrays of 8,000 bytes; the most is 4,000"):
        NpzFile(arrays, ByteLimit(4000, "a test's limit"))


def _folder(root: Path) -> Path:
    folder = root / "model"
    (folder / "1" / "nested").mkdir(parents=True)
    (folder / "config.pbtxt").write_text('name: "m"\n')
    (folder / "1" / "model.py").write_text("# model\n")
    (folder / "1" / "nested" / "weights.bin").write_bytes(bytes(range(256)) * 64)
    os.chmod(folder / "1" / "model.py", 0o750)
    return folder


def test_a_folder_is_copied_as_it_is(tmp_path: Path) -> None:
    folder = _folder(tmp_path)
    assert scan_folder(folder, PLENTY) == sum(p.stat().st_size for p in folder.rglob("*.*"))
    copy_folder(folder, tmp_path / "copy" / "m", PLENTY)
    for path in folder.rglob("*"):
        twin = tmp_path / "copy" / "m" / path.relative_to(folder)
        assert twin.is_dir() == path.is_dir()
        if path.is_file():
            assert twin.read_bytes() == path.read_bytes()
    mode = (tmp_path / "copy" / "m" / "1" / "model.py").stat().st_mode
    assert stat.S_IMODE(mode) == 0o750


def test_a_folder_is_refused_for_a_link_a_fifo_or_its_size(tmp_path: Path) -> None:
    folder = _folder(tmp_path)
    with pytest.raises(UserFileError, match=r"holds at least .*the most is 1,000 bytes"):
        scan_folder(folder, ByteLimit(1000, "a test's limit"))
    with pytest.raises(UserFileError, match="holds more than 1,000 bytes"):
        copy_folder(folder, tmp_path / "small-copy", ByteLimit(1000, "a test's limit"))
    (folder / "1" / "inside.bin").symlink_to("nested/weights.bin")  # a link inside, too
    with pytest.raises(UserFileError, match=r"1/inside.bin: a link \(to nested/weights.bin\)"):
        scan_folder(folder, PLENTY)
    with pytest.raises(UserFileError, match=r"inside\.bin: a link"):
        copy_folder(folder, tmp_path / "copy", PLENTY)
    (folder / "1" / "inside.bin").unlink()
    os.mkfifo(folder / "pipe")
    with pytest.raises(UserFileError, match="pipe: a fifo"):
        scan_folder(folder, PLENTY)


def test_a_file_a_model_names_stays_inside_its_folder(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "w.bin").write_bytes(b"1234")
    assert within(tmp_path, "data/w.bin", "m.onnx") == tmp_path / "data" / "w.bin"
    for outside in ("../w.bin", "/etc/hostname", "data/../../w.bin"):
        with pytest.raises(UserFileError, match="is not a path inside"):
            within(tmp_path, outside, "m.onnx")
    (tmp_path / "linked").symlink_to("data")
    with pytest.raises(UserFileError, match="linked: a link"):
        within(tmp_path, "linked/w.bin", "m.onnx")
    with pytest.raises(UserFileError, match="No such file"):
        within(tmp_path, "data/missing.bin", "m.onnx")
