"""Saving and loading the chain's drafter-wide acceptance estimates, so a restart drafts as far as
the server had learned to (``--spec-estimates-file``), not from ``selection.PRIOR_P`` again.

Format: ``b"SSESTIM"`` + one msgpack map ``{version, fingerprint, bin_edges, estimates}``, where
``estimates`` maps ``"drafter\\ttag"`` to ``{"acc": [...], "tried": [...]}``, one float per
position bin (``selection.Counts``). Same error rules as the n-gram files (``CacheFileError``
with path and byte offset; a foreign tokenizer fingerprint is refused). A file written for other
position bins is refused too: its counts would land in the wrong positions.

What the file holds is learned acceptance per drafter, not a cost: it is the same on any machine,
but not for another model (the fingerprint stands in for the model).
"""

from __future__ import annotations

import os
from typing import Any

import msgpack

from ngram.fileio import CacheFileError, HeadedReader, atomic_write_bytes, check_fingerprint, read_file
from slotserver.speculation.selection import BIN_EDGES, N_BINS, Counts

MAGIC = b"SSESTIM"
VERSION = 1
Key = tuple[str, str]


def encode_estimates(estimates: dict[Key, Counts], fingerprint: str | None) -> bytes:
    body = {
        "version": VERSION,
        "fingerprint": fingerprint,
        "bin_edges": list(BIN_EDGES),
        "estimates": {f"{name}\t{tag}": {"acc": list(c.acc), "tried": list(c.tried)}
                      for (name, tag), c in estimates.items()},
    }
    return MAGIC + msgpack.packb(body, use_bin_type=True)


def save_estimates(estimates: dict[Key, Counts], path: str | os.PathLike, fingerprint: str | None) -> None:
    atomic_write_bytes(path, encode_estimates(estimates, fingerprint))


def load_estimates(path: str | os.PathLike, fingerprint: str | None = None) -> dict[Key, Counts]:
    reader = HeadedReader(path, read_file(path), MAGIC)
    body, start = reader.header({"version": int, "bin_edges": list, "estimates": dict})
    if body["version"] != VERSION:
        raise CacheFileError(path, start, f"unsupported version {body['version']} (this server reads {VERSION})")
    check_fingerprint(path, start, body.get("fingerprint"), fingerprint)
    if body["bin_edges"] != list(BIN_EDGES):
        raise CacheFileError(path, start, f"position bins {body['bin_edges']}, this server uses {list(BIN_EDGES)}")
    reader.expect_end()
    out: dict[Key, Counts] = {}
    for key, value in body["estimates"].items():
        name, sep, tag = key.partition("\t")
        if not sep or not isinstance(value, dict):
            raise CacheFileError(path, start, f"estimate {key!r}: expected 'drafter<TAB>tag' -> {{acc, tried}}")
        counts = Counts(_bins(path, start, key, value, "acc"), _bins(path, start, key, value, "tried"))
        if any(a > t + 1e-9 for a, t in zip(counts.acc, counts.tried)):
            raise CacheFileError(path, start, f"estimate {key!r}: more accepted than tried in a bin")
        out[(name, tag)] = counts
    return out


def _bins(path: str | os.PathLike, start: int, key: str, value: dict[str, Any], field: str) -> list[float]:
    bins = value.get(field)
    if (not isinstance(bins, list) or len(bins) != N_BINS
            or not all(isinstance(x, (int, float)) and not isinstance(x, bool) and 0 <= x < 1e12 for x in bins)):
        raise CacheFileError(path, start, f"estimate {key!r}: {field} must be {N_BINS} non-negative numbers")
    return [float(x) for x in bins]
