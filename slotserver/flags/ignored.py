"""Flags llama-server has that cannot matter here: accepted (so service files keep working), each
with one warning line at start-up saying why it changes nothing.

A flag is kept only where ignoring it leaves the server's answers as llama-server's (GPU offload on
a CPU build, memory locking, the web UI...). Flags that would change what a request gets (grammars,
DRY, mirostat, LoRA) are not accepted: argparse rejects them, and docs/api.md says why.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from slotserver.flags.env import SWITCH, VALUE, add_pair, with_env

PREFIX = "ignored_"


@dataclass(frozen=True, slots=True)
class Ignored:
    names: tuple[str, ...]  # llama-server's spellings, as common/arg.cpp lists them
    reason: str  # why it cannot matter here (help text and warning)
    metavar: str | None = "N"  # None: a switch without a value
    env: tuple[str, ...] = ()
    optional: bool = False  # the value may be left out (-fa alone is -fa on, as older llama-servers took it)
    negative: tuple[str, ...] = ()  # the pair's other half (--no-jinja): then no value

    @property
    def dest(self) -> str:
        return PREFIX + max(self.names, key=len).lstrip("-").replace("-", "_")

    def shown(self, value) -> str:
        """The flag as the user gave it, for the warning."""
        if value is True:
            return self.names[0]
        if value is False:
            return self.negative[0]
        return f"{self.names[0]} {value}"


def add_ignored(group, specs: tuple[Ignored, ...]) -> None:
    for spec in specs:
        help_text = f"accepted and ignored: {spec.reason}"
        if spec.negative:
            add_pair(group, spec.names, spec.negative, dest=spec.dest, default=None, help=help_text, env=spec.env)
            continue
        if spec.metavar is None:
            action = group.add_argument(*spec.names, dest=spec.dest, action="store_const", const=True,
                                        default=None, help=with_env(help_text, spec.env))
        else:
            action = group.add_argument(*spec.names, dest=spec.dest, metavar=spec.metavar, default=None,
                                        nargs="?" if spec.optional else None, const="on" if spec.optional else None,
                                        help=with_env(help_text, spec.env))
        action.env, action.env_kind = spec.env, SWITCH if spec.metavar is None else VALUE


def ignored_warnings(args: argparse.Namespace, specs: tuple[Ignored, ...]) -> list[str]:
    """One line per ignored flag that was given."""
    lines = []
    for spec in specs:
        value = getattr(args, spec.dest, None)
        if value is not None:
            lines.append(f"ignoring {spec.shown(value)}: {spec.reason}")
    return lines
