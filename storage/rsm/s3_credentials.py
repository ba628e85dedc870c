"""Where the S3 client's credentials come from, said without their values.

With ``remote.log.storage.s3.access.key.id`` and ``.secret.access.key`` set, those static keys
sign every request. Otherwise botocore's default credential chain finds them, as the AWS CLI
and SDKs do: the environment, the shared credentials and config files (of
``remote.log.storage.s3.profile``, else ``AWS_PROFILE``, else the default profile), web
identity, container credentials, instance metadata. A profile named in the settings skips the
environment's keys, as ``aws --profile`` does. Temporary credentials (web identity, container,
instance role) are refreshed by botocore before they expire.

The chain is resolved before the client is created, and a client is created only once
credentials were found: otherwise the client would keep "no credentials" for the life of the
process, even after an instance role or a mounted token appears.

botocore's credential object names the link that answered (``method``: ``env``,
``shared-credentials-file``, ``assume-role-with-web-identity``, ``iam-role``, ...); start-up
logs that, so an operator can tell which identity a process uses. The keys themselves are
never logged.
"""

from __future__ import annotations

from typing import Any

from aiobotocore.session import AioSession
from botocore.exceptions import BotoCoreError

from storage.rsm.base import RemoteStorageError
from storage.rsm.config import RemoteStorageConfig

__all__ = ["CREDENTIAL_CHAIN", "credentials_source", "new_session"]

CREDENTIAL_CHAIN = (
    "the environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY), the shared credentials and "
    "config files (AWS_SHARED_CREDENTIALS_FILE, AWS_CONFIG_FILE), web identity "
    "(AWS_WEB_IDENTITY_TOKEN_FILE with AWS_ROLE_ARN), container credentials and instance "
    "metadata"
)
"""The links of botocore's default chain, in its order, for messages."""

_STATIC_KEYS = "static keys (remote.log.storage.s3.access.key.id)"


def new_session(config: RemoteStorageConfig) -> Any:
    """A botocore session that reads ``config``'s profile (unset: AWS_PROFILE or the default).

    Creating one reads no file; the files are read when credentials or the region are needed.
    """
    return AioSession(profile=config.s3_profile)


async def credentials_source(session: Any, config: RemoteStorageConfig) -> str:
    """Which source the credentials come from, e.g. ``shared-credentials-file, profile
    'tiering'``. The session keeps what it resolved, for the client it creates next.

    :raises RemoteStorageError: (not retriable) when no link of the chain has credentials or
        the profile cannot be read; the message names the chain.
    """
    if config.s3_access_key_id is not None:
        return _STATIC_KEYS
    profile = session.profile
    which = f"profile {profile!r}" if profile else "the default profile"
    try:
        credentials = await session.get_credentials()
    except BotoCoreError as err:
        raise RemoteStorageError(
            f"cannot load AWS credentials with {which}: {err}", retriable=False
        ) from err
    if credentials is None:
        raise RemoteStorageError(
            f"no AWS credentials found in the AWS credential chain ({CREDENTIAL_CHAIN}; "
            f"{which}); give them to one of those, or set "
            "remote.log.storage.s3.access.key.id and .secret.access.key",
            retriable=False,
        )
    method = getattr(credentials, "method", None) or "unknown source"
    return f"{method}, {which}" if profile else str(method)
