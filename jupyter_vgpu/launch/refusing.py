"""A refused kernel start, recorded and said the way a person can act on: the refusal's record for
``GET /api/vgpu/refusals`` (:mod:`.refusals`, whose it is), its sentence with the advice, and the
installed kernels that fit now. The provisioner keeps jupyter_client's life cycle and hands a
refusal here (issue 40: the refusal record and "kernels that fit" leave the provisioner)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import InvalidRequest, NeverFits, SliceUnavailable
from ..slices.request import SliceRequest
from .errors import ShownToUser, reason
from .launchers import DEFAULT
from .refusals import START_REQUEST, RefusalLog, refusal_gpu, refusal_text, refusal_tips
from .workarounds import names_vgpu_provisioner

#: At most this many installed kernels are suggested.
SUGGESTED = 3


@dataclass
class RefusedStart:
    """A kernel start that was refused: what the provisioner knows of it."""

    kernel_id: str | None
    labels: Mapping[str, str]
    language: str | None  # the kernelspec's (suggestions are of the same language)
    kernel_name: str | None  # the kernelspec asked for (never suggested again)
    specs: Any  # the kernel spec manager, or None
    wait_timeout: float
    request: Callable[[], SliceRequest]  # the slice asked for (raises InvalidRequest for bad input)
    log: Any

    async def record(self, error: BaseException, shown: ShownToUser, log: RefusalLog) -> ShownToUser:
        """Record the refusal in ``log`` (its owner: who asked for the start) and return what the
        user is shown: with the refusal's structure (a full GPU), the installed kernels that fit now
        and the advice."""
        detail = error.detail if isinstance(error, SliceUnavailable) else None
        kernels: list[dict[str, str]] = []
        tips: list[str] = []
        if detail is not None:
            try:
                kernels = await asyncio.to_thread(self.kernels_that_fit, detail)
            except Exception as problem:  # a suggestion is a nicety: never fail over it
                self.log.debug("jupyter-vgpu: could not list kernels that fit: %s", problem)
            # a launcher whose engine places the kernel says what to do there; else this ledger's advice
            # (a ledger's refusal carries advice of its own for the command line: these tips are richer)
            engines = list(detail.get("advice") or ()) if detail.get("elsewhere") else []
            tips = engines or refusal_tips(detail, kernels=kernels, wait_timeout=self.wait_timeout)
            shown = type(shown)(refusal_text(detail, tips))
        request = START_REQUEST.get()  # the REST request of the start: the refusal is its user's
        refusal_id = log.add(
            {
                "t": time.time(),
                "kernel_id": self.kernel_id,
                "kernel_name": self.labels.get("kernel_name"),
                "kernel_display_name": self.labels.get("kernel_display_name"),
                "path": self.labels.get("path"),
                "status": shown.status,
                "reason": reason(error),
                "message": shown.message,
                "summary": shown.message.split("\n", 1)[0],
                "asked": (detail or {}).get("asked"),
                "fits_now": (detail or {}).get("fits_now"),
                "ahead": (detail or {}).get("ahead", 0),
                "waited": (detail or {}).get("waited"),
                # the idle reclaim's question: what would let this start in, and on which GPUs
                "request": self.refused_request(error),
                "allowed_gpus": [g["uuid"] for g in (detail or {}).get("gpus", []) if g.get("uuid")],
                "gpus": [refusal_gpu(g) for g in (detail or {}).get("gpus", [])],
                "advice": tips,
                "suggested_kernels": kernels,
            },
            owner=request.requester if request is not None else None,
        )
        if request is not None:
            request.refused.append(refusal_id)
        shown.refusal_id = refusal_id
        return shown

    def refused_request(self, error: BaseException) -> dict[str, Any] | None:
        """The request refused for room now (not one no wait could place, nor bad input)."""
        if not isinstance(error, SliceUnavailable) or isinstance(error, NeverFits) or error.detail is None:
            return None
        if error.detail.get("elsewhere"):  # another engine's room: nothing idle here makes it
            return None
        try:
            return self.request().to_dict()
        except InvalidRequest:
            return None

    def kernels_that_fit(self, detail: dict[str, Any]) -> list[dict[str, str]]:
        """Installed sliced kernelspecs of this kernel's language whose slice fits now, largest
        first (at most three). Nothing fits while earlier requests wait in line; a kernelspec whose
        slice is booked elsewhere (another launcher's engine) is none this ledger can say fits."""
        if self.specs is None or detail.get("ahead"):
            return []
        free = [(int(g["total"]), int(g["free"])) for g in detail.get("gpus", [])]
        found = []
        for name, entry in self.specs.get_all_specs().items():
            spec = (entry.get("spec") or {}) if isinstance(entry, dict) else {}
            if name == self.kernel_name or not names_vgpu_provisioner(spec.get("metadata")):
                continue
            if self.language and spec.get("language") not in (None, self.language):
                continue
            config = spec["metadata"]["kernel_provisioner"].get("config") or {}
            if config.get("launcher", DEFAULT) != DEFAULT:
                continue
            try:
                request = SliceRequest.parse(
                    fraction=config.get("gpu_fraction"), memory=config.get("gpu_memory"), gpus=config.get("gpus", 1),
                    limit_fraction=config.get("gpu_fraction_limit"), limit_memory=config.get("gpu_memory_limit"),
                )  # fmt: skip  # its limit too: one that cannot start is no suggestion (round five, L-3)
            except (InvalidRequest, TypeError, AttributeError):
                continue
            fitting = [need for total, room in free if 0 < (need := request.amount_on(total)) <= room]
            if len(fitting) >= request.gpus:
                found.append((max(fitting) * request.gpus, str(spec.get("display_name") or name), name))
        found.sort(key=lambda k: (-k[0], k[1]))
        return [{"name": name, "display_name": display} for _, display, name in found[:SUGGESTED]]
