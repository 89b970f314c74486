// Command local will run the whole pipeline in one process with embedded
// defaults (in-process broker emulator, Redis and S3, the provider
// simulator). Until that emulator lands it says so and points at what runs
// today: the real services of `make services-up`.
package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, `go run ./local: the in-process emulator is not built yet.
What runs today: 'make services-up' starts real PostgreSQL, Redis, RocketMQ 5,
an S3 server and ffmpeg on 127.0.0.1; 'make test' runs every test against them.`)
	os.Exit(2)
}
