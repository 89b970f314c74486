#!/usr/bin/env bash
# services.sh: install, start and stop the real services the tests need, on
# 127.0.0.1, with data under a temporary folder.
#
#   services.sh up      install what is missing, start everything, write the env file
#   services.sh down    stop what `up` started and remove its data
#   services.sh status  exit 0 when every service answers
#   services.sh env     print the env file (source it to reach the services)
#   services.sh restart-proxy
#                       stop the RocketMQ proxy (and its embedded broker) and start
#                       it again on the same data: the fault tests' broker restart
#   services.sh restart-postgres | restart-redis | restart-s3
#                       PostgreSQL in immediate mode (no checkpoint: crash recovery on
#                       start), Redis losing every key (it keeps nothing on disk), the
#                       S3 server on the same files: the chaos run's service faults
#
# PostgreSQL, Redis and ffmpeg come from Debian's packages; RocketMQ 5 (name
# server + proxy in local mode, broker embedded) from jars Maven resolves from
# Maven Central at a pinned version; the S3 server is versitygw (Apache-2.0)
# built with `go install` at a pinned version. Downloads are cached, so a second
# `up` downloads nothing. A second, small RocketMQ cluster (its own name
# server and proxy) runs with ACL 2.0 turned on, for the access-control
# tests; the main cluster has no ACL.
set -euo pipefail

ROCKETMQ_VERSION=5.3.3
VERSITYGW_VERSION=v1.8.0

DIR=${AIVEDIO_SERVICES_DIR:-/tmp/aivedio-services}
CACHE=${AIVEDIO_CACHE_DIR:-$HOME/.cache/aivedio}
PG_PORT=${AIVEDIO_PG_PORT:-55432}
REDIS_PORT=${AIVEDIO_REDIS_PORT:-56379}
NAMESRV_PORT=${AIVEDIO_NAMESRV_PORT:-59876}
PROXY_GRPC_PORT=${AIVEDIO_PROXY_GRPC_PORT:-58081}
PROXY_REMOTING_PORT=${AIVEDIO_PROXY_REMOTING_PORT:-58080}
BROKER_PORT=${AIVEDIO_BROKER_PORT:-50911}
BROKER_METRICS_PORT=${AIVEDIO_BROKER_METRICS_PORT:-55557}
S3_PORT=${AIVEDIO_S3_PORT:-57070}
ACL_NAMESRV_PORT=${AIVEDIO_ACL_NAMESRV_PORT:-59886}
ACL_PROXY_GRPC_PORT=${AIVEDIO_ACL_PROXY_GRPC_PORT:-58181}
ACL_PROXY_REMOTING_PORT=${AIVEDIO_ACL_PROXY_REMOTING_PORT:-58180}
ACL_BROKER_PORT=${AIVEDIO_ACL_BROKER_PORT:-50931}
ACL_BROKER_METRICS_PORT=${AIVEDIO_ACL_BROKER_METRICS_PORT:-55567}
# The ACL cluster's super user, made by its broker on first start.
ACL_ADMIN_USER=aivedio-admin
ACL_ADMIN_PASSWORD=aivedio-acl-admin-secret
S3_ACCESS_KEY=aivedio
S3_SECRET_KEY=aivedio-test-secret
ROCKETMQ_LIB=$CACHE/rocketmq-$ROCKETMQ_VERSION/lib
GOBIN_DIR=$(go env GOPATH)/bin

log() { printf 'services: %s\n' "$*" >&2; }
# die names the cause and the fix on one line, then stops.
die() { printf 'services: FAILED: %s\n' "$*" >&2; exit 1; }

as_postgres() {
	if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# show_log prints the end of a log on stderr: `down` removes $DIR after a
# failed start, and the log is then the only trace of why.
show_log() { # logfile
	[ -f "$1" ] || return 0
	printf 'services: the last lines of %s:\n' "$1" >&2
	tail -n 25 "$1" | sed 's/^/services:   /' >&2
}

# await_port waits for a port to open; it returns 1 on timeout and 2 as soon
# as the process in the pid file (when one is named) has exited.
await_port() { # port seconds [pidname]
	local i
	for ((i = 0; i < $2 * 5; i++)); do
		port_open "$1" && return 0
		if [ -n "${3:-}" ] && ! alive "$3"; then return 2; fi
		sleep 0.2
	done
	return 1
}

wait_port() { # name port seconds logfile [pidname]
	local rc=0
	await_port "$2" "$3" "${5:-}" || rc=$?
	[ "$rc" = 0 ] && return 0
	show_log "$4"
	[ "$rc" = 2 ] && die "$1 exited before opening 127.0.0.1:$2; see $4"
	die "$1 did not open 127.0.0.1:$2 within $3s; see $4"
}

# start_java starts a RocketMQ JVM and waits for its port, trying a second
# time when the first JVM exits or stays silent: a JVM start on a loaded
# two-core machine can stall past any fixed bound, and one stall must not fail
# a whole `make test`.
start_java() { # pidname port seconds logfile java-args...
	local name=$1 port=$2 secs=$3 logf=$4 try rc
	shift 4
	for try in 1 2; do
		nohup java "$@" >"$logf" 2>&1 &
		echo $! >"$DIR/$name.pid"
		rc=0
		await_port "$port" "$secs" "$name" || rc=$?
		[ "$rc" = 0 ] && return 0
		show_log "$logf"
		[ "$try" = 2 ] && break
		log "$name did not open 127.0.0.1:$port (try $try of 2: $([ "$rc" = 2 ] && echo exited || echo "silent for ${secs}s")); starting it again"
		stop_pid "$name"
		cp "$logf" "$logf.try$try" 2>/dev/null || true
	done
	die "$name did not open 127.0.0.1:$port in two tries of ${secs}s; see $logf"
}

alive() { [ -f "$DIR/$1.pid" ] && kill -0 "$(cat "$DIR/$1.pid")" 2>/dev/null; }

check_port_free() { # name port variable
	if port_open "$2" && ! alive "$1"; then
		die "port 127.0.0.1:$2 for $1 is taken by another process; stop it or set $3 to a free port"
	fi
}

preflight() {
	command -v go >/dev/null || die "go is not on PATH; install Go 1.24+"
	command -v java >/dev/null || die "java is not on PATH; install a JDK 17 (apt-get install openjdk-17-jre-headless)"
	command -v mvn >/dev/null || [ -f "$ROCKETMQ_LIB/.complete" ] ||
		die "mvn is not on PATH and RocketMQ jars are not cached; apt-get install maven"
	mkdir -p "$DIR" "$CACHE"
	local used avail
	used=$(df --output=pcent "$DIR" | tail -n1 | tr -dc 0-9)
	avail=$(df --output=avail -k "$DIR" | tail -n1 | tr -dc 0-9)
	# The broker refuses writes past 75% disk use by default, and needs room for its commit log.
	if [ "$used" -ge 90 ] || [ "$avail" -lt $((2 * 1024 * 1024)) ]; then
		die "disk under $DIR is nearly full (${used}% used, $((avail / 1024)) MiB free); free 2 GiB or set AIVEDIO_SERVICES_DIR elsewhere"
	fi
}

apt_install() { # packages...
	local missing=()
	for p in "$@"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
	[ ${#missing[@]} -eq 0 ] && return 0
	log "installing Debian packages: ${missing[*]}"
	local sudo=""
	[ "$(id -u)" = 0 ] || sudo=sudo
	$sudo apt-get update -qq >"$DIR/apt.log" 2>&1 || die "apt-get update failed; see $DIR/apt.log"
	DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >>"$DIR/apt.log" 2>&1 ||
		die "apt-get install ${missing[*]} failed; see $DIR/apt.log"
}

pg_bin() {
	local d
	d=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n1)
	[ -n "$d" ] || die "PostgreSQL binaries not found under /usr/lib/postgresql; apt-get install postgresql"
	echo "$d"
}

start_postgres() {
	local bin data=$DIR/pg
	bin=$(pg_bin)
	if as_postgres "$bin/pg_ctl" -D "$data" status >/dev/null 2>&1; then return 0; fi
	check_port_free postgres "$PG_PORT" AIVEDIO_PG_PORT
	if [ ! -f "$data/PG_VERSION" ]; then
		mkdir -p "$data"
		[ "$(id -u)" = 0 ] && chown postgres:postgres "$data"
		as_postgres "$bin/initdb" -D "$data" -U aivedio --auth=trust -E UTF8 >"$DIR/pg-init.log" 2>&1 ||
			die "initdb failed; see $DIR/pg-init.log"
	fi
	touch "$DIR/postgres.log"
	[ "$(id -u)" = 0 ] && chown postgres:postgres "$DIR/postgres.log"
	# fsync stays on: tests measure the durable path the product runs on.
	as_postgres "$bin/pg_ctl" -D "$data" -l "$DIR/postgres.log" -w -t 60 \
		-o "-p $PG_PORT -c listen_addresses=127.0.0.1 -k $data -c max_connections=200" start >/dev/null ||
		{ show_log "$DIR/postgres.log"; die "PostgreSQL did not start; see $DIR/postgres.log"; }
	as_postgres "$bin/psql" -h 127.0.0.1 -p "$PG_PORT" -U aivedio -d postgres -tAc \
		"SELECT 1 FROM pg_database WHERE datname='aivedio'" | grep -q 1 ||
		as_postgres "$bin/createdb" -h 127.0.0.1 -p "$PG_PORT" -U aivedio aivedio
}

start_redis() {
	alive redis && return 0
	check_port_free redis "$REDIS_PORT" AIVEDIO_REDIS_PORT
	mkdir -p "$DIR/redis"
	redis-server --bind 127.0.0.1 --port "$REDIS_PORT" --dir "$DIR/redis" --save '' --appendonly no \
		--daemonize yes --pidfile "$DIR/redis.pid" --logfile "$DIR/redis.log" ||
		die "redis-server did not start; see $DIR/redis.log"
	# Not by its pid file: the daemon writes it a moment after it forks.
	wait_port redis "$REDIS_PORT" 20 "$DIR/redis.log"
}

install_versitygw() {
	local bin=$GOBIN_DIR/versitygw stamp=$CACHE/versitygw-$VERSITYGW_VERSION.installed
	[ -x "$bin" ] && [ -f "$stamp" ] && return 0
	log "building versitygw $VERSITYGW_VERSION with go install (about 1.5 minutes, once)"
	go install "github.com/versity/versitygw/cmd/versitygw@$VERSITYGW_VERSION" >"$DIR/versitygw-install.log" 2>&1 ||
		die "go install versitygw failed (is the Go module proxy reachable?); see $DIR/versitygw-install.log"
	touch "$stamp"
}

start_s3() {
	alive s3 && return 0
	check_port_free s3 "$S3_PORT" AIVEDIO_S3_PORT
	mkdir -p "$DIR/s3"
	ROOT_ACCESS_KEY=$S3_ACCESS_KEY ROOT_SECRET_KEY=$S3_SECRET_KEY \
		nohup "$GOBIN_DIR/versitygw" --port "127.0.0.1:$S3_PORT" posix "$DIR/s3" >"$DIR/s3.log" 2>&1 &
	echo $! >"$DIR/s3.pid"
	wait_port s3 "$S3_PORT" 30 "$DIR/s3.log" s3
}

install_rocketmq() {
	[ -f "$ROCKETMQ_LIB/.complete" ] && return 0
	log "resolving RocketMQ $ROCKETMQ_VERSION jars from Maven Central (once)"
	local pom tmp
	pom=$(mktemp -d)
	tmp=$ROCKETMQ_LIB.partial
	rm -rf "$tmp"
	cat >"$pom/pom.xml" <<EOF
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>local.aivedio</groupId><artifactId>rocketmq-runtime</artifactId><version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency><groupId>org.apache.rocketmq</groupId><artifactId>rocketmq-proxy</artifactId><version>$ROCKETMQ_VERSION</version></dependency>
    <dependency><groupId>org.apache.rocketmq</groupId><artifactId>rocketmq-namesrv</artifactId><version>$ROCKETMQ_VERSION</version></dependency>
    <dependency><groupId>org.apache.rocketmq</groupId><artifactId>rocketmq-tools</artifactId><version>$ROCKETMQ_VERSION</version></dependency>
  </dependencies>
</project>
EOF
	(cd "$pom" && mvn -q -B dependency:copy-dependencies -DoutputDirectory="$tmp") >"$DIR/maven.log" 2>&1 ||
		die "Maven could not resolve RocketMQ $ROCKETMQ_VERSION (is Maven Central reachable?); see $DIR/maven.log"
	rm -rf "$pom" "$ROCKETMQ_LIB"
	mv "$tmp" "$ROCKETMQ_LIB"
	touch "$ROCKETMQ_LIB/.complete"
}

write_rocketmq_config() { # home cluster broker namesrv-port broker-port grpc-port remoting-port metrics-port [acl]
	local home=$1 cluster=$2 broker=$3 namesrv=$4 broker_port=$5 grpc=$6 remoting=$7 metrics=$8 acl=${9:-}
	mkdir -p "$home/conf" "$home/store"
	cat >"$home/conf/namesrv.properties" <<EOF
listenPort=$namesrv
bindAddress=127.0.0.1
EOF
	cat >"$home/conf/broker.conf" <<EOF
brokerClusterName=$cluster
brokerName=$broker
brokerId=0
brokerIP1=127.0.0.1
brokerIP2=127.0.0.1
bindAddress=127.0.0.1
listenPort=$broker_port
namesrvAddr=127.0.0.1:$namesrv
storePathRootDir=$home/store
storePathCommitLog=$home/store/commitlog
# Small files: the default preallocates 1 GiB per commit-log file.
mappedFileSizeCommitLog=67108864
mappedFileSizeConsumeQueue=600000
# Topics and groups come from the catalog, never from auto-creation.
autoCreateTopicEnable=false
autoCreateSubscriptionGroup=false
enableTopicMessageTypeCheck=true
diskMaxUsedSpaceRatio=90
flushDiskType=ASYNC_FLUSH
# The timer wheel's flush thread (wheel, log, checkpoint and a metrics file
# of every topic) costs 7% of a core per broker even idle when it runs every
# second; every 30 s halves a broker's idle CPU. After a crash, delayed
# messages may then come once more from the older checkpoint: at least once,
# as always.
timerFlushIntervalMs=30000
# The broker's own metrics (consumer lag, ready and in-flight messages,
# queueing latency, storage retention) in Prometheus format on
# ROCKETMQ_METRICS_URL.
metricsExporterType=PROM
metricsPromExporterHost=127.0.0.1
metricsPromExporterPort=$metrics
EOF
	local proxy_auth=""
	if [ -n "$acl" ]; then
		# ACL 2.0: the broker keeps users and ACLs (RocksDB under its store)
		# and makes the super user on first start; the proxy, in local mode,
		# asks the embedded broker for them.
		cat >>"$home/conf/broker.conf" <<EOF
authenticationEnabled=true
authenticationProvider=org.apache.rocketmq.auth.authentication.provider.DefaultAuthenticationProvider
authenticationMetadataProvider=org.apache.rocketmq.auth.authentication.provider.LocalAuthenticationMetadataProvider
authorizationEnabled=true
authorizationProvider=org.apache.rocketmq.auth.authorization.provider.DefaultAuthorizationProvider
authorizationMetadataProvider=org.apache.rocketmq.auth.authorization.provider.LocalAuthorizationMetadataProvider
initAuthenticationUser={"username":"$ACL_ADMIN_USER","password":"$ACL_ADMIN_PASSWORD"}
innerClientAuthenticationCredentials={"accessKey":"$ACL_ADMIN_USER","secretKey":"$ACL_ADMIN_PASSWORD"}
EOF
		proxy_auth=$(
			cat <<EOF
,
  "authenticationEnabled": true,
  "authenticationProvider": "org.apache.rocketmq.auth.authentication.provider.DefaultAuthenticationProvider",
  "authenticationMetadataProvider": "org.apache.rocketmq.proxy.auth.ProxyAuthenticationMetadataProvider",
  "authorizationEnabled": true,
  "authorizationProvider": "org.apache.rocketmq.auth.authorization.provider.DefaultAuthorizationProvider",
  "authorizationMetadataProvider": "org.apache.rocketmq.proxy.auth.ProxyAuthorizationMetadataProvider",
  "innerClientAuthenticationCredentials": "{\"accessKey\":\"$ACL_ADMIN_USER\",\"secretKey\":\"$ACL_ADMIN_PASSWORD\"}"
EOF
		)
	fi
	cat >"$home/conf/rmq-proxy.json" <<EOF
{
  "rocketMQClusterName": "$cluster",
  "namesrvAddr": "127.0.0.1:$namesrv",
  "grpcServerPort": $grpc,
  "remotingListenPort": $remoting,
  "enableTopicMessageTypeCheck": true,
  "topicRouteServiceCacheRefreshSeconds": 1$proxy_auth
}
EOF
}

java_opts() { # heap home
	echo "-Xms$1 -Xmx$1 -XX:+UseG1GC -XX:MaxDirectMemorySize=256m -Duser.home=$2 -Drocketmq.home.dir=$2"
}

start_rocketmq() { # home name-prefix namesrv-port grpc-port broker-port heap
	local home=$1 p=$2 namesrv=$3 grpc=$4 broker_port=$5 heap=$6 var=AIVEDIO_${2^^}
	export ROCKETMQ_HOME=$home
	if ! alive "${p}namesrv"; then
		check_port_free "${p}namesrv" "$namesrv" "${var}NAMESRV_PORT"
		# shellcheck disable=SC2046
		start_java "${p}namesrv" "$namesrv" 90 "$DIR/${p}namesrv.log" \
			$(java_opts 128m "$home") -cp "$ROCKETMQ_LIB/*" org.apache.rocketmq.namesrv.NamesrvStartup \
			-c "$home/conf/namesrv.properties"
	fi
	if ! alive "${p}proxy"; then
		local blog="$home/logs/rocketmqlogs/broker.log" before=0 i
		[ -f "$blog" ] && before=$(grep -c "$REGISTERED" "$blog" || true)
		check_port_free "${p}proxy" "$grpc" "${var}PROXY_GRPC_PORT"
		check_port_free "${p}proxy" "$broker_port" "${var}BROKER_PORT"
		# shellcheck disable=SC2046
		start_java "${p}proxy" "$grpc" 150 "$DIR/${p}proxy.log" \
			$(java_opts "$heap" "$home") -cp "$ROCKETMQ_LIB/*" org.apache.rocketmq.proxy.ProxyStartup \
			-pm local -n "127.0.0.1:$namesrv" -pc "$home/conf/rmq-proxy.json" -bc "$home/conf/broker.conf"
		wait_port "RocketMQ ${p}broker" "$broker_port" 60 "$DIR/${p}proxy.log" "${p}proxy"
		# Until its broker registered with the name server, no client and
		# no admin command can find a route: `topics apply` fails with
		# "connect to null".
		for ((i = 0; i < 300; i++)); do
			[ "$(grep -c "$REGISTERED" "$blog" 2>/dev/null || true)" -gt "$before" ] && break
			sleep 0.2
		done
		[ "$i" -lt 300 ] || die "the ${p}broker did not register with its name server within 60s; see $blog"
	fi
}

# REGISTERED is what a broker logs once it registered with its name server.
REGISTERED="Registering current broker to name server completed"

start_main_rocketmq() {
	start_rocketmq "$DIR/rocketmq" "" "$NAMESRV_PORT" "$PROXY_GRPC_PORT" "$BROKER_PORT" 512m
}

# start_acl_rocketmq starts the second cluster, with ACL 2.0 on.
start_acl_rocketmq() {
	start_rocketmq "$DIR/rocketmq-acl" acl_ "$ACL_NAMESRV_PORT" "$ACL_PROXY_GRPC_PORT" "$ACL_BROKER_PORT" 256m
	# The admin tool signs its requests with $ROCKETMQ_HOME/conf/tools.yml.
	cat >"$DIR/rocketmq-acl/conf/tools.yml" <<EOF
accessKey: $ACL_ADMIN_USER
secretKey: $ACL_ADMIN_PASSWORD
EOF
}

write_env() {
	cat >"$DIR/env" <<EOF
export DATABASE_URL='postgres://aivedio@127.0.0.1:$PG_PORT/aivedio?sslmode=disable'
export REDIS_URL='redis://127.0.0.1:$REDIS_PORT/0'
export ROCKETMQ_ENDPOINT='127.0.0.1:$PROXY_GRPC_PORT'
export ROCKETMQ_NAMESRV='127.0.0.1:$NAMESRV_PORT'
export ROCKETMQ_CLUSTER='DefaultCluster'
export ROCKETMQ_METRICS_URL='http://127.0.0.1:$BROKER_METRICS_PORT/metrics'
export ROCKETMQ_ADMIN_CLASSPATH='$ROCKETMQ_LIB/*'
export ROCKETMQ_ACL_ENDPOINT='127.0.0.1:$ACL_PROXY_GRPC_PORT'
export ROCKETMQ_ACL_NAMESRV='127.0.0.1:$ACL_NAMESRV_PORT'
export ROCKETMQ_ACL_CLUSTER='AclCluster'
export ROCKETMQ_ACL_BROKER='127.0.0.1:$ACL_BROKER_PORT'
export ROCKETMQ_ACL_ADMIN_ACCESS_KEY='$ACL_ADMIN_USER'
export ROCKETMQ_ACL_ADMIN_SECRET_KEY='$ACL_ADMIN_PASSWORD'
export S3_ENDPOINT='http://127.0.0.1:$S3_PORT'
export S3_REGION='us-east-1'
export S3_ACCESS_KEY_ID='$S3_ACCESS_KEY'
export S3_SECRET_ACCESS_KEY='$S3_SECRET_KEY'
export FFMPEG_PATH='$(command -v ffmpeg)'
export FFPROBE_PATH='$(command -v ffprobe)'
EOF
}

up() {
	preflight
	apt_install postgresql redis-server ffmpeg
	install_versitygw
	install_rocketmq
	start_postgres
	start_redis
	start_s3
	write_rocketmq_config "$DIR/rocketmq" DefaultCluster broker-a "$NAMESRV_PORT" "$BROKER_PORT" "$PROXY_GRPC_PORT" "$PROXY_REMOTING_PORT" "$BROKER_METRICS_PORT"
	write_rocketmq_config "$DIR/rocketmq-acl" AclCluster broker-acl "$ACL_NAMESRV_PORT" "$ACL_BROKER_PORT" "$ACL_PROXY_GRPC_PORT" "$ACL_PROXY_REMOTING_PORT" "$ACL_BROKER_METRICS_PORT" acl
	start_main_rocketmq
	start_acl_rocketmq
	write_env
	log "up: PostgreSQL :$PG_PORT, Redis :$REDIS_PORT, RocketMQ $ROCKETMQ_VERSION proxy :$PROXY_GRPC_PORT (namesrv :$NAMESRV_PORT), with ACL :$ACL_PROXY_GRPC_PORT (namesrv :$ACL_NAMESRV_PORT), versitygw $VERSITYGW_VERSION :$S3_PORT; env in $DIR/env"
}

stop_pid() { # name
	alive "$1" || { rm -f "$DIR/$1.pid"; return 0; }
	local pid i
	pid=$(cat "$DIR/$1.pid")
	kill "$pid" 2>/dev/null || true
	for ((i = 0; i < 150; i++)); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.2
	done
	if kill -9 "$pid" 2>/dev/null; then
		# Its sockets close only once the process is gone.
		for ((i = 0; i < 50; i++)); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.1
		done
	fi
	rm -f "$DIR/$1.pid"
}

down() {
	[ -d "$DIR" ] || return 0
	stop_pid proxy
	stop_pid namesrv
	stop_pid acl_proxy
	stop_pid acl_namesrv
	stop_pid s3
	stop_pid redis
	if [ -f "$DIR/pg/PG_VERSION" ]; then
		as_postgres "$(pg_bin)/pg_ctl" -D "$DIR/pg" -m fast -w stop >/dev/null 2>&1 || true
	fi
	rm -rf "$DIR"
	log "down: stopped and removed $DIR"
}

status() {
	local ok=0
	port_open "$PG_PORT" || { log "PostgreSQL is not answering on :$PG_PORT"; ok=1; }
	port_open "$REDIS_PORT" || { log "Redis is not answering on :$REDIS_PORT"; ok=1; }
	port_open "$PROXY_GRPC_PORT" || { log "RocketMQ proxy is not answering on :$PROXY_GRPC_PORT"; ok=1; }
	port_open "$ACL_PROXY_GRPC_PORT" || { log "RocketMQ proxy with ACL is not answering on :$ACL_PROXY_GRPC_PORT"; ok=1; }
	port_open "$S3_PORT" || { log "S3 server is not answering on :$S3_PORT"; ok=1; }
	[ -f "$DIR/env" ] || { log "no env file at $DIR/env"; ok=1; }
	return $ok
}

# restart_proxy returns once the restarted broker registered with the name
# server (start_rocketmq waits for it): before that no client can look up a
# topic's route, so a consumer cannot start, whatever it does.
restart_proxy() {
	[ -f "$DIR/env" ] || die "services are not up (no $DIR/env); run services.sh up first"
	stop_pid proxy
	# The fault tests wait for this line: from now on no request of a
	# client reaches the old broker, not even on a connection it had open.
	log "restart-proxy: the proxy process is gone"
	start_main_rocketmq
	log "restart-proxy: RocketMQ proxy back on :$PROXY_GRPC_PORT, its broker registered with the name server"
}

restart_postgres() {
	[ -f "$DIR/env" ] || die "services are not up (no $DIR/env); run services.sh up first"
	as_postgres "$(pg_bin)/pg_ctl" -D "$DIR/pg" -m immediate -w -t 60 restart >/dev/null ||
		die "PostgreSQL did not come back; see $DIR/postgres.log"
	log "restart-postgres: PostgreSQL back on :$PG_PORT after an immediate-mode stop"
}

restart_redis() {
	[ -f "$DIR/env" ] || die "services are not up (no $DIR/env); run services.sh up first"
	stop_pid redis
	start_redis
	log "restart-redis: Redis back on :$REDIS_PORT, empty"
}

restart_s3() {
	[ -f "$DIR/env" ] || die "services are not up (no $DIR/env); run services.sh up first"
	stop_pid s3
	start_s3
	log "restart-s3: S3 server back on :$S3_PORT"
}

case "${1:-}" in
up) up ;;
restart-proxy) restart_proxy ;;
restart-postgres) restart_postgres ;;
restart-redis) restart_redis ;;
restart-s3) restart_s3 ;;
down) down ;;
status) status ;;
env) cat "$DIR/env" ;;
*)
	echo "usage: $0 up|down|status|env|restart-proxy|restart-postgres|restart-redis|restart-s3" >&2
	exit 2
	;;
esac
