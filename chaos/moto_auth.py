#!/usr/bin/env python3
"""moto_auth.py: moto_server with authentication enforced, for the S3 tests,
the S3 chaos suite and the S3 benchmark (tests/integration/s3_lib.sh and
chaos/chaos.py start it; nothing in the product does).

    python3 chaos/moto_auth.py --port PORT --keys FILE [--host 127.0.0.1]

Starts moto's server on HOST:PORT, creates through moto's IAM API (boto3
against the server itself) a user, a policy allowing s3:* and an access key,
then switches authentication on (POST /moto-api/reset-auth, body 0). From
then on every request must carry a valid SigV4 signature of that key: a
wrong key id or a wrong secret gets 403, as on AWS. FILE receives one line,
"ACCESS_KEY_ID SECRET_ACCESS_KEY", once the server checks signatures (it is
written to FILE.tmp and renamed: its presence means "ready").

One fix to moto (5.x) is applied here, or it would refuse requests that AWS
accepts: moto recomputes the signature from werkzeug's IRI form of the URL,
in which the query is percent-decoded ("prefix=a%2Fb" becomes "prefix=a/b")
and non-ASCII path bytes too, so even the AWS CLI's own listing with a
prefix containing '/' gets SignatureDoesNotMatch. Here the path and query are
put back in the canonical form that S3 computes (every byte but A-Z a-z 0-9
- . _ ~ percent-encoded; '/' kept in the path) before moto signs them, and
the path is split with urlsplit (moto's urlparse cuts ";..." off it). A key
with a literal '%' still cannot be checked by moto: werkzeug hands it the
path already decoded, so "%41" and "A" look the same to it.
"""
import argparse
import json
import os
import socket
import sys
import threading
import time
import urllib.parse
import urllib.request

from moto.core import authorization
from moto.iam import access_control
from moto.server import main as moto_main

_create = access_control.IAMRequestBase._create_aws_request


def _canonical_url(path):
    p, _, q = path.partition("?")
    p = urllib.parse.quote(urllib.parse.unquote_to_bytes(p), safe="/-_.~")
    pairs = []
    for part in q.split("&") if q else []:
        k, _, v = part.partition("=")
        pairs.append(
            urllib.parse.quote(urllib.parse.unquote_to_bytes(k), safe="-_.~") + "=" +
            urllib.parse.quote(urllib.parse.unquote_to_bytes(v), safe="-_.~"))
    return p + ("?" + "&".join(pairs) if pairs else "")


def _create_aws_request(self):
    saved = self._path
    self._path = _canonical_url(saved)
    try:
        return _create(self)
    finally:
        self._path = saved


access_control.IAMRequestBase._create_aws_request = _create_aws_request
# moto splits the URL it signs with urlparse, which cuts ";x" off the last
# path segment as "parameters": a key with ';' could never be signed right
authorization.urlparse = urllib.parse.urlsplit


def wait_port(host, port, timeout=60.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            socket.create_connection((host, port), timeout=0.2).close()
            return True
        except OSError:
            time.sleep(0.05)
    return False


def setup_auth(host, port, keys):
    try:
        import boto3
        ep = f"http://{host}:{port}"
        if not wait_port(host, port):
            raise RuntimeError(f"moto did not listen on {ep}")
        iam = boto3.client("iam", endpoint_url=ep, region_name="us-east-1",
                           aws_access_key_id="bootstrap", aws_secret_access_key="bootstrap")
        iam.create_user(UserName="ft-test")
        doc = {"Version": "2012-10-17",
               "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]}
        pol = iam.create_policy(PolicyName="ft-s3-all", PolicyDocument=json.dumps(doc))
        iam.attach_user_policy(UserName="ft-test", PolicyArn=pol["Policy"]["Arn"])
        key = iam.create_access_key(UserName="ft-test")["AccessKey"]
        req = urllib.request.Request(ep + "/moto-api/reset-auth", data=b"0", method="POST",
                                     headers={"Content-Type": "text/plain"})
        urllib.request.urlopen(req, timeout=30).read()
        with open(keys + ".tmp", "w") as f:
            f.write(f"{key['AccessKeyId']} {key['SecretAccessKey']}\n")
        os.rename(keys + ".tmp", keys)
    except Exception as e:  # the harness sees no keys file and the log says why
        sys.stderr.write(f"moto_auth: setting up authentication failed: {e!r}\n")
        sys.stderr.flush()
        os._exit(1)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--keys", required=True)
    a = ap.parse_args()
    threading.Thread(target=setup_auth, args=(a.host, a.port, a.keys), daemon=True).start()
    moto_main(["-H", a.host, "-p", str(a.port)])


if __name__ == "__main__":
    main()
