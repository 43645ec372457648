"""A plain, slow statement of what the suffix drafter computes, to cross-check ngram/suffix*.py on
tiny arrays. A string's count is the number of its occurrences followed by a token, counted by
looking at every position of every sequence, as SuffixDecoding's tree counts suffixes through a node.
Kept deliberately naive."""

from __future__ import annotations

from collections import Counter


def children(seqs, path):
    """Next-token counts over every occurrence of ``path`` that has a token after it."""
    path = list(path)
    out = Counter()
    for seq in seqs:
        for p in range(len(seq) - len(path)):
            if list(seq[p : p + len(path)]) == path:
                out[seq[p + len(path)]] += 1
    return out


def longest_match(seqs, context, depth):
    """The longest suffix of ``context`` (at most ``depth`` tokens) that occurs with a token after it."""
    best = 0
    for m in range(1, min(depth, len(context)) + 1):
        if children(seqs, context[len(context) - m :]):
            best = m
    return best


def walk(seqs, path, limit, min_prob):
    draft, probs, prob = [], [], 1.0
    path = list(path)
    while len(draft) < limit:
        counts = children(seqs, path)
        if not counts:
            break
        best = min(counts, key=lambda t: (-counts[t], t))
        prob *= counts[best] / sum(counts.values())
        if prob < min_prob:
            break
        draft.append(best)
        probs.append(prob)
        path.append(best)
    return draft, probs


def draft(seqs, context, depth, cap, factor, min_prob):
    """(match length, draft, cumulative probabilities) from the sequences ``seqs``."""
    m = longest_match(seqs, context, depth)
    if m == 0:
        return 0, [], []
    limit = cap if m >= depth else min(cap, int(m * factor))  # a full-depth match is censored
    return (m, *walk(seqs, context[len(context) - m :], limit, min_prob))


class RefSuffixDrafter:
    """The drafter: global = stored requests, local = the slot's context (history + last token)."""

    def __init__(self, depth, n_max, factor, min_prob, learn_prompts=False):
        self.depth, self.n_max, self.factor, self.min_prob = depth, n_max, factor, min_prob
        self.learn_prompts = learn_prompts
        self.requests = []
        self.slots = {}  # slot -> [prompt length, last context seen or None]

    def begin(self, slot, prompt):
        st = self.slots.get(slot)
        if st is not None and st[1] is not None:
            out = st[1][0 if self.learn_prompts else st[0] :]
            if out:
                self.requests.append(out)
        self.slots[slot] = [len(prompt), None]

    def draft(self, slot, history, last, n_max):
        context = list(history) + [last]
        self.slots[slot][1] = context
        cap = min(n_max, self.n_max)
        if cap <= 0:
            return "", [], []
        _, own, own_p = draft([context], context, self.depth, cap, self.factor, self.min_prob)
        _, shared, shared_p = draft(self.requests, context, self.depth, cap, self.factor, self.min_prob)
        if own and sum(own_p) >= sum(shared_p):
            return "local", own, own_p
        if shared:
            return "global", shared, shared_p
        return "", [], []


def tree(seqs, path, limit, min_prob, n_extra, branch_min_prob, n_primary=None):
    """(tokens, parents, probs, n_primary) of the token tree: the walk's draft (its first
    ``n_primary`` tokens), then the ``n_extra`` best other nodes that branch off the root or a kept
    draft node, every node there is enumerated with its estimate and ranked at once."""
    primary, probs = walk(seqs, path, limit, min_prob)
    kept = primary[: len(primary) if n_primary is None else n_primary]
    nodes = []  # (continuation, estimate) of every node with an estimate >= branch_min_prob

    def visit(cont, prob):
        if len(cont) >= limit:
            return
        counts = children(seqs, list(path) + cont)
        total = sum(counts.values())
        for t, c in counts.items():
            p = prob * (c / total)
            if p >= branch_min_prob:
                nodes.append((cont + [t], p))
                visit(cont + [t], p)

    visit([], 1.0)

    def branch_point(cont):  # tokens shared with the primary path
        return next((i for i, t in enumerate(cont) if i >= len(primary) or primary[i] != t), len(cont))

    extra = sorted(((-p, len(c), tuple(c)) for c, p in nodes
                    if branch_point(c) < len(c) and branch_point(c) <= len(kept)))[:n_extra]
    paths = [tuple(kept[: i + 1]) for i in range(len(kept))] + [c for _, _, c in extra]
    parents = [paths.index(c[:-1]) if len(c) > 1 else -1 for c in paths]
    return [c[-1] for c in paths], parents, probs[: len(kept)] + [-p for p, _, _ in extra], len(kept)
