"""llama-server's environment variables: a flag's ``LLAMA_ARG_*`` stands for it when the flag is absent.

As common/arg.cpp: the command line wins over the environment; a switch (``--metrics``) is set by a
truthy value and left alone otherwise; a flag pair (``--slots``/``--no-slots``) needs a boolean
value, and its ``LLAMA_ARG_NO_*`` variable, if set at all, means false. Variables are turned into
argparse defaults before the command line is parsed, so argparse converts and checks them as it
does the flags themselves.
"""

from __future__ import annotations

import argparse
import re
from typing import Iterable, Mapping

TRUTHY = frozenset({"on", "enabled", "true", "1"})
FALSEY = frozenset({"off", "disabled", "false", "0"})
SWITCH, PAIR, VALUE = "switch", "pair", "value"  # how a variable's text becomes the flag's value


def parse_bool(text: str, name: str) -> bool:
    """A boolean as llama.cpp's ``parse_bool_value`` reads it; ValueError names the variable."""
    if text in TRUTHY:
        return True
    if text in FALSEY:
        return False
    raise ValueError(f"{name}={text!r} is not a boolean (true/1/on/enabled or false/0/off/disabled)")


def negative_env(name: str) -> str:
    """llama.cpp's compatibility spelling of a pair's variable: LLAMA_ARG_X -> LLAMA_ARG_NO_X."""
    return name.replace("LLAMA_ARG_", "LLAMA_ARG_NO_", 1)


def with_env(help_text: str, env: tuple[str, ...]) -> str:
    return f"{help_text} (env: {', '.join(env)})" if env else help_text


def add_flag(group, *names: str, env: str | tuple[str, ...] = (), **kwargs) -> argparse.Action:
    """``group.add_argument`` that also records the variables standing for the flag."""
    env = (env,) if isinstance(env, str) else tuple(env)
    kwargs["help"] = with_env(kwargs.get("help", ""), env)
    action = group.add_argument(*names, **kwargs)
    action.env, action.env_kind = env, SWITCH if action.nargs == 0 else VALUE
    return action


def add_pair(group, positive: Iterable[str], negative: Iterable[str], *, dest: str, default, help: str,
             env: str | tuple[str, ...] = ()) -> argparse.Action:
    """A llama.cpp flag pair (``-cb``/``-nocb``): two flags setting one boolean ``dest``."""
    env = (env,) if isinstance(env, str) else tuple(env)
    positive, negative = list(positive), list(negative)
    shown = with_env(help, env + tuple(negative_env(e) for e in env))
    action = group.add_argument(*positive, dest=dest, action="store_const", const=True, default=default, help=shown)
    group.add_argument(*negative, dest=dest, action="store_const", const=False, default=default,
                       help=f"the opposite of {positive[-1]}")
    action.env, action.env_kind = env, PAIR
    return action


def normalize_argv(argv: list[str]) -> list[str]:
    """``--ctx_size`` is ``--ctx-size``, as llama.cpp accepts (before any ``=value``)."""
    out = []
    for token in argv:
        if token.startswith("--") and token != "--":
            name, eq, value = token.partition("=")
            token = name.replace("_", "-") + eq + value
        out.append(token)
    return out


NEGATIVE_NUMBER = re.compile(r"^-\d+$|^-\d*\.\d+$")


def misspelled_short_flag(parser: argparse.ArgumentParser, argv: list[str]) -> str | None:
    """The first single-dash token that is not one of our spellings (``-mu``, ``-c512``), up to a ``--``.

    argparse would read ``-mu URL`` as ``-m u`` (short-option concatenation) and ``-hf`` as ``-h``;
    llama.cpp matches whole spellings only, and so does this check. Negative numbers are values."""
    known = parser._option_string_actions
    for token in argv:
        if token == "--":
            break
        if not token.startswith("-") or token.startswith("--") or token == "-" or NEGATIVE_NUMBER.match(token):
            continue
        if token in known or token.split("=", 1)[0] in known or " " in token:
            continue
        return token
    return None


def env_actions(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [a for a in parser._actions if getattr(a, "env", ())]


def given(parser: argparse.ArgumentParser, argv: list[str]) -> set[str]:
    """The dests of flags present in ``argv`` (``--port 1``, ``--port=1``), up to a ``--``."""
    by_name = {name: a.dest for a in parser._actions for name in a.option_strings}
    dests = set()
    for token in argv:
        if token == "--":
            break
        name = token.split("=", 1)[0] if token.startswith("--") else token
        if name in by_name:
            dests.add(by_name[name])
    return dests


def env_value(action: argparse.Action, environ: Mapping[str, str]) -> tuple[bool, object]:
    """(found, value) for the first of the action's variables that is set."""
    for name in action.env:
        if action.env_kind == PAIR and negative_env(name) in environ:
            return True, False
        if name not in environ:
            continue
        text = environ[name]
        if action.env_kind == SWITCH:
            return (True, True) if text in TRUTHY else (False, None)
        if action.env_kind == PAIR:
            return True, parse_bool(text, name)
        return True, [text] if isinstance(action, argparse._AppendAction) else text
    return False, None


def env_defaults(parser: argparse.ArgumentParser, argv: list[str],
                 environ: Mapping[str, str]) -> tuple[dict[str, object], list[str]]:
    """Defaults taken from the environment for flags absent from ``argv``, and a note per
    variable the command line overrides (llama.cpp warns about those too)."""
    present = given(parser, argv)
    defaults: dict[str, object] = {}
    notes: list[str] = []
    for action in env_actions(parser):
        found, value = env_value(action, environ)
        if not found:
            continue
        if action.dest in present:
            notes.append(f"{'/'.join(action.env)} is set, but the command line's {action.option_strings[-1]} wins")
        else:
            defaults[action.dest] = value
    return defaults, notes
