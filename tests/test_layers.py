"""The layering of docs/architecture.md: a module imports only its own layer or lower ones.
Scans the source, so a new upward import fails here rather than in review."""

import ast
from pathlib import Path

import trnsim

LAYERS = {
    0: ["units", "dtypes", "isa", "errors", "gcpause"],
    1: ["inputs", "config", "trace", "report"],
    2: ["memory", "sync"],
    3: ["engines", "dma"],
    4: ["core", "chip", "system"],
    5: ["runtime", "api", "calibration", "kernels", "sweep", "collectives"],
    6: ["cli", "torch", "torch_autoload"],
}
LAYER_OF = {name: layer for layer, names in LAYERS.items() for name in names}
ROOT = Path(trnsim.__file__).parent


def layer(module: str) -> int:
    """trnsim.memory.hbm -> layer of 'memory'."""
    return LAYER_OF[module.split(".")[1]]


def imports(path: Path) -> list[str]:
    """The trnsim modules `path` imports; `from trnsim import x` counts as trnsim.x (only the
    version string may be imported from the package itself)."""
    tree = ast.parse(path.read_text())
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "trnsim":
            found += [f"trnsim.{a.name}" for a in node.names if a.name != "__version__"]
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("trnsim."):
            found.append(node.module)
        elif isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name.startswith("trnsim.")]
    return found


def modules():
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT).with_suffix("")
        if rel.parts != ("__init__",):
            yield path, rel


def test_every_module_has_a_layer():
    for _, rel in modules():
        assert rel.parts[0] in LAYER_OF, f"{rel}: add it to a layer in tests/test_layers.py"


def test_no_module_imports_upward():
    bad = []
    for path, rel in modules():
        mine = LAYER_OF[rel.parts[0]]
        for m in imports(path):
            if m.split(".")[1] not in LAYER_OF:
                bad.append(f"{rel} imports {m}, which is in no layer")
            elif layer(m) > mine:
                bad.append(f"{rel} (layer {mine}) imports {m} (layer {layer(m)})")
    assert not bad, "\n".join(bad)


def test_the_scan_sees_every_import_form(tmp_path):
    src = tmp_path / "m.py"
    src.write_text(
        "from trnsim import runtime, __version__\nimport trnsim.cli\n"
        "from trnsim.core.run import NeuronCore\n"
    )
    assert imports(src) == ["trnsim.runtime", "trnsim.cli", "trnsim.core.run"]
