"""trnsim.config: bundled configs, derived figures, inheritance, overrides, validation errors."""

import dataclasses

import pytest

from trnsim.config import (
    ChipConfig,
    ConfigError,
    configs_dir,
    derived,
    list_chips,
    load_chip,
    peak_flops_per_core,
    to_dict,
)
from trnsim.errors import TrnsimError

TRN2_BF16_CORE = 128 * 128 * 2 * 2.4e9  # 78.6432e12
TRN1_BF16_CORE = 128 * 128 * 2 * 2.8e9  # 91.7504e12


def test_bundled_configs():
    assert list_chips() == ["trn1", "trn2", "trn3"]
    assert (configs_dir() / "trn2.yaml").is_file()
    for name in list_chips():
        cfg = load_chip(name)
        assert isinstance(cfg, ChipConfig)
        assert cfg.name == name
        assert cfg.source == str(configs_dir() / f"{name}.yaml")


def test_every_bundled_number_has_a_source_or_assumption():
    for name in list_chips():
        lines = (configs_dir() / f"{name}.yaml").read_text().splitlines()
        for i, line in enumerate(lines):
            key, sep, value = line.split("#")[0].partition(":")
            if not sep or not value.strip() or key.strip() in ("name", "description", "base"):
                continue
            assert "# source:" in line or "# assumption:" in line, f"{name}.yaml:{i + 1}: {line}"


def test_base_units():
    cfg = load_chip("trn2")
    assert (cfg.cores, cfg.lnc, cfg.lnc_allowed) == (8, 2, (1, 2))
    assert cfg.core.tensor.clock_hz == 2_400_000_000
    assert cfg.core.vector.clock_hz == 960_000_000
    assert cfg.core.sbuf.partition_bytes == 224 * 1024
    assert cfg.core.psum.bank_bytes == 2048
    assert cfg.core.dma.engine_bandwidth == 23e9
    assert cfg.core.dma.transfer_setup == 615e-9
    assert cfg.core.dma.store_bandwidth == 26.9e9
    assert cfg.core.dma.descriptor_cost == 2e-9
    assert cfg.hbm.stack_capacity == 24 * 2**30
    assert cfg.hbm.bandwidth == 2.9e12
    assert cfg.peak_flops.bfloat16 == 667e12
    trn1, trn3 = load_chip("trn1"), load_chip("trn3")
    assert (trn1.lnc_allowed, trn1.core.tensor.fp8_rate) == ((1,), 1)
    assert trn1.core.vector.perf_mode is False
    assert trn1.core.vector_gpsimd_share_sbuf and trn1.core.vector_scalar_share_psum
    assert trn3.core.tensor.moving_free_max == 4096
    assert trn3.core.tensor.moving_free_max_bf16_dst == 8192
    assert trn3.core.scalar.perf_mode_factor == 2


def test_derived_peaks():
    d2 = derived(load_chip("trn2"))["peak_flops"]
    assert TRN2_BF16_CORE == 78.6432e12
    assert d2["core"] == {
        "bfloat16": 78.6432e12,
        "float16": 78.6432e12,
        "float8": 2 * 78.6432e12,
        "float32": 78.6432e12 / 4,
    }
    assert d2["chip"]["bfloat16"] == 8 * 78.6432e12
    assert d2["published"] == {
        "bfloat16": 667e12,
        "float16": 667e12,
        "float8": 1299e12,
        "float32": 181e12,
    }
    assert d2["gap"]["bfloat16"] == pytest.approx(667 / 629.1456 - 1)

    d1 = derived(load_chip("trn1"))["peak_flops"]
    assert d1["core"]["bfloat16"] == TRN1_BF16_CORE == 91.7504e12
    assert d1["core"]["float8"] == TRN1_BF16_CORE
    assert d1["chip"]["float32"] == 2 * TRN1_BF16_CORE / 4
    assert "mx" not in d1["core"]

    d3 = derived(load_chip("trn3"))["peak_flops"]
    assert d3["core"]["mx"] == 4 * 78.6432e12
    assert d3["chip"]["mx"] == 32 * 78.6432e12
    assert d3["published"]["mx"] == 2517e12
    assert d3["gap"]["mx"] == pytest.approx(2517 / 2516.5824 - 1)
    # plain fp8 on Trn3: not published (2,517 is MX only); the derived 8 x 157.3 TF stands in
    assert d3["published"]["float8"] == 1258e12
    assert d3["gap"]["float8"] == pytest.approx(1258 / (16 * 78.6432) - 1)


def test_corrections_of_published_figures():
    """trainium.md 3.6 and 3.5: the figures the calibration corrected."""
    trn1, trn2, trn3 = (load_chip(c) for c in ("trn1", "trn2", "trn3"))
    assert trn2.chip_links.bandwidth == 1024e9  # a trn2.48xlarge; +256 GB/s only in UltraServers
    assert trn3.lnc == 2
    assert (trn2.core.vector.fixed_overhead_cycles, trn1.core.vector.fixed_overhead_cycles) == (
        144,
        100,
    )
    assert trn2.core.vector.dve_max_free_elements == trn3.core.vector.dve_max_free_elements == 2**14
    assert trn1.core.scalar.commit_latency_cycles == 264 - trn1.core.scalar.min_ii_cycles
    assert (trn1.core.tensor.warmup, trn2.core.tensor.warmup, trn3.core.tensor.warmup) == (
        False,
        True,
        True,
    )
    assert trn2.core.dma.store_bandwidth == 26.9e9 > trn2.core.dma.engine_bandwidth


def test_derived_totals():
    d = derived(load_chip("trn2"))
    assert d["sbuf_bytes"] == {"core": 28 * 2**20, "chip": 224 * 2**20}
    assert d["psum_bytes"] == {"core": 2 * 2**20, "chip": 16 * 2**20}
    assert d["dma_bandwidth"]["core"] == 16 * 23e9
    assert d["dma_bandwidth"]["chip"] == 128 * 23e9
    assert d["dma_bandwidth"]["published"] == 3.5e12
    assert d["hbm"] == {
        "capacity": 96 * 2**30,
        "bandwidth": 2.9e12,
        "bandwidth_per_stack": 2.9e12 / 4,
    }
    assert d["logical_cores"] == 4


def test_peak_flops_per_core():
    trn2, trn3 = load_chip("trn2"), load_chip("trn3")
    for dtype in ("bfloat16", "float16", "tfloat32"):
        assert peak_flops_per_core(trn2, dtype) == 78.6432e12
    assert peak_flops_per_core(trn2, "float32") == 78.6432e12 / 4
    assert peak_flops_per_core(trn2, "float8_e4m3") == 2 * 78.6432e12
    assert peak_flops_per_core(trn2, "float8_e5m2") == 2 * 78.6432e12
    assert peak_flops_per_core(trn2, "float8_e4m3fn_x4") == 0.0
    assert peak_flops_per_core(trn3, "float8_e4m3fn_x4") == 4 * 78.6432e12
    with pytest.raises(ValueError, match="no tensor-engine peak for dtype 'int32'"):
        peak_flops_per_core(trn2, "int32")


def test_to_dict_is_plain_data_in_base_units():
    d = to_dict(load_chip("trn2"))
    assert d["lnc_allowed"] == [1, 2]
    assert d["core"]["sbuf"]["partition_bytes"] == 229376
    assert d["core"]["tensor"]["clock_hz"] == 2_400_000_000
    assert d["core"]["dma"]["transfer_setup"] == 615e-9
    assert d["hbm"]["bandwidth"] == 2.9e12
    assert d["peak_flops"]["float8"] == 1299e12


# ---------------------------------------------------------------------------------------------
# inheritance and overrides


def test_base_inheritance(write_yaml):
    path = write_yaml(
        "big.yaml", "base: trn2\nname: big\ncore:\n  sbuf:\n    partition_bytes: 448KiB\n"
    )
    cfg = load_chip(str(path))
    trn2 = load_chip("trn2")
    assert cfg.name == "big"
    assert cfg.core.sbuf.partition_bytes == 448 * 1024
    assert cfg.core.sbuf.partitions == 128
    assert cfg.source == str(path)
    assert dataclasses.replace(cfg, name="trn2", source=trn2.source, core=trn2.core) == trn2


def test_base_by_relative_path_and_chains(write_yaml):
    write_yaml("chips/fast.yaml", "base: trn2\nhbm:\n  bandwidth: 4TB/s\n")
    path = write_yaml("faster.yaml", "base: chips/fast.yaml\nhost_link:\n  bandwidth: 128GB/s\n")
    cfg = load_chip(str(path))
    assert cfg.hbm.bandwidth == 4e12
    assert cfg.host_link.bandwidth == 128e9
    assert cfg.hbm.stacks == 4


def test_overrides():
    cfg = load_chip(
        "trn2",
        [
            "core.sbuf.partition_bytes=448KiB",
            "hbm.bandwidth=4TB/s",
            "core.vector.perf_mode=false",
            "lnc=1",
            "lnc_allowed=[1]",
            "description=a what-if: twice the SBUF",
            "core.dma.transfer_setup=0",
        ],
    )
    assert cfg.core.sbuf.partition_bytes == 448 * 1024
    assert cfg.hbm.bandwidth == 4e12
    assert cfg.core.vector.perf_mode is False
    assert (cfg.lnc, cfg.lnc_allowed) == (1, (1,))
    assert cfg.description == "a what-if: twice the SBUF"
    assert cfg.core.dma.transfer_setup == 0.0


def test_overrides_apply_after_inheritance(write_yaml):
    path = write_yaml("c.yaml", "base: trn2\nhbm:\n  bandwidth: 4TB/s\n")
    assert load_chip(str(path), ["hbm.bandwidth=5TB/s"]).hbm.bandwidth == 5e12


# ---------------------------------------------------------------------------------------------
# errors: one line, naming the file, the line and the key


def error(name_or_path, overrides=()):
    with pytest.raises(ConfigError) as info:
        load_chip(str(name_or_path), overrides)
    message = str(info.value)
    assert "\n" not in message
    assert isinstance(info.value, TrnsimError)
    return message


def child(write_yaml, body):
    return write_yaml("bad.yaml", "base: trn2\n" + body)


def test_unknown_key(write_yaml):
    path = child(write_yaml, "core:\n  sbuf:\n    partiton_bytes: 1KiB\n")
    assert error(path) == (
        f"{path}:4: core.sbuf.partiton_bytes: unknown key 'partiton_bytes'; "
        f"did you mean 'partition_bytes'?"
    )


def test_missing_key(write_yaml):
    text = (configs_dir() / "trn2.yaml").read_text()
    lines = text.splitlines(keepends=True)
    psum_line = next(i for i, line in enumerate(lines) if line.startswith("  psum:")) + 1
    path = write_yaml("missing.yaml", text.replace("    banks: 8 ", "    # banks: 8 "))
    assert error(path).startswith(
        f"{path}:{psum_line}: core.psum: missing key 'banks' "
        f"(banks per partition (accumulation groups); a whole number"
    )
    path = write_yaml("empty.yaml", "")
    assert error(path).startswith(f"{path}: missing key 'name'")


def test_bad_unit(write_yaml):
    path = child(write_yaml, "core:\n  sbuf:\n    partition_bytes: 224Kb\n")
    assert error(path) == (
        f"{path}:4: core.sbuf.partition_bytes: expected a size like '224KiB' "
        f"(B, KB, MB, GB, TB, KiB, MiB, GiB, TiB), got '224Kb'"
    )
    path = child(write_yaml, "hbm:\n  bandwidth: 2900\n")
    assert error(path).startswith(f"{path}:3: hbm.bandwidth: expected a bandwidth like")


@pytest.mark.parametrize(
    ("body", "line", "key", "what"),
    [
        (
            "core:\n  vector:\n    perf_mode: maybe\n",
            4,
            "core.vector.perf_mode",
            "expected true or false, got 'maybe'",
        ),
        ("core:\n  tensor: 5\n", 3, "core.tensor", "expected a mapping of keys, got 5"),
        ("core:\n  version: 3\n", 3, "core.version", "expected text, got 3"),
        (
            "lnc_allowed: 2\n",
            2,
            "lnc_allowed",
            "expected a list of whole numbers like [1, 2], got 2",
        ),
        ("cores: eight\n", 2, "cores", "expected a whole number like '128', got 'eight'"),
    ],
)
def test_wrong_type(write_yaml, body, line, key, what):
    path = child(write_yaml, body)
    assert error(path) == f"{path}:{line}: {key}: {what}"


@pytest.mark.parametrize(
    ("body", "line", "key", "what"),
    [
        ("cores: 0\n", 2, "cores", "must be greater than 0, got 0"),
        ("hbm:\n  bandwidth: -1TB/s\n", 3, "hbm.bandwidth", "must be greater than 0, got '-1TB/s'"),
        (
            "core:\n  tensor:\n    clock_hz: 0GHz\n",
            4,
            "core.tensor.clock_hz",
            "must be greater than 0, got '0GHz'",
        ),
        (
            "core:\n  sbuf:\n    partition_bytes: 0KiB\n",
            4,
            "core.sbuf.partition_bytes",
            "must be greater than 0, got '0KiB'",
        ),
        (
            "core:\n  dma:\n    transfer_setup: -1us\n",
            4,
            "core.dma.transfer_setup",
            "must not be negative, got '-1us'",
        ),
        (
            "core:\n  tensor:\n    fp32_rate: 0\n",
            4,
            "core.tensor.fp32_rate",
            "must be greater than 0, got 0",
        ),
    ],
)
def test_negative_or_zero(write_yaml, body, line, key, what):
    path = child(write_yaml, body)
    assert error(path) == f"{path}:{line}: {key}: {what}"


def test_cross_field_rules(write_yaml):
    steps = "exceeds the largest of core.partition_start_steps (128)"
    path = child(write_yaml, "core:\n  sbuf:\n    partitions: 256\n")
    assert error(path) == f"{path}:4: core.sbuf.partitions: core.sbuf.partitions (256) {steps}"
    path = child(write_yaml, "core:\n  psum:\n    partitions: 129\n")
    assert error(path) == f"{path}:4: core.psum.partitions: core.psum.partitions (129) {steps}"
    path = child(write_yaml, "core:\n  sbuf:\n    partitions: 64\n")
    assert error(path) == (
        f"{path}:4: core.sbuf.partitions: core.tensor.rows (128) exceeds core.sbuf.partitions (64)"
    )
    assert error("trn2", ["core.tensor.cols=129"]) == (
        "--set core.tensor.cols=129: core.tensor.cols: core.tensor.cols (129) exceeds "
        "core.psum.partitions (128)"
    )
    assert error("trn2", ["lnc=4"]) == "--set lnc=4: lnc: lnc (4) is not in lnc_allowed [1, 2]"
    assert error("trn2", ["lnc_allowed=[1, 3]", "lnc=3"]) == (
        "--set lnc=3: lnc: cores (8) is not divisible by lnc (3)"
    )
    assert error("trn2", ["hbm.stacks=2"]) == (
        "--set hbm.stacks=2: hbm.stacks: hbm.stacks x hbm.cores_per_stack (2 x 2) must equal "
        "cores (8)"
    )


def test_unknown_chip_lists_available():
    message = error("trn9")
    assert message.startswith("unknown chip 'trn9'; did you mean")
    assert message.endswith("available: trn1, trn2, trn3 (or a path to a YAML file)")
    assert error("nosuch/chip.yaml") == "no such config file: nosuch/chip.yaml"


def test_bad_overrides():
    assert error("trn2", ["core.sbuf.partition_bytes"]) == (
        "--set core.sbuf.partition_bytes: expected key.path=value, "
        "e.g. core.sbuf.partition_bytes=448KiB"
    )
    assert error("trn2", ["=3"]).endswith(
        "expected key.path=value, e.g. core.sbuf.partition_bytes=448KiB"
    )
    assert error("trn2", ["sbuf.partition_bytes=1KiB"]) == (
        "--set sbuf.partition_bytes=1KiB: unknown key 'sbuf.partition_bytes'; "
        "did you mean 'core.sbuf.partition_bytes'?"
    )
    assert error("trn2", ["core.sbuf=1"]) == (
        "--set core.sbuf=1: 'core.sbuf' is a section; set one of its keys, "
        "e.g. core.sbuf.partitions"
    )
    assert error("trn2", ["core.sbuf.partition_bytes=448Kb"]) == (
        "--set core.sbuf.partition_bytes=448Kb: core.sbuf.partition_bytes: expected a size like "
        "'224KiB' (B, KB, MB, GB, TB, KiB, MiB, GiB, TiB), got '448Kb'"
    )
    assert error("trn2", ["core.vector.perf_mode=nope"]) == (
        "--set core.vector.perf_mode=nope: core.vector.perf_mode: expected true or false, "
        "got 'nope'"
    )


def test_yaml_problems(write_yaml):
    path = write_yaml("syntax.yaml", "base: trn2\ncore:\n  sbuf: [1,\n")
    assert error(path).startswith(f"{path}:4: syntax: ")
    path = write_yaml("dup.yaml", "base: trn2\ncores: 8\ncores: 4\n")
    assert error(path).startswith(f"{path}:3: top level: duplicate key 'cores'")
    path = write_yaml("yes.yaml", "base: trn2\ncore:\n  vector:\n    perf_mode: yes\n")
    assert error(path) == f"{path}:4: core.vector.perf_mode: expected true or false, got 'yes'"
    path = write_yaml("list.yaml", "- 1\n- 2\n")
    assert error(path) == f"{path}: not a chip config (expected a YAML mapping of config keys)"
    # any readable file that is no config: never echoed in the message
    path = write_yaml("passwd", "root:x:0:0:root:/root:/bin/bash\nbin:x:1:1::/:/sbin/nologin\n")
    assert error(path) == f"{path}: not a chip config (expected a YAML mapping of config keys)"
    path.write_bytes(b"\x7fELF\x02\x01\x01\x00\xff\xfe secret")
    assert error(path) == (
        f"{path}: not a chip config (not UTF-8 text; expected a YAML mapping of config keys)"
    )


def test_base_problems(write_yaml):
    a = write_yaml("a.yaml", "base: b.yaml\n")
    b = write_yaml("b.yaml", "base: a.yaml\n")
    assert error(a) == f"{b}: base: inheritance cycle {a} -> {b} -> {a}"
    path = write_yaml("orphan.yaml", "name: x\nbase: nowhere.yaml\n")
    assert error(path) == f"{path}:2: base: no such config file: {path.parent / 'nowhere.yaml'}"
    path = write_yaml("badbase.yaml", "base: trn7\n")
    assert error(path).startswith(f"{path}:1: base: unknown chip 'trn7'")
