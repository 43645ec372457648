"""Would tree verification pay on this CPU? An upper bound from real outputs and measured costs.

Tree verification (issue 13 item 4) verifies, in the step's one decode, the suffix drafter's draft
plus a few alternative continuations where its structure saw more than one, each root-to-leaf path
its own sequence (``ngram/suffix_tree.py``). This replays real greedy outputs of the target through

- **path**: the drafter's draft, cut per step by the server's selection (``DraftChain`` estimates,
  ``selection.choose`` under the verify-cost profile), as the server verifies it;
- **tree+k**: the same cut draft plus up to k extra rows, the likeliest other continuations that
  branch off its kept nodes (estimate >= ``--branch-min-prob``);
- **oracle+k**: the same cut draft plus, with hindsight, up to k rows on the true continuation
  from the node where the draft missed (or where the drafter stopped), as far as the structure
  holds it (any count), and of those as many as pay at the path's tokens/s: no tree of k extra
  rows from that match accepts more, and none spends its rows better;

with the global structure learning every finished request, as the server does. Each step costs
what the profile says a decode of its rows and sequences costs (``VerifyProfile.step``: rows,
``t_seq_s`` per extra sequence, attention depth); tokens/s = tokens / the sum of those. An upper
bound for the trees: the engine would also copy the context's KV cells to each extra sequence and
drop the losing ones, which is not counted; prefill is left out of every policy alike.

Streams: **outputs**, the 8 workloads of ``benchmarks/bench/workloads.json`` once each; **multi-turn**,
per workload ``--turns`` turns (3) whose prompts carry the earlier turns, turn 1 its real output
and the later ones copies of that output with independent token edits (each token substituted,
dropped or followed by an inserted one with probability ``--edit-rate``), so from the third turn
on the text meets versions of itself that part at every edit.

    python -m benchmarks.suffix_tree generate outputs.json [-m MODEL]   # loads the model, once
    python -m slotserver calibrate --spec-profile-dir DIR              # the profile, cached in DIR
    python -m benchmarks.suffix_tree replay outputs.json --profile DIR/verify-profile-*.json
"""

from __future__ import annotations

import argparse
import json
import random
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from ngram.suffix import SuffixConfig, SuffixDrafter
from ngram.suffix_tree import build, fork
from ngram.suffix_walk import Cursor, merged_children
from slotserver.engine.verify_costs import VerifyProfile
from slotserver.speculation.chain import DraftChain
from slotserver.speculation.config import DraftLimits
from slotserver.speculation.selection import Offer, choose

WORKLOADS = Path(__file__).resolve().parent / "bench" / "workloads.json"
TURN_TEXT = "\n\nOnce more, with a few changes:\n"  # between turns of the multi-turn stream
EXTRAS = (1, 2, 4)
SLOT = 0


def generate(out: Path, model_path: str) -> None:
    """Greedy outputs of every workload (``n_predict`` tokens or up to end of generation), one plain
    decode per token through the server's engine (its kernels: the outputs it gives unspeculated)."""
    from slotserver.engine.batch import BatchEntry, BatchPlan
    from slotserver.engine.engine import Engine, EngineConfig
    from slotserver.engine.model_files import default_model_path
    engine = Engine(EngineConfig(model_path or default_model_path(), n_ctx=4096, n_parallel=1))
    records = []
    for w in json.loads(WORKLOADS.read_text())["workloads"]:
        prompt = engine.vocab.tokenize(w["prompt"], add_special=True)
        rows = engine.decode(BatchPlan([BatchEntry(SLOT, 0, prompt, False, True)]))
        output: list[int] = []
        while True:
            token = engine.argmax(rows[0])[0]
            if engine.vocab.is_eog(token) or len(output) == w["n_predict"]:
                break
            output.append(token)
            rows = engine.decode(BatchPlan([BatchEntry(SLOT, len(prompt) + len(output) - 1, [token], True)]))
        engine.remove(SLOT, 0)
        records.append({"name": w["name"], "prompt_ids": prompt, "output_ids": output})
        print(f"{w['name']}: prompt {len(prompt)}, output {len(output)} tokens")
    turn = engine.vocab.tokenize(TURN_TEXT, add_special=False)
    out.write_text(json.dumps({"model": engine.description, "turn_ids": turn, "workloads": records}))
    engine.close()


def edited(tokens: Sequence[int], rate: float, rng: random.Random) -> list[int]:
    out: list[int] = []
    for t in tokens:
        r = rng.random()
        if r < rate / 2:
            out.append(rng.choice(tokens))  # substituted
        elif r < 3 * rate / 4:
            continue  # dropped
        else:
            out.append(t)
            if r < rate:
                out.append(rng.choice(tokens))  # inserted
    return out


def streams(data: dict, edit_rate: float, seed: int, n_turns: int) -> dict[str, list[tuple[list[int], list[int]]]]:
    """(prompt, output) requests per stream, in the order they finish."""
    rng = random.Random(seed)
    first = [(w["prompt_ids"], w["output_ids"]) for w in data["workloads"]]
    multi = []
    for prompt, output in first:
        turns = [output] + [edited(output, edit_rate, rng) for _ in range(n_turns - 1)]
        context: list[int] = []
        for i, out in enumerate(turns):
            context = list(prompt) if i == 0 else context + data["turn_ids"]
            multi.append((context, out))
            context = context + out
    return {"outputs": first, "multi-turn": multi}


@dataclass(slots=True)
class Tally:
    n_steps: int = 0
    n_tokens: int = 0  # generated by the steps (each step's sampled token and accepted drafts)
    n_primary: int = 0  # draft rows verified (the cut draft)
    n_extra: int = 0  # rows beyond it (branches)
    n_seqs: int = 0  # sequences beyond the first
    n_accepted: int = 0
    n_off_primary: int = 0  # accepted tokens the draft alone would not have given
    n_missed: int = 0  # steps whose kept draft missed...
    n_held: int = 0  # ...where the structure held the true token as another child (a branch could win)
    steps_by_rows: Counter = field(default_factory=Counter)
    t_s: float = 0.0  # modelled decode time
    t_plain_s: float = 0.0  # the same tokens one plain decode each

    @property
    def tokens_per_s(self) -> float:
        return self.n_tokens / self.t_s


def n_held(cursors: Sequence[Cursor], tokens: Sequence[int]) -> int:
    """How many of ``tokens``, in order from the match, the structure holds as a path."""
    live = fork([c for c in cursors if c.alive()])
    for n, t in enumerate(tokens):
        children = merged_children(live) if live else ([], [])
        if t not in list(children[0]):
            return n
        for c in live:
            c.descend(t)
        live = [c for c in live if c.alive()]
    return len(tokens)


def best_rows(profile: VerifyProfile, rate: float, held: int, rows: int, seqs: int, depth: int) -> int:
    """How many of ``held`` true rows to add to a step of ``rows`` rows in one sequence (``seqs``
    with them): the number that gains most tokens net of their time at ``rate`` tokens/s, which is
    what raises a run's tokens/s above ``rate``."""
    t0 = profile.step(rows, 1, depth_rows=rows * depth)
    gains = [j - rate * (profile.step(rows + j, seqs, depth_rows=(rows + j) * depth) - t0) for j in range(held + 1)]
    return max(range(held + 1), key=lambda j: (gains[j], -j))


def replay(requests: list[tuple[list[int], list[int]]], profile: VerifyProfile, config: SuffixConfig,
           n_extra: int, branch_min_prob: float, oracle_rate: float = 0.0) -> Tally:
    """One policy: the cut draft plus ``n_extra`` rows of a tree, or with ``oracle_rate`` (the
    path's tokens/s) the oracle's rows."""
    drafter = SuffixDrafter(config)
    chain = DraftChain([("suffix", drafter)], profile=profile)
    tally = Tally()
    for prompt, output in requests:
        chain.begin(SLOT, prompt)
        history = list(prompt)
        pos = 0  # output[pos]: the token just sampled
        while pos + 1 < len(output):
            truth = output[pos + 1 :]
            cap = min(config.n_max, len(truth) - 1)  # scheduler.draft_budget
            draft = chain.draft(SLOT, history, output[pos], DraftLimits(n_max=cap)) if cap > 0 else []
            n = choose([Offer(chain.confidence(SLOT)[: len(draft)], len(history))], profile)[0] if draft else 0
            if draft:
                chain.selected(SLOT, n)
            acc_primary = next((i for i, (d, t) in enumerate(zip(draft[:n], truth)) if d != t), n)
            acc, rows, seqs = acc_primary, 1 + n, 1
            depth = len(history) - profile.depth
            cursors, limit = drafter.match(SLOT, cap) if n else ([], 0)
            if acc_primary < n:
                tally.n_missed += 1
                tally.n_held += n_held(cursors, truth[: acc_primary + 1]) > acc_primary
            if n and n_extra:
                # The branch leaves the draft where it missed (a cut token is no branch), or
                # continues after the drafter stopped.
                if oracle_rate and (acc_primary == len(draft) or truth[acc_primary] != draft[acc_primary]):
                    held = n_held(cursors, truth[: min(acc_primary + n_extra, limit, cap)]) - acc_primary
                    branch_seqs = 2 if acc_primary < n else 1  # else it only lengthens the path
                    j = best_rows(profile, oracle_rate, held, rows, branch_seqs, depth)
                    if j:
                        acc, rows, seqs = acc + j, rows + j, branch_seqs
                elif not oracle_rate:
                    tree = build(cursors, limit, config.min_prob, n_extra, branch_min_prob, n_primary=n)
                    acc, rows, seqs = tree.accepted(truth[:cap]), tree.n_rows, tree.n_leaves
            chain.accept(SLOT, n, acc_primary)
            tally.n_steps += 1
            tally.steps_by_rows[rows] += 1
            tally.n_tokens += 1 + acc
            tally.n_primary += n
            tally.n_extra += rows - 1 - n
            tally.n_seqs += seqs - 1
            tally.n_accepted += acc
            tally.n_off_primary += acc - acc_primary
            tally.t_s += profile.step(rows, seqs, depth_rows=rows * depth)
            tally.t_plain_s += sum(profile.step(1, depth_rows=depth + i) for i in range(1 + acc))
            history.extend(output[pos : pos + 1 + acc])
            pos += 1 + acc
        chain.finish(SLOT, prompt + output)
    return tally


def print_profile(profile: VerifyProfile, source: str) -> None:
    print(f"verify-cost profile ({source}), depth {profile.depth}:")
    print("  rows: " + ", ".join(f"{r} {t * 1e3:.1f}" for r, t in zip(profile.rows, profile.t_rows_s)) + " ms")
    print(f"  each further sequence {profile.t_seq_s * 1e3:.2f} ms, each output row +{profile.t_depth_row_s * 1e6:.3f} ms "
          f"per 1000 cached tokens")


def report(name: str, requests: list, profile: VerifyProfile, config: SuffixConfig, branch_min_prob: float) -> None:
    base = replay(requests, profile, config, 0, branch_min_prob)
    tallies = {"path": base}
    for k in EXTRAS:
        tallies[f"tree+{k}"] = replay(requests, profile, config, k, branch_min_prob)
    for k in EXTRAS:
        tallies[f"oracle+{k}"] = replay(requests, profile, config, k, branch_min_prob, base.tokens_per_s)
    n_out = sum(len(o) for _, o in requests)
    print(f"\n{name}: {len(requests)} requests, {n_out} output tokens; no speculation {base.n_tokens / base.t_plain_s:.1f} tokens/s")
    print("| policy | steps | draft rows | extra rows | extra seqs | accepted | off the draft | tokens/s | × path |")
    print("|---|---|---|---|---|---|---|---|---|")
    for label, t in tallies.items():
        print(f"| {label} | {t.n_steps} | {t.n_primary} | {t.n_extra} | {t.n_seqs} | {t.n_accepted} | {t.n_off_primary} "
              f"| {t.tokens_per_s:.1f} | {t.tokens_per_s / base.tokens_per_s:.3f} |")
    common = ", ".join(f"{r} ({n})" for r, n in base.steps_by_rows.most_common(6))
    print(f"path: the kept draft missed in {base.n_missed} of {base.n_steps} steps, and the structure held the true "
          f"token as another child in {base.n_held} of them; most used step sizes, rows (steps): {common}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="command", required=True)
    g = sub.add_parser("generate", help="greedy outputs of the workloads (loads the model)")
    g.add_argument("out", type=Path)
    g.add_argument("-m", "--model", default="")
    r = sub.add_parser("replay", help="replay them through each policy")
    r.add_argument("outputs", type=Path)
    r.add_argument("--profile", type=Path, required=True, help="a profile cached by `slotserver calibrate`")
    r.add_argument("--edit-rate", type=float, default=0.05)
    r.add_argument("--seed", type=int, default=1)
    r.add_argument("--turns", type=int, default=3, help="turns per workload in the multi-turn stream")
    r.add_argument("--branch-min-prob", type=float, default=SuffixConfig().min_prob)
    args = ap.parse_args()
    if args.command == "generate":
        return generate(args.out, args.model)
    data = json.loads(args.outputs.read_text())
    profile = VerifyProfile.from_dict(json.loads(args.profile.read_text())["profile"])
    print_profile(profile, str(args.profile))
    print(f"branches: estimate >= {args.branch_min_prob}; multi-turn: {args.turns} turns, edit rate {args.edit_rate}, "
          f"seed {args.seed}")
    print("an upper bound for tree+k and oracle+k: copying the context's KV to extra sequences and dropping "
          "the losing paths is not counted")
    config = SuffixConfig()
    for name, requests in streams(data, args.edit_rate, args.seed, args.turns).items():
        report(name, requests, profile, config, args.branch_min_prob)


if __name__ == "__main__":
    main()
