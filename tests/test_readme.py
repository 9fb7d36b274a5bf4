"""README.md's examples run: every ```python block, and every `trnsim ...` command of its ```sh
blocks, so that the README cannot rot.

Each example runs in a temporary directory that holds links to the repository's traces/ and
docs/ and the README's own ```yaml chip file (the block whose first line is `# <name>.yaml`), so
relative paths in the README resolve as they do from the repository root.
"""

from __future__ import annotations

import contextlib
import io
import re
import shlex
from pathlib import Path

import pytest
from click.testing import CliRunner

from trnsim.cli import main

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
FENCE = re.compile(r"^```(\w*)\n(.*?)^```$", re.M | re.S)


def blocks(lang: str) -> list[str]:
    return [body for tag, body in FENCE.findall(README) if tag == lang]


def trnsim_commands() -> list[str]:
    """The `trnsim ...` lines of the ```sh blocks, comments stripped (other lines -- installing,
    pytest, benchmarks -- are not run here)."""
    out = []
    for body in blocks("sh"):
        for line in body.splitlines():
            words = shlex.split(line, comments=True)
            if words[:1] == ["trnsim"]:
                out.append(shlex.join(words))
    return out


@pytest.fixture
def in_readme_dir(tmp_path, monkeypatch):
    """cwd = a directory where the README's relative paths resolve."""
    (tmp_path / "traces").symlink_to(ROOT / "traces", target_is_directory=True)
    (tmp_path / "docs").symlink_to(ROOT / "docs", target_is_directory=True)  # sweep_hbm.csv
    for body in blocks("yaml"):
        first = body.splitlines()[0]
        if re.fullmatch(r"# [\w.-]+\.yaml", first):
            (tmp_path / first[2:]).write_text(body, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_readme_has_examples():
    assert blocks("python"), "README.md has no ```python block"
    assert len(trnsim_commands()) >= 5, trnsim_commands()


@pytest.mark.parametrize("i", range(len(blocks("python"))))
def test_readme_python_block_runs(i, in_readme_dir):
    """The block runs as a script (its asserts hold, nothing raises) and prints what it says
    (a block that imports torch only where torch is installed: the `torch` extra)."""
    if "import torch\n" in blocks("python")[i]:
        pytest.importorskip("torch")
    code = compile(blocks("python")[i], f"README.md python block {i}", "exec")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(code, {"__name__": "__readme__"})
    if "print(" in blocks("python")[i]:
        assert out.getvalue().strip(), "the block prints nothing"


@pytest.mark.parametrize("command", trnsim_commands())
def test_readme_trnsim_command_runs(command, in_readme_dir):
    result = CliRunner().invoke(main, shlex.split(command)[1:])
    assert result.exit_code == 0, (command, result.output, result.exception)
    assert result.stdout.strip(), command


# -- paths the docs name ---------------------------------------------------------------------------

REPO_PATH = re.compile(r"`((?:trnsim|tests|traces|configs|docs|benchmarks)/[\w./*<>-]*)`")


@pytest.mark.parametrize(
    "doc",
    [
        "README.md",
        "docs/model.md",
        "docs/architecture.md",
        "docs/trace_extensions.md",
        "docs/trace_format.md",
    ],
)
def test_paths_named_in_docs_exist(doc):
    text = (ROOT / doc).read_text(encoding="utf-8")
    named = REPO_PATH.findall(text)
    assert named, f"{doc} names no repository path"
    missing = [p for p in named if not any(ROOT.glob(re.sub(r"<\w+>", "*", p).rstrip("/")))]
    assert not missing, f"{doc} names paths that do not exist: {missing}"


def test_docs_do_not_point_outside_the_repository():
    """A clone has no ../shared: what users need is written in README.md and docs/."""
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = doc.read_text(encoding="utf-8")
        assert "../shared" not in text and "TRACE_FORMAT.md" not in text, doc.name
