"""--spec-estimates-file: the chain's drafter-wide acceptance estimates survive a restart (pure, no model)."""

from __future__ import annotations

import msgpack
import pytest

from ngram.fileio import CacheFileError
from ngram.mod import NgramMod, NgramModConfig
from slotserver.engine.fingerprint import VocabInfo
from slotserver.engine.verify_costs import VerifyProfile
from slotserver.speculation import selection as sel
from slotserver.speculation.chain import DraftChain
from slotserver.speculation.config import DraftLimits, SpecConfig
from slotserver.speculation.estimates_file import MAGIC, load_estimates, save_estimates
from slotserver.speculation.persistence import KIND_ESTIMATES, Persistence, StartupFileError
from slotserver.stats import ServerStats

FP = "ab" * 32
PROFILE = VerifyProfile(rows=(1, 8, 64), t_rows_s=(0.020, 0.060, 0.200), t_seq_s=0.0, t_input_row_s=0.001,
                        t_depth_row_s=0.0, depth=256)


class Copier:
    """A drafter that always proposes ``n`` tokens (acceptance is what the test says it is)."""

    def begin(self, slot, prompt):
        pass

    def draft(self, slot, history, last_token, n_max):
        return [1] * n_max

    def accept(self, slot, n_accepted, is_other):
        pass


def chain() -> DraftChain:
    return DraftChain([("ngram-mod", Copier())], select="expected", profile=PROFILE)


def learned_chain(n_drafts: int = 6) -> DraftChain:
    ch = chain()
    for _ in range(n_drafts):  # every 64-token draft accepted whole
        ch.begin(0, [])
        ch.draft(0, [], 0, _limits())
        ch.accept(0, 64, 64)
    return ch


def _limits() -> DraftLimits:
    return DraftLimits(n_max=64)


def first_draft_rows(ch: DraftChain) -> int:
    """Rows the selection verifies of a new request's first 64-token draft."""
    ch.begin(1, [])
    ch.draft(1, [], 0, _limits())
    return sel.choose([sel.Offer(ch.confidence(1), PROFILE.depth)], PROFILE)[0]


def test_a_restarted_chain_drafts_as_far_as_the_saved_one_had_learned_to(tmp_path):
    path = tmp_path / "est.ssestim"
    learned = learned_chain()
    save_estimates(learned.snapshot_estimates(), path, FP)
    restarted = chain()
    assert first_draft_rows(restarted) < 8  # from PRIOR_P: a cold chain verifies a short prefix
    restarted.adopt_estimates(load_estimates(path, FP))
    cap = sel.risk_cap(PROFILE, 0.0, 64)  # all a new request's first draft may risk
    assert 8 < cap < 64
    assert first_draft_rows(restarted) == first_draft_rows(learned) == cap
    assert restarted.snapshot_estimates() == learned.snapshot_estimates()


def test_a_snapshot_is_a_copy_the_engine_keeps_learning_beside():
    ch = learned_chain(1)
    snap = ch.snapshot_estimates()
    before = [list(c.tried) for c in snap.values()]
    ch.begin(0, [])
    ch.draft(0, [], 0, _limits())
    ch.accept(0, 64, 0)
    assert [list(c.tried) for c in snap.values()] == before


def write_body(path, **changes) -> None:
    body = {"version": 1, "fingerprint": FP, "bin_edges": list(sel.BIN_EDGES),
            "estimates": {"ngram-mod\t": {"acc": [1.0] * sel.N_BINS, "tried": [2.0] * sel.N_BINS}}}
    body.update(changes)
    path.write_bytes(MAGIC + msgpack.packb(body, use_bin_type=True))


@pytest.mark.parametrize(("changes", "problem"), [
    ({"fingerprint": "cd" * 32}, "fingerprint"),
    ({"bin_edges": [1, 2, 4]}, "position bins"),
    ({"version": 9}, "unsupported version"),
    ({"estimates": {"ngram-mod": {"acc": [0.0] * sel.N_BINS, "tried": [0.0] * sel.N_BINS}}}, "drafter<TAB>tag"),
    ({"estimates": {"ngram-mod\t": {"acc": [0.0] * 3, "tried": [0.0] * 3}}}, "must be"),
    ({"estimates": {"ngram-mod\t": {"acc": [3.0] * sel.N_BINS, "tried": [2.0] * sel.N_BINS}}}, "more accepted"),
    ({"estimates": {"ngram-mod\t": {"acc": [-1.0] * sel.N_BINS, "tried": [2.0] * sel.N_BINS}}}, "non-negative"),
])
def test_a_bad_file_is_refused_naming_the_problem(tmp_path, changes, problem):
    path = tmp_path / "est.ssestim"
    write_body(path, **changes)
    with pytest.raises(CacheFileError, match=problem):
        load_estimates(path, FP)


def test_a_file_that_is_no_estimates_file_is_refused(tmp_path):
    path = tmp_path / "est.ssestim"
    path.write_bytes(b"SSNGMOD" + msgpack.packb({"version": 1}))
    with pytest.raises(CacheFileError, match="bad magic"):
        load_estimates(path, FP)


def persistence(tmp_path, ch: DraftChain, **spec_kw) -> tuple[Persistence, ServerStats]:
    spec = SpecConfig(types=("ngram-mod",), estimates_file=str(tmp_path / "est.ssestim"), save_interval_s=0.0,
                      **spec_kw)
    stats = ServerStats()
    return Persistence(spec, ch, stats, lambda: VocabInfo(FP, 500)), stats


def test_the_server_saves_and_loads_the_estimates_with_its_other_learned_files(tmp_path):
    learned = learned_chain()
    p, stats = persistence(tmp_path, learned)
    assert p.is_active
    p.save()
    p.close()
    assert stats.file(KIND_ESTIMATES).n_saves == 1
    restarted = chain()
    p2, _ = persistence(tmp_path, restarted)
    p2.load()
    p2.close()
    assert restarted.snapshot_estimates() == learned.snapshot_estimates()


def test_a_bad_estimates_file_stops_the_start_unless_ignored_and_is_then_never_overwritten(tmp_path):
    path = tmp_path / "est.ssestim"
    path.write_bytes(b"garbage")
    p, _ = persistence(tmp_path, chain())
    with pytest.raises(StartupFileError, match="est.ssestim"):
        p.load()
    p.close()
    p2, _ = persistence(tmp_path, learned_chain(), ignore_bad_files=True)
    p2.load()
    p2.save()
    p2.close()
    assert path.read_bytes() == b"garbage"


def test_a_server_without_drafters_keeps_no_estimates_file(tmp_path):
    p, _ = persistence(tmp_path, DraftChain([]))
    assert not p.is_active
    p.close()


def test_the_n_gram_drafters_of_the_default_chain_are_persisted_too(tmp_path):
    mod = NgramMod(NgramModConfig(n_match=3, n_min=1, n_max=8), pool_size=256)
    ch = DraftChain([("ngram-mod", mod)], select="expected", profile=PROFILE)
    ch.estimator.drafter_wide[("ngram-mod", "")] = sel.Counts([1.0] * sel.N_BINS, [2.0] * sel.N_BINS)
    p, _ = persistence(tmp_path, ch)
    p.save()
    p.close()
    assert load_estimates(tmp_path / "est.ssestim", FP) == {("ngram-mod", ""): sel.Counts([1.0] * sel.N_BINS,
                                                                                          [2.0] * sel.N_BINS)}
