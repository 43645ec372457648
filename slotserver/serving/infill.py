"""/infill: read llama.vim's fill-in-the-middle fields and lay out the FIM prompt, as llama-server.

Pure: tokenizing is passed in, so the layout and every budget are tested without a model.

Layout (prefix-suffix-middle; ``spm`` swaps prefix and suffix), after llama.cpp's
``format_prompt_infill`` and the repo-level pattern of Qwen2.5-Coder (arXiv 2409.12186)::

    [extra tail] [BOS] [FIM_PRE] prefix tail + prompt [FIM_SUF] suffix head [FIM_MID]

where the extra context is ``[FIM_REP] "myproject\\n"`` then, per chunk, ``[FIM_SEP] filename\\n``
(or a text separator when the model has no FIM_SEP) and the chunk's text, then
``[FIM_SEP] "filename\\n"``. Budgets: the prefix keeps its last ``3 * n_batch / 4`` tokens, the
suffix its first ``n_batch / 4 - 2 - len(prompt)``, the extra context its last
``n_ctx - n_batch - 2 * n_predict`` (n_predict being the server's ``-n``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from slotserver.engine.vocab import NO_TOKEN, FimTokens
from slotserver.errors import BadRequest

Tokenize = Callable[[str], list[int]]  # text -> tokens, no BOS, special tokens not parsed

CHUNK_SEPARATOR = "\n\n--- snippet ---\n\n"  # between extra chunks when the model has no FIM_SEP
PROJECT = "myproject\n"  # llama-server's fixed repository name
CURRENT_FILE = "filename\n"  # llama-server's fixed name of the file being edited
DEFAULT_FILENAME = "tmp"  # a chunk without a filename


@dataclass(frozen=True, slots=True)
class InfillInput:
    prefix: str  # text before the cursor's line ("input_prefix")
    suffix: str  # text after the cursor ("input_suffix")
    extra: tuple[tuple[str, str], ...] = ()  # (filename, text) chunks of other files ("input_extra")


@dataclass(frozen=True, slots=True)
class InfillBudget:
    n_batch: int  # the server's -b
    n_ctx: int  # the slot's context
    n_predict: int  # the server's -n (not the request's), as llama-server


def parse_infill(body: dict) -> InfillInput:
    """The /infill fields besides ``prompt``; BadRequest names what is wrong."""
    if not isinstance(body, dict):
        raise BadRequest("the request body must be a JSON object")
    for key in ("input_prefix", "input_suffix"):
        if not isinstance(body.get(key), str):
            raise BadRequest(f"'{key}' is required and must be a string")
    if not isinstance(body.get("prompt", ""), str):
        raise BadRequest("'prompt' must be a string")
    extra = body.get("input_extra", [])
    if not isinstance(extra, list):
        raise BadRequest("'input_extra' must be an array of {\"filename\": string, \"text\": string}")
    return InfillInput(body["input_prefix"], body["input_suffix"], tuple(_chunk(c) for c in extra))


def _chunk(chunk: Any) -> tuple[str, str]:
    if not isinstance(chunk, dict):
        raise BadRequest("extra_context chunk must be an object")
    if not isinstance(chunk.get("text"), str):
        raise BadRequest('extra_context chunk must contain a "text" field with a string value')
    filename = chunk.get("filename", DEFAULT_FILENAME)
    if not isinstance(filename, str):
        raise BadRequest('extra_context chunk\'s "filename" field must be a string')
    return filename, chunk["text"]


def extra_tokens(fim: FimTokens, inp: InfillInput, tokenize: Tokenize) -> list[int]:
    out: list[int] = []
    if fim.rep != NO_TOKEN:
        out += [fim.rep, *tokenize(PROJECT)]
    for filename, text in inp.extra:
        out += [fim.sep, *tokenize(filename + "\n")] if fim.sep != NO_TOKEN else tokenize(CHUNK_SEPARATOR)
        out += tokenize(text)
    if fim.sep != NO_TOKEN:
        out += [fim.sep, *tokenize(CURRENT_FILE)]
    return out


def infill_prompt(
    fim: FimTokens, inp: InfillInput, prompt: list[int], tokenize: Tokenize, budget: InfillBudget,
    *, bos: int | None, spm: bool = False,
) -> list[int]:
    """The FIM prompt's tokens. ``prompt`` is the tokenized middle (the cursor line so far);
    ``bos`` is the BOS token if the model adds one, else None (or ``NO_TOKEN``: a model may ask for a
    BOS it does not have, and -1 in a prompt fails the decode)."""
    assert fim.can_infill
    prefix, suffix = tokenize(inp.prefix), tokenize(inp.suffix)
    n_prefix = min(len(prefix), 3 * (budget.n_batch // 4))
    n_suffix = min(len(suffix), max(0, budget.n_batch // 4 - (2 + len(prompt))))
    extra = extra_tokens(fim, inp, tokenize)
    n_extra = min(max(0, budget.n_ctx - budget.n_batch - 2 * budget.n_predict), len(extra))
    pre = [fim.pre, *prefix[len(prefix) - n_prefix :], *prompt]
    suf = [fim.suf, *suffix[:n_suffix]]
    first, second = (suf, pre) if spm else (pre, suf)
    head = extra[len(extra) - n_extra :] + ([bos] if bos is not None and bos != NO_TOKEN else [])
    return head + first + second + [fim.mid]
