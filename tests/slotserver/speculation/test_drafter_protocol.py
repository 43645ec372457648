"""The drafter protocol (``ngram/protocol.py``) says what the chain may call: every optional method the
chain looks up is declared in ``OptionalDrafterHooks``, and every registered drafter's methods match it."""

from __future__ import annotations

import inspect
import re

from ngram.protocol import Drafter, OptionalDrafterHooks
from slotserver.speculation import chain
from slotserver.speculation.registry import DRAFTER_TYPES


def declared(protocol: type) -> dict[str, inspect.Signature]:
    return {name: inspect.signature(f) for name, f in vars(protocol).items()
            if callable(f) and not name.startswith("_")}


def test_the_chain_looks_up_exactly_the_optional_hooks_the_protocol_declares():
    probed = set(re.findall(r'hasattr\(\w+, "(\w+)"\)', inspect.getsource(chain)))
    assert probed == set(declared(OptionalDrafterHooks)) == {"draft_tag", "draft_probs", "cut", "finish"}
    assert not set(declared(OptionalDrafterHooks)) & set(declared(Drafter))


def test_every_drafter_has_the_required_methods_and_its_optional_ones_take_the_declared_arguments():
    for protocol, required in ((Drafter, True), (OptionalDrafterHooks, False)):
        for name, sig in declared(protocol).items():
            want = list(sig.parameters)
            for t in DRAFTER_TYPES:
                method = getattr(t.cls, name, None)
                if method is None:
                    assert not required, f"{t.name} lacks {name}"
                    continue
                assert list(inspect.signature(method).parameters) == want, f"{t.name}.{name}"
