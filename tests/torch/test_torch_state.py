"""The system of a torch job with overrides (trnsim.torch.state): TRNSIM_SYSTEM_SET and
`configure(system_set=...)`, the `--set` strings of `trnsim systems show`, so an unedited
script can run one rank per chip (docs/distributed.md, "Running an unedited script")."""

import os
import subprocess
import sys

import pytest

pytest.importorskip("torch")
import trnsim.torch  # noqa: E402
from trnsim.torch import state  # noqa: E402


@pytest.mark.parametrize(
    "text, items",
    [
        ("", []),
        ("  ranks_per_chip=1 ", ["ranks_per_chip=1"]),
        (
            "ranks_per_chip=1  topology.link.bandwidth=128GB/s\ncollectives.algorithm=ring",
            ["ranks_per_chip=1", "topology.link.bandwidth=128GB/s", "collectives.algorithm=ring"],
        ),
        # a value may hold spaces: a new item starts only at a key followed by "="
        ("topology.dims=[4, 2] nodes=2", ["topology.dims=[4, 2]", "nodes=2"]),
    ],
)
def test_the_variable_s_items_are_split_at_each_key(text, items):
    assert state.split_sets(text) == items


def test_the_overrides_reach_the_system():
    cfg = state.system_config("trn2-48xl", ["ranks_per_chip=1", "topology.link.bandwidth=128GB/s"])
    assert cfg.ranks_per_chip == 1 and cfg.ranks == 16
    assert cfg.topology.link.bandwidth == 128e9
    assert [cfg.rank_place(r) for r in (0, 1)] == [(0, 0), (1, 0)]  # one rank a chip
    assert state.system_config("trn2-48xl").rank_place(1) == (0, 1)  # the file's own


@pytest.mark.parametrize(
    "sets, says",
    [
        (
            ["rank_per_chip=1"],
            "rank_per_chip=1: unknown key 'rank_per_chip'; did you mean 'ranks_per_chip'?",
        ),  # fmt: skip
        (["ranks_per_chip=3"], "ranks_per_chip (3) must divide the chip's logical cores"),
        ("ranks_per_chip", "ranks_per_chip: expected key.path=value"),
    ],
)
def test_a_bad_override_is_a_one_line_error_naming_it(sets, says):
    """Checked when configure is called (before its refusal of a device already in use)."""
    with pytest.raises(RuntimeError) as e:
        trnsim.torch.configure(system="trn2-48xl", system_set=sets)
    msg = str(e.value)
    assert msg.startswith("configure(system_set=...): ") and says in msg, msg
    assert msg.endswith("(system trn2-48xl)") and "\n" not in msg


def test_overrides_without_a_system_take_the_chip_s_default_system():
    assert state.default_system("trn2", None) == "trn2-48xl"  # trn2's default LNC is 2
    assert state.default_system("trn2", 1) is None
    with pytest.raises(ValueError, match="has no default system; give system="):
        trnsim.torch.configure("trn2", lnc=1, system_set=["ranks_per_chip=1"])


_SCRIPT = """
import os, torch, trnsim.torch
from trnsim.torch import state
os.environ["TRNSIM_SYSTEM_SET"] = "ranks_per_chip=1 topology.link.bandwidht=1GB/s"
try:
    torch.zeros(1, device="neuron")
except RuntimeError as e:
    print(e)
os.environ["TRNSIM_SYSTEM_SET"] = "ranks_per_chip=1  topology.link.bandwidth=128GB/s"
torch.zeros(1, device="neuron")
s = state.get().system
print(s.name, s.ranks_per_chip, s.topology.link.bandwidth, s.rank_place(1))
"""


def test_the_environment_variable_sets_an_unedited_script_s_system():
    """TRNSIM_SYSTEM_SET without TRNSIM_SYSTEM: the chip's default system (trn2 -> trn2-48xl)
    with the overrides; a bad key is a one-line error at the device's first use naming the
    variable and the key (the device stays unmade: the script can fix it and go on)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRNSIM_")}
    out = subprocess.run([sys.executable, "-c", _SCRIPT], env=env, capture_output=True,
                         text=True, timeout=120)  # fmt: skip
    assert out.returncode == 0, out.stderr
    error, got = out.stdout.strip().splitlines()
    assert error.startswith("TRNSIM_SYSTEM_SET: topology.link.bandwidht=1GB/s: unknown key "
                            "'topology.link.bandwidht'; did you mean "
                            "'topology.link.bandwidth'?"), error  # fmt: skip
    assert got == "trn2-48xl 1 128000000000.0 (1, 0)"


def test_a_recording_under_overrides_says_how_to_replay_it(monkeypatch):
    """A rank's trace names its system (`system: trn2-48xl`); the overrides are the replay's
    `--set`s, which the recording's warning gives."""
    from types import SimpleNamespace

    from trnsim.torch.record_write import _system

    monkeypatch.setitem(state._settings, "system", "trn2-48xl")
    monkeypatch.setitem(state._settings, "system_set", ("ranks_per_chip=1",))
    chip = SimpleNamespace(system=state.system_config("trn2-48xl", ["ranks_per_chip=1"]))
    with pytest.warns(UserWarning, match="replay with --system trn2-48xl --set ranks_per_chip=1"):
        assert _system(chip) == "trn2-48xl"
