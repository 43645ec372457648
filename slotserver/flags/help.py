"""--help in llama-server's layout: sections, each flag's spellings, what it does here, its default."""

from __future__ import annotations

import argparse


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows a default only where there is one to show (not for unset or accepted-and-ignored flags)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        if action.default is None or action.default is False or action.dest.startswith("ignored_") or action.nargs == 0:
            return action.help or ""
        return super()._get_help_string(action)
