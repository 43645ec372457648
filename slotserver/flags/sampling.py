"""llama-server's "sampling params": the defaults of requests that leave a sampling field out.

Not accepted (they would change answers, and these samplers are not implemented): --dry-*,
--mirostat*, --dynatemp-*, --adaptive-*, -l/--logit-bias, --grammar*, -j/--json-schema*.
"""

from __future__ import annotations

import argparse

from slotserver.errors import BadRequest
from slotserver.flags.env import add_flag
from slotserver.sampling.params import SamplingParams, parse_samplers
from slotserver.serving.request import RequestBounds, parse_sampling

LLAMA = SamplingParams()  # llama.cpp's defaults, shown in --help
# flag dest -> request field; each given flag is checked as that field of a request would be
FIELDS = {
    "temp": "temperature", "top_k": "top_k", "top_p": "top_p", "min_p": "min_p", "top_nsigma": "top_n_sigma",
    "xtc_probability": "xtc_probability", "xtc_threshold": "xtc_threshold", "typical": "typical_p",
    "repeat_last_n": "repeat_last_n", "repeat_penalty": "repeat_penalty",
    "presence_penalty": "presence_penalty", "frequency_penalty": "frequency_penalty",
}


def add_sampling_args(parser) -> None:
    g = parser.add_argument_group("sampling params", "defaults of requests that do not send the field")
    add_flag(g, "-s", "--seed", type=int, default=-1, metavar="SEED", help="default seed (-1 = random)")
    add_flag(g, "--temp", "--temperature", dest="temp", type=float, metavar="N",
             help=f"temperature (default: {LLAMA.temperature:g}; below 0 counts as 0)")
    add_flag(g, "--top-k", type=int, metavar="N", env="LLAMA_ARG_TOP_K",
             help=f"top-k sampling (default: {LLAMA.top_k}, 0 = off)")
    add_flag(g, "--top-p", type=float, metavar="N", help=f"top-p sampling (default: {LLAMA.top_p:g}, 1 = off)")
    add_flag(g, "--min-p", type=float, metavar="N", help=f"min-p sampling (default: {LLAMA.min_p:g}, 0 = off)")
    add_flag(g, "--top-nsigma", "--top-n-sigma", dest="top_nsigma", type=float, metavar="N",
             help=f"top-n-sigma sampling (default: {LLAMA.top_n_sigma:g} = off)")
    add_flag(g, "--xtc-probability", type=float, metavar="N",
             help=f"xtc probability (default: {LLAMA.xtc_probability:g} = off)")
    add_flag(g, "--xtc-threshold", type=float, metavar="N", help=f"xtc threshold (default: {LLAMA.xtc_threshold:g})")
    add_flag(g, "--typical", "--typical-p", dest="typical", type=float, metavar="N",
             help=f"locally typical sampling, p (default: {LLAMA.typical_p:g} = off)")
    add_flag(g, "--repeat-last-n", type=int, metavar="N",
             help=f"tokens the penalties look back on (default: {LLAMA.repeat_last_n}, 0 = off, -1 = context size)")
    add_flag(g, "--repeat-penalty", type=float, metavar="N",
             help=f"repetition penalty (default: {LLAMA.repeat_penalty:g} = off)")
    add_flag(g, "--presence-penalty", type=float, metavar="N",
             help=f"presence penalty (default: {LLAMA.presence_penalty:g} = off)")
    add_flag(g, "--frequency-penalty", type=float, metavar="N",
             help=f"frequency penalty (default: {LLAMA.frequency_penalty:g} = off)")
    add_flag(g, "--samplers", metavar="SAMPLERS",
             help=f"sampler order, ';'-separated names (default: {';'.join(LLAMA.order)})")
    add_flag(g, "--sampler-seq", "--sampling-seq", dest="sampling_seq", metavar="SEQUENCE",
             help="sampler order as letters (e.g. edskypmxt; --samplers wins when both are given)")
    add_flag(g, "--ignore-eos", action="store_true", help="ignore end-of-generation tokens (requests may send "
                                                          "ignore_eos: false)")


def sampler_order(args: argparse.Namespace) -> tuple[str, ...] | None:
    if args.samplers is not None:
        return parse_samplers([name for name in args.samplers.split(";") if name])
    if args.sampling_seq is not None:
        return parse_samplers(args.sampling_seq)
    return None


def sampling_defaults(args: argparse.Namespace) -> SamplingParams:
    """The requests' sampling defaults; ValueError names the flag that is out of range."""
    body = {field: getattr(args, dest) for dest, field in FIELDS.items() if getattr(args, dest) is not None}
    if "temperature" in body:
        body["temperature"] = max(body["temperature"], 0.0)  # as llama.cpp's --temp
    try:
        checked = parse_sampling(body, bounds=RequestBounds(n_ctx=2**31 - 1))
        samplers = sampler_order(args)
    except (BadRequest, ValueError) as exc:
        raise ValueError(f"sampling flags: {exc}") from None
    # -1 (the whole context) stays -1 here: each request resolves it against its slot's context.
    repeat_last_n = body.get("repeat_last_n", LLAMA.repeat_last_n)
    values = {field: getattr(checked, field) for field in body if field != "repeat_last_n"}
    return SamplingParams(**values, repeat_last_n=repeat_last_n, ignore_eos=args.ignore_eos, samplers=samplers)
