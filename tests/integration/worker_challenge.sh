#!/usr/bin/env bash
# A worker whose connection the supervisor never speaks on (its accept
# queue overflowed while thousands connected at once and a SYN cookie
# completed only the worker's side: tests/scale) must not wait forever: it
# gives up on that connection after 5 s without a CHALLENGE and connects
# again. Here a listener accepts and says nothing on the first connection,
# then answers the second with a CHALLENGE of another run: the worker must
# have connected twice, and then exit on the wrong run id.
source "$(dirname "$0")/lib.sh"
VERSION=$(sed -n 's/^#define FT_WIRE_VERSION \([0-9]*\).*/\1/p' "$FT_SRC/common/ft_wire.h")
[ -n "$VERSION" ] || fail "no FT_WIRE_VERSION in common/ft_wire.h"
python3 - "$FT_BIN/worker" "$FT_SRC/examples/demo.yaml" "$VERSION" <<'PY' || fail "the worker did not connect again"
import os, socket, struct, subprocess, sys, time
srv = socket.socket()
srv.bind(("127.0.0.1", 0))
srv.listen(8)
port = srv.getsockname()[1]
env = dict(os.environ, FT_RUN_TOKEN="ab" * 32)
w = subprocess.Popen([sys.argv[1], "--connect", "127.0.0.1:%d" % port, "--node", "0",
                      "--slot", "0", "--runfile", sys.argv[2]],
                     env=env, stderr=subprocess.PIPE, text=True)
srv.settimeout(20)
first, _ = srv.accept()  # held open, silent
t0 = time.time()
second, _ = srv.accept()
waited = time.time() - t0
# a CHALLENGE of another run: this wire version, type 1, run "other", gen 0, nonce
run = b"other"
payload = struct.pack(">I", len(run)) + run + struct.pack(">Q", 0) + os.urandom(32)
second.sendall(struct.pack(">IBB", len(payload) + 2, int(sys.argv[3]), 1) + payload)
err = w.communicate(timeout=20)[1]
print("second connection after %.1f s; worker exit %d" % (waited, w.returncode))
assert 4.0 <= waited <= 10.0, waited
assert "no CHALLENGE" in err and "connecting again" in err, err
assert w.returncode != 0, err
PY
pass "a silent control connection is given up after 5 s and made again"
