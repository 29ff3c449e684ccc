"""Megatron-LM's pipeline layout strings: which layers each pipeline stage holds.

Megatron-LM (``--pipeline-model-parallel-layout``, parsed by
``megatron/core/transformer/pipeline_parallel_layer_layout.py``) writes a model's split as
one letter per layer and ``|`` between stages::

    "Et*3|(tt|)*29,m|L"     embedding and 3 layers | 29 stages of 2 layers | MTP | loss

``E`` is the embedding, ``t`` a transformer layer, ``L`` the final norm, LM head and loss,
``m`` a multi-token-prediction layer; ``x*n`` repeats a letter, ``(...)*n`` a group, and
commas are only for the eye. The stages are listed in layer order, the virtual stages of
an interleaved schedule included (``pipeline.devices x pipeline.virtual_stages`` in all),
so a stage may hold the embedding or the head and no transformer layer at all: the
balanced split of a model whose first and last stages carry extra work.

pipesim keeps the embedding on the first stage and the head on the last (Megatron-LM
requires the same), puts the MTP modules (``model.mtp_layers``) on the last stage rather
than where a layout's ``m`` says (a layout with ``m`` is refused), and refuses a stage
between them that holds nothing. ``layout_partition`` turns a string into the
number of transformer layers per stage.
"""

from __future__ import annotations

LETTERS = {"E": "embedding", "t": "transformer layer", "L": "loss and LM head"}
_ALLOWED = (
    "E (embedding), t (transformer layer), L (loss and LM head), | between stages, x*n, (...)*n"
)


class _Parser:
    """Expands repetitions: ``item := letter | '|' | '(' items ')'``, each optionally
    followed by ``*n``."""

    def __init__(self, text: str) -> None:
        self.text, self.at = text, 0

    def items(self, closing: bool) -> str:
        out = []
        while self.at < len(self.text):
            char = self.text[self.at]
            if char == ",":  # only for the eye
                self.at += 1
                continue
            if char == ")":
                if not closing:
                    raise ValueError(f"')' at position {self.at} closes no '('")
                return "".join(out)
            self.at += 1
            if char == "(":
                unit = self.items(closing=True)
                self.at += 1  # the ')'
            elif char in LETTERS or char in "|m":
                unit = char
            else:
                raise ValueError(
                    f"unknown letter {char!r} at position {self.at - 1}; allowed: {_ALLOWED}"
                )
            out.append(unit * self.count())
        if closing:
            raise ValueError("a '(' is never closed")
        return "".join(out)

    def count(self) -> int:
        if self.at >= len(self.text) or self.text[self.at] != "*":
            return 1
        start = self.at = self.at + 1
        while self.at < len(self.text) and self.text[self.at].isdigit():
            self.at += 1
        if start == self.at:
            raise ValueError(f"'*' at position {start - 1} needs a count")
        return int(self.text[start : self.at])


def parse_layout(text: str) -> tuple[str, ...]:
    """The letters of each stage, repetitions expanded: ``"Et*2|tL"`` gives
    ``("Ett", "tL")``. A layout with an MTP layer, or with the embedding or the head
    anywhere but the start of the first stage and the end of the last, is refused."""
    if not text:
        raise ValueError("an empty layout; write one letter per layer and '|' between stages")
    stages = tuple(_Parser(text).items(closing=False).split("|"))
    if any("m" in stage for stage in stages):
        raise ValueError(
            "multi-token prediction layers (m) are not placed by a layout: model.mtp_layers "
            "puts them on the last stage; leave m out"
        )
    flat = "".join(stages)
    if flat.count("E") != 1 or not stages[0].startswith("E"):
        raise ValueError("the embedding (E) must appear once, first in the first stage")
    if flat.count("L") != 1 or not stages[-1].endswith("L"):
        raise ValueError("the loss and LM head (L) must appear once, last in the last stage")
    for k, stage in enumerate(stages[1:-1], start=1):
        if not stage:
            raise ValueError(
                f"stage {k} holds no layer; only the first (embedding) and the last stage "
                "(LM head) may hold no transformer layer"
            )
    return stages


def check_layout(text: str) -> str:
    """``text`` once it parses (``parse_layout``)."""
    parse_layout(text)
    return text


def layout_partition(text: str, layers: int, stages: int | None = None) -> tuple[int, ...]:
    """Transformer layers per stage of a layout that holds exactly ``layers`` of them (and,
    where given, exactly ``stages`` stages)."""
    counts = tuple(stage.count("t") for stage in parse_layout(text))
    if sum(counts) != layers:
        raise ValueError(
            f"{text!r} holds {sum(counts)} transformer layers (t); model.layers is {layers}"
        )
    if stages is not None and len(counts) != stages:
        raise ValueError(f"{text!r} has {len(counts)} stages; the schedule runs {stages}")
    return counts
