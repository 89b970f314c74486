//go:build !linux

package embedded

import (
	"errors"
	"os"
)

// credential is a user PostgreSQL's processes run as. Running them as
// another user is done on Linux only; elsewhere it is always nil.
type credential struct{ uid int }

// postgresUser refuses root: PostgreSQL does.
func postgresUser() (*credential, error) {
	if os.Geteuid() == 0 {
		return nil, errors.New("the embedded PostgreSQL cannot run as root (initdb refuses): run as a normal user, " +
			"or set DATABASE_URL to a PostgreSQL you run (for example: make services-up && eval \"$(make -s services-env)\")")
	}
	return nil, nil
}

func (c *credential) prepare(string) error { return nil }

func (c *credential) do(f func() error) error { return f() }
