package providersim_test

import (
	"bytes"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/local/providersim"
)

// TestCacheDirIsPerUser: the default cache folder is the user's own, so a
// folder `make test` made as root does not break `make run` as nobody.
func TestCacheDirIsPerUser(t *testing.T) {
	t.Parallel()
	dir := providersim.DefaultCacheDir()
	require.Equal(t, os.TempDir(), filepath.Dir(dir))
	require.Contains(t, filepath.Base(dir), strconv.Itoa(os.Getuid()))

	// A cache path that is a file cannot be a cache: refused at start.
	file := filepath.Join(t.TempDir(), "f")
	require.NoError(t, os.WriteFile(file, nil, 0o600))
	o := providersim.DefaultOptions()
	o.CacheDir = file
	_, err := providersim.New(o, nil)
	require.ErrorContains(t, err, "cache dir")
}

// syncBuffer is a log sink the server's goroutines write to.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestUnreadableOutputIsLogged: a cached clip the simulator cannot open
// answers 500 and says in the log which file and why.
func TestUnreadableOutputIsLogged(t *testing.T) {
	t.Parallel()
	cache := t.TempDir()
	// A socket where the clip should be: it exists, and no one, root
	// included, can open it as a file.
	l, err := net.Listen("unix", filepath.Join(cache, "sim-v1-320x180-1s.mp4"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })

	var logs syncBuffer
	o := providersim.DefaultOptions()
	o.APIToken = token
	o.CacheDir = cache
	o.JobDurationMin, o.JobDurationMax = 10*time.Millisecond, 10*time.Millisecond
	sim, err := providersim.New(o, slog.New(slog.NewTextHandler(&logs, nil)))
	require.NoError(t, err)
	base, err := sim.Start(t.Context(), "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, sim.Close()) })
	b := &testBundle{sim: sim, base: base}

	id := b.create(t, map[string]any{"resolution": "480p"}, nil)["id"].(string)
	b.waitStatus(t, id, "succeeded")
	a := b.call(t, http.MethodGet, "/files/"+id+"/output.mp4", nil, nil)
	require.Equal(t, http.StatusInternalServerError, a.status)
	require.Contains(t, logs.String(), "cannot read a cached output")
	require.Contains(t, logs.String(), "sim-v1-320x180-1s.mp4")
	require.Contains(t, logs.String(), "job_id="+id)
}
