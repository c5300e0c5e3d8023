"""Kernel starts as the user's page meets them: ``POST /api/sessions``, ``POST /api/kernels`` and
``PATCH /api/sessions/<id>`` answer a refusal with its own status, sentence and id, and tell the
provisioner who asked and whether they are still there (:data:`~jupyter_vgpu.launch.refusals.START_REQUEST`)."""

from __future__ import annotations

import json
from collections.abc import Awaitable
from typing import Any

from jupyter_server.base.handlers import APIHandler
from jupyter_server.services.kernels.handlers import MainKernelHandler
from jupyter_server.services.sessions.handlers import SessionHandler as JupyterSessionHandler
from jupyter_server.services.sessions.handlers import SessionRootHandler
from tornado import web
from tornado.httpclient import HTTPClientError

from ..launch.errors import ShownToUser
from ..launch.refusals import START_REQUEST, KernelStartRequest, refusals_of
from .peer import peer_gone

#: The header of a refused kernel start's reply that carries the refusal's id (also in its JSON
#: as ``refusal_id``): JupyterLab's services read the body before the extension sees the error.
REFUSAL_HEADER = "X-Jupyter-VGPU-Refusal"


async def requester(handler: Any) -> str | None:
    """Who sent a request, as refusals are owned: ``user:<name>`` for a user jupyter_server
    identified (a login cookie, JupyterHub), ``token`` for a request that showed the server's
    token and nothing else (jupyter_server makes up a new anonymous user for each of those: one
    shared token does not tell its holders apart), None for no user."""
    user = handler.current_user
    if user is None:
        return None
    if handler.token_authenticated:
        cookie = handler.identity_provider.get_user_cookie(handler)
        if cookie is None or (isinstance(cookie, Awaitable) and await cookie is None):
            return "token"
    return f"user:{user.username}"


class StartSentences(APIHandler):
    """Kernel starts (``POST /api/sessions``, ``POST /api/kernels``) answer a refusal with its own
    status and sentence (a GPU with no room is 503 "No room for ...", a quota 403) and the
    refusal's id (``refusal_id``, and the ``X-Jupyter-VGPU-Refusal`` header), which
    ``GET /api/vgpu/refusals/<id>`` answers with the refusal's structure for the user who asked.

    jupyter_server's sessions API answers any failed start as HTTP 500 (``raise HTTPError(500,
    str(e)) from e``), and behind ``--gateway-url`` its gateway client wraps whatever the GPU node
    answered as "Error from Gateway: [<the node's message>] ... Ensure gateway url is valid and the
    Gateway instance is running." (``gateway_request`` in jupyter_server/gateway/gateway_client.py).
    The refusal is what the user must read.
    """

    async def prepare(self) -> None:  # type: ignore[override]  # as APIHandler's
        await super().prepare()
        # The start's refusals are the requester's (the provisioner reads this).
        connection = self.request.connection
        START_REQUEST.set(KernelStartRequest(await requester(self), gone=lambda: peer_gone(connection)))

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        shown = shown_error(kwargs.get("exc_info"))
        if shown is None:
            super().write_error(status_code, **kwargs)
            return
        status, message = shown
        self.answer_refusal(status, message, refusal_id_of(kwargs.get("exc_info")))

    def answer_refusal(self, status: int, message: str, refusal_id: str | None) -> None:
        """Answer a refused start with its status, sentence and refusal id."""
        reply: dict[str, Any] = {"message": message, "reason": None}
        if refusal_id is not None:
            log = refusals_of(self.kernel_manager)
            if not log.has(refusal_id):  # a GPU node's: this server notes whose it is
                request = START_REQUEST.get()
                log.claim(refusal_id, request.requester if request is not None else None)
            reply["refusal_id"] = refusal_id
            self.set_header(REFUSAL_HEADER, refusal_id)
        self.set_status(status)
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps(reply))


def shown_error(exc_info: Any) -> tuple[int, str] | None:
    """(status, sentence) of the refusal behind a failed kernel start: a jupyter-vgpu error meant
    for the user, or the gateway client's wrapping of an answer the GPU node gave; None for anything
    else (a bug keeps upstream's answer, an unreachable node upstream's words)."""
    error = exc_info[1] if isinstance(exc_info, tuple) and len(exc_info) > 1 else None
    seen = 0
    while error is not None and seen < 10:
        if isinstance(error, ShownToUser):
            return error.status_code, error.message
        if (
            isinstance(error, web.HTTPError)
            and str(error.log_message or "").startswith("Error from Gateway: [")
            and error.args
            and isinstance(error.args[0], str)
            and 400 <= error.status_code < 600
        ):
            return error.status_code, error.args[0]
        error = error.__cause__ or error.__context__
        seen += 1
    return None


def refusal_id_of(exc_info: Any) -> str | None:
    """The id of the refusal behind a failed kernel start: the one the provisioner recorded, or
    the one the GPU node answered with (behind ``--gateway-url``); None when there is none."""
    error = exc_info[1] if isinstance(exc_info, tuple) and len(exc_info) > 1 else None
    seen = 0
    while error is not None and seen < 10:
        if isinstance(error, ShownToUser) and error.refusal_id:
            return error.refusal_id
        response = getattr(error, "response", None) if isinstance(error, HTTPClientError) else None
        if response is not None:
            refusal_id = response.headers.get(REFUSAL_HEADER) or ""
            return refusal_id if is_refusal_id(refusal_id) else None
        error = error.__cause__ or error.__context__
        seen += 1
    return None


def is_refusal_id(text: str) -> bool:
    """What ``RefusalLog.add`` makes: 24 hexadecimal digits."""
    return len(text) == 24 and all(c in "0123456789abcdef" for c in text)


class SessionsHandler(StartSentences, SessionRootHandler):
    """``POST /api/sessions`` (a notebook opened) with the refusal's own status and sentence."""


class KernelsHandler(StartSentences, MainKernelHandler):
    """``POST /api/kernels`` with the refusal's own status and sentence."""


class SessionHandler(StartSentences, JupyterSessionHandler):
    """``PATCH /api/sessions/<id>`` (a notebook's kernel changed) with the refusal's own status,
    sentence and id. jupyter_server answers a failed change itself, with 501 and the error's repr
    (``SessionHandler.patch``); the refusal the start met replaces that answer."""

    def finish(self, chunk: Any = None) -> Any:
        request = START_REQUEST.get()
        if self.request.method == "PATCH" and self.get_status() == 501 and request is not None and request.refused:
            refusal = refusals_of(self.kernel_manager).get(request.refused[-1], request.requester)
            if refusal is not None:
                self.clear()
                self.answer_refusal(int(refusal["status"]), str(refusal["message"]), str(refusal["id"]))
                return None
        return super().finish(chunk)
