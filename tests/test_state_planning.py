"""The state layer's pure decisions (supervisor/state/planning.py): where copies go, which snapshot is
complete, what is freed, where a rollback goes and from which copies, which peer a replica copies.
No Ray: examples and hypothesis properties."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from supervisor.state.kinds import StateKind
from supervisor.state.planning import (
    CopyMedium,
    GroupCopies,
    ShardCopy,
    choose_peer,
    complete_steps,
    copy_nodes,
    latest_complete,
    plan_rollback,
    snapshot_ranks,
    steps_to_free,
)

NODES = ["n0", "n1", "n2", "n3"]


def mem(step: int, rank: int, node: str) -> ShardCopy:
    return ShardCopy(step, rank, CopyMedium.MEMORY, node, 100, f"d{step}-{rank}")


def disk(step: int, rank: int) -> ShardCopy:
    return ShardCopy(step, rank, CopyMedium.DISK, "", 100, f"d{step}-{rank}")


# -- examples ------------------------------------------------------------------------------------


def test_copies_go_to_the_shards_node_and_the_next_one_never_both_on_one():
    assert copy_nodes("n1", NODES) == ("n1", "n2")
    assert copy_nodes("n3", NODES) == ("n3", "n0")  # wraps around
    assert copy_nodes("n0", ["n0"]) == ("n0",)  # one node: one copy
    assert copy_nodes("gone", ["n1", "n0"]) == ("n0", "n1")  # the shard's node has no keeper
    assert copy_nodes("n0", []) == ()


def test_a_snapshot_holds_every_shard_when_sharded_and_one_replica_when_replicated():
    assert snapshot_ranks(StateKind.SHARDED, 4) == (0, 1, 2, 3)
    assert snapshot_ranks(StateKind.REPLICATED, 4) == (0,)
    assert snapshot_ranks(StateKind.NONE, 4) == ()


def test_a_step_is_complete_only_while_every_shard_has_a_copy_on_a_live_node_or_disk():
    group = GroupCopies(StateKind.SHARDED, 2, (mem(3, 0, "n0"), mem(3, 1, "n1"), mem(4, 0, "n0"), mem(4, 1, "n1"), mem(5, 0, "n0")))
    assert complete_steps(group, NODES) == [3, 4]  # step 5 is in progress
    assert latest_complete(group, NODES) == 4
    assert complete_steps(group, ["n0"]) == []  # n1 held the only copies of rank 1
    with_disk = GroupCopies(StateKind.SHARDED, 2, group.copies + (disk(3, 1),))
    assert complete_steps(with_disk, ["n0"]) == [3]


def test_a_rollback_goes_to_the_newest_step_every_group_holds_preferring_memory():
    actor = GroupCopies(StateKind.SHARDED, 2, (mem(4, 0, "n0"), mem(4, 1, "n1"), mem(5, 0, "n0"), mem(5, 1, "n1"), disk(4, 1)))
    critic = GroupCopies(StateKind.REPLICATED, 2, (mem(4, 0, "n1"),))  # the critic's step-5 snapshot was not taken
    target = plan_rollback({"actor": actor, "critic": critic}, NODES)
    assert target is not None and target.step == 4 and target.medium is CopyMedium.MEMORY
    assert target.sources["actor"][1] == mem(4, 1, "n1")
    lost_n1 = plan_rollback({"actor": actor}, ["n0"])
    assert lost_n1 is not None and lost_n1.step == 4 and lost_n1.medium is CopyMedium.DISK
    assert plan_rollback({"actor": actor}, NODES, not_after=3) is None


def test_old_snapshots_are_freed_but_the_kept_ones_and_one_in_progress_stay():
    copies = tuple(mem(s, r, f"n{r}") for s in (1, 2, 3, 4) for r in (0, 1)) + (mem(5, 0, "n0"),)
    group = GroupCopies(StateKind.SHARDED, 2, copies)
    assert steps_to_free(group, NODES, keep=2) == [1, 2]


def test_a_replica_copies_a_peer_on_another_node_when_there_is_one():
    assert choose_peer({0: "n0", 1: "n1", 2: "n0"}, ["n0"]) == 1
    assert choose_peer({0: "n0", 2: "n0"}, ["n0"]) == 0
    assert choose_peer({}, ["n0"]) is None


# -- properties ------------------------------------------------------------------------------------

node_ids = st.sampled_from(NODES)
alive_sets = st.sets(node_ids)


@st.composite
def group_copies(draw: st.DrawFn, kind: StateKind | None = None) -> GroupCopies:
    kind = kind or draw(st.sampled_from([StateKind.SHARDED, StateKind.REPLICATED]))
    world = draw(st.integers(1, 4))
    copies = draw(
        st.lists(
            st.builds(
                ShardCopy,
                step=st.integers(0, 6),
                rank=st.integers(0, world - 1),
                medium=st.sampled_from(list(CopyMedium)),
                node=node_ids,
                nbytes=st.integers(1, 1000),
                digest=st.just("d"),
            ),
            max_size=30,
        )
    )
    # A disk copy has no node.
    copies = [ShardCopy(c.step, c.rank, c.medium, "" if c.medium is CopyMedium.DISK else c.node, c.nbytes, c.digest) for c in copies]
    return GroupCopies(kind, world, tuple(copies))


@given(shard_node=st.one_of(st.none(), node_ids), keepers=alive_sets)
def test_copy_placement(shard_node, keepers):
    nodes = copy_nodes(shard_node, keepers)
    assert len(nodes) == min(2, len(keepers)) and len(set(nodes)) == len(nodes)
    assert set(nodes) <= keepers
    if shard_node in keepers:
        # One copy survives the rank's process (its node), the other survives the node.
        assert nodes[0] == shard_node and shard_node not in nodes[1:]


@given(group=group_copies(), alive=alive_sets, more=alive_sets)
def test_losing_nodes_never_makes_a_step_complete(group, alive, more):
    assert set(complete_steps(group, alive)) <= set(complete_steps(group, alive | more))


@given(group=group_copies(), alive=alive_sets)
def test_a_complete_step_has_a_usable_copy_of_every_snapshot_rank(group, alive):
    for step in complete_steps(group, alive):
        for rank in group.ranks:
            assert any(c.step == step and c.rank == rank and (c.medium is CopyMedium.DISK or c.node in alive) for c in group.copies)


@settings(max_examples=200)
@given(groups=st.dictionaries(st.sampled_from(["actor", "critic", "ref"]), group_copies(), min_size=1, max_size=3),
       alive=alive_sets, not_after=st.one_of(st.none(), st.integers(0, 6)))  # fmt: skip
def test_a_rollback_target_is_the_newest_step_all_groups_can_load_from_usable_copies(groups, alive, not_after):
    target = plan_rollback(groups, alive, not_after)
    common = set.intersection(*(set(complete_steps(g, alive)) for g in groups.values()))
    eligible = {s for s in common if not_after is None or s <= not_after}
    if target is None:
        assert not eligible
        return
    assert target.step == max(eligible)
    for name, group in groups.items():
        sources = target.sources[name]
        assert set(sources) == set(group.ranks)
        for rank, copy in sources.items():
            assert copy.step == target.step and copy.rank == rank
            assert copy.medium is CopyMedium.DISK or copy.node in alive
            memory_there = any(
                c.step == target.step and c.rank == rank and c.medium is CopyMedium.MEMORY and c.node in alive for c in group.copies
            )
            assert (copy.medium is CopyMedium.MEMORY) == memory_there  # disk only when no memory copy survives
    assert (target.medium is CopyMedium.DISK) == any(c.medium is CopyMedium.DISK for s in target.sources.values() for c in s.values())


@given(group=group_copies(kind=StateKind.SHARDED), alive=alive_sets, keep=st.integers(1, 3))
def test_freeing_keeps_the_newest_complete_snapshots_and_anything_newer(group, alive, keep):
    freed = set(steps_to_free(group, alive, keep))
    complete = complete_steps(group, alive, CopyMedium.MEMORY)
    assert not freed & set(complete[-keep:])
    if complete:
        assert all(s < complete[-keep:][0] for s in freed)  # never an in-progress or newer snapshot
    else:
        assert not freed  # nothing complete: nothing may go
    assert freed <= {c.step for c in group.copies if c.medium is CopyMedium.MEMORY}


@given(survivors=st.dictionaries(st.integers(0, 7), st.one_of(st.none(), node_ids), max_size=6), targets=st.lists(node_ids, max_size=3))
def test_the_peer_is_a_survivor_off_the_replacements_nodes_when_one_exists(survivors, targets):
    peer = choose_peer(survivors, targets)
    if not survivors:
        assert peer is None
        return
    assert peer in survivors
    off = [r for r, n in survivors.items() if n not in set(targets)]
    if off:
        assert survivors[peer] not in set(targets) and peer == min(off)
