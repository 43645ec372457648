"""Token trees from the suffix drafter's match against a brute-force reference, and by hand."""

from hypothesis import given
from hypothesis import strategies as st

from ngram.suffix import SuffixConfig, SuffixDrafter
from ngram.suffix_local import LocalIndex
from ngram.suffix_tree import TokenTree, build
from tests.ngram import suffix_reference as ref
from tests.ngram.test_suffix import (
    SETTINGS,
    continuing,
    encode_context,
    filled_store,
    knobs,
    request_lists,
    tokens_small,
    tokens_wide,
)

tree_knobs = st.tuples(
    st.integers(0, 5),  # n_extra
    st.sampled_from([None, 0.0, 0.05, 0.2, 0.5]),  # branch_min_prob (None: the drafter's min_prob)
    st.one_of(st.none(), st.integers(0, 8)),  # n_primary
)


def as_tuple(tree: TokenTree):
    return tree.tokens, tree.parents, tree.probs, tree.n_primary


def reference_tree(seqs, context, depth, n_max, factor, min_prob, tree_knob):
    n_extra, bmp, n_primary = tree_knob
    m = ref.longest_match(seqs, context, depth)
    path = context[len(context) - m :]
    return ref.tree(seqs, path, min(n_max, int(m * factor)), min_prob, n_extra,
                    min_prob if bmp is None else bmp, n_primary)


@SETTINGS
@given(request_lists, st.one_of(tokens_small, tokens_wide), knobs, tree_knobs, st.integers(0, 40))
def test_global_tree_equals_reference(requests, context, knob, tree_knob, cut):
    depth, n_max, factor, min_prob = knob
    context = continuing(requests, context, cut)
    if not context:
        return
    store = filled_store(requests, depth + n_max)
    m, cursors = store.match(encode_context(context, depth), len(context), depth)
    if m == 0:
        return
    got = build(cursors, min(n_max, int(m * factor)), min_prob, *tree_knob)
    assert as_tuple(got) == reference_tree([r for r in requests if r], context, depth, n_max, factor, min_prob,
                                           tree_knob)
    # The cursors are left as they were: the same tree again.
    assert as_tuple(build(cursors, min(n_max, int(m * factor)), min_prob, *tree_knob)) == as_tuple(got)


@SETTINGS
@given(st.one_of(st.lists(st.integers(0, 2), min_size=1, max_size=120), st.lists(st.integers(0, 9), min_size=1, max_size=120)),
       knobs, tree_knobs, st.integers(0, 120))
def test_local_tree_equals_reference(context, knob, tree_knob, split):
    depth, n_max, factor, min_prob = knob
    history, last = context[:-1], context[-1]
    local = LocalIndex(depth + n_max, depth)  # indexed starts and open ones both
    local.reset(history[: split % (len(history) + 1)])
    local.sync(history)
    m, cursors = local.match(last, encode_context(context, depth))
    if m == 0:
        return
    got = build(cursors, min(n_max, int(m * factor)), min_prob, *tree_knob)
    assert as_tuple(got) == reference_tree([context], context, depth, n_max, factor, min_prob, tree_knob)


@SETTINGS
@given(request_lists, st.one_of(tokens_small, tokens_wide), knobs, st.integers(0, 3))
def test_the_primary_path_is_the_drafters_draft(requests, context, knob, n_extra):
    depth, n_max, factor, min_prob = knob
    drafter = SuffixDrafter(SuffixConfig(depth=depth, n_max=n_max, factor=factor, min_prob=min_prob))
    for r in requests:
        if r:
            drafter.store.add(r)
    if len(context) < 2:
        return
    drafter.begin(0, context[:1])
    draft = drafter.draft(0, context[:-1], context[-1], n_max)
    cursors, limit = drafter.match(0, n_max)
    if not draft:
        return
    tree = build(cursors, limit, min_prob, n_extra)
    assert (tree.tokens[: tree.n_primary], tree.probs[: tree.n_primary]) == (draft, drafter.draft_probs(0))


def test_the_worked_example_branches_where_the_outputs_differed():
    x, q, a, b, c, d, e, y = range(8)
    store = filled_store([[x, a, b, c, d], [a, b, c, d, y], [a, b, c, e]], span=8)
    m, cursors = store.match(encode_context([q, a, b, c], 4), 4, 4)
    # The draft D y (2/3 each); after A B C, E came once: a branch of estimate 1/3.
    tree = build(cursors, m, 0.1, 1)
    assert as_tuple(tree) == ([d, y, e], [-1, 0, -1], [2 / 3, 2 / 3, 1 / 3], 2)
    assert (tree.n_rows, tree.n_leaves) == (4, 2)
    assert tree.accepted([d, y, x]) == 2
    assert tree.accepted([e, x]) == 1  # the branch: one token where the draft had none
    assert tree.accepted([x]) == 0
    # Below the branch threshold, or no extra rows: the draft alone.
    assert as_tuple(build(cursors, m, 0.1, 1, branch_min_prob=0.4)) == ([d, y], [-1, 0], [2 / 3, 2 / 3], 2)
    assert build(cursors, m, 0.1, 0).n_leaves == 1


def test_branches_hang_off_kept_nodes_only_and_best_first():
    # After [1]: 2 x3, 3 x2, 4 x1; after [1 2]: 5 x2, 6 x1; after [1 3]: 7 x2.
    store = filled_store([[1, 2, 5], [1, 2, 5], [1, 2, 6], [1, 3, 7], [1, 3, 7], [1, 4, 8]], span=8)
    m, cursors = store.match(encode_context([1], 4), 1, 4)
    full = build(cursors, 3, 0.0, 3, n_primary=None, branch_min_prob=0.0)
    # Primary 2 5 (1/2, 1/3); then 3 (1/3), 7 below it (1/3, deeper), then 4 (1/6) before 6 (1/6, deeper).
    assert as_tuple(full) == ([2, 5, 3, 7, 4], [-1, 0, -1, 2, -1], [1 / 2, 1 / 2 * (2 / 3), 1 / 3, 1 / 3, 1 / 6], 2)
    # The primary cut to one token: the cut 5 is no branch, 6 is (after the kept 2), and on a tie
    # with 8 (below 4, as deep) the smaller path (2 6) goes first.
    cut = build(cursors, 3, 0.0, 4, n_primary=1, branch_min_prob=0.0)
    assert as_tuple(cut) == ([2, 3, 7, 4, 6], [-1, -1, 1, -1, 0], [1 / 2, 1 / 3, 1 / 3, 1 / 6, 1 / 2 * (1 / 3)], 1)
    # A tree of the primary alone has one sequence; each branch adds a leaf.
    assert (full.n_rows, full.n_leaves, cut.n_leaves) == (6, 3, 3)
