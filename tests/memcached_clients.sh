#!/usr/bin/env bash
# memcached_clients.sh — a memcached client library of another language
# against a fresh rkv-server's tcp door: the client script (tests/client.php,
# PHP's Memcached extension; tests/client_gomemcache.go, Go's gomemcache)
# does set/get/delete/incr/cas/multi-get/flush as its users write them and
# exits non-zero on the first answer that is not memcached's.
# Usage: memcached_clients.sh RKV_SERVER php|go SCRIPT
# Exit 77 (skipped) when the language's runtime or the client library is
# not installed (scripts/install-deps.sh installs both).
set -u
SERVER=$1 LANG_=$2 SCRIPT=$3

case $LANG_ in
php)
    command -v php >/dev/null 2>&1 || { echo "php not installed (php-cli): skipped"; exit 77; }
    php -r 'exit(class_exists("Memcached") ? 0 : 1);' ||
        { echo "PHP's Memcached extension not installed (php-memcached): skipped"; exit 77; }
    run=(php "$SCRIPT") ;;
go)
    command -v go >/dev/null 2>&1 || { echo "go not installed (golang-go): skipped"; exit 77; }
    GOPATH_DEB=/usr/share/gocode
    [[ -d $GOPATH_DEB/src/github.com/bradfitz/gomemcache/memcache ]] ||
        { echo "gomemcache not installed (golang-github-bradfitz-gomemcache-dev): skipped"; exit 77; }
    run=(go run "$SCRIPT") ;;
*)
    echo "usage: $0 RKV_SERVER php|go SCRIPT" >&2
    exit 2 ;;
esac

# shellcheck source=e2e.sh
. "$(dirname "$0")/e2e.sh"
e2e_init "client-$LANG_"
if [[ $LANG_ == go ]]; then
    # Debian's Go packages are a GOPATH tree; nothing is fetched
    export GO111MODULE=off GOPATH=$GOPATH_DEB GOCACHE=$TMP/gocache GOFLAGS=
fi

# a tcp door on a port drawn from the pid; a port someone holds makes the
# server exit, and the next is tried
up=0
for attempt in $(seq 0 19); do
    PORT=$(( 20000 + ($$ * 131 + 6133 + attempt * 7919) % 40000 ))
    e2e_server "$SERVER" --listen "tcp://127.0.0.1:$PORT" --memory 64M --log-level warn || continue
    for _ in $(seq 50); do
        if (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null; then up=1; break; fi
        kill -0 "$SPID" 2>/dev/null || break
        sleep 0.1
    done
    [[ $up == 1 ]] && break
    e2e_server_stop
done
[[ $up == 1 ]] || { cat "$TMP/server.log" >&2; echo "FAIL: rkv-server's tcp door did not open" >&2; exit 1; }

"${run[@]}" "127.0.0.1:$PORT"
rc=$?
[[ $rc == 0 ]] || { echo "FAIL: $LANG_ client exited $rc; server log:" >&2; cat "$TMP/server.log" >&2; exit 1; }
echo "$LANG_ client: every command answered as memcached answers"
