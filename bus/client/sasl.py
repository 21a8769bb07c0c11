"""The native client's SASL login: `bus.security.sasl_login`'s exchange over the client's blocking connection,
its refusals raised as the client's errors (`SaslAuthenticationError`, `UnsupportedSaslMechanismError`), which
`connection.py` reports as one clear line, never a retried connection error.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from bus.client.errors import SaslAuthenticationError, UnsupportedSaslMechanismError
from bus.security.sasl_login import SaslCredentials, SaslLoginError, UnsupportedMechanismError, VersionFor, drive, login

Exchange = Callable[[Any, int], Any]  # (request, version) -> response


def authenticate(exchange: Exchange, version_for: VersionFor, credentials: SaslCredentials) -> int:
    """Log in with `credentials`; returns the session lifetime in ms the broker granted (0: no limit, KIP-368)."""
    try:
        return drive(login(credentials, version_for), exchange)
    except UnsupportedMechanismError as exc:
        raise UnsupportedSaslMechanismError(str(exc)) from None
    except SaslLoginError as exc:
        raise SaslAuthenticationError(str(exc)) from None
