"""Key-encryption keys (KEKs) by id, and the per-segment data keys they wrap.

Envelope encryption, as Aiven's tiered-storage plugin does it: every segment gets a fresh
random AES-256 data key (DEK) that encrypts its chunks (:mod:`storage.rsm.chunk_codec`); the
DEK is stored in the segment's manifest wrapped (AES-256-GCM) by a KEK, next to the KEK's id.
Rotation: add a new KEK, make it the active one (new segments use it), and keep the old ones
on the ring as long as segments wrapped by them exist. The KEKs never leave the processes
that load them; remote storage holds only wrapped DEKs.

Where KEKs come from: a key file (``remote.log.storage.encryption.keys.file``) and an
environment variable (``remote.log.storage.encryption.keys.env``, by default
``TIERPROXY_ENCRYPTION_KEYS``), both in the same format: one key per line (or separated by
commas in the variable), ``ID:BASE64`` where ``BASE64`` is 32 random bytes (``openssl rand
-base64 32``); blank lines and lines starting with ``#`` are ignored. Ids are 1 to 64 of
``A-Z a-z 0-9 . _ -``. An id given twice with different bytes is refused.

The wrapped DEK is bound to its segment: the segment id is the wrapping's additional
authenticated data, so a manifest's key copied to another segment does not unwrap.
"""

from __future__ import annotations

import base64
import binascii
import os
import re
import secrets
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from storage.config import ConfigError
from storage.rsm.base import RemoteStorageError
from storage.rsm.manifest import EncryptionInfo

__all__ = ["KEY_BYTES", "EncryptionKeyError", "KeyRing", "parse_keys"]

KEY_BYTES: Final = 32
"""AES-256: the size of every KEK and DEK."""
_NONCE_BYTES: Final = 12
_KEY_ID: Final = re.compile(r"[A-Za-z0-9._-]{1,64}")
_WRAP_CONTEXT: Final = b"tierproxy data key\0"


class EncryptionKeyError(RemoteStorageError):
    """A segment's data key cannot be unwrapped: its KEK is not on the ring, or is not the key
    it was wrapped with. Retriable for a client (the operator may add the key and the next
    read succeeds); the storage manager's own retries do not try again."""

    def __init__(self, message: str, *, key_id: str) -> None:
        super().__init__(message, retriable=True)
        self.key_id = key_id


@dataclass(frozen=True, slots=True, kw_only=True)
class DataKey:
    """A fresh segment's data key and how its manifest records it."""

    key: bytes
    info: EncryptionInfo


class KeyRing:
    """KEKs by id; ``active`` wraps the data keys of new segments."""

    def __init__(self, keys: Mapping[str, bytes], *, active: str | None) -> None:
        """:raises ConfigError: when ``active`` is not on the ring or a key is not 32 bytes."""
        for key_id, key in keys.items():
            if len(key) != KEY_BYTES:
                raise ConfigError(f"encryption key {key_id!r} is {len(key)} bytes, not 32")
        if active is not None and active not in keys:
            raise ConfigError(
                f"the active encryption key {active!r} (remote.log.storage.encryption.key.id) "
                f"is not among the keys loaded ({', '.join(sorted(keys)) or 'none'})"
            )
        self._keys = {key_id: AESGCM(key) for key_id, key in keys.items()}
        self.active = active

    @property
    def key_ids(self) -> tuple[str, ...]:
        return tuple(sorted(self._keys))

    def new_data_key(self, segment_id: bytes) -> DataKey:
        """A random data key for the segment ``segment_id`` (its 16 bytes), wrapped by the
        active KEK.

        :raises ConfigError: when no key is active.
        """
        if self.active is None:
            raise ConfigError("encryption needs remote.log.storage.encryption.key.id")
        key = secrets.token_bytes(KEY_BYTES)
        nonce = secrets.token_bytes(_NONCE_BYTES)
        wrapped = nonce + self._keys[self.active].encrypt(nonce, key, _WRAP_CONTEXT + segment_id)
        return DataKey(key=key, info=EncryptionInfo(key_id=self.active, wrapped_key=wrapped))

    def data_key(self, info: EncryptionInfo, segment_id: bytes) -> bytes:
        """The data key a manifest's ``info`` wraps for segment ``segment_id``.

        :raises EncryptionKeyError: when the KEK ``info.key_id`` is not on the ring, or is
            not the key the data key was wrapped with (or the manifest was altered).
        """
        kek = self._keys.get(info.key_id)
        if kek is None:
            raise EncryptionKeyError(
                f"encryption key {info.key_id!r} is not loaded (keys loaded: "
                f"{', '.join(self.key_ids) or 'none'}): add it to "
                "remote.log.storage.encryption.keys.file or .keys.env",
                key_id=info.key_id,
            )
        nonce, wrapped = info.wrapped_key[:_NONCE_BYTES], info.wrapped_key[_NONCE_BYTES:]
        try:
            return kek.decrypt(nonce, wrapped, _WRAP_CONTEXT + segment_id)
        except InvalidTag as err:
            raise EncryptionKeyError(
                f"encryption key {info.key_id!r} does not unwrap this segment's data key: "
                "the key loaded under that id is not the one it was wrapped with",
                key_id=info.key_id,
            ) from err

    @classmethod
    def load(cls, *, keys_file: str | None, keys_env: str | None, active: str | None) -> KeyRing:
        """The ring from the key file and the environment variable (either may be unset).

        :raises ConfigError: when the file cannot be read, an entry is malformed, an id is
            given twice with different keys, or ``active`` is not among them.
        """
        keys: dict[str, bytes] = {}
        sources: list[tuple[str, str]] = []
        if keys_file:
            try:
                sources.append((keys_file, Path(keys_file).read_text(encoding="utf-8")))
            except OSError as err:
                raise ConfigError(f"cannot read encryption keys from {keys_file}: {err}") from err
        if keys_env and (value := os.environ.get(keys_env)):
            sources.append((f"${keys_env}", value.replace(",", "\n")))
        for where, text in sources:
            for key_id, key in parse_keys(text.splitlines(), where=where):
                if keys.setdefault(key_id, key) != key:
                    raise ConfigError(f"encryption key {key_id!r} is given twice, differently")
        return cls(keys, active=active)


def parse_keys(lines: Iterable[str], *, where: str) -> list[tuple[str, bytes]]:
    """``(id, key)`` of each ``ID:BASE64`` line.

    :raises ConfigError: naming ``where`` and the line, for a malformed entry.
    """
    found = []
    for number, raw in enumerate(lines, start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key_id, separator, encoded = line.partition(":")
        key_id = key_id.strip()
        if not separator or not _KEY_ID.fullmatch(key_id):
            raise ConfigError(
                f"{where}, entry {number}: expected ID:BASE64 with an id of 1 to 64 of "
                "A-Z a-z 0-9 . _ -"
            )
        try:
            key = base64.b64decode(encoded.strip(), validate=True)
        except (binascii.Error, ValueError) as err:
            raise ConfigError(f"{where}, key {key_id!r}: not base64") from err
        if len(key) != KEY_BYTES:
            raise ConfigError(f"{where}, key {key_id!r}: {len(key)} bytes, not 32")
        found.append((key_id, key))
    return found
