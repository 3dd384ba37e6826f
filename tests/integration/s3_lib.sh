# Shared helpers for the S3 tests: a real S3-protocol server on loopback that
# checks every signature, as AWS does. Source it after lib.sh-style setup;
# needs $T (a temp folder of the test) and $FT_SRC.
#
#   s3_start            starts moto_server with authentication enforced
#                       (chaos/moto_auth.py: an IAM user, an s3:* policy and
#                       an access key made through moto's IAM API, then
#                       reset-auth) on 127.0.0.1:<free port>; exports
#                       FT_S3_ENDPOINT and that key as AWS_ACCESS_KEY_ID /
#                       AWS_SECRET_ACCESS_KEY, sets S3_PORT/S3_PID. A wrong
#                       key or secret gets 403 from then on. Fails LOUDLY
#                       (exit 1) when moto cannot run: an S3 test never passes
#                       by not testing, and no server that skips signature
#                       checks stands in for it.
#   s3_mkbucket NAME    creates a bucket with a signed PUT (aws cli)
#   s3_stop             kills the server
#   aws_s3 ARGS...      the aws cli against the server (same key)
#   free_port           prints a free TCP port on 127.0.0.1
#   s3_proxy_start DIR  chaos/s3_faults.py in front of the server on a free
#                       port, its mode file DIR/mode (written "ok"), its log
#                       DIR/proxy.log; sets PP (its port) and PROXY_PID

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

unset AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY AWS_SESSION_TOKEN AWS_PROFILE
export AWS_DEFAULT_REGION=us-east-1 AWS_REGION=us-east-1
export AWS_EC2_METADATA_DISABLED=true
export AWS_SHARED_CREDENTIALS_FILE=/nonexistent AWS_CONFIG_FILE=/nonexistent

s3_wait_port() { # PORT PID
  for _ in $(seq 1 150); do
    if python3 -c 'import socket,sys; s=socket.socket(); s.settimeout(0.2); s.connect(("127.0.0.1",int(sys.argv[1])))' "$1" 2>/dev/null; then
      return 0
    fi
    kill -0 "$2" 2>/dev/null || return 1
    sleep 0.1
  done
  return 1
}

s3_proxy_start() { # DIR
  PP=$(free_port)
  echo ok >"$1/mode"
  python3 "$FT_SRC/chaos/s3_faults.py" --listen "$PP" --upstream "$S3_PORT" --mode-file "$1/mode" \
    --log "$1/proxy.log" >"$1/proxy.out" 2>&1 &
  PROXY_PID=$!
  s3_wait_port "$PP" "$PROXY_PID" || fail "proxy did not start: $(cat "$1/proxy.out")"
}

s3_start() {
  S3_PORT=$(free_port)
  S3_KIND=moto
  if ! python3 -c 'import moto.server, boto3' >/dev/null 2>&1; then
    echo "FAIL: moto_server cannot run here: python3 lacks moto (5.x, with its server"
    echo "      extra) or boto3; scripts/install-deps.sh installs them"
    exit 1
  fi
  rm -f "$T/s3keys"
  python3 "$FT_SRC/chaos/moto_auth.py" --port "$S3_PORT" --keys "$T/s3keys" \
    >"$T/s3server.log" 2>&1 &
  S3_PID=$!
  # ready = the keys file exists (authentication is on); up to 60 s on a busy box
  for _ in $(seq 1 600); do
    [ -s "$T/s3keys" ] && break
    kill -0 "$S3_PID" 2>/dev/null || break
    sleep 0.1
  done
  if [ ! -s "$T/s3keys" ]; then
    echo "FAIL: moto_server with authentication did not start on 127.0.0.1:$S3_PORT:"
    cat "$T/s3server.log"
    exit 1
  fi
  read -r AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY <"$T/s3keys"
  export AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY
  export FT_S3_ENDPOINT="http://127.0.0.1:$S3_PORT"
  echo "s3: moto (signatures checked) on $FT_S3_ENDPOINT (pid $S3_PID)"
}

s3_stop() {
  if [ -n "${S3_PID:-}" ]; then
    kill "$S3_PID" 2>/dev/null || true
    wait "$S3_PID" 2>/dev/null || true
    S3_PID=
  fi
}

aws_s3() {
  aws --endpoint-url "$FT_S3_ENDPOINT" "$@"
}

s3_mkbucket() {
  aws_s3 s3api create-bucket --bucket "$1" >/dev/null ||
    { echo "FAIL: cannot create bucket $1 at $FT_S3_ENDPOINT"; exit 1; }
}
