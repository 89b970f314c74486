package embedded

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// How long a PostgreSQL is given to stop after a fast shutdown (SIGINT:
// sessions ended, a checkpoint, exit), and then after an immediate one
// (SIGQUIT), before it is killed.
const (
	fastStopWait      = 30 * time.Second
	immediateStopWait = 10 * time.Second
)

// stopOrphan stops the PostgreSQL that postmaster.pid in data names, if it
// is alive and serves data, and removes the pid file when its process is
// gone or is some other program (a pid reused since). PostgreSQL itself
// refuses to start while the file names a live process, whichever it is.
func stopOrphan(data string, logs io.Writer) error {
	pid, err := postmasterPID(data)
	if err != nil || pid == 0 {
		return err
	}
	pidFile := filepath.Join(data, "postmaster.pid")
	if !alive(pid) {
		fmt.Fprintf(logs, "removing the stale %s of process %d, which is gone\n", pidFile, pid)
		return removeIfExists(pidFile)
	}
	ours, err := servesData(pid, data)
	if errors.Is(err, errNoProc) {
		return fmt.Errorf("%s names the live process %d, which may be a PostgreSQL an earlier run left behind: "+
			"stop it (kill -INT %d) or remove the file if it is another program", pidFile, pid, pid)
	}
	if err != nil {
		return err
	}
	if !ours {
		fmt.Fprintf(logs, "removing %s: process %d is not a PostgreSQL of this data directory (a reused pid)\n", pidFile, pid)
		return removeIfExists(pidFile)
	}
	fmt.Fprintln(os.Stderr, "stopping the embedded PostgreSQL (pid", strconv.Itoa(pid)+") that an earlier run of this data directory left behind")
	return stopPostmaster(data, logs)
}

// stopPostmaster stops the PostgreSQL serving data and waits until it is
// gone: a fast shutdown, then an immediate one, then SIGKILL. Signals work
// for root and for the user PostgreSQL runs as alike, where pg_ctl refuses
// to run as root.
func stopPostmaster(data string, logs io.Writer) error {
	pid, err := postmasterPID(data)
	if err != nil || pid == 0 || !alive(pid) {
		return err
	}
	steps := []struct {
		sig  syscall.Signal
		wait time.Duration
	}{{syscall.SIGINT, fastStopWait}, {syscall.SIGQUIT, immediateStopWait}, {syscall.SIGKILL, immediateStopWait}}
	for _, s := range steps {
		if err := syscall.Kill(pid, s.sig); err != nil && !errors.Is(err, syscall.ESRCH) {
			return fmt.Errorf("stop embedded postgres (pid %d): %w", pid, err)
		}
		if waitGone(pid, s.wait) {
			if s.sig == syscall.SIGKILL {
				// A killed postmaster leaves its pid file behind.
				return removeIfExists(filepath.Join(data, "postmaster.pid"))
			}
			return nil
		}
		fmt.Fprintf(logs, "embedded postgres (pid %d) still running %s after %s\n", pid, s.wait, s.sig)
	}
	return fmt.Errorf("embedded postgres (pid %d) did not stop", pid)
}

// postmasterPID reads the pid on the first line of data/postmaster.pid; 0
// when there is no such file.
func postmasterPID(data string) (int, error) {
	b, err := os.ReadFile(filepath.Join(data, "postmaster.pid"))
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("read postmaster.pid: %w", err)
	}
	first, _, _ := strings.Cut(string(b), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(first))
	if err != nil || pid <= 0 {
		// Torn while it was written: PostgreSQL writes it before anything
		// else, so nothing runs on its behalf yet.
		return 0, removeIfExists(filepath.Join(data, "postmaster.pid"))
	}
	return pid, nil
}

// alive reports whether pid is a running process. A zombie is not: in a
// container whose init does not reap, a stopped orphan stays one.
func alive(pid int) bool {
	if err := syscall.Kill(pid, 0); err != nil && !errors.Is(err, syscall.EPERM) {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return !errors.Is(err, os.ErrNotExist) || !procMounted()
	}
	// The state follows the command name in parentheses, which may itself
	// hold spaces and parentheses.
	if i := strings.LastIndexByte(string(stat), ')'); i >= 0 && i+2 < len(stat) {
		return stat[i+2] != 'Z'
	}
	return true
}

// waitGone polls until pid has ended or wait has passed.
func waitGone(pid int, wait time.Duration) bool {
	deadline := time.Now().Add(wait)
	for alive(pid) {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(100 * time.Millisecond)
	}
	return true
}

// servesData reports whether pid is a postgres whose data directory is
// data: a postmaster runs in its data directory.
func servesData(pid int, data string) (bool, error) {
	if !procMounted() {
		return false, errNoProc
	}
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	if errors.Is(err, os.ErrPermission) {
		// Another user's process: the PostgreSQL of this data directory
		// runs as this user (or, for root, whom root may look at).
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("identify process %d named by postmaster.pid: %w", pid, err)
	}
	cwd, err := os.Readlink(fmt.Sprintf("/proc/%d/cwd", pid))
	if errors.Is(err, os.ErrPermission) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("identify process %d named by postmaster.pid: %w", pid, err)
	}
	return filepath.Base(strings.TrimSuffix(exe, " (deleted)")) == "postgres" &&
		filepath.Clean(strings.TrimSuffix(cwd, " (deleted)")) == filepath.Clean(data), nil
}

func procMounted() bool {
	_, err := os.Stat("/proc/self/stat")
	return err == nil
}

func removeIfExists(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove %s: %w", path, err)
	}
	return nil
}
