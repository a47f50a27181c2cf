"""Read a user's file — a model file, a model folder, input data — within limits checked
before anything is read, and never through a link inside it.

`servebench models import`, `scenario validate`/`run` (`models.files`, `workload.inputs`)
and `servebench load --input-data` read files that someone else may have made: a
downloaded model folder, an `.npz` from a colleague. Reading one must not be able to fill
the memory or the disk, nor to pull in a file from elsewhere on the machine, so every
reader of such a file goes through this module:

- **Sizes before reading.** A file's size (`check_file`), a zip's directory — the sum of its
  members' uncompressed sizes (`zip_members`: `.keras`, TorchScript and `.pt2` files) — an
  `.npz`'s array headers (`NpzFile`: each member's `.npy` header, read from the zip without
  inflating its data) and a folder's files (`scan_folder`) are checked against the limit
  the caller gives (a scenario's `limits.max_model_mb`, say, or the command line's default
  from `common.limits`) before a library loads a byte of them. The zip directory's sizes
  bound what inflating can produce: Python's zip reader stops at a member's declared size.
- **Links.** A path the user names (on the command line, in a scenario) may itself be a
  link: it is what they chose, and it is followed once, to a regular file or a folder.
  Inside a folder no link is followed, copied or read, even one to a file in the same
  folder: each is refused by name, with where it points. (A link inside is rarely useful in
  a model folder, a target can change between a check and a copy, and a copy would bring
  along whatever it pointed at.) Devices, fifos and sockets are refused wherever they are.
- **One line.** Every refusal is a `UserFileError` (a `ValueError`) whose message is one
  line naming the file, and the limit where one was passed.

The copy of a folder (`copy_folder`) walks it again with file descriptors (`os.fwalk`,
`O_NOFOLLOW`) and counts what it copies, so a folder changed after its scan still cannot
bring a link or more bytes into the copy.
"""

from __future__ import annotations

import math
import os
import stat
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np

from servebench.common.errors import ServebenchError
from servebench.common.limits import MAX_FOLDER_ENTRIES

MIB = 2**20
_CHUNK = MIB  # bytes per read of an .npz member
_SEND = 64 * MIB  # bytes per sendfile when copying a file (in the kernel, no user buffer)
_NPY_SUFFIX = ".npy"
# The largest .npy header numpy reads by default (`numpy.lib.format`'s own bound).
_MAX_NPY_HEADER = 10_000


class UserFileError(ServebenchError, ValueError):
    """A user's file that is refused before (or while) it is read; one line naming it."""


@dataclass(frozen=True)
class ByteLimit:
    """The most bytes a file may hold or declare, and what sets that bound (for the
    message: `limits.max_model_mb` says how to raise it)."""

    bytes: int
    name: str

    def check(self, where: object, size: int, what: str) -> None:
        """Refuse `size` (what `where` holds or declares, described by `what`) above it."""
        if size > self.bytes:
            raise UserFileError(
                f"{where}: {what} {show_bytes(size)}; the most is {show_bytes(self.bytes)} "
                f"({self.name})"
            )


def mib_limit(mib: float, name: str) -> ByteLimit:
    """A limit given in MiB, as the scenario's `limits` give them."""
    return ByteLimit(int(mib * MIB), name)


def show_bytes(size: int) -> str:
    """A size as a person reads it: 236 bytes, 12.3 MiB, 4 GiB."""
    if size < 10 * 1024:
        return f"{size:,} bytes"
    for unit, scale in (("GiB", 2**30), ("MiB", MIB), ("KiB", 1024)):
        if size >= scale:
            return f"{size / scale:,.4g} {unit}"
    return f"{size:,} bytes"  # pragma: no cover (sizes below 10 KiB returned above)


# -- what is on disk -----------------------------------------------------------------------


def _kind(mode: int) -> str:
    """What a stat's mode is, in words, for refusals."""
    for test, words in (
        (stat.S_ISREG, "a regular file"),
        (stat.S_ISDIR, "a folder"),
        (stat.S_ISLNK, "a link"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISFIFO, "a fifo"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return words
    return "not a regular file"


def _named(path: Path) -> os.stat_result:
    """The stat of what the user named, a link they named followed; a dangling link, a
    loop or a missing path is one line."""
    try:
        return os.stat(path)
    except FileNotFoundError:
        if os.path.islink(path):
            raise UserFileError(
                f"{path}: a link to {os.readlink(path)}, which does not exist"
            ) from None
        raise UserFileError(f"{path}: no such file or folder") from None
    except OSError as err:  # ELOOP: a link loop; EACCES
        raise UserFileError(f"{path}: cannot read it ({err.strerror or err})") from None


def check_file(path: str | Path, limit: ByteLimit, what: str) -> int:
    """The size of the regular file `path` names (`what` it should be, for messages: "an
    ONNX model"); refused when it is missing, a dangling link, a device or other
    non-regular file, empty, or larger than `limit`."""
    path = Path(path)
    return _regular(path, _named(path), limit, what)


def open_file(path: str | Path, limit: ByteLimit, what: str) -> BinaryIO:
    """The regular file `path` names, open for reading, after `check_file`'s checks, made
    on the open file itself (opening a fifo does not wait for a writer)."""
    path = Path(path)
    check_file(path, limit, what)
    descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        _regular(path, os.fstat(descriptor), limit, what)  # what was opened, not its name
        os.set_blocking(descriptor, True)
        return os.fdopen(descriptor, "rb")
    except BaseException:
        os.close(descriptor)
        raise


def _regular(path: Path, info: os.stat_result, limit: ByteLimit, what: str) -> int:
    if not stat.S_ISREG(info.st_mode):
        raise UserFileError(f"{path}: {_kind(info.st_mode)}, not {what}")
    if info.st_size == 0:
        raise UserFileError(f"{path}: empty (0 bytes), not {what}")
    limit.check(path, info.st_size, "holds")
    return info.st_size


def is_folder(path: str | Path) -> bool:
    """Whether `path` names a folder (a link the user named followed); missing paths,
    dangling links and loops are refused as `check_file` refuses them."""
    return stat.S_ISDIR(_named(Path(path)).st_mode)


def named_folder(path: str | Path) -> Path:
    """The folder `path` names, a link the user named resolved (the walks below follow no
    link, the top one included)."""
    path = Path(path)
    info = _named(path)
    if not stat.S_ISDIR(info.st_mode):
        raise UserFileError(f"{path}: {_kind(info.st_mode)}, not a folder")
    return Path(os.path.realpath(path))


def within(folder: Path, relative: str, where: str) -> Path:
    """`folder/relative`, a file a model inside `folder` names (an ONNX file's external
    data): refused when it leaves the folder, when any part of it is a link, or when it is
    not a regular file. `where` names who names it, for messages."""
    parts = Path(relative).parts
    if not parts or Path(relative).is_absolute() or ".." in parts:
        raise UserFileError(f"{where}: {relative!r} is not a path inside {folder}")
    current = folder
    for i, part in enumerate(parts):
        current = current / part
        try:
            info = os.lstat(current)
        except OSError as err:
            raise UserFileError(f"{where}: {current}: {err.strerror or err}") from None
        if stat.S_ISLNK(info.st_mode):
            raise UserFileError(_link_message(current, os.readlink(current)))
        last = i == len(parts) - 1
        if last and not stat.S_ISREG(info.st_mode):
            raise UserFileError(f"{where}: {current}: {_kind(info.st_mode)}, not a data file")
        if not last and not stat.S_ISDIR(info.st_mode):
            raise UserFileError(f"{where}: {current}: {_kind(info.st_mode)}, not a folder")
    return current


def _link_message(path: Path, target: str) -> str:
    return (
        f"{path}: a link (to {target}); servebench follows no link inside a model folder: "
        "put the file itself there"
    )


# -- folders -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Entry:
    """One entry of a walked folder: its path relative to the folder, and its stat."""

    relative: Path
    info: os.stat_result


def _walk(path: Path) -> Iterator[tuple[Entry, int]]:
    """Every entry below the folder `path` names, without following any link, with the fd
    of the folder that holds it; the first link, device, fifo or socket is refused (named
    as the user would: under `path`)."""
    top = named_folder(path)

    def fail(err: OSError) -> None:
        raise UserFileError(f"{path}: cannot read {err.filename} ({err.strerror or err})")

    for folder, dirnames, filenames, folder_fd in os.fwalk(
        top, follow_symlinks=False, onerror=fail
    ):
        relative = Path(folder).relative_to(top)
        for name in sorted(dirnames + filenames):
            info = os.stat(name, dir_fd=folder_fd, follow_symlinks=False)
            shown = path / relative / name
            if stat.S_ISLNK(info.st_mode):
                raise UserFileError(_link_message(shown, os.readlink(name, dir_fd=folder_fd)))
            if not (stat.S_ISREG(info.st_mode) or stat.S_ISDIR(info.st_mode)):
                raise UserFileError(
                    f"{shown}: {_kind(info.st_mode)}; a model folder holds only files and folders"
                )
            yield Entry(relative / name, info), folder_fd


def scan_folder(path: str | Path, limit: ByteLimit) -> int:
    """The bytes of the regular files below the folder `path` names, after refusing any
    link, device, fifo or socket in it, more than `MAX_FOLDER_ENTRIES` entries, or more
    bytes than `limit`. Reads no file."""
    path = Path(path)
    total = 0
    for entries, (entry, _) in enumerate(_walk(path), start=1):
        if entries > MAX_FOLDER_ENTRIES:
            raise UserFileError(
                f"{path}: more than {MAX_FOLDER_ENTRIES:,} files and folders; not a model folder"
            )
        if stat.S_ISREG(entry.info.st_mode):
            total += entry.info.st_size
            limit.check(path, total, "holds at least")
    return total


def copy_folder(path: str | Path, target: str | Path, limit: ByteLimit) -> None:
    """Copy the folder `path` names to `target` (which must not exist): its folders and
    regular files, their permission bits, nothing else. Each file is opened without
    following a link and checked again as it is copied, and the bytes copied are held to
    `limit`, so what `scan_folder` passed cannot have changed into something worse.

    Written here rather than with `shutil.copytree`, which follows links to files (or
    copies them as links) and copies devices' contents: it cannot be told to refuse them.
    """
    path, target = Path(path), Path(target)
    target.mkdir(parents=True)
    left = limit.bytes
    for entry, folder_fd in _walk(path):
        destination = target / entry.relative
        if stat.S_ISDIR(entry.info.st_mode):
            destination.mkdir()
            continue
        copied = _copy_file(entry.relative.name, folder_fd, destination, left + 1)
        if copied > left:
            raise UserFileError(f"{path}: holds more than {show_bytes(limit.bytes)} ({limit.name})")
        left -= copied


def _copy_file(name: str, folder_fd: int, destination: Path, most: int) -> int:
    """Copy the regular file `name` (in the folder `folder_fd`), at most `most` bytes;
    refuses a link or anything but a regular file found there now. Returns bytes copied."""
    try:
        source = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=folder_fd)
    except OSError as err:  # ELOOP: it became a link since the walk listed it
        raise UserFileError(f"{destination.name}: cannot read it ({err.strerror or err})") from None
    try:
        info = os.fstat(source)
        if not stat.S_ISREG(info.st_mode):
            raise UserFileError(f"{name}: {_kind(info.st_mode)}, not a regular file")
        copied = 0
        with open(destination, "xb") as out:
            while copied < most:  # what shutil.copyfile does on Linux, with a bound
                sent = os.sendfile(out.fileno(), source, None, min(_SEND, most - copied))
                if not sent:
                    break
                copied += sent
            os.fchmod(out.fileno(), stat.S_IMODE(info.st_mode) | stat.S_IRUSR | stat.S_IWUSR)
        return copied
    finally:
        os.close(source)


# -- zip files -----------------------------------------------------------------------------


def zip_members(path: str | Path, limit: ByteLimit, what: str) -> list[zipfile.ZipInfo]:
    """The directory of the zip file `path` names (`.keras`, TorchScript, `.pt2`), after
    `check_file` and a check that its members' uncompressed sizes together stay within
    `limit`: a few MB of zip can declare gigabytes. Reads no member."""
    path = Path(path)
    check_file(path, limit, what)
    try:
        with zipfile.ZipFile(path) as archive:
            members = archive.infolist()
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, ValueError) as err:
        raise UserFileError(f"{path}: not {what} (not a zip archive: {err})") from None
    limit.check(path, sum(m.file_size for m in members), "inflates to")
    return members


# -- .npz ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class NpyHeader:
    """What an `.npy` member declares: its shape and dtype, and where its data begins."""

    shape: tuple[int, ...]
    dtype: np.dtype
    fortran_order: bool
    data_offset: int  # bytes of magic and header before the data

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.dtype.itemsize


class NpzFile:
    """An `.npz` file (numpy's `savez`/`savez_compressed`) opened once, its arrays' headers
    read and checked before any array is read.

    `headers` maps each array's key (its member name without `.npy`) to what it declares.
    Opening checks `check_file`, that every member is an `.npy` array of plain numbers
    (no objects: nothing is unpickled), that each member's size in the zip directory is
    its header plus the data the header declares (so inflating it yields exactly that),
    and that the arrays together declare at most `limit`. `read(key)` then reads one
    array, from the same open file.

    Not `numpy.load`: an `NpzFile` of numpy allocates what each member's header declares
    as it reads it (a 250-byte file declaring 1e9 x 16 floats asks for 60 GiB), and
    checks nothing against the zip directory.
    """

    def __init__(self, path: str | Path, limit: ByteLimit) -> None:
        self.path = Path(path)
        self._file = open_file(self.path, limit, "an .npz file")
        try:
            self._zip = zipfile.ZipFile(self._file)
            self.headers = self._read_headers(limit)
        except zipfile.BadZipFile as err:
            self.close()
            raise UserFileError(
                f"{self.path}: not an .npz file (not a zip archive: {err})"
            ) from None
        except BaseException:
            self.close()
            raise

    def _read_headers(self, limit: ByteLimit) -> dict[str, NpyHeader]:
        headers: dict[str, NpyHeader] = {}
        self._members: dict[str, zipfile.ZipInfo] = {}
        for member in self._zip.infolist():
            if member.is_dir():
                continue
            key = member.filename.removesuffix(_NPY_SUFFIX)
            where = f"{self.path}: member {member.filename!r}"
            if not member.filename.endswith(_NPY_SUFFIX):
                raise UserFileError(f"{where} is not an .npy array")
            if key in headers:
                raise UserFileError(f"{where} is in the file twice")
            header = self._header(member, where)
            if member.file_size != header.data_offset + header.nbytes:
                raise UserFileError(
                    f"{where}: its header declares {list(header.shape)} {header.dtype} "
                    f"({show_bytes(header.nbytes)}) but the zip holds "
                    f"{show_bytes(member.file_size)} for it"
                )
            headers[key] = header
            self._members[key] = member
        limit.check(self.path, sum(h.nbytes for h in headers.values()), "declares arrays of")
        return headers

    def _header(self, member: zipfile.ZipInfo, where: str) -> NpyHeader:
        """The member's `.npy` header, read from its first bytes (inflating those only)."""
        read_header = {
            (1, 0): np.lib.format.read_array_header_1_0,
            (2, 0): np.lib.format.read_array_header_2_0,
        }
        try:
            with self._zip.open(member) as stream:
                version = np.lib.format.read_magic(stream)
                if version not in read_header:
                    raise ValueError(f"unsupported .npy version {version}")
                shape, fortran, dtype = read_header[version](
                    stream, max_header_size=_MAX_NPY_HEADER
                )
                offset = stream.tell()
        except (ValueError, OSError, EOFError, zipfile.BadZipFile, NotImplementedError) as err:
            raise UserFileError(f"{where}: not an .npy array ({err})") from None
        if dtype.hasobject or dtype.fields is not None or dtype.itemsize == 0:
            raise UserFileError(f"{where}: holds {dtype} values, not plain numbers")
        return NpyHeader(tuple(int(d) for d in shape), dtype, bool(fortran), offset)

    def read(self, key: str) -> np.ndarray:
        """The array `key`, as its (checked) header declares it."""
        header, member = self.headers[key], self._members[key]
        array = np.empty(header.nbytes, np.uint8)
        try:
            with self._zip.open(member) as stream:
                stream.read(header.data_offset)
                view, filled = memoryview(array), 0
                while filled < header.nbytes:
                    got = stream.readinto(view[filled : filled + _CHUNK])
                    if not got:
                        break
                    filled += got
        except (OSError, EOFError, zipfile.BadZipFile) as err:  # a bad CRC, a torn file
            raise UserFileError(f"{self.path}: member {member.filename!r}: {err}") from None
        if filled != header.nbytes:
            raise UserFileError(f"{self.path}: member {member.filename!r} is cut short")
        values = array.view(header.dtype)
        if header.fortran_order:
            return values.reshape(header.shape[::-1]).transpose()
        return values.reshape(header.shape)

    def close(self) -> None:
        if getattr(self, "_zip", None) is not None:
            self._zip.close()
        self._file.close()

    def __enter__(self) -> NpzFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
