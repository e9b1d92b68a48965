"""Tensor-product workloads the user defines by irreps, without writing code.

A definition is ``[NAME=]IN1 x IN2 -> OUT [uvu|uvw]`` (``equibench run --tp``) or an entry
``{name: NAME, tp: "IN1 x IN2 -> OUT uvu"}`` of the configuration's ``workloads:``. The irreps
are written as e3nn writes them (``32x0e+32x1o``; ``0e+1o`` means one of each). The mode
picks the builder of the built-in problems (:mod:`equibench.workloads`), so a definition
equal to a built-in one is the same product:

- ``uvu`` (the default): channel-wise, as MACE and OpenEquivariance's ``ChannelwiseTPP``
  build it (:func:`~equibench.workloads.channelwise`): one output segment ``mul1 x ir`` per
  allowed path, sorted by irrep; OUT only says which irreps the output keeps (its
  multiplicities are not read);
- ``uvw``: fully connected (:func:`~equibench.workloads.fully_connected`): every allowed
  ``(in1, in2, out)`` triple, OUT as given.

A defined workload is added to :data:`equibench.workloads.TP_WORKLOADS` (:func:`register`),
so the name check, every implementation, the ``conv`` level (``NAME@qm9``) and the reports
take it like a built-in one. Case processes fork from a server that may have started before
the definitions were read, so the run settings carry them and each case process registers
them again (``runner.RunSettings.workloads``). Rows of a defined workload carry the
definition in ``extra.tp_spec``, so a result table says what it measured.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from e3nn import o3

from equibench.workloads import TP_WORKLOADS, TPProblem, channelwise, fully_connected

MODES = {
    "uvu": "channel-wise: one output segment per allowed path, OUT filters its irreps",
    "uvw": "fully connected: every allowed (in1, in2, out) triple, OUT as given",
}
DEFAULT_MODE = "uvu"
EXAMPLE = "32x0e+32x1o x 0e+1o+2e -> 32x0e+32x1o uvu"
# A name travels in case keys ("/"), conv workload names ("@"), comma-separated command-line
# lists (",") and definitions ("="): none of those may occur in it.
NAME_PATTERN = re.compile(r"^[A-Za-z][A-Za-z0-9_.+-]*$")
_INPUT_SEPARATOR = re.compile(r"\s+x\s+")


class SpecError(ValueError):
    """A definition that cannot be a tensor product; the message says why and how to fix it."""


@dataclass(frozen=True)
class TPSpec:
    """``in1 x in2 -> out mode``, each irreps in e3nn's own spelling (``1x0e+1x1o``)."""

    in1: str
    in2: str
    out: str
    mode: str

    @classmethod
    def parse(cls, text: str) -> TPSpec:
        """The spec of ``text``; :class:`SpecError` naming what is wrong and how to write it."""
        left, arrow, right = text.partition("->")
        if not arrow:
            raise _error(text, "it has no '->' between the inputs and the output")
        inputs = _INPUT_SEPARATOR.split(left.strip())
        if len(inputs) != 2:
            raise _error(text, "the inputs must be two irreps separated by ' x ' (with spaces), "
                               "e.g. '32x0e+32x1o x 0e+1o'")
        words = right.split()
        # Irreps always hold a digit; a last word of letters only is the mode.
        mode = words.pop() if words and words[-1].isalpha() else DEFAULT_MODE
        if mode not in MODES:
            raise _error(text, f"unknown mode {mode!r}; use "
                               + " or ".join(f"{m} ({about})" for m, about in MODES.items()))
        if not words:
            raise _error(text, "it has no output irreps after '->'")
        in1, in2, out = (_irreps(text, what, part) for what, part in
                         (("first input", inputs[0]), ("second input", inputs[1]),
                          ("output", "".join(words))))
        # In either mode a path is an output irrep that some in1 x in2 pair makes.
        made = sorted({ir for _, ir1 in in1 for _, ir2 in in2 for ir in ir1 * ir2})
        if not set(made) & {ir for _, ir in out}:
            raise _error(text, f"no path: in1 x in2 makes only {', '.join(map(str, made))} "
                               "(parity and angular momentum allow no other), and the output "
                               "has none of them; put at least one in the output")
        return cls(str(in1), str(in2), str(out), mode)

    def __str__(self) -> str:
        return f"{self.in1} x {self.in2} -> {self.out} {self.mode}"

    @property
    def default_name(self) -> str:
        """``tp-<hash>``: the same for every spelling of the same spec."""
        return "tp-" + hashlib.sha256(str(self).encode()).hexdigest()[:8]

    def problem(self, name: str) -> TPProblem:
        """The product, built as the built-in products of its mode are."""
        build = channelwise if self.mode == "uvu" else fully_connected
        problem = build(name, self.in1, self.in2, self.out, source=f"user-defined: {self}")
        return replace(problem, spec=str(self))


def _error(text: str, why: str) -> SpecError:
    return SpecError(f"tensor-product spec {text!r}: {why} (write 'IN1 x IN2 -> OUT uvu|uvw', "
                     f"e.g. '{EXAMPLE}')")


def _irreps(text: str, what: str, part: str) -> o3.Irreps:
    try:
        irreps = o3.Irreps(part)
    except ValueError as err:
        raise _error(text, f"the {what} {part!r} is not irreps ({err}); write irreps as e3nn "
                           "does, e.g. '32x0e+16x1o' or '0e+1o+2e'") from None
    if irreps.dim == 0:
        raise _error(text, f"the {what} {part!r} is empty")
    return irreps


@dataclass(frozen=True)
class CustomWorkload:
    """A user's tensor-product workload: its name and its spec."""

    name: str
    spec: TPSpec

    @classmethod
    def parse(cls, text: str) -> CustomWorkload:
        """``[NAME=]SPEC`` (irreps never hold '='); without a name, ``tp-<hash>``."""
        name, equals, spec_text = text.rpartition("=")
        spec = TPSpec.parse(spec_text)
        return cls.named(name.strip(), spec) if equals else cls(spec.default_name, spec)

    @classmethod
    def named(cls, name: str, spec: TPSpec) -> CustomWorkload:
        """``spec`` under a name of the user's, which must not be a built-in one."""
        if not NAME_PATTERN.match(name):
            raise SpecError(f"workload name {name!r}: use letters, digits and _ . + - only, "
                            "starting with a letter (it appears in conv names NAME@GRAPH and "
                            "in comma-separated lists)")
        held = TP_WORKLOADS.get(name)
        if held is not None and not held.spec:
            raise SpecError(f"workload name {name!r} is a built-in workload ({held.mode} "
                            f"{held.irreps_in1} x {held.irreps_in2}); give yours another name")
        return cls(name, spec)

    @property
    def definition(self) -> str:
        """``NAME=SPEC``, which :meth:`parse` reads back."""
        return f"{self.name}={self.spec}"

    def problem(self) -> TPProblem:
        return self.spec.problem(self.name)


def from_config(entries: Iterable[Mapping[str, str]]) -> list[CustomWorkload]:
    """The configuration's ``workloads:`` entries (``{name, tp}``), each name once."""
    workloads = []
    for index, entry in enumerate(entries):
        try:
            workloads.append(CustomWorkload.named(entry["name"], TPSpec.parse(entry["tp"])))
        except SpecError as err:
            raise SpecError(f"workloads/{index} ({entry['name']}): {err}") from None
    _check_unique(workloads)
    return workloads


def parse_all(texts: Iterable[str]) -> list[CustomWorkload]:
    """``equibench run --tp`` values; the same definition given twice counts once."""
    workloads = list(dict.fromkeys(CustomWorkload.parse(text) for text in texts))
    _check_unique(workloads)
    return workloads


def _check_unique(workloads: list[CustomWorkload]) -> None:
    seen: dict[str, TPSpec] = {}
    for workload in workloads:
        if seen.setdefault(workload.name, workload.spec) != workload.spec:
            raise _defined_twice(workload.name, str(seen[workload.name]), str(workload.spec))


def _defined_twice(name: str, first: str, second: str) -> SpecError:
    return SpecError(f"workload {name!r} is defined twice, as '{first}' and as '{second}'; "
                     "give one another name")


def register(workloads: Iterable[CustomWorkload]) -> None:
    """Add ``workloads`` to :data:`~equibench.workloads.TP_WORKLOADS`. Registering the same
    definition again does nothing (each case process registers what its parent did); another
    definition under a name already held is a :class:`SpecError`."""
    for workload in workloads:
        held = TP_WORKLOADS.get(workload.name)
        if held is None:
            TP_WORKLOADS[workload.name] = workload.problem()
        elif held.spec != str(workload.spec):
            raise _defined_twice(workload.name, held.spec or "a built-in workload",
                                 str(workload.spec))
