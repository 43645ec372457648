"""Decode a request body into a JSON object, rejecting what ``json.loads`` lets through (pure).

``json.loads`` accepts NaN/Infinity literals and overflowing numbers (``1e999`` is inf), lone
surrogate escapes (``"\\ud800"``, which later fail to encode to UTF-8 deep in tokenization) and
raises RecursionError (a 500) on deep nesting. Each becomes a ``BadRequest`` naming the problem.
"""

from __future__ import annotations

import json
import re
from typing import Any

from slotserver.errors import BadRequest

# No request field nests deeper than a few levels (messages -> content parts -> object); 64 leaves
# room for any client-side extra while keeping every walk over the body shallow.
MAX_DEPTH = 64
# Strict UTF-8 decoding refuses encoded surrogates, so a lone one can only come from a \u escape in
# D800-DFFF; a paired one matches too and passes the string check (an escaped backslash before
# "ud8.." is a false positive, equally harmless).
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89abcdefABCDEF]")


def _reject_constant(name: str) -> Any:
    raise BadRequest(f"invalid JSON in the request body: {name} is not a valid JSON number")


def _finite_float(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise BadRequest(f"invalid JSON in the request body: the number {text[:32]} is out of range")
    return value


def _children(node: Any) -> Any:
    return node.values() if isinstance(node, dict) else node


def _check_depth(body: dict) -> None:
    """Iteratively (a deep body must not recurse here either), visiting containers only."""
    level, depth = [body], 1
    while level:
        if depth > MAX_DEPTH:
            raise BadRequest(f"the request body is nested too deeply (more than {MAX_DEPTH} levels)")
        level = [c for node in level for c in _children(node) if isinstance(c, (dict, list))]
        depth += 1


def _check_strings(body: dict) -> None:
    """Every key and string value must encode to UTF-8 (a lone surrogate does not)."""
    stack: list[Any] = [body]
    while stack:
        node = stack.pop()
        for text in node if isinstance(node, dict) else ():
            _check_string(text)
        for item in _children(node):
            if isinstance(item, str):
                _check_string(item)
            elif isinstance(item, (dict, list)):
                stack.append(item)


def _check_string(text: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        bad = ord(text[exc.start])
        raise BadRequest(
            f"invalid string in the request body: lone surrogate \\u{bad:04x} (not valid Unicode)"
        ) from None


def parse_json_body(raw: bytes) -> dict:
    """The body as a dict; an empty body is ``{}``. Any other problem raises ``BadRequest``."""
    if not raw:
        return {}
    try:
        text = raw.decode("utf-8-sig")  # a leading BOM is allowed (RFC 8259 lets parsers ignore it)
    except UnicodeDecodeError as exc:
        raise BadRequest(f"the request body is not valid UTF-8 (byte {exc.start})") from None
    try:
        body = json.loads(text, parse_constant=_reject_constant, parse_float=_finite_float)
    except RecursionError:
        raise BadRequest(f"the request body is nested too deeply (more than {MAX_DEPTH} levels)") from None
    except ValueError as exc:  # JSONDecodeError, and int() of a number with too many digits
        raise BadRequest(f"invalid JSON in the request body: {exc}") from None
    if not isinstance(body, dict):
        raise BadRequest("the request body must be a JSON object")
    # Both walks are skipped when the raw text shows they cannot fail, so a long prompt costs nothing.
    if text.count("[") + text.count("{") > MAX_DEPTH:  # fewer brackets cannot nest that deep
        _check_depth(body)
    if _SURROGATE_ESCAPE.search(text):
        _check_strings(body)
    return body
