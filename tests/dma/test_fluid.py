"""The fluid max-min fair sharing model on its own: resources are plain capacities (units/ps),
flows are work with coefficients. Every expected time below is worked out by hand."""

import math

import pytest
import simpy

from trnsim.dma.fluid import Flow, FluidModel


def model():
    env = simpy.Environment()
    return env, FluidModel(env)


def run_flows(env, fm, specs):
    """specs: (start_ps, key, work, uses, cap). Returns {key: end_ps} and the flows."""
    ends, flows = {}, {}

    def done(f):
        ends[f.key] = env.now

    def starter(at, f):
        yield env.timeout(at)
        fm.start(f)

    for at, key, work, uses, cap in specs:
        f = flows[key] = Flow(key, work, tuple(uses), cap, done)
        env.process(starter(at, f))
    env.run()
    return ends, flows


def test_one_flow_takes_work_over_capacity():
    """1000 units at 0.5 units/ps -> 2000 ps; a fractional end rounds up to the next ps."""
    env, fm = model()
    r = fm.add_resource(0.5)
    ends, _ = run_flows(
        env, fm, [(0, "a", 1000.0, [(r, 1.0)], math.inf), (5000, "b", 1000.5, [(r, 1.0)], math.inf)]
    )
    assert ends == {"a": 2000, "b": 5000 + 2001}


def test_two_flows_share_equally():
    """Both on one capacity-1 resource: each at 1/2; a (100) ends at 200, then b (300) has 200
    left alone at rate 1: ends at 400."""
    env, fm = model()
    r = fm.add_resource(1.0)
    ends, _ = run_flows(
        env, fm, [(0, "a", 100.0, [(r, 1.0)], math.inf), (0, "b", 300.0, [(r, 1.0)], math.inf)]
    )
    assert ends == {"a": 200, "b": 400}


def test_late_arrival():
    """a (1000) alone on cap 1 until 400 (600 left); then a and b share: a's 600 at 1/2 ->
    ends at 1600; b did 600 by then, its last 100 at rate 1 -> 1700."""
    env, fm = model()
    r = fm.add_resource(1.0)
    ends, _ = run_flows(
        env, fm, [(0, "a", 1000.0, [(r, 1.0)], math.inf), (400, "b", 700.0, [(r, 1.0)], math.inf)]
    )
    assert ends == {"a": 1600, "b": 1700}


def test_max_min_fairness_textbook():
    """Resources A, B of capacity 1. f1 uses A; f2 uses A and B; f3, f4 use B.
    Level rises together: B saturates first at 1/3 (f2, f3, f4 freeze there); A then has
    2/3 left for f1. Loads: A = 1/3 + 2/3 = 1, B = 1."""
    env, fm = model()
    a, b = fm.add_resource(1.0), fm.add_resource(1.0)
    flows = {
        k: Flow(k, 1e6, u, math.inf, lambda f: None)
        for k, u in [
            ("f1", ((a, 1.0),)),
            ("f2", ((a, 1.0), (b, 1.0))),
            ("f3", ((b, 1.0),)),
            ("f4", ((b, 1.0),)),
        ]
    }
    for f in flows.values():
        fm.start(f)
    env.run(until=1)
    assert flows["f1"].rate == pytest.approx(2 / 3)
    for k in ("f2", "f3", "f4"):
        assert flows[k].rate == pytest.approx(1 / 3)
    assert fm.load == {a: pytest.approx(1.0), b: pytest.approx(1.0)}
    assert fm.remaining(flows["f1"]) == pytest.approx(1e6 - 2 / 3)


def test_coefficients_scale_resource_use():
    """A flow using 4 units of R per unit of work on a capacity-2 resource runs at 1/2."""
    env, fm = model()
    r = fm.add_resource(2.0)
    ends, _ = run_flows(env, fm, [(0, "a", 100.0, [(r, 4.0)], math.inf)])
    assert ends == {"a": 200}


def test_cap_limits_a_flow_and_frees_the_rest():
    """Cap 0.25 on f1; f2 takes the remaining 0.75 of the resource."""
    env, fm = model()
    r = fm.add_resource(1.0)
    ends, flows = run_flows(
        env, fm, [(0, "f1", 100.0, [(r, 1.0)], 0.25), (0, "f2", 300.0, [(r, 1.0)], math.inf)]
    )
    assert ends == {"f1": 400, "f2": 400}


def test_ties_complete_in_key_order_and_callbacks_can_start_flows():
    """Two equal flows end at 200 together: reported in key order; the first one's callback
    starts a follow-up flow at the same ps, which then runs alone (100 at rate 1 -> 300)."""
    env, fm = model()
    r = fm.add_resource(1.0)
    log = []

    def done(f):
        log.append((f.key, env.now))
        if f.key == (0, "a"):
            fm.start(Flow((1, "c"), 100.0, ((r, 1.0),), math.inf, done))

    for key in [(0, "b"), (0, "a")]:
        fm.start(Flow(key, 100.0, ((r, 1.0),), math.inf, done))
    env.run()
    assert log == [((0, "a"), 200), ((0, "b"), 200), ((1, "c"), 300)]


def test_separate_components_do_not_interact():
    """Flows on disjoint resources keep their own rates when the other side changes."""
    env, fm = model()
    a, b = fm.add_resource(1.0), fm.add_resource(1.0)
    ends, _ = run_flows(
        env,
        fm,
        [
            (0, "x", 1000.0, [(a, 1.0)], math.inf),
            (0, "y", 100.0, [(b, 1.0)], math.inf),
            (0, "z", 100.0, [(b, 1.0)], math.inf),
        ],
    )
    assert ends == {"x": 1000, "y": 200, "z": 200}
    assert fm.count == 0 and fm.load == {}


def test_many_flows_are_fast():
    """2000 flows over 128 'engines' and 4 'stacks', starting at staggered times."""
    import time

    env, fm = model()
    engines = [fm.add_resource(1.0) for _ in range(128)]
    stacks = [fm.add_resource(20.0) for _ in range(4)]
    specs = [
        (
            i * 37 % 5000,
            i,
            1000.0 + i % 97,
            [(engines[i % 128], 1.0), (stacks[i % 128 // 32], 32.0)],
            math.inf,
        )
        for i in range(2000)
    ]
    t0 = time.perf_counter()
    ends, _ = run_flows(env, fm, specs)
    assert len(ends) == 2000 and time.perf_counter() - t0 < 10.0


def test_a_resource_of_one_flow_caps_it_and_frees_the_shared_one():
    """f1 uses A (capacity 1) at 4 per unit of work and S (capacity 1) at 1; f2 uses S only.
    A alone bounds f1 at 1/4, so S gives f2 the other 3/4: f1 (100) ends at 400, when f2 (600)
    has done 300; its last 300 at rate 1 -> 700."""
    env, fm = model()
    a, s = fm.add_resource(1.0), fm.add_resource(1.0)
    f1 = Flow("f1", 100.0, ((a, 4.0), (s, 1.0)), math.inf, lambda f: None)
    f2 = Flow("f2", 600.0, ((s, 1.0),), math.inf, lambda f: None)
    fm.start(f1)
    fm.start(f2)
    env.run(until=1)
    assert (f1.rate, f2.rate) == (pytest.approx(0.25), pytest.approx(0.75))
    assert fm.load == {a: pytest.approx(1.0), s: pytest.approx(1.0)}
    env, fm = model()
    a, s = fm.add_resource(1.0), fm.add_resource(1.0)
    ends, _ = run_flows(
        env,
        fm,
        [(0, "f1", 100.0, [(a, 4.0), (s, 1.0)], math.inf), (0, "f2", 600.0, [(s, 1.0)], math.inf)],
    )
    assert ends == {"f1": 400, "f2": 700}


def test_a_flow_bridging_two_components_joins_them_while_it_runs():
    """x on A, y on B (capacity 1 each, 1000 of work) from 0; z on A and B (100) at 200: all at
    1/2, z ends at 400, x and y have 700 left at rate 1 -> 1100... except that w (A and B, 100)
    arrives at 1050 and halves them again: x, y end at 1150; w's last 50 at rate 1 -> 1200."""
    env, fm = model()
    a, b = fm.add_resource(1.0), fm.add_resource(1.0)
    ends, _ = run_flows(
        env,
        fm,
        [
            (0, "x", 1000.0, [(a, 1.0)], math.inf),
            (0, "y", 1000.0, [(b, 1.0)], math.inf),
            (200, "z", 100.0, [(a, 1.0), (b, 1.0)], math.inf),
            (1050, "w", 100.0, [(a, 1.0), (b, 1.0)], math.inf),
        ],
    )
    assert ends == {"z": 400, "x": 1150, "y": 1150, "w": 1200}
    assert fm.count == 0 and fm.load == {}


def _reference(specs, capacity):
    """The same model worked out flow by flow, the slow way: at each event, max-min fair rates
    by progressive filling over single flows (no groups, no caching); a flow finishes at the
    first whole ps from which what it has left is under 1e-3 ps of work at its rate."""
    pending = sorted(specs, key=lambda s: s[0])
    left, uses, caps, rate, ends, now = {}, {}, {}, {}, {}, 0
    while pending or left:
        while pending and pending[0][0] <= now:
            _, key, work, u, cap = pending.pop(0)
            left[key], uses[key], caps[key] = work, dict(u), cap
        rate = {}
        while len(rate) < len(left):  # progressive filling: the open flows share one level
            level, why = math.inf, None
            for r, c in enumerate(capacity):
                open_c = sum(uses[k].get(r, 0.0) for k in left if k not in rate)
                if open_c > 0:
                    used = sum(uses[k].get(r, 0.0) * rate[k] for k in rate)
                    lvl = (c - used) / open_c
                    if lvl < level:
                        level, why = lvl, r
            for k in left:
                if k not in rate and caps[k] < level:
                    level, why = caps[k], None
            for k in list(left):
                if k not in rate and (
                    caps[k] <= level or (why is not None and uses[k].get(why, 0) > 0)
                ):
                    rate[k] = level
        nxt = min(
            (now + max(1, math.ceil(left[k] / rate[k] - 1e-3)) for k in left), default=math.inf
        )
        if pending:
            nxt = min(nxt, pending[0][0])
        for k in list(left):
            left[k] -= rate[k] * (nxt - now)
            if left[k] / rate[k] <= 1e-3:
                ends[k] = nxt
                del left[k]
        now = nxt
    return ends


@pytest.mark.parametrize("seed", range(40))
def test_matches_a_flow_by_flow_reference(seed):
    """Random flows (1-6 resources, shared or not, caps, coefficients, late starts): the grouped,
    component-cached model ends every flow at the reference's ps (within 1 ps: float order)."""
    import random

    rng = random.Random(seed)
    capacity = [rng.choice([1.0, 0.5, rng.uniform(0.1, 3.0)]) for _ in range(rng.randint(1, 6))]
    sigs = [
        rng.sample(range(len(capacity)), rng.randint(1, min(3, len(capacity))))
        for _ in range(rng.randint(1, 5))
    ]
    specs = []
    for k in range(rng.randint(1, 25)):
        uses = [
            (r, rng.choice([1.0, 0.5, rng.uniform(0.1, 4.0)])) for r in sorted(rng.choice(sigs))
        ]
        cap = rng.choice([math.inf, math.inf, rng.uniform(0.05, 1.0)])
        specs.append(
            (rng.choice([0, 0, rng.randint(0, 3000)]), k, rng.uniform(10.0, 2000.0), uses, cap)
        )
    env, fm = model()
    for c in capacity:
        fm.add_resource(c)
    ends, _ = run_flows(env, fm, specs)
    want = _reference(specs, capacity)
    assert set(ends) == set(want)
    assert all(abs(ends[k] - want[k]) <= 1 for k in want), {
        k: (ends[k], want[k]) for k in want if ends[k] != want[k]
    }
    assert fm.count == 0 and fm.load == {}
