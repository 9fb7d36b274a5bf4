"""trnsim.config systems: the bundled systems, their sources, inheritance, overrides (of the
system and of its chip), the one owner of link figures, rank numbering, and the one-line errors;
and the chip configs' `cc:` section."""

import dataclasses
import re
from pathlib import Path

import pytest

from trnsim.config import (
    ALGORITHMS,
    CcConfig,
    ConfigError,
    RankError,
    SystemConfig,
    configs_dir,
    list_chips,
    list_systems,
    load_chip,
    load_system,
    system_derived,
    system_dict,
    systems_dir,
)
from trnsim.errors import TrnsimError

BUNDLED = [
    "trn1-32xl",
    "trn2-48xl",
    "trn2-48xl-x4",
    "trn2-ultraserver",
    "trn3-ultraserver",
    "trn3-ultraserver-pair",
]


def test_bundled_systems_load():
    assert list_systems() == BUNDLED
    for name in BUNDLED:
        cfg = load_system(name)
        assert isinstance(cfg, SystemConfig)
        assert cfg.name == name
        assert cfg.source == str(systems_dir() / f"{name}.yaml")
        assert cfg.chip.source == str(configs_dir() / f"{cfg.chip.name}.yaml")
        assert cfg.chips == cfg.nodes * cfg.chips_per_node
        assert cfg.ranks == cfg.chips * cfg.ranks_per_chip
        assert cfg.collectives.algorithm in ALGORITHMS


@pytest.mark.parametrize(
    ("name", "chip", "chips", "ranks", "nodes", "topology"),
    [
        ("trn1-32xl", "trn1", 16, 32, 1, (4, 4)),
        ("trn2-48xl", "trn2", 16, 64, 1, (4, 4)),
        ("trn2-48xl-x4", "trn2", 64, 256, 4, (4, 4)),
        ("trn2-ultraserver", "trn2", 64, 256, 1, (4, 4, 4)),
        ("trn3-ultraserver", "trn3", 64, 256, 1, ("server", "rack")),
        ("trn3-ultraserver-pair", "trn3", 128, 512, 1, ("server", "rack", "racks")),
    ],
)
def test_bundled_figures(name, chip, chips, ranks, nodes, topology):
    cfg = load_system(name)
    assert (cfg.chip.name, cfg.chips, cfg.ranks, cfg.nodes) == (chip, chips, ranks, nodes)
    topo = cfg.topology
    shape = topo.dims if topo.kind == "torus" else tuple(lv.name for lv in topo.levels)
    assert shape == topology


def test_base_units_and_sources_of_the_numbers():
    t2 = load_system("trn2-48xl")
    assert (t2.lnc, t2.ranks_per_chip, t2.chips_per_node) == (2, 4, 16)  # 4 ranks per chip at LNC 2
    assert t2.topology.link.bandwidth == 256e9 and t2.topology.link.latency == 1.5e-6
    assert t2.topology.z_link == t2.topology.link  # a 2-D torus: z_link defaults to link
    assert (t2.efa.bandwidth, t2.efa.latency) == (25e9, 15e-6)  # 200 Gbps, ~15 us (R-CC)
    c = t2.collectives
    assert (c.mesh_max, c.rdh_max, c.slices, c.algorithm) == (10**6, 56 * 10**6, 2, "auto")
    us = load_system("trn2-ultraserver")
    assert us.topology.z_link.bandwidth == 128e9 and us.topology.link.bandwidth == 256e9
    t3 = load_system("trn3-ultraserver").topology
    assert [(lv.name, lv.chips, lv.bandwidth) for lv in t3.levels] == [
        ("server", 16, 256e9),
        ("rack", 64, 320e9),
    ]


def _numbers_have_sources(path):
    for i, line in enumerate(path.read_text().splitlines()):
        key, sep, value = line.split("#")[0].partition(":")
        if not sep or not value.strip() or key.strip() in ("name", "description", "base"):
            continue
        assert "# source:" in line or "# assumption:" in line, f"{path.name}:{i + 1}: {line}"


@pytest.mark.parametrize("name", BUNDLED)
def test_every_system_number_has_a_source_or_assumption(name):
    _numbers_have_sources(systems_dir() / f"{name}.yaml")


@pytest.mark.parametrize("chip", ["trn1", "trn2", "trn3"])
def test_every_cc_number_has_a_source_or_assumption(chip):
    lines = (configs_dir() / f"{chip}.yaml").read_text().splitlines()
    start = lines.index("cc:")
    end = next(i for i in range(start + 1, len(lines)) if re.match(r"\S", lines[i]))
    block = lines[start + 1 : end]
    keys = [line.split(":")[0].strip() for line in block if re.match(r"  \w+:", line)]
    assert keys == [f.name for f in dataclasses.fields(CcConfig) if not f.metadata.get("loader")]
    for line in block:
        if re.match(r"  \w+:\s*\S", line):
            assert "# source:" in line or "# assumption:" in line, f"{chip}.yaml: {line}"


def test_cc_sections():
    cc = {name: load_chip(name).cc for name in list_chips()}
    assert cc["trn2"] == CcConfig(2, 64 * 1024, 0.5, "float32", True, False, 4096)
    assert cc["trn3"].reduce_rate == 1 and cc["trn3"].strict_priority  # NC-v4 (N-T3, R-OVL)
    assert cc["trn1"].cores_per_core == 3  # 6 CC-Cores per chip of 2 NCs
    # the compute packet has one owner: core.dma.packet_bytes
    assert load_chip("trn2", ["core.dma.packet_bytes=8KiB"]).cc.compute_packet_bytes == 8192
    with pytest.raises(ConfigError, match="unknown key 'cc.compute_packet_bytes'"):
        load_chip("trn2", ["cc.compute_packet_bytes=8KiB"])


# ---------------------------------------------------------------------------------------------
# inheritance and overrides


def test_base_and_nodes(write_yaml):
    path = write_yaml("cluster.yaml", "base: trn2-48xl\nname: cluster\nnodes: 8\n")
    cfg = load_system(str(path))
    assert (cfg.name, cfg.nodes, cfg.chips, cfg.ranks) == ("cluster", 8, 128, 512)
    assert cfg.source == str(path)
    assert cfg.topology == load_system("trn2-48xl").topology
    assert load_system(str(path), ["nodes=2"]).chips == 32
    assert load_system("trn3-ultraserver", ["nodes=3"]).chips == 192  # nodes on any system


def test_a_system_file_of_ones_own_with_a_chip_path(write_yaml):
    write_yaml("chips/fast.yaml", "base: trn2\nhbm:\n  bandwidth: 4TB/s\n")
    path = write_yaml(
        "mine.yaml",
        "base: trn2-48xl\nname: mine\nchip: chips/fast.yaml\ntopology:\n  dims: [2, 4]\n",
    )
    cfg = load_system(str(path))
    assert cfg.chip.hbm.bandwidth == 4e12 and cfg.chips == 8
    assert cfg.chip.source == str(path.parent / "chips" / "fast.yaml")


def test_overrides_reach_the_chip():
    cfg = load_system(
        "trn2-48xl",
        [
            "chip.hbm.bandwidth=4TB/s",
            "topology.link.bandwidth=128GB/s",
            "efa.latency=20us",
            "collectives.algorithm=ring",
        ],
    )
    assert cfg.chip.hbm.bandwidth == 4e12
    assert cfg.topology.link.bandwidth == 128e9
    assert cfg.efa.latency == 20e-6
    assert cfg.collectives.algorithm == "ring"
    assert load_system("trn2-48xl", ["chip=trn3"]).chip.name == "trn3"
    # chip= applies before the chip's keys, whatever the order
    cfg = load_system("trn2-48xl", ["chip.hbm.bandwidth=6TB/s", "chip=trn3"])
    assert (cfg.chip.name, cfg.chip.hbm.bandwidth) == ("trn3", 6e12)


def test_z_link_and_levels_overrides():
    us = load_system("trn2-ultraserver", ["topology.z_link.latency=3us"])
    assert us.topology.z_link == dataclasses.replace(us.topology.z_link, bandwidth=128e9)
    assert us.topology.z_link.latency == 3e-6
    t3 = load_system("trn3-ultraserver", ["topology.levels.rack.bandwidth=640GB/s"])
    assert t3.topology.levels[1].bandwidth == 640e9


def test_z_link_defaults_to_link_key_by_key(write_yaml):
    path = write_yaml(
        "z.yaml",
        "base: trn2-48xl\nname: z\ntopology:\n  dims: [4, 4, 2]\n"
        "  z_link:\n    bandwidth: 64GB/s\n",
    )
    z = load_system(str(path)).topology.z_link
    assert (z.bandwidth, z.latency) == (64e9, 1.5e-6)


def test_lnc_and_ranks_per_chip():
    assert load_system("trn2-48xl", ["lnc=1"]).ranks == 128
    cfg = load_system("trn2-48xl", ["lnc=1"])
    assert cfg.chip.lnc == 1  # the system's lnc is its chips'
    assert load_system("trn2-48xl", ["chip.lnc=1"]).ranks == 128
    assert load_system("trn2-48xl", ["ranks_per_chip=1"]).ranks == 16


# ---------------------------------------------------------------------------------------------
# rank numbering


def test_rank_place_is_chip_major():
    cfg = load_system("trn2-48xl")
    assert [cfg.rank_place(r) for r in range(6)] == [
        (0, 0), (0, 1), (0, 2), (0, 3), (1, 0), (1, 1),
    ]  # fmt: skip
    assert cfg.rank_place(63) == (15, 3)
    assert list(cfg.chip_ranks(2)) == [8, 9, 10, 11]
    spread = load_system("trn2-48xl", ["ranks_per_chip=2"])
    assert [spread.rank_place(r) for r in range(4)] == [(0, 0), (0, 2), (1, 0), (1, 2)]


def test_chip_coords_and_nodes():
    cfg = load_system("trn2-48xl-x4")
    assert cfg.chip_coords(0) == (0, 0)
    assert cfg.chip_coords(1) == (1, 0)  # x fastest
    assert cfg.chip_coords(5) == (1, 1)
    assert cfg.chip_coords(16 + 7) == (3, 1)  # within its node
    assert [cfg.chip_node(c) for c in (0, 15, 16, 63)] == [0, 0, 1, 3]
    assert cfg.coords_chip((3, 1), node=1) == 23
    us = load_system("trn2-ultraserver")
    assert us.chip_coords(63) == (3, 3, 3) and us.chip_coords(16) == (0, 0, 1)
    t3 = load_system("trn3-ultraserver")
    assert t3.chip_coords(21) == (5, 1)  # chip 5 of server 1
    assert t3.coords_chip((5, 1)) == 21


def test_rank_errors_name_the_range():
    cfg = load_system("trn2-48xl")
    with pytest.raises(
        RankError, match=r"^rank 64 is out of range: this system has ranks 0\.\.63$"
    ):
        cfg.rank_place(64)
    with pytest.raises(RankError, match=r"ranks 0\.\.63"):
        cfg.rank_place(-1)
    with pytest.raises(
        RankError, match=r"^chip 16 is out of range: this system has chips 0\.\.15$"
    ):
        cfg.chip_coords(16)
    assert isinstance(RankError("x"), TrnsimError) and isinstance(RankError("x"), IndexError)


# ---------------------------------------------------------------------------------------------
# derived figures and plain data


def test_derived_figures():
    d = system_derived(load_system("trn2-48xl"))
    assert d["links"]["total"] == 4 * 256e9
    assert d["bisection_bandwidth"]["node"] == 2 * 4 * 256e9  # a cut across 4 rings of 4
    assert d["efa"]["rank"] == 25e9 / 4  # 50 Gbps per rank at LNC 2 (R-CC)
    us = system_derived(load_system("trn2-ultraserver"))
    assert us["links"]["total"] == 4 * 256e9 + 2 * 128e9  # 1.28 TB/s per chip (S-T2)
    assert us["bisection_bandwidth"]["node"] == 2 * 16 * 128e9  # the Z cut is the narrowest
    x4 = system_derived(load_system("trn2-48xl-x4"))
    assert x4["bisection_bandwidth"]["system"] == 2 * 16 * 25e9  # 2 nodes' EFA each way


def test_system_dict_is_keyed_as_the_yaml():
    t3 = system_dict(load_system("trn3-ultraserver"))
    assert t3["topology"] == {
        "kind": "switch",
        "levels": {
            "server": {"chips": 16, "bandwidth": 256e9, "latency": 1.5e-6},
            "rack": {"chips": 64, "bandwidth": 320e9, "latency": 2e-6},
        },
    }
    t2 = system_dict(load_system("trn2-48xl"))
    assert set(t2["topology"]) == {"kind", "dims", "link"}
    assert t2["chip"]["cc"]["packet_bytes"] == 65536


# ---------------------------------------------------------------------------------------------
# errors: one line, naming the file, the line and the key


def shown(path: Path) -> str:
    """A path as messages show it: relative to the working directory when below it."""
    return str(path.relative_to(Path.cwd())) if path.is_relative_to(Path.cwd()) else str(path)


def error(name_or_path, overrides=()):
    with pytest.raises(ConfigError) as info:
        load_system(str(name_or_path), overrides)
    message = str(info.value)
    assert "\n" not in message
    return message


def test_unknown_key_with_a_suggestion(write_yaml):
    path = write_yaml("bad.yaml", "base: trn2-48xl\nefa:\n  latncy: 10us\n")
    assert error(path) == f"{path}:3: efa.latncy: unknown key 'latncy'; did you mean 'latency'?"
    assert error("trn2-48xl", ["topology.link.bandwdth=1GB/s"]) == (
        "--set topology.link.bandwdth=1GB/s: unknown key 'topology.link.bandwdth'; "
        "did you mean 'topology.link.bandwidth'?"
    )
    assert error("trn2-48xl", ["chip.hbm.bandwdth=4TB/s"]) == (
        "--set chip.hbm.bandwdth=4TB/s: unknown key 'chip.hbm.bandwdth'; "
        "did you mean 'chip.hbm.bandwidth'?"
    )
    assert error("trn3-ultraserver", ["topology.levels.srever.latency=1us"]) == (
        "--set topology.levels.srever.latency=1us: unknown key 'topology.levels.srever.latency'; "
        "did you mean 'topology.levels.server.latency'?"
    )
    assert error("trn2-48x") == (
        "unknown system 'trn2-48x'; did you mean 'trn2-48xl'? available: "
        + ", ".join(BUNDLED)
        + " (or a path to a YAML file)"
    )


def test_bad_unit(write_yaml):
    path = write_yaml("bad.yaml", "base: trn2-48xl\nefa:\n  bandwidth: 200Gbps\n")
    assert error(path).startswith(
        f"{path}:3: efa.bandwidth: expected a bandwidth like '2.9TB/s' (B/s, KB/s"
    )
    assert error("trn2-48xl", ["chip.hbm.bandwidth=4Tb/s"]).startswith(
        "--set chip.hbm.bandwidth=4Tb/s: chip.hbm.bandwidth: expected a bandwidth like"
    )


def test_counts():
    assert error("trn2-48xl", ["nodes=0"]) == "--set nodes=0: nodes: must be greater than 0, got 0"
    assert error("trn2-48xl", ["ranks_per_chip=3"]) == (
        "--set ranks_per_chip=3: ranks_per_chip: ranks_per_chip (3) must divide the chip's "
        "logical cores (4 = chip.cores 8 / lnc 2)"
    )
    assert error("trn2-48xl", ["lnc=1", "chip.lnc=2"]).startswith(
        "--set chip.lnc=2: chip.lnc: lnc (1) and chip.lnc (2) disagree"
    )
    assert "lnc (4) is not in chip.lnc_allowed [1, 2]" in error("trn2-48xl", ["lnc=4"])


def test_errors_in_the_chip_name_the_chip_file(write_yaml):
    write_yaml("chip.yaml", "base: trn2\nhbm:\n  bandwith: 4TB/s\n")
    path = write_yaml("s.yaml", "base: trn2-48xl\nchip: chip.yaml\n")
    assert error(path) == (
        f"{path.parent / 'chip.yaml'}:3: chip.hbm.bandwith: unknown key 'bandwith'; "
        "did you mean 'bandwidth'?"
    )
    path = write_yaml("s2.yaml", "base: trn2-48xl\nchip: trn9\n")
    assert error(path) == (
        f"{path}:2: chip: unknown chip 'trn9'; did you mean 'trn3'? available: trn1, trn2, trn3 "
        "(or a path to a YAML file)"
    )
    path = write_yaml("s3.yaml", "base: trn2-48xl\nchip: {name: trn2}\n")
    assert error(path).startswith(f"{path}:2: chip: expected a chip name or a path")
    assert error("trn2-48xl", ["chip.core.tensor.rows=256"]) == (
        "--set chip.core.tensor.rows=256: chip.core.tensor.rows: core.tensor.rows (256) "
        "exceeds core.sbuf.partitions (128)"
    )


def test_topology_rules(write_yaml):
    assert error("trn2-48xl", ["topology.kind=mesh"]) == (
        "--set topology.kind=mesh: topology.kind: expected one of torus, switch, got 'mesh'"
    )
    assert error("trn2-48xl", ["topology.z_link.bandwidth=1GB/s"]) == (
        "--set topology.z_link.bandwidth=1GB/s: topology.z_link.bandwidth: only a 3-D torus has "
        "Z links; dims [4, 4] has 2"
    )
    assert error("trn3-ultraserver", ["topology.levels.rack.chips=40"]) == (
        "--set topology.levels.rack.chips=40: topology.levels.rack.chips: level rack has 40 "
        "chips, not a larger multiple of level server's 16"
    )
    path = write_yaml("t.yaml", "base: trn2-48xl\ntopology:\n  dims: [2, 2, 2, 2]\n")
    assert (
        error(path) == f"{path}:3: topology.dims: at most 3 dimensions (x, y, z), got [2, 2, 2, 2]"
    )
    assert error("trn2-48xl", ["collectives.algorithm=fast"]).endswith(
        f"expected one of {', '.join(ALGORITHMS)}, got 'fast'"
    )
    assert error("trn2-48xl", ["collectives.mesh_max=100MB"]) == (
        "--set collectives.mesh_max=100MB: collectives.mesh_max: collectives.mesh_max "
        "(100,000,000 B) exceeds collectives.rdh_max (56,000,000 B)"
    )


def test_the_links_rule_names_both_keys_and_files():
    """The system file owns the per-link figures, the chip config the per-chip total: a chip's
    in-node links may not add up to more than chip.chip_links.bandwidth."""
    chip_file = shown(configs_dir() / "trn2.yaml")
    line = next(
        i + 1
        for i, text in enumerate((configs_dir() / "trn2.yaml").read_text().splitlines())
        if text.startswith("  bandwidth: 1024GB/s")
    )
    assert error("trn2-48xl", ["topology.link.bandwidth=300GB/s"]) == (
        "--set topology.link.bandwidth=300GB/s: topology.link.bandwidth: 4 X and Y links x "
        "300 GB/s = 1.2 TB/s per chip exceeds chip.chip_links.bandwidth (1.024 TB/s, "
        f"{chip_file}:{line}): the system file owns each link's figures, the chip config the "
        "per-chip total (docs/systems.md)"
    )
    system_file = shown(systems_dir() / "trn2-48xl.yaml")
    message = error("trn2-48xl", ["chip.chip_links.bandwidth=512GB/s"])
    assert message.startswith(
        "--set chip.chip_links.bandwidth=512GB/s: chip.chip_links.bandwidth: "
        "chip.chip_links.bandwidth (512 GB/s) is less than 4 X and Y links x 256 GB/s"
    )
    assert f"(topology.link.bandwidth, {system_file}:" in message
    assert "the levels' 3 TB/s + 320 GB/s" in error(
        "trn3-ultraserver", ["topology.levels.server.bandwidth=3TB/s"]
    )
    assert "more than chip.chip_links.links (2" in error("trn2-48xl", ["chip.chip_links.links=2"])
    # the Z links of an UltraServer cross instances: not in the chip's in-instance total
    assert load_system("trn2-ultraserver").chip.chip_links.bandwidth == 1024e9


def test_not_a_system(write_yaml):
    path = write_yaml("list.yaml", "- 1\n")
    assert error(path) == (f"{path}: not a system config (expected a YAML mapping of config keys)")
    path = write_yaml("nochip.yaml", "name: x\n")
    assert error(path).startswith(f"{path}: missing key 'chip'")
