"""Bus bandwidth never exceeds what the links can carry: a rank of an all-gather must receive
(n - 1)/n of the buffer (a reduce-scatter send it; an all-reduce does both, twice the bus
factor), so busbw <= what its chip's links can bring in (one rank a chip)."""

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.collectives.helpers import B, torus_world
from trnsim.collectives.build import applies

TOPOLOGIES = [(8,), (4, 4), (2, 4)]
ALGS = ["ring", "mesh", "mesh1", "rdh", "kangaring"]


@settings(max_examples=25, deadline=None)
@given(
    topo=st.sampled_from(TOPOLOGIES),
    op=st.sampled_from(["all_reduce", "all_gather", "reduce_scatter"]),
    alg=st.sampled_from(ALGS),
    rings=st.sampled_from([1, 2, 4]),
    size=st.integers(1, 64).map(lambda k: k * 4096),
    full=st.booleans(),
    data=st.data(),
)
def test_busbw_within_link_capacity(topo, op, alg, rings, size, full, data):
    w = torus_world(topo, rings=rings, links_only=not full, slices=2)
    chips = w.system.ranks
    group = data.draw(st.lists(st.integers(0, chips - 1), min_size=2, max_size=chips, unique=True))
    group = tuple(sorted(group))
    if applies(alg, op, group, w.ctx):
        alg = "ring"
    r = w.collective(op, group, size, algorithm=alg)
    # every chip of a torus has the same links in and out: 2 per dimension of size > 1
    per_chip = sum(2 * B for d in topo if d > 1)
    assert r.busbw <= per_chip * (1 + 1e-9), (r.algorithm, r.busbw, per_chip)
