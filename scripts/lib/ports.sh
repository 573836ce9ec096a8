# free_port: a loopback port nothing listens on, for a server a script is about to start.
# Picked below the kernel's ephemeral range (ip_local_port_range), not by binding port 0:
# a port the kernel hands out for port 0 is an ephemeral one, and between this pick and the
# server's own bind (a second or more for a Python router) any outgoing connection (a curl
# readiness poll, a proxy's connection to its upstream) may be given it, and the server then
# fails with "address already in use" (seen with vllm-router in bench-peers.sh).
free_port() {
  python3 - <<'PY'
import random, socket
try:
    low = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
except OSError:
    low = 32768
rng = random.SystemRandom()
for _ in range(200):
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", rng.randrange(10000, low) if low > 11000 else 0))
        except OSError:
            continue
        print(s.getsockname()[1])
        break
PY
}
