"""The client-side cache of large subjects' binary codes (store/subject_codes.py) against the real database: the
candidate read ranks as the server-side read does, and stays right when another client changes the subject."""

from __future__ import annotations

import asyncio
import logging
import sys
import time
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any

import numpy as np
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

from memory_sdk import MemoryClient, MemoryConfig
from memory_sdk.llm.protocols import LLMRequest
from memory_sdk.pipeline.reconciliation import MAX_CANDIDATES
from memory_sdk.store import candidates, subject_codes
from memory_sdk.store.candidates import (
    EXACT_SCAN_MAX_FACTS,
    CandidateProbe,
    Shortlists,
    StoredCandidate,
    nearest_current_facts,
    while_running,
)
from memory_sdk.store.database import Connection, to_async_url
from memory_sdk.store.subject_codes import (
    FIRST_PASS_POOL,
    FIRST_PASS_STRIDE,
    RESCORED_POOL,
    SHORTLIST_FLOOR,
    CodeRow,
    EntryLoader,
    SubjectCodes,
    SubjectEntry,
    code_scores,
    hamming_distances,
    hamming_pool,
    nearest_by_distance,
    pack_ids,
    popcount_rows_by_table,
    probe_code,
    split_codes,
)
from memory_sdk.testing import HashEmbedder, ScriptedLLM
from memory_sdk.text import fact_identity_key
from tests.conftest import ClientFactory
from tests.scripts import each_fact, extraction
from tests.test_candidates import TOPICS, fact_texts, seed_subject
from tests.test_fact_index import _migrate

pytestmark = pytest.mark.integration

RAFAEL = "person:rafael"
# Small enough for a fast test, large enough that ranking goes through the codes: 80 facts, from 10 on a subject
# is large, 20 shortlisted by Hamming distance.
LARGE_FROM, SHORTLIST, TOP_K = 10, 20, 5


@asynccontextmanager
async def _client(make_client: ClientFactory, cache_mb: float = 8) -> AsyncIterator[MemoryClient]:
    config = MemoryConfig(embedding_dim=HashEmbedder().dimensions, subject_code_cache_mb=cache_mb)
    async with make_client(config=config) as memory:
        yield memory


async def _nearest(
    memory: MemoryClient,
    agent_id: str,
    probe: CandidateProbe,
    shortlist: int = SHORTLIST,
    shortlists: Shortlists | None = None,
) -> list[StoredCandidate]:
    """The probe's candidates; a large subject the read found uncached is loaded before this returns (the load
    runs in the background: its end is awaited here, so each test's next step sees it)."""
    async with memory.database.tenant(agent_id) as conn:
        [found] = await nearest_current_facts(
            conn, agent_id, [probe], TOP_K, large_from=LARGE_FROM, shortlist=shortlist, shortlists=shortlists
        )
    await _loader(memory).drain()
    return found


def _loader(memory: MemoryClient) -> EntryLoader:
    loader = memory.database.subject_codes.loader
    assert loader is not None
    return loader


async def _probe(text_: str, *, identity: bool = False) -> CandidateProbe:
    """A probe of Rafael; with its text's identity key only when asked (that key's fact is ranked whatever the
    shortlist, so a probe with it could not show whether the shortlist or the delta found a fact)."""
    [vector] = await HashEmbedder().embed([text_])
    return CandidateProbe(RAFAEL, vector, identity_key=fact_identity_key(text_) if identity else None)


async def _execute(memory: MemoryClient, sql: str, **params: object) -> None:
    """A change made by another client (its own connection pool, its own cache), committed."""
    async with memory.database.transaction() as session:
        await session.execute(text(sql), params)


async def _add_fact(other: MemoryClient, agent_id: str, text_: str) -> None:
    """A fact of Rafael inserted and committed by another client."""
    [vector] = await HashEmbedder().embed([text_])
    await _execute(
        other,
        "INSERT INTO memory_facts (id, agent_id, entity_key, fact_text, confidence, importance, "
        "importance_category, valid_from, embedding, schema_version) VALUES (gen_random_uuid(), :agent, "
        ":key, :text, 0.9, 0.5, 'routine_activity', now(), :vector, 1)",
        agent=agent_id,
        key=RAFAEL,
        text=text_,
        vector=vector,
    )


async def _farthest_code(memory: MemoryClient, agent_id: str, probe: CandidateProbe) -> uuid.UUID:
    """Rafael's fact whose code is farthest from the probe's."""
    async with memory.database.tenant(agent_id) as conn:
        found: uuid.UUID = await conn.fetchval(
            "SELECT id FROM memory_facts WHERE agent_id = $1 AND entity_key = $2 "
            "ORDER BY embedding_bits <~> binary_quantize($3::vector)::bit(1536) DESC LIMIT 1",
            agent_id,
            RAFAEL,
            np.asarray(probe.embedding),
        )
    return found


def _entry(memory: MemoryClient, agent_id: str, key: str = RAFAEL) -> SubjectEntry | None:
    return memory.database.subject_codes.get(agent_id, key)


async def _loaded(agent_id: str, memory: MemoryClient) -> SubjectEntry:
    """Seed Rafael's 80 facts and read once: the read finds the subject large and has its entry loaded, in the
    background (the read returns without it)."""
    await seed_subject(memory.database, agent_id, RAFAEL, fact_texts(80, "Rafael"), HashEmbedder())
    assert _entry(memory, agent_id) is None
    async with memory.database.tenant(agent_id) as conn:
        await nearest_current_facts(
            conn, agent_id, [await _probe("Rafael gosta de jazz")], TOP_K, large_from=LARGE_FROM
        )
    assert _entry(memory, agent_id) is None and _loader(memory).busy  # not loaded inside the read
    await _loader(memory).drain()
    entry = _entry(memory, agent_id)
    assert entry is not None and entry.count == 80
    return entry


async def test_a_cached_subject_is_ranked_as_the_server_side_read_ranks_it(
    make_client: ClientFactory, agent_id: str
) -> None:
    async with _client(make_client) as cached, _client(make_client, cache_mb=0) as uncached:
        await _loaded(agent_id, cached)
        probes = [await _probe(f"Rafael gosta de {topic} número {n}") for n, topic in enumerate(TOPICS[:6])]
        probes.append(
            await _probe("RAFAEL gosta de jazz número 0 com jazz!", identity=True)
        )  # the identity key of a stored fact
        for probe in probes:
            from_cache = await _nearest(cached, agent_id, probe)
            from_server = await _nearest(uncached, agent_id, probe)
            assert [c.id for c in from_cache] == [c.id for c in from_server]
            assert [c.similarity for c in from_cache] == pytest.approx([c.similarity for c in from_server])
        assert len(uncached.database.subject_codes) == 0  # off: nothing cached, every read ranked on the server
    assert from_cache[0].text == "Rafael gosta de jazz número 0 com jazz"


async def test_a_fact_another_client_writes_after_the_load_is_a_candidate(
    make_client: ClientFactory, agent_id: str
) -> None:
    async with _client(make_client) as memory, _client(make_client) as other:
        entry = await _loaded(agent_id, memory)
        loaded_at = entry.seq
        new_text = "Rafael coleciona selos raros da Islândia"
        await _add_fact(other, agent_id, new_text)
        found = await _nearest(memory, agent_id, await _probe(new_text))
        # The new fact is in no code this client holds: only the delta read brings it.
        assert found[0].text == new_text and found[0].similarity == pytest.approx(1.0, abs=1e-4)
        assert entry.seq == loaded_at + 1 and entry.count == 81  # and the entry moved forward with it
        found = await _nearest(memory, agent_id, await _probe(new_text))
        assert found[0].text == new_text  # now from the entry's own codes


async def test_a_fact_closed_or_retracted_by_another_client_is_never_a_candidate(
    make_client: ClientFactory, agent_id: str
) -> None:
    async with _client(make_client) as memory, _client(make_client) as other:
        entry = await _loaded(agent_id, memory)
        probe = await _probe("Rafael gosta de jazz número 0 com jazz")
        [best, second, *_rest] = await _nearest(memory, agent_id, probe)
        await _execute(other, "UPDATE memory_facts SET valid_to = now(), closed_at = now() WHERE id = :id", id=best.id)
        await _execute(other, "UPDATE memory_facts SET invalidated_at = now() WHERE id = :id", id=second.id)
        found = await _nearest(memory, agent_id, probe)
        assert {best.id, second.id}.isdisjoint(c.id for c in found) and len(found) == TOP_K
        assert entry.count == 78


async def test_a_fact_moved_to_another_subject_is_a_candidate_there_and_no_longer_here(
    make_client: ClientFactory, agent_id: str
) -> None:
    ana = "person:ana"
    async with _client(make_client) as memory, _client(make_client) as other:
        await _loaded(agent_id, memory)
        await seed_subject(memory.database, agent_id, ana, fact_texts(40, "Ana"), HashEmbedder())
        rafael_probe = await _probe("Rafael gosta de futebol número 1 com jazz")
        ana_probe = CandidateProbe(ana, rafael_probe.embedding)
        await _nearest(memory, agent_id, ana_probe)  # Ana is large too: loaded
        assert _entry(memory, agent_id, ana) is not None
        [moved, *_rest] = await _nearest(memory, agent_id, rafael_probe)
        await _execute(other, "UPDATE memory_facts SET entity_key = :ana WHERE id = :id", ana=ana, id=moved.id)
        assert moved.id not in {c.id for c in await _nearest(memory, agent_id, rafael_probe)}
        there = await _nearest(memory, agent_id, ana_probe)
        assert there[0].id == moved.id and there[0].entity_key == ana


async def test_a_fact_re_embedded_by_another_client_is_ranked_by_its_new_vector(
    make_client: ClientFactory, agent_id: str
) -> None:
    async with _client(make_client) as memory, _client(make_client) as other:
        entry = await _loaded(agent_id, memory)
        probe = await _probe("Rafael coleciona selos raros da Islândia")
        target_id = await _farthest_code(other, agent_id, probe)  # never shortlisted by its old code
        async with other.database.tenant(agent_id) as conn:
            versions = "SELECT facts_version, change_seq FROM memory_entities WHERE agent_id = $1 AND entity_key = $2"
            before = await conn.fetchrow(versions, agent_id, RAFAEL)
            await conn.execute(
                "UPDATE memory_facts SET embedding = $2 WHERE id = $1", target_id, np.asarray(probe.embedding)
            )
            after = await conn.fetchrow(versions, agent_id, RAFAEL)
        found = await _nearest(memory, agent_id, probe)
        assert found[0].id == target_id and found[0].similarity == pytest.approx(1.0, abs=1e-4)
        # A new code, not a new fact: the cache's sequence moves, profiles' staleness does not.
        assert after["change_seq"] == before["change_seq"] + 1 == entry.seq
        assert after["facts_version"] == before["facts_version"]


async def test_a_read_in_a_transaction_that_wrote_uses_the_delta_but_teaches_the_cache_nothing(
    make_client: ClientFactory, agent_id: str
) -> None:
    """A dry run (and any write that may yet fail) reads in a transaction that has written: what it sees may be
    rolled back, and the sequence values it saw handed out again."""
    async with _client(make_client) as memory:
        entry = await _loaded(agent_id, memory)
        loaded_at = entry.seq
        new_text = "Rafael coleciona selos raros da Islândia"
        probe = await _probe(new_text)

        with pytest.raises(_RolledBackError):
            await _write_and_read_then_roll_back(memory, agent_id, new_text, probe)
        assert entry.seq == loaded_at and entry.count == 80  # but not learnt
        assert new_text not in {c.text for c in await _nearest(memory, agent_id, probe)}


async def test_a_read_in_a_transaction_that_changed_another_subject_still_teaches_the_cache(
    make_client: ClientFactory, agent_id: str
) -> None:
    """The write path reads in the transaction that logged its event: what it sees of a subject it has not changed
    is committed, and the cache learns from it."""
    async with _client(make_client) as memory, _client(make_client) as other:
        entry = await _loaded(agent_id, memory)
        await seed_subject(other.database, agent_id, "person:ana", ["Ana existe"], HashEmbedder())
        new_text = "Rafael coleciona selos raros da Islândia"
        probe = await _probe(new_text)
        assert probe.embedding is not None
        async with other.database.tenant(agent_id) as conn:  # committed by another client
            await _insert_fact(conn, agent_id, RAFAEL, new_text, probe.embedding)
        with pytest.raises(_RolledBackError):
            await _write_and_read_then_roll_back(memory, agent_id, "Ana gosta de jazz", probe, first=new_text)
        assert entry.seq == 81 and entry.count == 81  # learnt from the read, though its transaction wrote Ana's fact


async def _insert_fact(conn: Connection, agent_id: str, key: str, text_: str, embedding: list[float]) -> None:
    await conn.execute(
        "INSERT INTO memory_facts (id, agent_id, entity_key, fact_text, confidence, importance, importance_category, "
        "valid_from, embedding, schema_version) VALUES ($1, $2, $3, $4, 0.9, 0.5, 'routine_activity', now(), $5, 1)",
        uuid.uuid4(),
        agent_id,
        key,
        text_,
        np.asarray(embedding),
    )


class _RolledBackError(Exception):
    pass


async def _write_and_read_then_roll_back(
    memory: MemoryClient, agent_id: str, new_text: str, probe: CandidateProbe, first: str | None = None
) -> None:
    """Insert a fact (Rafael's `new_text`, or with `first` Ana's) and read Rafael in one transaction, whose first
    candidate must be `first` (else the new fact); then roll it all back."""
    assert probe.embedding is not None
    async with memory.database.tenant(agent_id) as conn:
        async with memory.database.savepoint(conn):  # as a dry run's stages are: its xid is a subtransaction's
            await _insert_fact(conn, agent_id, RAFAEL if first is None else "person:ana", new_text, probe.embedding)
        [found] = await nearest_current_facts(
            conn, agent_id, [probe], TOP_K, large_from=LARGE_FROM, shortlist=SHORTLIST
        )
        assert found[0].text == (new_text if first is None else first)  # its own write is ranked
        raise _RolledBackError


async def test_an_entity_deleted_and_created_again_is_not_taken_for_the_cached_one(
    make_client: ClientFactory, agent_id: str
) -> None:
    """Its sequence starts at 0 again: only the entity row's id tells the two apart."""
    async with _client(make_client) as memory, _client(make_client) as other:
        entry = await _loaded(agent_id, memory)
        await _execute(other, "DELETE FROM memory_fact_entities WHERE agent_id = :agent", agent=agent_id)
        await _execute(other, "DELETE FROM memory_facts WHERE agent_id = :agent", agent=agent_id)
        await _execute(other, "DELETE FROM memory_entities WHERE agent_id = :agent", agent=agent_id)
        texts = fact_texts(20, "Rafael toca")
        await seed_subject(other.database, agent_id, RAFAEL, texts, HashEmbedder())
        found = await _nearest(memory, agent_id, await _probe(texts[3]))
        assert found[0].text == texts[3]
        assert _entry(memory, agent_id) is not entry  # dropped, and the new subject loaded afresh
        assert entry.seq >= 20  # the old entry's sequence is past the new entity's: it alone would not tell


async def test_a_fact_moved_out_of_a_cached_subject_has_it_loaded_again(
    make_client: ClientFactory, agent_id: str
) -> None:
    """A move stamps only the fact's new subject, so no delta of the old one shows it: the old subject's
    moved_out_seq sends a read of an entry older than the move to the server-side ranking, and the entry is
    loaded again."""
    ana = "person:ana"
    async with _client(make_client) as memory, _client(make_client) as other, _client(make_client, 0) as server:
        entry = await _loaded(agent_id, memory)
        await seed_subject(other.database, agent_id, ana, ["Ana existe"], HashEmbedder())
        probe = await _probe("Rafael gosta de jazz")
        moved = await _farthest_code(other, agent_id, probe)  # not shortlisted: no read of it ranks it or misses it
        await _execute(other, "UPDATE memory_facts SET entity_key = :ana WHERE id = :id", ana=ana, id=moved)
        assert await _nearest(memory, agent_id, probe) == await _nearest(server, agent_id, probe)
        reloaded = _entry(memory, agent_id)
        assert reloaded is not None and reloaded is not entry and reloaded.count == 79


async def test_an_entry_whose_shortlisted_facts_were_deleted_is_loaded_again(
    make_client: ClientFactory, agent_id: str
) -> None:
    """No sequence records a fact row deleted without its entity row (the SDK never deletes one): the ids that no
    longer rank give it away, and the entry is loaded afresh."""
    async with _client(make_client) as memory, _client(make_client) as other, _client(make_client, 0) as server:
        entry = await _loaded(agent_id, memory)
        probe = await _probe("Rafael gosta de jazz")
        [gone, *_rest] = await _nearest(memory, agent_id, probe)
        await _execute(other, "DELETE FROM memory_fact_entities WHERE fact_id = :id", id=gone.id)
        await _execute(other, "DELETE FROM memory_facts WHERE id = :id", id=gone.id)
        await _nearest(memory, agent_id, probe)
        reloaded = _entry(memory, agent_id)
        assert reloaded is not None and reloaded is not entry and reloaded.count == 79
        assert await _nearest(memory, agent_id, probe) == await _nearest(server, agent_id, probe)


async def test_a_failed_load_is_logged_and_counted_and_the_next_read_asks_again(
    make_client: ClientFactory, agent_id: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A load whose connection dies under it: no error reaches the read, the subject stays uncached (its reads are
    shortlisted on the server), and the next read that finds it large has it loaded."""
    caplog.set_level(logging.WARNING, logger="memory_sdk")
    async with _client(make_client) as memory:

        async def killed(conn: Connection, codes: SubjectCodes, agent: str, keys: Sequence[str]) -> None:
            pid = await conn.fetchval("SELECT pg_backend_pid()")
            await _execute(memory, "SELECT pg_terminate_backend(:pid)", pid=pid)  # from the operator's session
            await candidates._load(conn, codes, agent, keys)

        await seed_subject(memory.database, agent_id, RAFAEL, fact_texts(80, "Rafael"), HashEmbedder())
        loader = _loader(memory)
        loader.schedule(agent_id, [RAFAEL], killed)
        await loader.drain()
        assert _entry(memory, agent_id) is None
        assert (loader.loads, loader.failures) == (0, 1) and "DatabaseUnavailable" in (loader.last_error or "")
        assert "were not loaded" in caplog.text
        assert memory.database.engine.pool.checkedout() == 0  # the dead connection left the pool
        await _nearest(memory, agent_id, await _probe("Rafael gosta de jazz"))
        entry = _entry(memory, agent_id)
        assert entry is not None and entry.count == 80 and loader.loads == 1


async def test_a_subject_asked_for_again_while_its_load_waits_is_loaded_once(
    make_client: ClientFactory, agent_id: str
) -> None:
    """Every read of a large subject not cached yet asks for it (a write probes it several times), before its load
    starts and while it runs: one load."""
    calls: list[list[str]] = []
    running, go_on = asyncio.Event(), asyncio.Event()

    async def counted(conn: Connection, codes: SubjectCodes, agent: str, keys: Sequence[str]) -> None:
        calls.append(list(keys))
        running.set()
        await go_on.wait()
        await candidates._load(conn, codes, agent, keys)

    async with _client(make_client) as memory:
        await seed_subject(memory.database, agent_id, RAFAEL, fact_texts(80, "Rafael"), HashEmbedder())
        loader = _loader(memory)
        for _ in range(2):
            loader.schedule(agent_id, [RAFAEL], counted)
        await asyncio.wait_for(running.wait(), 10)
        loader.schedule(agent_id, [RAFAEL], counted)  # asked for again while its load runs
        go_on.set()
        await loader.drain()
        loader.schedule(agent_id, [RAFAEL], counted)  # cached now: not loaded again
        assert not loader.busy
    assert calls == [[RAFAEL]] and loader.loads == 1


async def test_closing_the_database_stops_a_load_under_way_and_drops_those_waiting(
    make_client: ClientFactory, agent_id: str
) -> None:
    """dispose() does not wait for loads (a cache's warm-up): the one under way is cancelled, its transaction rolled
    back and its connection closed; the subjects still waiting are not loaded."""
    started, never = asyncio.Event(), asyncio.Event()
    calls: list[str] = []

    async def stuck(conn: Connection, codes: SubjectCodes, agent: str, keys: Sequence[str]) -> None:
        calls.append(agent)
        started.set()
        await never.wait()

    async with _client(make_client) as memory:
        loader = _loader(memory)
        loader.schedule(agent_id, [RAFAEL], stuck)
        loader.schedule(f"{agent_id}-2", [RAFAEL], stuck)
        await asyncio.wait_for(started.wait(), 10)
        assert memory.database.engine.pool.checkedout() == 1
        await memory.database.dispose()
        assert not loader.busy and calls == [agent_id]
        assert memory.database.engine.pool.checkedout() == 0


def test_entries_past_the_budget_are_evicted_least_recently_used_first() -> None:
    words = 24  # 1536 bits

    def entry(count: int) -> SubjectEntry:
        ids = [uuid.uuid4() for _ in range(count)]
        return SubjectEntry(uuid.uuid4(), 1, pack_ids(ids), np.zeros((count, words), dtype=np.uint64))

    size = entry(100).nbytes  # codes of 192 bytes and ids of 16, with room for 64 + 100 // 32 new facts
    assert size == (100 + 3 + 64) * (192 + 16)
    cache = SubjectCodes(budget_bytes=3 * size)
    for key in ("a", "b", "c"):
        cache.put("agent", key, entry(100))
    assert cache.get("agent", "a") is not None  # a is now the most recently used
    cache.put("agent", "d", entry(100))
    assert [key for key in "abcd" if cache.get("agent", key) is not None] == ["a", "c", "d"]
    assert cache.nbytes <= cache.budget_bytes
    cache.put("agent", "huge", entry(600))  # larger than the whole budget: refused, and never wanted again
    assert cache.get("agent", "huge") is None and not cache.wants("agent", "huge")
    assert cache.wants("agent", "e") and not cache.wants("agent", "a")
    assert not SubjectCodes(budget_bytes=0).wants("agent", "e")  # off


def test_the_shortlist_is_the_pool_nearest_by_hamming_distance_narrowed_by_the_probes_vector() -> None:
    rng = np.random.default_rng(2)  # a seed whose 28th and 29th nearest codes are not tied, nor the 7th and 8th
    vectors = rng.standard_normal((200, 100)).astype(np.float32)  # 100 bits: not a whole number of words
    codes = np.stack([probe_code(vector.tolist(), 2) for vector in vectors])
    ids = [uuid.uuid4() for _ in range(200)]
    entry = SubjectEntry(uuid.uuid4(), 1, pack_ids(ids), codes)
    probe = rng.standard_normal(100).astype(np.float32)
    signs = vectors > 0
    distances = np.sum(signs != (probe > 0), axis=1)
    picked = {ids.index(i) for i in entry.shortlist(probe.tolist(), 7)}
    # The pool: the RESCORED_POOL x 7 nearest by Hamming distance (the cut falls between two distances here).
    cut = np.sort(distances)[7 * RESCORED_POOL - 1]
    assert np.sort(distances)[7 * RESCORED_POOL] > cut
    pool = np.flatnonzero(distances <= cut)
    # Narrowed by the probe's vector summed over the dimensions each code sets.
    scores = {int(i): float(probe[signs[i]].sum()) for i in pool}
    assert sorted(picked) == sorted(sorted(scores, key=lambda i: -scores[i])[:7])
    assert [float(x) for x in code_scores(codes[pool], probe.tolist())] == pytest.approx(
        [scores[int(i)] for i in pool], abs=1e-4
    )
    # Which is not what Hamming distance alone picks, and nearer the vectors' own ranking.
    assert np.sort(distances)[6] < np.sort(distances)[7]
    by_hamming = set(np.argsort(distances)[:7].tolist())
    assert picked != by_hamming
    cosines = vectors @ probe / np.linalg.norm(vectors, axis=1)
    assert cosines[sorted(picked)].sum() > cosines[sorted(by_hamming)].sum()
    # A shortlist as large as the subject is all of it.
    assert len(entry.shortlist(probe.tolist(), 200)) == 200
    # The first dimension in the high bit of the first byte, set where positive (0 is not), zero-padded.
    assert probe_code([1.0, -1.0, 0.0, 2.0], 1).tobytes() == bytes([0b1001_0000]) + bytes(7)


def test_a_probe_of_a_top_k_keeps_the_facts_scored_near_its_kth_best_and_at_least_four_times_k() -> None:
    rng = np.random.default_rng(7)
    dim = 128
    probe = rng.standard_normal(dim).astype(np.float32)
    near = [probe + 0.05 * rng.standard_normal(dim).astype(np.float32) for _ in range(8)]  # the probe's signs
    vectors = np.stack(near + list(rng.standard_normal((400, dim)).astype(np.float32)))
    ids = [uuid.uuid4() for _ in range(len(vectors))]
    entry = SubjectEntry(uuid.uuid4(), 1, pack_ids(ids), np.stack([probe_code(v.tolist(), 2) for v in vectors]))
    # Top 2: the 8 near ones score far above the rest (more than SHORTLIST_MARGIN_SD deviations): only they are
    # worth a vector read, and 8 is SHORTLIST_FLOOR x 2.
    assert set(entry.shortlist(probe.tolist(), 100, keep=2)) == set(ids[:8])
    # Top 3: the floor, 12, takes the 4 best scored of the rest too.
    kept = entry.shortlist(probe.tolist(), 100, keep=3)
    assert len(kept) == 3 * SHORTLIST_FLOOR and set(ids[:8]) < set(kept)
    # No top k, or a floor past the list: the whole list, as before.
    assert len(entry.shortlist(probe.tolist(), 100)) == 100
    assert len(entry.shortlist(probe.tolist(), 10, keep=3)) == 10
    # Scores with no group above the rest keep the whole list.
    flat = rng.standard_normal(dim).astype(np.float32)
    assert len(entry.shortlist(flat.tolist(), 40, keep=5)) == 40


def test_an_entry_moved_forward_ranks_as_an_entry_loaded_afresh_with_the_same_facts() -> None:
    rng = np.random.default_rng(5)
    dim, words = 100, 2
    vectors = {uuid.uuid4(): rng.standard_normal(dim).astype(np.float32) for _ in range(200)}
    entry = SubjectEntry(
        uuid.uuid4(), 1, pack_ids(vectors), np.stack([probe_code(v.tolist(), words) for v in vectors.values()])
    )

    def row(fact_id: uuid.UUID, vector: np.ndarray | None) -> CodeRow:
        code = None if vector is None else np.packbits(vector > 0).tobytes()
        return CodeRow(fact_id, code, current=vector is not None)

    held = list(vectors)
    changes = [row(fact_id, None) for fact_id in held[:30]]  # closed: dropped, the last code moved into their slot
    for fact_id in held[30:50]:  # re-embedded: the new code replaces the old one
        vectors[fact_id] = rng.standard_normal(dim).astype(np.float32)
        changes.append(row(fact_id, vectors[fact_id]))
    for _ in range(150):  # new: past the entry's spare columns (200 // 32 + 64), so it grows
        fact_id = uuid.uuid4()
        vectors[fact_id] = rng.standard_normal(dim).astype(np.float32)
        changes.append(row(fact_id, vectors[fact_id]))
    entry.apply(changes, seq=2)
    for fact_id in held[:30]:
        del vectors[fact_id]
    assert entry.count == len(vectors) == 320 and entry.seq == 2
    # A shortlist of a quarter of the subject ranks all of it by the codes against the probe's vector: the facts
    # whose vectors, reduced to their signs, weigh most.
    for _ in range(3):
        probe = rng.standard_normal(dim).astype(np.float32)
        weight = {fact_id: float(probe[vector > 0].sum()) for fact_id, vector in vectors.items()}
        assert set(entry.shortlist(probe.tolist(), 80)) == set(sorted(weight, key=lambda i: -weight[i])[:80])


def test_hamming_distances_count_the_differing_bits_of_each_code_held_by_word_at_any_width() -> None:
    rng = np.random.default_rng(7)
    # 1, 7, 24 and 40 words; all-ones codes against a zero probe give each width's largest distance (2,560 bits
    # at 40 words: past what 8 or 16 bits could hold as a sum of byte counts); a view of the first codes of a wider
    # matrix, as an entry with spare columns passes it.
    for words in (1, 7, 24, 40):
        codes = rng.integers(0, 2**64, size=(3_000, words), dtype=np.uint64)
        codes[:2] = np.uint64(2**64 - 1)
        columns = np.zeros((words, 3_100), dtype=np.uint64)
        columns[:, :3_000] = codes.T
        for probe in (rng.integers(0, 2**64, size=words, dtype=np.uint64), np.zeros(words, dtype=np.uint64)):
            expected = [sum(bin(int(w) ^ int(p)).count("1") for w, p in zip(row, probe, strict=True)) for row in codes]
            assert hamming_distances(columns[:, :3_000], probe).tolist() == expected
            assert popcount_rows_by_table(codes ^ probe).tolist() == expected
            with pytest.MonkeyPatch.context() as patch:  # numpy without bitwise_count (1.26): by byte table
                patch.setattr(subject_codes, "_NATIVE_POPCOUNT", False)
                assert hamming_distances(columns[:, :3_000], probe).tolist() == expected
        assert max(expected) == 64 * words
    assert hamming_distances(np.zeros((3, 0), dtype=np.uint64), np.zeros(3, dtype=np.uint64)).tolist() == []


async def test_migration_0011_stamps_each_change_in_commit_order_and_downgrades_to_0006s_triggers(
    fresh_database_url: str,
) -> None:
    await _migrate(fresh_database_url, "upgrade", "0010")
    # As text: this engine has no binary codec for vectors.
    vector, other_vector = map(str, await HashEmbedder().embed(["Rafael gosta de jazz", "Rafael toca piano"]))
    engine = create_async_engine(to_async_url(fresh_database_url))
    insert_fact = (
        "INSERT INTO memory_facts (id, agent_id, entity_key, fact_text, confidence, importance, importance_category, "
        "valid_from, embedding, schema_version) VALUES (:id, 'a', 'person:rafael', :text, 0.9, 0.5, "
        "'routine_activity', now(), CAST(:vector AS vector), 1)"
    )
    versions = "SELECT facts_version, change_seq, moved_out_seq FROM memory_entities ORDER BY entity_key DESC"
    old, new = uuid.uuid4(), uuid.uuid4()

    async def run(sql: str, params: dict[str, object], read: str = versions) -> list[Any]:
        """One committed statement, then the entities' counters."""
        async with engine.begin() as conn:
            await conn.execute(text(sql), params)
            return list((await conn.execute(text(read))).all())

    facts_versions = "SELECT facts_version FROM memory_entities ORDER BY entity_key DESC"

    try:
        for key in ("person:rafael", "person:ana"):
            await run(
                "INSERT INTO memory_entities (id, agent_id, entity_key, display_name, entity_type) "
                "VALUES (gen_random_uuid(), 'a', :key, :key, 'person')",
                {"key": key},
                facts_versions,
            )
        await run(insert_fact, {"id": old, "text": "before the migration", "vector": vector}, facts_versions)
        await _migrate(fresh_database_url, "upgrade", "head")
        steps = [
            await run(insert_fact, {"id": new, "text": "after it", "vector": vector}),
            await run(
                "UPDATE memory_facts SET embedding = CAST(:vector AS vector) WHERE id = :id",
                {"id": old, "vector": other_vector},
            ),
            await run("UPDATE memory_facts SET confidence = 0.5 WHERE id = :id", {"id": old}),  # nothing cached
            await run("UPDATE memory_facts SET valid_to = now(), closed_at = now() WHERE id = :id", {"id": old}),
            await run("UPDATE memory_facts SET entity_key = 'person:ana' WHERE id = :id", {"id": new}),
        ]
        stamped = await run("SELECT 1", {}, "SELECT fact_text, subject_seq FROM memory_facts ORDER BY recorded_at")
        await _migrate(fresh_database_url, "downgrade", "0010")
        after_downgrade = {"id": uuid.uuid4(), "text": "after the downgrade", "vector": vector}
        downgraded = await run(insert_fact, after_downgrade, facts_versions)
        await _migrate(fresh_database_url, "upgrade", "head")
    finally:
        await engine.dispose()
    # (facts_version, change_seq, moved_out_seq) of Rafael, then Ana; at the migration: (1, 0, 0) and (0, 0, 0).
    assert steps == [
        [(2, 1, 0), (0, 0, 0)],  # an insert: both
        [(2, 2, 0), (0, 0, 0)],  # a re-embedding: the codes' sequence only, not the profiles' version
        [(2, 2, 0), (0, 0, 0)],
        [(3, 3, 0), (0, 0, 0)],  # a close: both
        [(4, 4, 4), (1, 1, 0)],  # a move: both entities, and Rafael records that a fact left it
    ]
    assert stamped == [("before the migration", 3), ("after it", 1)]  # Ana's sequence stamped the moved fact
    assert downgraded == [(5,), (1,)]  # 0006's trigger again: an insert bumps facts_version


async def test_writes_load_a_large_subject_and_keep_its_entry_current(
    make_client: ClientFactory, agent_id: str
) -> None:
    """The pipeline's own reads (pre-retrieval, reconciliation) find the subject large, load it once, then rank
    from it; each write's new fact reaches the entry through the next read's delta. Each probe's shortlist is
    picked once, while the server runs the statement before its read: the registry's lookups when the probe can be
    foreseen (the speaker's, a fact's subject), else the read's plan switch (another entity the message names).
    The model answers once the loads asked for are done, as a real model's call outlasts a load: the first write's
    pre-retrieval asks for Ana's entry (her name is a seeded alias: without it only entity resolution, after the
    model's call, would ask, and the load would race the write's own fact), and its reconciliation ranks from it."""
    answers = [
        extraction(("Ana", "Ana loves jazz")),
        extraction(("Ana", "Ana plays the piano")),
        extraction(("Ana", "Ana plays the violin")),
    ]
    clients: list[MemoryClient] = []

    async def after_the_loads(_request: LLMRequest) -> dict[str, Any]:
        await _loader(clients[0]).drain()
        return answers.pop(0)

    llm = ScriptedLLM({"informed_extraction": after_the_loads, "reconciliation_batch": each_fact({"action": "ADD"})})
    async with make_client(llm=llm) as memory:
        clients.append(memory)
        await seed_subject(
            memory.database, agent_id, "person:ana", fact_texts(EXACT_SCAN_MAX_FACTS, "Ana"), HashEmbedder()
        )
        await _execute(
            memory,
            "INSERT INTO memory_entity_aliases (agent_id, alias_norm, alias, entity_key, source) "
            "VALUES (:agent, 'ana', 'Ana', 'person:ana', 'extraction')",
            agent=agent_id,
        )
        await memory.write(agent_id, "Ana loves jazz", speaker_name="Rafael")
        entry = _entry(memory, agent_id, "person:ana")
        assert entry is not None and entry.count == EXACT_SCAN_MAX_FACTS  # loaded by the first read, before the fact
        loaded_at = entry.seq
        picked = _count_shortlists(entry)
        result = await memory.write(agent_id, "Ana plays the piano", speaker_name="Rafael")
        assert _entry(memory, agent_id, "person:ana") is entry
        # The message's probe of Ana, then the fact's, each for its own top k (the facts the LLM is shown).
        topk = memory.config.informed_extraction_topk
        assert picked == [("pick_the_rest", topk), ("pick", MAX_CANDIDATES)]
        picked.clear()
        spoken = await memory.write(agent_id, "Ana plays the violin", speaker_name="Ana")
        assert picked == [("pick", topk), ("pick", MAX_CANDIDATES)]  # Ana speaks: her probe is foreseen too
    assert [f.text for f in result.facts_added] == ["Ana plays the piano"]
    assert [f.text for f in spoken.facts_added] == ["Ana plays the violin"]
    assert entry.seq > loaded_at and entry.count == EXACT_SCAN_MAX_FACTS + 2  # each fact came as a delta


def _split(codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`codes` (a code per row) split as SubjectEntry holds them, each part contiguous as in the entry."""
    first, rest = split_codes(codes)
    return np.ascontiguousarray(first), np.ascontiguousarray(rest)


def test_a_large_subjects_pool_is_ranked_by_whole_codes_after_a_first_pass_over_part_of_their_words() -> None:
    rng = np.random.default_rng(17)
    words, count, size = 24, 20_000, 10
    assert count > size * FIRST_PASS_POOL  # two passes
    codes = rng.integers(0, 2**64, size=(count, words), dtype=np.uint64)
    probe = rng.integers(0, 2**64, size=words, dtype=np.uint64)
    bits = np.unpackbits(probe.view(np.uint8))
    near = rng.choice(count, size, replace=False)
    for at in near:  # the probe with 40 of its 1,536 bits flipped: whole distance 40 (random codes: ~768)
        flipped = bits.copy()
        flipped[rng.choice(bits.size, 40, replace=False)] ^= 1
        codes[at] = np.packbits(flipped).view(np.uint64)
    others = np.setdiff1d(np.arange(count), near)
    traps = rng.choice(others, size * FIRST_PASS_POOL, replace=False)
    whole = hamming_distances(np.ascontiguousarray(codes.T), probe)
    assert whole[near].max() < 60
    # Codes nearest of all by the first pass's words only (distance 0 there), far by the whole: the first pass keeps
    # them with the planted ones, the whole codes decide.
    codes[traps[:size], ::FIRST_PASS_STRIDE] = probe[::FIRST_PASS_STRIDE]
    assert sorted(hamming_pool(*_split(codes), probe, size).tolist()) == sorted(near.tolist())
    assert hamming_distances(np.ascontiguousarray(codes[traps[:size]].T), probe).min() > 400
    with pytest.MonkeyPatch.context() as patch:  # numpy without bitwise_count (1.26): by byte table, the same pool
        patch.setattr(subject_codes, "_NATIVE_POPCOUNT", False)
        assert sorted(hamming_pool(*_split(codes), probe, size).tolist()) == sorted(near.tolist())
    # The trade: as many such codes as the first pass keeps push the planted ones out.
    codes[traps, ::FIRST_PASS_STRIDE] = probe[::FIRST_PASS_STRIDE]
    assert not set(hamming_pool(*_split(codes), probe, size).tolist()) & set(near.tolist())
    # A subject no larger than what the first pass keeps is ranked by whole codes in one pass: the smallest
    # distances (ties cut anywhere).
    small = codes[: 30 * FIRST_PASS_POOL]
    picked = hamming_pool(*_split(small), probe, 30)
    distances = hamming_distances(np.ascontiguousarray(small.T), probe)
    assert sorted(distances[picked].tolist()) == sorted(distances.tolist())[:30]
    # Codes of one or two words: the first pass reads the first word, the second the rest (or nothing).
    for width in (1, 2):
        narrow = codes[:5_000, :width]
        picked = hamming_pool(*_split(narrow), probe[:width], 20)
        distances = hamming_distances(np.ascontiguousarray(narrow.T), probe[:width])
        assert picked.size == 20 and np.unique(picked).size == 20
        assert distances[picked].max() <= np.sort(distances)[20 * FIRST_PASS_POOL]


def test_nearest_by_distance_picks_the_smallest_distances_with_ties_cut_anywhere() -> None:
    rng = np.random.default_rng(11)
    for count, spread in ((5_000, 40), (600, 3), (64, 1_536)):
        distances = rng.integers(0, spread, size=count).astype(np.int32)
        for size in (1, 7, count // 3, count - 1):
            picked = nearest_by_distance(distances, size)
            assert picked.size == size and np.unique(picked).size == size
            # The same distances as the `size` smallest, whichever of the tied ones at the cut were taken.
            assert sorted(distances[picked].tolist()) == sorted(distances.tolist())[:size]
        assert sorted(nearest_by_distance(distances, count).tolist()) == list(range(count))
        assert sorted(nearest_by_distance(distances, count + 5).tolist()) == list(range(count))
        assert nearest_by_distance(distances, 0).size == 0


def _count_shortlists(entry: SubjectEntry) -> list[tuple[str, int | None]]:
    """The shortlists `entry` picks from now on, each as the name of the function that asked ("pick" ahead of a
    read, Shortlists.pick; "pick_the_rest" in the read itself) and the top k it was picked for (its method wrapped
    on the instance, behaviour unchanged)."""
    picked: list[tuple[str, int | None]] = []
    plain: Callable[[Sequence[float], int, int | None], bytes] = entry.shortlist_packed

    def counted(embedding: Sequence[float], size: int, keep: int | None = None) -> bytes:
        picked.append((sys._getframe(1).f_code.co_name, keep))
        return plain(embedding, size, keep)

    entry.shortlist_packed = counted  # type: ignore[method-assign]
    return picked


async def _picked_ahead(memory: MemoryClient, agent_id: str, probe: CandidateProbe) -> Shortlists:
    shortlists = Shortlists()
    async with memory.database.tenant(agent_id) as conn:
        shortlists.pick(conn, agent_id, [probe], TOP_K, shortlist=SHORTLIST)
    return shortlists


async def test_a_shortlist_picked_ahead_is_the_one_the_read_ranks(make_client: ClientFactory, agent_id: str) -> None:
    async with _client(make_client) as memory:
        entry = await _loaded(agent_id, memory)
        probe = await _probe("Rafael gosta de jazz número 3")
        expected = await _nearest(memory, agent_id, probe)
        picked = _count_shortlists(entry)
        shortlists = await _picked_ahead(memory, agent_id, probe)
        found = await _nearest(memory, agent_id, probe, shortlists=shortlists)
        assert picked == [("pick", TOP_K)]  # the read picked none of its own
        assert [c.id for c in found] == [c.id for c in expected]
        other = await _probe("Rafael gosta de jazz número 4")  # another vector: the read picks its own
        await _nearest(memory, agent_id, other, shortlists=shortlists)
        assert picked == [("pick", TOP_K), ("pick_the_rest", TOP_K)]


async def test_a_shortlist_picked_before_the_entry_moved_is_not_used(make_client: ClientFactory, agent_id: str) -> None:
    """Picked ahead, then the entry learns a fact from another read's delta: the picked list lacks that fact and its
    sequence is behind the entry's, so ranking it with the entry's sequence would miss the fact for good."""
    async with _client(make_client) as memory, _client(make_client) as other:
        entry = await _loaded(agent_id, memory)
        new_text = "Rafael coleciona selos raros da Islândia"
        probe = await _probe(new_text)
        shortlists = await _picked_ahead(memory, agent_id, probe)
        await _add_fact(other, agent_id, new_text)
        version = entry.version
        await _nearest(memory, agent_id, await _probe("Rafael gosta de jazz"))  # its delta moves the entry
        assert entry.version == version + 1 and entry.count == 81
        found = await _nearest(memory, agent_id, probe, shortlists=shortlists)
    assert found[0].text == new_text and found[0].similarity == pytest.approx(1.0, abs=1e-4)


async def test_while_running_sends_the_statement_before_the_work_and_waits_for_it_after(
    make_client: ClientFactory, agent_id: str
) -> None:
    done: list[float] = []

    def work() -> None:
        time.sleep(0.3)
        done.append(time.time())

    async with make_client() as memory:
        received_at = "SELECT extract(epoch FROM statement_timestamp())"
        async with memory.database.tenant(agent_id) as conn:
            await conn.fetchval(received_at)  # prepared on this connection, as the write path's statements are
            received = await while_running(conn.fetchval(received_at), work)
        # The server had the statement before the work ended (sent after it, it would arrive 0.3 s later).
        assert float(received) < done[0]
        with pytest.raises(ZeroDivisionError):
            async with memory.database.tenant(agent_id) as conn:
                await while_running(conn.fetchval("SELECT pg_sleep(0.2)"), lambda: 1 / 0)
        async with memory.database.tenant(agent_id) as conn:  # the pool's connections are left usable
            assert await conn.fetchval("SELECT 1") == 1
