"""The memory inspector over real HTTP: every page as HTML and JSON, the edits, and the
security checks (token, same origin, host), on real memories in a temporary root
served by ``spade-memory serve``'s application."""

from __future__ import annotations

import re
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer
from factories import hashing_config

from spade_memory.config import MemoryConfig
from spade_memory.identity import AgentIdentity
from spade_memory.manager import MemoryManager
from spade_memory.web.fleet import Fleet

ALICE = "alice@localhost"
BOB = "bob@localhost"
SCRIPT = "<script>document.title='pwned'</script> Alice keeps bees"


def config(root: Path) -> MemoryConfig:
    return hashing_config(root)


async def _fill(root: Path) -> dict[str, int]:
    """Alice's memory: facts with entities, a stored script, an archived memory, and
    a kept conversation formed into memories. Returns the ids the tests use."""
    async with await MemoryManager.open(ALICE, config(root)) as memory:
        berlin = await memory.store(
            "Carol Smith moved to Berlin with Dave Jones", category="fact", importance=0.4
        )
        await memory.store("Dave Jones works at Acme Corp in Berlin", category="fact")
        await memory.store("Carol Smith prefers green tea", category="preference")
        script = await memory.store(SCRIPT, category="fact")
        old = await memory.store("The Lisbon office closed", category="fact")
        await memory.archive(old.id)
        await memory.add_note("conv-1", "Bob asked about the bees")
        await memory.history.append("conv-1", role="user", sender=BOB, text="I am Bob Stone")
        await memory.history.append(
            "conv-1", role="assistant", sender=ALICE, text="Nice to meet you, Bob"
        )
        await memory.form_memories()
        formed = await memory.history.source_ids(
            [m.id for m in await memory.list(limit=50, status=None)]
        )
    async with await MemoryManager.open(BOB, hashing_config(root)) as memory:
        await memory.store("Bob Stone likes sailing", category="preference")
    return {
        "berlin": berlin.id,
        "script": script.id,
        "archived": old.id,
        "formed": min(formed),
    }


@pytest.fixture
async def served(memory_root: Path) -> AsyncIterator[tuple[TestClient[Any, Any], dict[str, Any]]]:
    ids = await _fill(memory_root)

    async def open_memory(root: Path, jid: str) -> MemoryManager:
        return await MemoryManager.open(jid, config(root))

    fleet = Fleet(memory_root, open_memory, host="127.0.0.1")
    async with TestClient(TestServer(fleet.app())) as client:
        stem = AgentIdentity.of(ALICE).stem
        page = await client.get(f"/agents/{stem}/")
        assert page.status == 200
        token = re.search(r'name="memory-token" content="([^"]+)"', await page.text())
        assert token is not None
        yield client, {**ids, "stem": stem, "token": token.group(1), "fleet": fleet}


def _base(info: dict[str, Any]) -> str:
    return f"/agents/{info['stem']}"


def _origin(client: TestClient[Any, Any]) -> str:
    return f"http://{client.host}:{client.port}"


async def _json(client: TestClient[Any, Any], path: str, **params: Any) -> Any:
    response = await client.get(path, params={**params, "format": "json"})
    assert response.status == 200, await response.text()
    assert response.content_type == "application/json"
    return await response.json()


async def test_every_page_answers_in_html_and_json(served: Any) -> None:
    client, info = served
    base = _base(info)
    node_id = (await _json(client, f"{base}/graph"))["nodes"][0]["id"]
    pages = [
        f"{base}/",
        f"{base}/search?q=Berlin",
        f"{base}/memories",
        f"{base}/memories?status=archived",
        f"{base}/memories/{info['berlin']}",
        f"{base}/conversations",
        f"{base}/conversation?id=conv-1",
        f"{base}/maintenance",
        f"{base}/graph",
        f"{base}/graph/nodes/{node_id}",
        "/",
        "/search?q=Berlin",
    ]
    for path in pages:
        page = await client.get(path)
        assert page.status == 200, path
        assert page.content_type == "text/html", path
        assert "script-src 'self'" in page.headers["Content-Security-Policy"]
        as_json = await client.get(path, headers={"Accept": "application/json"})
        assert as_json.status == 200, path
        assert isinstance(await as_json.json(), dict), path
    for name in ("graph.js", "inspector.js", "inspector.css"):
        asset = await client.get(f"/static/{name}")
        assert asset.status == 200
        assert len(await asset.read()) > 100
    assert (await client.get("/static/..%2Fviews.py")).status == 404
    assert (await client.get(f"{base}/static/secret.txt")).status == 404


async def test_forms_show_what_was_asked(served: Any) -> None:
    """The search and filter forms (one macro each) keep the query and the choices."""
    client, info = served
    base = _base(info)
    bob = AgentIdentity.of(BOB).stem

    async def text(path: str, **params: str) -> str:
        response = await client.get(path, params=params)
        assert response.status == 200, path
        return await response.text()

    chosen = await text("/search", q="Bob Stone", agent=bob)
    assert 'name="q" value="Bob Stone"' in chosen
    assert f'<option value="{bob}" selected>{BOB}</option>' in chosen
    assert f'<option value="{bob}">{BOB}</option>' in await text("/")
    searched = await text(f"{base}/search", q="Berlin", category="fact")
    assert 'name="q" value="Berlin"' in searched
    assert '<option value="fact" selected>fact</option>' in searched
    listed = await text(f"{base}/memories", category="preference", status="archived")
    assert '<option value="preference" selected>preference</option>' in listed
    assert '<option value="archived" selected>archived</option>' in listed
    assert '<option value="active">active</option>' in listed
    graph = await text(f"{base}/graph", conversation="conv-1")
    assert '<option value="conv-1" selected>conv-1</option>' in graph
    for page in (chosen, searched, listed, graph):  # one frame around every page
        assert 'href="/static/inspector.css"' in page


async def test_search_explains_every_result(served: Any) -> None:
    client, info = served
    data = await _json(client, f"{_base(info)}/search", q="Dave Jones Berlin", limit=5)
    assert data["results"]
    for result in data["results"]:
        explanation = result["explanation"]
        assert set(explanation["weights"]) >= {"relevance", "importance", "recency"}
        assert explanation["routes"]
        assert 0.0 <= result["score"] <= 1.0
    assert "Berlin" in data["results"][0]["memory"]["content"]
    assert data["timings"]["total"] >= 0
    # a look counts no access
    detail = await _json(client, f"{_base(info)}/memories/{info['berlin']}")
    assert detail["memory"]["access_count"] == 0
    page = await client.get(f"{_base(info)}/search", params={"q": "Berlin"})
    text = await page.text()
    assert "keyword (BM25)" in text and "weights" in text


async def test_list_filters_by_category_status_and_date(served: Any) -> None:
    client, info = served
    base = _base(info)
    active = await _json(client, f"{base}/memories")
    assert info["archived"] not in [m["id"] for m in active["memories"]]
    archived = await _json(client, f"{base}/memories", status="archived")
    assert [m["id"] for m in archived["memories"]] == [info["archived"]]
    page = await (await client.get(f"{base}/memories?status=archived")).text()
    assert f'action="{base}/memories/{info["archived"]}/restore"' in page
    everything = await _json(client, f"{base}/memories", status="all")
    assert len(everything["memories"]) == len(active["memories"]) + 1
    preferences = await _json(client, f"{base}/memories", category="preference")
    assert {m["category"] for m in preferences["memories"]} == {"preference"}
    assert await _json(client, f"{base}/memories", to="2001-01-01") == {
        **(await _json(client, f"{base}/memories", to="2001-01-01")),
        "memories": [],
    }
    today = await _json(client, f"{base}/memories", **{"from": "2001-01-01"})
    assert len(today["memories"]) == len(active["memories"])
    paged = await _json(client, f"{base}/memories", limit=2)
    assert len(paged["memories"]) == 2 and paged["more"] is True
    for bad in ({"status": "gone"}, {"from": "yesterday"}, {"limit": "many"}, {"limit": "0"}):
        response = await client.get(f"{base}/memories", params={**bad, "format": "json"})
        assert response.status == 400, bad
        assert "error" in await response.json()


async def test_one_memory_shows_atoms_neighbours_and_sources(served: Any) -> None:
    client, info = served
    base = _base(info)
    data = await _json(client, f"{base}/memories/{info['berlin']}")
    assert data["memory"]["content"].startswith("Carol Smith")
    assert data["atoms"] and data["atoms"][0]["text"]
    names = {entity["value"] for entity in data["entities"]}
    assert {"Carol Smith", "Berlin"} <= names
    related = {r["memory"]["content"] for r in data["related"]}
    assert "Dave Jones works at Acme Corp in Berlin" in related
    formed = await _json(client, f"{base}/memories/{info['formed']}")
    assert [m["text"] for m in formed["sources"]][:1] == ["I am Bob Stone"]
    missing = await client.get(f"{base}/memories/999999")
    assert missing.status == 404
    assert "999999" in await missing.text()


async def test_conversations_with_history_and_notes(served: Any) -> None:
    client, info = served
    base = _base(info)
    listed = await _json(client, f"{base}/conversations")
    (conversation,) = listed["conversations"]
    assert conversation["conversation_id"] == "conv-1"
    assert conversation["peer"] == BOB and conversation["messages"] == 2
    assert conversation["notes"] is True
    one = await _json(client, f"{base}/conversation", id="conv-1")
    assert [m["text"] for m in one["messages"]] == ["I am Bob Stone", "Nice to meet you, Bob"]
    assert [n["content"] for n in one["notes"]] == ["Bob asked about the bees"]
    assert (await client.get(f"{base}/conversation?format=json")).status == 400


async def test_maintenance_status_and_counts(served: Any) -> None:
    client, info = served
    data = await _json(client, f"{_base(info)}/maintenance")
    status = data["status"]
    # the memory's own check on open may be running: its progress is shown
    assert status["state"] in {"idle", "checking", "repairing", "working", "done"}
    if status["total"]:
        assert data["percent"] == round(
            100 * min(status["done"], status["total"]) / status["total"]
        )
    page = await (await client.get(f"{_base(info)}/maintenance")).text()
    assert "maintenance-state" in page
    assert data["stats"]["by_status"]["archived"] == 1
    assert {"decay", "backup"} <= set(data["last_runs"])


async def test_graph_has_communities_and_filters(served: Any) -> None:
    client, info = served
    base = _base(info)
    graph = await _json(client, f"{base}/graph")
    labels = {node["label"] for node in graph["nodes"]}
    assert {"Carol Smith", "Dave Jones", "Berlin"} <= labels
    assert graph["communities"] >= 1
    ids = {node["id"] for node in graph["nodes"]}
    assert all(e["source"] in ids and e["target"] in ids for e in graph["edges"])
    by_label = {node["label"]: node for node in graph["nodes"]}
    assert by_label["Berlin"]["degree"] >= by_label["Carol Smith"]["degree"] - 1
    # Dave, Acme and Berlin are said together twice; Bob's pair is linked to nothing else
    berlin = by_label["Berlin"]["community"]
    assert by_label["Dave Jones"]["community"] == by_label["Acme Corp"]["community"] == berlin
    assert by_label["Bob Stone"]["community"] != berlin
    assert "Lisbon" not in labels  # archived memories are not drawn
    small = await _json(client, f"{base}/graph", nodes=2)
    assert len(small["nodes"]) == 2 and small["total_nodes"] == graph["total_nodes"]
    in_conversation = await _json(client, f"{base}/graph", conversation="conv-1")
    assert "Berlin" not in {node["label"] for node in in_conversation["nodes"]}
    kinds = graph["types"]
    one_type = await _json(client, f"{base}/graph", type=kinds[0])
    assert {node["type"] for node in one_type["nodes"]} == {kinds[0]}
    node = await _json(client, f"{base}/graph/nodes/{by_label['Berlin']['id']}")
    assert {m["id"] for m in node["memories"]} >= {info["berlin"]}
    assert (await client.get(f"{base}/graph/nodes/999999?format=json")).status == 404
    assert (await client.get(f"{base}/graph?nodes=100000&format=json")).status == 400


async def test_stored_script_comes_back_escaped(served: Any) -> None:
    client, info = served
    base = _base(info)
    for path in (f"{base}/memories/{info['script']}", f"{base}/memories", f"{base}/search?q=bees"):
        text = await (await client.get(path)).text()
        assert "&lt;script&gt;document.title" in text, path
        assert "<script>document.title" not in text, path


async def _post(
    client: TestClient[Any, Any], path: str, data: dict[str, Any], **headers: str
) -> Any:
    return await client.post(path, data=data, headers=headers, allow_redirects=False)


async def test_changes_need_the_token(served: Any) -> None:
    client, info = served
    base = _base(info)
    target = f"{base}/memories/{info['berlin']}"
    origin = _origin(client)
    for data, headers in (
        ({}, {"Origin": origin}),
        ({"token": "wrong"}, {"Origin": origin}),
        ({"token": ""}, {}),
    ):
        for action in ("forget", "update", "pin", "archive"):
            refused = await _post(client, f"{target}/{action}", {**data, "content": "x"}, **headers)
            assert refused.status == 403, (action, data)
    still = await _json(client, target)
    assert still["memory"]["content"].startswith("Carol Smith")
    assert still["memory"]["status"] == "active"
    assert still["memory"]["importance"] == pytest.approx(0.4)


async def test_cross_origin_changes_are_refused(served: Any) -> None:
    client, info = served
    target = f"{_base(info)}/memories/{info['berlin']}/forget"
    token = info["token"]
    for headers in (
        {"Origin": "http://evil.example"},
        {"Origin": "null"},
        {"Referer": "http://evil.example/page"},
        {"Origin": f"http://localhost:{client.port + 1}"},
    ):
        refused = await _post(client, target, {"token": token}, **headers)
        assert refused.status == 403, headers
    assert (await client.get(f"{_base(info)}/memories/{info['berlin']}")).status == 200
    # a page of another site whose name points here is not answered at all
    rebound = await client.get(f"{_base(info)}/", headers={"Host": "evil.example"})
    assert rebound.status == 403


async def test_edit_pin_archive_restore_and_forget(served: Any) -> None:
    client, info = served
    base = _base(info)
    target = f"{base}/memories/{info['berlin']}"
    origin = {"Origin": _origin(client)}
    token = info["token"]
    edited = await _post(
        client,
        f"{target}/update",
        {
            "token": token,
            "content": "Carol Smith moved to Munich",
            "category": "fact",
            "context": "",
            "importance": "0.6",
        },
        **origin,
    )
    assert edited.status == 303 and edited.headers["Location"] == target
    data = await _json(client, target)
    assert data["memory"]["content"] == "Carol Smith moved to Munich"
    assert data["memory"]["importance"] == pytest.approx(0.6)
    assert "Munich" in {e["value"] for e in data["entities"]}
    pinned = await client.post(
        f"{target}/pin", json={}, headers={"X-Memory-Token": token, **origin}
    )
    assert pinned.status == 200
    assert (await pinned.json())["memory"]["importance"] == 1.0
    bad = await client.post(
        f"{target}/update", json={"importance": 7}, headers={"X-Memory-Token": token}
    )
    assert bad.status == 400
    assert (await _json(client, target))["memory"]["importance"] == 1.0
    archived = await client.post(
        f"{target}/archive", headers={"X-Memory-Token": token, "Accept": "application/json"}
    )
    assert (await archived.json())["memory"]["status"] == "archived"
    found = await _json(client, f"{base}/search", q="Munich")
    assert info["berlin"] not in [r["memory"]["id"] for r in found["results"]]
    restored = await _post(client, f"{target}/restore", {"token": token}, **origin)
    assert restored.status == 303
    assert (await _json(client, target))["memory"]["status"] == "active"
    forgotten = await _post(client, f"{target}/forget", {"token": token}, **origin)
    assert forgotten.status == 303
    assert (await client.get(target)).status == 404
    listed = await _json(client, f"{base}/memories", status="all")
    assert info["berlin"] not in [m["id"] for m in listed["memories"]]


async def test_tokens_are_per_agent(served: Any) -> None:
    client, info = served
    assert (await _json(client, f"{_base(info)}/"))["token"] == info["token"]
    fleet = info["fleet"]
    bob = AgentIdentity.of(BOB).stem
    assert fleet.token(bob) != info["token"]
    bob_memory = (await _json(client, f"/agents/{bob}/memories"))["memories"][0]
    refused = await client.post(
        f"/agents/{bob}/memories/{bob_memory['id']}/forget",
        headers={"X-Memory-Token": info["token"]},
    )
    assert refused.status == 403


async def test_fleet_lists_agents_and_searches_one_or_all(served: Any) -> None:
    client, _ = served
    fleet = await _json(client, "/")
    by_jid = {agent["jid"]: agent for agent in fleet["agents"]}
    assert set(by_jid) == {ALICE, BOB}
    assert by_jid[BOB]["memories"] == 1
    assert by_jid[ALICE]["bytes"] > 0 and by_jid[ALICE]["last_activity"] > 0
    both = await _json(client, "/search", q="Bob Stone")
    assert {r["agent"] for r in both["results"]} == {ALICE, BOB}
    scores = [r["score"] for r in both["results"]]
    assert scores == sorted(scores, reverse=True)
    only_bob = await _json(client, "/search", q="Bob Stone", agent=AgentIdentity.of(BOB).stem)
    assert {r["agent"] for r in only_bob["results"]} == {BOB}
    assert (await client.get("/search?q=x&agent=nobody&format=json")).status == 404
    assert (await client.get("/agents/nobody/?format=json")).status == 404


async def test_the_graph_view_writes_nothing(served: Any, memory_root: Path) -> None:
    """Communities are computed for the page and never stored: the database holds the
    same rows before and after the graph is drawn, filtered and followed."""
    client, info = served
    base = _base(info)
    await _json(client, f"{base}/")  # the memory is open
    await (await info["fleet"].manager(info["stem"])).flush()  # and its indexer done
    database = memory_root / AgentIdentity.of(ALICE).database_name

    def rows() -> list[str]:
        with sqlite3.connect(database) as db:
            dumped = list(db.iterdump())
        db.close()
        return dumped

    before = rows()
    graph = await _json(client, f"{base}/graph")
    assert graph["communities"] >= 1
    await _json(client, f"{base}/graph", conversation="conv-1")
    await _json(client, f"{base}/graph/nodes/{graph['nodes'][0]['id']}")
    after = rows()
    assert after == before, sorted(set(after) ^ set(before))[:10]
