# nginx as the benchmarks run it, sourced by bench-peers.sh, bench-overhead.sh and callgrind.sh
# so all measure the same proxy.
# nginx_conf DIR PORT WORKERS UPSTREAM...: writes DIR/nginx.conf, listening on 127.0.0.1:PORT
# and proxying to the UPSTREAMs (host:port, round robin) with no access log, keep-alive
# connections on both sides (no reconnects every 1,000 requests, nginx's default: lingo makes
# none) and no buffering (streams leave as they come, as through lingo).
nginx_conf() {
  local dir=$1 port=$2 workers=$3
  shift 3
  mkdir -p "$dir"
  cat >"$dir/nginx.conf" <<NGX
worker_processes $workers;
worker_rlimit_nofile 65536;
pid $dir/nginx.pid;
error_log $dir/error.log;
events { worker_connections 16384; }
http {
  access_log off;
  client_body_temp_path $dir/body;
  proxy_temp_path $dir/proxy;
  keepalive_requests 1000000;
  upstream mock { $(printf 'server %s; ' "$@") keepalive 64; keepalive_requests 1000000; }
  server {
    listen 127.0.0.1:$port;
    location / {
      proxy_pass http://mock;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
    }
  }
}
NGX
}
