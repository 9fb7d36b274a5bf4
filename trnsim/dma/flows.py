"""Flows, and the groups and components the fluid model keeps them in.

A flow has an amount of `work` and uses resources: for each, `coef` units of the resource per
unit of work. Flows with the same resources and cap always share one max-min fair rate (the
level at which the first of their resources saturated, whatever their coefs), so they are kept
in groups keyed by (resources, cap): a group has one rate, one progress counter (work done per
member since the group formed) and a heap of its members' finishing points. Groups linked
through shared resources form a component, the unit that `filling` recomputes.
"""

from __future__ import annotations

import math
from collections.abc import Callable

# a flow is done when what is left would take it less than this many ps
DONE_PS = 1e-3


class Flow:
    """One unit of work moving through resources.

    `key` orders flows for tie-breaks (flows completing at the same ps are reported in key
    order, so keys must be unique and comparable); `uses` is a tuple of (resource id, coef)
    with distinct ids; `cap` bounds the rate (math.inf: only the resources do; a flow needs a
    finite cap or a resource with a positive coef); `on_done(flow)` is called at completion.
    """

    __slots__ = ("key", "work", "uses", "cap", "on_done", "data", "target", "group", "coefs")

    def __init__(
        self,
        key: tuple,
        work: float,
        uses: tuple[tuple[int, float], ...],
        cap: float,
        on_done: Callable[[Flow], None],
        data=None,
    ):
        self.key = key
        self.work = work
        self.uses = uses
        self.cap = cap
        self.on_done = on_done
        self.data = data
        self.target = 0.0  # the group's progress at which this flow is done
        self.group: Group | None = None
        self.coefs: tuple[float, ...] = ()  # its coefs, in its group's rids order, once started

    @property
    def rate(self) -> float:
        """Work units per ps now (0 before the flow's first update or after it finished)."""
        return self.group.rate if self.group is not None else 0.0

    def __lt__(self, other: Flow) -> bool:
        return self.key < other.key


class Group:
    """Flows with the same resources and cap: one rate, one progress counter.

    Progress (work done per member since the group formed) is `base + rate * (t - t_base)`;
    it is rebased whenever the rate or the membership changes. `comp` caches the group's
    component while `topo` matches the model's; `bound` caches the lowest level at which the
    group's cap or one of its private resources (used by no other group of `bound_comp`) stops
    it, until its coefs or its component change.
    """

    __slots__ = (
        "sig",
        "rids",
        "cap",
        "coefs",
        "members",
        "base",
        "t_base",
        "rate",
        "version",
        "order",
        "comp",
        "topo",
        "bound",
        "bound_comp",
        "caps",
        "alone_coefs",
        "watch",
    )

    def __init__(self, sig: tuple, cap: float, now: int, order: int, caps: tuple[float, ...]):
        self.sig = sig
        self.rids: tuple[int, ...] = sig[0]
        self.caps = caps  # its resources' capacities, in rids order
        self.cap = cap
        self.coefs = [0.0] * len(self.rids)
        self.members: list[tuple[float, Flow]] = []  # heap of (target progress, flow)
        self.base = 0.0
        self.t_base = now
        self.rate = 0.0
        self.version = 0  # bumped when the timer entry for the head flow goes stale
        self.order = order  # creation order: fixes the filling order within a component
        self.comp: Component | None = None
        self.topo = -1
        self.bound = math.inf
        self.bound_comp: Component | None = None
        self.alone_coefs: list[float] | None = None  # the coefs `bound` is for, when alone
        self.watch: tuple[tuple[int, int], ...] = ()  # (resource, position) of the watched ones

    def rebase(self, now: int) -> None:
        self.base += self.rate * (now - self.t_base)
        self.t_base = now

    def head_finish(self) -> float:
        """When the first member finishes at the current rate, in (fractional) ps."""
        return self.t_base + (self.members[0][0] - self.base) / self.rate


def flow_key(f: Flow) -> tuple:
    return f.key


def creation_order(g: Group) -> int:
    return g.order


class Component:
    """A connected component of groups, and how their resources are shared, for filling.

    `groups` in creation order; `private[i]` / `shared[i]`: (resource, position in the group's
    rids) for the resources of `groups[i]` that no other group of the component uses / that
    some other one does; `users`: shared resource -> (group index, position) of its users.
    """

    __slots__ = ("groups", "private", "shared", "users")

    def __init__(self, groups: list[Group], users: dict[int, dict[Group, None]]):
        self.groups = groups
        self.private: list[tuple[tuple[int, int], ...]] = []
        self.shared: list[tuple[tuple[int, int], ...]] = []
        self.users: dict[int, list[tuple[int, int]]] = {}
        for i, g in enumerate(groups):
            priv, shar = [], []
            for pos, r in enumerate(g.rids):
                if len(users[r]) > 1:
                    shar.append((r, pos))
                    self.users.setdefault(r, []).append((i, pos))
                else:
                    priv.append((r, pos))
            self.private.append(tuple(priv))
            self.shared.append(tuple(shar))

    @classmethod
    def alone(cls, g: Group, private: tuple[tuple[int, int], ...]) -> Component:
        """The component of a group that shares none of its resources (`private`: each of them
        with its position): what __init__ gives for [g], built without looking at the users."""
        c = cls.__new__(cls)
        c.groups, c.private, c.shared, c.users = [g], [private], [()], {}
        return c
