"""Draftless drafters: n-gram based draft proposers with no model and no llama.cpp dependency.

Note: this import package is named ``ngram``; it shadows the unrelated PyPI project ``ngram``
if both are installed in the same environment.
"""

from ngram.protocol import Drafter

__all__ = ["Drafter"]
