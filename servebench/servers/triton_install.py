"""Find the `tritonserver` shipped in the nvidia-pytriton wheel and prepare it to run.

The wheel lays out the binary, the python backend and one python-backend stub per Python
version; this module turns that layout into a runnable set: a private backends folder
holding the stub for this interpreter (site-packages is never written to) and the
environment without which the server fails in ways that look unrelated (ENVIRONMENT.md).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import shutil
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

from servebench.servers.errors import ServerStartError

INSTALL_HINT = "install it with: pip install 'nvidia-pytriton>=0.7' 'numpy<2'"


class TritonNotInstalledError(ServerStartError):
    """The bundled tritonserver (or something it needs) is missing; says how to install.

    A start error like any other to callers of a server; its own class for callers that
    skip instead of failing (the tests, where the wheel is absent)."""


@dataclass(frozen=True)
class TritonInstall:
    """Paths inside an installed nvidia-pytriton wheel."""

    root: Path  # <site-packages>/pytriton/tritonserver
    libs: Path  # <site-packages>/nvidia_pytriton.libs

    @property
    def binary(self) -> Path:
        return self.root / "bin" / "tritonserver"

    @property
    def stub(self) -> Path:
        version = f"{sys.version_info.major}.{sys.version_info.minor}"
        return self.root / "python_backend_stubs" / version / "triton_python_backend_stub"

    @classmethod
    def locate(cls) -> TritonInstall:
        """The install for this interpreter, or `TritonNotInstalledError` saying what lacks."""
        spec = importlib.util.find_spec("pytriton")
        if spec is None or not spec.submodule_search_locations:
            raise TritonNotInstalledError(
                f"the nvidia-pytriton wheel is not installed; {INSTALL_HINT}"
            )
        package = Path(next(iter(spec.submodule_search_locations)))
        install = cls(root=package / "tritonserver", libs=package.parent / "nvidia_pytriton.libs")
        for what, path in [
            ("tritonserver binary", install.binary),
            ("python backend", install.root / "backends" / "python" / "libtriton_python.so"),
            (
                f"python-backend stub for Python {sys.version_info.major}.{sys.version_info.minor}",
                install.stub,
            ),
            ("bundled libraries", install.libs),
        ]:
            if not path.exists():
                raise TritonNotInstalledError(f"{what} not found at {path}; {INSTALL_HINT}")
        numpy_version = importlib.metadata.version("numpy")
        if int(numpy_version.split(".")[0]) >= 2:
            # Measured: with numpy 2 the python backend returns zeros or empty outputs
            # without a log line, so refuse instead of producing wrong benchmark answers.
            raise TritonNotInstalledError(
                f"numpy {numpy_version} is installed; Triton's python backend needs numpy<2 "
                f"(it silently returns zeros with numpy 2); {INSTALL_HINT}"
            )
        return install

    def prepare_backends(self, dest: Path) -> Path:
        """Copy the backends folder to `dest` with this Python's stub inside; return `dest`.

        An earlier copy is removed first rather than written over: a stub of a server that
        was killed may still be executing from it, and writing into a running executable
        fails with ETXTBSY, while unlinking it does not.
        """
        shutil.rmtree(dest, ignore_errors=True)
        shutil.copytree(
            self.root / "backends",
            dest,
            ignore=shutil.ignore_patterns("__pycache__"),
        )
        shutil.copy2(self.stub, dest / "python" / "triton_python_backend_stub")
        return dest

    def environment(self, base: dict[str, str] | None = None) -> dict[str, str]:
        """The server's environment: bundled libs and this libpython, this venv first on PATH.

        Without the bundled libs a model load hangs forever; without this interpreter's
        LIBDIR the stub binds the system libpython and model setup fails; the stub finds
        the venv's packages (numpy, onnxruntime) through the `python` first on PATH.
        """
        env = dict(os.environ if base is None else base)
        libdir = sysconfig.get_config_var("LIBDIR") or ""
        lib_path = [str(self.libs), libdir, env.get("LD_LIBRARY_PATH", "")]
        env["LD_LIBRARY_PATH"] = os.pathsep.join(p for p in lib_path if p)
        venv_bin = str(Path(sys.executable).parent)  # not resolved: the venv's bin, not pyenv's
        env["PATH"] = os.pathsep.join(p for p in (venv_bin, env.get("PATH", "")) if p)
        return env
