"""JSON bodies of llama.cpp-style responses, built from a finished job or a partial event."""

from __future__ import annotations

from typing import Any

from slotserver.job import Event, Job


def pick_fields(body: dict, paths: list[str]) -> dict:
    """Keep only ``paths`` (slash-separated) of ``body``, keyed by the full path string, as llama.cpp."""
    if not paths:
        return body
    out: dict[str, Any] = {}
    for path in paths:
        node: Any = body
        for part in path.split("/"):
            if not isinstance(node, dict) or part not in node:
                break
            node = node[part]
        else:
            out[path] = node
    return out


def probabilities(job: Job, vocab_piece) -> list[dict]:
    """llama.cpp's ``completion_probabilities``: the chosen token and the top candidates, log-probs."""

    def item(token: int, logprob: float) -> dict:
        piece = vocab_piece(token)
        return {"id": token, "token": piece.decode(errors="replace"), "bytes": list(piece), "logprob": logprob}

    out = []
    for token, top in zip(job.generated, job.probs):
        chosen = dict(top)[token]
        n = job.request.n_probs
        out.append({**item(token, chosen), "top_logprobs": [item(t, lp) for t, lp in top[:n]]})
    return out


def final_body(job: Job, model: str, generation_settings: dict, vocab_piece=None) -> dict:
    req = job.request
    body = {
        "index": 0,
        "content": job.text.text,
        "tokens": list(job.generated) if req.return_tokens else [],
        "id_slot": job.id_slot,
        "stop": True,
        "model": model,
        "tokens_predicted": job.n_gen,
        "tokens_evaluated": len(job.prompt),
        "generation_settings": generation_settings,
        "prompt": "",
        "has_new_line": job.text.has_new_line(),
        "truncated": job.is_truncated,
        "stop_type": job.stop_type,
        "stopping_word": job.text.stopping_word,
        "tokens_cached": job.n_cached + job.n_prompt_decoded + job.n_gen,
        "timings": job.timings(),
    }
    if req.n_probs > 0:
        body["completion_probabilities"] = probabilities(job, vocab_piece)
    return pick_fields(body, req.response_fields)


def partial_body(job: Job, event: Event) -> dict:
    return {
        "index": 0,
        "content": event.text,
        "tokens": list(event.tokens) if job.request.return_tokens else [],
        "stop": False,
        "id_slot": -1,
        "tokens_predicted": job.n_gen,
        "tokens_evaluated": len(job.prompt),
    }


def error_body(code: int, message: str, kind: str) -> dict:
    return {"error": {"code": code, "message": message, "type": kind}}
