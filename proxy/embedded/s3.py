"""Small blocking S3 helpers for the harness: readiness, bucket set-up and clean-up.

These use botocore's synchronous client (botocore comes with aiobotocore): fixtures and server
start-up run outside any event loop, and tests use aiobotocore themselves.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from botocore.config import Config
from botocore.session import get_session

from proxy.embedded.info import S3Info

__all__ = ["create_bucket", "delete_bucket", "s3_answers", "s3_client", "s3_info_from_env"]

_DEFAULT_REGION = "us-east-1"


def s3_client(info: S3Info, *, timeout_s: float = 10.0) -> Any:
    """A botocore S3 client for ``info`` with path-style addressing and no retries.

    No retries: readiness probes and fixtures want an honest answer now, not after a back-off.
    """
    config = Config(
        connect_timeout=timeout_s,
        read_timeout=timeout_s,
        retries={"max_attempts": 1, "mode": "standard"},
        s3={"addressing_style": "path"},
    )
    return get_session().create_client(
        "s3",
        endpoint_url=info.endpoint_url,
        region_name=info.region,
        aws_access_key_id=info.access_key,
        aws_secret_access_key=info.secret_key,
        config=config,
    )


def s3_answers(client: Any) -> bool:
    """Whether ``ListBuckets`` succeeds with the client's credentials.

    :raises botocore.exceptions.BotoCoreError: the endpoint is unreachable.
    :raises botocore.exceptions.ClientError: it answered with an error.
    """
    client.list_buckets()
    return True


def create_bucket(info: S3Info, name: str) -> None:
    """Create bucket ``name`` (outside us-east-1 with a location constraint, as S3 requires).

    :raises botocore.exceptions.ClientError: the bucket exists or the name is invalid.
    """
    extra: dict[str, Any] = {}
    if info.region != _DEFAULT_REGION:
        extra["CreateBucketConfiguration"] = {"LocationConstraint": info.region}
    client = s3_client(info)
    try:
        client.create_bucket(Bucket=name, **extra)
    finally:
        client.close()


def object_keys(info: S3Info, name: str) -> list[str]:
    """Every object key in bucket ``name``."""
    client = s3_client(info)
    try:
        return [
            item["Key"]
            for page in client.get_paginator("list_objects_v2").paginate(Bucket=name)
            for item in page.get("Contents", ())
        ]
    finally:
        client.close()


def delete_bucket(info: S3Info, name: str) -> None:
    """Abort unfinished multipart uploads, delete every object, then the bucket itself.

    :raises botocore.exceptions.ClientError: the bucket does not exist or cannot be deleted.
    """
    client = s3_client(info)
    try:
        for page in client.get_paginator("list_multipart_uploads").paginate(Bucket=name):
            for upload in page.get("Uploads", ()):
                client.abort_multipart_upload(
                    Bucket=name, Key=upload["Key"], UploadId=upload["UploadId"]
                )
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=name):
            keys = [{"Key": item["Key"]} for item in page.get("Contents", ())]
            if keys:
                client.delete_objects(Bucket=name, Delete={"Objects": keys, "Quiet": True})
        client.delete_bucket(Bucket=name)
    finally:
        client.close()


def s3_info_from_env(environ: Mapping[str, str]) -> S3Info | None:
    """The external S3 endpoint named by ``S3_ENDPOINT``, or None.

    Credentials come from ``S3_ACCESS_KEY``/``S3_SECRET_KEY``/``S3_REGION``, falling back to the
    standard ``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``/``AWS_REGION``/``AWS_DEFAULT_REGION``.
    """
    endpoint = environ.get("S3_ENDPOINT")
    if not endpoint:
        return None
    return S3Info(
        endpoint_url=endpoint,
        access_key=environ.get("S3_ACCESS_KEY") or environ.get("AWS_ACCESS_KEY_ID", ""),
        secret_key=environ.get("S3_SECRET_KEY") or environ.get("AWS_SECRET_ACCESS_KEY", ""),
        region=environ.get("S3_REGION")
        or environ.get("AWS_REGION")
        or environ.get("AWS_DEFAULT_REGION")
        or _DEFAULT_REGION,
        kind="external",
    )
