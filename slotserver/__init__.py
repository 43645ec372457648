"""slotserver: a multi-slot asyncio LLM server over llama.cpp with draftless speculative decoding."""

__version__ = "0.1.0"
