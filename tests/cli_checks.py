"""What every CLI error test checks: exit 2 and one `error:` line, no traceback."""

from __future__ import annotations

from typing import Any


def assert_one_line_error(result: Any, *expected: str) -> str:
    """`result` (typer's CliRunner result) failed with exit 2 and a single line naming each of
    `expected`; returns that line."""
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    for text in expected:
        assert text in lines[0], lines[0]
    return lines[0]
