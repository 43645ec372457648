"""llama-server flags slotserver cannot honour: each is declared under its own spellings, so it is
refused with a message that names it and says why (and so argparse never misreads it: undeclared,
``-mu URL`` would be ``-m u`` and ``-hf REPO`` a complaint about ``-h``).

A flag is refused, not ignored, where ignoring it would change what the server is (another model, a
download, a projector, a web root...). Their ``LLAMA_ARG_*`` variables are refused the same way: a
service environment naming a model repository must not start the embedded model instead.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Mapping

DOWNLOADS = "slotserver downloads nothing: pass -m FILE (a local GGUF file)"
DOWNLOADS_DRAFT = "slotserver downloads nothing: pass -md FILE (a local GGUF file)"
MULTIMODAL = "multimodal projectors are not supported: slotserver serves text only"
PRESET = "this preset downloads a model in llama-server; slotserver downloads nothing: pass -m FILE and the flags you need"


@dataclass(frozen=True, slots=True)
class Refused:
    names: tuple[str, ...]  # llama-server's spellings (common/arg.cpp)
    reason: str
    metavar: str | None = "VALUE"  # None: a switch
    env: tuple[str, ...] = ()


REFUSED = (
    Refused(("-hf", "-hfr", "--hf-repo"), DOWNLOADS, "REPO", env=("LLAMA_ARG_HF_REPO",)),
    Refused(("-hff", "--hf-file"), DOWNLOADS, "FILE", env=("LLAMA_ARG_HF_FILE",)),
    Refused(("-hfd", "-hfrd", "--hf-repo-draft"), DOWNLOADS_DRAFT, "REPO", env=("LLAMA_ARG_HFD_REPO",)),
    Refused(("-hfv", "-hfrv", "--hf-repo-v"), "there is no vocoder (text to speech) here", "REPO",
            env=("LLAMA_ARG_HF_REPO_V",)),
    Refused(("-hffv", "--hf-file-v"), "there is no vocoder (text to speech) here", "FILE", env=("LLAMA_ARG_HF_FILE_V",)),
    Refused(("-mu", "--model-url"), DOWNLOADS, "URL", env=("LLAMA_ARG_MODEL_URL",)),
    Refused(("-dr", "--docker-repo"), DOWNLOADS, "REPO", env=("LLAMA_ARG_DOCKER_REPO",)),
    Refused(("-mm", "--mmproj"), MULTIMODAL, "FILE", env=("LLAMA_ARG_MMPROJ",)),
    Refused(("-mmu", "--mmproj-url"), MULTIMODAL, "URL", env=("LLAMA_ARG_MMPROJ_URL",)),
    Refused(("-mv", "--model-vocoder"), "there is no vocoder (text to speech) here", "FILE"),
    Refused(("--path",), "slotserver serves no static files (there is no web UI)", "PATH", env=("LLAMA_ARG_STATIC_PATH",)),
    Refused(("--api-prefix",), "the API is served at / only (put a reverse proxy in front to add a prefix)", "PREFIX",
            env=("LLAMA_ARG_API_PREFIX",)),
    Refused(("--ssl-key-file",), "TLS is not served here: put a TLS-terminating reverse proxy in front", "FNAME",
            env=("LLAMA_ARG_SSL_KEY_FILE",)),
    Refused(("--ssl-cert-file",), "TLS is not served here: put a TLS-terminating reverse proxy in front", "FNAME",
            env=("LLAMA_ARG_SSL_CERT_FILE",)),
    Refused(("--embedding", "--embeddings"), "embedding models are not served here (no /embeddings)", None,
            env=("LLAMA_ARG_EMBEDDINGS",)),
    Refused(("--reranking", "--rerank"), "reranking is not served here (no /rerank)", None, env=("LLAMA_ARG_RERANKING",)),
    Refused(("--lora",), "LoRA adapters are not supported", "FNAME"),
    Refused(("--lora-scaled",), "LoRA adapters are not supported", "FNAME SCALE"),
    Refused(("--control-vector",), "control vectors are not supported", "FNAME"),
    *(Refused((f"--{name}",), PRESET, None) for name in (
        "embd-gemma-default", "gpt-oss-20b-default", "gpt-oss-120b-default", "vision-gemma-4b-default",
        "vision-gemma-12b-default")),
)


class RefuseAction(argparse.Action):
    """Stops the parse with ``error: <flag as given>: <reason>``."""

    def __init__(self, option_strings, dest, reason: str = "", **kwargs) -> None:
        self.reason = reason
        super().__init__(option_strings, dest, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        parser.error(f"{option_string}: {self.reason}")


def add_refused(group, specs: tuple[Refused, ...] = REFUSED) -> None:
    for spec in specs:
        nargs = 0 if spec.metavar is None else (2 if " " in spec.metavar else None)
        metavar = tuple(spec.metavar.split()) if nargs == 2 else spec.metavar
        env = f" (env: {', '.join(spec.env)})" if spec.env else ""
        group.add_argument(*spec.names, action=RefuseAction, reason=spec.reason, nargs=nargs, metavar=metavar,
                           dest="refused_" + max(spec.names, key=len).lstrip("-").replace("-", "_"),
                           default=argparse.SUPPRESS, help=f"refused: {spec.reason}{env}")


def refused_env(environ: Mapping[str, str], specs: tuple[Refused, ...] = REFUSED) -> str | None:
    """The message for the first refused flag's variable that is set (None: none is)."""
    for spec in specs:
        for name in spec.env:
            if environ.get(name, "") != "":
                return f"{name} ({spec.names[-1]}): {spec.reason}"
    return None
