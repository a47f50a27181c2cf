"""docker/images.sh's images hold what docker/README.md promises.

The Triton image serves with the versions of this venv, laid out like NVIDIA's image (its
serving, through `triton-docker`, is tested in test_servers_docker.py); the servebench image
runs this very interpreter and venv from read-only bind mounts, with the libraries their
compiled extensions link, the probes' tools and the host's BLAS. The container tests skip,
saying why, where no engine answers or the image is not built.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from servebench.common.wellknown import SERVEBENCH_IMAGE, TRITON_CPU_IMAGE
from servebench.servers.docker_engine import connect_docker, docker_engine_problem

ROOT = Path(__file__).resolve().parents[1]
ENGINE_PROBLEM = docker_engine_problem()
# What the host's hpcc links: the image must run HPL on the same BLAS implementation.
HOST_BLAS = "/usr/lib/x86_64-linux-gnu/libblas.so.3"


@pytest.fixture(scope="module")
def client() -> Any:
    if ENGINE_PROBLEM is not None:
        pytest.skip(ENGINE_PROBLEM)
    client = connect_docker(timeout_s=120)
    yield client
    client.close()


def run(client: Any, image: str, command: list[str], **kwargs: Any) -> str:
    """The output of `command` in a fresh container of `image`, removed afterwards."""
    from docker.errors import ImageNotFound

    try:
        client.images.get(image)
    except ImageNotFound:
        pytest.skip(f"the image {image} is not built here; run docker/images.sh")
    output = client.containers.run(image, command, init=True, remove=True, **kwargs)
    return output.decode()


def test_images_sh_refuses_an_unknown_target_in_one_line() -> None:
    done = subprocess.run(
        [ROOT / "docker" / "images.sh", "everything"], capture_output=True, text=True
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"usage: {ROOT / 'docker' / 'images.sh'} [base|triton|servebench|all] [--force]"
    ]


def test_triton_image_runs_this_venvs_versions_in_nvidias_layout(client: Any) -> None:
    script = (
        "import importlib.metadata as m, json, shutil; "
        "print(json.dumps({p: m.version(p) for p in ('nvidia-pytriton', 'onnxruntime', 'numpy')}"
        " | {'tritonserver': shutil.which('tritonserver')}))"
    )
    output = run(
        client,
        TRITON_CPU_IMAGE,
        [
            "sh",
            "-c",
            # --help prints the usage and exits 1, as the official binary does.
            "tritonserver --help 2>&1 | grep -q '^Usage: tritonserver' && "
            "test -x /opt/tritonserver/backends/python/triton_python_backend_stub && "
            "test -f /opt/tritonserver/backends/python/libtriton_python.so && "
            f'python -c "{script}"',
        ],
    )
    found = json.loads(output.strip().splitlines()[-1])
    for package in ("nvidia-pytriton", "onnxruntime", "numpy"):
        assert found[package] == importlib.metadata.version(package), package
    assert found["tritonserver"] == "/opt/tritonserver/bin/tritonserver"


def read_only_mounts() -> list[Any]:
    """This interpreter's prefix (unless it is the OS's /usr: the image has Debian's Python),
    and the project with its venv, at the same paths."""
    from docker.types import Mount

    folders = {ROOT, Path(sys.prefix).resolve()}
    if Path(sys.base_prefix).resolve() != Path("/usr"):
        folders.add(Path(sys.base_prefix).resolve())
    return [Mount(str(f), str(f), type="bind", read_only=True) for f in sorted(folders)]


def test_servebench_image_runs_this_interpreter_and_venv_with_the_probes_tools(
    client: Any,
) -> None:
    # tensorflow imports too (checked by hand) but takes ~10 s more on 2 busy cores and
    # links no system library the others do not.
    packages = ("numpy", "scipy", "torch", "onnxruntime", "servebench")
    script = (
        "import json, platform, ssl, sqlite3, ctypes, lzma, bz2, uuid, readline, decimal; "
        f"import scipy.sparse, {', '.join(packages)}; "
        "a = numpy.ones((64, 64)); "
        "print(json.dumps({'python': platform.python_version(), 'sum': float((a @ a).sum()), "
        f"'origins': [m.__file__ for m in ({', '.join(packages)})]}}))"
    )
    output = run(
        client,
        SERVEBENCH_IMAGE,
        [
            "sh",
            "-c",
            "for t in hpcc ioping fio mpirun ps; do command -v $t >/dev/null || exit 3; done; "
            "readlink -f /usr/lib/x86_64-linux-gnu/libblas.so.3; "
            f'"$0" -c "{script}"',
            sys.executable,
        ],
        mounts=read_only_mounts(),
        environment={"PYTHONDONTWRITEBYTECODE": "1"},
        network_disabled=True,
    )
    lines = output.strip().splitlines()
    if os.path.exists(HOST_BLAS):
        assert lines[0] == os.path.realpath(HOST_BLAS)
    found = json.loads(lines[-1])
    assert found["python"] == platform.python_version()
    assert found["sum"] == 64.0 * 64 * 64
    # Imported from this venv and project, not from anything inside the image.
    assert found["origins"] == [importlib.util.find_spec(p).origin for p in packages]
