"""Slot transitions belong to ``SlotLifecycle`` (lifecycle.py): IDLE -> PREFILL -> GENERATING -> IDLE,
the drafters begun when generation starts and told the request when it ends, never before it began.

The transition rules run without a model; the whole path (admit, decode the prompt, apply it,
release) runs on the real SmolLM2 with a one-request context. A recording drafter in a real
``DraftChain`` shows what the slot's speculation was told.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import slotserver
from slotserver.engine.engine import Engine, EngineConfig
from slotserver.serving.apply_rows import Applier
from slotserver.serving.job import Job
from slotserver.serving.lifecycle import SlotLifecycle
from slotserver.serving.request import parse_completion
from slotserver.serving.scheduler import PrefillWork, plan_batch
from slotserver.serving.slots import Slot, SlotState
from slotserver.serving.text_stream import TextStream
from slotserver.speculation.chain import DraftChain
from slotserver.speculation.config import DraftLimits
from slotserver.speculation.learning_scopes import LearningScopes
from slotserver.stats import ServerStats
from tests.integration.fim_model import SMOLLM2


class Recorder:
    """A drafter that never drafts and records what its chain told it about each slot."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int, list[int]]] = []

    def begin(self, slot, prompt):
        self.calls.append(("begin", slot, list(prompt)))

    def draft(self, slot, history, last_token, n_max):
        return []

    def accept(self, slot, n_accepted, is_other):
        pass

    def finish(self, slot, history):
        self.calls.append(("finish", slot, list(history)))


def lifecycle(engine: Engine | None = None) -> tuple[SlotLifecycle, Recorder]:
    drafter = Recorder()
    chains = LearningScopes(DraftChain([("ngram-simple", drafter)]))
    return SlotLifecycle(engine, chains, ServerStats(), cache_prompt=True), drafter


def test_start_generating_moves_a_prefilled_slot_on_and_begins_its_drafters_on_the_prompt():
    life, drafter = lifecycle()
    slot = Slot(1, cache=[5, 6, 7], state=SlotState.PREFILL, chain=life.chains.shared)
    life.start_generating(slot)
    assert slot.state is SlotState.GENERATING
    assert drafter.calls == [("begin", 1, [5, 6, 7])]


@pytest.mark.parametrize("state", [SlotState.IDLE, SlotState.GENERATING])
def test_only_a_prefilling_slot_starts_generating(state):
    life, drafter = lifecycle()
    slot = Slot(0, state=state, chain=life.chains.shared)
    with pytest.raises(AssertionError):
        life.start_generating(slot)
    assert slot.state is state and drafter.calls == []


def test_no_module_but_the_lifecycle_assigns_a_slot_state_or_begins_or_ends_its_speculation():
    """The rule behind the tests above, for the whole package: ``.state = SlotState...`` and
    ``<slot>.chain.begin/finish/end(...)`` appear in lifecycle.py alone."""
    root = Path(slotserver.__file__).parent
    found = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        for node in ast.walk(ast.parse(path.read_text(), rel)):
            if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                if any(isinstance(t, ast.Attribute) and t.attr == "state" for t in targets) \
                        and "SlotState" in ast.unparse(node.value):
                    found.append((rel, node.lineno, ast.unparse(node)))
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                    and node.func.attr in ("begin", "finish", "end") \
                    and isinstance(node.func.value, ast.Attribute) and node.func.value.attr == "chain":
                found.append((rel, node.lineno, ast.unparse(node)))
    assert {rel for rel, _, _ in found} == {"serving/lifecycle.py"}, found


# -- the whole path on the real model --------------------------------------------------------------

PROMPT = "1, 2, 3, 4, 5,"


@pytest.fixture(scope="module")
def engine():
    engine = Engine(EngineConfig(model_path=SMOLLM2, n_ctx=256, n_parallel=1, n_batch=64, n_ubatch=64))
    yield engine
    engine.close()


def admitted(engine: Engine, **body) -> tuple[SlotLifecycle, Recorder, Slot, Job]:
    """A fresh slot given a job for ``body`` (the runner's ``_admit``), its KV cache empty."""
    engine.remove(-1, 0)
    life, drafter = lifecycle(engine)
    req = parse_completion({"prompt": PROMPT, "temperature": 0.0, **body})
    prompt = engine.vocab.tokenize(PROMPT, add_special=True)
    job = Job(req, prompt, DraftLimits(), TextStream(req.stop))
    slot = Slot(0)
    life.start(slot, job)
    return life, drafter, slot, job


def decode_prompt(engine: Engine, life: SlotLifecycle, slot: Slot):
    """The runner's step for a prefilling slot: decode its pending prompt and apply the rows."""
    plan = plan_batch([], [PrefillWork(slot.id, len(slot.cache), slot.pending)], engine.config.n_batch)
    assert len(plan.entries) == 1 and plan.entries[0].ends_prompt
    rows = engine.decode(plan)
    return Applier(engine, life.stats, life).entry(slot, plan.entries[0], rows[0])


def test_a_request_goes_idle_prefill_generating_idle_and_its_drafters_hear_begin_then_finish(engine):
    life, drafter, slot, job = admitted(engine, n_predict=8)
    assert slot.state is SlotState.PREFILL and slot.job is job and slot.pending == job.prompt
    assert slot.sampler is not None and slot.chain is life.chains.shared
    assert drafter.calls == []  # the drafters begin once the prompt is in, not at admission
    assert decode_prompt(engine, life, slot) == []  # one token sampled, no stop yet
    assert slot.state is SlotState.GENERATING and slot.cache == job.prompt
    assert drafter.calls == [("begin", 0, job.prompt)]
    first = slot.sampled
    assert job.generated == [first]
    done, event = life.release(slot, "none")
    assert done is job and event.final and job.stop_type == "none"
    assert slot.state is SlotState.IDLE and slot.is_idle
    assert (slot.job, slot.sampler, slot.grammar, slot.chain, slot.pending) == (None, None, None, None, [])
    assert drafter.calls[1:] == [("finish", 0, job.prompt + [first])]
    assert slot.cache == job.prompt  # kept for prefix reuse


def test_a_request_that_asks_for_no_tokens_ends_after_its_prompt_without_speculation(engine):
    life, drafter, slot, job = admitted(engine, n_predict=0)
    [(done, event)] = decode_prompt(engine, life, slot)
    assert done is job and event.final and job.stop_type == "limit"
    assert slot.state is SlotState.IDLE and slot.job is None and slot.chain is None
    assert drafter.calls == []  # never generating: the drafters neither began nor heard a finish


def test_a_request_ended_while_its_prompt_decodes_is_never_told_to_the_drafters(engine):
    life, drafter, slot, job = admitted(engine, n_predict=8)
    done, event = life.release(slot, "none")
    assert done is job and event.final
    assert slot.state is SlotState.IDLE and (slot.job, slot.sampler, slot.chain) == (None, None, None)
    assert drafter.calls == []
