"""Parsing storage URLs into (protocol, root) and globbing relative paths."""

from __future__ import annotations

import os
import re
import warnings
from dataclasses import dataclass
from functools import lru_cache

LOCAL_PROTOCOLS = ("file", "local")


@dataclass(frozen=True)
class ParsedUrl:
    protocol: str  # "file", "s3", "memory", ...
    path: str  # the backend path: absolute local path, "bucket/prefix", "/memory/path"

    @property
    def is_local(self) -> bool:
        return self.protocol == "file"

    def url(self) -> str:
        if self.is_local:
            return self.path
        return f"{self.protocol}://{self.path.lstrip('/')}"


RCLONE_PREFIX = "rclone://"
# multi-storage-client's reserved profile for the local filesystem (its RESERVED_POSIX_PROFILE_NAME; energon's
# epathlib.DEFAULT_PROFILE_NAME): msc://__filesystem__/etc/hosts is /etc/hosts
POSIX_PROFILE = "__filesystem__"


def path_text(path) -> str:
    """The URL or local path of `path`: a string, an `os.PathLike`, or a path object carrying its URL in a
    string `url` attribute (energon's `EPath`, whose `str()` is also that URL). energon's deprecated
    `rclone://profile/...` is `msc://profile/...` (multi-storage-client also finds its profiles in the rclone
    configuration), with energon's FutureWarning; `msc://__filesystem__/path` is the local `/path`, as in energon."""
    if isinstance(path, str):
        text = path
    elif isinstance(path, os.PathLike):
        text = os.fspath(path)
    elif isinstance(getattr(path, "url", None), str):
        text = path.url
    else:
        raise TypeError(f"expected a path or URL (str, os.PathLike or EPath), got {type(path).__name__}")
    if not isinstance(text, str):  # a bytes path from os.fspath
        return text
    if text[: len(RCLONE_PREFIX)].lower() == RCLONE_PREFIX:
        warnings.warn("rclone:// protocol is deprecated. Use msc:// instead.", FutureWarning, stacklevel=3)
        text = "msc://" + text[len(RCLONE_PREFIX) :]
    posix = f"msc://{POSIX_PROFILE}"
    if text == posix or text.startswith(posix + "/"):
        return text[len(posix) :] or "/"
    return text


DSS_PREFIX = "dss://"


def resolve_dss_url(url: str) -> str:
    """energon's `dss://NAME@VERSION/PATH`: PATH inside version VERSION of dataset NAME in the NVIDIA dataset
    cache, i.e. `$NVDATASET_CACHE_DIR/NAME/VERSION/PATH` (the cache root is a local folder or a URL)."""
    dataset, _, path = url[len(DSS_PREFIX) :].partition("/")
    name, at, version = dataset.rpartition("@")
    if not (at and name and version):
        raise ValueError(f"{url}: a dss:// URL starts with NAME@VERSION (dss://NAME@VERSION/path)")
    root = os.environ.get("NVDATASET_CACHE_DIR")
    if not root:
        raise ValueError(f"{url}: set NVDATASET_CACHE_DIR to the dataset cache root to read dss:// URLs")
    return "/".join([root.rstrip("/"), name, version, *[p for p in path.split("/") if p]])


def parse_url(url) -> ParsedUrl:
    """Split a URL or local path. Plain paths and file:// are local; others keep their scheme."""
    text = path_text(url)
    m = re.match(r"^([A-Za-z][A-Za-z0-9+.-]*)://(.*)$", text)
    if not m:
        return ParsedUrl("file", os.path.abspath(os.path.expanduser(text)))
    scheme, rest = m.group(1).lower(), m.group(2)
    if scheme in LOCAL_PROTOCOLS:
        return ParsedUrl("file", os.path.abspath(rest or "/"))
    if scheme in ("s3", "s3a"):
        return ParsedUrl("s3", rest.strip("/"))
    if scheme == "memory":
        return ParsedUrl("memory", "/" + rest.strip("/"))
    return ParsedUrl(scheme, rest.rstrip("/"))


def join_path(base: str, rel: str) -> str:
    """Join a backend root path and a relative POSIX path."""
    rel = rel.lstrip("/")
    if not rel:
        return base
    if not base:
        return rel
    return base.rstrip("/") + "/" + rel


@lru_cache(maxsize=256)
def glob_to_regex(pattern: str, hidden: bool = True) -> re.Pattern:
    """Translate a POSIX glob with `**` (any number of directories, including none) to a regex. `hidden=False`:
    glob's rule for hidden names, as energon's `EPath.glob` (and so `energon prepare`) applies it: a wildcard
    does not match a name starting with "." (a pattern component that starts with "." does), and `**` does not
    descend into hidden folders."""
    name = "[^/]*" if hidden else r"(?!\.)[^/]*"  # one path component matched by `**`
    i, out = 0, []
    while i < len(pattern):
        c = pattern[i]
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?" if hidden else f"(?:{name}/)*")
            i += 3
            continue
        if pattern.startswith("**", i):
            out.append(".*" if hidden else f"(?:{name}(?:/{name})*)?")
            i += 2
            continue
        if not hidden and c in "*?[" and (i == 0 or pattern[i - 1] == "/"):
            out.append(r"(?!\.)")
        if c == "*":
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[":
            j = pattern.find("]", i + 1)
            if j < 0:
                out.append(re.escape(c))
            else:
                body = pattern[i + 1 : j].replace("\\", "\\\\")
                if body.startswith("!"):
                    body = "^" + body[1:]
                out.append(f"[{body}]")
                i = j
        else:
            out.append(re.escape(c))
        i += 1
    return re.compile("^" + "".join(out) + "$")
