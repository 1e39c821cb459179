"""Replacement planning with standbys and spare bundles, and capacity arithmetic: pure, no Ray."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from supervisor.errors import ConfigError
from supervisor.placement.layout import check_capacity_factor, spare_bundle_count, spare_placement_group_name
from supervisor.placement.standby import (
    BundleRef,
    Replacement,
    ReplacementKind,
    StandbyReach,
    free_bundles,
    plan_replacements,
    standby_bundles,
)

STANDBY, OWN, SPARE = ReplacementKind.STANDBY, ReplacementKind.OWN_BUNDLE, ReplacementKind.SPARE_BUNDLE
R0, R1, R2, R3 = (BundleRef(0, i) for i in range(4))  # the ranks' bundles
S0, S1 = BundleRef(1, 0), BundleRef(1, 1)  # spare bundles


def test_without_standbys_or_spares_a_rank_goes_back_to_its_own_bundle():
    plan = plan_replacements([1], {0: R0, 1: R1}, {R0: "a", R1: "a"}, {}, [])
    assert plan == [Replacement(1, OWN, R1)]
    # ... and waits for it when its node is gone: nothing else to go to.
    assert plan_replacements([1], {0: R0, 1: R1}, {R0: "a"}, {}, []) == [Replacement(1, OWN, R1)]


def test_a_standby_on_the_ranks_own_node_takes_over_even_when_the_bundle_is_placed():
    assert plan_replacements([1], {0: R0, 1: R1}, {R0: "a", R1: "a", S0: "a"}, {S0: "a"}, []) == [Replacement(1, STANDBY, S0)]


def test_a_standby_on_another_node_is_used_only_when_the_own_bundle_is_not_placed():
    placed = {R0: "a", R1: "a", S0: "b"}
    assert plan_replacements([1], {0: R0, 1: R1}, placed, {S0: "b"}, []) == [Replacement(1, OWN, R1)]
    del placed[R1]
    assert plan_replacements([1], {0: R0, 1: R1}, placed, {S0: "b"}, []) == [Replacement(1, STANDBY, S0)]


def test_with_any_node_reach_a_standby_on_another_node_wins_over_the_placed_own_bundle():
    placed = {R0: "a", R1: "a", S0: "b", S1: "a"}
    reach = StandbyReach.ANY_NODE
    assert plan_replacements([1], {0: R0, 1: R1}, placed, {S0: "b"}, [], reach) == [Replacement(1, STANDBY, S0)]
    # A standby on the rank's own node still comes first, and with none left the own bundle is next.
    plan = plan_replacements([0, 1], {0: R0, 1: R1}, placed, {S0: "b", S1: "a"}, [], reach)
    assert plan == [Replacement(0, STANDBY, S1), Replacement(1, STANDBY, S0)]
    assert plan_replacements([0, 1], {0: R0, 1: R1}, placed, {S1: "a"}, [], reach) == [Replacement(0, STANDBY, S1), Replacement(1, OWN, R1)]
    # A standby whose own bundle is not placed (its node just went) is never used.
    assert plan_replacements([1], {0: R0, 1: R1}, {R0: "a", R1: "a"}, {S0: "b"}, [], reach) == [Replacement(1, OWN, R1)]


def test_a_node_loss_uses_standbys_then_free_placed_spares_then_waits():
    ranks = {0: R0, 1: R1, 2: R2, 3: R3}
    placed = {S0: "b", S1: "b", BundleRef(1, 2): "b"}  # the ranks' node is gone
    plan = plan_replacements([3, 0, 1, 2], ranks, placed, {S0: "b"}, [S1, BundleRef(1, 2), BundleRef(1, 3)])
    assert plan == [
        Replacement(0, STANDBY, S0),  # rank 0 first: it picks the rendezvous
        Replacement(1, SPARE, S1),
        Replacement(2, SPARE, BundleRef(1, 2)),
        Replacement(3, OWN, R3),  # BundleRef(1, 3) is free but not placed
    ]


def test_each_standby_and_spare_is_used_once_and_same_node_standbys_win():
    ranks = {0: R0, 1: R1}
    placed = {R0: "a", R1: "b", S0: "b", S1: "a"}
    plan = plan_replacements([0, 1], ranks, placed, {S0: "b", S1: "a"}, [])
    assert plan == [Replacement(0, STANDBY, S1), Replacement(1, STANDBY, S0)]


def test_free_bundles_are_those_without_a_rank_or_a_standby():
    assert free_bundles([R0, R1, S0, S1], [R0, S0], [S1]) == [R1]


def test_standbys_start_in_placed_bundles_spread_over_nodes():
    placed = {R0: "a", R1: "a", S0: "b", S1: "b", BundleRef(1, 2): "c"}
    free = [R0, R1, S0, S1, BundleRef(1, 2), BundleRef(1, 3)]
    assert standby_bundles(free, placed, [], 3) == [R0, S0, BundleRef(1, 2)]
    assert standby_bundles(free, placed, ["a", "b"], 1) == [BundleRef(1, 2)]
    assert standby_bundles(free, placed, [], 0) == []
    assert standby_bundles([BundleRef(1, 3)], placed, [], 2) == []  # nothing placed: wait


@pytest.mark.parametrize(
    ("world", "factor", "spares"), [(8, 1.0, 0), (8, 1.25, 2), (8, 1.1, 1), (2, 1.5, 1), (4, 2.0, 4), (3, 1.0000001, 1), (10, 1.2, 2)]
)
def test_spare_bundles_round_the_extra_capacity_up(world, factor, spares):
    assert spare_bundle_count(world, factor) == spares


def test_capacity_factor_is_checked_and_names_the_spare_group():
    assert check_capacity_factor(1) == 1.0
    for bad in (0.99, -1, float("nan"), float("inf"), True, "1.5", None):
        with pytest.raises(ConfigError, match="capacity_factor must be a number >= 1.0"):
            check_capacity_factor(bad)
    assert spare_placement_group_name("sup.pool", [4, 4], 2) == "sup.pool:pg4_4:spare2"


def test_a_standby_on_a_lost_node_is_not_planned():
    placed = {S1: "b"}  # the ranks' node and S0's node are gone
    assert plan_replacements([0], {0: R0}, placed, {S0: "a", S1: "b"}, []) == [Replacement(0, STANDBY, S1)]
    assert plan_replacements([0], {0: R0}, {BundleRef(1, 2): "b"}, {S0: "a"}, [BundleRef(1, 2)]) == [Replacement(0, SPARE, BundleRef(1, 2))]


_BUNDLES = [BundleRef(pg, i) for pg in range(2) for i in range(4)]


@given(
    data=st.data(),
    world=st.integers(1, 4),
    reach=st.sampled_from(list(StandbyReach)),
)
def test_every_failed_rank_gets_one_replacement_and_no_standby_or_spare_serves_two(data, world, reach):
    ranks = {r: _BUNDLES[r] for r in range(world)}  # the ranks in placement group 0
    placed = {b: data.draw(st.sampled_from(["a", "b", None]), label=f"node of {b}") for b in _BUNDLES}
    placed = {b: n for b, n in placed.items() if n is not None}
    others = [b for b in _BUNDLES if b not in ranks.values()]
    standby_set = data.draw(st.sets(st.sampled_from(others)), label="standbys") if others else set()
    standbys = {b: placed.get(b) or "gone" for b in standby_set}
    free = [b for b in others if b not in standby_set]
    failed = data.draw(st.lists(st.sampled_from(sorted(ranks)), min_size=1, unique=True), label="failed")

    plan = plan_replacements(failed, ranks, placed, standbys, free, reach)

    assert [p.rank for p in plan] == sorted(failed)
    taken = [p.bundle for p in plan if p.kind is not OWN]
    assert len(taken) == len(set(taken))
    for p in plan:
        own_node = placed.get(ranks[p.rank])
        if p.kind is STANDBY:
            assert p.bundle in standbys and placed.get(p.bundle), "only a ready standby on a live node"
            if own_node and reach is StandbyReach.SAME_NODE:
                assert placed[p.bundle] == own_node, "same_node: a rank whose node is alive keeps it"
        elif p.kind is SPARE:
            assert p.bundle in free and placed.get(p.bundle) and not own_node
        else:
            assert p.bundle == ranks[p.rank]
