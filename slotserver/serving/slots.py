"""Slot state: one sequence id in the shared context, the tokens its KV holds, and its current job.

A slot is data: ``SlotLifecycle`` (lifecycle.py) is the one writer of its state, job, sampler,
grammar, chain and KV owner; the applier writes its tokens as it decodes (apply_rows.py), and a
slot restore an idle slot's cache (slot_files.py).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from slotserver.serving.job import Job
from slotserver.speculation.chain import DraftChain


class SlotState(enum.Enum):
    IDLE = "idle"
    PREFILL = "prefill"  # prompt tokens still to decode
    GENERATING = "generating"


@dataclass(slots=True, eq=False)
class Slot:
    id: int  # also the llama.cpp sequence id
    cache: list[int] = field(default_factory=list)  # tokens whose KV entries this slot holds, in order
    # The tenant whose prompts ``cache`` holds (``LearningScopes.kv_owner``; "" when the cache is shared):
    # only its requests reuse the cache. Set by ``SlotLifecycle.start``, its only writer.
    kv_owner: str = ""
    state: SlotState = SlotState.IDLE  # written by SlotLifecycle only (its docstring: the transitions)
    job: Job | None = None
    sampler: object = None  # llama sampler chain of the current job (engine-owned pointer)
    grammar: object = None  # llama grammar sampler of the current job, if it has a grammar (engine-owned pointer)
    chain: DraftChain | None = None  # draft chain of the current job (see learning_scopes.py)
    pending: list[int] = field(default_factory=list)  # prompt tokens not yet decoded
    sampled: int = -1  # last sampled token, emitted but not yet decoded
    t_last_used: float = 0.0

    @property
    def is_idle(self) -> bool:
        return self.state is SlotState.IDLE
