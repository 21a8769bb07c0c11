"""The text forms Kafka's tools take SCRAM credentials in.

- `kafka-storage format --add-scram 'SCRAM-SHA-256=[name=alice,password=alice-secret]'` (Kafka's `ScramParser`):
  `name` and one of `password` or `saltedpassword` (base64, needs `salt`), optional `salt` (base64) and
  `iterations` (default 4096, within the mechanism's 4096..16384); values may be double-quoted.
- `kafka-configs --alter --add-config 'SCRAM-SHA-256=[iterations=8192,password=alice-secret]'
  --entity-type users --entity-name alice` (Kafka's `ConfigCommand`): once `--add-config` is split and its
  brackets dropped, the value is `[iterations=N,]password=P`; iterations default to 4096, `-1` means default.

Errors say what is wrong and never repeat a password (Kafka's own messages sometimes do).
"""

from __future__ import annotations

import base64
import binascii
import re
from dataclasses import dataclass, field

from bus.security.scram import ScramCredential, ScramError, ScramMechanism, check_iterations, scram_mechanism

DEFAULT_ITERATIONS = 4096
_CONFIG_VALUE = re.compile(r"(?:iterations=(-?[0-9]*),)?password=(.*)", re.DOTALL)


@dataclass(frozen=True, slots=True)
class UserScramCredential:
    """One user's credential for one mechanism: a UserScramCredentialRecord's content."""

    name: str
    mechanism: ScramMechanism
    credential: ScramCredential


@dataclass(frozen=True, slots=True)
class ScramPassword:
    """A kafka-configs SCRAM value: the AdminClient salts it (UserScramCredentialUpsertion) before sending."""

    mechanism: ScramMechanism
    iterations: int
    password: str = field(repr=False)


def parse_add_scram(argument: str) -> UserScramCredential:
    """One `--add-scram` argument, salted and hashed as `kafka-storage format` stores it."""
    text = argument.strip()
    mechanism_name, equals, config = text.partition("=")
    if not equals:
        raise ScramError("Failed to find equals sign in SCRAM argument")
    try:
        mechanism = scram_mechanism(mechanism_name)
    except ScramError:
        raise ScramError(f"The add-scram mechanism {mechanism_name} is not supported.") from None
    if not config.startswith("["):
        raise ScramError("Expected configuration string to start with [")
    if not config.endswith("]"):
        raise ScramError("Expected configuration string to end with ]")
    components = dict(_component(item) for item in config[1:-1].split(","))
    name = components.pop("name", None)
    if name is None:
        raise ScramError("You must supply 'name' to add-scram")
    salt = _base64(components.pop("salt", None), "salt")
    iterations = _iterations(components.pop("iterations", None))
    password = components.pop("password", None)
    salted = _base64(components.pop("saltedpassword", None), "saltedpassword")
    if password is None and salted is None:
        raise ScramError("You must supply one of 'password' or 'saltedpassword' to add-scram")
    if password is None and salt is None:
        raise ScramError("You must supply 'salt' with 'saltedpassword' to add-scram")
    if components:
        raise ScramError(f"Unknown SCRAM configurations: {', '.join(sorted(components))}")
    check_iterations(mechanism, iterations)
    if password is not None:  # as in Kafka, a password wins over a salted password given with it
        credential = ScramCredential.from_password(mechanism, password, iterations, salt)
    else:
        assert salt is not None and salted is not None
        credential = ScramCredential.from_salted_password(mechanism, salt, salted, iterations)
    return UserScramCredential(name, mechanism, credential)


def parse_scram_config(mechanism_name: str, value: str) -> ScramPassword:
    """A kafka-configs `SCRAM-SHA-*` user config value (brackets already dropped): `[iterations=N,]password=P`."""
    mechanism = scram_mechanism(mechanism_name)
    match = _CONFIG_VALUE.fullmatch(value)
    if match is None:
        raise ScramError(f"Invalid credential property {mechanism.name}: expected [iterations=N,]password=P")
    number = match.group(1)
    iterations = DEFAULT_ITERATIONS if number in (None, "-1") else _iterations(number)
    if iterations < mechanism.min_iterations:
        raise ScramError(f"Iterations {iterations} is less than the minimum {mechanism.min_iterations} required "
                         f"for {mechanism.name}")
    return ScramPassword(mechanism, iterations, match.group(2))


def _component(item: str) -> tuple[str, str]:
    """`key=value`, a value in double quotes unquoted (Kafka's `splitTrimmedConfigStringComponent`)."""
    key, equals, value = item.partition("=")
    if not equals:
        raise ScramError("No equals sign found in a SCRAM component")
    if len(value) >= 2 and value.startswith('"') and value.endswith('"'):
        value = value[1:-1]
    return key, value


def _base64(text: str | None, what: str) -> bytes | None:
    if text is None:
        return None
    try:
        return base64.b64decode(text, validate=True)
    except binascii.Error:
        raise ScramError(f"Failed to decode given {what}") from None


def _iterations(text: str | None) -> int:
    if text is None:
        return DEFAULT_ITERATIONS
    try:
        return int(text)
    except ValueError:
        raise ScramError(f"Failed to parse iterations count: {text}") from None
