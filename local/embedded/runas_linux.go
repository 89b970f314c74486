package embedded

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
)

// pgRunAs is the unprivileged user PostgreSQL runs as when the program runs
// as root: it exists on every Linux and owns nothing of its own.
const pgRunAs = "nobody"

// credential is a user PostgreSQL's processes run as; nil runs them as
// this process's own user.
type credential struct {
	name     string
	uid, gid int
}

// postgresUser is nil unless this process is root, and nobody then.
func postgresUser() (*credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup(pgRunAs)
	if err != nil {
		return nil, fmt.Errorf("the embedded PostgreSQL cannot run as root and there is no user %q to run it as: %w "+
			"(set DATABASE_URL to a PostgreSQL you run)", pgRunAs, err)
	}
	uid, err1 := strconv.Atoi(u.Uid)
	gid, err2 := strconv.Atoi(u.Gid)
	if err1 != nil || err2 != nil {
		return nil, fmt.Errorf("user %s has no numeric uid and gid", pgRunAs)
	}
	return &credential{name: pgRunAs, uid: uid, gid: gid}, nil
}

// prepare makes dir PostgreSQL's: it must own its data directory, and must
// be able to reach it.
func (c *credential) prepare(dir string) error {
	for d := filepath.Dir(dir); ; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil {
			return fmt.Errorf("embedded postgres directory: %w", err)
		}
		st := fi.Sys().(*syscall.Stat_t)
		if fi.Mode().Perm()&0o001 == 0 && int(st.Uid) != c.uid && (int(st.Gid) != c.gid || fi.Mode().Perm()&0o010 == 0) {
			return fmt.Errorf("as root, the embedded PostgreSQL runs as %s, who cannot enter %s (mode %s) on the way to %s: "+
				"set LOCAL_DATA_DIR to a folder %s can reach, for example under /tmp", c.name, d, fi.Mode().Perm(), dir, c.name)
		}
		if d == filepath.Dir(d) {
			break
		}
	}
	return filepath.WalkDir(dir, func(path string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := e.Info()
		if err != nil {
			return err
		}
		if st := fi.Sys().(*syscall.Stat_t); int(st.Uid) != c.uid || int(st.Gid) != c.gid {
			if err := os.Lchown(path, c.uid, c.gid); err != nil {
				return fmt.Errorf("give %s to %s for the embedded PostgreSQL: %w", path, c.name, err)
			}
		}
		return nil
	})
}

// switchMu keeps two do calls from interleaving their switches.
var switchMu sync.Mutex

// do runs f with the whole process switched to c (nil: as it is), so that
// the processes f starts (initdb, pg_ctl and the postgres daemon it
// leaves) run as c, then switches back to root.
//
// The library that starts PostgreSQL gives no way to set its commands'
// credentials, so the process switches instead; the saved set-user-ID
// stays 0, which is what allows switching back. Go applies these calls to
// every thread. Nothing else of the program runs yet when PostgreSQL
// starts; its stop needs no switch (root signals it).
func (c *credential) do(f func() error) (err error) {
	if c == nil {
		return f()
	}
	switchMu.Lock()
	defer switchMu.Unlock()
	groups, err := syscall.Getgroups()
	if err != nil {
		return fmt.Errorf("read supplementary groups: %w", err)
	}
	if err := syscall.Setgroups([]int{c.gid}); err != nil {
		return fmt.Errorf("switch to %s to start PostgreSQL: %w", c.name, err)
	}
	if err := syscall.Setresgid(c.gid, c.gid, 0); err != nil {
		_ = syscall.Setgroups(groups)
		return fmt.Errorf("switch to %s to start PostgreSQL: %w", c.name, err)
	}
	if err := syscall.Setresuid(c.uid, c.uid, 0); err != nil {
		_ = syscall.Setresgid(0, 0, 0)
		_ = syscall.Setgroups(groups)
		return fmt.Errorf("switch to %s to start PostgreSQL: %w", c.name, err)
	}
	defer func() {
		// Failing to become root again would leave the program as nobody
		// with root's work still to do: the start fails instead.
		if e := syscall.Setresuid(0, 0, 0); e != nil {
			err = errors.Join(err, fmt.Errorf("switch back to root after starting PostgreSQL: %w", e))
			return
		}
		if e := syscall.Setresgid(0, 0, 0); e != nil {
			err = errors.Join(err, fmt.Errorf("switch back to root's group after starting PostgreSQL: %w", e))
		}
		if e := syscall.Setgroups(groups); e != nil {
			err = errors.Join(err, fmt.Errorf("restore root's groups after starting PostgreSQL: %w", e))
		}
	}()
	return f()
}
