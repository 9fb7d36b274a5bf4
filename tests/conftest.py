"""Shared pytest fixtures."""

from pathlib import Path

import pytest


@pytest.fixture
def write_yaml(tmp_path: Path):
    """write_yaml("name.yaml", text) -> path of a file written under tmp_path."""

    def write(name: str, text: str) -> Path:
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        return path

    return write
