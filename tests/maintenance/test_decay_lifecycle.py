"""Importance decay, cleanup (archive or delete), atom expiry and coalesced access
statistics, all on a simulated clock."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from maint_support import Clock, Opener

from spade_memory.config import MaintenanceConfig
from spade_memory.errors import ConfigError, MemoryNotFound
from spade_memory.maintenance.decay import decayed_importance, is_protected
from spade_memory.manager import MemoryManager

RATE = 0.01


async def importance(memory: MemoryManager, memory_id: int) -> float:
    return (await memory.get(memory_id)).importance


async def test_decay_follows_the_days_and_is_slowed_by_access(
    open_memory: Opener, clock: Clock
) -> None:
    memory = await open_memory()
    plain = await memory.store("The printer on floor 3 jams on Mondays", importance=0.8)
    kept = await memory.store(
        "The root password lives in the vault", importance=0.8, metadata={"protected": True}
    )
    used = await memory.store("Standup moved to 9:45", importance=0.6)
    await memory.base_store.touch([used.id, used.id], clock())  # recalled twice

    first = await memory.maintenance.run_due()
    assert first["decay"]["decay"] == {"decayed": 0, "protected": 0, "days": 0.0}
    assert await importance(memory, plain.id) == 0.8  # the first run only starts the clock

    clock.advance(10)
    ran = await memory.maintenance.run_due()
    assert ran["decay"]["decay"]["decayed"] == 2 and ran["decay"]["decay"]["protected"] == 1
    assert await importance(memory, plain.id) == pytest.approx(0.8 * 0.99**10, rel=1e-12)
    assert await importance(memory, used.id) == pytest.approx(0.6 * 0.99 ** (10 / 3), rel=1e-12)
    assert await importance(memory, kept.id) == 0.8
    assert (await memory.get(used.id)).access_count == 1  # halved
    assert (await memory.get(kept.id)).access_count == 0

    assert "decay" not in await memory.maintenance.run_due()  # not due again yet
    clock.advance(1)
    await memory.maintenance.run_due()
    assert await importance(memory, plain.id) == pytest.approx(0.8 * 0.99**11, rel=1e-12)
    assert await importance(memory, used.id) == pytest.approx(
        0.6 * 0.99 ** (10 / 3) * 0.99 ** (1 / 2), rel=1e-12
    )
    assert (await memory.get(used.id)).access_count == 0
    last = await memory.maintenance.last_runs()
    assert last["decay"] == clock()


@given(
    value=st.floats(0, 1),
    days=st.floats(0, 5000),
    more=st.floats(0, 100),
    accesses=st.integers(0, 1000),
    rate=st.floats(0, 1),
)
def test_decayed_importance_stays_in_range_and_orders_sensibly(
    value: float, days: float, more: float, accesses: int, rate: float
) -> None:
    now = decayed_importance(value, days=days, access_count=accesses, rate=rate)
    later = decayed_importance(value, days=days + more, access_count=accesses, rate=rate)
    used = decayed_importance(value, days=days, access_count=accesses + 1, rate=rate)
    assert 0.0 <= later <= now <= value
    assert now <= used <= value
    assert decayed_importance(value, days=days, access_count=accesses, rate=0.0) == value


def test_protected_is_read_from_metadata_or_its_json() -> None:
    assert is_protected({"protected": True}) and is_protected('{"protected": true}')
    assert not is_protected({"protected": "yes"}) and not is_protected("not json")


CLEANUP = MaintenanceConfig(
    check_on_open=False,
    cleanup_max_importance=0.1,
    cleanup_min_age_days=30,
    cleanup_idle_days=10,
)


async def cleanup_candidates(memory: MemoryManager, clock: Clock) -> dict[str, int]:
    ids = {
        "faded": (await memory.store("The old intranet wiki moved", importance=0.05)).id,
        "recalled": (await memory.store("Lunch menu changes on Fridays", importance=0.05)).id,
        "protected": (
            await memory.store(
                "Fire exits are by the lifts", importance=0.05, metadata={"protected": True}
            )
        ).id,
        "important": (await memory.store("Backups run nightly at 2am", importance=0.9)).id,
    }
    await memory.maintenance.run_due()  # starts the decay clock
    clock.advance(40)
    await memory.base_store.touch([ids["recalled"]], clock() - 86_400)  # yesterday
    await memory.flush()
    return ids


async def test_cleanup_archives_old_unimportant_unused_memories_restorably(
    open_memory: Opener, clock: Clock
) -> None:
    memory = await open_memory(maintenance=CLEANUP)
    ids = await cleanup_candidates(memory, clock)
    ran = await memory.maintenance.run_due()
    cleaned = ran["decay"]["cleanup"]
    assert cleaned == {"policy": "archive", "archived": [ids["faded"]], "deleted": []}
    archived = await memory.get(ids["faded"])
    assert archived.status == "archived" and archived.metadata["archived_at"] == clock()
    assert ids["faded"] not in {m.id for m in await memory.list(limit=50)}
    assert all(r.memory.id != ids["faded"] for r in await memory.search("intranet wiki"))
    others = [ids["recalled"], ids["protected"], ids["important"]]
    assert [(await memory.get(i)).status for i in others] == ["active"] * 3

    restored = await memory.restore_archived(ids["faded"])
    assert restored.status == "active" and "archived_at" not in restored.metadata
    assert (await memory.search("intranet wiki"))[0].memory.id == ids["faded"]
    assert restored.last_accessed == clock()  # restored by hand: not idle
    clock.advance(1)
    ran = await memory.maintenance.run_due()  # the next day's cleanup keeps it
    assert ran["decay"]["cleanup"]["archived"] == []
    assert (await memory.get(ids["faded"])).status == "active"
    again = await memory.archive(ids["faded"])
    assert again.status == "archived"
    with pytest.raises(MemoryNotFound):
        await memory.archive(987654)


async def test_cleanup_can_delete_instead(open_memory: Opener, clock: Clock) -> None:
    config = MaintenanceConfig(
        check_on_open=False,
        cleanup_policy="delete",
        cleanup_max_importance=0.1,
        cleanup_min_age_days=30,
        cleanup_idle_days=10,
    )
    memory = await open_memory(maintenance=config)
    ids = await cleanup_candidates(memory, clock)
    ran = await memory.maintenance.run_due()
    assert ran["decay"]["cleanup"]["deleted"] == [ids["faded"]]
    with pytest.raises(MemoryNotFound):
        await memory.get(ids["faded"])
    assert (await memory.check()).clean


async def test_expired_atoms_are_recorded_and_hide_their_memory(
    open_memory: Opener, clock: Clock
) -> None:
    memory = await open_memory()
    plan = await memory.store("We will visit the science museum tomorrow", importance=0.5)
    fact = await memory.store("The science museum is in Kensington", importance=0.5)
    await memory.flush()  # atoms are derived right after the store
    assert [a.type for a in await memory.atoms(plan.id)] == ["plan"]
    first = await memory.maintenance.run_due()
    assert first["expiry"] == {"dormant": 0, "expired": 0}

    clock.advance(3.5)  # a plan lives 2 days * (1 + importance): 3 days
    ran = await memory.maintenance.run_due()
    assert ran["expiry"] == {"dormant": 1, "expired": 0}
    assert [a.status for a in await memory.atoms(plan.id)] == ["dormant"]
    assert [r.memory.id for r in await memory.search("science museum")] == [fact.id]

    clock.advance(1.5)  # dormant for half its lifetime, then expired
    ran = await memory.maintenance.run_due()
    assert ran["expiry"] == {"dormant": 0, "expired": 1}
    assert [a.status for a in await memory.atoms(plan.id)] == ["expired"]
    assert [a.status for a in await memory.atoms(fact.id)] == ["active"]


async def test_access_statistics_are_coalesced_into_one_write(
    open_memory: Opener, monkeypatch: pytest.MonkeyPatch
) -> None:
    memory = await open_memory()
    stored = await memory.store("Coalesced statistics are written in batches")
    base = memory.base_store
    calls: list[list[int]] = []
    original = base.touch

    async def counting(ids: object, when: float, **searches: Any) -> None:
        listed = list(ids)  # type: ignore[call-overload]
        calls.append(listed)
        await original(listed, when, **searches)

    monkeypatch.setattr(base, "touch", counting)
    for _ in range(5):
        assert (await memory.search("statistics batches"))[0].memory.id == stored.id
    assert calls == []  # nothing written yet: the accesses wait for the batch
    assert (await base.get(stored.id)).access_count == 0  # type: ignore[union-attr]
    await memory.flush()
    assert len(calls) == 1 and calls[0].count(stored.id) == 5
    assert (await memory.get(stored.id)).access_count == 5


async def test_one_run_under_a_clock_far_ahead_stops_no_job(
    open_memory: Opener, clock: Clock
) -> None:
    memory = await open_memory()
    await memory.store("The printer on floor 3 jams on Mondays", importance=0.8)
    assert {"expiry", "decay"} <= set(await memory.maintenance.run_due())
    started = clock.now
    clock.advance(365 * 30)  # set far ahead once, by mistake
    await memory.maintenance.run_due()
    clock.now = started + 2 * 86_400  # set right again: the jobs are due, not in 30 years
    assert {"expiry", "decay"} <= set(await memory.maintenance.run_due())
    assert (await memory.maintenance.last_runs())["decay"] == clock()


async def test_a_clock_set_back_a_little_runs_no_job_again(
    open_memory: Opener, clock: Clock
) -> None:
    memory = await open_memory()
    stored = await memory.store("The printer on floor 3 jams on Mondays", importance=0.8)
    await memory.base_store.touch([stored.id] * 8, clock())
    assert {"expiry", "decay"} <= set(await memory.maintenance.run_due())
    counted = (await memory.get(stored.id)).access_count
    for _ in range(2):
        clock.now -= 1.0  # a clock stepped back a second
        assert await memory.maintenance.run_due() == {}
    after = await memory.get(stored.id)
    assert after.access_count == counted and after.importance == stored.importance
    # a decay run with no time passed since the last changes nothing either
    assert (await memory.maintenance.decay()).decayed == 0
    assert (await memory.get(stored.id)).access_count == counted


async def test_a_plan_recorded_dormant_is_found_again_when_the_clock_comes_back(
    open_memory: Opener, clock: Clock
) -> None:
    memory = await open_memory()
    plan = await memory.store("We will meet Bob at the harbour tomorrow", importance=0.5)
    await memory.flush()
    started = clock.now
    clock.advance(3.5)
    assert (await memory.maintenance.expire())["dormant"] == 1
    assert await memory.search("harbour") == []
    clock.now = started + 86_400  # the clock set back: the plan has not lapsed yet
    assert [a.live for a in await memory.atoms(plan.id)] == [True]
    assert [r.memory.id for r in await memory.search("meet Bob at the harbour")] == [plan.id]


@pytest.mark.parametrize("bad", [-3600.0, 253_402_171_200.0, float("nan")])
async def test_a_clock_giving_no_storable_time_is_refused_with_nothing_written(
    open_memory: Opener, clock: Clock, bad: float
) -> None:
    memory = await open_memory()
    kept = await memory.store("The printer on floor 3 jams on Mondays")
    clock.now = bad
    with pytest.raises(ConfigError, match="clock"):
        await memory.store("stored with a broken clock")
    with pytest.raises(ConfigError, match="clock"):
        await memory.add_note("conv", "noted with a broken clock")
    with pytest.raises(ConfigError, match="clock"):
        await memory.history.append("conv", role="user", sender="bob@localhost", text="hi")
    clock.now = kept.created_at
    assert await memory.notes("conv") == []
    assert [m.id for m in await memory.list(limit=10)] == [kept.id]
    assert len((await memory.export())["memories"]) == 1


async def test_two_opens_of_one_memory_decay_it_once(open_memory: Opener, clock: Clock) -> None:
    first = await open_memory()
    second = await open_memory()  # a second open of the same memory, as a command would
    plain = await first.store("The printer on floor 3 jams on Mondays", importance=0.8)
    await first.maintenance.decay()  # starts the clock
    clock.advance(10)

    ran = await asyncio.gather(first.maintenance.decay(), second.maintenance.decay())

    assert sorted(result.decayed for result in ran) == [0, 1]
    assert await importance(first, plain.id) == pytest.approx(0.8 * 0.99**10, rel=1e-12)
    assert (await second.maintenance.last_runs())["decay"] == clock()
    await second.maintenance.decay()  # no time passed since: nothing more
    assert await importance(second, plain.id) == pytest.approx(0.8 * 0.99**10, rel=1e-12)
