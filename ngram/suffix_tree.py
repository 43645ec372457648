"""Token trees from the suffix drafter's match: its draft plus the likeliest other continuations.

Tree verification (SpecInfer, Miao et al., arXiv 2305.09781; SuffixDecoding verifies such trees
too) puts several continuations into one decode, each root-to-leaf path its own sequence and
shared prefixes once, and keeps the longest path the target agrees with. Here the tree grows from
the match the drafter used (``SuffixDrafter.match``): the **primary** path is the drafter's draft
itself (``walk``, optionally cut to its first ``n_primary`` tokens), and up to ``n_extra`` further
nodes hang off the root or the kept primary nodes, best first by estimated probability (the same
estimate as the draft's: child count over parent count, multiplied along the path), each at least
``branch_min_prob`` and at most ``limit`` tokens deep. A cut primary token is no branch: the step
decided it did not pay. Since an estimate never grows along a path, the best-first nodes are
exactly the ``n_extra`` best candidates; ties go to the shallower node, then the smaller tokens.

Not used by the server: measured and not shipped, docs/benchmarks.md, "Tree verification: measured,
not shipped" (``benchmarks/suffix_tree.py``).
"""

from __future__ import annotations

import copy
import heapq
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ngram.suffix_walk import Cursor, merged_children, walk


@dataclass(slots=True)
class TokenTree:
    """Nodes in the order added: the primary path first. The root (the last sampled token) is -1."""

    tokens: list[int]  # each node's token
    parents: list[int]  # each node's parent, an earlier node or -1
    probs: list[float]  # each node's cumulative probability estimate
    n_primary: int  # nodes 0..n_primary-1 are the primary path, in order

    @property
    def n_rows(self) -> int:
        """Rows of its verify: the root and every node, shared prefixes once."""
        return 1 + len(self.tokens)

    @property
    def n_leaves(self) -> int:
        """Sequences of its verify: one per root-to-leaf path (the root alone is one)."""
        return max(1, len(self.tokens) - len(set(self.parents) - {-1}))

    def accepted(self, truth: Sequence[int]) -> int:
        """How many tokens of ``truth`` (what the target samples after the root, compared along
        the path as sample-and-compare does) the tree holds as one path."""
        node, n = -1, 0
        while n < len(truth):
            child = next((i for i, (t, p) in enumerate(zip(self.tokens, self.parents)) if p == node and t == truth[n]),
                         None)
            if child is None:
                break
            node, n = child, n + 1
        return n


def fork(cursors: Sequence[Cursor]) -> list[Cursor]:
    """Independent copies: a cursor narrows in place, and a tree descends from a node more than once."""
    return [copy.copy(c) for c in cursors]


def build(cursors: Sequence[Cursor], limit: int, min_prob: float, n_extra: int,
          branch_min_prob: float | None = None, n_primary: int | None = None) -> TokenTree:
    """The tree for a match's ``cursors`` (left untouched); ``limit``: its draft's length limit,
    ``min_prob``: the drafter's; ``branch_min_prob`` defaults to ``min_prob``."""
    bmp = min_prob if branch_min_prob is None else branch_min_prob
    live = [c for c in cursors if c.alive()]
    primary, probs = walk(fork(live), limit, min_prob)
    n_keep = len(primary) if n_primary is None else min(n_primary, len(primary))
    tree = TokenTree(primary[:n_keep], list(range(-1, n_keep - 1)), probs[:n_keep], n_keep)
    # Candidates: (-estimate, depth, path, parent node, the parent's cursors after children(), token).
    heap: list[tuple] = []

    def offer(node: int, path: tuple[int, ...], prob: float, at: list[Cursor], skip: int | None) -> None:
        """Push the children of ``node`` (its cursors ``at``) but ``skip`` as candidates."""
        if len(path) >= limit or not at:
            return
        tokens, counts = merged_children(at)
        if isinstance(counts, np.ndarray):  # a short match: maybe thousands of children, few likely
            total = int(counts.sum())
            keep = np.flatnonzero(prob * (counts / total) >= bmp)  # the same float operations as below
            tokens, counts = tokens[keep].tolist(), counts[keep].tolist()
        else:
            total = sum(counts)
        for t, c in zip(tokens, counts):
            p = prob * (c / total)  # as walk multiplies
            if t != skip and p >= bmp:
                heapq.heappush(heap, (-p, len(path) + 1, path + (t,), node, at, t))

    at = fork(live)
    for i in range(n_keep + 1):  # the root, then each kept primary node
        offer(i - 1, tuple(primary[:i]), probs[i - 1] if i else 1.0, at, primary[i] if i < len(primary) else None)
        if i < n_keep:
            at = fork(at)
            for c in at:
                c.descend(primary[i])
            at = [c for c in at if c.alive()]
    while heap and len(tree.tokens) < n_keep + n_extra:
        neg_p, _, path, parent, parent_at, t = heapq.heappop(heap)
        tree.tokens.append(t)
        tree.parents.append(parent)
        tree.probs.append(-neg_p)
        at = fork(parent_at)
        for c in at:
            c.descend(t)
        offer(len(tree.tokens) - 1, path, -neg_p, [c for c in at if c.alive()], None)
    return tree
