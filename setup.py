"""Package list for setuptools (the rest is in pyproject.toml): every trnsim* package, plus
`trnsim.configs` and `trnsim.systems`, the repo-root configs/ and systems/ directories mapped in
pyproject.toml's package-dir."""

from setuptools import find_packages, setup

setup(
    packages=[
        *find_packages(include=["trnsim", "trnsim.*"]),
        "trnsim.configs",
        "trnsim.systems",
    ]
)
