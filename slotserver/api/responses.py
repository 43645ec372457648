"""OpenAI's Responses API (``POST /v1/responses``) for text: what the current ``openai`` client and agents use.

A response is a chat completion underneath: ``instructions`` and ``input`` become chat messages,
``max_output_tokens`` the length, and native fields pass through as on the chat endpoint. Only
text in and text out (``text.format`` may constrain it to JSON, as ``response_format``): tools,
``previous_response_id`` (we store nothing) and non-text input parts are refused with a 400.

Streams send OpenAI's typed events (``event: <type>`` then ``data: {..., "type", "sequence_number"}``):
``response.created``, ``response.in_progress``, ``response.output_item.added``,
``response.content_part.added``, one ``response.output_text.delta`` per step, then
``response.output_text.done``, ``response.content_part.done``, ``response.output_item.done`` and
``response.completed`` (``response.incomplete`` when the length ran out). No ``[DONE]`` marker.
"""

from __future__ import annotations

from typing import Any

from slotserver.api.bodies import BodyInfo
from slotserver.errors import BadRequest
from slotserver.serving.job import Event, Job

ROLES = ("user", "assistant", "system", "developer")
TEXT_PARTS = ("input_text", "output_text", "text")
OPENING = 4  # events before the first delta: created, in_progress, output_item.added, content_part.added


def chat_request(body: Any) -> dict:
    """The chat request a Responses request stands for."""
    if not isinstance(body, dict):
        raise BadRequest("the request body must be a JSON object")
    for key in ("previous_response_id", "conversation"):
        if body.get(key) is not None:
            raise BadRequest(f"'{key}' is not supported: responses are not stored; send the whole input")
    if body.get("tools"):
        raise BadRequest("'tools' is not supported on /v1/responses")
    messages = []
    instructions = body.get("instructions")
    if instructions is not None:
        if not isinstance(instructions, str):
            raise BadRequest("'instructions' must be a string")
        messages.append({"role": "system", "content": instructions})
    messages += _input_messages(body.get("input"))
    out = {k: v for k, v in body.items() if k not in ("input", "instructions", "max_output_tokens", "text",
                                                      "store", "metadata", "truncation", "reasoning",
                                                      "parallel_tool_calls", "tool_choice", "user")}
    out["messages"] = messages
    if body.get("max_output_tokens") is not None:
        out["max_tokens"] = body["max_output_tokens"]
    fmt = body["text"].get("format") if isinstance(body.get("text"), dict) else None
    if fmt is not None:
        out["response_format"] = _response_format(fmt)
    return out


def _response_format(fmt: Any) -> dict:
    """``text.format`` of the Responses API as the chat endpoint's ``response_format``."""
    if not isinstance(fmt, dict) or fmt.get("type") not in ("text", "json_object", "json_schema"):
        raise BadRequest("'text.format' must be an object with 'type' text, json_object or json_schema")
    if fmt["type"] == "json_schema":  # the Responses API puts the schema beside the type
        return {"type": "json_schema", "json_schema": {"name": fmt.get("name", "output"), "schema": fmt.get("schema")}}
    return {"type": fmt["type"]}


def _input_messages(value: Any) -> list[dict]:
    if isinstance(value, str):
        return [{"role": "user", "content": value}]
    if not isinstance(value, list) or not value:
        raise BadRequest("'input' must be a string or a non-empty list of messages")
    out = []
    for item in value:
        if not isinstance(item, dict) or item.get("type", "message") != "message" or item.get("role") not in ROLES:
            raise BadRequest(f"each 'input' item must be a message with a 'role' ({', '.join(ROLES)})")
        out.append({"role": item["role"], "content": _text(item.get("content"))})
    return out


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(
        isinstance(p, dict) and p.get("type") in TEXT_PARTS and isinstance(p.get("text"), str) for p in content
    ):
        return "".join(p["text"] for p in content)
    raise BadRequest("message 'content' must be a string or a list of text parts (input_text)")


def _ids(job: Job) -> tuple[str, str]:
    return f"resp_{job.id}", f"msg_{job.id}"


def _part(text: str) -> dict:
    return {"type": "output_text", "text": text, "annotations": []}


def _message(job: Job, text: str, done: bool) -> dict:
    return {"type": "message", "id": _ids(job)[1], "status": "completed" if done else "in_progress",
            "role": "assistant", "content": [_part(text)] if done else []}


def _usage(job: Job) -> dict:
    return {"input_tokens": len(job.prompt), "input_tokens_details": {"cached_tokens": job.n_cached},
            "output_tokens": job.n_gen, "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": len(job.prompt) + job.n_gen}


def _response(info: BodyInfo, job: Job, status: str, output: list[dict]) -> dict:
    s = job.request.sampling
    incomplete = status == "incomplete"
    return {
        "id": _ids(job)[0], "object": "response", "created_at": int(job.t_created), "status": status,
        "error": None, "incomplete_details": {"reason": "max_output_tokens"} if incomplete else None,
        "instructions": None, "max_output_tokens": job.request.n_predict if job.request.n_predict >= 0 else None,
        "model": info.model, "output": output, "parallel_tool_calls": False, "previous_response_id": None,
        "reasoning": None, "store": False, "temperature": s.temperature, "text": {"format": {"type": "text"}},
        "tool_choice": "auto", "tools": [], "top_p": s.top_p, "truncation": "disabled",
        "usage": _usage(job) if status != "in_progress" else None, "metadata": {},
        "timings": job.timings(),
    }


def _status(job: Job) -> str:
    return "completed" if job.stop_type in ("eos", "word") else "incomplete"


def response_body(info: BodyInfo, job: Job) -> dict:
    return _response(info, job, _status(job), [_message(job, job.text.text, True)])


def response_events(info: BodyInfo, job: Job, event: Event) -> list[dict]:
    """The typed events of one engine event; sequence numbers grow with the handler's event count."""
    _, item_id = _ids(job)
    out: list[dict] = []
    if job.n_events_sent == 0:
        opening = _response(info, job, "in_progress", [])
        out += [{"type": "response.created", "response": opening},
                {"type": "response.in_progress", "response": opening},
                {"type": "response.output_item.added", "output_index": 0, "item": _message(job, "", False)},
                {"type": "response.content_part.added", "item_id": item_id, "output_index": 0,
                 "content_index": 0, "part": _part("")}]
    where = {"item_id": item_id, "output_index": 0, "content_index": 0}
    if event.text:
        out.append({"type": "response.output_text.delta", **where, "delta": event.text, "logprobs": []})
    if event.final:
        text = job.text.text
        status = _status(job)
        out += [{"type": "response.output_text.done", **where, "text": text, "logprobs": []},
                {"type": "response.content_part.done", **where, "part": _part(text)},
                {"type": "response.output_item.done", "output_index": 0, "item": _message(job, text, True)},
                {"type": f"response.{status}", "response": _response(info, job, status,
                                                                     [_message(job, text, True)])}]
    first = 0 if job.n_events_sent == 0 else OPENING + 4 * job.n_events_sent
    for i, e in enumerate(out):
        e["sequence_number"] = first + i
    return out
