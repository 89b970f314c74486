package slots

import (
	_ "embed"

	"github.com/redis/go-redis/v9"
)

// The scripts run atomically on the Redis server and read its clock with
// TIME, so every process judges expiry by the same clock. go-redis sends them
// with EVALSHA and falls back to EVAL when the server does not know them yet.
var (
	//go:embed acquire.lua
	acquireSrc    string
	acquireScript = redis.NewScript(acquireSrc)

	//go:embed renew.lua
	renewSrc    string
	renewScript = redis.NewScript(renewSrc)

	//go:embed release.lua
	releaseSrc    string
	releaseScript = redis.NewScript(releaseSrc)

	//go:embed inuse.lua
	inUseSrc    string
	inUseScript = redis.NewScript(inUseSrc)

	//go:embed rebuild.lua
	rebuildSrc    string
	rebuildScript = redis.NewScript(rebuildSrc)
)
