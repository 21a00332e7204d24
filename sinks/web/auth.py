"""How the requests of the sinks that talk HTTP are authenticated, attempt by attempt.

An ``Auth`` has the shape of httpx's ``Auth`` flow: ``authenticate`` gives the request to
send (signed, or carrying a token), and ``renew`` is asked once when the answer is a 401
(a token that expired early is fetched again, and the request sent once more).
``AuthenticatedTransport`` applies one to every request through another ``Transport``
(see ``asyncsink.sinks.web.transport``), so every attempt, retries included, is
authenticated again: a signature expires, and so does a token::

    transport = AuthenticatedTransport(shared_transport, SigV4(source, "es", "eu-west-1"))

The static credentials (``bearerToken``, ``basicUsername``, ``apiKey``) are plain headers
and need none of this.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping

from .transport import Answer, Request, Transport

__all__ = ["Auth", "AuthenticatedTransport"]


class Auth(abc.ABC):
    """Authenticates each attempt of a request."""

    options: str = ""
    """The options that configure it, for the hints of 401 and 403 errors."""

    @abc.abstractmethod
    async def authenticate(self, request: Request, transport: Transport) -> Request:
        """``request`` as it is to be sent: signed, or with its token (fetched through
        ``transport`` if need be).

        Raises:
            FatalError: the credentials cannot be had (refused), naming the option.
            RetryableError: they cannot be had for now (the token endpoint is down).
        """

    async def renew(self, request: Request, answer: Answer, transport: Transport) -> bool:
        """After a 401 to ``request``: renew what it carried and say whether to send it
        once more (the default: no)."""
        return False

    def hints(self) -> Mapping[int, str]:
        """What a 401 or a 403 answer tells the user to check, by status."""
        return {}


class AuthenticatedTransport(Transport):
    """Sends every request through ``transport``, authenticated by ``auth`` first; closes
    ``transport`` with itself only if ``owned``."""

    def __init__(self, transport: Transport, auth: Auth, *, owned: bool = False) -> None:
        self.transport = transport
        self.auth = auth
        self._owned = owned

    async def handle_async_request(self, request: Request) -> Answer:
        auth, transport = self.auth, self.transport
        sent = await auth.authenticate(request, transport)
        answer = await transport.handle_async_request(sent)
        if answer.status == 401 and await auth.renew(sent, answer, transport):
            answer = await transport.handle_async_request(
                await auth.authenticate(request, transport)
            )
        return answer

    async def aclose(self) -> None:
        if self._owned:
            await self.transport.aclose()
