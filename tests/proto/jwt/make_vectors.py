#!/usr/bin/env python3
"""make_vectors.py: the keys and tokens of tests/proto/test_auth_jwt.c.

Keys are made by `openssl genpkey`, tokens signed by `openssl dgst` and
`openssl pkeyutl`; this script only encodes.  Run it in this directory to
make them again: it writes keys/*.pem (not kept in git: new keys each
time), jwks.json and vectors.h, which embeds the set too.
"""
import base64, json, os, subprocess, sys

def b64u(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()

def run(*args, data=None):
    return subprocess.run(args, input=data, check=True, capture_output=True).stdout

os.makedirs("keys", exist_ok=True)
keys = {
    "rsa": ["-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048"],
    "rsa_other": ["-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048"],
    "p256": ["-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256"],
    "p384": ["-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-384"],
    "ed25519": ["-algorithm", "ED25519"],
}
for name, args in keys.items():
    if not os.path.exists(f"keys/{name}.pem"):
        run("openssl", "genpkey", *args, "-out", f"keys/{name}.pem")
hmac_key = bytes(range(32))

def der_public(name):
    return run("openssl", "pkey", "-in", f"keys/{name}.pem", "-pubout", "-outform", "DER")

def der_ints(der):
    """The INTEGERs of a DER SEQUENCE (an ECDSA signature), as bytes."""
    assert der[0] == 0x30
    i = 2 if der[1] < 0x80 else 2 + (der[1] & 0x7f)
    out = []
    while i < len(der):
        assert der[i] == 0x02
        n = der[i + 1]
        out.append(der[i + 2:i + 2 + n])
        i += 2 + n
    return out

def rsa_jwk(name):
    text = run("openssl", "rsa", "-in", f"keys/{name}.pem", "-noout", "-modulus").decode()
    n = bytes.fromhex(text.strip().split("=")[1])
    return {"kty": "RSA", "n": b64u(n), "e": b64u(b"\x01\x00\x01")}

def ec_jwk(name, crv, size):
    der = der_public(name)
    point = der[-(1 + 2 * size):]
    assert point[0] == 4
    return {"kty": "EC", "crv": crv, "x": b64u(point[1:1 + size]), "y": b64u(point[1 + size:])}

def ed_jwk(name):
    return {"kty": "OKP", "crv": "Ed25519", "x": b64u(der_public(name)[-32:])}

jwks = {"keys": [
    dict(rsa_jwk("rsa"), kid="rsa1", use="sig"),
    dict(ec_jwk("p256", "P-256", 32), kid="ec256"),
    dict(ec_jwk("p384", "P-384", 48), kid="ec384"),
    dict(ed_jwk("ed25519"), kid="ed"),
    {"kty": "oct", "k": b64u(hmac_key), "kid": "hs", "alg": "HS256"},
    dict(rsa_jwk("rsa_other"), kid="enc", use="enc"),
]}
with open("jwks.json", "w") as f:
    json.dump(jwks, f, indent=1)
    f.write("\n")

def sign(alg, data):
    if alg == "HS256":
        return run("openssl", "dgst", "-sha256", "-mac", "HMAC", "-macopt",
                   "hexkey:" + hmac_key.hex(), "-binary", data=data)
    if alg in ("RS256", "PS256"):
        pss = ["-sigopt", "rsa_padding_mode:pss", "-sigopt", "rsa_pss_saltlen:digest"] \
            if alg == "PS256" else []
        return run("openssl", "dgst", "-sha256", "-sign", "keys/rsa.pem", *pss, "-binary",
                   data=data)
    if alg in ("ES256", "ES384"):
        size, key, md = (32, "p256", "-sha256") if alg == "ES256" else (48, "p384", "-sha384")
        r, s = der_ints(run("openssl", "dgst", md, "-sign", f"keys/{key}.pem", "-binary",
                            data=data))
        return b"".join(v.lstrip(b"\0").rjust(size, b"\0") for v in (r, s))
    if alg == "EdDSA":
        with open("msg.tmp", "wb") as f:
            f.write(data)
        try:
            return run("openssl", "pkeyutl", "-sign", "-rawin", "-inkey", "keys/ed25519.pem",
                       "-in", "msg.tmp")
        finally:
            os.unlink("msg.tmp")
    raise ValueError(alg)

def token(alg, claims, kid=None, header=None, signer=None):
    h = {"alg": alg, "typ": "JWT"}
    if kid:
        h["kid"] = kid
    h.update(header or {})
    data = (b64u(json.dumps(h, separators=(",", ":")).encode()) + "." +
            b64u(json.dumps(claims, separators=(",", ":")).encode())).encode()
    return (data + b"." + b64u(sign(signer or alg, data)).encode()).decode()

FUTURE, PAST = 4000000000, 1000000000
good = {"sub": "alice", "iss": "https://issuer.example", "aud": ["api", "web"],
        "exp": FUTURE, "nbf": PAST, "admin": True, "level": 7, "groups": ["a", "b"]}
vectors = [
    ("RS256", token("RS256", good, "rsa1")),
    ("PS256", token("PS256", good, "rsa1")),
    ("ES256", token("ES256", good, "ec256")),
    ("ES384", token("ES384", good, "ec384")),
    ("EDDSA", token("EdDSA", good)),
    ("HS256", token("HS256", good, "hs")),
    ("EXPIRED", token("ES256", dict(good, exp=PAST + 100))),
    ("NOT_YET", token("ES256", dict(good, nbf=FUTURE))),
    ("NO_TIMES", token("ES256", {"sub": "bob"})),
    ("WRONG_KID", token("RS256", good, "nope")),
    ("ENC_KEY", token("RS256", good, "enc")),
]
# The RSA key's public modulus as an HMAC secret: the algorithm confusion
# attack, which must fail.
rsa_pub = der_public("rsa")
head = b64u(json.dumps({"alg": "HS256", "kid": "rsa1"}, separators=(",", ":")).encode())
body = b64u(json.dumps(good, separators=(",", ":")).encode())
mac = run("openssl", "dgst", "-sha256", "-mac", "HMAC", "-macopt", "hexkey:" + rsa_pub.hex(),
          "-binary", data=(head + "." + body).encode())
vectors.append(("CONFUSED", head + "." + body + "." + b64u(mac)))
none_head = b64u(b'{"alg":"none"}')
vectors.append(("ALG_NONE", none_head + "." + body + "."))
vectors.append(("ALG_NONE_SIGNED", none_head + "." + body + ".AAAA"))
rs = token("RS256", good, "rsa1")
vectors.append(("BAD_SIG", rs[:-6] + ("AAAAAA" if not rs.endswith("AAAAAA") else "BBBBBB")))
vectors.append(("TRUNCATED", rs[: rs.rindex(".")]))

with open("vectors.h", "w") as f:
    f.write("/* vectors.h: made by make_vectors.py (keys: openssl genpkey; signatures:\n"
            " * openssl dgst and pkeyutl).  The JWK set is jwks.json. */\n")
    for name, value in vectors:
        f.write(f'static const char jwt_{name.lower()}[] =\n')
        for i in range(0, len(value), 72):
            f.write(f'    "{value[i:i + 72]}"\n')
        f.write(";\n")
    text = json.dumps(jwks, separators=(",", ":"))
    f.write("static const char jwt_jwks[] =\n")
    for i in range(0, len(text), 72):
        chunk = text[i:i + 72].replace("\\", "\\\\").replace('"', '\\"')
        f.write(f'    "{chunk}"\n')
    f.write(";\n")
print("ok", len(vectors))
