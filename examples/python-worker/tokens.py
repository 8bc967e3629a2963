"""The task token check of docs/security.md ("What a worker checks"), done
before anything else happens to a task (docs/worker-protocol.md §4.3).

    check = TokenCheck(os.environ["ORCH_VERIFY_KEY"], agent="py-echo")
    check.check(envelope_dict, needed_scopes)   # raises Refused
"""

import base64
import hashlib
import time

import jwt  # PyJWT, with the `crypto` extra for EdDSA
import rfc8785
from cryptography.hazmat.primitives.serialization import load_pem_public_key

HS256_LABEL = "ORCHESTRATOR HS256 SECRET"
SEEN_MAX = 100_000


# Every claim a task token carries, each required (§4 step 3): the first
# missing is named, in this order.
TASK_CLAIMS = ("iss", "sub", "aud", "scope", "jti", "iat", "nbf", "exp", "act", "env_sha256")


def task_claims(claims):
    """Refuses claims that are not a task token's: one missing, or of
    another type than the page gives it."""
    for claim in TASK_CLAIMS:
        if claim not in claims:
            raise Refused("rejected", "token_claim_missing", f"the token has no `{claim}` claim: its claims are not task claims")
    for claim in TASK_CLAIMS:
        value = claims[claim]
        if claim in ("iat", "nbf", "exp"):
            ok = isinstance(value, int) and not isinstance(value, bool) and value >= 0
        elif claim == "act":
            ok = isinstance(value, dict) and isinstance(value.get("sub"), str)
        else:
            ok = isinstance(value, str)
        if not ok:
            raise Refused("rejected", "token_claim_invalid", f"the token's `{claim}` claim is not what a task token holds")


class Refused(Exception):
    """A refused token: `state` is the attempt's final state
    (`auth_required` or `rejected`), `code` the error code."""

    def __init__(self, state, code, message):
        super().__init__(f"{code}: {message}")
        self.state, self.code, self.message = state, code, message


def load_key(source):
    """A path or the PEM text -> (key, algorithm). The algorithm comes from
    the key, never from a token."""
    text = source if source.lstrip().startswith("-----BEGIN") else open(source).read()
    if "-----BEGIN PUBLIC KEY-----" in text:
        return load_pem_public_key(text.encode()), "EdDSA"
    if f"-----BEGIN {HS256_LABEL}-----" in text:
        body = "".join(line for line in text.splitlines() if not line.startswith("-----"))
        return base64.b64decode(body), "HS256"
    if "PRIVATE KEY" in text:
        raise ValueError(f"{source}: this is the private key; a worker gets only the public key")
    raise ValueError(f"{source}: expected a PEM Ed25519 public key or an HS256 secret")


def wire_hash(envelope):
    """base64url(SHA-256(RFC 8785 form of {"control": ..., "payload": ...})),
    over the envelope as received."""
    bound = {"control": envelope.get("control"), "payload": envelope.get("payload")}
    digest = hashlib.sha256(rfc8785.dumps(bound)).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


class TokenCheck:
    def __init__(self, key_source, agent, issuer="orchestrator", leeway=30):
        self.key, self.alg = load_key(key_source)
        self.agent, self.issuer, self.leeway = agent, issuer, leeway
        self.seen = {}  # (task, attempt) -> (hash, exp); dicts keep insertion order

    def check(self, envelope, needed):
        header, control = envelope["header"], envelope["control"]
        token = header.get("token")
        if not token:
            raise Refused("auth_required", "token_missing", "the envelope carries no task token")
        try:
            alg = jwt.get_unverified_header(token).get("alg")
        except jwt.InvalidTokenError as e:
            raise Refused("rejected", "token_malformed", f"the token's header cannot be read ({e})")
        if alg != self.alg:
            raise Refused("rejected", "token_algorithm", f"the token is signed with {alg}; this worker accepts only {self.alg}")
        try:
            claims = jwt.decode(
                token,
                self.key,
                algorithms=[self.alg],
                audience=self.agent,
                issuer=self.issuer,
                leeway=self.leeway,
                options={"require": ["exp", "nbf", "iss", "aud", "sub"]},
            )
        except jwt.ExpiredSignatureError:
            raise Refused("auth_required", "token_expired", "the task token has expired")
        except jwt.ImmatureSignatureError:
            raise Refused("auth_required", "token_not_yet_valid", "the task token is not valid yet")
        except jwt.InvalidAudienceError:
            # Not a string: a malformed claim (§4 step 3), not another agent.
            unverified = jwt.decode(token, options={"verify_signature": False})
            if not isinstance(unverified.get("aud"), str):
                raise Refused("rejected", "token_claim_invalid", "the token's `aud` claim is not a string")
            raise Refused("rejected", "token_audience", f"the token is not for `{self.agent}`")
        except jwt.InvalidIssuerError:
            # An `iss` that is not a string is a malformed claim (§4 step 3),
            # not another issuer. The signature was verified before this.
            unverified = jwt.decode(token, options={"verify_signature": False})
            if not isinstance(unverified.get("iss"), str):
                raise Refused("rejected", "token_claim_invalid", "the token's `iss` claim is not a string")
            raise Refused("rejected", "token_issuer", f"the token was not issued by `{self.issuer}`")
        except jwt.MissingRequiredClaimError as e:
            raise Refused("rejected", "token_claim_missing", f"the token has no `{e.claim}` claim")
        except jwt.InvalidSignatureError:
            raise Refused("rejected", "token_signature", "the token's signature does not verify")
        except jwt.InvalidTokenError as e:
            raise Refused("rejected", "token_claim_invalid", f"the token cannot be read: {e}")
        task_claims(claims)
        task, attempt = header["task_id"], int(control["attempt"])
        if claims["jti"] != task:
            raise Refused("rejected", "token_task_mismatch", f"the token is for task {claims['jti']}, the envelope is task {task}")
        try:
            bound = wire_hash(envelope)
        except Exception as e:
            raise Refused("rejected", "envelope_tampered", f"the envelope has no canonical form: {e}")
        if claims.get("env_sha256") != bound:
            raise Refused("rejected", "envelope_tampered", "the envelope's payload or control differs from what the token was signed for")
        granted = set(str(claims.get("scope", "")).split())
        missing = [s for s in needed if s not in granted]
        if missing:
            raise Refused("rejected", "scope_missing", f"`{envelope['payload']['action']}` needs scopes the token does not grant: {', '.join(missing)}")
        self.first_use(task, attempt, bound, int(claims["exp"]))
        return claims

    def first_use(self, task, attempt, bound, exp):
        now = time.time()
        while self.seen:
            oldest = next(iter(self.seen))
            if self.seen[oldest][1] >= now and len(self.seen) < SEEN_MAX:
                break
            del self.seen[oldest]
        seen = self.seen.get((task, attempt))
        if seen is None:
            self.seen[(task, attempt)] = (bound, exp)
        elif seen[0] != bound:
            raise Refused("rejected", "token_replayed", f"a token for task {task} attempt {attempt} was already used with another envelope")
