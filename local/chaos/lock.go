package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"time"
)

// lockBroker makes a run the only one on its services. Two runs against
// one broker share its consumer groups (the catalog's names), so each
// run's sources take the other's messages: the other run's functions find
// no such task and quarantine them, and this run waits for its reconciler
// to re-emit what it lost. The lock is an flock on a file named for the
// broker's endpoint, so the kernel drops it with the process, however it
// ends. It lives in dir (the temporary directory). A second run waits
// for the first; the returned func unlocks.
func lockBroker(ctx context.Context, dir, endpoint string) (func(), error) {
	name := regexp.MustCompile(`[^A-Za-z0-9]+`).ReplaceAllString(endpoint, "_")
	path := filepath.Join(dir, "aivedio-chaos-"+strings.Trim(name, "_")+".lock")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("chaos run lock: %w", err)
	}
	waiting := false
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			break
		}
		if err != syscall.EWOULDBLOCK {
			_ = f.Close()
			return nil, fmt.Errorf("chaos run lock %s: %w", path, err)
		}
		if !waiting {
			holder, _ := os.ReadFile(path)
			fmt.Printf("chaos: another run uses the broker at %s (%s); two runs would take each other's messages, so this one waits for it (lock %s)\n",
				endpoint, strings.TrimSpace(string(holder)), path)
			waiting = true
		}
		select {
		case <-ctx.Done():
			_ = f.Close()
			return nil, ctx.Err()
		case <-time.After(time.Second):
		}
	}
	_ = f.Truncate(0)
	_, _ = f.WriteAt([]byte(fmt.Sprintf("pid %d, since %s\n", os.Getpid(), time.Now().Format(time.TimeOnly))), 0)
	return func() { _ = f.Close() }, nil
}
