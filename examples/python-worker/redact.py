"""Secrets stay secret (docs/security.md, "Secrets in params"): the values of
sensitive params are replaced with [redacted] in a failure's message before
it is reported. The same rule as the Rust worker's: fields by name, any
depth, any case; every scalar under a sensitive field counts."""

SENSITIVE_FIELDS = (
    "password", "passwd", "secret", "token", "api_key", "apikey",
    "authorization", "private_key", "client_secret",
)
REDACTED = "[redacted]"


def _json_scalar(value):
    """A number as JSON writes it (what the Rust side compares with)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value)
    return None


def secrets(params, fields=SENSITIVE_FIELDS):
    found = []
    sensitive = {f.lower() for f in fields}

    def walk(value, secret):
        if isinstance(value, dict):
            for name, v in value.items():
                walk(v, secret or name.lower() in sensitive)
        elif isinstance(value, list):
            for v in value:
                walk(v, secret)
        elif secret and isinstance(value, str) and value:
            found.append(value)
        elif secret and _json_scalar(value) is not None:
            found.append(_json_scalar(value))

    for name, value in (params or {}).items():
        walk(value, name.lower() in sensitive)
    # Longest first, so a secret containing another is replaced whole.
    return sorted(set(found), key=len, reverse=True)


def scrub(text, found):
    for secret in found:
        text = text.replace(secret, REDACTED)
    return text
