"""Dataset loaders for the retrieval benchmarks, and LoCoMo evidence-id normalisation.

Standard library only, so the same loaders serve the spade_memory benchmarks and
the baseline that runs in a separate virtual environment.

Datasets are read from a data folder: ``--data DIR``, else ``$SPADE_MEMORY_DATA``,
else ``../shared/data`` next to the repository. Nothing is downloaded or copied.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

__all__ = [
    "CATEGORY_NAMES",
    "CMRC_FILE",
    "DATA_ENV",
    "LOCOMO_FILE",
    "CmrcData",
    "CmrcParagraph",
    "CmrcQuestion",
    "Conversation",
    "DataError",
    "Question",
    "Session",
    "Turn",
    "load_cmrc",
    "load_locomo",
    "normalise_evidence",
    "parse_cmrc",
    "parse_locomo",
    "repo_root",
    "resolve_data_dir",
    "resolve_evidence",
]

DATA_ENV = "SPADE_MEMORY_DATA"
LOCOMO_FILE = Path("locomo") / "locomo10_public.json"
CMRC_FILE = Path("cmrc2018") / "cmrc2018_trial.squad.json"

# "D11:26", "D:11:26", "D 11 : 26": a D, an optional colon, session number, colon, turn.
# LoCoMo's question categories as the dataset numbers them.
CATEGORY_NAMES: Mapping[int, str] = MappingProxyType(
    {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}
)

_EVIDENCE_ID = re.compile(r"D\s*:?\s*(\d+)\s*:\s*(\d+)", re.IGNORECASE)
_SESSION_KEY = re.compile(r"session_(\d+)")


class DataError(ValueError):
    """A dataset file is missing or not in the expected format."""


def repo_root() -> Path:
    """The repository root (the folder holding ``benchmarks/``)."""
    return Path(__file__).resolve().parent.parent


def resolve_data_dir(explicit: str | os.PathLike[str] | None = None) -> Path:
    """The data folder: ``explicit``, else ``$SPADE_MEMORY_DATA``, else ``../shared/data``.

    Raises:
        DataError: the folder does not exist.
    """
    if explicit is not None:
        chosen = Path(explicit)
    elif os.environ.get(DATA_ENV):
        chosen = Path(os.environ[DATA_ENV])
    else:
        chosen = repo_root().parent / "shared" / "data"
    chosen = chosen.expanduser().resolve()
    if not chosen.is_dir():
        raise DataError(f"data folder {chosen} does not exist; pass --data DIR or set {DATA_ENV}")
    return chosen


def _read_json(path: Path) -> Any:
    if not path.is_file():
        raise DataError(f"dataset file {path} not found; check --data or ${DATA_ENV}")
    with path.open(encoding="utf-8") as handle:
        return json.load(handle)


# -- LoCoMo -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Turn:
    """One dialog turn of a LoCoMo session."""

    dia_id: str
    speaker: str
    text: str
    caption: str | None = None

    @property
    def content(self) -> str:
        """The turn as a memory: ``"Speaker: text [shares photo: caption]"``."""
        body = f"{self.speaker}: {self.text}".strip()
        if self.caption:
            body = f"{body} [shares photo: {self.caption}]"
        return body


@dataclass(frozen=True, slots=True)
class Session:
    """One session of a conversation: its id (``session_3``), date text and turns."""

    id: str
    date: str
    turns: tuple[Turn, ...]


@dataclass(frozen=True, slots=True)
class Question:
    """A LoCoMo question with its gold evidence turns (normalised and checked)."""

    text: str
    category: int
    gold: tuple[str, ...]
    answer: str | None = None
    dropped: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Conversation:
    """One LoCoMo conversation: sessions in order and questions."""

    sample_id: str
    sessions: tuple[Session, ...]
    questions: tuple[Question, ...]

    @property
    def turn_ids(self) -> frozenset[str]:
        return frozenset(turn.dia_id for session in self.sessions for turn in session.turns)

    @property
    def turn_count(self) -> int:
        return sum(len(session.turns) for session in self.sessions)

    @property
    def dropped_evidence(self) -> int:
        """Evidence ids that were malformed or name no turn of this conversation."""
        return sum(len(question.dropped) for question in self.questions)


def normalise_evidence(raw: Iterable[Any]) -> tuple[list[str], list[str]]:
    """Canonical dialog ids from raw evidence entries, and the pieces that are not ids.

    An entry may hold several ids (``"D8:6; D9:17"``), a stray colon
    (``"D:11:26"`` is ``D11:26``) or spaces. Ids come back as ``D<session>:<turn>``
    without leading zeros, each once, in order of first appearance.

    Returns:
        ``(ids, malformed)``: the ids found, and the pieces that held none.
    """
    ids: list[str] = []
    malformed: list[str] = []
    for entry in raw:
        text = str(entry)
        matches = list(_EVIDENCE_ID.finditer(text))
        for match in matches:
            canonical = f"D{int(match.group(1))}:{int(match.group(2))}"
            if canonical not in ids:
                ids.append(canonical)
        leftover = _EVIDENCE_ID.sub(" ", text)
        malformed.extend(piece for piece in re.split(r"[;,\s]+", leftover) if piece)
    return ids, malformed


def resolve_evidence(raw: Iterable[Any], known: Iterable[str]) -> tuple[list[str], list[str]]:
    """Gold turn ids of a question: normalised, and only those the conversation has.

    Returns:
        ``(gold, dropped)``: the ids kept, and every malformed piece or unknown id.
    """
    known_ids = frozenset(known)
    ids, dropped = normalise_evidence(raw)
    gold = [dia_id for dia_id in ids if dia_id in known_ids]
    dropped.extend(dia_id for dia_id in ids if dia_id not in known_ids)
    return gold, dropped


def _canonical_turn_id(raw: Any) -> str:
    ids, _ = normalise_evidence([raw])
    return ids[0] if len(ids) == 1 else str(raw).strip()


def _session_number(key: str) -> int | None:
    match = _SESSION_KEY.fullmatch(key)
    return int(match.group(1)) if match else None


def _parse_conversation(raw: Mapping[str, Any], position: int) -> Conversation:
    try:
        body = raw["conversation"]
        qa = raw.get("qa", [])
    except (KeyError, TypeError):
        raise DataError(f"conversation {position} has no 'conversation' object") from None
    sample_id = str(raw.get("sample_id") or f"conv-{position}")
    numbers = sorted(
        number
        for key, value in body.items()
        if (number := _session_number(key)) is not None and isinstance(value, list)
    )
    sessions: list[Session] = []
    for number in numbers:
        key = f"session_{number}"
        turns: list[Turn] = []
        for turn in body[key]:
            caption = turn.get("blip_caption")
            turns.append(
                Turn(
                    dia_id=_canonical_turn_id(turn["dia_id"]),
                    speaker=str(turn.get("speaker", "")).strip(),
                    text=str(turn.get("text", "")).strip(),
                    caption=str(caption).strip() if caption else None,
                )
            )
        date = str(body.get(f"{key}_date_time") or "").strip()
        sessions.append(Session(id=key, date=date, turns=tuple(turns)))
    known = {turn.dia_id for session in sessions for turn in session.turns}
    questions: list[Question] = []
    for item in qa:
        gold, dropped = resolve_evidence(item.get("evidence") or [], known)
        answer = item.get("answer", item.get("adversarial_answer"))
        questions.append(
            Question(
                text=str(item["question"]).strip(),
                category=int(item["category"]),
                gold=tuple(gold),
                answer=None if answer is None else str(answer),
                dropped=tuple(dropped),
            )
        )
    return Conversation(sample_id=sample_id, sessions=tuple(sessions), questions=tuple(questions))


def parse_locomo(raw: Any) -> list[Conversation]:
    """Conversations from the parsed LoCoMo JSON (a list of samples).

    Raises:
        DataError: the structure is not LoCoMo's.
    """
    if not isinstance(raw, list):
        raise DataError("LoCoMo data must be a JSON list of conversations")
    return [_parse_conversation(item, position) for position, item in enumerate(raw)]


def load_locomo(data_dir: Path, *, limit: int | None = None) -> list[Conversation]:
    """The LoCoMo conversations under ``data_dir`` (the first ``limit`` if given)."""
    conversations = parse_locomo(_read_json(data_dir / LOCOMO_FILE))
    return conversations if limit is None else conversations[:limit]


# -- CMRC 2018 ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CmrcParagraph:
    """One CMRC paragraph: the text a question is answered from."""

    id: str
    title: str
    text: str


@dataclass(frozen=True, slots=True)
class CmrcQuestion:
    """One CMRC question and the id of the paragraph it belongs to."""

    id: str
    text: str
    paragraph_id: str


@dataclass(frozen=True, slots=True)
class CmrcData:
    paragraphs: tuple[CmrcParagraph, ...]
    questions: tuple[CmrcQuestion, ...] = field(default=())


def parse_cmrc(raw: Any, *, limit: int | None = None) -> CmrcData:
    """Paragraphs and questions from SQuAD-format JSON (the first ``limit`` paragraphs).

    Raises:
        DataError: the structure is not SQuAD's.
    """
    if not isinstance(raw, Mapping) or not isinstance(raw.get("data"), list):
        raise DataError("CMRC data must be SQuAD JSON: an object with a 'data' list")
    paragraphs: list[CmrcParagraph] = []
    questions: list[CmrcQuestion] = []
    for article in raw["data"]:
        title = str(article.get("title", "")).strip()
        for position, paragraph in enumerate(article.get("paragraphs", [])):
            if limit is not None and len(paragraphs) >= limit:
                return CmrcData(tuple(paragraphs), tuple(questions))
            paragraph_id = str(paragraph.get("id") or f"{article.get('id', title)}#{position}")
            paragraphs.append(
                CmrcParagraph(id=paragraph_id, title=title, text=str(paragraph["context"]))
            )
            for qa in paragraph.get("qas", []):
                text = str(qa.get("question", "")).strip()
                if text:
                    questions.append(
                        CmrcQuestion(id=str(qa.get("id", "")), text=text, paragraph_id=paragraph_id)
                    )
    ids = [paragraph.id for paragraph in paragraphs]
    if len(set(ids)) != len(ids):
        raise DataError("CMRC paragraph ids are not unique")
    return CmrcData(tuple(paragraphs), tuple(questions))


def load_cmrc(data_dir: Path, *, limit: int | None = None) -> CmrcData:
    """The CMRC 2018 trial set under ``data_dir``."""
    return parse_cmrc(_read_json(data_dir / CMRC_FILE), limit=limit)
