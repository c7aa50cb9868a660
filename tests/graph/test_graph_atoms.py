"""Memory atoms: split, typed, aged on a simulated clock, reinforced and superseded."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from spade_memory.config import AtomConfig, MemoryConfig, RetrievalConfig, StorageConfig
from spade_memory.errors import MemoryNotFound
from spade_memory.manager import MemoryManager
from spade_memory.models import Scope, SearchResult, Viewer
from spade_memory.retrieval.retriever import Retriever
from spade_memory.retrieval.search_state import SearchState
from spade_memory.text.atoms import build_atoms, classify_atom, ttl_seconds
from spade_memory.text.extraction import get_extractor

DAY = 86_400.0


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, days: float) -> None:
        self.now += days * DAY


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
async def memory(clock: Clock) -> AsyncIterator[MemoryManager]:
    # No retrieval cache: the clock jumps days between identical searches.
    retrieval = RetrievalConfig(cache_ttl_seconds=0)
    config = MemoryConfig(in_memory=True, embedder=None, retrieval=retrieval)
    async with await MemoryManager.open("atoms@localhost", config, clock=clock) as opened:
        await opened.maintenance.wait()  # the check on open, before writing
        yield opened


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ("Alice lives in Paris.", "fact"),
        ("Alice likes green tea.", "preference"),
        ("我喜欢喝咖啡。", "preference"),
        ("We will meet Bob tomorrow.", "plan"),
        ("我们明天去北京。", "plan"),
        ("Yesterday we went to the zoo.", "episode"),
        ("昨天我们去了动物园。", "episode"),
        ("Carol is a friend of Dave.", "relation"),
        ("hmm ok", "unknown"),
    ],
)
def test_atoms_are_typed_by_relations_and_cues(text: str, kind: str) -> None:
    relations = get_extractor().extract(text).relations
    assert classify_atom(text, relations) == kind


def test_the_memory_category_types_what_nothing_else_does() -> None:
    assert classify_atom("hmm ok", [], category="preference") == "preference"
    assert classify_atom("hmm ok", [], category="capability") == "fact"


def test_lifetimes_grow_with_importance() -> None:
    config = AtomConfig()
    assert ttl_seconds("plan", 0.0, config) == 2 * DAY
    assert ttl_seconds("fact", 1.0, config) == 360 * DAY
    assert ttl_seconds("nonsense", 0.0, config) == 30 * DAY


def test_a_memory_splits_into_sentence_atoms_with_claims() -> None:
    text = "Alice lives in Paris. She likes jazz! Meeting tomorrow?"
    atoms = build_atoms(
        text, get_extractor().extract(text), category="fact", importance=0.5, config=AtomConfig()
    )
    assert [a.text for a in atoms] == [
        "Alice lives in Paris.",
        "She likes jazz!",
        "Meeting tomorrow?",
    ]
    assert [a.type for a in atoms] == ["fact", "preference", "plan"]
    assert (atoms[0].subject, atoms[0].predicate, atoms[0].object) == ("alice", "lives_in", "paris")
    assert atoms[0].functional and not atoms[1].functional


async def test_a_plan_expires_goes_dormant_then_expired(
    memory: MemoryManager, clock: Clock
) -> None:
    plan = await memory.store("We will call Bob tomorrow.", importance=0.0)
    await memory.flush()  # graph and atoms are derived right after the store
    assert [a.type for a in await memory.live_atoms(plan.id)] == ["plan"]
    clock.advance(2.5)  # past its 2-day lifetime, inside the dormant half
    assert await memory.live_atoms(plan.id) == []
    assert [a.status for a in await memory.atoms(plan.id)] == ["dormant"]
    clock.advance(1.0)
    assert [a.status for a in await memory.atoms(plan.id)] == ["expired"]
    assert await memory.refresh_atoms() == {"dormant": 0, "expired": 1}


async def test_a_memory_whose_atoms_all_lapsed_leaves_search_results(
    memory: MemoryManager, clock: Clock
) -> None:
    plan = await memory.store("We will call Bob about the invoice tomorrow.", importance=0.0)
    fact = await memory.store("The invoice total is 40 euros.", importance=0.0)
    await memory.flush()  # graph and atoms are derived right after the store
    assert {r.memory.id for r in await memory.search("invoice")} == {plan.id, fact.id}
    clock.advance(3)
    assert [r.memory.id for r in await memory.search("invoice")] == [fact.id]
    relaxed = MemoryConfig(
        in_memory=True,
        embedder=None,
        atoms=AtomConfig(hide_expired=False),
        retrieval=RetrievalConfig(cache_ttl_seconds=0),
    )
    async with await MemoryManager.open("keep@localhost", relaxed, clock=clock) as keeping:
        await keeping.maintenance.wait()  # the check on open, before writing
        kept = await keeping.store("We will call Bob about the invoice tomorrow.")
        await keeping.flush()
        clock.advance(10)
        assert [r.memory.id for r in await keeping.search("invoice")] == [kept.id]


async def test_storing_a_fact_again_reinforces_and_revives_it(
    memory: MemoryManager, clock: Clock
) -> None:
    first = await memory.store("The office wifi password is tulip42.", importance=0.0)
    await memory.flush()
    clock.advance(29)
    await memory.store("The office wifi password is tulip42.", importance=0.0)
    atom = (await memory.atoms(first.id))[0]
    assert atom.reinforcements == 1 and atom.status == "active"
    # reinforced: 180 days * (1 + 0.5) from the second store, not 180 from the first
    assert atom.expires_at == pytest.approx(clock.now + 180 * DAY * 1.5)
    clock.advance(180 * 1.5 + 1)  # dormant now
    assert (await memory.atoms(first.id))[0].status == "dormant"
    await memory.store("The office wifi password is tulip42.", importance=0.0)
    await memory.flush()
    assert (await memory.atoms(first.id))[0].status == "active"


async def test_a_newer_claim_supersedes_an_older_one(memory: MemoryManager, clock: Clock) -> None:
    paris = await memory.store("Alice lives in Paris.")
    clock.advance(1)
    berlin = await memory.store("Alice lives in Berlin.")
    await memory.flush()
    old = (await memory.atoms(paris.id))[0]
    new = (await memory.atoms(berlin.id))[0]
    assert old.status == "superseded" and old.superseded_by == new.id
    assert [r.memory.id for r in await memory.search("where does Alice live")] == [berlin.id]
    # Likes are not exclusive: a second preference supersedes nothing.
    await memory.store("Alice likes tea.")
    coffee = await memory.store("Alice likes coffee.")
    await memory.flush()
    assert all(a.live for a in await memory.atoms(coffee.id - 1))
    # Forgetting the newer claim brings the older one back.
    await memory.forget(berlin.id)
    assert (await memory.atoms(paris.id))[0].status == "active"
    assert paris.id in {r.memory.id for r in await memory.search("where does Alice live")}


async def live_claims(memory: MemoryManager) -> list[str]:
    return sorted(r.memory.content for r in await memory.recall("where does Alice live"))


@pytest.mark.parametrize("change", ["forget", "update"])
async def test_a_claim_gone_from_the_middle_of_a_chain_leaves_the_newest_standing(
    memory: MemoryManager, clock: Clock, change: str
) -> None:
    await memory.store("Alice lives in Paris.")
    clock.advance(1)
    berlin = await memory.store("Alice lives in Berlin.")
    clock.advance(1)
    rome = await memory.store("Alice lives in Rome.")
    await memory.flush()
    if change == "forget":
        await memory.forget(berlin.id)
    else:
        await memory.update(berlin.id, content="Alice spent a year in Berlin.")
    await memory.flush()
    assert [a.status for a in await memory.atoms(rome.id)] == ["active"]
    # Paris was superseded by Berlin; with Berlin gone, Rome still supersedes it
    assert "Alice lives in Paris." not in await live_claims(memory)
    assert "Alice lives in Rome." in await live_claims(memory)


async def test_consolidation_merging_the_claim_that_superseded_another_keeps_it_superseded(
    clock: Clock,
) -> None:
    config = MemoryConfig(in_memory=True, embedder="hashing")
    async with await MemoryManager.open("merges@localhost", config, clock=clock) as memory:
        await memory.store("Alice lives in Paris.")
        clock.advance(1)
        await memory.store("Alice lives in Berlin.")
        clock.advance(1)
        await memory.store("Alice lives in Berlin now.")
        await memory.flush()
        report = await memory.maintenance.consolidate()
        assert report.to_dict()["merges"], "the two Berlin memories were to be merged"
        await memory.flush()
        assert "Alice lives in Paris." not in await live_claims(memory)


@pytest.mark.parametrize("background", [True, False])
async def test_imported_claims_keep_the_order_they_were_told_in(
    clock: Clock, background: bool
) -> None:
    storage = StorageConfig(derive_in_background=background)
    config = MemoryConfig(in_memory=True, embedder=None, storage=storage)
    async with await MemoryManager.open("alice@localhost", config, clock=clock) as alice:
        await alice.store("Alice lives in Paris.")
        clock.advance(1)
        await alice.store("Alice lives in Berlin.")
        clock.advance(1)
        await alice.store("Alice lives in Paris.")  # told again: Paris stands
        exported = await alice.export()
    clock.advance(1)
    async with await MemoryManager.open("bob@localhost", config, clock=clock) as bob:
        await bob.store("Alice lives in Rome.")  # told here after alice's last word
        clock.advance(1)
        await bob.import_data(exported)  # imported later, told before
        await bob.flush()
        assert await live_claims(bob) == ["Alice lives in Rome."]
    async with await MemoryManager.open("carol@localhost", config, clock=clock) as carol:
        await carol.import_data(exported)
        await carol.flush()
        assert await live_claims(carol) == ["Alice lives in Paris."]


async def test_a_claim_told_again_stands_again(memory: MemoryManager, clock: Clock) -> None:
    paris = await memory.store("Alice lives in Paris.")
    clock.advance(1)
    berlin = await memory.store("Alice lives in Berlin.")
    clock.advance(1)
    again = await memory.store("Alice lives in Paris.")  # a copy: reinforces the first
    await memory.flush()
    assert again.id == paris.id
    assert await live_claims(memory) == ["Alice lives in Paris."]
    assert (await memory.atoms(berlin.id))[0].status == "superseded"


async def test_a_graph_rebuild_keeps_the_claim_told_last(
    memory: MemoryManager, clock: Clock
) -> None:
    paris = await memory.store("Alice lives in Paris.")
    clock.advance(1)
    await memory.store("Alice lives in Berlin.")
    clock.advance(1)
    await memory.update(paris.id, content="Alice lives in Rome.")  # told last
    await memory.flush()
    assert await live_claims(memory) == ["Alice lives in Rome."]
    assert await memory.rebuild_graph() == 2  # memories written in id order
    assert await live_claims(memory) == ["Alice lives in Rome."]


BOB = "bob@example.org"


async def private_claims(memory: MemoryManager, jid: str) -> list[str]:
    found = await memory.recall("where does Alice live", viewer=Viewer(jid=jid), limit=10)
    return sorted(r.memory.content for r in found if r.memory.scope.visibility == "private")


async def test_a_graph_rebuild_settles_each_scope_by_its_own_claims(
    memory: MemoryManager, clock: Clock
) -> None:
    bob = Scope.private(BOB)
    await memory.store("Alice lives in Paris.", scope=bob)
    clock.advance(1)
    await memory.store("Alice lives in Rome.", scope=bob)
    clock.advance(1)
    await memory.store("Alice lives in Berlin.")  # the agent's own, told last
    await memory.store("Alice lives in Paris!")  # the agent's own, Paris again
    clock.advance(1)
    await memory.flush()
    await memory.rebuild_graph()  # its shadow settles claims without scopes
    assert await private_claims(memory, BOB) == ["Alice lives in Rome."]
    await memory.store("Alice lives in Madrid.", scope=bob)
    await memory.flush()
    assert await private_claims(memory, BOB) == ["Alice lives in Madrid."]


async def test_a_claim_moved_to_another_scope_leaves_its_old_scope_settled(
    memory: MemoryManager, clock: Clock
) -> None:
    bob = Scope.private(BOB)
    await memory.store("Alice lives in Paris.", scope=bob)
    clock.advance(1)
    rome = await memory.store("Alice lives in Rome.", scope=bob)
    clock.advance(1)
    await memory.flush()
    await memory.update(rome.id, scope=Scope.agent())  # Rome is the agent's own now
    assert await private_claims(memory, BOB) == ["Alice lives in Paris."]
    clock.advance(1)
    await memory.store("Alice lives in Berlin.", scope=bob)
    await memory.flush()
    assert await private_claims(memory, BOB) == ["Alice lives in Berlin."]


async def test_a_graph_rebuild_keeps_when_each_claim_was_told(
    memory: MemoryManager, clock: Clock
) -> None:
    paris = await memory.store("Alice lives in Paris.")
    clock.advance(1)
    await memory.store("Alice lives in Rome.")
    clock.advance(1)
    await memory.update(paris.id, importance=0.9)  # an edit, not a telling
    await memory.flush()
    before = [(a.created_at, a.reinforced_at) for a in await memory.atoms(paris.id)]
    await memory.rebuild_graph()
    assert await live_claims(memory) == ["Alice lives in Rome."]
    assert [(a.created_at, a.reinforced_at) for a in await memory.atoms(paris.id)] == before


async def test_forgetting_the_claim_that_stands_lets_the_one_before_stand(
    memory: MemoryManager, clock: Clock
) -> None:
    await memory.store("Alice lives in Paris.")
    clock.advance(1)
    rome = await memory.store("Alice lives in Rome.")
    await memory.flush()
    (atom,) = await memory.atoms(rome.id)
    await memory.forget_atom(atom.id)  # as forgetting its memory would
    assert await live_claims(memory) == ["Alice lives in Paris."]


CITIES = [f"Town{chr(65 + i // 26)}{chr(65 + i % 26)}" for i in range(60)]


async def test_a_fact_told_again_and_again_still_finds_its_newest_version(
    memory: MemoryManager, clock: Clock
) -> None:
    # 59 superseded versions match the query as well as the live one: they must not
    # take every candidate place and leave the search empty
    for city in CITIES:
        await memory.store(f"Alice lives in {city}.")
        clock.advance(0.01)
    await memory.flush()
    for query in ("where does Alice live", "Alice lives", "Alice"):
        found = [r.memory.content for r in await memory.search(query, limit=5)]
        assert found == [f"Alice lives in {CITIES[-1]}."], query
        recalled = [r.memory.content for r in await memory.recall(query, limit=5)]
        assert recalled == [f"Alice lives in {CITIES[-1]}."], query


async def test_a_search_whose_first_look_fills_the_page_looks_no_deeper(
    memory: MemoryManager, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    for n in range(5):  # lapsed by the time of the search
        await memory.store(f"We will meet Rui at the harbour on day {n}.")
    clock.advance(400)
    for n in range(40):
        await memory.store(f"Rui sails from the harbour on trip {n}.")
    await memory.flush()
    widths: list[int] = []
    real_run = Retriever._run

    async def counted(self: Retriever, state: SearchState) -> list[SearchResult]:
        widths.append(state.widen)
        return await real_run(self, state)

    monkeypatch.setattr(Retriever, "_run", counted)
    found = await memory.search("Rui harbour", limit=10)
    assert len(found) == 10 and widths == [1]
    widths.clear()
    for city in CITIES:  # now the live claim hides behind its dead versions
        await memory.store(f"Rui lives in {city}.")
        clock.advance(0.01)
    await memory.flush()
    found = await memory.search("where does Rui live", limit=1)
    assert [r.memory.content for r in found] == [f"Rui lives in {CITIES[-1]}."]
    assert widths[0] == 1 and len(widths) > 1


async def test_a_claim_never_supersedes_across_scopes(memory: MemoryManager, clock: Clock) -> None:
    alice, bob = "alice@x.org", "bob@x.org"
    lisbon = await memory.store("Carol lives in Lisbon.", scope=Scope.private(alice))
    clock.advance(1)
    paris = await memory.store("Carol lives in Paris.", scope=Scope.private(bob))
    await memory.flush()
    clock.advance(1)
    # bob's claim leaves alice's private memory whole, for her and for the agent
    as_alice = Viewer(jid=alice)
    assert [a.live for a in await memory.atoms(lisbon.id)] == [True]
    assert await memory.recall_memory(lisbon.id) == lisbon
    recalled = await memory.recall("where does Carol live", viewer=as_alice)
    assert [r.memory.content for r in recalled] == [lisbon.content]
    assert paris.id in {r.memory.id for r in await memory.search("where does Carol live")}
    # within one scope a newer claim still wins
    berlin = await memory.store("Carol lives in Berlin.", scope=Scope.private(alice))
    await memory.flush()
    assert (await memory.atoms(lisbon.id))[0].status == "superseded"
    recalled = await memory.recall("where does Carol live", viewer=as_alice)
    assert [r.memory.id for r in recalled] == [berlin.id]


async def test_a_claim_moved_to_another_scope_no_longer_supersedes_nor_shows(
    memory: MemoryManager, clock: Clock
) -> None:
    paris = await memory.store("Dana lives in Paris.")
    clock.advance(1)
    oslo = await memory.store("Dana lives in Oslo.")
    await memory.flush()
    (old,) = await memory.atoms(paris.id)
    assert old.status == "superseded" and old.superseded_by is not None
    await memory.update(oslo.id, scope=Scope.private("bob@x.org"))
    (old,) = await memory.atoms(paris.id)
    # another scope's claim: not superseding, and not named to this memory's readers
    assert (old.status, old.superseded_by) == ("active", None)
    single = await memory.engine.atoms.atom(old.id, memory.engine.now())
    assert single is not None and single.superseded_by is None


async def test_memories_shared_with_other_readers_are_two_scopes(
    memory: MemoryManager, clock: Clock
) -> None:
    alice, bob, carol = "alice@x.org", "bob@x.org", "carol@x.org"
    to_bob = await memory.store("Dana lives in Paris.", scope=Scope.shared(alice, [bob]))
    clock.advance(1)
    to_carol = await memory.store("Dana lives in London.", scope=Scope.shared(alice, [carol]))
    await memory.flush()
    assert [a.live for a in await memory.atoms(to_bob.id)] == [True]
    recalled = await memory.recall("where does Dana live", viewer=Viewer(jid=bob))
    assert [r.memory.id for r in recalled] == [to_bob.id]
    # the same readers, in another order, are one scope: the newer claim wins
    clock.advance(1)
    again = await memory.store("Dana lives in Rome.", scope=Scope.shared(alice, [carol]))
    await memory.flush()
    assert (await memory.atoms(to_carol.id))[0].status == "superseded"
    assert [a.live for a in await memory.atoms(to_bob.id)] == [True]
    recalled = await memory.recall("where does Dana live", viewer=Viewer(jid=carol))
    assert [r.memory.id for r in recalled] == [again.id]


async def test_forgetting_one_atom_keeps_the_rest(memory: MemoryManager) -> None:
    stored = await memory.store("Alice lives in Paris. Alice likes jazz.")
    await memory.flush()  # graph and atoms are derived right after the store
    atoms = await memory.atoms(stored.id)
    forgotten = await memory.forget_atom(atoms[1].id)
    assert forgotten.status == "forgotten"
    assert [a.text for a in await memory.live_atoms(stored.id)] == ["Alice lives in Paris."]
    with pytest.raises(MemoryNotFound):
        await memory.forget_atom(10_000)


async def test_atoms_of_a_deleted_memory_go_with_it(memory: MemoryManager) -> None:
    stored = await memory.store("Alice lives in Paris.")
    await memory.forget(stored.id)
    assert await memory.atoms(stored.id) == []


async def test_imported_memories_arrive_live(memory: MemoryManager, clock: Clock) -> None:
    await memory.store("We will call Bob about the invoice tomorrow.")
    exported = await memory.export()
    clock.advance(2 * 365)
    config = MemoryConfig(
        in_memory=True, embedder=None, retrieval=RetrievalConfig(cache_ttl_seconds=0)
    )
    async with await MemoryManager.open("moved@localhost", config, clock=clock) as moved:
        await moved.maintenance.wait()  # the check on open, before writing
        assert await moved.import_data(exported) == (1, 0)
        await moved.flush()
        found = await moved.search("invoice")
        assert len(found) == 1
        assert [a.type for a in await moved.live_atoms(found[0].memory.id)] == ["plan"]


async def test_a_forgotten_atom_stays_forgotten_through_export_and_import(
    memory: MemoryManager, clock: Clock
) -> None:
    stored = await memory.store("The invoice total is 40 euros. Alice pays it on Friday.")
    first, second = await memory.atoms(stored.id)
    assert (await memory.export())["version"] == 2  # nothing forgotten: older readers read it
    await memory.forget_atom(first.id)
    exported = await memory.export()
    assert exported["version"] == 3
    (entry,) = exported["memories"]
    assert entry["forgotten_atoms"] == [first.text]
    config = MemoryConfig(
        in_memory=True, embedder=None, retrieval=RetrievalConfig(cache_ttl_seconds=0)
    )
    async with await MemoryManager.open("moved@localhost", config, clock=clock) as moved:
        await moved.maintenance.wait()
        assert await moved.import_data(exported) == (1, 0)
        (hit,) = await moved.recall("invoice total Alice pays", limit=1)
        assert hit.memory.content == second.text  # recall gives the live part alone
        assert [(a.text, a.status) for a in await moved.atoms(hit.memory.id)] == [
            (first.text, "forgotten"),
            (second.text, "active"),
        ]
        # and it travels on: the moved memory's own export says so again
        assert (await moved.export())["memories"][0]["forgotten_atoms"] == [first.text]
        assert await moved.import_data(exported) == (0, 0)  # held already: nothing changes


async def test_recall_gives_only_the_live_atoms(memory: MemoryManager, clock: Clock) -> None:
    both = await memory.store("The invoice total is 40 euros. We will pay the invoice tomorrow.")
    await memory.flush()  # graph and atoms are derived right after the store
    assert [r.memory.content for r in await memory.recall("invoice")] == [both.content]
    clock.advance(5)  # the plan lapsed, the fact lives on
    recalled = await memory.recall("invoice")
    assert [r.memory.content for r in recalled] == ["The invoice total is 40 euros."]
    assert recalled[0].memory.id == both.id
    assert (await memory.get(both.id)).content == both.content  # the memory itself is whole


async def test_a_repeated_fact_reinforces_only_its_newest_atom(memory: MemoryManager) -> None:
    stored = [await memory.store("Sounds great, see you there!", dedupe=False) for _ in range(4)]
    await memory.flush()  # derived in the order stored, as when derived with each store
    counts = [(await memory.atoms(m.id))[0].reinforcements for m in stored]
    # each new copy reinforces the one before it, not every copy so far
    assert counts == [1, 1, 1, 0]


async def test_a_fact_matched_by_its_text_and_its_claim_is_reinforced_once(
    memory: MemoryManager,
) -> None:
    first = await memory.store("Alice lives in Paris.")
    await memory.flush()
    atom = (await memory.atoms(first.id))[0]
    assert (atom.subject, atom.predicate, atom.object) == ("alice", "lives_in", "paris")
    second = await memory.store("Alice lives in Paris.")
    await memory.flush()
    assert (await memory.atoms(first.id))[0].reinforcements == 1
    assert (await memory.atoms(second.id))[0].status == "active"  # the same claim: no conflict


async def test_recall_keeps_the_stored_text_while_every_atom_is_live(
    memory: MemoryManager,
) -> None:
    text = "Rollout at 09:00; rollback at 10:30.  Ping &lt;ops&gt; first!"
    stored = await memory.store(text)
    await memory.flush()  # graph and atoms are derived right after the store
    assert len(await memory.atoms(stored.id)) > 1  # split into several atoms
    (hit,) = await memory.recall("rollout rollback ops", limit=1)
    assert hit.memory.content == text


async def test_a_graph_rebuild_keeps_forgotten_atoms_forgotten(memory: MemoryManager) -> None:
    stored = await memory.store("The invoice total is 40 euros. Alice pays it on Friday.")
    await memory.flush()  # graph and atoms are derived right after the store
    first, second = await memory.atoms(stored.id)
    await memory.forget_atom(first.id)
    assert await memory.rebuild_graph() == 1
    after = await memory.atoms(stored.id)
    assert [(a.text, a.status) for a in after] == [
        (first.text, "forgotten"),
        (second.text, second.status),
    ]
    (hit,) = await memory.recall("invoice total", limit=1)
    assert first.text not in hit.memory.content
