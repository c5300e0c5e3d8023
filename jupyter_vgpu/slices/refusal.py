"""Why a request gets no slice now, said so a person can act on it.

A refusal reads, in every front end (the kernel-start dialog, ``jupyter vgpu run``, the REST
API's ``detail``): one short sentence (what was asked, the most that fits now and where), the
holders of each GPU by notebook or command, then what to do: a smaller share that fits now,
waiting in line, or asking the holders.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from ..units import describe_fraction, format_bytes
from .occupancy import GPUOccupancy, within_requests
from .placement import needs, place
from .request import SliceRequest

#: At most this many GPUs are described; the rest are counted.
SHOWN_GPUS = 4

#: The advice to wait in line, which a request that has just waited gets as "wait longer" instead
#: (:func:`after_waiting`).
WAIT_TIP = (
    "Wait in line: a kernel with wait_timeout, or `jupyter vgpu run --wait SECONDS`; "
    "requests are served first come, first served."
)


@dataclass(frozen=True)
class Refusal:
    """A request that fits nowhere now (or waits behind earlier ones)."""

    request: SliceRequest
    gpus: tuple[GPUOccupancy, ...]  # the GPUs it could have had
    ahead: int = 0  # earlier requests waiting in line before it
    fits: bool = False  # it would fit, were nobody waiting before it
    #: Each GPU's CUDA-context allowance (by UUID): a slice must hold more, so less is not free.
    allowance: Mapping[str, int] = field(default_factory=dict)

    @classmethod
    def of(
        cls,
        request: SliceRequest,
        gpus: tuple[GPUOccupancy, ...],
        allowance: Callable[[GPUOccupancy], int],
        *,
        ahead: int = 0,
        fits: bool = False,
    ) -> Refusal:
        return cls(request, gpus, ahead, fits, {g.uuid: allowance(g) for g in gpus})

    def room(self, gpu: GPUOccupancy) -> int:
        """What a new slice could get on ``gpu`` now: its free memory, if more than the allowance."""
        return gpu.free if gpu.free > self.allowance.get(gpu.uuid, 0) else 0

    @property
    def need(self) -> int:
        """Bytes per GPU asked for (on the largest candidate GPU, for a fraction)."""
        return max(needs(self.request, self.gpus).values(), default=0)

    @property
    def in_mig_mode(self) -> bool:
        return bool(self.gpus) and all(g.in_mig_mode for g in self.gpus)

    def best(self) -> list[GPUOccupancy]:
        """The GPUs with the most room, as many as the request needs."""
        return sorted(self.gpus, key=lambda g: (-self.room(g), g.index))[: self.request.gpus]

    def with_room(self) -> list[GPUOccupancy]:
        """The GPUs that could hold the asked share of one GPU now, by index."""
        wanted = needs(self.request, self.gpus)
        return [g for g in sorted(self.gpus, key=lambda g: g.index) if 0 < wanted[g.uuid] <= self.room(g)]

    @property
    def fewer_gpus_fit(self) -> int:
        """How many GPUs could hold the asked share now when that is some, but fewer than the
        request's GPUs (0 otherwise): then the count is what is short, not the memory."""
        if self.request.gpus < 2 or self.in_mig_mode or self.ahead:
            return 0
        count = len(self.with_room())
        return count if 0 < count < self.request.gpus else 0

    @property
    def fits_now(self) -> int:
        """The most each of the request's GPUs could get now (0: no slice fits anywhere)."""
        best = self.best()
        return min((self.room(g) for g in best), default=0) if len(best) == self.request.gpus else 0

    def fits_now_text(self, *, where: bool = True) -> str:
        """What fits now, and where (left out when not ``where``): ``1.0 GiB (about 1/16 GPU) on GPU 0``."""
        if self.fits_now <= 0:
            return "nothing"
        best = self.best()
        on = f" on GPU {', '.join(str(g.index) for g in best)}" if where else ""
        amount = f"{format_bytes(self.fits_now)}" + (" each" if self.request.gpus > 1 else "")
        if self.in_mig_mode:
            return f"a MIG device of {amount}{on}"
        share = self.fits_now / max(g.total for g in best)
        return f"{amount} (about {describe_fraction(_round_down(share))} GPU){on}"

    def summary(self) -> str:
        asked = self.request.describe()
        if self.request.memory is None:  # a fraction: say what it is in bytes
            asked += f" ({format_bytes(self.need)}{' per GPU' if self.request.gpus > 1 else ''})"
        if self.fits and self.ahead:
            waiting = f"{self.ahead} earlier request{'s wait' if self.ahead > 1 else ' waits'}"
            return f"{asked} would fit now, but {waiting} in line for a slice (first come, first served)."
        what = "No free MIG device" if self.in_mig_mode else "No room"
        pinned = self.request.gpu is not None
        if count := self.fewer_gpus_fit:
            one = replace(self.request, gpus=1).describe()
            where = ", ".join(str(g.index) for g in self.with_room())
            has = "1 GPU has" if count == 1 else f"{count} GPUs have"
            text = f"{what} for {asked} now: only {has} room for {one} (GPU {where}), where {self.request.gpus} are needed."
        elif self.fits_now > 0 and pinned:  # the request names its GPU: "there", not the GPU again
            text = f"{what} for {asked} now: at most {self.fits_now_text(where=False)} is free there."
        elif self.fits_now > 0:
            text = f"{what} for {asked} now: at most {self.fits_now_text()} is free."
        elif self.in_mig_mode:
            text = f"{what} for {asked} now: every MIG device is taken."
        elif (crumbs := max(self.gpus, key=lambda g: (g.free, -g.index), default=None)) and crumbs.free > 0:
            allowance = format_bytes(self.allowance.get(crumbs.uuid, 0))
            on = "there" if pinned else f"on GPU {crumbs.index}"
            text = (
                f"{what} for {asked} now: the most free is {format_bytes(crumbs.free)} {on}, too little "
                f"for any slice (each holds a CUDA context of {allowance})."
            )
        else:
            text = f"{what} for {asked} now: every GPU is full."
        if self.ahead:
            text += f" {self.ahead} earlier request{'s wait' if self.ahead > 1 else ' waits'} in line too."
        return text

    @property
    def burst_held(self) -> bool:
        """It would get a slice with the kernels' bursts given back: only bursts keep it out, and a
        request in line gets them back (the kernels' servers give notice, then act)."""
        if self.fits or not any(g.kernel_bursts() for g in self.gpus):
            return False
        return bool(place(self.request, within_requests(self.gpus), allowance=lambda g: self.allowance.get(g.uuid, 0)))

    @property
    def smaller_fits(self) -> bool:
        """A smaller request would get a slice now (nobody waits before it)."""
        return self.fits_now > 0 and not self.ahead

    def advice(self) -> list[str]:
        tips = []
        if self.burst_held:
            tips.append(
                "It fits once bursting kernels give back what they use above their requests: a request that waits in "
                "line gets it (their servers give them notice first)."
            )
        if count := self.fewer_gpus_fit:
            gpus = "1 GPU" if count == 1 else f"{count} GPUs"
            one = replace(self.request, gpus=1).describe()
            tips.append(f"Ask for {gpus} (`-n {count}`, or `gpus: {count}` in a kernelspec): {one} on each fits now.")
        elif self.smaller_fits:
            tips.append(f"Ask for at most {format_bytes(self.fits_now)}: that fits now.")
        tips.append(WAIT_TIP)
        tips.append("Or ask the holders above to shut down the kernels they no longer use.")
        return tips

    def gpu_lines(self) -> list[str]:
        """A line per GPU (the :data:`SHOWN_GPUS` with the most free, by index), indented."""
        shown = sorted(self.gpus, key=lambda g: (-g.free, g.index))[:SHOWN_GPUS]
        result = [f"  {g.explain()}." for g in sorted(shown, key=lambda g: g.index)]
        if len(self.gpus) > len(shown):
            rest = len(self.gpus) - len(shown)
            result.append(f"  ... and {rest} more GPU{'s' if rest > 1 else ''}, none with more free.")
        return result

    def lines(self) -> list[str]:
        """The whole explanation, a line each: summary, GPUs (indented), what to do."""
        return [self.summary(), *self.gpu_lines(), "What you can do: " + " ".join(self.advice())]

    def text(self) -> str:
        return "\n".join(self.lines())

    def to_dict(self) -> dict[str, Any]:
        """The structured refusal (docs/rest.md, "REFUSAL"), for front ends that lay it out."""
        return {
            "asked": self.request.describe(),
            "need": self.need,
            "summary": self.summary(),
            "fits_now": {"memory": self.fits_now or None, "text": self.fits_now_text()},
            "ahead": self.ahead,
            "smaller_fits": self.smaller_fits,
            "burst_held": self.burst_held,
            "fewer_gpus_fit": self.fewer_gpus_fit,
            "gpu_lines": self.gpu_lines(),
            "gpus": [
                {
                    "index": g.index,
                    "uuid": g.uuid,
                    "name": g.gpu.name,
                    "free": g.free,
                    "total": g.gpu.memory_total,
                    "foreign": g.foreign,
                    "text": g.explain(),
                    "holders": [
                        {"label": s.slice.describe_holder(), "owner": s.slice.owner, "uid": s.slice.uid, "reserved": s.reserved}
                        for s in g.shares
                    ],
                }
                for g in self.gpus
            ],
            "advice": self.advice(),
        }


def after_waiting(text: str, advice: list[str], waited: float) -> tuple[str, list[str]]:
    """A refusal's text and advice for a request that has waited ``waited`` seconds in line:
    "wait longer", not "wait in line"."""
    longer = f"Wait longer than {waited:g} s: a larger wait_timeout, or a larger `--wait`."
    return text.replace(WAIT_TIP, longer), [longer if tip == WAIT_TIP else tip for tip in advice]


def _round_down(share: float) -> float:
    """A share a person would ask for: the largest of 1/2, 1/3, ... 1/16 (or k/8) not above ``share``."""
    candidates = [k / 8 for k in range(1, 9)] + [1 / n for n in range(2, 17)]
    fitting = [c for c in candidates if c <= share + 1e-9]
    return max(fitting) if fitting else share
