"""The engine layer: llama.cpp calls, batch types, vocabulary, model files, verify costs and KV layout.

Imports only ``sampling`` and the leaves (``errors``, ``stats``, ``limits``)."""
