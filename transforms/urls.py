"""Credentials never leave recordforge in a message, a dead letter or a manifest.

`redact_url` is the one place URLs are cleaned before they are shown or
written: sources name their files with it, publishing and verification use it
for every path they print or record.
"""

from __future__ import annotations

import re

__all__ = ["redact_url"]

# user:password@ after the scheme; also after "scheme:///", which is how
# filesystems that keep the authority in the path (memory://) print it back.
_USERINFO = re.compile(
    r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.\-]*://)(?:[^/?#@\s]*@|/[^/?#@\s:]*:[^/?#@\s]*@)")
_SECRET_QUERY = re.compile(
    r"(?i)(?P<name>[?&][^=&#\s]*(?:sig|signature|token|key|secret|password|passwd|"
    r"credential|auth)[^=&#\s]*=)[^&#\s]*")


def redact_url(text: str) -> str:
    """`text` with every URL's ``user:password@`` replaced by ``***@`` and the
    values of secret-looking query parameters (``sig``, ``token``, ``key``
    ...) by ``***``. Plain local paths come back unchanged."""
    text = _USERINFO.sub(r"\g<scheme>***@", text)
    return _SECRET_QUERY.sub(r"\g<name>***", text)
