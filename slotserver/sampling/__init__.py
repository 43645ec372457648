"""The sampling layer: sampling parameters, llama.cpp sampler chains, grammars and logit biases.

Imports only the leaves (``errors``, ``stats``, ``limits``)."""
