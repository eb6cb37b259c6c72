"""The command line's standard output: a reader that goes away is survived, in process."""

from __future__ import annotations

import io
import os
import sys

import pytest

from pev.cli._output import PIPE_WIDTH, PipeSafeStdout, echo_json, stdout_console


class _Gone(io.StringIO):
    """A stream whose reader has gone: every write and flush is a broken pipe."""

    def write(self, text: str) -> int:
        raise BrokenPipeError(32, "Broken pipe")

    def flush(self) -> None:
        raise BrokenPipeError(32, "Broken pipe")


def test_writes_after_the_reader_went_are_dropped_quietly() -> None:
    """A broken pipe is noted once; every later write and flush succeeds, unseen."""
    guarded = PipeSafeStdout(_Gone())
    assert guarded.write("first\n") == len("first\n")
    assert guarded.closed_pipe
    guarded.flush()
    assert guarded.write("second\n") == len("second\n")
    assert not guarded.isatty()


def test_a_real_pipe_whose_reader_closed_is_pointed_at_the_null_device() -> None:
    """On a real descriptor, the write end is redirected to the null device: nothing fails."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    stream = os.fdopen(write_end, "w", buffering=1)
    try:
        guarded = PipeSafeStdout(stream)
        guarded.write("lost\n")
        guarded.flush()
        assert guarded.closed_pipe
        assert guarded.fileno() == write_end
        guarded.write("also lost\n")  # now into the null device
        guarded.flush()
    finally:
        stream.close()


def test_the_guard_hides_the_binary_buffer_and_passes_the_rest() -> None:
    """click writes to ``buffer`` when there is one: the guard has none, the rest is passed."""
    stream = io.StringIO()
    guarded = PipeSafeStdout(stream)
    with pytest.raises(AttributeError):
        _ = guarded.buffer
    assert guarded.getvalue() == ""  # type: ignore[attr-defined]  # the stream's own method
    guarded.write("kept")
    assert stream.getvalue() == "kept"


def test_install_puts_one_guard_in_place_of_stdout(monkeypatch: pytest.MonkeyPatch) -> None:
    """Installing twice keeps one guard."""
    monkeypatch.setattr(sys, "stdout", io.StringIO())
    PipeSafeStdout.install()
    first = sys.stdout
    PipeSafeStdout.install()
    assert isinstance(first, PipeSafeStdout)
    assert sys.stdout is first


def test_json_goes_out_on_one_line_and_a_pipe_is_never_wrapped(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """One document per line, non-ASCII kept; off a terminal the console does not wrap."""
    monkeypatch.delenv("COLUMNS", raising=False)
    echo_json({"name": "Zoë", "nested": {"a": [1, 2]}})
    assert capsys.readouterr().out == '{"name":"Zoë","nested":{"a":[1,2]}}\n'
    assert stdout_console().width == PIPE_WIDTH


def test_off_a_terminal_tables_fit_200_columns_and_text_lines_stay_whole(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A wide table is laid out within 200 columns (or COLUMNS); a long line of text is one line."""
    from rich.table import Table

    monkeypatch.delenv("COLUMNS", raising=False)
    table = Table("key", "value")
    table.add_row("k" * 40, "v" * 400)
    console = stdout_console()
    console.print(table)
    console.print("x" * 500)
    lines = capsys.readouterr().out.splitlines()
    assert lines[-1] == "x" * 500
    assert max(len(line) for line in lines[:-1]) == PIPE_WIDTH == 200
    monkeypatch.setenv("COLUMNS", "120")
    assert stdout_console().width == 120
    monkeypatch.setenv("COLUMNS", "wide")
    assert stdout_console().width == PIPE_WIDTH
