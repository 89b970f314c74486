package embedded

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// Lock makes dir (if missing) and takes its lock, for as long as this
// process runs: a second run on the same data directory fails at once,
// naming the first. The kernel drops the lock when the process ends, by
// kill -9 too, so a lock is never stale; and while a run holds it, a
// PostgreSQL of dir that is still running belongs to no live run.
func Lock(dir string) (unlock func(), err error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("local data directory: %w", err)
	}
	path := filepath.Join(dir, "lock")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("local data directory lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		holder, _ := os.ReadFile(path)
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("another go run ./local (pid %s) is using %s: stop it, or set LOCAL_DATA_DIR to another folder",
				strings.TrimSpace(string(holder)), dir)
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	// The pid is only for that message; the lock is the flock.
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return func() { _ = f.Close() }, nil
}
