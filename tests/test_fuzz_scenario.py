"""Fuzz `servebench scenario validate` with malformed scenario files (issue 10, acceptance).

A seeded mutator turns the shipped `scenarios/*.yaml` into broken files (byte flips,
deletions, duplicated lines, swapped types, huge numbers, deep nesting, alias bombs, bad
bytes, ...). One child process runs the real CLI command on each file through typer's
CliRunner, under an address-space limit and a per-file time limit, and reports what
happened. Every file must be either accepted (exit 0) or refused with the project's clean
errors (exit 2, `error:` lines, no traceback), within the time and memory limits.

Deterministic: case `i` is always the same file. To reproduce one, or to fuzz longer:

    .venv/bin/python tests/test_fuzz_scenario.py --cases 2000 [--keep DIR] [--only 17,42]
"""

from __future__ import annotations

import argparse
import json
import random
import re
import resource
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SCENARIOS = sorted((REPO / "scenarios").glob("*.yaml"))
SEED = 20261130
CASES = 140  # each kind on each shipped scenario once: 6-10 s on 2 busy cores
# Per file: CPU seconds of the child's own (a busy machine stretches wall time, not these;
# a valid scenario takes well under 0.2 s), and wall seconds for a file that would block
# rather than compute.
TIME_LIMIT_S = 5.0
WALL_LIMIT_S = 60.0
MEMORY_LIMIT_BYTES = 1 << 30  # address space the child may add after its imports

Mutator = Callable[[random.Random, bytes], bytes]


def _lines(data: bytes) -> list[bytes]:
    return data.splitlines(keepends=True)


def byte_flip(rng: random.Random, data: bytes) -> bytes:
    out = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        out[rng.randrange(len(out))] = rng.randrange(256)
    return bytes(out)


def delete_span(rng: random.Random, data: bytes) -> bytes:
    start = rng.randrange(len(data))
    return data[:start] + data[start + rng.randint(1, 40) :]


def truncate(rng: random.Random, data: bytes) -> bytes:
    return data[: rng.randrange(len(data))]


def duplicate_line(rng: random.Random, data: bytes) -> bytes:
    lines = _lines(data)
    i = rng.randrange(len(lines))
    return b"".join(lines[: i + 1] + [lines[i]] * rng.randint(1, 3) + lines[i + 1 :])


def delete_line(rng: random.Random, data: bytes) -> bytes:
    lines = _lines(data)
    del lines[rng.randrange(len(lines))]
    return b"".join(lines)


def reindent(rng: random.Random, data: bytes) -> bytes:
    lines = _lines(data)
    i = rng.randrange(len(lines))
    lines[i] = b" " * rng.choice([0, 1, 3, 6, 8]) + lines[i].lstrip(b" ")
    return b"".join(lines)


TYPE_SWAPS = [
    b"[]", b"{}", b"null", b"~", b"true", b"no", b"''", b"text", b"-1", b"0", b"0.0",
    b"[1, [2, [3]]]", b"{a: 1}", b"!!binary aGk=", b"2001-12-14", b"2001-13-45", b"!!int x",
    b"!!str", b"!!set {a}", b"!!omap [a: 1]", b"&x y", b"*undefined", b"<<", b"=", b"|\n x",
    b"!!python/object/apply:os.system ['true']", b"'\\u0000'", b"\"\\x00\"", b"@", b"`", b"%",
]  # fmt: skip

HUGE_NUMBERS = [
    b"1e400", b"-1e400", b"1e26", b"-1e26", b"1e308", b".inf", b"-.inf", b".nan",
    b"100000000", b"9" * 400, b"1" * 5000, b"0x" + b"f" * 5000, b"1e-400", b"1_000_000_000",
    b"[1e26]", b"[1e400, .nan]", b"2e9", b"-0", b"4294967297", b"1:2:3:4:5:6:7:8:9",
]  # fmt: skip


def _replace_value(rng: random.Random, data: bytes, choices: list[bytes]) -> bytes:
    """Swap the value after a random `key:` (or a random list item) for another kind."""
    lines = _lines(data)
    candidates = [
        i for i, line in enumerate(lines) if b": " in line or line.lstrip().startswith(b"- ")
    ]
    if not candidates:  # a stacked mutation may have left no `key: value` line
        return data + b"\nkey: " + rng.choice(choices) + b"\n"
    i = rng.choice(candidates)
    line = lines[i].rstrip(b"\n")
    cut = line.index(b": ") + 2 if b": " in line else line.index(b"- ") + 2
    lines[i] = line[:cut] + rng.choice(choices) + b"\n"
    return b"".join(lines)


def type_swap(rng: random.Random, data: bytes) -> bytes:
    return _replace_value(rng, data, TYPE_SWAPS)


def huge_number(rng: random.Random, data: bytes) -> bytes:
    return _replace_value(rng, data, HUGE_NUMBERS)


def number_in_list(rng: random.Random, data: bytes) -> bytes:
    """Replace every number inside one `[...]` flow list with a huge or odd one."""
    lines = _lines(data)
    candidates = [
        i for i, line in enumerate(lines) if b"[" in line and any(c in b"0123456789" for c in line)
    ]
    if not candidates:
        return huge_number(rng, data)
    i = rng.choice(candidates)
    head, _, tail = lines[i].partition(b"[")
    items, _, rest = tail.partition(b"]")
    swapped = b", ".join(rng.choice(HUGE_NUMBERS).strip(b"[]") for _ in items.split(b","))
    lines[i] = head + b"[" + swapped + b"]" + rest
    return b"".join(lines)


def deep_nesting(rng: random.Random, data: bytes) -> bytes:
    depth = rng.choice([40, 99, 100, 101, 1000, 5000, 50000])
    opening, closing = rng.choice([(b"[", b"]"), (b"{a: ", b"}")])
    value = opening * depth + b"1" + closing * depth * rng.choice([0, 1])  # closed or not
    return _replace_value(rng, data, [value])


def block_nesting(rng: random.Random, data: bytes) -> bytes:
    depth = rng.choice([50, 120, 1000])
    nested = b"".join(b"  " * (i + 1) + b"k%d:\n" % i for i in range(depth))
    return data + b"extra:\n" + nested + b"  " * (depth + 1) + b"x: 1\n"


def _bomb(levels: int, fan_out: int, merge: bool) -> bytes:
    lines = [b"a0: &a0 [lol, lol]"]
    for level in range(1, levels + 1):
        refs = b", ".join([b"*a%d" % (level - 1)] * fan_out)
        if merge:
            keys = b", ".join(b"k%d: *a%d" % (j, level - 1) for j in range(fan_out))
            lines.append(b"a%d: &a%d {<<: *a%d, %s}" % (level, level, level - 1, keys))
            lines[0] = b"a0: &a0 {x: lol}"
        else:
            lines.append(b"a%d: &a%d [%s]" % (level, level, refs))
    return b"\n".join(lines) + b"\n"


def alias_bomb(rng: random.Random, data: bytes) -> bytes:
    levels, fan_out = rng.choice([(3, 3), (6, 10), (9, 9), (12, 5), (30, 2)])
    bomb = _bomb(levels, fan_out, merge=rng.random() < 0.3)
    if rng.random() < 0.5:  # the bomb in place of a value, as an unknown section
        return data + b"x-bomb:\n" + b"".join(b"  " + line for line in _lines(bomb))
    return bomb + data


def recursive_alias(rng: random.Random, data: bytes) -> bytes:
    anchor = rng.choice([b"&r [*r]", b"&r {a: *r}", b"&r {<<: *r}", b"&r [1, [2, *r]]"])
    return _replace_value(rng, data, [anchor])


def alias_reuse(rng: random.Random, data: bytes) -> bytes:
    """Legitimate-looking anchors and merges: `&srv` on a server, `<<: *srv` in another."""
    text = data.replace(b"  - name: ", b"  - &srv\n    name: ", 1)
    if b"&srv" not in text:
        return type_swap(rng, data)
    extra = rng.choice([b"  - <<: *srv\n    name: copy\n", b"  - *srv\n", b"  - {<<: *srv}\n"])
    return text.replace(b"\nworkload:", b"\n" + extra + b"workload:", 1)


def bad_bytes(rng: random.Random, data: bytes) -> bytes:
    at = rng.randrange(len(data))
    junk = rng.choice(
        [b"\xe9", b"\xff\xfe", b"\xc3", b"\x00", b"\x1b[31m", b"\xef\xbb\xbf", b"\x85"]
    )
    return data[:at] + junk + data[at:]


def duplicate_key(rng: random.Random, data: bytes) -> bytes:
    lines = _lines(data)
    keyed = [
        i for i, line in enumerate(lines) if b": " in line and not line.lstrip().startswith(b"#")
    ]
    if not keyed:
        return data + data
    i = rng.choice(keyed)
    return b"".join([*lines[: i + 1], lines[i], *lines[i + 1 :]])


def odd_keys(rng: random.Random, data: bytes) -> bytes:
    key = rng.choice([b"1", b"true", b"null", b"[a]", b"? {a: 1}\n", b"1.0", b"'<<'", b"!!float 1"])
    return data + key + b": x\n"


def splice(rng: random.Random, data: bytes) -> bytes:
    """Half of this file with half of another shipped scenario."""
    other = rng.choice(SCENARIOS).read_bytes()
    return data[: rng.randrange(len(data))] + other[rng.randrange(len(other)) :]


def stack(rng: random.Random, data: bytes) -> bytes:
    for mutate in rng.sample(SIMPLE, 3):
        data = mutate(rng, data) or b"\n"  # the byte mutators need a byte to work on
    return data


SIMPLE: list[Mutator] = [
    byte_flip, delete_span, truncate, duplicate_line, delete_line, reindent, type_swap,
    huge_number, number_in_list, bad_bytes, duplicate_key, odd_keys,
]  # fmt: skip
MUTATORS: list[Mutator] = [
    *SIMPLE, deep_nesting, block_nesting, alias_bomb, recursive_alias, alias_reuse, splice, stack,
]  # fmt: skip

# Files a scenario points to, each read at validation: a link profile, the Mahimahi trace of
# a profile, a request-intervals trace, and the family.yaml of a model export folder.
PROFILE = b"rtt_s: 0.04\ndown_mbps: 50\nup_mbps: 10\n"
MAHIMAHI = b"1\n1\n2\n3\n5\n8\n"
INTERVALS = b"1000\n2000\n500\n"
FAMILY = b"- layer_type: dense\n  depth: 2\n  width: 32\n  input_shape: [16]\n"
LINKED_MUTATORS: list[Mutator] = [
    bad_bytes, byte_flip, truncate, delete_line, duplicate_line, type_swap, huge_number,
    duplicate_key, alias_bomb, recursive_alias, deep_nesting,
]  # fmt: skip


def linked_files(rng: random.Random, data: bytes, stem: str) -> dict[str, bytes]:
    """A scenario that is fine itself but points to a broken file beside it (`.yml`)."""
    bad = rng.choice(LINKED_MUTATORS)
    which = rng.choice(["profile", "mahimahi", "intervals", "family"])
    links = re.compile(rb"^links: .*$", re.MULTILINE)
    if which == "profile":
        scenario = links.sub(b"links: [direct, %s-link.yml]" % stem.encode(), data)
        return {"": scenario, f"{stem}-link.yml": bad(rng, PROFILE)}
    if which == "mahimahi":
        scenario = links.sub(b"links: [direct, %s-link.yml]" % stem.encode(), data)
        profile = b"down_trace: %s-down.yml\nup_mbps: 5\n" % stem.encode()
        return {"": scenario, f"{stem}-link.yml": profile, f"{stem}-down.yml": bad(rng, MAHIMAHI)}
    if which == "intervals":
        open_loop = (REPO / "scenarios" / "tfs_vs_triton.yaml").read_bytes()
        scenario = re.sub(rb"  rates: .*", b"  trace: %s-gaps.yml" % stem.encode(), open_loop)
        return {"": scenario, f"{stem}-gaps.yml": bad(rng, INTERVALS)}
    scenario = data.replace(b"\nmodels:\n", b"\nmodels:\n  repository: %s-repo\n" % stem.encode())
    return {"": scenario, f"{stem}-repo/family.yaml": bad(rng, FAMILY)}


KINDS = [mutator.__name__ for mutator in MUTATORS] + ["linked_files"]


def make_case(index: int) -> dict[str, bytes]:
    """The files of case `index`: the scenario first, named after the mutation and the
    scenario it started from, then any file it points to."""
    rng = random.Random(f"{SEED}-{index}")
    kind = KINDS[index % len(KINDS)]
    source = SCENARIOS[(index // len(KINDS)) % len(SCENARIOS)]
    stem = f"{index:05d}-{kind}-{source.stem}"
    data = source.read_bytes()
    if kind == "linked_files":
        files = linked_files(rng, data, stem)
    else:
        files = {"": MUTATORS[index % len(KINDS)](rng, data) or b"\n"}
    files[f"{stem}.yaml"] = files.pop("")
    return files


# --- the child: run the CLI on each file, limited ---------------------------------------


class _Runaway(Exception):
    """The per-file time limit struck."""


def _on_alarm(signum: int, frame: object) -> None:
    raise _Runaway


def worker(folder: Path) -> None:
    """Print one JSON line per file: its outcome, seconds, and the output or traceback."""
    import traceback

    from typer.testing import CliRunner

    from servebench.cli import app

    runner = CliRunner()
    runner.invoke(app, ["scenario", "validate", str(SCENARIOS[0])])  # warm the lazy imports
    with open("/proc/self/statm") as statm:
        size = int(statm.read().split()[0]) * resource.getpagesize()
    limit = size + MEMORY_LIMIT_BYTES
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    signal.signal(signal.SIGPROF, _on_alarm)
    signal.signal(signal.SIGALRM, _on_alarm)
    for path in sorted(folder.glob("*.yaml")):
        print(json.dumps({"file": path.name, "started": True}), flush=True)
        started = time.perf_counter()
        signal.setitimer(signal.ITIMER_PROF, TIME_LIMIT_S)
        signal.setitimer(signal.ITIMER_REAL, WALL_LIMIT_S)
        try:
            result = runner.invoke(app, ["scenario", "validate", str(path)])
            exception = result.exception
        except (_Runaway, MemoryError) as err:  # struck in CliRunner's own code, not the command's
            exception = err
        finally:
            signal.setitimer(signal.ITIMER_PROF, 0)
            signal.setitimer(signal.ITIMER_REAL, 0)
        if isinstance(exception, _Runaway):
            outcome, detail = "runaway-time", ""
        elif isinstance(exception, MemoryError):
            outcome, detail = "runaway-memory", ""
        elif exception is not None and not isinstance(exception, SystemExit):
            outcome = "traceback"
            detail = "".join(traceback.format_exception(*result.exc_info))[-1500:]
        else:
            outcome, detail = _judge(result.exit_code, result.output)
        elapsed = time.perf_counter() - started
        print(
            json.dumps({"file": path.name, "outcome": outcome, "s": elapsed, "detail": detail}),
            flush=True,
        )
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps({"peak_rss": peak, "start_size": size}), flush=True)


def _judge(exit_code: int, output: str) -> tuple[str, str]:
    """Accepted, or refused the clean way: exit 2 and only `error:`/`warning:` lines."""
    lines = [line for line in output.splitlines() if line.strip()]
    if exit_code == 0:
        return "accepted", output[-300:]
    clean = (
        exit_code == 2
        and "Traceback" not in output
        and lines
        and all(line.startswith(("error:", "warning:")) for line in lines)
    )
    return ("clean-error" if clean else f"unclean-exit-{exit_code}"), output[-600:]


# --- the parent: generate, run, summarize -----------------------------------------------


def run_fuzz(cases: list[int], folder: Path) -> tuple[list[dict], dict]:
    for index in cases:
        for name, data in make_case(index).items():
            (folder / name).parent.mkdir(exist_ok=True)
            (folder / name).write_bytes(data)
    proc = subprocess.run(
        [sys.executable, __file__, "--worker", str(folder)],
        capture_output=True,
        text=True,
        timeout=60 + TIME_LIMIT_S * len(cases),
        cwd=folder,
    )
    results, totals, started = [], {}, None
    for line in proc.stdout.splitlines():
        entry = json.loads(line)
        if "peak_rss" in entry:
            totals = entry
        elif entry.get("started"):
            started = entry["file"]
        else:
            results.append(entry)
            started = None
    if started is not None or proc.returncode != 0:  # the child died on a file
        results.append(
            {
                "file": started,
                "outcome": f"child-died-{proc.returncode}",
                "s": 0,
                "detail": proc.stderr[-1500:],
            }
        )
    return results, totals


def summary(results: list[dict], totals: dict, wall_s: float) -> str:
    counts = Counter(r["outcome"] for r in results)
    kinds = Counter(r["file"].split("-")[1] for r in results if r["file"])
    slowest = max(results, key=lambda r: r["s"])
    return (
        f"{len(results)} files, {len(kinds)} kinds ({', '.join(sorted(kinds))}); "
        f"outcomes {dict(counts)}; slowest {slowest['s']:.2f} s ({slowest['file']}); "
        f"child peak RSS {totals.get('peak_rss', 0) / 2**20:.0f} MiB; wall {wall_s:.1f} s"
    )


def test_fuzzed_scenarios_are_accepted_or_refused_cleanly(tmp_path: Path):
    started = time.perf_counter()
    results, totals = run_fuzz(list(range(CASES)), tmp_path)
    print(summary(results, totals, time.perf_counter() - started))
    bad = [r for r in results if r["outcome"] not in ("accepted", "clean-error")]
    report = "\n\n".join(f"{r['file']}: {r['outcome']}\n{r['detail']}" for r in bad)
    assert not bad, f"{len(bad)} of {len(results)} fuzzed files misbehaved:\n{report}"
    assert len(results) == CASES


def test_mutator_is_deterministic():
    assert make_case(7) == make_case(7)
    assert make_case(7) != make_case(8)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--cases", type=int, default=CASES)
    parser.add_argument("--only", help="comma-separated case numbers")
    parser.add_argument("--keep", type=Path, help="write the files here and keep them")
    args = parser.parse_args()
    if args.worker:
        worker(args.worker)
        return
    cases = [int(i) for i in args.only.split(",")] if args.only else list(range(args.cases))
    with tempfile.TemporaryDirectory() as scratch:
        folder = args.keep or Path(scratch)
        folder.mkdir(parents=True, exist_ok=True)
        started = time.perf_counter()
        results, totals = run_fuzz(cases, folder)
        for r in results:
            if r["outcome"] not in ("accepted", "clean-error"):
                print(f"{r['file']}: {r['outcome']}\n{r['detail']}\n")
        print(summary(results, totals, time.perf_counter() - started))


if __name__ == "__main__":
    main()
