"""How a kernel that runs elsewhere is seen: one typed row, the same for every launcher.

A launcher whose kernels another engine places (``slurm``: a Slurm job on a node Slurm picks) says
what each of them is as an :class:`Elsewhere` (:meth:`.launchers.Launcher.rows`): where it runs and
what it holds in its own words, its state (running, pending in the engine's line, ending), why it
waits and where it stands, what it reserves and uses as the kernel reports it, and the launcher's
own fields. The server's REST rows (docs/rest.md, "Kernels that run elsewhere"), the sidebar's card
per launcher and ``jupyter vgpu status`` are built from it and name no launcher.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from ..errors import VGPUError
from . import ENV_ELSEWHERE

#: A kernel elsewhere is running, waiting in its engine's line, or ending (its kernel was shut down
#: and the engine has not confirmed the end of what it held).
State = Literal["running", "pending", "ending"]


@dataclass(frozen=True)
class Elsewhere:
    """One kernel of this server (or, for ``status``, of this user) that runs where another engine
    placed it."""

    launcher: str  # the launcher's name
    title: str  # the card its kernels are shown in ("Slurm jobs")
    id: str  # the row's id: a waiting row's ticket, a running row's slice id ("slurm-12")
    kernel_id: str
    state: State
    state_title: str  # what the state means, one sentence
    where: tuple[str, ...]  # where it runs and what it holds: the parts of one line
    note: str  # what holds its memory, or why it is ending or unfenced (REST share_note)
    usage_note: str  # how its use was found, or why it is not known
    summary: str  # one line for `jupyter vgpu status`
    share: str = ""  # what it holds, in words ("8/32 shards (1/4 GPU)")
    tier: str = ""  # what fences it, in words (the slice view's tier)
    fraction: float | None = None
    gpus: tuple[str, ...] = ()  # <launcher>:<node>:<index>: never this server's
    gpu_indices: tuple[int, ...] = ()
    reason: str | None = None  # why it waits, in the engine's word
    reason_text: str | None = None  # and in words
    place: int | None = None  # its place in the engine's line (1: next)
    place_text: str | None = None
    request_text: str | None = None  # what it asked, in words
    memory_reserved: int | None = None  # its budget on each GPU, once the kernel has said it
    memory_used: int | None = None  # what the kernel reports it uses
    frameworks: Mapping[str, Any] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)
    created: float | None = None
    ended: str | None = None  # why the engine ended the kernel this one replaced
    cancel: bool = False  # DELETE /api/vgpu/waiting/<id> takes it out (pending, ending)
    engine: str = ""  # who places it, in a word ("Slurm")
    line: str = ""  # its engine's line, in words ("Slurm's queue")
    ref: str = ""  # the engine's own id of what holds it ("12": a job)
    notice: str | None = None  # the sentence under a row that is ending or runs unfenced
    simulated: bool = False  # its GPUs are simulated (JUPYTER_VGPU_SIMULATE where it runs)
    #: The launcher's own fields, at the top level of the REST rows as they have always been.
    fields: Mapping[str, Any] = field(default_factory=dict)

    @property
    def running(self) -> bool:
        """Whether it holds its GPU now (running or ending), as a slice does; else it waits."""
        return self.state != "pending"

    def to_dict(self) -> dict[str, Any]:
        """The REST rows' ``elsewhere`` (docs/rest.md)."""
        return {
            "launcher": self.launcher,
            "title": self.title,
            "id": self.id,
            "state": self.state,
            "state_title": self.state_title,
            "where": list(self.where),
            "name": self.where[0] if self.where else self.launcher,
            "reason": self.reason,
            "reason_text": self.reason_text,
            "place_text": self.place_text,
            "note": self.note,
            "ended": self.ended,
            "cancel": self.cancel,
            "engine": self.engine,
            "line": self.line,
            "ref": self.ref,
            "notice": self.notice,
            "simulated": self.simulated,
        }


class Unlisted(VGPUError):
    """The engine did not answer (one sentence): ``rows`` are this process's kernels as last seen."""

    def __init__(self, message: str, rows: list[Elsewhere]) -> None:
        super().__init__(message)
        self.rows = rows


#: What a kernel that runs elsewhere learns of where it runs, from the one variable its launcher's
#: start on the node sets (:data:`ENV_ELSEWHERE`, JSON): ``label`` (%vgpu's row: "Slurm"), ``where``
#: ("Slurm job 12 on node1 · asked 1/4 GPU: 8 of 32 shards"), ``ended`` (why the engine ended the
#: kernel it replaces), ``unfenced`` (why it runs with its share but no slice), each a sentence or
#: absent, and ``share`` (what the kernel asked for, which its slice of the whole of what the engine
#: gave does not say: "1/4 GPU: 8 of 32 shards").


@dataclass(frozen=True)
class Whereabouts:
    """Where this kernel runs, as its launcher told it (:data:`ENV_ELSEWHERE`)."""

    label: str
    where: str
    ended: str | None = None
    unfenced: str | None = None
    share: str | None = None

    def to_env(self) -> str:
        import json

        return json.dumps({k: v for k, v in self.__dict__.items() if v})

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Whereabouts | None:
        """None for a kernel of this host (or a value that is not the launcher's)."""
        import json

        try:
            data = json.loads(env.get(ENV_ELSEWHERE) or "null")
        except ValueError:
            return None
        if not isinstance(data, dict):
            return None
        text = {k: v for k, v in data.items() if k in ("label", "where", "ended", "unfenced", "share") and isinstance(v, str) and v}
        if "label" not in text or "where" not in text:
            return None
        return cls(**text)
