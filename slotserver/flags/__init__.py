"""slotserver's command line: llama-server's flags, short forms and LLAMA_ARG_* variables.

One module per help section, as llama-server prints them (common, sampling, speculative, server),
plus the machinery they share: ``env`` (environment variables), ``ignored`` (flags accepted for
compatibility that cannot matter here) and ``help`` (the formatter).
"""
