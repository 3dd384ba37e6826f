# Shared helpers for the S3 tests: a real S3-protocol server on loopback.
# Source it after lib.sh-style setup; needs $T (a temp folder of the test).
#
#   s3_start            starts moto_server (or s3rver) on 127.0.0.1:<free
#                       port>, sets FT_S3_ENDPOINT, fake AWS credentials and
#                       S3_PORT/S3_PID. Fails LOUDLY (exit 1) when no server
#                       can run: an S3 test never passes by not testing.
#   s3_mkbucket NAME    creates a bucket with a signed PUT (aws cli)
#   s3_stop             kills the server
#   aws_s3 ARGS...      the aws cli against the server
#   free_port           prints a free TCP port on 127.0.0.1

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

export AWS_ACCESS_KEY_ID=testing-key-id
export AWS_SECRET_ACCESS_KEY=testing-secret-key
unset AWS_SESSION_TOKEN AWS_PROFILE
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

s3_start() {
  S3_PORT=$(free_port)
  if command -v moto_server >/dev/null 2>&1 && moto_server --help >/dev/null 2>&1; then
    S3_KIND=moto
    moto_server -H 127.0.0.1 -p "$S3_PORT" >"$T/s3server.log" 2>&1 &
  elif command -v s3rver >/dev/null 2>&1 || [ -x "$FT_SRC/node_modules/.bin/s3rver" ]; then
    S3_KIND=s3rver
    local bin
    bin=$(command -v s3rver || echo "$FT_SRC/node_modules/.bin/s3rver")
    mkdir -p "$T/s3rver"
    "$bin" --address 127.0.0.1 --port "$S3_PORT" --directory "$T/s3rver" --silent \
      >"$T/s3server.log" 2>&1 &
  else
    echo "FAIL: no S3-protocol server can run here: neither moto_server (pip install"
    echo "      'moto[server]') nor s3rver (npm install s3rver in $FT_SRC) is installed"
    exit 1
  fi
  S3_PID=$!
  if ! s3_wait_port "$S3_PORT" "$S3_PID"; then
    echo "FAIL: the $S3_KIND server did not start on 127.0.0.1:$S3_PORT:"
    cat "$T/s3server.log"
    exit 1
  fi
  export FT_S3_ENDPOINT="http://127.0.0.1:$S3_PORT"
  echo "s3: $S3_KIND on $FT_S3_ENDPOINT (pid $S3_PID)"
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
