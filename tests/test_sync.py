"""Semaphores: waits fire exactly when the counter reaches the value, in arrival order."""

import simpy

from trnsim.sync import Semaphores


def test_wait_fires_when_threshold_reached():
    env = simpy.Environment()
    sems = Semaphores(env, ["a"])
    log = []

    def waiter(name, value):
        ev = sems.wait(0, value)
        if ev is not None:
            yield ev
        log.append((name, env.now))

    def signaller():
        for _ in range(3):
            yield env.timeout(10)
            sems.signal(0, 1)

    env.process(waiter("two", 2))
    env.process(waiter("one", 1))
    env.process(waiter("three", 3))
    env.process(signaller())
    env.run()
    assert log == [("one", 10), ("two", 20), ("three", 30)]


def test_met_wait_costs_no_event():
    env = simpy.Environment()
    sems = Semaphores(env, ["a", "b"])
    sems.signal(1, 5)
    assert sems.wait(1, 5) is None
    assert sems.wait(0, 1) is not None
    assert sems.values == [0, 5]
