"""The speculation layer: speculation config, the drafter registry, the draft chain, learning scopes,
selection by expected value, the draft model and persistence of what drafters learn.

Imports ``engine``, ``sampling``, ``ngram`` and the leaves."""
