"""Command-line tools beside the server (``python -m slotserver.tools.ngram_tool``): they use the
speculation and engine layers, and nothing imports them."""
