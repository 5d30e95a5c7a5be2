# Shared by the eval/serve_*.sh scripts (sourced, not run).

# wait_up PORT: until GET /health answers 200 on 127.0.0.1:PORT (a server
# just started, loading its model), at most about three minutes.
wait_up() {
    for _ in $(seq 1 900); do
        curl -sf "http://127.0.0.1:$1/health" > /dev/null 2>&1 && return 0
        sleep 0.2
    done
    echo "server on port $1 did not come up" >&2
    return 1
}
