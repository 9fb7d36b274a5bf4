"""The layering of ../shared/design/ARCHITECTURE.md: a module imports only its own layer or
lower ones. Scans the source, so a new upward import fails here rather than in review."""

import ast
from pathlib import Path

import trnsim

LAYERS = {
    0: ["units", "dtypes", "isa", "errors", "gcpause"],
    1: ["config", "chip_config", "config_load", "chip_figures", "trace", "trace_buffers",
        "trace_schedule", "instructions", "repeat", "semaphore_check", "yamlpos", "recorder",
        "program", "report", "perfetto", "profile"],
    2: ["memory", "sync"],
    3: ["engines", "dma"],
    4: ["core", "chip"],
    5: ["runtime", "session", "api", "kernels"],
    6: ["cli", "torch"],
}
LAYER_OF = {name: layer for layer, names in LAYERS.items() for name in names}
ROOT = Path(trnsim.__file__).parent


def layer(module: str) -> int:
    """trnsim.memory.hbm -> layer of 'memory'."""
    return LAYER_OF[module.split(".")[1]]


def imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text())
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("trnsim"):
            found.append(node.module)
        elif isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name.startswith("trnsim.")]
    return [m for m in found if m != "trnsim"]


def test_every_module_has_a_layer():
    for path in ROOT.rglob("*.py"):
        rel = path.relative_to(ROOT).with_suffix("")
        if rel.parts[0] != "__init__":
            assert rel.parts[0] in LAYER_OF, f"{rel}: add it to a layer in tests/test_layers.py"


def test_no_module_imports_upward():
    bad = []
    for path in ROOT.rglob("*.py"):
        rel = path.relative_to(ROOT).with_suffix("")
        if rel.parts[0] == "__init__":
            continue
        mine = LAYER_OF[rel.parts[0]]
        for m in imports(path):
            if layer(m) > mine:
                bad.append(f"{rel} (layer {mine}) imports {m} (layer {layer(m)})")
    assert not bad, "\n".join(bad)
