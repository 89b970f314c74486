package media_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// stuckFFmpeg is a stand-in for ffmpeg that never finishes. TestMain writes
// it before any test starts a process: an executable written while another
// goroutine forks can fail to start with "text file busy".
var stuckFFmpeg string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "mediatest-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	stuckFFmpeg = filepath.Join(dir, "ffmpeg")
	if err := os.WriteFile(stuckFFmpeg, []byte("#!/bin/sh\nexec sleep 60\n"), 0o700); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}
