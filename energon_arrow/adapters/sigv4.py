"""AWS Signature Version 4 for S3 requests, with the standard library only."""

from __future__ import annotations

import datetime
import hashlib
import hmac

EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()


class SigV4Signer:
    """Adds `x-amz-date`, `x-amz-content-sha256`, the session token and `Authorization` to a request's headers.

    `credentials` is a botocore Credentials object (refreshable ones are re-read on every request) or None for
    anonymous requests, which are left unsigned."""

    def __init__(self, credentials):
        self.credentials = credentials
        self._keys: dict[tuple[str, str, str], bytes] = {}

    def sign(
        self, method: str, path: str, headers: dict[str, str], region: str, payload: str = EMPTY_SHA256
    ) -> None:
        """Sign in place. `path` is the URL-encoded path without a query; every header present is signed."""
        if self.credentials is None:
            return
        creds = self.credentials.get_frozen_credentials()
        amz_date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        day = amz_date[:8]
        headers["x-amz-date"] = amz_date
        headers["x-amz-content-sha256"] = payload
        if creds.token:
            headers["x-amz-security-token"] = creds.token
        lower = {k.lower(): " ".join(str(v).split()) for k, v in headers.items()}
        names = sorted(lower)
        canonical_headers = "".join(f"{n}:{lower[n]}\n" for n in names)
        signed = ";".join(names)
        canonical = f"{method}\n{path}\n\n{canonical_headers}\n{signed}\n{payload}"
        scope = f"{day}/{region}/s3/aws4_request"
        to_sign = f"AWS4-HMAC-SHA256\n{amz_date}\n{scope}\n{hashlib.sha256(canonical.encode()).hexdigest()}"
        signature = hmac.new(self._key(creds.secret_key, day, region), to_sign.encode(), hashlib.sha256)
        headers["Authorization"] = (
            f"AWS4-HMAC-SHA256 Credential={creds.access_key}/{scope}, SignedHeaders={signed}, "
            f"Signature={signature.hexdigest()}"
        )

    def _key(self, secret: str, day: str, region: str) -> bytes:
        cache_key = (hashlib.sha256(secret.encode()).hexdigest(), day, region)
        key = self._keys.get(cache_key)
        if key is None:
            key = f"AWS4{secret}".encode()
            for part in (day, region, "s3", "aws4_request"):
                key = hmac.new(key, part.encode(), hashlib.sha256).digest()
            if len(self._keys) > 16:  # a new day or a rotated secret: drop the old keys
                self._keys = {}
            self._keys[cache_key] = key
        return key
