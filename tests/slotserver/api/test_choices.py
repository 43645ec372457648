"""OpenAI's n: the extra choices of a request (pure: no model)."""

from __future__ import annotations

from slotserver.sampling.params import DEFAULT_SEED
from slotserver.serving.job import Job
from slotserver.serving.request import parse_completion
from slotserver.serving.service import CompletionService
from slotserver.serving.text_stream import TextStream
from slotserver.speculation.config import DraftLimits


def job(**fields) -> Job:
    req = parse_completion({"prompt": "x", "stop": ["\\n\\n"], **fields})
    return Job(req, [1, 2, 3], DraftLimits(), TextStream(req.stop, req.n_indent))


def test_choice_i_samples_with_seed_plus_i_and_waits_for_the_first():
    first = job(seed=40)
    second = CompletionService._choice(first, 2)
    assert second.request.sampling.seed == 42 and second.parent is first and second.prompt is first.prompt
    assert second.text is not first.text and second.events is not first.events and second.id != first.id
    assert second.request.stop == first.request.stop and first.request.sampling.seed == 40


def test_a_random_seed_stays_random_and_the_seed_wraps_at_32_bits():
    assert CompletionService._choice(job(), 1).request.sampling.seed == DEFAULT_SEED
    assert CompletionService._choice(job(seed=2**32 - 2), 3).request.sampling.seed == 1
