"""Every Python block of the README runs as it stands, each as a script of its own.

A block is written to the file ``snippet.py`` of a fresh folder and run there with
``python snippet.py`` (its ``./memory`` lands in that folder); the agents' blocks
start their own embedded XMPP server through ``xmpp_endpoint()``.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from factories import REPO, child_env, run_python

BLOCK = re.compile(r"^```python\n(.*?)^```", re.MULTILINE | re.DOTALL)
BLOCKS = BLOCK.findall((REPO / "README.md").read_text(encoding="utf-8"))

# What each block prints that shows it did its job, by a phrase of its code.
EXPECTED = {
    'memory.search("database password rotation")': "staging database password",
    "what do you know about the Porto office?": "opens at 9",
    "class Planner(MemoryMixin": "I plan the deployments",
    "who supplies Alice?": "Met the new supplier today",
    "archive closing time": "closes at 6 pm",
    "AgentBaseMemory(": "rotates every 30 days",
    "spade_llm_tools(manager)": "search_memories",
    "notes.get_context_summary(": "Previous interaction notes:\n- Bob's API takes JSON",
    'Scope.private("alice@example.org")': (
        "['The office opens at 9', 'The trip is on Friday']\nMemoryNotFound"
    ),
    "OpenAICompatibleEmbedder(server.base_url": "The Lisbon team deploys on Thursdays",
    "Porto warehouse": "The Porto warehouse opens at 7 found by keyword",
    "memory.history.sources(hit.memory.id)": (
        "Dana: My sister Emma lives in Lisbon\n['My sister Emma lives in Lisbon']\n"
        "4 messages forgotten"
    ),
}


def expected_output(code: str) -> str:
    found = [text for phrase, text in EXPECTED.items() if phrase in code]
    assert len(found) == 1, f"say what this README block prints:\n{code}"
    return found[0]


def test_the_readme_has_its_blocks() -> None:
    assert len(BLOCKS) >= 7
    for code in BLOCKS:
        expected_output(code)


def test_every_configuration_field_the_readme_names_exists() -> None:
    from dataclasses import fields

    from spade_memory import config

    named = set(re.findall(r"\b([A-Z]\w*Config)\.(\w+)", (REPO / "README.md").read_text("utf-8")))
    assert named, "the README names configuration fields"
    for owner, name in sorted(named):
        assert name in {f.name for f in fields(getattr(config, owner))}, f"{owner}.{name}"


@pytest.mark.slow
@pytest.mark.parametrize("code", BLOCKS, ids=[f"block{n}" for n in range(1, len(BLOCKS) + 1)])
def test_readme_block_runs_as_written(code: str, tmp_path: Path) -> None:
    script = tmp_path / "snippet.py"
    script.write_text(code, encoding="utf-8")
    done = run_python(str(script), cwd=tmp_path, timeout=180, env=child_env())
    assert done.returncode == 0, done.stdout + done.stderr
    assert expected_output(code) in done.stdout, done.stdout + done.stderr
    assert "Traceback" not in done.stderr, done.stderr
